//! The scheduling cycle through the library: sampling and its rotating start, node narrowing,
//! random tie-breaking, resources taken by each placement, and WASM/native equivalence over a
//! whole synthetic cluster.

use std::path::Path;

use wasched::bench;
use wasched::config::{Config, DefaultPluginRuntime};
use wasched::framework::{Decider, Outcome};
use wasched::synthetic::{self, Scenario};
use wasched_sdk::{NodeAffinity, NodeSelectorTerm};

use crate::support::*;

fn decider(toml: &str, runtime: DefaultPluginRuntime, seed: u64) -> Decider {
    let mut config = Config::parse("test.toml", Path::new("."), toml.to_string()).unwrap();
    config.default_plugins = runtime;
    Decider::new(&config.profiles().unwrap(), seed).unwrap()
}

fn examined(outcome: &Outcome) -> Vec<String> {
    outcome.nodes.iter().map(|n| n.node.clone()).collect()
}

#[test]
fn sampling_stops_at_the_percentage_and_the_next_cycle_starts_where_it_stopped() {
    // Only filters, and NodeResourcesFit to score, so every node is feasible and equally good.
    let toml = "[[profiles]]\npercentage_of_nodes_to_score = 40\nfilters = [\"NodeResourcesFit\"]\nscores = [{ plugin = \"NodeResourcesFit\" }]\n";
    for runtime in [DefaultPluginRuntime::Wasm, DefaultPluginRuntime::Native] {
        let mut s = decider(toml, runtime, 1);
        for i in 0..300 {
            s.cache_mut().upsert_node(node(&format!("n{i:03}")));
        }
        let first = schedule_and_assume(&mut s, &cpu_pod("a", 0), true);
        let names = examined(&first);
        assert_eq!(names.len(), 120, "40% of 300 nodes");
        assert_eq!(names.first().unwrap(), "n000");
        let second = schedule_and_assume(&mut s, &cpu_pod("b", 0), true);
        assert_eq!(
            examined(&second).first().unwrap(),
            "n120",
            "{runtime:?}: starts after the last examined node"
        );
        let third = schedule_and_assume(&mut s, &cpu_pod("c", 0), true);
        let names = examined(&third);
        assert_eq!(names.first().unwrap(), "n240");
        assert_eq!(names.last().unwrap(), "n059", "wraps around");
    }
}

/// An explain (a dry-run cycle) reports what a cycle would examine but leaves no trace: the next
/// real cycle starts its search where it would have without it.
#[test]
fn an_explained_cycle_does_not_move_where_the_next_one_starts() {
    let toml = "[[profiles]]\npercentage_of_nodes_to_score = 40\nfilters = [\"NodeResourcesFit\"]\nscores = [{ plugin = \"NodeResourcesFit\" }]\n";
    let mut s = decider(toml, DefaultPluginRuntime::Native, 1);
    for i in 0..300 {
        s.cache_mut().upsert_node(node(&format!("n{i:03}")));
    }
    schedule_and_assume(&mut s, &cpu_pod("a", 0), true);
    let explained = s.explain(&cpu_pod("b", 0)).unwrap();
    assert_eq!(examined(&explained).len(), 120);
    assert_eq!(examined(&explained).first().unwrap(), "n120");
    assert!(explained.node.is_some(), "it would fit");
    let next = schedule_and_assume(&mut s, &cpu_pod("c", 0), true);
    assert_eq!(
        examined(&next).first().unwrap(),
        "n120",
        "as if b was never asked about"
    );
}

#[test]
fn without_score_plugins_the_first_feasible_node_wins() {
    let toml = "[[profiles]]\nfilters = [\"NodeResourcesFit\"]\nscores = []\n";
    let mut s = decider(toml, DefaultPluginRuntime::Wasm, 1);
    s.cache_mut()
        .upsert_node(NodeInfoBuilder::cpu("small", 500));
    s.cache_mut()
        .upsert_node(NodeInfoBuilder::cpu("big-1", 4000));
    s.cache_mut()
        .upsert_node(NodeInfoBuilder::cpu("big-2", 4000));
    let outcome = schedule_and_assume(&mut s, &cpu_pod("p", 1000), true);
    assert_eq!(outcome.node.as_deref(), Some("big-1"));
    assert_eq!(
        examined(&outcome),
        vec!["small", "big-1"],
        "stopped at the first feasible node"
    );
}

