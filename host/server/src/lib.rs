//! `wasched serve`: the scheduler as a daemon with a cluster API, an admin API for hot-loading
//! plugins and reloading the configuration, a watch of scheduling events, and metrics.
//!
//! Threads: tokio serves HTTP; the scheduling thread and the status writer are in [`engine`];
//! compilation and profile building for a hot load run on tokio's blocking pool, so a cycle never
//! waits for them. Changes to the policy (plugins, configuration) are serialized by one lock.

#![warn(missing_docs)]

pub mod auth;
pub mod client;
pub mod engine;
mod http;
pub mod kubernetes;
pub mod leader;
pub mod lenient;
pub mod shared_policy;
pub mod store;
pub mod store_binding;
pub mod watch;

use axum::http::StatusCode;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use auth::Tokens;
use engine::{Engine, EngineMetrics, ResultSink, StartGate};
use store::{PluginRecord, Store};
use store_binding::StoreSink;
use wasched_core::clock::{Clock, SystemClock};
use wasched_core::events::{Event, EventPipeline, Kind};
use wasched_core::framework::{Decider, Profile, ProfileSpec};
use wasched_core::metrics::PluginStatsRegistry;
use wasched_core::service::Service;
use wasched_wasm::component::{sha256_hex, Limits, WasmRuntime};
use wasched_wasm::config::{Config, ConfigError, DefaultPluginRuntime};
use watch::WatchLog;

/// The default listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7878";

/// A listen address as `IP:PORT` or `HOST:PORT` (`localhost:7878`), the host resolved now; of
/// several addresses the first IPv4 one, as most clients try it first.
fn listen_address(text: &str) -> Result<SocketAddr, String> {
    if let Ok(address) = text.parse() {
        return Ok(address);
    }
    let resolved: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(text)
        .map_err(|e| format!("{text:?} is not HOST:PORT or IP:PORT: {e}"))?
        .collect();
    resolved
        .iter()
        .find(|a| a.is_ipv4())
        .or(resolved.first())
        .copied()
        .ok_or_else(|| format!("{text:?} resolves to no address"))
}

/// `wasched serve` options.
#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// Scheduler configuration (TOML). Read at start and on SIGHUP; `PUT /admin/config` writes it.
    /// Without it, the configuration put through the admin API, else the default profile.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Address to listen on. A non-loopback address requires an admin token, which then also
    /// guards the cluster API unless a write or read token is set.
    #[arg(long, default_value = DEFAULT_LISTEN, value_parser = listen_address)]
    pub listen: SocketAddr,
    /// Where the store (objects, uploaded plugins, configuration) lives.
    #[arg(long, default_value_os_t = default_data_dir())]
    pub data_dir: PathBuf,
    /// A file holding the admin token: the admin API and every cluster API call
    /// (else $WASCHED_ADMIN_TOKEN).
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// A file holding the write token: reading and changing cluster objects
    /// (else $WASCHED_WRITE_TOKEN). Setting it or a read token guards the cluster API on loopback.
    #[arg(long)]
    pub write_token_file: Option<PathBuf>,
    /// A file holding the read token: listing objects, the watch and /metrics
    /// (else $WASCHED_READ_TOKEN).
    #[arg(long)]
    pub read_token_file: Option<PathBuf>,
    /// Largest cluster API request body, in bytes.
    #[arg(long, default_value_t = 8 << 20)]
    pub max_request_bytes: usize,
    /// Largest plugin upload, in bytes (Python and JavaScript components are 12-18 MB).
    #[arg(long, default_value_t = wasched_wasm::config::DEFAULT_MAX_COMPONENT_BYTES)]
    pub max_component_bytes: usize,
    /// Confine `component` paths in configurations to this directory (symbolic links resolved):
    /// without it, any regular file the server can read may be named.
    #[arg(long)]
    pub plugin_dir: Option<PathBuf>,
    /// How long a placement may wait for its binding to be written before it is undone.
    #[arg(long, default_value_t = 30)]
    pub assume_ttl_seconds: u64,
    /// Run the default plugins as WebAssembly components or natively (overrides the config).
    #[arg(long, value_enum)]
    pub runtime: Option<DefaultPluginRuntime>,
    /// Seed for breaking ties between equally good nodes.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// A name clients reach the server by (through a proxy or DNS), besides its IP addresses
    /// and, on loopback, `localhost`: on loopback a request naming any other `Host` is refused,
    /// so a page whose name was re-pointed at 127.0.0.1 cannot call the API. Repeatable.
    #[arg(long = "allowed-host", value_name = "NAME")]
    pub allowed_hosts: Vec<String>,
    /// An origin (`https://dash.example:8443`) whose pages may call the API from a browser,
    /// besides the server's own page. Repeatable.
    #[arg(long = "allowed-origin", value_name = "ORIGIN")]
    pub allowed_origins: Vec<String>,
    /// Kubernetes mode: the API server, its client limits, leader election, the shared policy.
    #[command(flatten)]
    pub kube: kubernetes::KubeArgs,
}

