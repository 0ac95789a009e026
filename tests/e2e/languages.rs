//! Plugins written in other languages than Rust, built from source with `wasched plugin build` and
//! scheduled with, each on a fixture cluster.

#![cfg_attr(
    not(any(wasched_python_plugins, wasched_javascript_plugins, wasched_c_plugins)),
    allow(dead_code)
)]

use std::path::Path;
use std::process::Command;

/// Builds `examples/plugins/{example}` with `wasched plugin build` (the toolchain given by
/// `tool_env`), points `examples/configs/{config}.toml` at the result, simulates
/// `examples/clusters/{cluster}.yaml` with it, and returns the build's stderr, the component's size
/// and the placements.
fn build_and_simulate(
    example: &str,
    tool_env: (&str, &str),
    config: &str,
    cluster: &str,
) -> (String, u64, Vec<serde_json::Value>) {
    let root = &crate::support::repo_root();
    let dir = std::env::temp_dir().join(format!("wasched-{config}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = Path::new(example)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .replace('-', "_");
    let component = dir.join(format!("{file}.wasm"));
    let build = Command::new(env!("CARGO_BIN_EXE_wasched"))
        .args(["plugin", "build"])
        .arg(root.join("examples/plugins").join(example))
        .arg("-o")
        .arg(&component)
        .env(tool_env.0, tool_env.1)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&build.stderr).into_owned();
    assert!(build.status.success(), "{stderr}");

    let text =
        std::fs::read_to_string(root.join(format!("examples/configs/{config}.toml"))).unwrap();
    let shipped = format!("../../target/plugins/{file}.wasm");
    assert!(text.contains(&shipped), "{config}.toml loads {shipped}");
    let config_file = dir.join(format!("{config}.toml"));
    std::fs::write(
        &config_file,
        text.replace(&shipped, component.to_str().unwrap()),
    )
    .unwrap();
    let simulate = Command::new(env!("CARGO_BIN_EXE_wasched"))
        .args(["simulate", "--config"])
        .arg(&config_file)
        .arg(root.join(format!("examples/clusters/{cluster}.yaml")))
        .output()
        .unwrap();
    assert!(
        simulate.status.success(),
        "{}",
        String::from_utf8_lossy(&simulate.stderr)
    );
    let placements = String::from_utf8_lossy(&simulate.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let size = std::fs::metadata(&component).unwrap().len();
    (stderr, size, placements)
}

/// The placement of `pod`.
fn placement<'a>(placements: &'a [serde_json::Value], pod: &str) -> &'a serde_json::Value {
    placements
        .iter()
        .find(|p| p["pod"] == pod)
        .unwrap_or_else(|| panic!("{pod} missing: {placements:?}"))
}

#[cfg(wasched_python_plugins)]
#[test]
fn the_python_gpu_model_filter_is_built_loaded_and_decides_placements() {
    let (stderr, _, placements) = build_and_simulate(
        "python/gpu-model",
        ("WASCHED_COMPONENTIZE_PY", env!("WASCHED_COMPONENTIZE_PY")),
        "gpu-model",
        "gpu-models",
    );
    assert!(stderr.contains("componentize --stub-wasi"), "{stderr}");
    let node = |pod: &str| placement(&placements, pod)["node"].clone();
    let train = node("ml/train");
    assert!(
        train == "a100-1" || train == "a100-2",
        "A100 asked for: {train}"
    );
    assert_eq!(node("ml/infer"), "t4-1", "T4 or L4 asked for");
    assert_eq!(
        node("shop/web"),
        "cpu-1",
        "no annotation: any node that fits"
    );
    let exotic = placement(&placements, "ml/exotic");
    assert_eq!(exotic["node"], serde_json::Value::Null);
    assert_eq!(
        exotic["message"],
        "0/4 nodes are available: 4 node(s) didn't have the requested GPU model. preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."
    );
}

#[cfg(wasched_python_plugins)]
#[test]
fn plugin_build_finds_the_python_toolchain_where_setup_installed_it() {
    let root = &crate::support::repo_root();
    let output = std::env::temp_dir().join(format!("wasched-found-{}.wasm", std::process::id()));
    let build = Command::new(env!("CARGO_BIN_EXE_wasched"))
        .args(["plugin", "build", "examples/plugins/python/gpu-model", "-o"])
        .arg(&output)
        .current_dir(root)
        .env_remove("WASCHED_COMPONENTIZE_PY")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&build.stderr);
    assert!(build.status.success(), "{stderr}");
    assert!(
        stderr.contains("guest-tools/python/bin/componentize-py"),
        "{stderr}"
    );
    let _ = std::fs::remove_file(output);
}

#[cfg(wasched_javascript_plugins)]
#[test]
fn the_javascript_rack_spread_scorer_is_built_loaded_and_spreads_pods_over_racks() {
    use std::collections::BTreeMap;

    let (stderr, _, placements) = build_and_simulate(
        "javascript/rack-spread",
        ("WASCHED_COMPONENTIZE_JS", env!("WASCHED_COMPONENTIZE_JS")),
        "rack-spread",
        "racks",
    );
    assert!(stderr.contains("--world-name plugin --disable"), "{stderr}");
    // Already running: three pods in r1, one in r2.
    let mut per_rack: BTreeMap<String, usize> = [
        ("r1".to_string(), 3),
        ("r2".to_string(), 1),
        ("r3".to_string(), 0),
    ]
    .into();
    let mut new_in_r1 = 0;
    for placement in &placements {
        let node = placement["node"]
            .as_str()
            .unwrap_or_else(|| panic!("{placement}"));
        let rack = node.split('-').next().unwrap().to_string();
        if rack == "r1" {
            new_in_r1 += 1;
        }
        *per_rack.get_mut(&rack).unwrap() += 1;
    }
    let counts: Vec<usize> = per_rack.values().copied().collect();
    assert_eq!(counts.iter().sum::<usize>(), 10, "all six new pods placed");
    assert!(
        counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1,
        "pods per rack {per_rack:?}"
    );
    assert!(
        new_in_r1 <= 1,
        "r1's big, least allocated nodes only get a pod once the other racks caught up: {per_rack:?}"
    );
}

#[cfg(wasched_c_plugins)]
#[test]
fn the_c_maintenance_filter_is_built_loaded_and_keeps_pods_off_nodes_in_a_window() {
    let (stderr, size, placements) = build_and_simulate(
        "c/maintenance",
        ("WASCHED_WIT_BINDGEN", env!("WASCHED_WIT_BINDGEN")),
        "maintenance",
        "maintenance",
    );
    assert!(stderr.contains("--target=wasm32-wasi"), "{stderr}");
    assert!(size < 200_000, "a C plugin stays small: {size} bytes");
    let node = |pod: &str| placement(&placements, pod)["node"].clone();
    assert_eq!(node("shop/web"), "small-1", "big nodes are in a window");
    assert_eq!(
        placement(&placements, "shop/batch")["message"],
        "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) were in a maintenance window. preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, 2 Preemption is not helpful for scheduling."
    );
    let updater = node("ops/firmware-updater");
    assert!(
        updater == "big-1" || updater == "big-2",
        "the allowed pod may use them: {updater}"
    );
}
