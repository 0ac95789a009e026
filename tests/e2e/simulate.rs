//! `wasched simulate` end to end: the real binary on YAML/JSON fixtures.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::{json, Value};

fn root() -> PathBuf {
    crate::support::repo_root()
}

fn wasched(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wasched"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("wasched runs")
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "wasched failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

/// What `wasched ARGS` prints, line by line (it must succeed).
fn output_lines(args: &[&str]) -> Vec<String> {
    stdout(&wasched(args)).lines().map(String::from).collect()
}

fn temp_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wasched-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

const DEMO: &str = "examples/clusters/demo.yaml";

/// kube-scheduler's answers for the demo cluster: priority first, then input order; each placement
/// counts before the next pod.
const DEMO_DECISIONS: &[&str] = &[
    r#"{"pod":"kube-system/critical","node":"node-c1"}"#,
    r#"{"pod":"shop/api","node":"node-a1"}"#,
    r#"{"pod":"ml/trainer","node":"node-a2"}"#,
    r#"{"pod":"shop/db","node":"node-b1"}"#,
    r#"{"pod":"jobs/huge","node":null,"message":"0/5 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, 1 node(s) were unschedulable, 3 Insufficient cpu. preemption: 0/5 nodes are available: 2 Preemption is not helpful for scheduling, 3 No preemption victims found for incoming pod."}"#,
    r#"{"pod":"shop/lost","node":null,"message":"0/5 nodes are available: persistentvolumeclaim \"missing\" not found. preemption: 0/5 nodes are available: 5 Preemption is not helpful for scheduling."}"#,
    r#"{"pod":"jobs/zone-c-only","node":null,"message":"0/5 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {dedicated: gpu}, 1 node(s) were unschedulable, 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/5 nodes are available: 1 No preemption victims found for incoming pod, 4 Preemption is not helpful for scheduling."}"#,
    r#"{"pod":"shop/cache","node":"node-b1"}"#,
];

#[test]
fn demo_cluster_is_placed_and_explained_as_kube_scheduler_would() {
    for runtime in ["wasm", "native"] {
        let output = wasched(&["simulate", "--runtime", runtime, DEMO]);
        let lines: Vec<String> = stdout(&output).lines().map(String::from).collect();
        assert_eq!(lines, DEMO_DECISIONS, "runtime {runtime}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("skipped 1 Deployment"),
            "one warning for the skipped kind: {stderr}"
        );
    }
}

#[test]
fn explain_shows_normalized_scores_and_their_weighted_total() {
    let output = stdout(&wasched(&["simulate", "--explain", DEMO]));
    let first: serde_json::Value = serde_json::from_str(output.lines().next().unwrap()).unwrap();
    assert_eq!(first["pod"], "kube-system/critical");
    let nodes = first["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 5, "five nodes examined");
    let weights = [
        ("TaintToleration", 3),
        ("NodeAffinity", 2),
        ("NodeResourcesFit", 1),
        ("NodeResourcesBalancedAllocation", 1),
    ];
    let mut best = ("", -1);
    for node in nodes {
        let name = node["node"].as_str().unwrap();
        if !node["feasible"].as_bool().unwrap() {
            assert!(
                !node["reasons"].as_array().unwrap().is_empty(),
                "{name} has reasons"
            );
            continue;
        }
        let scores = &node["scores"];
        let total: i64 = weights
            .iter()
            .map(|(plugin, weight)| scores[plugin].as_i64().unwrap() * weight)
            .sum();
        assert_eq!(node["total"].as_i64().unwrap(), total, "{name}");
        if total > best.1 {
            best = (name, total);
        }
    }
    assert_eq!(best.0, "node-c1", "the highest total wins");
    let c1 = nodes.iter().find(|n| n["node"] == "node-c1").unwrap();
    assert_eq!(c1["scores"]["NodeAffinity"], 100, "the preferred zone");
    assert_eq!(
        c1["scores"]["NodeResourcesFit"], 81,
        "(75 + 87) / 2 on an empty 2-cpu/4Gi node"
    );
}

#[test]
fn a_config_changes_the_scoring_strategy() {
    let output = stdout(&wasched(&[
        "simulate",
        "--config",
        "examples/configs/bin-packing.toml",
        DEMO,
    ]));
    let last = output.lines().last().unwrap();
    assert_eq!(
        last, r#"{"pod":"shop/cache","node":"node-a1"}"#,
        "MostAllocated packs the small pod onto the fuller node"
    );
}

#[test]
fn table_output_is_for_people() {
    let output = stdout(&wasched(&["simulate", "--output", "table", DEMO]));
    let mut lines = output.lines();
    assert!(lines.next().unwrap().starts_with("POD"), "{output}");
    assert!(
        output.contains("jobs/huge             <none>   0/5 nodes are available"),
        "{output}"
    );
}

#[test]
fn json_input_and_pods_for_other_schedulers() {
    let cluster = temp_file(
        "other.json",
        r#"{"kind":"List","apiVersion":"v1","items":[
            {"kind":"Node","apiVersion":"v1","metadata":{"name":"n1"},"status":{"allocatable":{"cpu":"1","memory":"1Gi","pods":"10"}}},
            {"kind":"Pod","apiVersion":"v1","metadata":{"name":"mine","namespace":"a"},"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"600m"}}}]}},
            {"kind":"Pod","apiVersion":"v1","metadata":{"name":"second","namespace":"a"},"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"600m"}}}]}},
            {"kind":"Pod","apiVersion":"v1","metadata":{"name":"theirs","namespace":"a"},"spec":{"schedulerName":"gpu-scheduler","containers":[{"name":"c"}]}}
        ]}"#,
    );
    let output = stdout(&wasched(&["simulate", cluster.to_str().unwrap()]));
    let lines: Vec<&str> = output.lines().collect();
    assert_eq!(lines[0], r#"{"pod":"a/mine","node":"n1"}"#);
    assert_eq!(
        lines[1],
        r#"{"pod":"a/second","node":null,"message":"0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."}"#,
        "the first placement takes its cpu"
    );
    assert!(
        lines[2].contains(r#"no profile for schedulerName \"gpu-scheduler\""#),
        "{}",
        lines[2]
    );
}

#[test]
fn unreadable_input_fails_before_anything_is_scheduled() {
    let good = temp_file("good.yaml", "kind: Node\nmetadata: {name: n1}\n");
    let bad = temp_file(
        "bad.yaml",
        "kind: Pod\nmetadata: {name: ok}\nspec: {containers: []}\n---\nkind: Pod\nmetadata: {name: broken}\nspec:\n  containers:\n  - name: c\n    resources: {requests: {memory: 3 apples}}\n",
    );
    let output = wasched(&["simulate", good.to_str().unwrap(), bad.to_str().unwrap()]);
    assert!(!output.status.success());
    assert!(output.stdout.is_empty(), "nothing was scheduled");
    let stderr = String::from_utf8_lossy(&output.stderr);
    for fragment in [
        "bad.yaml: document 2 (Pod broken)",
        "spec.containers[0].resources.requests.memory",
        "\"3 apples\"",
    ] {
        assert!(stderr.contains(fragment), "{stderr:?} lacks {fragment:?}");
    }
}

#[test]
fn a_config_mistake_names_file_and_line() {
    let config = temp_file(
        "broken.toml",
        "[[profiles]]\nscheduler_name = \"default-scheduler\"\nfilters = [\"NodeName\", \"GpuTopology\"]\n",
    );
    let output = wasched(&["simulate", "--config", config.to_str().unwrap(), DEMO]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("broken.toml:3: unknown plugin \"GpuTopology\""),
        "{stderr}"
    );
}

#[test]
fn a_plugin_component_from_a_file_is_loaded_and_its_pin_checked() {
    let component =
        wasched::embedded::component(wasched::runtime::defaults::find("NodeName").unwrap());
    let path = temp_file("node-name.wasm", "");
    std::fs::write(&path, component).unwrap();
    let sha = wasched::component::sha256_hex(component);
    let cluster = temp_file(
        "pinned.yaml",
        "kind: Node\nmetadata: {name: a}\nstatus: {allocatable: {cpu: '1', pods: '5'}}\n---\nkind: Node\nmetadata: {name: b}\nstatus: {allocatable: {cpu: '1', pods: '5'}}\n---\nkind: Pod\nmetadata: {name: p}\nspec: {nodeName: '', containers: [{name: c}]}\n---\nkind: Pod\nmetadata: {name: q, namespace: default}\nspec:\n  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchFields: [{key: metadata.name, operator: In, values: [b]}]}]}}}\n  containers: [{name: c}]\n",
    );
    let config = |pin: &str| {
        temp_file(
            "pinned.toml",
            &format!(
                "[plugins.Pinned]\ncomponent = {path:?}\nsha256 = \"{pin}\"\n\n[[profiles]]\nfilters = [\"Pinned\", \"NodeAffinity\"]\nscores = [{{ plugin = \"NodeAffinity\" }}]\n",
                path = path.to_str().unwrap()
            ),
        )
    };
    let good = config(&sha);
    let output = stdout(&wasched(&[
        "simulate",
        "--config",
        good.to_str().unwrap(),
        cluster.to_str().unwrap(),
    ]));
    assert!(
        output.contains(r#"{"pod":"default/q","node":"b"}"#),
        "{output}"
    );

    let wrong = config(&"0".repeat(64));
    let output = wasched(&[
        "simulate",
        "--config",
        wrong.to_str().unwrap(),
        cluster.to_str().unwrap(),
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("pinned.toml:3: plugin Pinned:")
            && stderr.contains(&format!("has sha256 {sha}")),
        "{stderr}"
    );

    std::fs::write(&path, b"not wasm at all").unwrap();
    let no_pin = temp_file(
        "unpinned.toml",
        &format!("[plugins.Pinned]\ncomponent = {:?}\n[[profiles]]\nfilters = [\"Pinned\"]\nscores = []\n", path.to_str().unwrap()),
    );
    let output = wasched(&[
        "simulate",
        "--config",
        no_pin.to_str().unwrap(),
        cluster.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("unpinned.toml:2: plugin Pinned: not a valid WebAssembly component"),
        "{stderr}"
    );
}

#[test]
fn plugin_inspect_tells_what_a_component_is_and_whether_it_is_accepted() {
    let component =
        wasched::embedded::component(wasched::runtime::defaults::find("TaintToleration").unwrap());
    let path = temp_file("taint.wasm", "");
    std::fs::write(&path, component).unwrap();
    let output = stdout(&wasched(&["plugin", "inspect", path.to_str().unwrap()]));
    for line in [
        format!("sha256:   {}", wasched::component::sha256_hex(component)),
        "imports:  wasched:plugin/types@0.2.1".to_string(),
        "world:    wasched:plugin/plugin@0.2.1".to_string(),
        "plugin:   TaintToleration 0.1.0 (filter, score)".to_string(),
        "normalize: reverse".to_string(),
        "reads:    pod tolerations".to_string(),
        "accepted: yes".to_string(),
    ] {
        assert!(
            output.lines().any(|l| l == line),
            "{line:?} missing from:\n{output}"
        );
    }

    // A component built against 0.2.0 names its imports and interfaces `@0.2.0`: the same
    // component with those names (the strings are as long, so the binary stays valid) loads and
    // answers alike, its interfaces found under their 0.2.0 names.
    let old = replace_all(component, b"@0.2.1", b"@0.2.0");
    let old_path = temp_file("taint-0.2.0.wasm", "");
    std::fs::write(&old_path, &old).unwrap();
    let output = stdout(&wasched(&["plugin", "inspect", old_path.to_str().unwrap()]));
    for line in [
        "imports:  wasched:plugin/types@0.2.0",
        "world:    wasched:plugin/plugin@0.2.0",
        "plugin:   TaintToleration 0.1.0 (filter, score)",
        "reads:    pod tolerations",
        "accepted: yes",
    ] {
        assert!(
            output.lines().any(|l| l == line),
            "{line:?} missing from:\n{output}"
        );
    }
    assert!(!output.contains("@0.2.1"), "{output}");

    // The SDK reports a plugin's own normalization as `in-score`: it normalizes inside `score`.
    let affinity =
        wasched::embedded::component(wasched::runtime::defaults::find("InterPodAffinity").unwrap());
    let affinity_path = temp_file("inter-pod-affinity.wasm", "");
    std::fs::write(&affinity_path, affinity).unwrap();
    let output = stdout(&wasched(&[
        "plugin",
        "inspect",
        affinity_path.to_str().unwrap(),
    ]));
    assert!(
        output.lines().any(|l| l == "normalize: in-score"),
        "{output}"
    );

    let greedy =
        wat::parse_str("(component (import \"wasi:filesystem/preopens@0.2.0\" (instance)))")
            .unwrap();
    let path = temp_file("greedy.wasm", "");
    std::fs::write(&path, greedy).unwrap();
    let output = wasched(&["plugin", "inspect", path.to_str().unwrap()]);
    assert!(
        !output.status.success(),
        "a refused component fails the command"
    );
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("accepted: no: imports wasi:filesystem/preopens@0.2.0"),
        "{text}"
    );
}

/// Two nodes, a running pod holding host port 443 on `node-a`, and pods asking for host ports.
const HOST_PORTS: &str = r#"
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Node, metadata: {name: node-a, labels: {kubernetes.io/hostname: node-a}}, status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}}
- {apiVersion: v1, kind: Node, metadata: {name: node-b, labels: {kubernetes.io/hostname: node-b}}, status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}}
- apiVersion: v1
  kind: Pod
  metadata: {name: ingress, namespace: default}
  spec:
    nodeName: node-a
    containers: [{name: c, ports: [{containerPort: 8443, hostPort: 443}]}]
  status: {phase: Running}
- apiVersion: v1
  kind: Pod
  metadata: {name: tls, namespace: default}
  spec:
    containers: [{name: c, ports: [{containerPort: 443, hostPort: 443, hostIP: 10.0.0.1}]}]
- apiVersion: v1
  kind: Pod
  metadata: {name: web-1, namespace: default}
  spec:
    containers: [{name: c, ports: [{containerPort: 80, hostPort: 80}]}]
- apiVersion: v1
  kind: Pod
  metadata: {name: web-2, namespace: default}
  spec:
    initContainers: [{name: proxy, restartPolicy: Always, ports: [{containerPort: 80, hostPort: 80}]}]
    containers: [{name: c}]
- apiVersion: v1
  kind: Pod
  metadata: {name: web-3, namespace: default}
  spec:
    containers: [{name: c, ports: [{containerPort: 80, hostPort: 80, protocol: TCP}]}]
- apiVersion: v1
  kind: Pod
  metadata: {name: dns, namespace: default}
  spec:
    containers: [{name: c, ports: [{containerPort: 53, hostPort: 80, protocol: UDP}]}]
"#;

#[test]
fn host_ports_keep_pods_off_nodes_where_placed_or_running_pods_hold_them() {
    let path = temp_file("host-ports.yaml", HOST_PORTS);
    for runtime in ["wasm", "native"] {
        let output = wasched(&["simulate", "--runtime", runtime, path.to_str().unwrap()]);
        let lines: Vec<String> = stdout(&output).lines().map(String::from).collect();
        let web_1 = lines[1].clone();
        let web_2_node = if web_1.contains("node-a") {
            "node-b"
        } else {
            "node-a"
        };
        assert_eq!(
            lines,
            [
                r#"{"pod":"default/tls","node":"node-b"}"#.to_string(),
                web_1.clone(),
                format!(r#"{{"pod":"default/web-2","node":"{web_2_node}"}}"#),
                r#"{"pod":"default/web-3","node":null,"message":"0/2 nodes are available: 2 node(s) didn't have free ports for the requested pod ports. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."}"#.to_string(),
                lines[4].clone(),
            ],
            "runtime {runtime}: the running pod's 0.0.0.0:443 clashes with 10.0.0.1:443, and each \
             placed pod holds port 80 for the next (a sidecar's port counts)"
        );
        assert!(
            web_1.starts_with(r#"{"pod":"default/web-1","node":"node-"#),
            "{web_1}"
        );
        assert!(
            lines[4].starts_with(r#"{"pod":"default/dns","node":"node-"#),
            "UDP 80 is free everywhere: {}",
            lines[4]
        );
    }
}

/// A StatefulSet with one replica more than the nodes that can take it, each replica keeping off
/// the others' hosts; one node is too small for a replica anyway.
const ANTI_AFFINITY_REPLICAS: &str = r#"
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Node, metadata: {name: n1, labels: {kubernetes.io/hostname: n1}}, status: {allocatable: {cpu: "8", memory: 16Gi, pods: "110"}}}
- {apiVersion: v1, kind: Node, metadata: {name: n2, labels: {kubernetes.io/hostname: n2}}, status: {allocatable: {cpu: "8", memory: 16Gi, pods: "110"}}}
- {apiVersion: v1, kind: Node, metadata: {name: n3, labels: {kubernetes.io/hostname: n3}}, status: {allocatable: {cpu: "8", memory: 16Gi, pods: "110"}}}
- {apiVersion: v1, kind: Node, metadata: {name: small, labels: {kubernetes.io/hostname: small}}, status: {allocatable: {cpu: "1", memory: 16Gi, pods: "110"}}}
"#;

fn kafka_replica(i: usize) -> String {
    format!(
        r#"- apiVersion: v1
  kind: Pod
  metadata: {{name: kafka-{i}, namespace: streaming, labels: {{app: kafka}}}}
  spec:
    containers: [{{name: broker, resources: {{requests: {{cpu: "2"}}}}}}]
    affinity:
      podAntiAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
        - labelSelector: {{matchLabels: {{app: kafka}}}}
          topologyKey: kubernetes.io/hostname
"#
    )
}

#[test]
fn anti_affinity_replicas_beyond_the_nodes_stay_pending_with_kube_schedulers_reason() {
    let mut cluster = ANTI_AFFINITY_REPLICAS.to_string();
    for i in 0..4 {
        cluster.push_str(&kafka_replica(i));
    }
    let path = temp_file("kafka.yaml", &cluster);
    for runtime in ["wasm", "native"] {
        let output = wasched(&["simulate", "--runtime", runtime, path.to_str().unwrap()]);
        let lines: Vec<String> = stdout(&output).lines().map(String::from).collect();
        let mut hosts: Vec<String> = lines[..3]
            .iter()
            .map(|line| {
                let value: serde_json::Value = serde_json::from_str(line).unwrap();
                value["node"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{line}"))
                    .to_string()
            })
            .collect();
        hosts.sort();
        assert_eq!(
            hosts,
            ["n1", "n2", "n3"],
            "runtime {runtime}: one replica per host"
        );
        assert_eq!(
            lines[3],
            r#"{"pod":"streaming/kafka-3","node":null,"message":"0/4 nodes are available: 1 Insufficient cpu, 3 node(s) didn't match pod anti-affinity rules. preemption: 0/4 nodes are available: 4 No preemption victims found for incoming pod."}"#,
            "runtime {runtime}"
        );
    }
}

/// Four replicas spread over three zones with `maxSkew: 1`, where zone-c's only node is too
/// small for them: zone-c still counts as a domain with none, so the third replica has nowhere to
/// go (kube-scheduler's explanation), and neither has the fourth.
const ZONE_SPREAD_WITH_A_SMALL_ZONE: &str = r#"
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Node, metadata: {name: a1, labels: {topology.kubernetes.io/zone: zone-a}}, status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}}
- {apiVersion: v1, kind: Node, metadata: {name: b1, labels: {topology.kubernetes.io/zone: zone-b}}, status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}}
- {apiVersion: v1, kind: Node, metadata: {name: c1, labels: {topology.kubernetes.io/zone: zone-c}}, status: {allocatable: {cpu: 500m, memory: 8Gi, pods: "110"}}}
"#;

fn zone_spread_replica(i: usize) -> String {
    format!(
        r#"- apiVersion: v1
  kind: Pod
  metadata: {{name: api-{i}, namespace: shop, labels: {{app: api}}}}
  spec:
    containers: [{{name: c, resources: {{requests: {{cpu: "1"}}}}}}]
    topologySpreadConstraints:
    - {{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {{matchLabels: {{app: api}}}}}}
"#
    )
}

#[test]
fn zone_spread_with_a_zone_too_small_stays_pending_with_kube_schedulers_reason() {
    let mut cluster = ZONE_SPREAD_WITH_A_SMALL_ZONE.to_string();
    for i in 0..4 {
        cluster.push_str(&zone_spread_replica(i));
    }
    let path = temp_file("spread.yaml", &cluster);
    let pending = "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't match pod topology spread constraints. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.";
    for runtime in ["wasm", "native"] {
        let output = wasched(&["simulate", "--runtime", runtime, path.to_str().unwrap()]);
        let lines: Vec<serde_json::Value> = stdout(&output)
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        let mut zones: Vec<&str> = lines[..2]
            .iter()
            .map(|l| l["node"].as_str().unwrap())
            .collect();
        zones.sort();
        assert_eq!(
            zones,
            ["a1", "b1"],
            "runtime {runtime}: one replica per zone that fits"
        );
        for line in &lines[2..] {
            assert_eq!(
                line["node"],
                serde_json::Value::Null,
                "runtime {runtime}: {line}"
            );
            assert_eq!(line["message"], pending, "runtime {runtime}");
        }
    }
}

/// Two equal nodes, three web pods running on n1 and three others on n2; new web pods have no
/// constraints of their own, but a Service (or their ReplicaSet) selects them, so
/// kube-scheduler's system default constraints spread them: they go to n2 until it holds as many.
const DEFAULT_SPREADING: &str = r#"
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Node, metadata: {name: n1, labels: {kubernetes.io/hostname: n1}}, status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}}
- {apiVersion: v1, kind: Node, metadata: {name: n2, labels: {kubernetes.io/hostname: n2}}, status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}}
"#;

