//! `wasched plugin build [PATH]`: builds a plugin folder into a component this host accepts.
//!
//! Rust crates (a `Cargo.toml` with a `cdylib` using the SDK) are built for
//! `wasm32-unknown-unknown` and encoded into a component with `wit-component`. Python folders are
//! built with `componentize-py` against the WIT this host embeds, with WASI stubbed out (a plugin
//! gets no imports); JavaScript folders with `componentize-js`, with stdio, random, clocks and HTTP
//! disabled (no imports either); C folders with `wit-bindgen c` and clang for wasm32-wasi, then
//! encoded like Rust. Every result is checked the way the server checks an upload.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context as _};

use crate::component::{sha256_hex, Limits, WasmRuntime};

const RUST_TARGET: &str = "wasm32-unknown-unknown";

/// What a build produced.
pub struct Built {
    /// Where the component was written.
    pub component: PathBuf,
    /// Its size in bytes.
    pub size: usize,
    /// Its SHA-256, in lowercase hex.
    pub sha256: String,
}

/// The language of a plugin folder, from the files in it.
pub fn detect(dir: &Path) -> anyhow::Result<&'static str> {
    if dir.join("Cargo.toml").is_file() {
        return Ok("rust");
    }
    let entries = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    let mut found = None;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        let language = match Path::new(&name).extension().and_then(|e| e.to_str()) {
            Some("c") => "c",
            Some("py") => "python",
            Some("js" | "ts" | "mjs") => "javascript",
            _ => continue,
        };
        found.get_or_insert(language);
    }
    found.with_context(|| {
        format!(
            "{}: no Cargo.toml, .c, .py or .js/.ts file: not a plugin folder",
            dir.display()
        )
    })
}

/// Builds the plugin in `dir`; `output` defaults to `<cargo target dir>/plugins/<lib>.wasm`.
///
/// # Errors
/// A missing toolchain (named, with how to install it), a failed build, or a component this host
/// would refuse.
pub fn build(dir: &Path, output: Option<&Path>) -> anyhow::Result<Built> {
    match detect(dir)? {
        "rust" => build_rust(dir, output),
        "python" => build_python(dir, output),
        "javascript" => build_javascript(dir, output),
        "c" => build_c(dir, output),
        other => bail!(
            "{}: {other} plugins are not built by this version of wasched yet; build a component \
             with your language's toolchain and check it with `wasched plugin inspect FILE.wasm`",
            dir.display()
        ),
    }
}

/// The contract Python, JavaScript and C plugins are built against: 0.1.0, which the host still
/// loads, so that their sources (and the examples) keep building unchanged. Their glue has no
/// 0.2.0 helpers yet; a plugin that needs existing pods is written in Rust with the SDK.
const PLUGIN_WIT: &str = include_str!("../../../wit/v0.1/plugin.wit");

/// The componentize-py release this host is tested with.
pub const COMPONENTIZE_PY: &str = "componentize-py==0.25.1";

