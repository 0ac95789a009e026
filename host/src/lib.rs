//! wasched: a Kubernetes-compatible scheduler whose placement policy runs as WebAssembly components.
//!
//! Data flows one way: objects -> [`cache`] (nodes, pods placed on them, storage objects) ->
//! [`framework`] cycle (plugins from [`runtime`], arranged by [`config`] profiles) -> decision ->
//! back into the cache. [`simulate`] drives it over a cluster dump.

pub mod cache;
pub mod clock;
pub mod events;
pub mod k8s;
pub mod metrics;
pub mod nodetree;
pub mod plugin_build;
pub mod queue;
pub mod replay;
pub mod runtime;
pub mod server;
pub mod service;

/// The scheduler name of pods that do not set `spec.schedulerName`.
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";
pub mod bench;
pub mod config;
pub mod framework;
pub mod input;
pub mod simulate;
pub mod util;
