//! End-to-end tests: the default plugins through both runtimes, the scheduling cycle, and the
//! `wasched` binary. One test binary, so it links once.

mod bench;
mod cycle;
mod gangs;
#[cfg(wasched_kube_emulator)]
mod kubernetes;
mod languages;
mod permit;
mod plugins;
mod preemption;
mod replay;
mod sandbox;
mod server;
mod service;
mod simulate;
mod support;
