//! The scheduler's TOML configuration: plugin definitions and profiles.
//!
//! ```toml
//! [runtime]
//! default_plugins = "wasm"          # or "native": how the built-in plugins run
//! parallelism = 1                   # threads that filter and score each cycle (1..=64)
//!
//! [plugins.NodeResourcesFit]        # configure a default plugin
//! config = { scoringStrategy = { type = "MostAllocated" } }
//!
//! [plugins.GpuModel]                # a plugin component
//! component = "gpu_model.wasm"      # relative to this file
//! sha256 = "9f2c..."                # optional pin
//! config = { annotation = "example.com/gpu-model" }
//!
//! [[profiles]]
//! scheduler_name = "default-scheduler"
//! percentage_of_nodes_to_score = 0  # 0 = kube-scheduler's adaptive default
//! filters = ["NodeUnschedulable", "TaintToleration", "GpuModel", "NodeResourcesFit"]
//! scores = [{ plugin = "NodeResourcesFit", weight = 1 }]
//! ```
//!
//! Every mistake is reported with the file, the line and what is wrong, before anything runs.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use toml::Spanned;

use crate::component::{
    sha256_hex, Limits, WasmRuntime, BUILT_IN_CALL_TIMEOUT, BUILT_IN_MEMORY_LIMIT,
};
use wasched_core::framework::{
    FailurePolicy, OnFailure, PluginSpec, PreemptionSettings, ProfileSpec,
};
use wasched_core::metrics::PluginStatsRegistry;
use wasched_core::runtime::defaults::{self, DEFAULT_FILTERS, DEFAULT_PRE_ENQUEUE, DEFAULT_SCORES};
use wasched_core::runtime::PluginFactory;

/// A configuration mistake: where it is and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file the mistake is in.
    pub file: String,
    /// Its line, when the mistake has one.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.file, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

/// How the default plugins run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum DefaultPluginRuntime {
    /// As the embedded WebAssembly components (what users' plugins run as).
    #[default]
    Wasm,
    /// Linked into the host.
    Native,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    runtime: RawRuntime,
    #[serde(default)]
    plugins: BTreeMap<String, Spanned<RawPlugin>>,
    #[serde(default)]
    profiles: Vec<Spanned<RawProfile>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawRuntime {
    #[serde(default)]
    default_plugins: DefaultPluginRuntime,
    parallelism: Option<Spanned<usize>>,
}