/// How logs are written.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// `$XDG_DATA_HOME/wasched`, else `~/.local/share/wasched`, else `./wasched-data`.
pub fn default_data_dir() -> PathBuf {
    std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .map(|d| d.join("wasched"))
        .unwrap_or_else(|| PathBuf::from("wasched-data"))
}

/// Where the active configuration comes from and goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// `--config FILE`.
    File(PathBuf),
    /// Put through the admin API and kept in the store.
    Store,
    /// Put through the admin API of a replica in Kubernetes mode and kept in the policy
    /// ConfigMap `namespace/name`.
    Cluster(String),
    /// Nothing configured: kube-scheduler's default profile.
    Default,
}

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

/// Everything the handlers share.
pub struct Server {
    /// The embedded store (objects, plugins, configuration).
    pub store: Store,
    /// Where object changes go to reach the scheduling thread.
    pub pipeline: Arc<EventPipeline>,
    /// What watchers of `/v1/watch` are sent.
    pub watch: Arc<WatchLog>,
    /// The scheduling thread and the status writer.
    pub engine: Engine,
    /// The engine's counters, for `/metrics`.
    pub engine_metrics: Arc<EngineMetrics>,
    /// The service's counters, for `/metrics`.
    pub service_stats: Arc<wasched_core::service::ServiceStats>,
    /// Each plugin's call times and failures.
    pub plugin_stats: Arc<PluginStatsRegistry>,
    /// The configuration and uploaded components, changed under this lock.
    pub policy: Arc<tokio::sync::Mutex<Policy>>,
    /// The tokens requests are checked against.
    pub tokens: Tokens,
    /// The hosts and origins requests may come from ([`http::site`]).
    pub(crate) sites: http::site::Sites,
    /// The command line it was started with.
    pub args: ServeArgs,
    /// The scheduler's clock.
    pub clock: Arc<dyn Clock>,
    /// Plugin loads through the admin API: succeeded, failed.
    pub plugin_loads: [std::sync::atomic::AtomicU64; 2],
    /// Draws the uids of objects created without one.
    pub uids: std::sync::Mutex<wasched_core::util::Rng>,
    /// Set to true to stop the server (open watches end).
    pub shutdown: tokio::sync::watch::Sender<bool>,
    /// Counts changes of the plugins or the configuration, so that open status pages refresh.
    pub policy_changes: tokio::sync::watch::Sender<u64>,
    /// Where the cluster lives, with what only Kubernetes mode has.
    pub mode: Mode,
}

/// Where the cluster lives.
pub enum Mode {
    /// In the embedded store (`serve`); uploaded plugins and the admin configuration too.
    Standalone,
    /// In a Kubernetes API server (`serve --kubernetes`).
    Kubernetes(KubeMode),
}

