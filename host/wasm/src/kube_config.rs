//! kube-scheduler's `KubeSchedulerConfiguration` (`kubescheduler.config.k8s.io/v1`, YAML or
//! JSON), read as the TOML configuration it amounts to.
//!
//! Each profile's plugins are resolved as kube-scheduler resolves them: its default `multiPoint`
//! set merged with the profile's (`mergePluginSet`: a disabled default is dropped, `"*"` drops
//! them all, a re-enabled default keeps its place with the new weight, anything else is appended),
//! then expanded to every extension point a plugin takes part in, where the point's own `enabled`
//! plugins override the `multiPoint` ones and come first, and its `disabled` list (or `"*"`)
//! keeps them out (`expandMultiPointPlugins`). The result is the TOML profile with its
//! `pre_enqueue`, `filters`, `scores`, `permit` and `preemption`; `pluginConfig` args become each
//! plugin's `config`. What wasched does not do is refused by field, or warned about, never
//! dropped in silence.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use wasched_core::runtime::defaults;

/// The `apiVersion` read.
pub const API_VERSION: &str = "kubescheduler.config.k8s.io/v1";
/// The `kind` read.
pub const KIND: &str = "KubeSchedulerConfiguration";

/// Whether `text` is a KubeSchedulerConfiguration (YAML or JSON) rather than TOML.
pub fn is_kube_scheduler_configuration(text: &str) -> bool {
    text.contains(KIND)
        && yaml_serde::from_str::<Value>(text)
            .ok()
            .and_then(|v| v.get("kind").and_then(Value::as_str).map(|k| k == KIND))
            .unwrap_or(false)
}

/// A KubeSchedulerConfiguration as TOML, with what was accepted but does not apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Converted {
    /// The equivalent TOML configuration.
    pub toml: String,
    /// What wasched reads but does not act on, by field.
    pub warnings: Vec<String>,
}

/// Why a KubeSchedulerConfiguration cannot be used: the line (for a syntax or type error) or the
/// field it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The line, when the YAML parser gave one.
    pub line: Option<usize>,
    /// What is wrong, naming the field.
    pub message: String,
}