fn default_spreading_pod(name: &str, app: &str, node: Option<&str>, owner: &str) -> String {
    let node = node.map_or(String::new(), |n| format!(", nodeName: {n}"));
    format!(
        r#"- apiVersion: v1
  kind: Pod
  metadata: {{name: {name}, namespace: shop, labels: {{app: {app}}}{owner}}}
  spec: {{containers: [{{name: c, resources: {{requests: {{cpu: 100m, memory: 128Mi}}}}}}]{node}}}
"#
    )
}

#[test]
fn pods_a_service_or_replicaset_selects_are_spread_by_the_system_defaults() {
    let selectors = [
        (
            "- {apiVersion: v1, kind: Service, metadata: {name: web, namespace: shop}, spec: {selector: {app: web}}}\n",
            "",
        ),
        (
            "- {apiVersion: apps/v1, kind: ReplicaSet, metadata: {name: web-7d, namespace: shop}, spec: {selector: {matchLabels: {app: web}}, template: {metadata: {labels: {app: web}}}}}\n",
            ", ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: web-7d, uid: u1, controller: true}]",
        ),
    ];
    for (selector, owner) in selectors {
        let mut cluster = DEFAULT_SPREADING.to_string();
        cluster.push_str(selector);
        for i in 0..3 {
            cluster.push_str(&default_spreading_pod(
                &format!("web-{i}"),
                "web",
                Some("n1"),
                owner,
            ));
            cluster.push_str(&default_spreading_pod(
                &format!("db-{i}"),
                "db",
                Some("n2"),
                "",
            ));
        }
        for i in 3..6 {
            cluster.push_str(&default_spreading_pod(
                &format!("web-{i}"),
                "web",
                None,
                owner,
            ));
        }
        let path = temp_file("default-spread.yaml", &cluster);
        for runtime in ["wasm", "native"] {
            let output = wasched(&["simulate", "--runtime", runtime, path.to_str().unwrap()]);
            let nodes: Vec<String> = stdout(&output)
                .lines()
                .map(|line| {
                    let value: serde_json::Value = serde_json::from_str(line).unwrap();
                    value["node"].as_str().unwrap_or("none").to_string()
                })
                .collect();
            assert_eq!(nodes, ["n2", "n2", "n2"], "runtime {runtime}, {selector}");
        }
    }
}