/// What a server in Kubernetes mode has beyond a standalone one.
pub struct KubeMode {
    /// The watches of the API server.
    pub watches: Arc<kubernetes::WatchStats>,
    /// Open once every kind was listed from the API server: ready, even as a standby replica.
    pub synced: Arc<StartGate>,
    /// True while this replica holds the Lease (`None`: no leader election).
    pub leading: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// Where uploaded plugins and the admin configuration are kept, shared by the replicas.
    pub shared_policy: Arc<shared_policy::SharedPolicy>,
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
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
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
    ) -> Result<(Config, Vec<Profile>), ConfigError> {
        let (label, dir) = config_location(source, &self.args.data_dir);
        let (config, specs) =
            parse_and_load(&label, &dir, text, uploaded, &self.plugin_stats, &self.args)?;
        let profiles = Decider::build_profiles(&specs, self.args.seed, self.clock.clone())
            .map_err(|e| ConfigError {
                file: label,
                line: None,
                message: e.0,
            })?;
        Ok((config, profiles))
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
            let (_, profiles) = self
                .build(&policy.source, &policy.text, &uploaded)
                .map_err(|e| {
                    PolicyError::new(
                        StatusCode::BAD_REQUEST,
                        format!("the active configuration cannot use this component: {e}"),
                    )
                })?;
            Some(profiles)
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
        if let Some(profiles) = rebuilt {
            self.engine
                .swap(profiles)
                .map_err(|e| PolicyError::new(StatusCode::SERVICE_UNAVAILABLE, e))?;
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
        let (config, profiles) = self
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
        policy.chains = config.chains();
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
        let (config, profiles) = self
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
        policy.chains = config.chains();
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

fn parse_and_load(
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

fn read_tokens(args: &ServeArgs) -> anyhow::Result<Tokens> {
    Tokens::new(
        Tokens::read(args.token_file.as_deref(), auth::ADMIN_TOKEN_ENV)?,
        Tokens::read(args.write_token_file.as_deref(), auth::WRITE_TOKEN_ENV)?,
        Tokens::read(args.read_token_file.as_deref(), auth::READ_TOKEN_ENV)?,
        args.listen.ip(),
    )
}

/// Runs the server until SIGINT or SIGTERM.
///
/// # Errors
/// It cannot start: a bad configuration or token, an unusable store, a busy address.
pub fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("wasched-http")
        .build()?;
    let (server, restored) = {
        // Kubernetes mode's watches run on this runtime.
        let _entered = runtime.enter();
        Server::open(args)?
    };
    let result = runtime.block_on(run_http(server.clone(), restored));
    // The running cycle finishes and every result is written before the process exits.
    server.engine.shutdown();
    tracing::info!("stopped");
    result
}

impl Server {
    /// Everything but the listener: tokens checked, store opened, policy loaded, the stored
    /// objects submitted as events, the engine's threads started. Returns the server and how many
    /// objects were restored.
    ///
    /// # Errors
    /// As [`serve`], but for the address.
    pub fn open(args: ServeArgs) -> anyhow::Result<(Arc<Server>, usize)> {
        let tokens = read_tokens(&args)?;
        warn_about_open_parts(&tokens, &args);
        let store_path = args.data_dir.join("wasched.redb");
        let store = Store::open(&store_path)?;
        let plugin_stats = Arc::new(PluginStatsRegistry::default());

        let kube = kube_connection(&args)?;
        let shared_policy = kube.as_ref().map(|(client, runtime)| {
            Arc::new(shared_policy::SharedPolicy::new(
                client.clone(),
                &args.kube.policy,
                runtime.clone(),
                args.max_component_bytes,
            ))
        });
        let (policy, specs) =
            starting_policy(&args, &store, shared_policy.as_deref(), &plugin_stats)?;

        let clock: Arc<dyn Clock> = Arc::new(SystemClock::default());
        let decider = Decider::with_clock(&specs, args.seed, clock.clone())
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let service = Service::deferred(decider, clock.clone())
            .with_assume_ttl(Duration::from_secs(args.assume_ttl_seconds));
        let pipeline = service.pipeline();
        let service_stats = service.stats.clone();

        let engine_metrics = Arc::new(EngineMetrics::default());
        let mut objects = match &kube {
            Some((client, runtime)) => kubernetes_source(
                &args,
                client.clone(),
                runtime.clone(),
                &pipeline,
                service.binding_failures(),
            )?,
            None => store_source(&store, &pipeline, service.binding_failures())?,
        };
        let leader_handoff = objects.leader_handoff.take();
        let (version, restored) = (objects.version, objects.restored);
        let mode = objects.mode(shared_policy.clone());
        let watch = Arc::new(WatchLog::new(version));
        let engine = Engine::start(
            service,
            objects.sink,
            watch.clone(),
            engine_metrics.clone(),
            objects.gate,
        )?;

        let (shutdown, _) = tokio::sync::watch::channel(false);
        let server = Arc::new(Server {
            store,
            pipeline,
            watch,
            engine,
            engine_metrics,
            service_stats,
            plugin_stats,
            policy: Arc::new(tokio::sync::Mutex::new(policy)),
            tokens,
            sites: http::site::Sites::new(args.listen, &args.allowed_hosts, &args.allowed_origins),
            args: args.clone(),
            clock,
            plugin_loads: Default::default(),
            uids: std::sync::Mutex::new(wasched_core::util::Rng::new(uid_seed())),
            shutdown,
            policy_changes: tokio::sync::watch::Sender::new(0),
            mode,
        });
        if let Some(shared) = shared_policy {
            tokio::spawn(shared_policy::follow(
                server.clone(),
                shared,
                leader_handoff,
            ));
        }

        Ok((server, restored))
    }
}

/// Says which parts of the HTTP API need no token.
fn warn_about_open_parts(tokens: &Tokens, args: &ServeArgs) {
    for part in tokens.open_parts() {
        tracing::warn!(
            "{part} is open to anyone who can reach {}: see --token-file, --write-token-file and --read-token-file",
            args.listen
        );
    }
}

/// A seed no other process started at another time shares, for the uids of created objects.
fn uid_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id())
}