fn refused(message: impl Into<String>) -> Refused {
    Refused {
        line: None,
        message: message.into(),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct KubeSchedulerConfiguration {
    api_version: String,
    #[allow(dead_code)]
    kind: String,
    parallelism: Option<i64>,
    leader_election: Option<LeaderElection>,
    client_connection: Option<ClientConnection>,
    healthz_bind_address: Option<String>,
    metrics_bind_address: Option<String>,
    enable_profiling: Option<bool>,
    enable_contention_profiling: Option<bool>,
    percentage_of_nodes_to_score: Option<i64>,
    pod_initial_backoff_seconds: Option<i64>,
    pod_max_backoff_seconds: Option<i64>,
    #[serde(default)]
    profiles: Vec<Profile>,
    #[serde(default)]
    extenders: Vec<Value>,
    delay_cache_until_active: Option<bool>,
}

/// `clientConnection` (componentbaseconfig's ClientConnectionConfiguration).
#[derive(Deserialize, Default, Clone)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ClientConnection {
    kubeconfig: Option<String>,
    accept_content_types: Option<String>,
    content_type: Option<String>,
    qps: Option<f64>,
    burst: Option<i64>,
}

/// `leaderElection` (componentbaseconfig's LeaderElectionConfiguration).
#[derive(Deserialize, Default, Clone)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct LeaderElection {
    leader_elect: Option<bool>,
    lease_duration: Option<String>,
    renew_deadline: Option<String>,
    retry_period: Option<String>,
    resource_lock: Option<String>,
    resource_name: Option<String>,
    resource_namespace: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Profile {
    scheduler_name: Option<String>,
    percentage_of_nodes_to_score: Option<i64>,
    #[serde(default)]
    plugins: Plugins,
    #[serde(default)]
    plugin_config: Vec<PluginConfig>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Plugins {
    #[serde(default)]
    pre_enqueue: PluginSet,
    #[serde(default)]
    queue_sort: PluginSet,
    #[serde(default)]
    pre_filter: PluginSet,
    #[serde(default)]
    filter: PluginSet,
    #[serde(default)]
    post_filter: PluginSet,
    #[serde(default)]
    pre_score: PluginSet,
    #[serde(default)]
    score: PluginSet,
    #[serde(default)]
    reserve: PluginSet,
    #[serde(default)]
    permit: PluginSet,
    #[serde(default)]
    pre_bind: PluginSet,
    #[serde(default)]
    bind: PluginSet,
    #[serde(default)]
    post_bind: PluginSet,
    #[serde(default)]
    multi_point: PluginSet,
}

#[derive(Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
struct PluginSet {
    #[serde(default)]
    enabled: Vec<Plugin>,
    #[serde(default)]
    disabled: Vec<Plugin>,
}

#[derive(Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
struct Plugin {
    name: String,
    #[serde(default)]
    weight: i64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PluginConfig {
    name: String,
    #[serde(default)]
    args: Option<Value>,
}

/// kube-scheduler's default `multiPoint` plugins (1.34, `getDefaultPlugins` with its default
/// feature gates), in order, with their score weights.
pub const DEFAULT_MULTI_POINT: &[(&str, i64)] = &[
    ("SchedulingGates", 0),
    ("PrioritySort", 0),
    ("NodeUnschedulable", 0),
    ("NodeName", 0),
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodePorts", 0),
    ("NodeResourcesFit", 1),
    ("VolumeRestrictions", 0),
    ("NodeVolumeLimits", 0),
    ("VolumeBinding", 0),
    ("VolumeZone", 0),
    ("PodTopologySpread", 2),
    ("InterPodAffinity", 2),
    ("DynamicResources", 0),
    ("DefaultPreemption", 0),
    ("NodeResourcesBalancedAllocation", 1),
    ("ImageLocality", 1),
    ("DefaultBinder", 0),
];

/// kube-scheduler's default plugins wasched does not have yet.
const NOT_IMPLEMENTED: &[&str] = &[];

/// kube-scheduler's plugins that are parts of the host here rather than plugins.
const BUILT_IN: &[&str] = &["PrioritySort", "DefaultBinder", "DefaultPreemption"];

/// The extension points wasched takes plugin lists for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Point {
    PreEnqueue,
    Filter,
    Score,
    Permit,
}

impl Point {
    /// Whether the plugin `name` takes part in this point: known for the default plugins (and
    /// kube-scheduler's others, which take part in none wasched runs); `None` for any other.
    fn known(self, name: &str) -> Option<bool> {
        if BUILT_IN.contains(&name) || NOT_IMPLEMENTED.contains(&name) {
            return Some(false);
        }
        if self == Point::PreEnqueue && defaults::DEFAULT_PRE_ENQUEUE.contains(&name) {
            return Some(true);
        }
        let plugin = defaults::find(name)?;
        Some(match self {
            Point::Filter => plugin.filter,
            Point::Score => plugin.score,
            Point::PreEnqueue | Point::Permit => false,
        })
    }
}

/// `mergePluginSet`: the defaults without the disabled ones (none with `"*"`), each re-enabled
/// default in its place with the custom entry, then the other custom entries in order.
fn merge_plugin_set(defaults: &[Plugin], custom: &PluginSet) -> Vec<Plugin> {
    let disabled: Vec<&str> = custom.disabled.iter().map(|p| p.name.as_str()).collect();
    let mut replaced = vec![false; custom.enabled.len()];
    let mut merged = Vec::new();
    if !disabled.contains(&"*") {
        for default in defaults {
            if disabled.contains(&default.name.as_str()) {
                continue;
            }
            match custom.enabled.iter().position(|p| p.name == default.name) {
                Some(i) => {
                    replaced[i] = true;
                    merged.push(custom.enabled[i].clone());
                }
                None => merged.push(default.clone()),
            }
        }
    }
    for (plugin, replaced) in custom.enabled.iter().zip(replaced) {
        if !replaced {
            merged.push(plugin.clone());
        }
    }
    merged
}

/// `expandMultiPointPlugins` for one point: the point's own plugins that override a `multiPoint`
/// one (in their order), then the `multiPoint` plugins taking part in the point and not disabled
/// there, then the point's other plugins.
fn expand(
    point: Point,
    multi_point: &[Plugin],
    specific: &PluginSet,
    at: &str,
) -> Result<Vec<Plugin>, Refused> {
    let disabled: Vec<&str> = specific.disabled.iter().map(|p| p.name.as_str()).collect();
    let enabled = &specific.enabled;
    if disabled.contains(&"*") {
        return Ok(enabled.clone());
    }
    let mut overriding = Vec::new();
    let mut from_multi_point: Vec<Plugin> = Vec::new();
    for plugin in multi_point {
        // An out-of-tree plugin is listed at every point; the profile's `where_implemented`
        // leaves it out, once loaded, of those it does not implement.
        let takes_part = point.known(&plugin.name).unwrap_or(true);
        if !takes_part || disabled.contains(&plugin.name.as_str()) {
            continue;
        }
        if enabled.iter().any(|p| p.name == plugin.name) {
            overriding.push(plugin.name.clone());
            continue;
        }
        if from_multi_point.iter().any(|p| p.name == plugin.name) {
            return Err(refused(format!(
                "{at}.multiPoint: plugin {:?} is enabled twice",
                plugin.name
            )));
        }
        from_multi_point.push(plugin.clone());
    }
    let (first, rest): (Vec<Plugin>, Vec<Plugin>) = enabled
        .iter()
        .cloned()
        .partition(|p| overriding.contains(&p.name));
    Ok(first
        .into_iter()
        .chain(from_multi_point)
        .chain(rest)
        .collect())
}

/// The file as the v1 schema, refused with the line of a syntax or type error.
fn parse(text: &str) -> Result<KubeSchedulerConfiguration, Refused> {
    let config: KubeSchedulerConfiguration = yaml_serde::from_str(text).map_err(|e| Refused {
        line: e.location().map(|l| l.line()),
        message: e.to_string(),
    })?;
    if config.api_version != API_VERSION {
        return Err(refused(format!(
            "apiVersion: {:?} is not read; convert it to {API_VERSION} (kube-scheduler's own \
             `kubectl convert` or its migration notes)",
            config.api_version
        )));
    }
    Ok(config)
}

/// What a KubeSchedulerConfiguration says about Kubernetes mode's connection and leader
/// election (`clientConnection`, `leaderElection`): settings of the process, read once at start
/// from `serve --config FILE`, as kube-scheduler reads them from its file. `None` where the file
/// is silent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StartSettings {
    /// `clientConnection.kubeconfig`.
    pub kubeconfig: Option<String>,
    /// `clientConnection.qps`: requests a second to the API server.
    pub qps: Option<f64>,
    /// `clientConnection.burst`.
    pub burst: Option<u32>,
    /// `leaderElection.leaderElect`.
    pub leader_elect: Option<bool>,
    /// `leaderElection.leaseDuration`.
    pub lease_duration: Option<Duration>,
    /// `leaderElection.renewDeadline`.
    pub renew_deadline: Option<Duration>,
    /// `leaderElection.retryPeriod`.
    pub retry_period: Option<Duration>,
    /// `leaderElection.resourceName`: the Lease's name.
    pub resource_name: Option<String>,
    /// `leaderElection.resourceNamespace`: the Lease's namespace.
    pub resource_namespace: Option<String>,
}

/// Reads the start-up settings of a KubeSchedulerConfiguration ([`StartSettings`]).
///
/// # Errors
/// As [`to_toml`] for the file; a qps that is not a positive number, a burst outside
/// 1..=10000, a duration that is not Go's (`15s`, `1m30s`), or a `resourceLock` other than
/// `leases` (the only lock Kubernetes 1.34 has), naming the field.
pub fn start_settings(text: &str) -> Result<StartSettings, Refused> {
    let config = parse(text)?;
    let client = config.client_connection.unwrap_or_default();
    let leader = config.leader_election.unwrap_or_default();
    if let Some(qps) = client.qps {
        if !(qps > 0.0 && qps.is_finite()) {
            return Err(refused(format!(
                "clientConnection.qps: {qps} is not a positive number of requests a second"
            )));
        }
    }
    let burst = match client.burst {
        Some(b) if (1..=10_000).contains(&b) => Some(b as u32),
        Some(b) => {
            return Err(refused(format!(
                "clientConnection.burst: {b} is not within 1..=10000"
            )))
        }
        None => None,
    };
    if let Some(lock) = leader.resource_lock.as_deref() {
        if lock != "leases" {
            return Err(refused(format!(
                "leaderElection.resourceLock: {lock:?} is not supported; only \"leases\" is"
            )));
        }
    }
    let duration = |field: &str, text: &Option<String>| match text {
        Some(t) => go_duration(t)
            .map(Some)
            .map_err(|e| refused(format!("leaderElection.{field}: {e}"))),
        None => Ok(None),
    };
    Ok(StartSettings {
        kubeconfig: client.kubeconfig.filter(|k| !k.is_empty()),
        qps: client.qps,
        burst,
        leader_elect: leader.leader_elect,
        lease_duration: duration("leaseDuration", &leader.lease_duration)?,
        renew_deadline: duration("renewDeadline", &leader.renew_deadline)?,
        retry_period: duration("retryPeriod", &leader.retry_period)?,
        resource_name: leader.resource_name.filter(|n| !n.is_empty()),
        resource_namespace: leader.resource_namespace.filter(|n| !n.is_empty()),
    })
}

/// A duration as Go writes and `metav1.Duration` reads it: `15s`, `1m30s`, `500ms`, `1.5h`.
fn go_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a duration like 15s, 1m30s or 500ms");
    let mut rest = text;
    let mut seconds = 0.0;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .ok_or_else(bad)?;
        let value: f64 = rest[..number_end].parse().map_err(|_| bad())?;
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return Err(bad()),
        };
        seconds += value * scale;
        rest = &rest[unit_end..];
    }
    Duration::try_from_secs_f64(seconds).map_err(|_| bad())
}