/// The one source file of `dir` with an extension in `extensions` that contains `marker` (the
/// plugin's entry point, `what` in messages).
fn entry_module(
    dir: &Path,
    extensions: &[&str],
    marker: &str,
    what: &str,
) -> anyhow::Result<PathBuf> {
    let mut modules = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let extension = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        if extensions.contains(&extension)
            && std::fs::read_to_string(&path)
                .unwrap_or_default()
                .contains(marker)
        {
            modules.push(path);
        }
    }
    modules.sort();
    match modules.as_slice() {
        [one] => Ok(one.clone()),
        [] => bail!(
            "{}: no {} file has {what}, the plugin's entry point",
            dir.display(),
            extensions.join("/")
        ),
        many => bail!(
            "{}: several files have {what} ({}): keep one",
            dir.display(),
            many.iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn build_python(dir: &Path, output: Option<&Path>) -> anyhow::Result<Built> {
    let module = entry_module(dir, &["py"], "class WitWorld", "`class WitWorld`")?;
    let module = module
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tool = find_tool(
        "WASCHED_COMPONENTIZE_PY",
        &["componentize-py"],
        &["python/bin/componentize-py"],
    )
    .with_context(|| {
        format!(
            "componentize-py is not installed: run `pip install {COMPONENTIZE_PY}` (or set \
             WASCHED_COMPONENTIZE_PY to its path)"
        )
    })?;
    let name = plugin_file_name(dir, &module);
    let output = output_path(output, &name)?;
    let wit = wit_folder()?;
    let built = step(
        Command::new(&tool)
            .arg("-d")
            .arg(&wit)
            .args(["-w", "plugin", "componentize", "--stub-wasi", "-p"])
            .arg(dir)
            .arg(&module)
            .arg("-o")
            .arg(&output),
        "componentize-py",
    );
    let _ = std::fs::remove_dir_all(&wit);
    built?;
    accept(output, &name)
}

/// The componentize-js release this host is tested with.
pub const COMPONENTIZE_JS: &str = "@bytecodealliance/componentize-js@0.23.0";

/// Runs `tool --version`; false when it cannot be run.
fn runs(tool: &Path) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The folder's name as a file stem (`rack-spread` -> `rack_spread`).
fn plugin_file_name(dir: &Path, fallback: &str) -> String {
    dir.canonicalize()
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().replace('-', "_")))
        .unwrap_or_else(|| fallback.to_string())
}

/// `output`, or `target/plugins/NAME.wasm`, with its folder created.
fn output_path(output: Option<&Path>, name: &str) -> anyhow::Result<PathBuf> {
    let output = match output {
        Some(path) => path.to_path_buf(),
        None => PathBuf::from("target")
            .join("plugins")
            .join(format!("{name}.wasm")),
    };
    if let Some(parent) = output.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    Ok(output)
}

/// Writes the embedded WIT into a fresh folder for a guest toolchain to read.
fn wit_folder() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("wasched-wit-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("plugin.wit"), PLUGIN_WIT)?;
    Ok(dir)
}

/// Reads back what a guest toolchain wrote and checks the host accepts it.
fn accept(output: PathBuf, name: &str) -> anyhow::Result<Built> {
    let component =
        std::fs::read(&output).with_context(|| format!("reading {}", output.display()))?;
    WasmRuntime::shared()
        .load(name, &component, Limits::default())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(Built {
        component: output,
        size: component.len(),
        sha256: sha256_hex(&component),
    })
}

fn build_javascript(dir: &Path, output: Option<&Path>) -> anyhow::Result<Built> {
    let module = entry_module(
        dir,
        &["js", "mjs"],
        "export function init",
        "`export function init`",
    )?;
    let tool = find_tool(
        "WASCHED_COMPONENTIZE_JS",
        &["componentize-js"],
        &["js/node_modules/.bin/componentize-js"],
    )
    .with_context(|| {
        format!(
            "componentize-js is not installed: run `npm install {COMPONENTIZE_JS}` (or set \
             WASCHED_COMPONENTIZE_JS to node_modules/.bin/componentize-js)"
        )
    })?;
    let name = plugin_file_name(dir, "plugin");
    let output = output_path(output, &name)?;
    let wit = wit_folder()?;
    let built = step(
        Command::new(&tool)
            .arg(&module)
            .arg("--wit")
            .arg(&wit)
            .args(["--world-name", "plugin", "--disable"])
            .args(["stdio", "random", "clocks", "http", "fetch-event"])
            .arg("-o")
            .arg(&output),
        "componentize-js",
    );
    let _ = std::fs::remove_dir_all(&wit);
    built?;
    accept(output, &name)
}

/// The wit-bindgen release this host is tested with.
pub const WIT_BINDGEN: &str = "wit-bindgen-cli@0.46.0";

/// The first of `candidates` that runs.
fn first_runnable(candidates: &[PathBuf]) -> Option<PathBuf> {
    candidates.iter().find(|tool| runs(tool)).cloned()
}

