//! wasched's scheduling core: everything that decides where a pod goes, with no WebAssembly
//! runtime, HTTP server or store linked in.
//!
//! Data flows one way: object changes -> [`events`] pipeline -> [`cache`] (nodes, pods placed on
//! them, storage objects; [`nodetree`] orders nodes across zones) and [`queue`] -> [`framework`]
//! cycle (plugins behind the [`runtime`] traits, arranged in profiles) -> the pod assumed in the
//! cache (Reserve) -> the [`binding`] cycle through a [`binding::Backend`] -> the binding confirmed
//! by the pod's next event. [`service`]
//! runs that loop. `wasched-wasm` adds the component runtime and profile configuration,
//! `wasched-server` serves the loop over HTTP, and the `wasched` crate is the command line.
//! `docs/ARCHITECTURE.md` walks one pod through it.

#![warn(missing_docs)]

pub mod binding;
pub mod cache;
pub mod clock;
pub mod events;
pub mod framework;
pub mod gangs;
pub mod input;
pub mod k8s;
pub mod metrics;
pub mod nodetree;
pub mod queue;
pub mod result;
pub mod runtime;
pub mod service;
pub mod shadow;
pub mod spread;
pub mod synthetic;
pub mod util;
pub mod waiting;

/// The scheduler name of pods that do not set `spec.schedulerName`.
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";