/// Most threads `[runtime] parallelism` may ask for: each holds its own copy of every plugin.
pub const MAX_PARALLELISM: usize = 64;

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct RawPlugin {
    /// A component file.
    component: Option<Spanned<String>>,
    /// The expected sha256 of the component.
    sha256: Option<Spanned<String>>,
    /// A default plugin under this definition's name.
    default: Option<Spanned<String>>,
    #[serde(default)]
    config: Option<toml::Table>,
    call_timeout_ms: Option<Spanned<u64>>,
    memory_limit_mib: Option<Spanned<u64>>,
    /// `fail` (default) or `ignore`.
    failure_policy: Option<OnFailure>,
    /// Consecutive failures before a quarantine (0: never).
    quarantine_after: Option<u32>,
    quarantine_seconds: Option<Spanned<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProfile {
    #[serde(default = "default_scheduler_name")]
    scheduler_name: Spanned<String>,
    percentage_of_nodes_to_score: Option<Spanned<u32>>,
    filters: Option<Vec<Spanned<String>>>,
    scores: Option<Vec<Spanned<RawScore>>>,
    pre_enqueue: Option<Vec<Spanned<String>>>,
    permit: Option<Vec<Spanned<String>>>,
    preemption: Option<Spanned<RawPreemption>>,
    /// This profile's own `config` of some plugins, in place of `[plugins.NAME] config`.
    #[serde(default)]
    plugin_config: BTreeMap<String, Spanned<toml::Table>>,
    /// Plugins listed at points they may not implement, left out of those where they do not
    /// (kube-scheduler's `multiPoint` for a plugin known only once loaded).
    #[serde(default)]
    where_implemented: Vec<Spanned<String>>,
    /// A candidate policy run beside this one on the same cycles, deciding nothing
    /// (`[profiles.shadow]`: the keys of a profile but `scheduler_name` and `shadow`).
    shadow: Option<Spanned<Box<RawProfile>>>,
}

/// `preemption = { enabled = true, ... }`: kube-scheduler's DefaultPreemption and its arguments.
#[derive(Deserialize, Clone, Copy)]
#[serde(deny_unknown_fields)]
struct RawPreemption {
    /// Absent: the default (on), so a table that only tunes the candidate counts keeps it on.
    enabled: Option<bool>,
    min_candidate_nodes_percentage: Option<u32>,
    min_candidate_nodes_absolute: Option<u32>,
}

impl RawPreemption {
    fn settings(&self) -> PreemptionSettings {
        let defaults = PreemptionSettings::default();
        PreemptionSettings {
            enabled: self.enabled.unwrap_or(defaults.enabled),
            min_candidate_nodes_percentage: self
                .min_candidate_nodes_percentage
                .unwrap_or(defaults.min_candidate_nodes_percentage),
            min_candidate_nodes_absolute: self
                .min_candidate_nodes_absolute
                .unwrap_or(defaults.min_candidate_nodes_absolute),
        }
    }
}

/// A profile's chains with kube-scheduler's defaults for the lists it leaves out; its shadow is
/// resolved by the caller.
fn resolve(profile: &RawProfile, scheduler_name: &str) -> ResolvedProfile {
    ResolvedProfile {
        scheduler_name: scheduler_name.to_string(),
        plugin_config: profile
            .plugin_config
            .iter()
            .map(|(name, table)| (name.clone(), config_json(table.get_ref())))
            .collect(),
        where_implemented: profile
            .where_implemented
            .iter()
            .map(|name| name.get_ref().clone())
            .collect(),
        preemption: profile
            .preemption
            .as_ref()
            .map_or_else(PreemptionSettings::default, |p| p.get_ref().settings()),
        percentage_of_nodes_to_score: profile
            .percentage_of_nodes_to_score
            .as_ref()
            .map(|p| *p.get_ref()),
        filters: match &profile.filters {
            Some(list) => list.clone(),
            None => DEFAULT_FILTERS
                .iter()
                .map(|n| Spanned::new(0..0, n.to_string()))
                .collect(),
        },
        scores: match &profile.scores {
            Some(list) => list
                .iter()
                .map(|s| (s.get_ref().plugin.clone(), *s.get_ref().weight.get_ref()))
                .collect(),
            None => DEFAULT_SCORES
                .iter()
                .map(|(n, w)| (Spanned::new(0..0, n.to_string()), *w))
                .collect(),
        },
        pre_enqueue: match &profile.pre_enqueue {
            Some(list) => list.clone(),
            None => DEFAULT_PRE_ENQUEUE
                .iter()
                .map(|n| Spanned::new(0..0, n.to_string()))
                .collect(),
        },
        permit: profile.permit.clone().unwrap_or_default(),
        shadow: None,
    }
}

/// A resolved profile's chains by name, each plugin with its configuration (`shared`: the
/// `[plugins.NAME] config` ones).
fn chain_of(p: ResolvedProfile, shared: &BTreeMap<String, String>) -> ProfileChain {
    ProfileChain {
        args: p
            .names()
            .filter_map(|name| {
                let name = name.get_ref();
                let own = p.plugin_config.get(name).or(shared.get(name))?;
                Some((name.clone(), own.clone()))
            })
            .collect(),
        scheduler_name: p.scheduler_name,
        percentage_of_nodes_to_score: p.percentage_of_nodes_to_score,
        filters: p.filters.into_iter().map(Spanned::into_inner).collect(),
        scores: p
            .scores
            .into_iter()
            .map(|(plugin, weight)| WeightedScore {
                plugin: plugin.into_inner(),
                weight,
            })
            .collect(),
        pre_enqueue: p.pre_enqueue.into_iter().map(Spanned::into_inner).collect(),
        permit: p.permit.into_iter().map(Spanned::into_inner).collect(),
        shadow: None,
    }
}

fn default_scheduler_name() -> Spanned<String> {
    Spanned::new(0..0, wasched_core::DEFAULT_SCHEDULER_NAME.to_string())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScore {
    plugin: Spanned<String>,
    #[serde(default = "default_weight")]
    weight: Spanned<i64>,
}

fn default_weight() -> Spanned<i64> {
    Spanned::new(0..0, 1)
}

/// A profile's chains with the defaults filled in, names still spanned for error messages.
struct ResolvedProfile {
    scheduler_name: String,
    percentage_of_nodes_to_score: Option<u32>,
    preemption: PreemptionSettings,
    filters: Vec<Spanned<String>>,
    scores: Vec<(Spanned<String>, i64)>,
    pre_enqueue: Vec<Spanned<String>>,
    permit: Vec<Spanned<String>>,
    /// The profile's own plugin configurations, as JSON by plugin name.
    plugin_config: BTreeMap<String, String>,
    /// Plugins left out of the points they do not implement instead of refused there.
    where_implemented: Vec<String>,
    /// The candidate policy run beside it (`[profiles.shadow]`), under the same scheduler name.
    shadow: Option<Box<ResolvedProfile>>,
}

impl ResolvedProfile {
    /// Every plugin the profile names, at every point, in order (a plugin may repeat).
    fn names(&self) -> impl Iterator<Item = &Spanned<String>> {
        self.filters
            .iter()
            .chain(self.scores.iter().map(|(n, _)| n))
            .chain(&self.pre_enqueue)
            .chain(&self.permit)
    }
}

/// An extension point a profile lists plugins for.
#[derive(Debug, Clone, Copy)]
enum Point {
    Filter,
    Score,
    PreEnqueue,
    Permit,
}

impl Point {
    /// The point's name in a profile, and whether `descriptor` says the plugin takes part.
    fn check(self, descriptor: &wasched_sdk::Descriptor) -> (&'static str, bool) {
        match self {
            Point::Filter => ("filter", descriptor.filter),
            Point::Score => ("score", descriptor.score),
            Point::PreEnqueue => ("pre_enqueue", descriptor.pre_enqueue),
            Point::Permit => ("permit", descriptor.permit),
        }
    }
}

/// A profile's plugin chains by name ([`Config::chains`]), as the status page shows them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProfileChain {
    /// The pods' `spec.schedulerName` the profile serves.
    pub scheduler_name: String,
    /// The profile's `percentage_of_nodes_to_score`, when set.
    pub percentage_of_nodes_to_score: Option<u32>,
    /// Filter plugins in the order they run.
    pub filters: Vec<String>,
    /// Score plugins with their weights.
    pub scores: Vec<WeightedScore>,
    /// Plugins listed for PreEnqueue.
    pub pre_enqueue: Vec<String>,
    /// Plugins listed for Permit.
    pub permit: Vec<String>,
    /// The configuration (JSON) of each plugin the profile lists that has one: the profile's own
    /// (`plugin_config`), else the plugin's `[plugins.NAME] config`.
    pub args: BTreeMap<String, String>,
    /// The candidate policy run beside the profile on the same cycles, deciding nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shadow: Option<Box<ProfileChain>>,
}

impl ProfileChain {
    /// The chains of a loaded profile: what runs, after plugins listed `where_implemented` were
    /// left out of the points they do not implement.
    pub fn of(spec: &wasched_core::framework::ProfileSpec) -> ProfileChain {
        let names = |specs: &[PluginSpec]| specs.iter().map(|p| p.name.clone()).collect();
        let every = spec
            .filters
            .iter()
            .chain(spec.scores.iter().map(|(p, _)| p));
        let every = every.chain(&spec.pre_enqueue).chain(&spec.permit);
        ProfileChain {
            scheduler_name: spec.scheduler_name.clone(),
            percentage_of_nodes_to_score: spec.percentage_of_nodes_to_score,
            filters: names(&spec.filters),
            scores: spec
                .scores
                .iter()
                .map(|(p, weight)| WeightedScore {
                    plugin: p.name.clone(),
                    weight: *weight,
                })
                .collect(),
            pre_enqueue: names(&spec.pre_enqueue),
            permit: names(&spec.permit),
            args: every
                .filter(|p| p.config != "{}")
                .map(|p| (p.name.clone(), p.config.clone()))
                .collect(),
            shadow: spec
                .shadow
                .as_deref()
                .map(|s| Box::new(ProfileChain::of(s))),
        }
    }
}

/// A score plugin of a chain with its weight.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WeightedScore {
    /// The plugin's name.
    pub plugin: String,
    /// What its normalized score is multiplied by.
    pub weight: i64,
}

/// A parsed, validated configuration. Components are loaded by [`Config::profiles`].
pub struct Config {
    file: String,
    dir: PathBuf,
    text: String,
    raw: RawConfig,
    /// How the default plugins run (may be overridden from the command line).
    pub default_plugins: DefaultPluginRuntime,
    /// Whether calls into components run under deadlines (only `bench` turns them off, to
    /// measure what they cost).
    pub deadlines: bool,
    /// Threads that filter and score each cycle, each with its own instance of every plugin
    /// (`[runtime] parallelism`; may be overridden from the command line).
    pub parallelism: usize,
    /// Largest component file a `component` path may name; a larger one is refused unread.
    pub max_component_bytes: usize,
    /// When set, a `component` path must lead (after symbolic links) into this directory:
    /// `serve --plugin-dir`, so that an admin cannot make the server read its other files.
    pub plugin_dir: Option<PathBuf>,
    /// Components uploaded to a server's plugin store, by name: a profile may use them without a
    /// `[plugins.NAME]` table, or configure them in one without `component`.
    uploaded: BTreeMap<String, Arc<Vec<u8>>>,
    /// Where plugin call times go.
    stats: Arc<PluginStatsRegistry>,
    /// What a KubeSchedulerConfiguration set that wasched reads but does not act on.
    pub warnings: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            file: "<default configuration>".into(),
            dir: PathBuf::from("."),
            text: String::new(),
            raw: RawConfig::default(),
            default_plugins: DefaultPluginRuntime::Wasm,
            deadlines: true,
            parallelism: 1,
            max_component_bytes: DEFAULT_MAX_COMPONENT_BYTES,
            plugin_dir: None,
            uploaded: BTreeMap::new(),
            stats: Arc::default(),
            warnings: Vec::new(),
        }
    }
}