/// The API server's client and the async runtime Kubernetes mode runs on, in Kubernetes mode.
fn kube_connection(
    args: &ServeArgs,
) -> anyhow::Result<Option<(kube::Client, tokio::runtime::Handle)>> {
    if !args.kube.kubernetes {
        return Ok(None);
    }
    let runtime = tokio::runtime::Handle::try_current()
        .context("Kubernetes mode needs the server's async runtime")?;
    let client = off_runtime(|| runtime.block_on(kubernetes::client(&args.kube)))?;
    Ok(Some((client, runtime)))
}

/// The policy to start with, loaded: the stored (or shared) one, or this replica's own when the
/// shared one does not build.
fn starting_policy(
    args: &ServeArgs,
    store: &Store,
    shared: Option<&shared_policy::SharedPolicy>,
    plugin_stats: &Arc<PluginStatsRegistry>,
) -> anyhow::Result<(Policy, Vec<ProfileSpec>)> {
    let mut policy = stored_policy(args, store, shared)?;
    let build = |policy: &Policy| {
        let (label, dir) = config_location(&policy.source, &args.data_dir);
        parse_and_load(
            &label,
            &dir,
            &policy.text,
            &policy.uploaded,
            plugin_stats,
            args,
        )
    };
    let (config, specs) = match (build(&policy), shared) {
        (Ok(built), _) => built,
        // A configuration anyone who may edit the ConfigMap wrote must not keep every
        // replica down: start with this replica's own, and take the cluster's in once a
        // change makes it buildable.
        (Err(e), Some(shared)) if matches!(policy.source, ConfigSource::Cluster(_)) => {
            refuse_shared_policy(shared, &format!("its configuration: {e}"));
            policy = local_policy(args, policy.uploaded, policy.records)?;
            build(&policy).map_err(|e| anyhow::anyhow!("{e}"))?
        }
        (Err(e), _) => anyhow::bail!("{e}"),
    };
    policy.usage = config.usage();
    policy.chains = config.chains();
    Ok((policy, specs))
}

/// Where the cluster's objects come from and where results go.
struct Source {
    sink: Box<dyn ResultSink>,
    /// Opens when the scheduling thread may start (None: at once).
    gate: Option<Arc<StartGate>>,
    kube_watches: Option<Arc<kubernetes::WatchStats>>,
    kube_synced: Option<Arc<StartGate>>,
    leading: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// Fires when this replica takes the Lease, and the gate to open once it has read the
    /// shared policy afresh.
    leader_handoff: Option<(tokio::sync::oneshot::Receiver<()>, Arc<StartGate>)>,
    /// The store's version, where `/v1/watch` starts.
    version: u64,
    /// Objects restored from the store.
    restored: usize,
}

impl Source {
    /// The server's [`Mode`]: Kubernetes mode when the objects come from an API server.
    fn mode(&mut self, shared_policy: Option<Arc<shared_policy::SharedPolicy>>) -> Mode {
        let parts = (
            self.kube_watches.take(),
            self.kube_synced.take(),
            shared_policy,
        );
        match parts {
            (Some(watches), Some(synced), Some(shared_policy)) => Mode::Kubernetes(KubeMode {
                watches,
                synced,
                leading: self.leading.take(),
                shared_policy,
            }),
            _ => Mode::Standalone,
        }
    }
}

