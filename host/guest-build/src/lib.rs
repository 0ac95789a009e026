//! Helpers for the build scripts that compile guest crates (the default plugins embedded by
//! `wasched-wasm`, the test programs built by `wasched-test-programs`): a nested cargo with its own
//! target directory, so it never waits on the outer build's lock, and the wrapping of a core module
//! into a component with `wit-component`.

#![warn(missing_docs)]

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The target guests are compiled for: a core module with no imports, wrapped into a component.
pub const WASM_TARGET: &str = "wasm32-unknown-unknown";

/// The workspace root, two levels above the crate whose build script calls this.
pub fn workspace_root() -> PathBuf {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    manifest_dir
        .ancestors()
        .find(|dir| dir.join("Cargo.lock").is_file())
        .expect("the crate lies inside the wasched workspace")
        .to_path_buf()
}

/// The nested build's target directory: `$WASCHED_WASM_TARGET_DIR`, else `target/wasm-plugins`.
pub fn target_dir(root: &Path) -> PathBuf {
    println!("cargo:rerun-if-env-changed=WASCHED_WASM_TARGET_DIR");
    env::var_os("WASCHED_WASM_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target").join("wasm-plugins"))
}

/// Asks cargo to rerun the build script when anything under these workspace paths changes.
pub fn rerun_if_changed(root: &Path, paths: &[&str]) {
    for path in paths {
        println!("cargo:rerun-if-changed={}", root.join(path).display());
    }
}

/// Builds `packages` for [`WASM_TARGET`] in one nested cargo; panics with the fix when it fails.
pub fn build(root: &Path, target_dir: &Path, packages: &[&str], features: &[&str]) {
    let mut command = guest_cargo(root, target_dir, WASM_TARGET);
    for package in packages {
        command.args(["-p", package]);
    }
    for feature in features {
        command.args(["--features", feature]);
    }
    guest_fallback(root, &mut command);
    let status = command
        .status()
        .unwrap_or_else(|e| panic!("cannot run cargo to build {packages:?}: {e}"));
    if !status.success() {
        panic!(
            "building {packages:?} for {WASM_TARGET} failed (see above). If the target is missing, \
             install it with: rustup target add {WASM_TARGET}"
        );
    }
}

/// Wraps the core module built for `package` (its file name `file`) into a component at `output`.
pub fn encode(target_dir: &Path, package: &str, file: &str, output: &Path) {
    let module_path = target_dir
        .join(WASM_TARGET)
        .join("release")
        .join(format!("{file}.wasm"));
    let module = std::fs::read(&module_path)
        .unwrap_or_else(|e| panic!("{package}: cannot read {}: {e}", module_path.display()));
    let component = wit_component::ComponentEncoder::default()
        .module(&module)
        .and_then(|encoder| encoder.validate(true).encode())
        .unwrap_or_else(|e| panic!("{package}: cannot encode a component: {e:#}"));
    std::fs::write(output, component).unwrap();
}

/// Whether the toolchain building the host has the wasm32-wasip2 target installed.
pub fn wasip2_installed() -> bool {
    let sysroot = Command::new(env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    sysroot.is_some_and(|s| s.join("lib/rustlib/wasm32-wasip2").exists())
}

/// Builds one crate for wasm32-wasip2 (which links a component directly) and returns the
/// component's path; panics when the build fails. Check [`wasip2_installed`] first.
pub fn build_wasip2(root: &Path, target_dir: &Path, package: &str, file: &str) -> PathBuf {
    let mut command = guest_cargo(root, target_dir, "wasm32-wasip2");
    command.args(["-p", package]);
    assert!(
        command.status().is_ok_and(|s| s.success()),
        "building {package} for wasm32-wasip2 failed (see above)"
    );
    target_dir
        .join("wasm32-wasip2")
        .join("release")
        .join(format!("{file}.wasm"))
}

/// The outer build's settings (clippy's wrapper, coverage or sanitizer flags, its target) are for
/// the host, not for the guests.
fn clean_env(command: &mut Command) {
    for var in [
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTC_WRAPPER",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_PRIMARY_PACKAGE",
    ] {
        command.env_remove(var);
    }
    command
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo")
        // Plugins are small crates: whole-program optimization inlines the SDK and std into each
        // one, which made the default plugins' cycle 10-15% faster as components.
        .env("CARGO_PROFILE_RELEASE_LTO", "fat")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1");
}

/// A `cargo build --release --target <target>` of guest crates into `target_dir`, with the outer
/// build's settings removed.
fn guest_cargo(root: &Path, target_dir: &Path, target: &str) -> Command {
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut command = Command::new(cargo);
    command
        .current_dir(root)
        .args(["build", "--release", "--target", target, "--target-dir"])
        .arg(target_dir);
    clean_env(&mut command);
    command
}

/// Fallback written by scripts/setup when rustup cannot fetch the wasm target: Debian's rustc-web
/// builds the guests' std from source.
fn guest_fallback(root: &Path, command: &mut Command) {
    command.env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "3");
    let fallback = root.join("target").join("guest-rustc");
    // A missing file named here would make cargo rerun this script, and rebuild everything
    // above it, on every build: scripts/setup always writes the file (empty without fallback).
    if fallback.exists() {
        println!("cargo:rerun-if-changed={}", fallback.display());
    }
    if let Ok(rustc) = std::fs::read_to_string(&fallback) {
        let rustc = rustc.trim();
        if !rustc.is_empty() {
            command
                .env("RUSTC", rustc)
                .env("RUSTC_BOOTSTRAP", "1")
                .env("CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER", "wasm-ld-19")
                .arg("-Zbuild-std=std,panic_abort");
        }
    }
}