/// Web pods that need a memcached in their zone, the first created before any memcached runs;
/// memcached itself is the first pod of a group with affinity to itself.
const AFFINITY_TO_A_PENDING_POD: &str = r#"
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Node, metadata: {name: a1, labels: {topology.kubernetes.io/zone: zone-a}}, status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}}
- {apiVersion: v1, kind: Node, metadata: {name: b1, labels: {topology.kubernetes.io/zone: zone-b}}, status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}}
- {apiVersion: v1, kind: Node, metadata: {name: c1, labels: {topology.kubernetes.io/zone: zone-c}}, status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}}
- apiVersion: v1
  kind: Pod
  metadata: {name: web-1, namespace: shop, labels: {app: web}}
  spec:
    containers: [{name: c}]
    affinity:
      podAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
        - labelSelector: {matchLabels: {app: memcached}}
          topologyKey: topology.kubernetes.io/zone
- apiVersion: v1
  kind: Pod
  metadata: {name: memcached, namespace: shop, labels: {app: memcached}}
  spec:
    containers: [{name: c}]
    affinity:
      podAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
        - labelSelector: {matchLabels: {app: memcached}}
          topologyKey: topology.kubernetes.io/zone
- apiVersion: v1
  kind: Pod
  metadata: {name: web-2, namespace: shop, labels: {app: web}}
  spec:
    containers: [{name: c}]
    affinity:
      podAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
        - labelSelector: {matchLabels: {app: memcached}}
          topologyKey: topology.kubernetes.io/zone