/// Reads a KubeSchedulerConfiguration and writes the TOML configuration it amounts to.
///
/// # Errors
/// Not YAML or JSON of the v1 schema (with the line), or a setting wasched cannot honour (naming
/// the field).
pub fn to_toml(text: &str) -> Result<Converted, Refused> {
    let config = parse(text)?;
    if !config.extenders.is_empty() {
        return Err(refused(
            "extenders: scheduler extenders are not supported; write the extender's logic as a \
             plugin component",
        ));
    }
    let mut warnings = top_level_warnings(&config)?;
    let percentage = match config.percentage_of_nodes_to_score {
        Some(p) => Some(percentage(p, "percentageOfNodesToScore")?),
        None => None,
    };
    let profiles = match config.profiles.is_empty() {
        true => vec![Profile::default()],
        false => config.profiles,
    };
    let mut plugin_tables: BTreeMap<String, (String, toml::Table)> = BTreeMap::new();
    let mut toml_profiles = Vec::new();
    let mut names = Vec::new();
    for (i, profile) in profiles.iter().enumerate() {
        let at = format!("profiles[{i}]");
        let scheduler_name = profile
            .scheduler_name
            .clone()
            .unwrap_or_else(|| wasched_core::DEFAULT_SCHEDULER_NAME.to_string());
        if names.contains(&scheduler_name) {
            return Err(refused(format!(
                "{at}.schedulerName: {scheduler_name:?} names two profiles"
            )));
        }
        names.push(scheduler_name.clone());
        let (table, profile_warnings) = profile_table(
            profile,
            &scheduler_name,
            percentage,
            &at,
            &mut plugin_tables,
        )?;
        warnings.extend(profile_warnings);
        toml_profiles.push(toml::Value::Table(table));
    }
    let mut root = toml::Table::new();
    if !plugin_tables.is_empty() {
        let plugins: toml::Table = plugin_tables
            .into_iter()
            .map(|(name, (_, table))| (name, toml::Value::Table(table)))
            .collect();
        root.insert("plugins".into(), toml::Value::Table(plugins));
    }
    root.insert("profiles".into(), toml::Value::Array(toml_profiles));
    let toml = toml::to_string(&root).map_err(|e| refused(format!("writing TOML: {e}")))?;
    Ok(Converted { toml, warnings })
}