/// Largest component, uploaded or named by a path, unless `serve --max-component-bytes` says
/// otherwise: Python and JavaScript components are 12-18 MB.
pub const DEFAULT_MAX_COMPONENT_BYTES: usize = 64 << 20;

/// Reads a component file named in a configuration, which may come from a remote admin: only a
/// regular file (a FIFO would hang the reader, `/dev/zero` would fill memory), at most `limit`
/// bytes (checked before reading and while reading, should the file grow).
fn read_component_file(
    path: &Path,
    limit: usize,
    plugin_dir: Option<&Path>,
) -> Result<Vec<u8>, String> {
    use std::io::Read as _;
    let path = match plugin_dir {
        None => path.to_path_buf(),
        Some(dir) => confined(path, dir)?,
    };
    let file = std::fs::File::open(&path).map_err(|e| format!("cannot read: {e}"))?;
    let metadata = file.metadata().map_err(|e| format!("cannot read: {e}"))?;
    if !metadata.is_file() {
        return Err("not a regular file".to_string());
    }
    let too_large = || format!("larger than the {limit} bytes a component may have");
    if metadata.len() > limit as u64 {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(metadata.len() as usize);
    file.take(limit as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() > limit {
        return Err(too_large());
    }
    Ok(bytes)
}

/// `path` with every symbolic link resolved, if that lies inside `dir`: the file then opened is
/// the one checked, not one a link swapped in between.
fn confined(path: &Path, dir: &Path) -> Result<PathBuf, String> {
    let outside = || format!("outside the plugin directory {}", dir.display());
    let dir = dir
        .canonicalize()
        .map_err(|e| format!("the plugin directory {}: {e}", dir.display()))?;
    let resolved = path.canonicalize().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!("cannot read: {e}"),
        _ => outside(),
    })?;
    if resolved.starts_with(&dir) {
        Ok(resolved)
    } else {
        Err(outside())
    }
}

/// Refuses `bytes` when the configuration pins another sha256; `what` says where they came from.
fn check_pin(
    name: &str,
    what: &str,
    bytes: &[u8],
    pin: Option<&Spanned<String>>,
) -> Result<(), (std::ops::Range<usize>, String)> {
    let Some(pin) = pin else { return Ok(()) };
    let actual = sha256_hex(bytes);
    if actual.eq_ignore_ascii_case(pin.get_ref()) {
        return Ok(());
    }
    Err((
        pin.span(),
        format!(
            "plugin {name}: {what} has sha256 {actual}, but the config pins {}",
            pin.get_ref()
        ),
    ))
}

/// The configuration in force when none is given, as TOML that [`Config::parse`] reads back to
/// the same profile: what `config show` prints, so that a user can start from it.
pub fn default_text() -> String {
    let filters: Vec<String> = DEFAULT_FILTERS.iter().map(|f| format!("{f:?}")).collect();
    let pre_enqueue: Vec<String> = DEFAULT_PRE_ENQUEUE
        .iter()
        .map(|p| format!("{p:?}"))
        .collect();
    let scores: Vec<String> = DEFAULT_SCORES
        .iter()
        .map(|(plugin, weight)| format!("  {{ plugin = {plugin:?}, weight = {weight} }},"))
        .collect();
    format!(
        "# The default configuration: kube-scheduler's default profile with the embedded plugins.\n\
         [[profiles]]\n\
         scheduler_name = {:?}\n\
         pre_enqueue = [{}]\n\
         filters = [{}]\n\
         scores = [\n{}\n]\n",
        wasched_core::DEFAULT_SCHEDULER_NAME,
        pre_enqueue.join(", "),
        filters.join(", "),
        scores.join("\n")
    )
}