"#;

#[test]
fn affinity_to_a_pod_not_running_yet_waits_for_it_then_follows_it() {
    let path = temp_file("memcached.yaml", AFFINITY_TO_A_PENDING_POD);
    for runtime in ["wasm", "native"] {
        let output = wasched(&["simulate", "--runtime", runtime, path.to_str().unwrap()]);
        let lines: Vec<serde_json::Value> = stdout(&output)
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        let by_pod = |name: &str| {
            lines
                .iter()
                .find(|l| l["pod"] == format!("shop/{name}"))
                .unwrap_or_else(|| panic!("runtime {runtime}: no line for {name}: {lines:?}"))
        };
        assert_eq!(
            by_pod("web-1")["message"],
            "0/3 nodes are available: 3 node(s) didn't match pod affinity rules. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.",
            "runtime {runtime}"
        );
        let memcached = by_pod("memcached")["node"]
            .as_str()
            .expect("memcached is placed");
        assert_eq!(
            by_pod("web-2")["node"],
            memcached,
            "runtime {runtime}: each zone has one node, so web-2 shares memcached's"
        );
    }
}

const NAMESPACE_SELECTORS: &str = r#"
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Namespace, metadata: {name: team-a, labels: {team: a}}}
- {apiVersion: v1, kind: Namespace, metadata: {name: team-b, labels: {team: b}}}
- {apiVersion: v1, kind: Node, metadata: {name: a1, labels: {topology.kubernetes.io/zone: zone-a}}, status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}}
- {apiVersion: v1, kind: Node, metadata: {name: b1, labels: {topology.kubernetes.io/zone: zone-b}}, status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}}
- apiVersion: v1
  kind: Pod
  metadata: {name: cache, namespace: team-a, labels: {app: cache}}
  spec: {nodeName: a1, containers: [{name: c}]}
  status: {phase: Running}