fn percentage(value: i64, field: &str) -> Result<i64, Refused> {
    if (0..=100).contains(&value) {
        Ok(value)
    } else {
        Err(refused(format!("{field}: {value} is not within 0..=100")))
    }
}

/// The top-level settings wasched reads but takes from elsewhere, or does not have.
fn top_level_warnings(config: &KubeSchedulerConfiguration) -> Result<Vec<String>, Refused> {
    let mut warnings = Vec::new();
    if config.client_connection.is_some() || config.leader_election.is_some() {
        warnings.push(
            "clientConnection, leaderElection: read only at start, from `serve --kubernetes \
             --config FILE` (a flag given on the command line wins); a configuration put \
             through the admin API or the policy ConfigMap does not change them"
                .into(),
        );
    }
    let mut elsewhere = |field: &str, set: bool, instead: &str| {
        if set {
            warnings.push(format!("{field}: not read from this file; {instead}"));
        }
    };
    let content_types = config
        .client_connection
        .as_ref()
        .is_some_and(|c| c.content_type.is_some() || c.accept_content_types.is_some());
    elsewhere(
        "clientConnection.contentType/acceptContentTypes",
        content_types,
        "wasched's client speaks JSON",
    );
    elsewhere(
        "parallelism",
        config.parallelism.is_some(),
        "wasched's `[runtime] parallelism` is threads with their own plugin instances",
    );
    for (field, set) in [
        ("healthzBindAddress", config.healthz_bind_address.is_some()),
        ("metricsBindAddress", config.metrics_bind_address.is_some()),
        ("enableProfiling", config.enable_profiling.is_some()),
        (
            "enableContentionProfiling",
            config.enable_contention_profiling.is_some(),
        ),
        (
            "delayCacheUntilActive",
            config.delay_cache_until_active.is_some(),
        ),
    ] {
        elsewhere(field, set, "`serve --listen` serves health and metrics");
    }
    // kube-scheduler's defaults, which wasched's queue has built in.
    for (field, value, default) in [
        (
            "podInitialBackoffSeconds",
            config.pod_initial_backoff_seconds,
            1,
        ),
        ("podMaxBackoffSeconds", config.pod_max_backoff_seconds, 10),
    ] {
        if value.is_some_and(|v| v != default) {
            return Err(refused(format!(
                "{field}: only kube-scheduler's default ({default}) is supported"
            )));
        }
    }
    Ok(warnings)
}