/// Standalone mode: what the store acknowledged before a restart comes back as events, nodes and
/// storage first, and results are written to the store.
fn store_source(
    store: &Store,
    pipeline: &Arc<EventPipeline>,
    bindings: wasched_core::service::BindingFailures,
) -> anyhow::Result<Source> {
    let (version, mut objects) = store.list_objects(None, None)?;
    objects.sort_by_key(|o| o.kind() == Kind::Pod);
    let restored = objects.len();
    for object in objects {
        let object_version = object.resource_version().unwrap_or(0);
        pipeline.submit(Event::with_version(
            wasched_core::events::Action::Upsert,
            object,
            object_version,
        ));
    }
    Ok(Source {
        sink: Box::new(StoreSink {
            store: store.clone(),
            pipeline: pipeline.clone(),
            bindings,
        }),
        gate: None,
        kube_watches: None,
        kube_synced: None,
        leading: None,
        leader_handoff: None,
        version,
        restored,
    })
}

/// Kubernetes mode: the API server's watches feed `pipeline` and the gate opens once each kind
/// was listed; the returned sink binds through the API server.
fn kubernetes_source(
    args: &ServeArgs,
    client: kube::Client,
    runtime: tokio::runtime::Handle,
    pipeline: &Arc<EventPipeline>,
    failures: wasched_core::service::BindingFailures,
) -> anyhow::Result<Source> {
    let election = &args.kube.leader;
    let identity = leader::identity();
    if election.leader_elect {
        election.check()?;
    }
    let gate = Arc::new(StartGate::requiring(1 + usize::from(election.leader_elect)));
    let synced = Arc::new(StartGate::requiring(1));
    let stats = Arc::new(kubernetes::WatchStats::default());
    let _entered = runtime.enter();
    kubernetes::watch_cluster(&client, pipeline, &[gate.clone(), synced.clone()], &stats);
    let mut leader_handoff = None;
    let leading = election.leader_elect.then(|| {
        let leading = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (became_leader, handoff) = tokio::sync::oneshot::channel();
        leader_handoff = Some((handoff, gate.clone()));
        tokio::spawn(leader::campaign(
            client.clone(),
            election.clone(),
            identity.clone(),
            became_leader,
            leading.clone(),
        ));
        leading
    });
    let sink = Box::new(kubernetes::ApiSink::new(
        client,
        failures,
        Arc::new(kubernetes::Recorder::new(identity.clone())),
        runtime.clone(),
        args.kube.kube_api_qps,
        args.kube.kube_api_burst,
    ));
    Ok(Source {
        sink,
        gate: Some(gate),
        kube_watches: Some(stats),
        kube_synced: Some(synced),
        leading,
        leader_handoff,
        version: 0,
        restored: 0,
    })
}

