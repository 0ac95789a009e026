//! wasched: a Kubernetes-compatible scheduler whose placement policy runs as WebAssembly components.
//!
//! This crate is the `wasched` command line and its batch drivers: [`simulate`] (a dump through
//! one pass), [`replay`] (a trace through time) and [`bench`] (synthetic clusters). It re-exports
//! the crates it is built from, so a library user needs only this one:
//!
//! - `wasched-core`: [`events`] -> [`cache`] and [`queue`] -> the [`framework`] cycle -> [`service`]
//!   (reserve, confirm) -> [`binding`] (what follows a decision), with native plugins ([`runtime`]). It links no WebAssembly runtime,
//!   HTTP server or store.
//! - `wasched-wasm`: plugins as components ([`component`]), the embedded default plugins
//!   ([`embedded`]), profile configuration ([`config`]) and plugin builds ([`plugin_build`]).
//! - `wasched-server`: `wasched serve` ([`server`]).
//!
//! `docs/ARCHITECTURE.md` walks one pod through them.

#![warn(missing_docs)]

pub use wasched_core::{
    binding, cache, clock, events, framework, input, k8s, metrics, nodetree, queue, runtime,
    service, shadow, synthetic, util, DEFAULT_SCHEDULER_NAME,
};
pub use wasched_server as server;
pub use wasched_wasm::{component, config, embedded, kube_config, language, plugin_build, wasi};

pub mod bench;
pub mod diff;
pub mod flags;
pub mod replay;
pub mod scheduler_perf;
pub mod simulate;