/// One profile as a TOML table with its plugins' args (`plugin_config`), the out-of-tree plugins
/// it names added to `plugin_tables` (one definition per plugin name across profiles).
fn profile_table(
    profile: &Profile,
    scheduler_name: &str,
    global_percentage: Option<i64>,
    at: &str,
    plugin_tables: &mut BTreeMap<String, (String, toml::Table)>,
) -> Result<(toml::Table, Vec<String>), Refused> {
    let plugins = &profile.plugins;
    let mut warnings = Vec::new();
    let defaults: Vec<Plugin> = DEFAULT_MULTI_POINT
        .iter()
        .map(|(name, weight)| Plugin {
            name: name.to_string(),
            weight: *weight,
        })
        .collect();
    let multi_point = merge_plugin_set(&defaults, &plugins.multi_point);
    let lists = [
        (Point::PreEnqueue, &plugins.pre_enqueue),
        (Point::Filter, &plugins.filter),
        (Point::Score, &plugins.score),
        (Point::Permit, &plugins.permit),
    ];
    let mut table = toml::Table::new();
    table.insert("scheduler_name".into(), scheduler_name.into());
    let percentage = match profile.percentage_of_nodes_to_score {
        Some(p) => Some(percentage(p, &format!("{at}.percentageOfNodesToScore"))?),
        None => global_percentage,
    };
    if let Some(p) = percentage {
        table.insert("percentage_of_nodes_to_score".into(), p.into());
    }
    for (point, specific) in lists {
        let (key, value) = point_list(point, &multi_point, specific, at)?;
        table.insert(key.into(), value);
    }
    let out_of_tree = multi_point
        .iter()
        .filter(|p| Point::Filter.known(&p.name).is_none())
        .map(|p| toml::Value::from(p.name.clone()));
    let out_of_tree: Vec<toml::Value> = out_of_tree.collect();
    if !out_of_tree.is_empty() {
        table.insert("where_implemented".into(), toml::Value::Array(out_of_tree));
    }
    warnings.extend(not_implemented(&multi_point, at));
    check_fixed_points(plugins, &multi_point, at, &mut warnings)?;
    let preemption = preemption_enabled(&multi_point, &plugins.post_filter);
    let mut preemption_table = toml::Table::new();
    preemption_table.insert("enabled".into(), preemption.into());
    let mut own_configs = toml::Table::new();
    for config in &profile.plugin_config {
        let field = format!("{at}.pluginConfig[{:?}]", config.name);
        let args = strip_type_meta(config.args.clone().unwrap_or(Value::Null));
        if config.name == "DefaultPreemption" {
            preemption_args(&args, &field, &mut preemption_table)?;
            continue;
        }
        if let Some(mut entry) = plugin_entry(&config.name, args, &field, &mut warnings)? {
            // Args are each profile's own, as kube-scheduler gives each profile its own plugin
            // instances; what names the component is shared by every profile.
            if let Some(args) = entry.remove("config") {
                own_configs.insert(config.name.clone(), args);
            }
            if !entry.is_empty() {
                share_definition(plugin_tables, &config.name, scheduler_name, entry)
                    .map_err(|why| refused(format!("{field}: {why}")))?;
            }
        }
    }
    if !own_configs.is_empty() {
        table.insert("plugin_config".into(), toml::Value::Table(own_configs));
    }
    table.insert("preemption".into(), toml::Value::Table(preemption_table));
    Ok((table, warnings))
}