- apiVersion: v1
  kind: Pod
  metadata: {name: near-team-a, namespace: web}
  spec:
    containers: [{name: c}]
    affinity:
      podAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
        - labelSelector: {matchLabels: {app: cache}}
          namespaceSelector: {matchLabels: {team: a}}
          topologyKey: topology.kubernetes.io/zone
- apiVersion: v1
  kind: Pod
  metadata: {name: near-team-b, namespace: web}
  spec:
    containers: [{name: c}]
    affinity:
      podAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
        - labelSelector: {matchLabels: {app: cache}}
          namespaceSelector: {matchLabels: {team: b}}
          topologyKey: topology.kubernetes.io/zone
"#;

#[test]
fn namespace_selectors_read_the_namespaces_of_the_input() {
    let path = temp_file("namespaces.yaml", NAMESPACE_SELECTORS);
    for runtime in ["wasm", "native"] {
        let output = wasched(&["simulate", "--runtime", runtime, path.to_str().unwrap()]);
        assert_eq!(
            stdout(&output).lines().collect::<Vec<_>>(),
            [
                r#"{"pod":"web/near-team-a","node":"a1"}"#,
                r#"{"pod":"web/near-team-b","node":null,"message":"0/2 nodes are available: 2 node(s) didn't match pod affinity rules. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."}"#,
            ],
            "runtime {runtime}: the cache runs in team-a, which only the first pod's selector picks"
        );
    }
}

#[test]
fn a_plugin_built_against_wit_0_1_still_loads_and_answers() {
    let component = wasched_test_programs::component("wasched_fixture_v01_maintenance.wasm");
    let inspected = stdout(&wasched(&[
        "plugin",
        "inspect",
        component.to_str().unwrap(),
    ]));
    for line in [
        "world:    wasched:plugin/plugin@0.1.0",
        "plugin:   V01Maintenance 0.1.0 (filter, score)",
        "normalize: scale",
        "reads:    pod labels; node usage",
        "accepted: yes",
    ] {
        assert!(
            inspected.lines().any(|l| l == line),
            "{line:?} missing from:\n{inspected}"
        );
    }
    let config = temp_file(
        "v01.toml",
        &format!(
            r#"
[plugins.V01Maintenance]
component = "{}"

[[profiles]]
scheduler_name = "default-scheduler"
filters = ["NodeAffinity", "NodeResourcesFit", "V01Maintenance"]
scores = [{{ plugin = "V01Maintenance", weight = 1 }}]
"#,
            component.display()
        ),
    );
    let cluster = temp_file(
        "v01.yaml",
        r#"
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Node, metadata: {name: blue, labels: {pool: blue}}, status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}}
- {apiVersion: v1, kind: Node, metadata: {name: green, labels: {pool: green}}, status: {allocatable: {cpu: "4", memory: 8Gi, pods: "1"}}}
- {apiVersion: v1, kind: Node, metadata: {name: down, labels: {pool: green, maintenance: "true"}}, status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}}
- {apiVersion: v1, kind: Node, metadata: {name: cordoned, labels: {pool: green}}, spec: {unschedulable: true}, status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}}
- {apiVersion: v1, kind: Pod, metadata: {name: likes-blue, namespace: default, labels: {pool: blue}}, spec: {containers: [{name: c}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: green-1, namespace: default}, spec: {nodeSelector: {pool: green}, containers: [{name: c}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: green-2, namespace: default}, spec: {nodeSelector: {pool: green}, containers: [{name: c}]}}
"#,
    );
    let lines = output_lines(&[
        "simulate",
        "--config",
        config.to_str().unwrap(),
        cluster.to_str().unwrap(),
    ]);
    assert_eq!(
        lines,
        [
            r#"{"pod":"default/likes-blue","node":"blue"}"#,
            r#"{"pod":"default/green-1","node":"green"}"#,
            r#"{"pod":"default/green-2","node":null,"message":"0/4 nodes are available: 1 Too many pods, 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) were cordoned, 1 node(s) were under maintenance. preemption: 0/4 nodes are available: 1 No preemption victims found for incoming pod, 3 Preemption is not helpful for scheduling."}"#,
        ]
    );
}