/// A tool from `env` (when set) or the first of `names` that runs, on the PATH, in
/// `~/.cargo/bin`, or where `scripts/setup` installs guest tools (`installed`, relative to
/// `target/guest-tools` of the current directory or of the build this binary came from).
fn find_tool(env: &str, names: &[&str], installed: &[&str]) -> Option<PathBuf> {
    match std::env::var_os(env) {
        Some(path) => first_runnable(&[PathBuf::from(path)]),
        None => {
            let mut candidates: Vec<PathBuf> = names.iter().map(PathBuf::from).collect();
            if let Some(home) = std::env::var_os("HOME") {
                candidates.extend(
                    names
                        .iter()
                        .map(|n| Path::new(&home).join(".cargo/bin").join(n)),
                );
            }
            for dir in guest_tool_dirs() {
                candidates.extend(installed.iter().map(|tool| dir.join(tool)));
            }
            first_runnable(&candidates)
        }
    }
}

/// Where `scripts/setup` puts the guest toolchains: `target/guest-tools` of the checkout the
/// command runs in, and of the one whose `target/release/wasched` this is.
fn guest_tool_dirs() -> Vec<PathBuf> {
    let mut dirs = vec![PathBuf::from("target/guest-tools")];
    if let Some(target) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent()?.parent().map(Path::to_path_buf))
    {
        dirs.push(target.join("guest-tools"));
    }
    dirs
}

/// Runs a build step, printing it first.
fn step(command: &mut Command, what: &str) -> anyhow::Result<()> {
    let shown: Vec<String> = std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    eprintln!("running: {}", shown.join(" "));
    let status = command
        .status()
        .with_context(|| format!("cannot run {what}"))?;
    if !status.success() {
        bail!("{what} failed (see above)");
    }
    Ok(())
}

fn build_c(dir: &Path, output: Option<&Path>) -> anyhow::Result<Built> {
    let mut sources: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("c"))
        .collect();
    sources.sort();
    let bindgen = find_tool("WASCHED_WIT_BINDGEN", &["wit-bindgen"], &[]).with_context(|| {
        format!("wit-bindgen is not installed: run `cargo install --locked {WIT_BINDGEN}`")
    })?;
    let clang = find_tool("WASCHED_CLANG", &["clang-14", "clang"], &[]).context(
        "clang is not installed: C plugins need clang with the wasm32-wasi target and wasi-libc \
         (Debian: `apt-get install clang-14 lld-14 wasi-libc libclang-rt-14-dev-wasm32`), or set \
         WASCHED_CLANG",
    )?;
    let name = plugin_file_name(dir, "plugin");
    let output = output_path(output, &name)?;
    let work = wit_folder()?;
    let generated = work.join("gen");
    let module = work.join(format!("{name}.core.wasm"));
    let result = (|| -> anyhow::Result<Vec<u8>> {
        step(
            Command::new(&bindgen)
                .arg("c")
                .arg(&work)
                .args(["--world", "plugin", "--out-dir"])
                .arg(&generated),
            "wit-bindgen c",
        )?;
        step(
            Command::new(&clang)
                .args(["--target=wasm32-wasi", "-O2", "-mexec-model=reactor", "-s"])
                .arg("-I")
                .arg(&generated)
                .args(&sources)
                .arg(generated.join("plugin.c"))
                .arg(generated.join("plugin_component_type.o"))
                .arg("-o")
                .arg(&module),
            "clang (is wasi-libc installed?)",
        )?;
        let bytes =
            std::fs::read(&module).with_context(|| format!("reading {}", module.display()))?;
        wit_component::ComponentEncoder::default()
            .module(&bytes)
            .and_then(|encoder| encoder.validate(true).encode())
            .map_err(|e| {
                anyhow::anyhow!(
                    "{}: cannot make a component (a module using stdio imports WASI, which plugins \
                     may not): {e:#}",
                    module.display()
                )
            })
    })();
    let _ = std::fs::remove_dir_all(&work);
    std::fs::write(&output, result?).with_context(|| format!("writing {}", output.display()))?;
    accept(output, &name)
}