/// The warning naming kube-scheduler's default plugins of `multi_point` wasched lacks, if any.
fn not_implemented(multi_point: &[Plugin], at: &str) -> Option<String> {
    let missing: Vec<&str> = NOT_IMPLEMENTED
        .iter()
        .copied()
        .filter(|name| multi_point.iter().any(|p| p.name == *name))
        .collect();
    let verb = if missing.len() == 1 { "is" } else { "are" };
    (!missing.is_empty()).then(|| {
        format!(
            "{at}: kube-scheduler's {} {verb} not implemented in wasched yet; where they would \
             decide, placements differ",
            missing.join(", ")
        )
    })
}

/// One point's TOML key and list: `expand`ed, scores with their weights.
fn point_list(
    point: Point,
    multi_point: &[Plugin],
    specific: &PluginSet,
    at: &str,
) -> Result<(&'static str, toml::Value), Refused> {
    let expanded = expand(point, multi_point, specific, &format!("{at}.plugins"))?;
    let names = || {
        expanded
            .iter()
            .map(|p| toml::Value::from(p.name.clone()))
            .collect()
    };
    Ok(match point {
        Point::PreEnqueue => ("pre_enqueue", toml::Value::Array(names())),
        Point::Filter => ("filters", toml::Value::Array(names())),
        Point::Permit => ("permit", toml::Value::Array(names())),
        Point::Score => {
            let scores = expanded.iter().map(|p| {
                let mut score = toml::Table::new();
                score.insert("plugin".into(), p.name.clone().into());
                // kube-scheduler counts a weight of 0 as 1.
                score.insert("weight".into(), p.weight.max(1).into());
                toml::Value::Table(score)
            });
            ("scores", toml::Value::Array(scores.collect()))
        }
    })
}

/// Adds an out-of-tree plugin's `[plugins.NAME]` table (its component, pin and limits) for the
/// first profile that names it; a later profile naming another component or other limits under
/// the same name is refused: one name is one component.
fn share_definition(
    plugin_tables: &mut BTreeMap<String, (String, toml::Table)>,
    name: &str,
    scheduler_name: &str,
    entry: toml::Table,
) -> Result<(), String> {
    match plugin_tables.get(name) {
        Some((first, earlier)) if *earlier != entry => Err(format!(
            "profiles {first:?} and {scheduler_name:?} name {name} as different components \
             or with different limits; give one of them another name"
        )),
        Some(_) => Ok(()),
        None => {
            plugin_tables.insert(name.to_string(), (scheduler_name.to_string(), entry));
            Ok(())
        }
    }
}

