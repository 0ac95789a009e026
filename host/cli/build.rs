//! Tells the end-to-end tests which guest toolchains this machine has: each language's plugin test
//! (and the output-flood test, whose plugin needs wasm32-wasip2) is compiled out, with a warning,
//! when its toolchain is missing. `scripts/setup` installs them all.

use std::env;
use std::path::{Path, PathBuf};

fn main() {
    let root = wasched_guest_build::workspace_root();
    // Python and JavaScript plugins need componentize-py / componentize-js (under target/guest-tools).
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

    // Kubernetes mode is tested against kmock's emulator, installed in the Python virtualenv.
    println!("cargo:rustc-check-cfg=cfg(wasched_kube_emulator)");
    println!("cargo:rerun-if-env-changed=WASCHED_KUBE_PYTHON");
    let python_env = root.join("target/guest-tools/python");
    let python = env::var_os("WASCHED_KUBE_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| python_env.join("bin/python3"));
    let kmock_installed = std::fs::read_dir(python_env.join("lib"))
        .into_iter()
        .flatten()
        .flatten()
        .any(|dir| dir.path().join("site-packages/kmock").is_dir());
    if python.is_file() && (kmock_installed || env::var_os("WASCHED_KUBE_PYTHON").is_some()) {
        println!(
            "cargo:rerun-if-changed={}",
            python_env.join("lib").display()
        );
        println!("cargo:rustc-env=WASCHED_KUBE_PYTHON={}", python.display());
        println!("cargo:rustc-cfg=wasched_kube_emulator");
    } else {
        println!("cargo:warning=kmock is not installed (scripts/setup installs it): the Kubernetes-mode tests are skipped");
    }

    // C plugins need wit-bindgen and clang with wasi-libc.
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

    // wasched-test-programs builds the noisy plugin only when this target is installed.
    println!("cargo:rustc-check-cfg=cfg(wasched_flood_plugin)");
    if wasched_guest_build::wasip2_installed() {
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