/// The component of a core module built with the SDK, checked to be one this host accepts.
///
/// # Errors
/// The module cannot be read, made into a component, or loaded.
pub fn encode_module(module: &Path) -> anyhow::Result<Vec<u8>> {
    let bytes = std::fs::read(module).with_context(|| format!("reading {}", module.display()))?;
    let component = wit_component::ComponentEncoder::default()
        .module(&bytes)
        .and_then(|encoder| encoder.validate(true).encode())
        .map_err(|e| anyhow::anyhow!("{}: cannot make a component: {e:#}", module.display()))?;
    let stem = module_stem(module);
    WasmRuntime::shared()
        .load(&stem, &component, Limits::default())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(component)
}

/// The module's file name without `.wasm`: the name its component is checked under.
fn module_stem(module: &Path) -> String {
    module
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "plugin".into())
}

/// The `.wasm` a line of cargo's JSON messages says it built for the crate in `dir`, if it says so.
fn built_module(line: &str, dir: &Path) -> Option<PathBuf> {
    let message = serde_json::from_str::<serde_json::Value>(line).ok()?;
    if message["reason"] != "compiler-artifact" {
        return None;
    }
    let is_cdylib = message["target"]["kind"]
        .as_array()
        .is_some_and(|kinds| kinds.iter().any(|k| k == "cdylib"));
    let manifest_matches = message["manifest_path"]
        .as_str()
        .is_some_and(|m| Path::new(m).parent() == std::fs::canonicalize(dir).ok().as_deref());
    if !(is_cdylib && manifest_matches) {
        return None;
    }
    message["filenames"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str())
        .find(|f| f.ends_with(".wasm"))
        .map(PathBuf::from)
}

fn build_rust(dir: &Path, output: Option<&Path>) -> anyhow::Result<Built> {
    let installed = Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .is_some_and(|sysroot| sysroot.join("lib/rustlib").join(RUST_TARGET).exists());
    if !installed {
        bail!(
            "the Rust target {RUST_TARGET} is not installed: run `rustup target add {RUST_TARGET}`"
        );
    }
    let manifest = dir.join("Cargo.toml");
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    command
        .args([
            "build",
            "--release",
            "--target",
            RUST_TARGET,
            "--message-format=json-render-diagnostics",
            "--manifest-path",
        ])
        .arg(&manifest)
        // Debug info would make the component several times larger and is never used by the host.
        .env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo")
        // As the default plugins are built: inlining the SDK and std into the plugin made them
        // 10-15% faster as components.
        .env("CARGO_PROFILE_RELEASE_LTO", "fat")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    eprintln!(
        "running: CARGO_PROFILE_RELEASE_LTO=fat CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 cargo build --release --target {RUST_TARGET} --manifest-path {}",
        manifest.display()
    );
    let mut child = command
        .spawn()
        .context("cannot run cargo: is Rust installed (https://rustup.rs)?")?;
    let mut module = None;
    for line in std::io::BufReader::new(child.stdout.take().expect("piped")).lines() {
        if let Some(wasm) = built_module(&line?, dir) {
            module = Some(wasm);
        }
    }
    if !child.wait()?.success() {
        bail!("cargo build failed (see above)");
    }
    let module = module.with_context(|| {
        format!(
            "{}: the build produced no .wasm: the crate needs `[lib] crate-type = [\"cdylib\"]`",
            manifest.display()
        )
    })?;
    let component = encode_module(&module)?;
    let stem = module_stem(&module);
    let output = match output {
        Some(path) => path.to_path_buf(),
        // <target>/wasm32-unknown-unknown/release/x.wasm -> <target>/plugins/x.wasm
        None => module
            .ancestors()
            .nth(3)
            .unwrap_or(Path::new("."))
            .join("plugins")
            .join(format!("{stem}.wasm")),
    };
    if let Some(parent) = output.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&output, &component).with_context(|| format!("writing {}", output.display()))?;
    Ok(Built {
        component: output,
        size: component.len(),
        sha256: sha256_hex(&component),
    })
}