/// The points wasched does not take plugin lists for: their default plugins are built in (or
/// run with their filter or score); anything else there is refused.
fn check_fixed_points(
    plugins: &Plugins,
    multi_point: &[Plugin],
    at: &str,
    warnings: &mut Vec<String>,
) -> Result<(), Refused> {
    for (field, set, allowed) in [
        ("queueSort", &plugins.queue_sort, &["PrioritySort"][..]),
        ("bind", &plugins.bind, &["DefaultBinder"][..]),
        (
            "postFilter",
            &plugins.post_filter,
            &["DefaultPreemption"][..],
        ),
    ] {
        if let Some(other) = set
            .enabled
            .iter()
            .find(|p| !allowed.contains(&p.name.as_str()))
        {
            return Err(refused(format!(
                "{at}.plugins.{field}.enabled: {:?} is not supported; wasched's {field} is {}",
                other.name,
                allowed.join(", ")
            )));
        }
    }
    for (field, set, built_in) in [
        ("queueSort", &plugins.queue_sort, "PrioritySort"),
        ("bind", &plugins.bind, "DefaultBinder"),
    ] {
        let off = set
            .disabled
            .iter()
            .any(|p| p.name == built_in || p.name == "*")
            && !set.enabled.iter().any(|p| p.name == built_in);
        if off || !multi_point.iter().any(|p| p.name == built_in) && set.enabled.is_empty() {
            return Err(refused(format!(
                "{at}.plugins.{field}: {built_in} cannot be turned off; wasched has no other"
            )));
        }
    }
    for (field, set) in [
        ("preFilter", &plugins.pre_filter),
        ("preScore", &plugins.pre_score),
        ("reserve", &plugins.reserve),
        ("preBind", &plugins.pre_bind),
        ("postBind", &plugins.post_bind),
    ] {
        if !set.enabled.is_empty() || !set.disabled.is_empty() {
            warnings.push(format!(
                "{at}.plugins.{field}: not read; wasched runs a plugin's {field} with its filter \
                 or score (and VolumeBinding's Reserve and PreBind with its filter)"
            ));
        }
    }
    Ok(())
}

/// DefaultPreemption (PostFilter) runs unless it is turned off there or in `multiPoint`.
fn preemption_enabled(multi_point: &[Plugin], post_filter: &PluginSet) -> bool {
    let named = |set: &[Plugin]| {
        set.iter()
            .any(|p| p.name == "DefaultPreemption" || p.name == "*")
    };
    if post_filter
        .enabled
        .iter()
        .any(|p| p.name == "DefaultPreemption")
    {
        return true;
    }
    !named(&post_filter.disabled) && multi_point.iter().any(|p| p.name == "DefaultPreemption")
}

/// `args` without `apiVersion` and `kind`, which kube-scheduler's args may carry.
fn strip_type_meta(mut args: Value) -> Value {
    if let Some(object) = args.as_object_mut() {
        object.remove("apiVersion");
        object.remove("kind");
    }
    args
}

/// DefaultPreemptionArgs as the profile's `preemption` table.
fn preemption_args(args: &Value, field: &str, table: &mut toml::Table) -> Result<(), Refused> {
    let Some(object) = args.as_object() else {
        return Ok(());
    };
    for (key, value) in object {
        let toml_key = match key.as_str() {
            "minCandidateNodesPercentage" => "min_candidate_nodes_percentage",
            "minCandidateNodesAbsolute" => "min_candidate_nodes_absolute",
            other => {
                return Err(refused(format!(
                    "{field}.args.{other}: not a DefaultPreemptionArgs field"
                )))
            }
        };
        let number = value
            .as_i64()
            .filter(|n| *n >= 0)
            .ok_or_else(|| refused(format!("{field}.args.{key}: not a whole number")))?;
        table.insert(toml_key.into(), number.into());
    }
    Ok(())
}

