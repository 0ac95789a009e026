//! `wasched bench --scheduler-perf`: kube-scheduler's scheduler_perf files, read and run by the
//! real binary.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

const FIXTURE: &str = "tests/fixtures/scheduler-perf/misc/performance-config.yaml";

fn wasched(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wasched"))
        .args(args)
        .current_dir(crate::support::repo_root())
        .output()
        .expect("wasched runs")
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wasched-perf-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn scheduler_perf_workloads_place_what_their_ops_allow_on_both_runtimes() {
    let output = wasched(&[
        "bench",
        "--scheduler-perf",
        FIXTURE,
        "--label-filter",
        "integration-test",
        "--json",
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let reports: BTreeMap<String, Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let r: Value = serde_json::from_str(l).unwrap();
            (r["workload"].as_str().unwrap().to_string(), r)
        })
        .collect();
    // Workload: nodes, measured pods, of which placed, and preemption cycles. Each number
    // follows from the ops (see the comments in the fixture): the hostname label kube's node
    // preparer sets, the label and allocatable strategies, namespaces and their selectors,
    // preemption after backoff, gates held through a barrier, churn beside the measured pods.
    let expected = [
        ("SchedulingBasic/5Nodes", 5, 10, 10, 0),
        ("SchedulingPodAntiAffinity/5Nodes", 5, 6, 4, 0),
        ("SchedulingNodeAffinity/5Nodes", 5, 5, 3, 0),
        ("SchedulingNodeAllocatable/4Nodes", 4, 6, 4, 0),
        ("PreemptionBasic/2Nodes", 2, 2, 2, 2),
        ("SchedulingWhileGated/1Node_10GatedPods", 1, 10, 10, 0),
        ("SchedulingWithMixedChurn/3Nodes", 3, 10, 10, 0),
        (
            "SchedulingRequiredPodAntiAffinityWithNSSelector/5Nodes",
            5,
            3,
            1,
            0,
        ),
    ];
    let names: Vec<&str> = expected.iter().map(|e| e.0).collect();
    assert_eq!(
        reports.keys().map(String::as_str).collect::<Vec<_>>(),
        {
            let mut sorted = names.clone();
            sorted.sort_unstable();
            sorted
        },
        "the performance-labelled workload is filtered out"
    );
    for (name, nodes, measured, placed, preemptions) in expected {
        let r = &reports[name];
        assert_eq!(r["nodes"], nodes, "{name}");
        assert_eq!(r["measured_pods"], measured, "{name}");
        for runtime in ["wasm", "native"] {
            let run = &r[runtime];
            assert_eq!(run["placed"], placed, "{name} {runtime}");
            assert_eq!(run["unplaced"], measured - placed, "{name} {runtime}");
            assert_eq!(run["preemptions"], preemptions, "{name} {runtime}");
            let rate = run["pods_per_second"].as_f64().unwrap();
            assert!(rate > 0.0, "{name} {runtime}: {rate}");
        }
        let ratio = r["wasm_native_ratio"].as_f64().unwrap();
        let from_runs = r["wasm"]["pods_per_second"].as_f64().unwrap()
            / r["native"]["pods_per_second"].as_f64().unwrap();
        assert!((ratio - from_runs).abs() < 1e-9, "{name}");
    }
    let anti = &reports["SchedulingPodAntiAffinity/5Nodes"];
    assert_eq!(anti["threshold"], 60.0);
    let over = anti["wasm_over_threshold"].as_f64().unwrap();
    assert!((over - anti["wasm"]["pods_per_second"].as_f64().unwrap() / 60.0).abs() < 1e-9);
    assert_eq!(
        reports["SchedulingBasic/5Nodes"]["feature_gates_not_applied"]["SchedulerAsyncAPICalls"],
        false
    );
    assert!(reports["SchedulingBasic/5Nodes"]["threshold"].is_null());
}

#[test]
fn scheduler_perf_files_with_mistakes_are_refused_with_what_is_wrong() {
    let dir = temp_dir("mistakes");
    std::fs::write(
        dir.join("pod.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata:\n  generateName: pod-\nspec:\n  containers:\n  - name: c\n    image: pause\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("templated.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: pod-{{.Foo}}\nspec:\n  containers:\n  - name: c\n    image: pause\n",
    )
    .unwrap();
    let case = |ops: &str, params: &str| {
        format!(
            "- name: Case\n  defaultPodTemplatePath: pod.yaml\n  workloadTemplate:\n{ops}  workloads:\n  - name: w\n    labels: [integration-test]\n    params: {params}\n"
        )
    };
    let nodes = "  - opcode: createNodes\n    countParam: $nodes\n";
    let cases = [
        (
            case(&format!("{nodes}  - opcode: createFoo\n"), "{nodes: 1}"),
            vec!["workloadTemplate[1]", "\"createFoo\"", "createNodes, createNamespaces"],
        ),
        (
            case(
                &format!("{nodes}  - opcode: createPods\n    count: 1\n    colectMetrics: true\n"),
                "{nodes: 1}",
            ),
            vec!["workloadTemplate[1] (createPods)", "unknown field `colectMetrics`"],
        ),
        (
            case(
                &format!("{nodes}  - opcode: createPods\n    countParam: $measurePods\n"),
                "{nodes: 1}",
            ),
            vec!["Case/w", "parameter measurePods is undefined"],
        ),
        (
            case(nodes, "{nodes: 1, initPods: 3}"),
            vec!["Case/w", "[\"initPods\"]", "unused"],
        ),
        (
            case(
                &format!("{nodes}  - opcode: createPods\n    count: 1\n    podTemplatePath: missing.yaml\n"),
                "{nodes: 1}",
            ),
            vec!["cannot read template", "missing.yaml"],
        ),
        (
            case(
                &format!("{nodes}  - opcode: createPods\n    count: 1\n    podTemplatePath: templated.yaml\n"),
                "{nodes: 1}",
            ),
            vec!["templated.yaml", "{{.Foo}}", "{{.Index}}"],
        ),
        (
            case(
                &format!("{nodes}  - opcode: createPods\n    count: 1\n    collectMetrics: true\n    skipWaitToCompletion: true\n"),
                "{nodes: 1}",
            ),
            vec!["collectMetrics and skipWaitToCompletion cannot be true at the same time"],
        ),
    ];
    for (i, (text, wanted)) in cases.iter().enumerate() {
        let file = dir.join(format!("case-{i}.yaml"));
        std::fs::write(&file, text).unwrap();
        let output = wasched(&[
            "bench",
            "--scheduler-perf",
            file.to_str().unwrap(),
            "--label-filter",
            "integration-test",
        ]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "case {i}: {stderr}");
        for w in wanted {
            assert!(stderr.contains(w), "case {i}: {w:?} not in {stderr}");
        }
    }
    let output = wasched(&[
        "bench",
        "--scheduler-perf",
        FIXTURE,
        "--label-filter",
        "nightly",
    ]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr)
        .contains("no workload matches --label-filter \"nightly\""));
}