/// A full cluster: two nodes, each filled by a batch pod; a critical pod arrives, and another
/// that may not preempt. The batch pod that started last and whose budget allows it is evicted.
const FULL_CLUSTER: &str = r#"
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Node, metadata: {name: n1}, status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}}
- {apiVersion: v1, kind: Node, metadata: {name: n2}, status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}}
- apiVersion: policy/v1
  kind: PodDisruptionBudget
  metadata: {name: reports, namespace: batch}
  spec: {selector: {matchLabels: {app: reports}}}
  status: {disruptionsAllowed: 0, currentHealthy: 1, desiredHealthy: 1, expectedPods: 1}
- apiVersion: v1
  kind: Pod
  metadata: {name: reports, namespace: batch, labels: {app: reports}}
  spec: {nodeName: n1, priority: 10, containers: [{name: c, resources: {requests: {cpu: "3"}}}]}
  status: {startTime: "2026-11-20T10:00:00Z"}
- apiVersion: v1
  kind: Pod
  metadata: {name: etl, namespace: batch, labels: {app: etl}}
  spec: {nodeName: n2, priority: 10, containers: [{name: c, resources: {requests: {cpu: "3"}}}]}
  status: {startTime: "2026-11-20T09:00:00Z"}
- apiVersion: v1
  kind: Pod
  metadata: {name: patient, namespace: web}
  spec: {priority: 500, preemptionPolicy: Never, containers: [{name: c, resources: {requests: {cpu: "3"}}}]}
- apiVersion: v1
  kind: Pod
  metadata: {name: critical, namespace: web}
  spec: {priority: 1000, containers: [{name: c, resources: {requests: {cpu: "2"}}}]}
"#;

const PREEMPTION_OFF: &str = "[[profiles]]\npreemption = { enabled = false }\n";

#[test]
fn a_critical_pod_evicts_the_least_costly_victim_and_takes_its_node() {
    let cluster = temp_file("full-cluster.yaml", FULL_CLUSTER);
    // Preemption is on in the default profile, as in kube-scheduler.
    for runtime in ["wasm", "native"] {
        let lines = output_lines(&["simulate", "--runtime", runtime, cluster.to_str().unwrap()]);
        assert_eq!(
            lines,
            [
                r#"{"pod":"web/critical","node":null,"message":"0/2 nodes are available: 2 Insufficient cpu.","preemption":{"node":"n2","victims":[{"pod":"batch/etl","uid":"","priority":10,"terminating":false}],"pdbViolations":0}}"#,
                r#"{"pod":"web/patient","node":null,"message":"0/2 nodes are available: 2 Insufficient cpu. preemption: not eligible due to preemptionPolicy=Never."}"#,
                r#"{"pod":"web/critical","node":"n2"}"#,
            ],
            "runtime {runtime}: evicting reports would break its budget, so etl goes although it \
             started earlier. While the critical pod backs off, the pod that never preempts is \
             tried: n2 is free now, but the critical pod nominated there outranks it and counts \
             as running there. Then the critical pod takes n2, its nominated node"
        );
    }
}

#[test]
fn explain_shows_the_victims_preemption_would_evict_on_each_candidate_node() {
    let cluster = temp_file("full-cluster-explain.yaml", FULL_CLUSTER);
    let lines = output_lines(&[
        "simulate",
        "--explain",
        "--output",
        "table",
        cluster.to_str().unwrap(),
    ]);
    let candidate = |node: &str| {
        lines
            .iter()
            .filter(|l| l.trim_start().starts_with(node) && l.contains("preemption would evict"))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect::<Vec<_>>()
    };
    // Both nodes are candidates; the chosen one (n2) is the one the decision names.
    assert_eq!(
        candidate("n1"),
        ["n1 preemption would evict batch/reports (priority 10) breaking 1 PodDisruptionBudget"],
        "{lines:#?}"
    );
    assert_eq!(
        candidate("n2"),
        ["n2 preemption would evict batch/etl (priority 10)"],
        "{lines:#?}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with("web/critical")
            && l.contains("(nominated to n2, evicting batch/etl)")),
        "{lines:#?}"
    );
}

#[test]
fn a_profile_with_preemption_off_leaves_the_critical_pod_waiting() {
    let cluster = temp_file("full-cluster-off.yaml", FULL_CLUSTER);
    let config = temp_file("preemption-off.toml", PREEMPTION_OFF);
    let lines = output_lines(&[
        "simulate",
        "--config",
        config.to_str().unwrap(),
        cluster.to_str().unwrap(),
    ]);
    assert_eq!(
        lines,
        [
            r#"{"pod":"web/critical","node":null,"message":"0/2 nodes are available: 2 Insufficient cpu."}"#,
            r#"{"pod":"web/patient","node":null,"message":"0/2 nodes are available: 2 Insufficient cpu."}"#,
        ]
    );
}

const VOLUMES: &str = "examples/clusters/volumes.yaml";