/// The `[plugins.NAME]` table of a `pluginConfig` entry: a default plugin's args as its
/// `config`, or an out-of-tree component (`component`, `sha256`, `config` and the sandbox
/// settings in its args). `None` for a plugin whose args wasched has nothing to do with.
fn plugin_entry(
    name: &str,
    args: Value,
    field: &str,
    warnings: &mut Vec<String>,
) -> Result<Option<toml::Table>, Refused> {
    let mut entry = toml::Table::new();
    let empty = args.is_null() || args.as_object().is_some_and(|o| o.is_empty());
    if BUILT_IN.contains(&name) || NOT_IMPLEMENTED.contains(&name) {
        if !empty {
            warnings.push(format!(
                "{field}.args: not read ({name} is not a plugin here)"
            ));
        }
        return Ok(None);
    }
    if let Some(plugin) = defaults::find(name) {
        let reads_args = matches!(
            plugin.name,
            "NodeResourcesFit"
                | "NodeResourcesBalancedAllocation"
                | "PodTopologySpread"
                | "InterPodAffinity"
                | "NodeAffinity"
        );
        // A null is an unset field to kube-scheduler (`addedAffinity: null`); TOML has none.
        let mut args = args;
        if let Value::Object(fields) = &mut args {
            fields.retain(|_, value| !value.is_null());
        }
        if empty || args.as_object().is_some_and(|fields| fields.is_empty()) {
            return Ok(None);
        }
        if !reads_args {
            return args_not_read(name, &args, field, warnings).map(|()| None);
        }
        entry.insert("config".into(), json_to_toml(&args, field)?);
        return Ok(Some(entry));
    }
    if defaults::DEFAULT_PRE_ENQUEUE.contains(&name) {
        return Ok(None);
    }
    let Some(object) = args.as_object() else {
        return Err(refused(format!(
            "{field}.args: an out-of-tree plugin's args name its `component` (a path or an \
             uploaded plugin's name), optionally its `sha256` and its `config`"
        )));
    };
    for (key, value) in object {
        let toml_key = match key.as_str() {
            "component" => "component",
            "sha256" => "sha256",
            "config" => "config",
            "callTimeoutMs" => "call_timeout_ms",
            "memoryLimitMiB" => "memory_limit_mib",
            "failurePolicy" => "failure_policy",
            "quarantineAfter" => "quarantine_after",
            "quarantineSeconds" => "quarantine_seconds",
            other => {
                return Err(refused(format!(
                    "{field}.args.{other}: not read; an out-of-tree plugin's args are component, \
                     sha256, config, callTimeoutMs, memoryLimitMiB, failurePolicy, \
                     quarantineAfter and quarantineSeconds"
                )))
            }
        };
        entry.insert(
            toml_key.into(),
            json_to_toml(value, &format!("{field}.args.{key}"))?,
        );
    }
    Ok(Some(entry))
}

/// Args of a default plugin that takes none here: kube-scheduler's defaults pass with a warning,
/// anything that would change its answers is refused.
fn args_not_read(
    name: &str,
    args: &Value,
    field: &str,
    warnings: &mut Vec<String>,
) -> Result<(), Refused> {
    let object = args.as_object().cloned().unwrap_or_default();
    for key in object.keys() {
        let harmless = match (name, key.as_str()) {
            // The PV controller's wait, which the binding cycle here bounds itself.
            ("VolumeBinding", "bindTimeoutSeconds") => true,
            // Storage capacity scoring, off by default (StorageCapacityScoring).
            ("VolumeBinding", "shape") => true,
            _ => false,
        };
        if !harmless {
            return Err(refused(format!(
                "{field}.args.{key}: not implemented for {name} in wasched yet"
            )));
        }
        warnings.push(format!("{field}.args.{key}: not read"));
    }
    Ok(())
}

/// A JSON value as TOML (which has no null: a null is refused, by field).
fn json_to_toml(value: &Value, field: &str) -> Result<toml::Value, Refused> {
    Ok(match value {
        Value::Null => {
            return Err(refused(format!(
                "{field}: null has no TOML form; leave it out"
            )))
        }
        Value::Bool(b) => toml::Value::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => toml::Value::Integer(i),
            None => toml::Value::Float(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => toml::Value::String(s.clone()),
        Value::Array(items) => toml::Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| json_to_toml(v, &format!("{field}[{i}]")))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => toml::Value::Table(
            map.iter()
                .map(|(k, v)| Ok((k.clone(), json_to_toml(v, &format!("{field}.{k}"))?)))
                .collect::<Result<_, Refused>>()?,
        ),
    })
}

#[cfg(test)]
mod tests;