impl Config {
    /// Reads and checks a configuration file.
    ///
    /// # Errors
    /// The file cannot be read, is not valid TOML, or has an unknown key or a bad value.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: file.clone(),
            line: None,
            message: format!("cannot read: {e}"),
        })?;
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Config::parse(&file, &dir, text)
    }

    /// Parses configuration text; `file` names it in errors and `dir` anchors component paths.
    ///
    /// # Errors
    /// As [`Config::load`].
    pub fn parse(file: &str, dir: &Path, text: String) -> Result<Config, ConfigError> {
        Self::parse_with(file, dir, text, BTreeMap::new(), Arc::default())
    }

    /// As [`Config::parse`], for a server: plugins may also come from its plugin store
    /// (`uploaded`), and call times are recorded in the server's `stats`.
    ///
    /// # Errors
    /// As [`Config::load`].
    pub fn parse_with(
        file: &str,
        dir: &Path,
        text: String,
        uploaded: BTreeMap<String, Arc<Vec<u8>>>,
        stats: Arc<PluginStatsRegistry>,
    ) -> Result<Config, ConfigError> {
        let (file, text, warnings) = Self::as_toml(file, text)?;
        let file = file.as_str();
        let raw: RawConfig = toml::from_str(&text).map_err(|e| ConfigError {
            file: file.to_string(),
            line: e
                .span()
                .map(|s| wasched_core::util::line_of(&text, s.start)),
            message: e.message().trim().to_string(),
        })?;
        let config = Config {
            file: file.to_string(),
            dir: dir.to_path_buf(),
            default_plugins: raw.runtime.default_plugins,
            deadlines: true,
            parallelism: raw.runtime.parallelism.as_ref().map_or(1, |p| *p.get_ref()),
            max_component_bytes: DEFAULT_MAX_COMPONENT_BYTES,
            plugin_dir: None,
            text,
            raw,
            uploaded,
            stats,
            warnings,
        };
        config.check()?;
        Ok(config)
    }

    /// The configuration's TOML: `text` itself, or the TOML a KubeSchedulerConfiguration amounts
    /// to ([`crate::kube_config`]), with the file name then saying so (later errors give the
    /// converted text's lines: `wasched config convert` prints it) and what it warned about.
    fn as_toml(file: &str, text: String) -> Result<(String, String, Vec<String>), ConfigError> {
        if !crate::kube_config::is_kube_scheduler_configuration(&text) {
            return Ok((file.to_string(), text, Vec::new()));
        }
        let converted = crate::kube_config::to_toml(&text).map_err(|e| ConfigError {
            file: file.to_string(),
            line: e.line,
            message: e.message,
        })?;
        for warning in &converted.warnings {
            tracing::warn!(file, "{warning}");
        }
        Ok((
            format!("{file} (as TOML)"),
            converted.toml,
            converted.warnings,
        ))
    }

    fn error(&self, span: std::ops::Range<usize>, message: impl Into<String>) -> ConfigError {
        ConfigError {
            file: self.file.clone(),
            line: (span != (0..0)).then(|| wasched_core::util::line_of(&self.text, span.start)),
            message: message.into(),
        }
    }

    /// Checks what can be checked without loading components.
    fn check(&self) -> Result<(), ConfigError> {
        if let Some(parallelism) = &self.raw.runtime.parallelism {
            self.check_range(parallelism, 1..=MAX_PARALLELISM, || {
                format!("parallelism must be in 1..={MAX_PARALLELISM}")
            })?;
        }
        for (name, plugin) in &self.raw.plugins {
            self.check_plugin(name, plugin)?;
        }
        let mut seen_names: Vec<&str> = Vec::new();
        for profile in &self.raw.profiles {
            let scheduler_name = profile.get_ref().scheduler_name.get_ref();
            if seen_names.contains(&scheduler_name.as_str()) {
                return Err(self.error(
                    profile.get_ref().scheduler_name.span(),
                    format!("two profiles have scheduler_name {scheduler_name:?}"),
                ));
            }
            seen_names.push(scheduler_name);
            self.check_profile(profile.get_ref())?;
            if let Some(shadow) = &profile.get_ref().shadow {
                self.check_shadow(scheduler_name, shadow)?;
            }
        }
        Ok(())
    }

    /// A shadow is a profile of its own but serves no pods: it takes its profile's scheduler
    /// name and has no shadow itself.
    fn check_shadow(
        &self,
        scheduler_name: &str,
        shadow: &Spanned<Box<RawProfile>>,
    ) -> Result<(), ConfigError> {
        let s = shadow.get_ref();
        if s.scheduler_name.span() != (0..0) {
            return Err(self.error(
                s.scheduler_name.span(),
                format!(
                    "the shadow of profile {scheduler_name:?} has no scheduler_name: it runs on the pods of its profile"
                ),
            ));
        }
        if let Some(nested) = &s.shadow {
            return Err(self.error(
                nested.span(),
                format!("the shadow of profile {scheduler_name:?} cannot have a shadow"),
            ));
        }
        self.check_profile(s)
    }

    /// Refuses `value` outside `range`, with `message` at its line.
    fn check_range<T: PartialOrd>(
        &self,
        value: &Spanned<T>,
        range: std::ops::RangeInclusive<T>,
        message: impl FnOnce() -> String,
    ) -> Result<(), ConfigError> {
        if range.contains(value.get_ref()) {
            Ok(())
        } else {
            Err(self.error(value.span(), message()))
        }
    }

    /// Checks one `[plugins.NAME]` table: where its code comes from, and its limits.
    fn check_plugin(&self, name: &str, plugin: &Spanned<RawPlugin>) -> Result<(), ConfigError> {
        let p = plugin.get_ref();
        match (&p.component, &p.default) {
            (Some(_), Some(d)) => {
                return Err(self.error(
                    d.span(),
                    format!("plugin {name}: set either `component` or `default`, not both"),
                ))
            }
            (None, Some(d)) if defaults::find(d.get_ref()).is_none() => {
                return Err(self.error(
                    d.span(),
                    format!(
                        "plugin {name}: {:?} is not a default plugin (default plugins: {})",
                        d.get_ref(),
                        default_names()
                    ),
                ))
            }
            (None, None) if defaults::find(name).is_none() && !self.uploaded.contains_key(name) => {
                return Err(self.error(
                    plugin.span(),
                    format!(
                        "plugin {name}: not a default plugin{}, so it needs `component = \"file.wasm\"` \
                         (or `default = \"<default plugin>\"`)",
                        self.uploaded_hint()
                    ),
                ))
            }
            _ => {}
        }
        if let Some(sha) = &p.sha256 {
            if p.component.is_none() && !self.uploaded.contains_key(name) {
                return Err(self.error(
                    sha.span(),
                    format!("plugin {name}: `sha256` only applies to a component"),
                ));
            }
            let valid =
                sha.get_ref().len() == 64 && sha.get_ref().bytes().all(|b| b.is_ascii_hexdigit());
            if !valid {
                return Err(self.error(
                    sha.span(),
                    format!("plugin {name}: sha256 must be 64 hex digits"),
                ));
            }
        }
        if let Some(timeout) = &p.call_timeout_ms {
            self.check_range(timeout, 0..=60_000, || {
                format!("plugin {name}: call_timeout_ms must be in 0..=60000 (0: no deadline)")
            })?;
        }
        if let Some(seconds) = &p.quarantine_seconds {
            self.check_range(seconds, 1..=86_400, || {
                format!("plugin {name}: quarantine_seconds must be in 1..=86400")
            })?;
        }
        if let Some(memory) = &p.memory_limit_mib {
            self.check_range(memory, 1..=4096, || {
                format!("plugin {name}: memory_limit_mib must be in 1..=4096")
            })?;
        }
        Ok(())
    }

    /// Checks one profile's numbers and that every plugin it names is known.
    fn check_profile(&self, p: &RawProfile) -> Result<(), ConfigError> {
        if let Some(pct) = &p.percentage_of_nodes_to_score {
            self.check_range(pct, 0..=100, || {
                "percentage_of_nodes_to_score must be in 0..=100".into()
            })?;
        }
        if let Some(preemption) = &p.preemption {
            let settings = preemption.get_ref().settings();
            if settings.min_candidate_nodes_percentage > 100 {
                return Err(self.error(
                    preemption.span(),
                    "min_candidate_nodes_percentage must be in 0..=100",
                ));
            }
            if settings.min_candidate_nodes_percentage == 0
                && settings.min_candidate_nodes_absolute == 0
            {
                return Err(self.error(
                    preemption.span(),
                    "min_candidate_nodes_percentage and min_candidate_nodes_absolute cannot both be 0",
                ));
            }
        }
        for (name, table) in &p.plugin_config {
            self.check_known(&Spanned::new(table.span(), name.clone()))?;
        }
        for name in &p.where_implemented {
            self.check_known(name)?;
        }
        for name in p.filters.iter().flatten() {
            self.check_known(name)?;
        }
        for score in p.scores.iter().flatten() {
            let s = score.get_ref();
            self.check_known(&s.plugin)?;
            self.check_range(&s.weight, 1..=100, || {
                format!(
                    "weight of {} is {}, must be in 1..=100",
                    s.plugin.get_ref(),
                    s.weight.get_ref()
                )
            })?;
        }
        Ok(())
    }

    fn check_known(&self, name: &Spanned<String>) -> Result<(), ConfigError> {
        let n = name.get_ref();
        if self.raw.plugins.contains_key(n)
            || defaults::find(n).is_some()
            || self.uploaded.contains_key(n)
        {
            return Ok(());
        }
        let defined: Vec<&str> = self.raw.plugins.keys().map(String::as_str).collect();
        Err(self.error(
            name.span(),
            format!(
                "unknown plugin {n:?} (defined here: [{}]; default plugins: {}{})",
                defined.join(", "),
                default_names(),
                self.uploaded_hint()
            ),
        ))
    }

    /// `; uploaded: a, b` when plugins come from a plugin store, for error messages.
    fn uploaded_hint(&self) -> String {
        if self.uploaded.is_empty() {
            return String::new();
        }
        let names: Vec<&str> = self.uploaded.keys().map(String::as_str).collect();
        format!("; uploaded: {}", names.join(", "))
    }

    /// Each configured plugin's `config`, as the JSON its `init` receives.
    pub fn plugin_configs(&self) -> BTreeMap<String, String> {
        self.raw
            .plugins
            .iter()
            .filter_map(|(name, plugin)| {
                let config = plugin.get_ref().config.as_ref()?;
                Some((name.clone(), serde_json::to_string(config).ok()?))
            })
            .collect()
    }

    /// The configuration text (TOML; for a KubeSchedulerConfiguration, the TOML it amounts to).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Where the call times of this configuration's plugin instances are recorded.
    pub fn stats(&self) -> &Arc<PluginStatsRegistry> {
        &self.stats
    }

    /// Each profile's filter and score chains as configured, the defaults filled in: what
    /// [`Config::profiles`] builds, without loading a plugin.
    fn resolved(&self) -> Vec<ResolvedProfile> {
        let default_profile = RawProfile {
            scheduler_name: default_scheduler_name(),
            percentage_of_nodes_to_score: None,
            filters: None,
            scores: None,
            pre_enqueue: None,
            permit: None,
            preemption: None,
            plugin_config: BTreeMap::new(),
            where_implemented: Vec::new(),
            shadow: None,
        };
        let profiles: Vec<&RawProfile> = if self.raw.profiles.is_empty() {
            vec![&default_profile]
        } else {
            self.raw.profiles.iter().map(Spanned::get_ref).collect()
        };
        profiles
            .into_iter()
            .map(|profile| {
                let mut resolved = resolve(profile, profile.scheduler_name.get_ref());
                resolved.shadow = profile.shadow.as_ref().map(|shadow| {
                    Box::new(resolve(shadow.get_ref(), profile.scheduler_name.get_ref()))
                });
                resolved
            })
            .collect()
    }

    /// Which profiles (by scheduler name) use each plugin, default plugins included.
    pub fn usage(&self) -> BTreeMap<String, Vec<String>> {
        let mut usage: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for profile in self.resolved() {
            let shadow = profile.shadow.as_deref();
            let shadow_names = shadow.into_iter().flat_map(|s| s.names());
            let named = profile
                .names()
                .map(|n| (n, profile.scheduler_name.clone()))
                .chain(shadow_names.map(|n| (n, format!("{} (shadow)", profile.scheduler_name))));
            for (name, user) in named {
                let profiles = usage.entry(name.get_ref().clone()).or_default();
                if !profiles.contains(&user) {
                    profiles.push(user);
                }
            }
        }
        usage
    }

    /// Each profile's plugin chains by name, with the score weights.
    pub fn chains(&self) -> Vec<ProfileChain> {
        let shared = self.plugin_configs();
        self.resolved()
            .into_iter()
            .map(|mut p| {
                let shadow = p.shadow.take();
                let mut chain = chain_of(p, &shared);
                chain.shadow = shadow.map(|s| Box::new(chain_of(*s, &shared)));
                chain
            })
            .collect()
    }

    /// Loads every plugin the profiles use and builds the profiles. Without profiles in the file,
    /// one profile for `default-scheduler` with kube-scheduler's default plugins and weights.
    ///
    /// # Errors
    /// A component that is missing, does not match its pin, is not a plugin, or refuses its
    /// configuration; a plugin used for an extension point it does not implement.
    pub fn profiles(&self) -> Result<Vec<ProfileSpec>, ConfigError> {
        let mut loaded: BTreeMap<String, PluginSpec> = BTreeMap::new();
        let mut specs = Vec::new();
        for profile in self.resolved() {
            let mut spec = self.spec(&mut loaded, &profile)?;
            if let Some(shadow) = &profile.shadow {
                spec.shadow = Some(Box::new(self.spec(&mut loaded, shadow)?));
            }
            specs.push(spec);
        }
        Ok(specs)
    }

    /// Builds one resolved profile's spec, loading the plugins `loaded` does not hold yet.
    fn spec(
        &self,
        loaded: &mut BTreeMap<String, PluginSpec>,
        profile: &ResolvedProfile,
    ) -> Result<ProfileSpec, ConfigError> {
        let mut spec = ProfileSpec {
            scheduler_name: profile.scheduler_name.clone(),
            filters: Vec::new(),
            scores: Vec::new(),
            pre_enqueue: Vec::new(),
            permit: Vec::new(),
            percentage_of_nodes_to_score: profile.percentage_of_nodes_to_score,
            parallelism: self.parallelism,
            preemption: profile.preemption,
            shadow: None,
        };
        let mut plugin = |name: &Spanned<String>, point| self.plugin(loaded, name, point, profile);
        for name in &profile.filters {
            spec.filters.extend(plugin(name, Point::Filter)?);
        }
        for (name, weight) in &profile.scores {
            let scores = plugin(name, Point::Score)?.map(|p| (p, *weight));
            spec.scores.extend(scores);
        }
        for name in &profile.pre_enqueue {
            spec.pre_enqueue.extend(plugin(name, Point::PreEnqueue)?);
        }
        for name in &profile.permit {
            spec.permit.extend(plugin(name, Point::Permit)?);
        }
        Ok(spec)
    }

    /// Loads (once) the plugin called `name`, with the profile's own configuration of it if
    /// it has one, and checks it implements `point`: `None` for a plugin the profile lists
    /// `where_implemented` that does not.
    fn plugin(
        &self,
        loaded: &mut BTreeMap<String, PluginSpec>,
        name: &Spanned<String>,
        point: Point,
        profile: &ResolvedProfile,
    ) -> Result<Option<PluginSpec>, ConfigError> {
        let n = name.get_ref();
        if !loaded.contains_key(n) {
            let spec = self.load_plugin(n)?;
            loaded.insert(n.clone(), spec);
        }
        let mut spec = loaded[n].clone();
        if let Some(config) = profile.plugin_config.get(n) {
            spec.config.clone_from(config);
        }
        // One throw-away instance validates the configuration and tells what the plugin does.
        let instance = spec
            .factory
            .instantiate(&spec.config)
            .map_err(|e| self.error(self.definition_span(n, name), e.0))?;
        let (point, implements) = point.check(instance.descriptor());
        if !implements {
            if profile.where_implemented.contains(n) {
                return Ok(None);
            }
            return Err(self.error(
                name.span(),
                format!("plugin {n} is listed as a {point} plugin but does not implement {point}"),
            ));
        }
        Ok(Some(spec))
    }

    fn definition_span(&self, name: &str, usage: &Spanned<String>) -> std::ops::Range<usize> {
        self.raw
            .plugins
            .get(name)
            .map(Spanned::span)
            .unwrap_or_else(|| usage.span())
    }

    /// A plugin's call deadline and memory limit, and whether its calls are timed at all (a
    /// `call_timeout_ms` of 0 runs it without epoch checks, which cost 12-16% of a WASM cycle).
    fn limits(&self, raw: Option<&RawPlugin>) -> (Limits, bool) {
        let mut limits = Limits::default();
        let timeout_ms = raw
            .and_then(|r| r.call_timeout_ms.as_ref())
            .map(|t| *t.get_ref());
        let deadlines = self.deadlines && timeout_ms != Some(0);
        if let Some(ms) = timeout_ms.filter(|&ms| ms != 0) {
            limits.call_timeout = std::time::Duration::from_millis(ms);
        }
        if let Some(m) = raw.and_then(|r| r.memory_limit_mib.as_ref()) {
            limits.memory = (*m.get_ref() as usize) << 20;
        }
        (limits, deadlines)
    }

    fn load_plugin(&self, name: &str) -> Result<PluginSpec, ConfigError> {
        let definition = self.raw.plugins.get(name);
        let raw = definition.map(|d| d.get_ref().clone());
        let config_json = raw
            .as_ref()
            .and_then(|r| r.config.as_ref())
            .map_or_else(|| "{}".to_string(), config_json);
        let policy = raw
            .as_ref()
            .map_or_else(FailurePolicy::default, failure_policy);
        let (mut limits, deadlines) = self.limits(raw.as_ref());
        let uploaded = self.uploaded.get(name).filter(|_| {
            raw.as_ref()
                .is_none_or(|r| r.component.is_none() && r.default.is_none())
        });
        let mut idle_when = None;
        let factory: Arc<dyn PluginFactory> = match raw.as_ref().and_then(|r| r.component.clone()) {
            None if uploaded.is_some() => {
                let bytes = uploaded.expect("checked by the guard");
                let pin = raw.as_ref().and_then(|r| r.sha256.as_ref());
                check_pin(name, "the uploaded component", bytes, pin)
                    .map_err(|(span, message)| self.error(span, message))?;
                let span = definition.map(Spanned::span).unwrap_or(0..0);
                let factory = WasmRuntime::shared_with(deadlines)
                    .load(name, bytes, limits)
                    .map_err(|e| self.error(span, e.0))?;
                Arc::new(factory)
            }
            Some(component) => {
                let path = self.dir.join(component.get_ref());
                let bytes = read_component_file(
                    &path,
                    self.max_component_bytes,
                    self.plugin_dir.as_deref(),
                )
                .map_err(|why| {
                    self.error(
                        component.span(),
                        format!("plugin {name}: {}: {why}", path.display()),
                    )
                })?;
                let pin = raw.as_ref().and_then(|r| r.sha256.as_ref());
                check_pin(name, &path.display().to_string(), &bytes, pin)
                    .map_err(|(span, message)| self.error(span, message))?;
                let factory = WasmRuntime::shared_with(deadlines)
                    .load(name, &bytes, limits)
                    .map_err(|e| self.error(component.span(), e.0))?;
                Arc::new(factory)
            }
            None => {
                let default_name = raw
                    .as_ref()
                    .and_then(|r| r.default.as_ref().map(|d| d.get_ref().clone()))
                    .unwrap_or_else(|| name.to_string());
                let plugin = defaults::find(&default_name).expect("checked when parsing");
                if raw.as_ref().is_none_or(|r| r.call_timeout_ms.is_none()) {
                    limits.call_timeout = BUILT_IN_CALL_TIMEOUT;
                }
                if raw.as_ref().is_none_or(|r| r.memory_limit_mib.is_none()) {
                    limits.memory = BUILT_IN_MEMORY_LIMIT;
                }
                idle_when = plugin.idle_when;
                default_factory_with(plugin, self.default_plugins, limits, deadlines)
                    .map_err(|e| self.error(definition.map(Spanned::span).unwrap_or(0..0), e))?
            }
        };
        Ok(PluginSpec {
            name: name.to_string(),
            factory,
            config: config_json,
            policy,
            stats: self.stats.get(name),
            idle_when,
        })
    }
}

