//! `wasched serve`: the scheduler as a daemon with a cluster API, an admin API for hot-loading
//! plugins and reloading the configuration, a watch of scheduling events, and metrics.
//!
//! Threads: tokio serves HTTP; the scheduling thread and the status writer are in [`engine`];
//! compilation and profile building for a hot load run on tokio's blocking pool, so a cycle never
//! waits for them. Changes to the policy (plugins, configuration) are serialized by one lock.

#![warn(missing_docs)]

pub mod auth;
pub mod claims;
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

mod args;
mod policy;
mod startup;

pub use args::{default_data_dir, ConfigSource, LogFormat, ServeArgs, DEFAULT_LISTEN};
pub use policy::{valid_plugin_name, LoadedPlugin, Policy, PolicyError};
pub use startup::serve;

use std::sync::Arc;

use auth::Tokens;
use engine::{Engine, EngineMetrics, StartGate};
use store::Store;
use wasched_core::clock::Clock;
use wasched_core::events::EventPipeline;
use wasched_core::metrics::PluginStatsRegistry;
use watch::WatchLog;

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

#[cfg(test)]
mod backend_tests;
