//! The plugin policy (the configuration and the uploaded components) and every way it changes:
//! a hot load, a removal, a new configuration, the replicas' shared policy adopted. Each change
//! builds the new profiles off the scheduling thread, then swaps them in.

use axum::http::StatusCode;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::store::PluginRecord;
use crate::{shared_policy, ConfigSource, KubeMode, Mode, ServeArgs, Server};
use wasched_core::framework::{Decider, Profile, ProfileSpec};
use wasched_core::metrics::PluginStatsRegistry;
use wasched_wasm::component::{sha256_hex, Limits, WasmRuntime};
use wasched_wasm::config::{Config, ConfigError, ProfileChain};

/// The plugin policy: the configuration and the uploaded components. Changed only under the
/// server's policy lock.
pub struct Policy {
    /// Where the configuration came from.
    pub source: ConfigSource,
    /// The configuration's text, TOML or KubeSchedulerConfiguration YAML.
    pub text: String,
    /// Uploaded components by plugin name.
    pub uploaded: BTreeMap<String, Arc<Vec<u8>>>,
    /// What is known of each uploaded plugin (name, sha256, size, load state).
    pub records: BTreeMap<String, PluginRecord>,
    /// Plugin name -> the profiles using it.
    pub usage: BTreeMap<String, Vec<String>>,
    /// Each profile's filter and score chains, for the status page.
    pub chains: Vec<wasched_wasm::config::ProfileChain>,
    /// Kubernetes mode: the resourceVersion of the shared policy's index this policy reflects.
    pub shared_version: u64,
}

impl Policy {
    /// True when this policy is the one `index` describes: the same components (by sha256)
    /// and the same admin configuration.
    pub fn matches(&self, index: &shared_policy::PolicyIndex) -> bool {
        let same_components = self.records.len() == index.plugins.len()
            && index.plugins.iter().all(|p| {
                self.records
                    .get(&p.record.name)
                    .is_some_and(|r| r.sha256 == p.record.sha256)
            });
        let same_config = match (&index.config, &self.source) {
            (Some(text), ConfigSource::Cluster(_)) => *text == self.text,
            (Some(_), _) => false,
            (None, source) => !matches!(source, ConfigSource::Cluster(_)),
        };
        same_components && same_config
    }
}

/// A configuration built off the scheduling thread, ready to swap in.
struct Built {
    config: Config,
    profiles: Vec<Profile>,
    /// What its profiles run, for the status page.
    chains: Vec<ProfileChain>,
}

/// A plugin [`Server::load_plugin`] put in place.
#[derive(Debug)]
pub struct LoadedPlugin {
    /// What was stored of it.
    pub record: PluginRecord,
    /// It replaced a plugin of the same name.
    pub replaced: bool,
    /// A profile of the configuration uses it, so it schedules pods now.
    pub active: bool,
}

/// A refused policy change: the HTTP status and why.
#[derive(Debug)]
pub struct PolicyError {
    /// The HTTP status to answer with.
    pub status: StatusCode,
    /// Why, for the caller.
    pub message: String,
}

impl PolicyError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        PolicyError {
            status,
            message: message.into(),
        }
    }
}

/// The SHA-256 of an upload whose name is valid and whose digest is the one the request
/// expected, if it named one.
fn checked_upload(
    name: &str,
    bytes: &[u8],
    expected_sha256: Option<&str>,
) -> Result<String, PolicyError> {
    if !valid_plugin_name(name) {
        return Err(PolicyError::new(
            StatusCode::BAD_REQUEST,
            format!("invalid plugin name {name:?}: use 1-63 letters, digits, '-', '_' or '.', starting with a letter"),
        ));
    }
    let sha256 = sha256_hex(bytes);
    if let Some(expected) = expected_sha256 {
        if !expected.eq_ignore_ascii_case(&sha256) {
            return Err(PolicyError::new(
                StatusCode::BAD_REQUEST,
                format!(
                    "sha256 mismatch: the upload has {sha256}, the request expected {expected}"
                ),
            ));
        }
    }
    Ok(sha256)
}

/// Plugin names: what a TOML key and a URL segment can hold without quoting.
pub fn valid_plugin_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && name.as_bytes()[0].is_ascii_alphabetic()
}

impl Server {
    /// What Kubernetes mode has, in Kubernetes mode.
    pub fn kube(&self) -> Option<&KubeMode> {
        match &self.mode {
            Mode::Kubernetes(kube) => Some(kube),
            Mode::Standalone => None,
        }
    }

    /// Where uploaded plugins and the admin configuration are kept in Kubernetes mode (`None`:
    /// the store).
    pub fn shared_policy(&self) -> Option<&Arc<shared_policy::SharedPolicy>> {
        self.kube().map(|k| &k.shared_policy)
    }