/// A plugin's `config` table as the JSON its `init` receives.
fn config_json(table: &toml::Table) -> String {
    serde_json::to_string(table).expect("TOML values are JSON-representable")
}

/// What a plugin's failures do, from its table.
fn failure_policy(raw: &RawPlugin) -> FailurePolicy {
    let mut policy = FailurePolicy {
        on_failure: raw.failure_policy.unwrap_or_default(),
        ..FailurePolicy::default()
    };
    policy.quarantine_after = raw.quarantine_after.unwrap_or(policy.quarantine_after);
    if let Some(seconds) = &raw.quarantine_seconds {
        policy.quarantine_for = std::time::Duration::from_secs(*seconds.get_ref());
    }
    policy
}

/// The factory of a default plugin in the chosen runtime.
///
/// # Errors
/// The embedded component failed to load (a build problem).
pub fn default_factory(
    plugin: &defaults::DefaultPlugin,
    runtime: DefaultPluginRuntime,
    limits: Limits,
) -> Result<Arc<dyn PluginFactory>, String> {
    default_factory_with(plugin, runtime, limits, true)
}

fn default_factory_with(
    plugin: &defaults::DefaultPlugin,
    runtime: DefaultPluginRuntime,
    limits: Limits,
    deadlines: bool,
) -> Result<Arc<dyn PluginFactory>, String> {
    Ok(match runtime {
        DefaultPluginRuntime::Native => Arc::from((plugin.native)()),
        DefaultPluginRuntime::Wasm => Arc::new(
            WasmRuntime::shared_with(deadlines)
                .load(plugin.name, crate::embedded::component(plugin), limits)
                .map_err(|e| e.0)?,
        ),
    })
}