struct NodeInfoBuilder;

impl NodeInfoBuilder {
    fn cpu(name: &str, milli_cpu: i64) -> wasched_sdk::NodeInfo {
        let mut n = node(name);
        n.allocatable.milli_cpu = milli_cpu;
        n
    }
}

#[test]
fn each_placement_takes_its_resources_before_the_next_pod() {
    let mut s = decider("", DefaultPluginRuntime::Wasm, 1);
    s.cache_mut()
        .upsert_node(NodeInfoBuilder::cpu("only", 4000));
    let first = schedule_and_assume(&mut s, &cpu_pod("a", 3000), false);
    assert_eq!(first.node.as_deref(), Some("only"));
    let second = schedule_and_assume(&mut s, &cpu_pod("b", 3000), false);
    assert_eq!(second.node, None);
    assert_eq!(
        second.message.as_deref(),
        Some("0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.")
    );
    assert!(s.cache_mut().remove_pod("default/a"));
    let third = schedule_and_assume(&mut s, &cpu_pod("b", 3000), false);
    assert_eq!(
        third.node.as_deref(),
        Some("only"),
        "freed cpu is visible to the plugins again"
    );
}

#[test]
fn nodes_outside_a_prefilter_result_are_counted_in_the_message() {
    let mut s = decider("", DefaultPluginRuntime::Wasm, 1);
    for name in ["a", "b", "c"] {
        s.cache_mut().upsert_node(NodeInfoBuilder::cpu(name, 1000));
    }
    let mut p = cpu_pod("p", 2000);
    p.node_affinity = Some(NodeAffinity {
        required: Some(vec![NodeSelectorTerm {
            match_expressions: Vec::new(),
            match_fields: vec![requirement("metadata.name", "In", &["b"])],
        }]),
        preferred: Vec::new(),
    });
    let outcome = schedule_and_assume(&mut s, &p, false);
    assert_eq!(
        outcome.message.as_deref(),
        Some("0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't satisfy plugin(s) [NodeAffinity]. preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, 2 Preemption is not helpful for scheduling.")
    );
}

#[test]
fn ties_are_broken_at_random_and_reproducibly() {
    let chosen = |seed: u64| -> Vec<String> {
        let mut s = decider("", DefaultPluginRuntime::Native, seed);
        for i in 0..20 {
            s.cache_mut().upsert_node(node(&format!("n{i:02}")));
        }
        (0..5)
            .map(|i| {
                let outcome = schedule_and_assume(&mut s, &cpu_pod(&format!("p{i}"), 0), false);
                // Remove the pod again so every cycle sees twenty identical nodes.
                s.cache_mut().remove_pod(&format!("default/p{i}"));
                outcome.node.unwrap()
            })
            .collect()
    };
    let a = chosen(1);
    assert_eq!(a, chosen(1), "same seed, same choices");
    let distinct: std::collections::BTreeSet<&String> = a.iter().collect();
    assert!(
        distinct.len() > 1,
        "ties do not always go to the same node: {a:?}"
    );
    assert_ne!(a, chosen(2), "another seed, other choices");
}

