//! wasched's WebAssembly side: plugins as components under wasmtime ([`component`], sandboxed by
//! memory limits, call deadlines and a WASI context with nothing in it: [`wasi`]), the default
//! plugins built as components and embedded ([`embedded`]), the profile configuration that turns
//! a TOML file into plugin chains of either runtime ([`config`]), and `wasched plugin build`
//! ([`plugin_build`]).

#![warn(missing_docs)]

pub mod component;
pub mod config;
pub mod embedded;
pub mod kube_config;
pub mod language;
mod legacy;
pub mod plugin_build;
pub mod shadow_config;
pub mod wasi;
