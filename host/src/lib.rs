//! wasched: a Kubernetes-compatible scheduler whose placement policy runs as WebAssembly components.
//!
//! Data flows one way: object changes -> [`events`] pipeline -> [`cache`] (nodes, pods placed on
//! them, storage objects) and [`queue`] -> [`framework`] cycle (plugins from [`runtime`], arranged
//! in [`config`] profiles) -> the pod assumed in the cache -> a [`service::Binder`] -> the binding
//! confirmed by the pod's next event. [`service`] runs that loop; [`server`] serves it over HTTP
//! with a store; [`simulate`], [`replay`] and [`bench`] drive it over dumps, traces and synthetic
//! clusters. `docs/ARCHITECTURE.md` walks one pod through it.

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