#[test]
fn wasm_and_native_place_a_synthetic_cluster_identically() {
    let cluster = synthetic::cluster(Scenario::Mixed, 400, 600, 7);
    let place = |runtime| -> Vec<(Option<String>, Option<String>)> {
        let mut s = decider("", runtime, 3);
        cluster.load_into(s.cache_mut());
        cluster
            .pods
            .iter()
            .map(|p| {
                let o = schedule_and_assume(&mut s, p, false);
                (o.node, o.message)
            })
            .collect()
    };
    let wasm = place(DefaultPluginRuntime::Wasm);
    let native = place(DefaultPluginRuntime::Native);
    assert_eq!(wasm.len(), 600);
    for (i, (w, n)) in wasm.iter().zip(&native).enumerate() {
        assert_eq!(w, n, "pod {i}");
    }
    assert!(
        wasm.iter().filter(|(node, _)| node.is_some()).count() > 500,
        "most pods fit"
    );
    // The pod-aware pods of the mixed scenario were placed by their rules: no two replicas of a
    // group with required anti-affinity share a host, no two pods take one host port of a node.
    let mut seen = std::collections::HashSet::new();
    let (mut anti, mut ports) = (0, 0);
    for (pod, (node, _)) in cluster.pods.iter().zip(&wasm) {
        let Some(node) = node else { continue };
        if !pod.pod_affinity.required_anti_affinity.is_empty() {
            let group = pod.labels.get("app").unwrap();
            assert!(
                seen.insert((group.to_string(), node.clone())),
                "{group} twice on {node}"
            );
            anti += 1;
        }
        for port in &pod.host_ports {
            assert!(
                seen.insert((port.port.to_string(), node.clone())),
                "port on {node} twice"
            );
            ports += 1;
        }
    }
    assert!(
        anti > 20 && ports > 10,
        "{anti} anti-affinity pods, {ports} host ports placed"
    );
}

#[test]
fn bench_scenarios_exercise_only_their_features_and_report_where_time_goes() {
    let basic = synthetic::cluster(Scenario::Basic, 300, 400, 5);
    assert!(basic
        .nodes
        .iter()
        .all(|n| n.taints.is_empty() && !n.unschedulable));
    assert!(basic.pods.iter().all(|p| p.tolerations.is_empty()
        && p.node_affinity.is_none()
        && p.node_selector.is_empty()
        && p.volume_claims.is_empty()));
    assert!(basic.pods.iter().all(|p| p.labels.is_empty()
        && p.host_ports.is_empty()
        && p.topology_spread_constraints.is_empty()));
    let mixed = synthetic::cluster(Scenario::Mixed, 300, 400, 5);
    let has = |test: fn(&wasched_sdk::Pod) -> bool| mixed.pods.iter().any(test);
    assert!(has(|p| !p.pod_affinity.required_anti_affinity.is_empty()));
    assert!(has(|p| !p.pod_affinity.preferred_affinity.is_empty()));
    assert!(has(|p| !p.topology_spread_constraints.is_empty()));
    assert!(has(
        |p| p.controller.is_some() && p.topology_spread_constraints.is_empty()
    ));
    assert!(has(|p| !p.host_ports.is_empty()));
    assert!(
        !mixed.selectors.is_empty(),
        "the ReplicaSets of its Deployments"
    );
    let taints = synthetic::cluster(Scenario::Taints, 300, 400, 5);
    assert!(taints.nodes.iter().any(|n| !n.taints.is_empty()));
    assert!(taints.pods.iter().any(|p| !p.tolerations.is_empty()));
    assert!(taints
        .pods
        .iter()
        .all(|p| p.node_affinity.is_none() && p.volume_claims.is_empty()));
    let affinity = synthetic::cluster(Scenario::NodeAffinity, 300, 400, 5);
    assert!(affinity.pods.iter().any(|p| p.node_affinity.is_some()));
    assert!(affinity.nodes.iter().all(|n| n.taints.is_empty()));
    let volumes = synthetic::cluster(Scenario::VolumeZones, 300, 400, 5);
    assert!(volumes.pods.iter().any(|p| !p.volume_claims.is_empty()));
    assert_eq!(
        volumes.claims.len(),
        volumes
            .pods
            .iter()
            .filter(|p| !p.volume_claims.is_empty())
            .count()
    );

    let churn = synthetic::cluster(Scenario::Churn, 300, 400, 5);
    let report = bench::run_once(
        &churn,
        Scenario::Churn,
        DefaultPluginRuntime::Native,
        true,
        1,
        5,
        None,
    )
    .unwrap();
    assert_eq!(report.scheduled + report.unschedulable + report.errors, 400);
    assert_eq!(report.errors, 0);
    let phase = |name: &str| {
        report
            .phases_us
            .iter()
            .find(|(p, _)| *p == name)
            .map(|(_, us)| *us)
            .unwrap()
    };
    assert!(phase("filter") > 0.0 && phase("score") > 0.0 && phase("assume") > 0.0);
    let filter_in_plugins: f64 = report
        .plugins_us
        .iter()
        .filter(|t| t.extension_point == "Filter")
        .map(|t| t.us_per_pod)
        .sum();
    assert!(
        filter_in_plugins > 0.0 && filter_in_plugins <= phase("filter") * 1.01,
        "plugin filter time {filter_in_plugins} µs is part of the filter phase {} µs",
        phase("filter")
    );
    assert!(report
        .plugins_us
        .iter()
        .any(|t| t.plugin == "NodeResourcesFit" && t.extension_point == "Filter"));
    assert!(report
        .plugins_us
        .iter()
        .any(|t| t.plugin == "TaintToleration" && t.extension_point == "PreFilter"));
}

