//! Builds the default plugins as WebAssembly components and embeds them in the binary.
//!
//! Each crate under `plugins/` is compiled for `wasm32-unknown-unknown` by a nested cargo (with its
//! own target directory, so it never waits on the outer build's lock), then wrapped into a component
//! with `wit-component`. The components land in `OUT_DIR` and `src/runtime/defaults.rs` includes them.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Plugin crates built as components, with the file name their build produces.
const PLUGINS: &[(&str, &str)] = &[
    ("wasched-node-unschedulable", "wasched_node_unschedulable"),
    ("wasched-node-name", "wasched_node_name"),
    ("wasched-taint-toleration", "wasched_taint_toleration"),
    ("wasched-node-affinity", "wasched_node_affinity"),
    ("wasched-node-resources-fit", "wasched_node_resources_fit"),
    ("wasched-balanced-allocation", "wasched_balanced_allocation"),
    ("wasched-volume-zone", "wasched_volume_zone"),
];

/// Test-only components (deliberately misbehaving plugins for the sandbox tests, the hot-swap
/// fixture, the GPU packing example the replay test compares against the defaults): built beside
/// the default plugins but not embedded; tests find them through `WASCHED_HOSTILE_COMPONENTS`.
const HOSTILE: &[(&str, &str)] = &[
    ("wasched-hostile-spin", "wasched_hostile_spin"),
    ("wasched-hostile-hog", "wasched_hostile_hog"),
    ("wasched-hostile-trap-some", "wasched_hostile_trap_some"),
    ("wasched-hostile-bad-score", "wasched_hostile_bad_score"),
    (POOL_PREFERENCE, "wasched_fixture_pool_preference"),
    ("wasched-example-gpu-packing", "wasched_example_gpu_packing"),
];

/// Built twice (version one, then with the `green` feature) for the hot-swap test.
const POOL_PREFERENCE: &str = "wasched-fixture-pool-preference";

const WASM_TARGET: &str = "wasm32-unknown-unknown";

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest_dir.parent().unwrap().to_path_buf();
    for watched in [
        "sdk",
        "plugins",
        "examples/hostile",
        "examples/fixtures",
        "examples/plugins/rust/gpu-packing",
        "wit",
        "Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(watched).display());
    }
    println!("cargo:rerun-if-env-changed=WASCHED_WASM_TARGET_DIR");

    let target_dir = env::var_os("WASCHED_WASM_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target").join("wasm-plugins"));
    build_plugins(&root, &target_dir);

    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    let hostile_dir = out_dir.join("hostile");
    std::fs::create_dir_all(&hostile_dir).unwrap();
    for (package, file) in PLUGINS {
        let output = out_dir.join(format!("{file}.component.wasm"));
        encode(&target_dir, package, file, &output);
    }
    for (package, file) in HOSTILE {
        encode(
            &target_dir,
            package,
            file,
            &hostile_dir.join(format!("{file}.wasm")),
        );
    }
    // Version two overwrites version one's module, so it is built after the loop above encoded it.
    let mut green = guest_cargo(&root, &target_dir, WASM_TARGET);
    green.args(["-p", POOL_PREFERENCE, "--features", "green"]);
    guest_fallback(&root, &mut green);
    assert!(
        green.status().is_ok_and(|s| s.success()),
        "building {POOL_PREFERENCE} --features green failed (see above)"
    );
    encode(
        &target_dir,
        POOL_PREFERENCE,
        "wasched_fixture_pool_preference",
        &hostile_dir.join("wasched_fixture_pool_preference_green.wasm"),
    );
    println!(
        "cargo:rustc-env=WASCHED_HOSTILE_COMPONENTS={}",
        hostile_dir.display()
    );

    // Python and JavaScript plugins need componentize-py / componentize-js (scripts/setup installs
    // them under target/guest-tools); without one, that language's test is compiled out.
    guest_tool(
        "WASCHED_COMPONENTIZE_PY",
        root.join("target/guest-tools/python/bin/componentize-py"),
        "wasched_python_plugins",
        "componentize-py",
        "Python",
    );
    guest_tool(
        "WASCHED_COMPONENTIZE_JS",
        root.join("target/guest-tools/js/node_modules/.bin/componentize-js"),
        "wasched_javascript_plugins",
        "componentize-js",
        "JavaScript",
    );

    // C plugins need wit-bindgen and clang with wasi-libc (scripts/setup installs them).
    println!("cargo:rustc-check-cfg=cfg(wasched_c_plugins)");
    println!("cargo:rerun-if-env-changed=WASCHED_WIT_BINDGEN");
    let wit_bindgen = env::var_os("WASCHED_WIT_BINDGEN")
        .map(PathBuf::from)
        .or_else(|| env::var_os("CARGO_HOME").map(|h| PathBuf::from(h).join("bin/wit-bindgen")))
        .filter(|p| p.is_file())
        .or_else(|| {
            env::var_os("HOME")
                .map(|h| PathBuf::from(h).join(".cargo/bin/wit-bindgen"))
                .filter(|p| p.is_file())
        });
    // Debian installs wasi-libc under /usr/lib/wasm32-wasi; upstream SDKs as a wasi-sysroot.
    let wasi_libc = ["/usr/lib/wasm32-wasi", "/usr/share/wasi-sysroot"]
        .iter()
        .any(|p| Path::new(p).is_dir());
    match wit_bindgen {
        Some(tool) if wasi_libc => {
            println!("cargo:rerun-if-changed={}", tool.display());
            println!("cargo:rustc-env=WASCHED_WIT_BINDGEN={}", tool.display());
            println!("cargo:rustc-cfg=wasched_c_plugins");
        }
        _ => println!(
            "cargo:warning=wit-bindgen or wasi-libc is not installed (scripts/setup installs them): the C plugin test is skipped"
        ),
    }

    // The noisy plugin needs WASI to print: it is built for wasm32-wasip2, which links a
    // component directly. Without that target its test is compiled out.
    println!("cargo:rustc-check-cfg=cfg(wasched_flood_plugin)");
    if build_wasip2_plugin(&root, &target_dir, "wasched-hostile-flood") {
        let built = target_dir
            .join("wasm32-wasip2")
            .join("release")
            .join("wasched_hostile_flood.wasm");
        std::fs::copy(&built, hostile_dir.join("wasched_hostile_flood.wasm")).unwrap();
        println!("cargo:rustc-cfg=wasched_flood_plugin");
    } else {
        println!("cargo:warning=wasm32-wasip2 is not installed: the output-flood sandbox test is skipped");
    }
}