/// How messages name a configuration from `source`, and the directory its relative paths start
/// from.
fn config_location(source: &ConfigSource, data_dir: &Path) -> (String, PathBuf) {
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

/// The policy a server starts with (its profiles' plugin usage still to fill in): uploaded
/// components, then the configuration that may use them. In Kubernetes mode (`shared`) both are
/// the cluster's, and a configuration put through the admin API of any replica wins over this
/// replica's `--config`.
fn stored_policy(
    args: &ServeArgs,
    store: &Store,
    shared: Option<&shared_policy::SharedPolicy>,
) -> anyhow::Result<Policy> {
    let Some(shared) = shared else {
        let mut uploaded = BTreeMap::new();
        let mut records = BTreeMap::new();
        for (record, bytes) in store.plugins()? {
            uploaded.insert(record.name.clone(), Arc::new(bytes));
            records.insert(record.name.clone(), record);
        }
        let mut policy = local_policy(args, uploaded, records)?;
        if let (Some(text), None) = (store.config()?, &args.config) {
            (policy.source, policy.text) = (ConfigSource::Store, text);
        }
        return Ok(policy);
    };
    let (index, version, components) = match off_runtime(|| shared.load()) {
        Ok(loaded) => loaded,
        Err(shared_policy::LoadError::Unreachable(e)) => {
            anyhow::bail!("loading the shared policy: {e}")
        }
        Err(shared_policy::LoadError::Refused(e)) => {
            refuse_shared_policy(shared, &e);
            return local_policy(args, BTreeMap::new(), BTreeMap::new());
        }
    };
    let records: BTreeMap<String, PluginRecord> = index
        .plugins
        .into_iter()
        .map(|p| (p.record.name.clone(), p.record))
        .collect();
    let mut policy = local_policy(args, components, records)?;
    if let Some(text) = index.config {
        (policy.source, policy.text) = (ConfigSource::Cluster(shared.location()), text);
    }
    policy.shared_version = version;
    Ok(policy)
}

/// This replica's own policy: `--config`, else the default profile, with `uploaded` components.
fn local_policy(
    args: &ServeArgs,
    uploaded: BTreeMap<String, Arc<Vec<u8>>>,
    records: BTreeMap<String, PluginRecord>,
) -> anyhow::Result<Policy> {
    let (source, text) = match &args.config {
        Some(path) => (
            ConfigSource::File(path.clone()),
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?,
        ),
        None => (ConfigSource::Default, String::new()),
    };
    Ok(Policy {
        source,
        text,
        uploaded,
        records,
        usage: BTreeMap::new(),
        chains: Vec::new(),
        shared_version: 0,
    })
}

/// Counts and logs a cluster policy a starting replica does not take in.
fn refuse_shared_policy(shared: &shared_policy::SharedPolicy, why: &str) {
    shared.stats.adopt_failures.fetch_add(1, Ordering::Relaxed);
    tracing::error!(
        "not taking in the policy of ConfigMap {}: {why}; starting with this replica's own configuration and waiting for a valid change",
        shared.location()
    );
}

/// Runs `work` on a thread of its own: it may block on the async runtime, which the calling
/// thread has entered.
fn off_runtime<T: Send>(work: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|scope| {
        scope
            .spawn(work)
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

async fn run_http(server: Arc<Server>, restored: usize) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(server.args.listen)
        .await
        .with_context(|| format!("listening on {}", server.args.listen))?;
    let address = listener.local_addr()?;
    // Tests and scripts read the address from this line (with `--listen 127.0.0.1:0`).
    println!("wasched listening on http://{address}");
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    tracing::info!(%address, restored, data_dir = %server.args.data_dir.display(), "serving");

    tokio::spawn(reload_on_sighup(server.clone()));
    let app = http::router(server.clone());
    let shutdown = server.shutdown.clone();
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            wait_for_stop_signal().await;
            tracing::info!("shutting down: finishing the running cycle");
            let _ = shutdown.send(true);
        })
        .await?;
    Ok(())
}

async fn wait_for_stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut terminate) = signal(SignalKind::terminate()) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
}

async fn reload_on_sighup(server: Arc<Server>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hangup) = signal(SignalKind::hangup()) else {
        return;
    };
    while hangup.recv().await.is_some() {
        let mut policy = server.policy.clone().lock_owned().await;
        let path = match policy.source.clone() {
            ConfigSource::File(path) => path,
            ConfigSource::Cluster(location) => {
                tracing::warn!("SIGHUP: the configuration put through the admin API, kept in ConfigMap {location}, wins over --config: nothing to reload");
                continue;
            }
            _ => {
                tracing::warn!("SIGHUP: no --config file to reload");
                continue;
            }
        };
        let server = server.clone();
        let outcome = tokio::task::spawn_blocking(move || {
            let text = std::fs::read_to_string(&path).map_err(|e| {
                PolicyError::new(StatusCode::BAD_REQUEST, format!("{}: {e}", path.display()))
            })?;
            server.apply_config(&mut policy, text, false)
        })
        .await;
        match outcome {
            Ok(Ok(())) => tracing::info!("SIGHUP: configuration reloaded"),
            Ok(Err(e)) => tracing::error!(
                "SIGHUP: configuration not reloaded, nothing changed: {}",
                e.message
            ),
            Err(e) => tracing::error!("SIGHUP: reload failed: {e}"),
        }
    }
}

#[cfg(test)]
mod backend_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listen_address_may_name_a_host() {
        assert_eq!(
            listen_address("localhost:7878").unwrap(),
            "127.0.0.1:7878".parse::<SocketAddr>().unwrap()
        );
        assert_eq!(
            listen_address("[::1]:80").unwrap(),
            "[::1]:80".parse::<SocketAddr>().unwrap()
        );
        assert!(listen_address("localhost").is_err(), "a port is needed");
    }
}
