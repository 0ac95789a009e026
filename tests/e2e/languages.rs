//! Plugins written in other languages than Rust, built from source with `wasched plugin build` and
//! scheduled with, each on a fixture cluster.

#[cfg(wasched_python_plugins)]
#[test]
fn the_python_gpu_model_filter_is_built_loaded_and_decides_placements() {
    use std::path::Path;
    use std::process::Command;

    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let dir = std::env::temp_dir().join(format!("wasched-python-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let component = dir.join("gpu_model.wasm");
    let build = Command::new(env!("CARGO_BIN_EXE_wasched"))
        .args(["plugin", "build"])
        .arg(root.join("examples/plugins/python/gpu-model"))
        .arg("-o")
        .arg(&component)
        .env("WASCHED_COMPONENTIZE_PY", env!("WASCHED_COMPONENTIZE_PY"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&build.stderr);
    assert!(build.status.success(), "{stderr}");
    assert!(stderr.contains("componentize --stub-wasi"), "{stderr}");

    // The example configuration, pointed at the component just built.
    let config = std::fs::read_to_string(root.join("examples/configs/gpu-model.toml"))
        .unwrap()
        .replace(
            "../../target/plugins/gpu_model.wasm",
            component.to_str().unwrap(),
        );
    let config_file = dir.join("gpu-model.toml");
    std::fs::write(&config_file, config).unwrap();
    let simulate = Command::new(env!("CARGO_BIN_EXE_wasched"))
        .args(["simulate", "--config"])
        .arg(&config_file)
        .arg(root.join("examples/clusters/gpu-models.yaml"))
        .output()
        .unwrap();
    assert!(
        simulate.status.success(),
        "{}",
        String::from_utf8_lossy(&simulate.stderr)
    );
    let placements: Vec<serde_json::Value> = String::from_utf8_lossy(&simulate.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let node = |pod: &str| {
        placements
            .iter()
            .find(|p| p["pod"] == pod)
            .unwrap_or_else(|| panic!("{pod} missing: {placements:?}"))["node"]
            .clone()
    };
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
    let exotic = placements.iter().find(|p| p["pod"] == "ml/exotic").unwrap();
    assert_eq!(exotic["node"], serde_json::Value::Null);
    assert_eq!(
        exotic["message"],
        "0/4 nodes are available: 4 node(s) didn't have the requested GPU model."
    );
}

#[cfg(wasched_javascript_plugins)]
#[test]
fn the_javascript_rack_spread_scorer_is_built_loaded_and_spreads_pods_over_racks() {
    use std::collections::BTreeMap;
    use std::path::Path;
    use std::process::Command;

    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let dir = std::env::temp_dir().join(format!("wasched-javascript-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let component = dir.join("rack_spread.wasm");
    let build = Command::new(env!("CARGO_BIN_EXE_wasched"))
        .args(["plugin", "build"])
        .arg(root.join("examples/plugins/javascript/rack-spread"))
        .arg("-o")
        .arg(&component)
        .env("WASCHED_COMPONENTIZE_JS", env!("WASCHED_COMPONENTIZE_JS"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&build.stderr);
    assert!(build.status.success(), "{stderr}");
    assert!(stderr.contains("--world-name plugin --disable"), "{stderr}");

    let config = std::fs::read_to_string(root.join("examples/configs/rack-spread.toml"))
        .unwrap()
        .replace(
            "../../target/plugins/rack_spread.wasm",
            component.to_str().unwrap(),
        );
    let config_file = dir.join("rack-spread.toml");
    std::fs::write(&config_file, config).unwrap();
    let simulate = Command::new(env!("CARGO_BIN_EXE_wasched"))
        .args(["simulate", "--config"])
        .arg(&config_file)
        .arg(root.join("examples/clusters/racks.yaml"))
        .output()
        .unwrap();
    assert!(
        simulate.status.success(),
        "{}",
        String::from_utf8_lossy(&simulate.stderr)
    );
    // Already running: three pods in r1, one in r2.
    let mut per_rack: BTreeMap<String, usize> = [
        ("r1".to_string(), 3),
        ("r2".to_string(), 1),
        ("r3".to_string(), 0),
    ]
    .into();
    let mut new_in_r1 = 0;
    for line in String::from_utf8_lossy(&simulate.stdout).lines() {
        let placement: serde_json::Value = serde_json::from_str(line).unwrap();
        let node = placement["node"]
            .as_str()
            .unwrap_or_else(|| panic!("{line}"));
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
    use std::path::Path;
    use std::process::Command;

    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let dir = std::env::temp_dir().join(format!("wasched-c-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let component = dir.join("maintenance.wasm");
    let build = Command::new(env!("CARGO_BIN_EXE_wasched"))
        .args(["plugin", "build"])
        .arg(root.join("examples/plugins/c/maintenance"))
        .arg("-o")
        .arg(&component)
        .env("WASCHED_WIT_BINDGEN", env!("WASCHED_WIT_BINDGEN"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&build.stderr);
    assert!(build.status.success(), "{stderr}");
    assert!(stderr.contains("--target=wasm32-wasi"), "{stderr}");
    assert!(
        std::fs::metadata(&component).unwrap().len() < 200_000,
        "a C plugin stays small"
    );

    let config = std::fs::read_to_string(root.join("examples/configs/maintenance.toml"))
        .unwrap()
        .replace(
            "../../target/plugins/maintenance.wasm",
            component.to_str().unwrap(),
        );
    let config_file = dir.join("maintenance.toml");
    std::fs::write(&config_file, config).unwrap();
    let simulate = Command::new(env!("CARGO_BIN_EXE_wasched"))
        .args(["simulate", "--config"])
        .arg(&config_file)
        .arg(root.join("examples/clusters/maintenance.yaml"))
        .output()
        .unwrap();
    assert!(
        simulate.status.success(),
        "{}",
        String::from_utf8_lossy(&simulate.stderr)
    );
    let placements: Vec<serde_json::Value> = String::from_utf8_lossy(&simulate.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let find = |pod: &str| placements.iter().find(|p| p["pod"] == pod).unwrap().clone();
    assert_eq!(
        find("shop/web")["node"],
        "small-1",
        "big nodes are in a window"
    );
    assert_eq!(
        find("shop/batch")["message"],
        "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) were in a maintenance window."
    );
    let updater = find("ops/firmware-updater")["node"].clone();
    assert!(
        updater == "big-1" || updater == "big-2",
        "the allowed pod may use them: {updater}"
    );
}