    /// Parses `text` and builds its profiles with `uploaded` components, off the scheduling
    /// thread.
    fn build(
        &self,
        source: &ConfigSource,
        text: &str,
        uploaded: &BTreeMap<String, Arc<Vec<u8>>>,
    ) -> Result<Built, ConfigError> {
        let (label, dir) = config_location(source, &self.args.data_dir);
        let (config, specs) =
            parse_and_load(&label, &dir, text, uploaded, &self.plugin_stats, &self.args)?;
        let chains = specs.iter().map(ProfileChain::of).collect();
        let profiles = Decider::build_profiles(&specs, self.args.seed, self.clock.clone())
            .map_err(|e| ConfigError {
                file: label,
                line: None,
                message: e.0,
            })?;
        Ok(Built {
            config,
            profiles,
            chains,
        })
    }

    /// Checks, stores and swaps in an uploaded component (blocking: run off the async runtime).
    ///
    /// # Errors
    /// A 4xx for a bad component or one the configuration cannot use; 500 for a store failure.
    pub fn load_plugin(
        &self,
        policy: &mut Policy,
        name: &str,
        bytes: Vec<u8>,
        expected_sha256: Option<&str>,
    ) -> Result<LoadedPlugin, PolicyError> {
        let result = self.try_load_plugin(policy, name, bytes, expected_sha256);
        let index = usize::from(result.is_err());
        self.plugin_loads[index].fetch_add(1, Ordering::Relaxed);
        if result.is_ok() {
            self.policy_changed();
        }
        result
    }

    fn try_load_plugin(
        &self,
        policy: &mut Policy,
        name: &str,
        bytes: Vec<u8>,
        expected_sha256: Option<&str>,
    ) -> Result<LoadedPlugin, PolicyError> {
        let sha256 = checked_upload(name, &bytes, expected_sha256)?;
        let factory = WasmRuntime::shared()
            .load(name, &bytes, Limits::default())
            .map_err(|e| PolicyError::new(StatusCode::BAD_REQUEST, e.0))?;
        let version = wasched_core::runtime::PluginFactory::instantiate(&factory, "{}")
            .map(|i| i.descriptor().version.clone())
            .unwrap_or_default();
        drop(factory);
        let record = PluginRecord {
            name: name.to_string(),
            sha256,
            size: bytes.len(),
            version,
            uploaded_at: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        };
        let mut uploaded = policy.uploaded.clone();
        let bytes = Arc::new(bytes);
        uploaded.insert(name.to_string(), bytes.clone());
        let in_use = policy.usage.contains_key(name);
        let rebuilt = if in_use {
            let built = self
                .build(&policy.source, &policy.text, &uploaded)
                .map_err(|e| {
                    PolicyError::new(
                        StatusCode::BAD_REQUEST,
                        format!("the active configuration cannot use this component: {e}"),
                    )
                })?;
            Some(built)
        } else {
            None
        };
        match self.shared_policy() {
            Some(shared) => {
                policy.shared_version = shared
                    .put_plugin(&record, &bytes)
                    .map_err(|e| PolicyError::new(StatusCode::SERVICE_UNAVAILABLE, e))?;
            }
            None => self
                .store
                .put_plugin(&record, &bytes)
                .map_err(|e| PolicyError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?,
        }
        let replaced = policy.records.contains_key(name);
        policy.uploaded = uploaded;
        policy.records.insert(name.to_string(), record.clone());
        if let Some(built) = rebuilt {
            self.engine
                .swap(built.profiles)
                .map_err(|e| PolicyError::new(StatusCode::SERVICE_UNAVAILABLE, e))?;
            policy.chains = built.chains;
        }
        tracing::info!(plugin = name, sha256 = %record.sha256, replaced, active = in_use, "plugin loaded");
        Ok(LoadedPlugin {
            record,
            replaced,
            active: in_use,
        })
    }

    /// Removes an uploaded component unless a profile uses it.
    ///
    /// # Errors
    /// 404 for an unknown plugin, 409 while it is in use, 500 for a store failure.
    pub fn remove_plugin(&self, policy: &mut Policy, name: &str) -> Result<(), PolicyError> {
        if !policy.records.contains_key(name) {
            return Err(PolicyError::new(
                StatusCode::NOT_FOUND,
                format!("no uploaded plugin named {name:?}"),
            ));
        }
        if let Some(profiles) = policy.usage.get(name) {
            return Err(PolicyError::new(
                StatusCode::CONFLICT,
                format!(
                    "plugin {name} is used by profile(s) {}; change the configuration first",
                    profiles.join(", ")
                ),
            ));
        }
        match self.shared_policy() {
            Some(shared) => {
                policy.shared_version = shared
                    .remove_plugin(name)
                    .map_err(|e| PolicyError::new(StatusCode::SERVICE_UNAVAILABLE, e))?;
            }
            None => {
                self.store.remove_plugin(name).map_err(|e| {
                    PolicyError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
                })?;
            }
        }
        policy.uploaded.remove(name);
        policy.records.remove(name);
        tracing::info!(plugin = name, "plugin removed");
        self.policy_changed();
        Ok(())
    }

    /// Validates a configuration, builds its profiles, keeps it (in its file, or the store) and
    /// swaps it in. `persist` is false for a SIGHUP reload of the file itself.
    ///
    /// # Errors
    /// 400 naming the line and the reason; 500 when it cannot be kept.
    pub fn apply_config(
        &self,
        policy: &mut Policy,
        text: String,
        persist: bool,
    ) -> Result<(), PolicyError> {
        let source = match (self.shared_policy(), &policy.source) {
            // A file is a replica's own; a change through the admin API is every replica's.
            (Some(shared), ConfigSource::File(_)) if persist => {
                ConfigSource::Cluster(shared.location())
            }
            (_, ConfigSource::File(path)) => ConfigSource::File(path.clone()),
            (Some(shared), _) => ConfigSource::Cluster(shared.location()),
            (None, _) => ConfigSource::Store,
        };
        let Built {
            config,
            profiles,
            chains,
        } = self
            .build(&source, &text, &policy.uploaded)
            .map_err(|e| PolicyError::new(StatusCode::BAD_REQUEST, e.to_string()))?;
        if persist {
            match &source {
                ConfigSource::File(path) => write_atomically(path, &text).map_err(|e| {
                    PolicyError::new(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        format!("cannot write {}: {e}", path.display()),
                    )
                })?,
                ConfigSource::Cluster(_) => {
                    policy.shared_version = self
                        .shared_policy()
                        .expect("a cluster source has a shared policy")
                        .set_config(&text)
                        .map_err(|e| PolicyError::new(StatusCode::SERVICE_UNAVAILABLE, e))?;
                }
                _ => self.store.set_config(&text).map_err(|e| {
                    PolicyError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
                })?,
            }
        }
        self.engine
            .swap(profiles)
            .map_err(|e| PolicyError::new(StatusCode::SERVICE_UNAVAILABLE, e))?;
        policy.usage = config.usage();
        policy.chains = chains;
        policy.text = text;
        policy.source = source;
        tracing::info!("configuration applied");
        self.policy_changed();
        Ok(())
    }

    /// Takes in the policy another replica wrote to the cluster: `components` are the bytes of
    /// every component `index` lists. Returns false when the policy already was that one.
    ///
    /// # Errors
    /// 400 when this replica cannot build it (the previous policy stays).
    pub fn adopt_shared_policy(
        &self,
        policy: &mut Policy,
        version: u64,
        index: &shared_policy::PolicyIndex,
        components: BTreeMap<String, Arc<Vec<u8>>>,
    ) -> Result<bool, PolicyError> {
        if version <= policy.shared_version {
            return Ok(false);
        }
        if policy.matches(index) {
            policy.shared_version = version;
            return Ok(false);
        }
        let (source, text) = match (&index.config, self.shared_policy()) {
            (Some(text), Some(shared)) => (ConfigSource::Cluster(shared.location()), text.clone()),
            _ => match &self.args.config {
                Some(path) => (
                    ConfigSource::File(path.clone()),
                    std::fs::read_to_string(path).map_err(|e| {
                        PolicyError::new(
                            StatusCode::BAD_REQUEST,
                            format!("{}: {e}", path.display()),
                        )
                    })?,
                ),
                None => (ConfigSource::Default, String::new()),
            },
        };
        let Built {
            config,
            profiles,
            chains,
        } = self
            .build(&source, &text, &components)
            .map_err(|e| PolicyError::new(StatusCode::BAD_REQUEST, e.to_string()))?;
        self.engine
            .swap(profiles)
            .map_err(|e| PolicyError::new(StatusCode::SERVICE_UNAVAILABLE, e))?;
        policy.records = index
            .plugins
            .iter()
            .map(|p| (p.record.name.clone(), p.record.clone()))
            .collect();
        policy.uploaded = components;
        policy.usage = config.usage();
        policy.chains = chains;
        policy.text = text;
        policy.source = source;
        policy.shared_version = version;
        self.policy_changed();
        Ok(true)
    }

    fn policy_changed(&self) {
        self.policy_changes.send_modify(|n| *n += 1);
    }
}

fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let temporary = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&temporary, text)?;
    std::fs::File::open(&temporary)?.sync_all()?;
    std::fs::rename(&temporary, path)
}