/// Enables `cfg` and passes the tool's path to the tests in `env_var` when the tool (from
/// `env_var`, else `default`) is installed; otherwise warns that `language`'s test is skipped.
fn guest_tool(env_var: &str, default: PathBuf, cfg: &str, tool: &str, language: &str) {
    println!("cargo:rustc-check-cfg=cfg({cfg})");
    println!("cargo:rerun-if-env-changed={env_var}");
    let path = env::var_os(env_var).map(PathBuf::from).unwrap_or(default);
    if path.is_file() {
        println!("cargo:rerun-if-changed={}", path.display());
        println!("cargo:rustc-env={env_var}={}", path.display());
        println!("cargo:rustc-cfg={cfg}");
    } else {
        println!(
            "cargo:warning={tool} is not installed (scripts/setup installs it): the {language} plugin test is skipped"
        );
    }
}

/// Builds one plugin crate for wasm32-wasip2; false when that target is unavailable.
fn build_wasip2_plugin(root: &Path, target_dir: &Path, package: &str) -> bool {
    let sysroot = Command::new(env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    let installed = sysroot.is_some_and(|s| s.join("lib/rustlib/wasm32-wasip2").exists());
    if !installed {
        return false;
    }
    let mut command = guest_cargo(root, target_dir, "wasm32-wasip2");
    command.args(["-p", package]);
    command.status().is_ok_and(|s| s.success())
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

/// Wraps a built core module into a component at `output`.
fn encode(target_dir: &Path, package: &str, file: &str, output: &Path) {
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
    println!("cargo:rerun-if-changed={}", fallback.display());
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

fn build_plugins(root: &Path, target_dir: &Path) {
    let mut command = guest_cargo(root, target_dir, WASM_TARGET);
    for (package, _) in PLUGINS.iter().chain(HOSTILE) {
        command.args(["-p", package]);
    }
    guest_fallback(root, &mut command);
    let status = command
        .status()
        .unwrap_or_else(|e| panic!("cannot run cargo to build the default plugins: {e}"));
    if !status.success() {
        panic!(
            "building the default plugins for {WASM_TARGET} failed (see above). If the target is \
             missing, install it with: rustup target add {WASM_TARGET}"
        );
    }
}