/// kube-scheduler's answers for the volume stories: a StatefulSet replica whose volume stayed in
/// the zone it left, a local volume on a removed node, a claim larger than any local disk, an
/// Immediate claim not bound yet; three replicas sharing two free local disks, each taken once;
/// a claim provisioned in the one zone its class allows.
const VOLUME_DECISIONS: &[&str] = &[
    r#"{"pod":"shop/db-0","node":null,"message":"0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 2 node(s) didn't match PersistentVolume's node affinity. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."}"#,
    r#"{"pod":"shop/cache","node":null,"message":"0/3 nodes are available: 3 node(s) didn't match PersistentVolume's node affinity. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."}"#,
    r#"{"pod":"shop/warehouse","node":null,"message":"0/3 nodes are available: 3 node(s) didn't find available persistent volumes to bind. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."}"#,
    r#"{"pod":"shop/uploader","node":null,"message":"0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."}"#,
    r#"{"pod":"shop/search-0","node":"node-b1"}"#,
    r#"{"pod":"shop/search-1","node":"node-a1"}"#,
    r#"{"pod":"shop/search-2","node":null,"message":"0/3 nodes are available: 3 node(s) didn't find available persistent volumes to bind. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."}"#,
    r#"{"pod":"shop/queue","node":"node-b2"}"#,
];

#[test]
fn pods_with_claims_are_placed_and_explained_as_kube_scheduler_would() {
    for runtime in ["wasm", "native"] {
        let lines = output_lines(&["simulate", "--runtime", runtime, VOLUMES]);
        assert_eq!(lines, VOLUME_DECISIONS, "runtime {runtime}");
    }
}