pub(crate) fn parse_and_load(
    label: &str,
    dir: &Path,
    text: &str,
    uploaded: &BTreeMap<String, Arc<Vec<u8>>>,
    stats: &Arc<PluginStatsRegistry>,
    args: &ServeArgs,
) -> Result<(Config, Vec<ProfileSpec>), ConfigError> {
    let mut config = Config::parse_with(
        label,
        dir,
        text.to_string(),
        uploaded.clone(),
        stats.clone(),
    )?;
    if let Some(runtime) = args.runtime {
        config.default_plugins = runtime;
    }
    config.max_component_bytes = args.max_component_bytes;
    config.plugin_dir = args.plugin_dir.clone();
    let specs = config.profiles()?;
    Ok((config, specs))
}

/// How messages name a configuration from `source`, and the directory its relative paths start
/// from.
pub(crate) fn config_location(source: &ConfigSource, data_dir: &Path) -> (String, PathBuf) {
    match source {
        ConfigSource::File(path) => (
            path.display().to_string(),
            path.parent().map(Path::to_path_buf).unwrap_or_default(),
        ),
        ConfigSource::Store | ConfigSource::Cluster(_) | ConfigSource::Default => {
            ("<admin config>".to_string(), data_dir.to_path_buf())
        }
    }
}
