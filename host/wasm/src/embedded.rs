//! The default plugins as components: `build.rs` compiles every crate under `plugins/` for
//! `wasm32-unknown-unknown`, wraps each into a component and embeds it here under its crate name.

use wasched_core::runtime::defaults::DefaultPlugin;

/// Each built crate's name with its component.
static COMPONENTS: &[(&str, &[u8])] = include!(concat!(env!("OUT_DIR"), "/embedded.rs"));

/// The component built from `plugin`'s crate.
pub fn component(plugin: &DefaultPlugin) -> &'static [u8] {
    COMPONENTS
        .iter()
        .find(|(crate_name, _)| *crate_name == plugin.crate_name)
        .map(|(_, bytes)| *bytes)
        .unwrap_or_else(|| {
            panic!(
                "{}: build.rs embeds every crate under plugins/, and {} is not one of them",
                plugin.name, plugin.crate_name
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasched_core::runtime::defaults::DEFAULT_PLUGINS;

    #[test]
    fn every_plugin_crate_is_a_default_plugin_and_every_default_plugin_is_embedded() {
        let mut embedded: Vec<&str> = COMPONENTS.iter().map(|(name, _)| *name).collect();
        let mut registered: Vec<&str> = DEFAULT_PLUGINS.iter().map(|p| p.crate_name).collect();
        embedded.sort();
        registered.sort();
        assert_eq!(embedded, registered);
        for plugin in DEFAULT_PLUGINS {
            assert!(component(plugin).starts_with(b"\0asm"), "{}", plugin.name);
        }
    }
}
