//! Builds every default plugin under `plugins/` as a WebAssembly component and generates
//! `embedded.rs`, which includes them by crate name (see `src/embedded.rs`).

use std::fmt::Write;
use std::path::{Path, PathBuf};

use wasched_guest_build as guest;

fn main() {
    let root = guest::workspace_root();
    guest::rerun_if_changed(&root, &["sdk", "plugins", "wit", "Cargo.lock"]);
    let target_dir = guest::target_dir(&root);
    let plugins = plugin_packages(&root.join("plugins"));
    let packages: Vec<&str> = plugins.iter().map(String::as_str).collect();
    guest::build(&root, &target_dir, &packages, &[]);

    let out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let mut table = String::from("&[\n");
    for package in &plugins {
        let file = package.replace('-', "_");
        let output = out_dir.join(format!("{file}.component.wasm"));
        guest::encode(&target_dir, package, &file, &output);
        writeln!(
            table,
            "    ({file:?}, include_bytes!({:?})),",
            output.display()
        )
        .unwrap();
    }
    table.push(']');
    std::fs::write(out_dir.join("embedded.rs"), table).unwrap();
}

/// The package names of the crates directly under `dir`, sorted.
fn plugin_packages(dir: &Path) -> Vec<String> {
    let mut packages: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(|entry| {
            let manifest = std::fs::read_to_string(entry.ok()?.path().join("Cargo.toml")).ok()?;
            package_name(&manifest)
        })
        .collect();
    packages.sort();
    packages
}

/// The `name` of a manifest's `[package]` table.
fn package_name(manifest: &str) -> Option<String> {
    let package = manifest.split("[package]").nth(1)?;
    let line = package
        .lines()
        .find(|l| l.trim_start().starts_with("name"))?;
    Some(line.split('"').nth(1)?.to_string())
}