fn default_names() -> String {
    defaults::DEFAULT_PLUGINS
        .iter()
        .map(|p| p.name)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse("test.toml", Path::new("."), text.to_string())
    }

    #[test]
    fn a_preemption_table_without_enabled_keeps_the_default_on() {
        let settings = |text: &str| {
            toml::from_str::<RawPreemption>(text)
                .expect("a preemption table")
                .settings()
        };
        let tuned = settings("min_candidate_nodes_absolute = 5");
        assert!(tuned.enabled);
        assert_eq!(tuned.min_candidate_nodes_absolute, 5);
        assert_eq!(tuned.min_candidate_nodes_percentage, 10);
        assert!(!settings("enabled = false").enabled);
    }

    #[test]
    fn mistakes_are_reported_with_their_line() {
        let cases: &[(&str, &str, usize, &str)] = &[
            (
                "unknown plugin in a profile",
                "[[profiles]]\nfilters = [\n  \"NodeName\",\n  \"Nope\",\n]\n",
                4,
                "unknown plugin \"Nope\"",
            ),
            (
                "weight out of range",
                "[[profiles]]\nscores = [\n  { plugin = \"NodeAffinity\", weight = 500 },\n]\n",
                3,
                "must be in 1..=100",
            ),
            (
                "unknown key",
                "[runtime]\nspeed = 3\n",
                2,
                "unknown field `speed`",
            ),
            ("bad TOML", "[[profiles]\n", 1, ""),
            (
                "custom plugin without component",
                "\n[plugins.Mine]\nconfig = {}\n",
                2,
                "needs `component",
            ),
            (
                "duplicate profile",
                "[[profiles]]\nscheduler_name = \"a\"\n[[profiles]]\nscheduler_name = \"a\"\n",
                4,
                "two profiles",
            ),
            (
                "bad pin",
                "[plugins.X]\ncomponent = \"x.wasm\"\nsha256 = \"abc\"\n",
                3,
                "64 hex digits",
            ),
        ];
        for (name, text, line, message) in cases {
            let Err(error) = parse(text) else {
                panic!("{name}: accepted");
            };
            assert_eq!(error.line, Some(*line), "{name}: {error}");
            assert!(error.message.contains(message), "{name}: {error}");
            assert!(
                error.to_string().starts_with("test.toml:"),
                "{name}: {error}"
            );
        }
    }

    #[test]
    fn a_missing_component_file_names_the_line() {
        let config = parse(
            "[plugins.X]\ncomponent = \"does-not-exist.wasm\"\n\n[[profiles]]\nfilters = [\"X\"]\n",
        )
        .unwrap();
        let Err(error) = config.profiles() else {
            panic!("a missing component was accepted");
        };
        assert_eq!(error.line, Some(2), "{error}");
        assert!(error.message.contains("cannot read"), "{error}");
    }

    #[test]
    fn a_plugin_refusing_its_config_names_its_definition() {
        let config = parse(
            "[runtime]\ndefault_plugins = \"native\"\n[plugins.NodeResourcesFit]\nconfig = { scoringStrategy = { type = \"Best\" } }\n",
        )
        .unwrap();
        let Err(error) = config.profiles() else {
            panic!("a bad plugin config was accepted");
        };
        assert_eq!(error.line, Some(3), "{error}");
        assert!(error.message.contains("\"Best\""), "{error}");
    }

    #[test]
    fn a_score_only_plugin_cannot_filter() {
        let config = parse(
            "[runtime]\ndefault_plugins = \"native\"\n[[profiles]]\nfilters = [\"NodeResourcesBalancedAllocation\"]\n",
        )
        .unwrap();
        let error = config.profiles().err().expect("refused");
        assert!(
            error.message.contains("does not implement filter"),
            "{error}"
        );
        assert_eq!(error.line, Some(4));
    }

    #[test]
    fn a_plugin_listed_where_implemented_is_left_out_of_the_points_it_lacks() {
        let profile = "[runtime]\ndefault_plugins = \"native\"\n[[profiles]]\n\
            filters = [\"NodeName\", \"NodeResourcesBalancedAllocation\"]\n\
            scores = [{ plugin = \"NodeName\", weight = 4 }, \
            { plugin = \"NodeResourcesBalancedAllocation\", weight = 4 }]\n\
            permit = [\"NodeName\"]\n";
        let config = parse(&format!(
            "{profile}where_implemented = [\"NodeName\", \"NodeResourcesBalancedAllocation\"]\n"
        ))
        .unwrap();
        let chain = ProfileChain::of(&config.profiles().unwrap()[0]);
        assert_eq!(chain.filters, ["NodeName"]);
        assert_eq!(chain.scores.len(), 1);
        assert_eq!(chain.scores[0].plugin, "NodeResourcesBalancedAllocation");
        assert_eq!(chain.scores[0].weight, 4);
        assert!(chain.permit.is_empty());
        let refused = parse(profile).unwrap().profiles().err().expect("refused");
        assert!(
            refused.message.contains("does not implement filter"),
            "{refused}"
        );
        let unknown = parse(&format!("{profile}where_implemented = [\"Nope\"]\n"));
        assert!(unknown
            .err()
            .expect("refused")
            .message
            .contains("unknown plugin"));
    }

    #[test]
    fn no_profiles_means_the_kube_scheduler_defaults() {
        let config = parse("[runtime]\ndefault_plugins = \"native\"\n").unwrap();
        let profiles = config.profiles().unwrap();
        assert_eq!(profiles.len(), 1);
        let p = &profiles[0];
        assert_eq!(p.scheduler_name, "default-scheduler");
        let filters: Vec<&str> = p.filters.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(filters, DEFAULT_FILTERS);
        let scores: Vec<(&str, i64)> = p
            .scores
            .iter()
            .map(|(s, w)| (s.name.as_str(), *w))
            .collect();
        assert_eq!(scores, DEFAULT_SCORES);
    }

    #[test]
    fn the_default_text_reads_back_as_the_default_profile() {
        let config = parse(&format!(
            "{}[runtime]\ndefault_plugins = \"native\"\n",
            default_text()
        ))
        .unwrap();
        let written = config.profiles().unwrap();
        let implicit = parse("[runtime]\ndefault_plugins = \"native\"\n")
            .unwrap()
            .profiles()
            .unwrap();
        let shape = |profiles: &[wasched_core::framework::ProfileSpec]| -> Vec<String> {
            profiles
                .iter()
                .map(|p| {
                    let filters: Vec<&str> = p.filters.iter().map(|f| f.name.as_str()).collect();
                    let scores: Vec<(&str, i64)> = p
                        .scores
                        .iter()
                        .map(|(s, w)| (s.name.as_str(), *w))
                        .collect();
                    format!("{} {filters:?} {scores:?}", p.scheduler_name)
                })
                .collect()
        };
        assert_eq!(shape(&written), shape(&implicit));
    }

    /// The identity (component, limits, deadlines) of the first filter of a configuration's
    /// first profile.
    fn identity(text: &str) -> String {
        let profiles = parse(text).unwrap().profiles().unwrap();
        profiles[0].filters[0].factory.identity()
    }

    #[test]
    fn default_plugins_get_the_built_in_deadline_unless_configured_or_turned_off() {
        let built_in = identity("[[profiles]]\nfilters = [\"NodeName\"]\nscores = []\n");
        assert!(built_in.contains("call_timeout: 1s"), "{built_in}");
        let configured = identity(
            "[plugins.NodeName]\ncall_timeout_ms = 30\n[[profiles]]\nfilters = [\"NodeName\"]\nscores = []\n",
        );
        assert!(configured.contains("call_timeout: 30ms"), "{configured}");
        assert!(configured.contains("deadlines=true"), "{configured}");
        let unguarded = identity(
            "[plugins.NodeName]\ncall_timeout_ms = 0\n[[profiles]]\nfilters = [\"NodeName\"]\nscores = []\n",
        );
        assert!(unguarded.contains("deadlines=false"), "{unguarded}");
        let refused = parse(
            "[plugins.NodeName]\ncall_timeout_ms = 60001\n[[profiles]]\nfilters = [\"NodeName\"]\nscores = []\n",
        )
        .err()
        .expect("refused")
        .to_string();
        assert!(refused.contains("0..=60000 (0: no deadline)"), "{refused}");
    }

    #[test]
    fn default_plugins_get_the_built_in_memory_limit_unless_configured() {
        let built_in = identity("[[profiles]]\nfilters = [\"NodeName\"]\nscores = []\n");
        assert!(
            built_in.contains(&format!("memory: {BUILT_IN_MEMORY_LIMIT}")),
            "{built_in}"
        );
        let configured = identity(
            "[plugins.NodeName]\nmemory_limit_mib = 64\n[[profiles]]\nfilters = [\"NodeName\"]\nscores = []\n",
        );
        assert!(
            configured.contains(&format!("memory: {}", 64 << 20)),
            "{configured}"
        );
    }

    #[test]
    fn a_component_path_must_name_a_regular_file_within_the_size_limit() {
        let dir = std::env::temp_dir().join(format!("wasched-config-paths-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let small = dir.join("small.wasm");
        std::fs::write(&small, b"\0asm\x0d\0\x01\0").unwrap();
        assert_eq!(read_component_file(&small, 8, None).unwrap().len(), 8);
        assert_eq!(
            read_component_file(&small, 7, None).unwrap_err(),
            "larger than the 7 bytes a component may have"
        );
        assert_eq!(
            read_component_file(&dir, 1 << 20, None).unwrap_err(),
            "not a regular file"
        );
        assert_eq!(
            read_component_file(Path::new("/dev/zero"), 1 << 20, None).unwrap_err(),
            "not a regular file",
            "a device is never read"
        );
        let secret = dir.join("secret.toml");
        std::fs::write(&secret, "password = \"hunter2\"\n").unwrap();
        let toml = format!(
            "[plugins.Leak]\ncomponent = {:?}\n[[profiles]]\nfilters = [\"Leak\"]\nscores = []\n",
            secret.display().to_string()
        );
        let error = parse(&toml).unwrap().profiles().err().expect("refused");
        assert!(!error.message.contains("hunter2"), "{error}");
        assert!(
            !error.message.contains("0x70"),
            "no byte of the file either: {error}"
        );
    }

    #[test]
    fn a_plugin_directory_confines_component_paths_through_links() {
        let root = std::env::temp_dir().join(format!("wasched-plugin-dir-{}", std::process::id()));
        let plugins = root.join("plugins");
        std::fs::create_dir_all(&plugins).unwrap();
        let inside = plugins.join("ok.wasm");
        std::fs::write(&inside, b"\0asm\x0d\0\x01\0").unwrap();
        let outside = root.join("elsewhere.wasm");
        std::fs::write(&outside, b"\0asm\x0d\0\x01\0").unwrap();
        let link = plugins.join("link.wasm");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&outside, &link).unwrap();

        let read = |path: &Path| read_component_file(path, 1 << 20, Some(&plugins));
        assert_eq!(read(&inside).unwrap().len(), 8);
        assert_eq!(read(&plugins.join("../plugins/ok.wasm")).unwrap().len(), 8);
        let refused = format!("outside the plugin directory {}", plugins.display());
        assert_eq!(read(&outside).unwrap_err(), refused);
        assert_eq!(
            read(&plugins.join("../elsewhere.wasm")).unwrap_err(),
            refused
        );
        assert_eq!(
            read(&link).unwrap_err(),
            refused,
            "a link out is followed, then refused"
        );
        assert_eq!(read_component_file(&link, 1 << 20, None).unwrap().len(), 8);
        assert!(read(&plugins.join("missing.wasm"))
            .unwrap_err()
            .starts_with("cannot read"));

        let mut config = parse(&format!(
            "[plugins.Far]\ncomponent = {:?}\n[[profiles]]\nfilters = [\"Far\"]\nscores = []\n",
            outside.display().to_string()
        ))
        .unwrap();
        config.plugin_dir = Some(plugins.clone());
        let error = config.profiles().err().expect("refused");
        assert!(error.message.contains(&refused), "{error}");
        assert_eq!(error.line, Some(2), "the `component` line is named");
    }

    fn config_fragment() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::strategy::Strategy;
        let pieces = vec![
            "[[profiles]]\n",
            "[runtime]\n",
            "[plugins.X]\n",
            "filters = [",
            "scores = [",
            "{ plugin = \"NodeName\", weight = ",
            "\"NodeName\"",
            "\"X\"",
            "]",
            "}",
            ",",
            "\n",
            "weight = 0",
            "500",
            "-1",
            "parallelism = ",
            "default_plugins = \"native\"\n",
            "component = \"/dev/zero\"\n",
            "call_timeout_ms = 99999999\n",
            "quarantine_after = ",
            "percentage_of_nodes_to_score = 101\n",
            "scheduler_name = \"\"\n",
            "\"",
            "=",
            "#",
        ];
        proptest::collection::vec(proptest::sample::select(pieces), 0..40).prop_map(|p| p.concat())
    }

    /// The committed seeds of the configuration parser's mutation fuzzing.
    const CONFIG_SEEDS: &[&str] = &[
        include_str!("../../../examples/configs/bin-packing.toml"),
        include_str!("../../../examples/configs/gpu-model.toml"),
        include_str!("../../../examples/configs/gpu-packing.toml"),
        include_str!("../../../examples/configs/maintenance.toml"),
        include_str!("../../../examples/configs/rack-spread.toml"),
        include_str!("../../../examples/configs/team-affinity.toml"),
        include_str!("../../../tests/fuzz-corpus/strange.toml"),
    ];

    #[test]
    fn the_strange_but_valid_configuration_seed_is_read() {
        let config = parse(CONFIG_SEEDS[6]).unwrap();
        assert_eq!(config.parallelism, 2);
        let profiles = config.profiles().unwrap();
        assert_eq!(profiles[0].scheduler_name, "strange");
        assert_eq!(profiles[0].scores[0].1, 10);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2048))]
        /// Example configurations cut and spliced (see tests/fuzz-corpus/README.md) parse to a
        /// configuration or an error with a line, never a panic. Their plugins' component paths
        /// do not resolve from here, so building profiles stops at the first; that path is the
        /// other fuzz test's.
        #[test]
        fn mutated_configurations_are_read_or_refused_without_a_panic(
            text in wasched_core::util::fuzz::mutated(CONFIG_SEEDS)
        ) {
            if let Ok(config) = parse(&text) {
                let _ = config.profiles();
            }
        }
    }

    proptest::proptest! {
        /// Any mix of configuration pieces parses to a configuration or an error with a line,
        /// never a panic; what parses builds its profiles natively or says why not.
        #[test]
        fn any_configuration_is_read_or_refused_without_a_panic(text in config_fragment()) {
            let text = format!("{text}\n[runtime]\ndefault_plugins = \"native\"\n");
            if let Ok(config) = parse(&text) {
                let _ = config.profiles();
            }
        }
    }
}