#[test]
fn a_profile_without_volume_binding_places_pods_as_if_volumes_did_not_matter() {
    let config = temp_file(
        "no-volume-binding.toml",
        r#"[[profiles]]
scheduler_name = "default-scheduler"
filters = ["NodeUnschedulable", "NodeName", "TaintToleration", "NodeAffinity", "NodePorts", "NodeResourcesFit", "VolumeZone", "PodTopologySpread", "InterPodAffinity"]
"#,
    );
    let lines = output_lines(&["simulate", "--config", config.to_str().unwrap(), VOLUMES]);
    let placed = lines
        .iter()
        .filter(|l| !l.contains(r#""node":null"#))
        .count();
    // Without VolumeBinding only VolumeZone looks at claims: it lets through volumes pinned
    // elsewhere and claims no disk can hold; it still rejects the unbound Immediate claim.
    assert_eq!(placed, 7, "{lines:#?}");
    assert!(
        lines.contains(&r#"{"pod":"shop/uploader","node":null,"message":"0/3 nodes are available: PersistentVolume had no name. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."}"#.to_string()),
        "{lines:#?}"
    );
}

#[test]
fn a_kube_scheduler_configuration_and_its_toml_explain_every_example_cluster_alike() {
    let empty = temp_file(
        "empty-kube-scheduler.yaml",
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n",
    );
    let empty = empty.to_str().unwrap();
    let mut clusters: Vec<PathBuf> = std::fs::read_dir(root().join("examples/clusters"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    clusters.sort();
    assert!(clusters.len() >= 5);
    for cluster in &clusters {
        let cluster = cluster.to_str().unwrap();
        let explained = |config: Option<&str>| {
            let mut args = vec!["simulate", "--explain"];
            if let Some(config) = config {
                args.extend(["--config", config]);
            }
            args.push(cluster);
            stdout(&wasched(&args))
        };
        assert_eq!(
            explained(Some("examples/configs/bin-packing.kube-scheduler.yaml")),
            explained(Some("examples/configs/bin-packing.toml")),
            "{cluster}"
        );
        assert_eq!(explained(Some(empty)), explained(None), "{cluster}");
    }
    // `config convert` prints the TOML, `config check` the chains it resolves to.
    let check = |config: &str| stdout(&wasched(&["config", "check", config]));
    assert_eq!(
        check("examples/configs/bin-packing.kube-scheduler.yaml"),
        check("examples/configs/bin-packing.toml")
    );
    let toml = stdout(&wasched(&[
        "config",
        "convert",
        "examples/configs/bin-packing.kube-scheduler.yaml",
    ]));
    assert!(toml.contains("type = \"MostAllocated\""), "{toml}");
}

#[test]
fn a_kube_scheduler_configuration_mistake_names_the_field() {
    let path = temp_file(
        "extenders.yaml",
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
         profiles:\n- plugins:\n    score:\n      enabled:\n      - name: NodeAffinity\n        weigth: 2\n",
    );
    let output = wasched(&["simulate", "--config", path.to_str().unwrap(), DEMO]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("extenders.yaml:8") && stderr.contains("unknown field `weigth`"),
        "{stderr}"
    );
}

/// kube-scheduler 1.34's storage and image rules together, on `examples/clusters/storage-limits.yaml`:
/// ImageLocality, NodeVolumeLimits (CSINode), VolumeRestrictions (ReadWriteOncePod) and
/// VolumeBinding's storage capacity check (CSIDriver, CSIStorageCapacity), each with kube's text.
#[test]
fn volume_limits_exclusive_claims_storage_capacity_and_image_locality_decide_as_kube_scheduler() {
    let lines = output_lines(&["simulate", "examples/clusters/storage-limits.yaml"]);
    let not_helpful =
        "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.";
    let no_victims =
        "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod.";
    assert_eq!(
        lines,
        [
            format!(
                r#"{{"pod":"shop/db","node":null,"message":"0/2 nodes are available: 2 node(s) did not have enough free storage. {not_helpful}"}}"#
            ),
            r#"{"pod":"shop/web-1","node":"n1"}"#.to_string(),
            r#"{"pod":"shop/web-2","node":"n2"}"#.to_string(),
            r#"{"pod":"shop/web-3","node":"n2"}"#.to_string(),
            format!(
                r#"{{"pod":"shop/web-4","node":null,"message":"0/2 nodes are available: 2 node(s) exceed max volume count. {no_victims}"}}"#
            ),
            r#"{"pod":"shop/solo-1","node":"n1"}"#.to_string(),
            format!(
                r#"{{"pod":"shop/solo-2","node":null,"message":"0/2 nodes are available: 2 node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod. {no_victims}"}}"#
            ),
        ]
    );
}

/// The DRA example: a claim by model and memory, two devices on one PCIe root, a shared claim,
/// a claim no device can satisfy and a template's claim not created yet, with the devices each
/// placement allocated and kube-scheduler's texts.
#[test]
fn dynamic_resources_allocate_devices_and_explain_as_kube_scheduler() {
    let lines = output_lines(&["simulate", "examples/clusters/gpus-dra.yaml"]);
    let device = |claim: &str, request: &str, node: &str, gpu: &str| {
        format!(
            r#"{{"claim":"{claim}","request":"{request}","device":"gpu.example.com/{node}/{gpu}"}}"#
        )
    };
    assert_eq!(
        lines,
        [
            r#"{"pod":"ml/waiting","node":null,"message":"pod \"ml/waiting\": ResourceClaim not created yet","gated":true}"#.to_string(),
            format!(
                r#"{{"pod":"ml/pair","node":"n2","devices":[{},{}]}}"#,
                device("pair", "gpus", "n2", "gpu-0"),
                device("pair", "gpus", "n2", "gpu-1")
            ),
            format!(
                r#"{{"pod":"ml/trainer","node":"n2","devices":[{}]}}"#,
                device("big-memory", "gpu", "n2", "gpu-2")
            ),
            format!(
                r#"{{"pod":"ml/notebook-a","node":"n1","devices":[{}]}}"#,
                device("shared", "gpu", "n1", "gpu-0")
            ),
            // The shared claim is allocated already: the second pod follows it to n1.
            r#"{"pod":"ml/notebook-b","node":"n1"}"#.to_string(),
            r#"{"pod":"ml/huge","node":null,"message":"0/2 nodes are available: 2 cannot allocate all claims. still not schedulable, preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."}"#.to_string(),
        ]
    );
}

/// `bytes` with every `from` replaced by `to` (of the same length).
fn replace_all(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let mut out = bytes.to_vec();
    let mut i = 0;
    while i + from.len() <= out.len() {
        if &out[i..i + from.len()] == from {
            out[i..i + from.len()].copy_from_slice(to);
            i += from.len();
        } else {
            i += 1;
        }
    }
    out
}

/// Each pod's last decision in `wasched simulate`'s JSON lines: its node, or its message.
fn simulated_ends(config: &str, cluster: &str) -> Vec<(String, Value)> {
    let mut args = vec!["simulate", cluster];
    if config != "default" {
        args.extend(["--config", config]);
    }
    let mut ends: Vec<(String, Value)> = Vec::new();
    for line in output_lines(&args) {
        let d: Value = serde_json::from_str(&line).unwrap();
        let pod = d["pod"].as_str().unwrap().to_string();
        let end = match d["node"].as_str() {
            Some(node) => json!({ "node": node }),
            None => match d["message"].as_str() {
                Some(message) => json!({ "message": message }),
                None => json!({}),
            },
        };
        match ends.iter_mut().find(|(p, _)| *p == pod) {
            Some(entry) => entry.1 = end,
            None => ends.push((pod, end)),
        }
    }
    ends
}

#[test]
fn diff_reports_what_two_simulate_runs_place_differently() {
    // The example configurations that need no plugin built first.
    let pairs = [
        ("examples/configs/bin-packing.toml", DEMO),
        (
            "examples/configs/bin-packing.toml",
            "examples/clusters/gpu-models.yaml",
        ),
        (
            "examples/configs/gangs.toml",
            "examples/clusters/gangs.yaml",
        ),
    ];
    let mut changes_seen = 0;
    for (config, cluster) in pairs {
        let output = wasched(&[
            "diff", "--config", "default", "--config", config, cluster, "--json",
        ]);
        let found: Value = serde_json::from_str(&stdout(&output)).unwrap();
        let a = simulated_ends("default", cluster);
        let b = simulated_ends(config, cluster);
        let mut expected = json!({ "changedNode": [], "changedPending": [], "changedMessage": [] });
        let none = json!({});
        let end_of = |ends: &[(String, Value)], pod: &str| {
            ends.iter()
                .find(|(p, _)| p == pod)
                .map_or(none.clone(), |(_, e)| e.clone())
        };
        let only_in_b = b.iter().filter(|(p, _)| !a.iter().any(|(q, _)| q == p));
        let pods: Vec<&String> = a.iter().chain(only_in_b).map(|(p, _)| p).collect();
        for pod in pods {
            let (end_a, end_b) = (&end_of(&a, pod), &end_of(&b, pod));
            if end_a == end_b {
                continue;
            }
            let list = match (end_a["node"].is_string(), end_b["node"].is_string()) {
                (true, true) => "changedNode",
                (false, false) => "changedMessage",
                _ => "changedPending",
            };
            let change = json!({ "pod": pod, "a": end_a, "b": end_b });
            expected[list].as_array_mut().unwrap().push(change);
        }
        for list in ["changedNode", "changedPending", "changedMessage"] {
            assert_eq!(found[list], expected[list], "{config} on {cluster}: {list}");
            changes_seen += found[list].as_array().unwrap().len();
        }
        let placed =
            |ends: &[(String, Value)]| ends.iter().filter(|(_, e)| e["node"].is_string()).count();
        assert_eq!(found["a"]["placed"], placed(&a));
        assert_eq!(found["b"]["placed"], placed(&b));
        assert_eq!(found["b"]["pending"], b.len() - placed(&b));

        // --fail-on turns a change of that kind, and only that kind, into exit status 3.
        for (kind, list) in [
            ("changed-node", "changedNode"),
            ("changed-pending", "changedPending"),
        ] {
            let status = wasched(&[
                "diff",
                "--config",
                "default",
                "--config",
                config,
                cluster,
                "--fail-on",
                kind,
            ])
            .status
            .code();
            let changed = !found[list].as_array().unwrap().is_empty();
            assert_eq!(
                status,
                Some(if changed { 3 } else { 0 }),
                "{config} on {cluster} --fail-on {kind}"
            );
        }
    }
    assert!(
        changes_seen > 0,
        "the example configurations change some placements"
    );
}

#[test]
fn diff_needs_two_configurations() {
    let output = wasched(&["diff", "--config", "default", DEMO]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("give --config twice"));
}