#[test]
fn the_preemption_scenario_places_every_pod_by_evicting_lower_priority_ones() {
    let cluster = synthetic::cluster(Scenario::Preemption, 200, 40, 3);
    assert_eq!(cluster.running.len(), 800, "four pods fill each node");
    let reports: Vec<_> = [DefaultPluginRuntime::Wasm, DefaultPluginRuntime::Native]
        .into_iter()
        .map(|runtime| {
            bench::run_once(&cluster, Scenario::Preemption, runtime, true, 1, 3, None).unwrap()
        })
        .collect();
    for report in &reports {
        assert_eq!(
            (report.scheduled, report.errors),
            (40, 0),
            "{}",
            report.runtime
        );
        assert!(report.preemptions > 0 && report.preemption_attempt_us.is_some());
    }
    assert_eq!(
        reports[0].preemptions, reports[1].preemptions,
        "WASM and native preempt for the same pods"
    );
}

/// Worker threads split each chunk and the feasible nodes between them; the cycle must still
/// place every pod exactly where one thread would, and explain failures the same way.
#[test]
fn two_filter_and_score_threads_place_pods_exactly_like_one() {
    let mut cluster = synthetic::cluster(Scenario::Mixed, 400, 300, 11);
    // Pods too big for any node, among the others, so that failure messages are compared too.
    for i in 0..5 {
        let mut pod = cluster.pods[i * 50].clone();
        pod.name = format!("too-big-{i}");
        pod.requests.milli_cpu = 1_000_000;
        pod.non_zero_requests.milli_cpu = 1_000_000;
        cluster.pods.insert(i * 60, pod);
    }
    let run =
        |runtime: DefaultPluginRuntime, threads: usize| -> Vec<(Option<String>, Option<String>)> {
            let toml = format!("[runtime]\nparallelism = {threads}\n");
            let mut decider = decider(&toml, runtime, 11);
            cluster.load_into(decider.cache_mut());
            cluster
                .pods
                .iter()
                .map(|pod| {
                    let outcome = schedule_and_assume(&mut decider, pod, false);
                    assert!(!outcome.error, "{:?}", outcome.message);
                    (outcome.node, outcome.message)
                })
                .collect()
        };
    for runtime in [DefaultPluginRuntime::Native, DefaultPluginRuntime::Wasm] {
        let one = run(runtime, 1);
        let two = run(runtime, 2);
        assert!(one.iter().any(|(node, _)| node.is_some()));
        assert!(
            one.iter().any(|(_, message)| message.is_some()),
            "some pods fit nowhere"
        );
        assert_eq!(one, two, "{runtime:?}");
    }
    match Config::parse(
        "t.toml",
        Path::new("."),
        "[runtime]\nparallelism = 0\n".into(),
    ) {
        Err(e) => assert!(
            e.to_string().contains("parallelism must be in 1..=64"),
            "{e}"
        ),
        Ok(_) => panic!("parallelism 0 must be refused"),
    }
}
