//! `wasched replay` on an excerpt of the Alibaba GPU trace (tests/fixtures/alibaba-excerpt).

use std::path::{Path, PathBuf};

use wasched::config::{Config, DefaultPluginRuntime};
use wasched::k8s;
use wasched::replay::{self, Summary, GPU, GPU_MILLI, GPU_MODEL_LABEL};

fn fixture(file: &str) -> PathBuf {
    crate::support::repo_root()
        .join("tests/fixtures/alibaba-excerpt")
        .join(file)
}

fn run(ignore_deletions: bool, seed: u64) -> Summary {
    let (nodes, skipped) = replay::read_nodes(&fixture("nodes.csv")).unwrap();
    let (pods, skipped_pods) = replay::read_pods(&fixture("pods.csv")).unwrap();
    assert!(skipped.is_empty() && skipped_pods.is_empty());
    let mut config = Config::default();
    config.default_plugins = DefaultPluginRuntime::Native;
    let options = replay::Options {
        seed,
        samples: 50,
        ignore_deletions,
        speed: None,
        dra: false,
    };
    replay::replay(&config, &nodes, &pods, Vec::new(), &options).unwrap()
}

fn check_conservation(summary: &Summary) {
    assert_eq!(
        summary.bookkeeping_mismatches, 0,
        "the cache agrees with the replay's record"
    );
    assert!(
        summary.max_node_commitment <= 1.0,
        "a node was over-committed: {}",
        summary.max_node_commitment
    );
    assert_eq!(summary.placed + summary.never_placed, summary.pods);
    for s in &summary.series {
        assert_eq!(
            s.pending + s.running + s.deleted,
            s.created,
            "every pod is placed, pending or deleted at t={}",
            s.time
        );
        assert!(s.cpu <= 1.0 && s.memory <= 1.0 && s.gpu <= 1.0);
    }
}

#[test]
fn replaying_the_excerpt_conserves_pods_and_never_over_commits() {
    let summary = run(false, 1);
    check_conservation(&summary);
    assert_eq!(summary.nodes, 41);
    assert_eq!(summary.pods, 300);
    let last = summary.series.last().unwrap();
    assert_eq!(
        (last.created, last.deleted),
        (300, 300),
        "every pod was created and deleted"
    );
    assert!(
        summary.series.iter().any(|s| s.running > 10),
        "pods overlap in time"
    );
}

#[test]
fn filling_the_cluster_leaves_pods_pending_with_kube_scheduler_reasons() {
    let summary = run(true, 1);
    check_conservation(&summary);
    assert!(
        summary.never_placed > 0,
        "41 nodes cannot hold all 300 pods"
    );
    assert!(summary.unschedulable_attempts >= summary.never_placed as u64);
    assert!(
        summary
            .never_placed_reasons
            .keys()
            .any(|r| r.starts_with("Insufficient ")),
        "{:?}",
        summary.never_placed_reasons
    );
    let last = summary.series.last().unwrap();
    assert!(last.gpu > 0.5, "the GPUs fill up: {}", last.gpu);
    assert!(last.gpu_fragmentation > 0.0 && last.gpu_fragmentation <= last.gpu_free + 1e-9);
}

#[test]
fn the_same_seed_gives_the_same_placements() {
    let a = run(true, 7);
    let b = run(true, 7);
    assert_eq!(a.placements_sha256, b.placements_sha256);
    assert_eq!(a.series, b.series);
}

#[test]
fn rows_of_every_shape_convert_and_bad_rows_are_reported_by_line() {
    let dir = std::env::temp_dir().join(format!("wasched-replay-rows-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let nodes = dir.join("nodes.csv");
    std::fs::write(
        &nodes,
        "sn,cpu_milli,memory_mib,gpu,model\ncpu-0,32000,262144,0,\ngpu-0,96000,786432,8,V100M32\nbad-0,lots,1,0,\nbad-1,1000,1024,2,\n",
    )
    .unwrap();
    let pods = dir.join("pods.csv");
    std::fs::write(
        &pods,
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n\
         cpu,4000,8192,0,0,,BE,Succeeded,10,20,10\n\
         whole,8000,16384,2,1000,,LS,Running,5,30,5\n\
         share,2000,4096,1,350,V100M32|A10,Burstable,Running,7,9,7\n\
         pending,1000,1024,1,1000,,Guaranteed,Pending,8,12,\n\
         short,1000\n\
         backwards,1000,1024,0,0,,BE,Failed,50,40,50\n\
         split-share,1000,1024,2,500,,LS,Running,1,2,1\n",
    )
    .unwrap();
    let (nodes, skipped_nodes) = replay::read_nodes(&nodes).unwrap();
    assert_eq!(nodes.len(), 2);
    let lines: Vec<(usize, &str)> = skipped_nodes
        .iter()
        .map(|s| (s.line, s.reason.as_str()))
        .collect();
    assert_eq!(
        lines,
        vec![
            (4, "cpu_milli \"lots\" is not a whole number"),
            (5, "2 GPUs without a model")
        ]
    );
    let (pods, skipped_pods) = replay::read_pods(&pods).unwrap();
    let names: Vec<&str> = pods.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        vec!["whole", "share", "pending", "cpu"],
        "sorted by creation time"
    );
    let lines: Vec<usize> = skipped_pods.iter().map(|s| s.line).collect();
    assert_eq!(lines, vec![6, 7, 8]);
    assert!(skipped_pods[1].reason.contains("before its creation"));
    assert!(skipped_pods[2].reason.contains("shares are for one GPU"));

    let gpu_node = k8s::node_info(&replay::node_object(&nodes[1])).unwrap();
    assert_eq!(gpu_node.labels.get(GPU_MODEL_LABEL), Some("V100M32"));
    assert_eq!(gpu_node.allocatable.get(GPU), 8);
    assert_eq!(gpu_node.allocatable.get(GPU_MILLI), 8000);
    let cpu_node = k8s::node_info(&replay::node_object(&nodes[0])).unwrap();
    assert_eq!(cpu_node.labels.get(GPU_MODEL_LABEL), None);
    assert_eq!(cpu_node.allocatable.milli_cpu, 32000);

    let whole = k8s::pod(&replay::pod_object(&pods[0])).unwrap();
    assert_eq!(
        (whole.requests.get(GPU), whole.requests.get(GPU_MILLI)),
        (2, 2000)
    );
    let share = k8s::pod(&replay::pod_object(&pods[1])).unwrap();
    assert_eq!(
        (share.requests.get(GPU), share.requests.get(GPU_MILLI)),
        (0, 350)
    );
    let required = share
        .node_affinity
        .as_ref()
        .and_then(|a| a.required.as_ref())
        .unwrap();
    assert_eq!(
        format!("{required:?}").matches("A10").count(),
        1,
        "gpu_spec becomes required affinity"
    );
    let cpu = k8s::pod(&replay::pod_object(&pods[3])).unwrap();
    assert_eq!(
        (cpu.requests.milli_cpu, cpu.requests.get(GPU_MILLI)),
        (4000, 0)
    );
}

#[test]
fn resource_only_lists_arrive_in_row_order_and_stay_and_duplicate_names_are_refused() {
    let dir = std::env::temp_dir().join(format!("wasched-replay-lists-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let nodes = dir.join("nodes.csv");
    std::fs::write(
        &nodes,
        "sn,cpu_milli,memory_mib,gpu,model\nn-0,4000,8192,0,\nn-0,64000,262144,0,\nn-1,4000,8192,0,\n",
    )
    .unwrap();
    let pods = dir.join("pods.csv");
    std::fs::write(
        &pods,
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n\
         b,3000,1024,0,0\n\
         a,3000,1024,0,0\n\
         b,1000,1024,0,0\n\
         c,3000,1024,0,0\n",
    )
    .unwrap();
    let (nodes, skipped_nodes) = replay::read_nodes(&nodes).unwrap();
    assert_eq!(nodes.len(), 2);
    assert_eq!(nodes[0].cpu_milli, 4000, "the first row of a name is kept");
    assert_eq!(
        (skipped_nodes[0].line, skipped_nodes[0].reason.as_str()),
        (3, "duplicate node name \"n-0\" (first on line 2)")
    );
    let (pods, skipped_pods) = replay::read_pods(&pods).unwrap();
    let rows: Vec<(&str, u64, Option<u64>)> = pods
        .iter()
        .map(|p| (p.name.as_str(), p.creation, p.deletion))
        .collect();
    assert_eq!(rows, [("b", 0, None), ("a", 0, None), ("c", 0, None)]);
    assert_eq!(
        (skipped_pods[0].line, skipped_pods[0].reason.as_str()),
        (4, "duplicate pod name \"b\" (first on line 2)")
    );

    let mut config = Config::default();
    config.default_plugins = DefaultPluginRuntime::Native;
    let options = replay::Options {
        seed: 3,
        samples: 4,
        ignore_deletions: false,
        speed: None,
        dra: false,
    };
    let summary = replay::replay(&config, &nodes, &pods, Vec::new(), &options).unwrap();
    check_conservation(&summary);
    assert_eq!(
        (summary.placed, summary.never_placed),
        (2, 1),
        "two 3-CPU pods fill two 4-CPU nodes and nothing is ever deleted"
    );
    assert_eq!(
        summary.never_placed_reasons.get("Insufficient cpu"),
        Some(&1)
    );
    assert_eq!(summary.series.last().unwrap().deleted, 0);
}

/// `wasched replay` on the excerpt with `args`, writing to `out`.
fn replay_command(args: &[&std::ffi::OsStr], out: &Path) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_wasched"))
        .arg("replay")
        .args(args)
        .arg("--nodes")
        .arg(fixture("nodes.csv"))
        .arg("--pods")
        .arg(fixture("pods.csv"))
        .arg("--out")
        .arg(out)
        .output()
        .unwrap()
}

/// Asserts the command succeeded, showing its stderr when it did not.
fn succeeded(output: &std::process::Output) {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_command_writes_its_summary() {
    let out = std::env::temp_dir().join(format!("wasched-replay-out-{}", std::process::id()));
    let output = replay_command(&["--runtime".as_ref(), "native".as_ref()], &out);
    succeeded(&output);
    let printed: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(printed["placements_sha256"], written["placements_sha256"]);
    assert_eq!(written["series"].as_array().unwrap().len(), 201);
    let report = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert_eq!(report.matches("<svg").count(), 4, "four plots");
    for heading in [
        "Allocation over time",
        "Pending pods over time",
        "GPU fragmentation over time",
        "Scheduling latency",
    ] {
        assert!(report.contains(heading), "{heading}");
    }
    assert!(
        report.contains(&format!("<td>{}</td>", written["placed"])),
        "the headline table shows the pods placed"
    );
    let histogram = written["latency_histogram"].as_array().unwrap();
    let cycles: u64 = histogram.iter().map(|b| b["count"].as_u64().unwrap()).sum();
    assert_eq!(cycles, written["cycles"].as_u64().unwrap());
}

/// The GpuPacking example's configuration with the component the build made.
fn gpu_packing_config(dir: &Path) -> PathBuf {
    let root = crate::support::repo_root();
    let text = std::fs::read_to_string(root.join("examples/configs/gpu-packing.toml")).unwrap();
    let component = wasched_test_programs::component("wasched_example_gpu_packing.wasm");
    let text = text.replace(
        "../../target/plugins/wasched_example_gpu_packing.wasm",
        component.to_str().unwrap(),
    );
    assert!(text.contains(component.to_str().unwrap()));
    let path = dir.join("gpu-packing.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn comparing_the_gpu_packing_example_with_the_default_shows_less_fragmentation() {
    let out = std::env::temp_dir().join(format!("wasched-replay-compare-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let config = gpu_packing_config(&out);
    let output = replay_command(
        &[
            "--ignore-deletions".as_ref(),
            "--compare".as_ref(),
            "default".as_ref(),
            config.as_os_str(),
        ],
        &out,
    );
    succeeded(&output);
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let runs = written["runs"].as_array().unwrap();
    let labels: Vec<&str> = runs.iter().map(|r| r["label"].as_str().unwrap()).collect();
    assert_eq!(labels, ["default", "gpu-packing"]);
    let last = |run: &serde_json::Value, field: &str| {
        run["summary"]["series"].as_array().unwrap().last().unwrap()[field]
            .as_f64()
            .unwrap()
    };
    let (default, packed) = (&runs[0], &runs[1]);
    assert!(
        last(packed, "gpu_fragmentation") < last(default, "gpu_fragmentation"),
        "fragmentation {} (GpuPacking) against {} (default)",
        last(packed, "gpu_fragmentation"),
        last(default, "gpu_fragmentation")
    );
    assert!(last(packed, "gpu") >= last(default, "gpu"));
    for run in runs {
        let summary: Summary = serde_json::from_value(run["summary"].clone()).unwrap();
        check_conservation(&summary);
    }
    let report = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(report.contains("<th>default</th><th>gpu-packing</th>"));
    assert!(
        report.contains("gpu-packing: fragmented GPUs"),
        "legend names the run"
    );
}

#[test]
fn speed_paces_the_replay_in_wall_time() {
    let out = std::env::temp_dir().join(format!("wasched-replay-speed-{}", std::process::id()));
    let command = |speed: &str| {
        replay_command(
            &[
                "--runtime".as_ref(),
                "native".as_ref(),
                "--speed".as_ref(),
                speed.as_ref(),
            ],
            &out,
        )
    };
    let refused = command("0");
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--speed must be a positive number"));
    succeeded(&command("100000"));
    let written: Summary =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let span = (written.series.last().unwrap().time - written.series[0].time) as f64;
    let wall = written.wall_seconds;
    assert!(span > 10_000.0, "the excerpt spans hours: {span}");
    assert!(
        wall >= span / 100_000.0,
        "{span} s of trace at 100000x took {wall} s"
    );
}

#[test]
fn cycles_a_plugin_failed_are_counted_apart_from_unschedulable_ones() {
    assert_eq!(
        run(false, 1).plugin_errors,
        0,
        "the default plugins never fail"
    );
    let (nodes, _) = replay::read_nodes(&fixture("nodes.csv")).unwrap();
    let (pods, _) = replay::read_pods(&fixture("pods.csv")).unwrap();
    let component = wasched_test_programs::component("wasched_hostile_bad_score.wasm");
    let toml = format!(
        "[runtime]\ndefault_plugins = \"native\"\n\
         [plugins.BadScore]\ncomponent = {:?}\nquarantine_after = 0\n\
         [[profiles]]\nscores = [{{ plugin = \"BadScore\" }}]\n",
        component.display().to_string()
    );
    let config = Config::parse("bad-score.toml", Path::new("."), toml).unwrap();
    let options = replay::Options {
        seed: 1,
        samples: 10,
        ignore_deletions: false,
        speed: None,
        dra: false,
    };
    let summary = replay::replay(&config, &nodes, &pods, Vec::new(), &options).unwrap();
    assert!(summary.plugin_errors > 0, "{summary:?}");
    assert_eq!(
        summary.cycles,
        summary.placed as u64 + summary.plugin_errors + summary.unschedulable_attempts,
        "every cycle placed a pod, found no node or ended in a plugin error"
    );
}

#[test]
fn numeric_flags_past_what_the_machine_holds_are_refused_naming_the_flag_and_its_range() {
    let trace = ["replay", "--nodes", "nodes.csv", "--pods", "pods.csv"];
    let cases: [(Vec<&str>, &str); 6] = [
        (vec!["bench", "--pods", "18446744073709551615"], "--pods"),
        (vec!["bench", "--nodes", "0"], "--nodes"),
        (vec!["bench", "--nodes", "500,10000000"], "--nodes"),
        (vec!["bench", "--rounds", "0"], "--rounds"),
        (
            [&trace[..], &["--samples", "1000000000"]].concat(),
            "--samples",
        ),
        ([&trace[..], &["--speed", "1e-300"]].concat(), "--speed"),
    ];
    for (args, flag) in cases {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_wasched"))
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("for '{flag}")) && stderr.contains("..="),
            "{args:?}: {stderr}"
        );
    }
}

/// The excerpt replayed with the GPUs as DRA devices.
fn run_dra(ignore_deletions: bool, runtime: DefaultPluginRuntime) -> Summary {
    let (nodes, _) = replay::read_nodes(&fixture("nodes.csv")).unwrap();
    let (pods, _) = replay::read_pods(&fixture("pods.csv")).unwrap();
    let mut config = Config::default();
    config.default_plugins = runtime;
    let options = replay::Options {
        seed: 1,
        samples: 50,
        ignore_deletions,
        speed: None,
        dra: true,
    };
    replay::replay(&config, &nodes, &pods, Vec::new(), &options).unwrap()
}

#[test]
fn gpus_as_dra_devices_are_held_by_claims_exactly_while_their_pods_run() {
    // `bookkeeping_mismatches` counts, at every sample, each node whose devices held in the
    // scheduler's cache differ from the GPUs the replay's record has in use there: a claim not
    // given back with its pod, or a device allocated twice, would show.
    for ignore_deletions in [false, true] {
        let summary = run_dra(ignore_deletions, DefaultPluginRuntime::Native);
        check_conservation(&summary);
        assert_eq!(summary.gpu_requests, "dra");
        assert!(
            summary.series.iter().any(|s| s.gpu > 0.0),
            "devices were allocated"
        );
    }
    let native = run_dra(true, DefaultPluginRuntime::Native);
    let wasm = run_dra(true, DefaultPluginRuntime::Wasm);
    assert_eq!(
        native.placements_sha256, wasm.placements_sha256,
        "the DynamicResources component places as its native build does"
    );
}

#[test]
fn a_gpu_share_takes_a_whole_device_under_dra_and_says_why_the_next_waits() {
    let dir = std::env::temp_dir().join(format!("wasched-replay-dra-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let nodes = dir.join("nodes.csv");
    std::fs::write(
        &nodes,
        "sn,cpu_milli,memory_mib,gpu,model\nt4-node,8000,16384,1,T4\nv100-node,8000,16384,1,V100M16\n",
    )
    .unwrap();
    let pods = dir.join("pods.csv");
    std::fs::write(
        &pods,
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n\
         share-a,1000,1024,1,300,T4\n\
         share-b,1000,1024,1,300,T4\n\
         whole,1000,1024,1,1000,\n",
    )
    .unwrap();
    let (nodes, _) = replay::read_nodes(&nodes).unwrap();
    let (pods, _) = replay::read_pods(&pods).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let mut config = Config::default();
    config.default_plugins = DefaultPluginRuntime::Native;
    let run = |dra| {
        let options = replay::Options {
            seed: 1,
            samples: 2,
            ignore_deletions: false,
            speed: None,
            dra,
        };
        replay::replay(&config, &nodes, &pods, Vec::new(), &options).unwrap()
    };
    let extended = run(false);
    assert_eq!(
        (extended.placed, extended.never_placed),
        (3, 0),
        "two 300m shares fit one T4, the whole GPU takes the V100"
    );
    let dra = run(true);
    check_conservation(&dra);
    assert_eq!(
        (dra.placed, dra.never_placed),
        (2, 1),
        "a share holds the T4 whole, the other share may use only a T4"
    );
    assert_eq!(
        dra.never_placed_reasons.keys().collect::<Vec<_>>(),
        ["cannot allocate all claims"],
        "{:?}",
        dra.never_placed_reasons
    );
}

/// A `job` column makes each job's pods a gang: on three GPUs, a four-pod job arriving first
/// would take all three under the default profile (one left pending) and starve a two-pod job
/// behind it; with Coscheduling the four-pod job holds nothing and the two-pod job runs whole.
#[test]
fn a_job_column_makes_each_job_s_pods_a_gang() {
    let dir = std::env::temp_dir().join(format!("wasched-replay-jobs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let nodes = dir.join("nodes.csv");
    std::fs::write(
        &nodes,
        "sn,cpu_milli,memory_mib,gpu,model\nn1,32000,65536,3,V100M16\n",
    )
    .unwrap();
    let pods = dir.join("pods.csv");
    let mut rows = String::from("name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,job\n");
    for i in 0..4 {
        rows.push_str(&format!("big-{i},1000,1024,1,1000,{i},big\n"));
    }
    for i in 0..2 {
        rows.push_str(&format!("pair-{i},1000,1024,1,1000,{},pair\n", 10 + i));
    }
    std::fs::write(&pods, rows).unwrap();
    let (nodes, _) = replay::read_nodes(&nodes).unwrap();
    let (pods, skipped) = replay::read_pods(&pods).unwrap();
    assert!(skipped.is_empty());
    assert_eq!(pods[0].job.as_deref(), Some("big"));
    let options = replay::Options {
        seed: 1,
        samples: 10,
        ignore_deletions: false,
        speed: None,
        dra: false,
    };
    let mut gangs =
        Config::load(&crate::support::repo_root().join("examples/configs/gangs.toml")).unwrap();
    gangs.default_plugins = DefaultPluginRuntime::Native;
    let mut plain = Config::default();
    plain.default_plugins = DefaultPluginRuntime::Native;
    let without = replay::replay(&plain, &nodes, &pods, Vec::new(), &options).unwrap();
    assert_eq!((without.placed, without.never_placed), (3, 3));
    let with = replay::replay(&gangs, &nodes, &pods, Vec::new(), &options).unwrap();
    assert_eq!(
        (with.placed, with.never_placed),
        (2, 4),
        "{:?}",
        with.never_placed_reasons
    );
    check_conservation(&with);
}

#[test]
fn diff_over_a_trace_lists_the_pods_two_replays_place_differently() {
    let out = std::env::temp_dir().join(format!("wasched-replay-diff-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let config_file = gpu_packing_config(&out);
    let (nodes, _) = replay::read_nodes(&fixture("nodes.csv")).unwrap();
    let (pods, _) = replay::read_pods(&fixture("pods.csv")).unwrap();
    let options = replay::Options {
        seed: 0,
        samples: 200,
        ..replay::Options::default()
    };
    let replayed = |config: Config| {
        let mut config = config;
        config.default_plugins = DefaultPluginRuntime::Native;
        replay::replay(&config, &nodes, &pods, Vec::new(), &options).unwrap()
    };
    let a = replayed(Config::default());
    let b = replayed(Config::load(&config_file).unwrap());

    let output = std::process::Command::new(env!("CARGO_BIN_EXE_wasched"))
        .args([
            "diff",
            "--runtime",
            "native",
            "--json",
            "--config",
            "default",
            "--config",
        ])
        .arg(&config_file)
        .arg("--trace")
        .arg(fixture("nodes.csv"))
        .arg(fixture("pods.csv"))
        .output()
        .unwrap();
    succeeded(&output);
    let found: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(found["a"]["placed"], a.placed);
    assert_eq!(found["b"]["placed"], b.placed);
    assert_eq!(found["b"]["pending"], b.never_placed);
    let mut changed_node = Vec::new();
    let mut changed_pending = Vec::new();
    for (end_a, end_b) in a.pod_ends.iter().zip(&b.pod_ends) {
        assert_eq!(end_a.pod, end_b.pod);
        match (&end_a.node, &end_b.node) {
            (Some(x), Some(y)) if x != y => changed_node.push(end_a.pod.clone()),
            (Some(_), None) | (None, Some(_)) => changed_pending.push(end_a.pod.clone()),
            _ => {}
        }
    }
    let pods_of = |list: &str| -> Vec<String> {
        let changes = found[list].as_array().unwrap().iter();
        changes
            .map(|c| c["pod"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(pods_of("changedNode"), changed_node);
    assert_eq!(pods_of("changedPending"), changed_pending);
    assert!(
        !changed_node.is_empty(),
        "GpuPacking packs GPU pods elsewhere"
    );
    let gpu = found["b"]["resources"].as_array().unwrap()[2].clone();
    assert_eq!(gpu[0], "gpu");
    assert!(gpu[1]["fragmented"].is_number(), "{gpu}");
}
