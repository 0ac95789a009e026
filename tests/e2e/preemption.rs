//! DefaultPreemption through the scheduler library, with NodeResourcesFit (and NodeAffinity)
//! running as WebAssembly and natively: cases converted from kube-scheduler's
//! `default_preemption_test.go` (TestPostFilter, TestSelectCandidate, SelectVictimsOnNode) and
//! the choices its `pickOneNodeForPreemption` makes, each run on both runtimes with the same
//! answer required.

use std::path::Path;

use wasched::cache::DisruptionBudget;
use wasched::config::{Config, DefaultPluginRuntime};
use wasched::framework::{Decider, Outcome};
use wasched_sdk::{LabelSelector, NodeInfo, Pod};

use crate::support::*;

const LOW: i32 = 0;
const MID: i32 = 100;
const HIGH: i32 = 1000;
const VERY_HIGH: i32 = 10_000;

fn profile(filters: &str) -> String {
    format!(
        "[[profiles]]\nfilters = [{filters}]\nscores = [{{ plugin = \"NodeResourcesFit\" }}]\npreemption = {{ enabled = true }}\n"
    )
}

/// A cluster for one case: nodes, the pods on them (`(pod, node)`), budgets.
#[derive(Default, Clone)]
struct Cluster {
    nodes: Vec<NodeInfo>,
    pods: Vec<(Pod, &'static str)>,
    budgets: Vec<DisruptionBudget>,
    filters: &'static str,
}

/// What a cycle ended with, comparable between runtimes: the message, and the nomination with
/// its victims.
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    node: Option<String>,
    message: Option<String>,
    nominated: Option<String>,
    victims: Vec<String>,
    pdb_violations: usize,
}

fn answer(outcome: Outcome) -> Answer {
    Answer {
        node: outcome.node,
        message: outcome.message,
        nominated: outcome.preemption.as_ref().map(|p| p.node.clone()),
        victims: outcome
            .preemption
            .as_ref()
            .map(|p| p.victims.iter().map(|v| v.pod.clone()).collect())
            .unwrap_or_default(),
        pdb_violations: outcome.preemption.as_ref().map_or(0, |p| p.pdb_violations),
    }
}

/// Schedules `pod` on `cluster` with both runtimes; both must answer alike. The cache must be
/// as before afterwards: every pod still on its node.
fn preempt(cluster: &Cluster, pod: &Pod) -> Answer {
    let filters = if cluster.filters.is_empty() {
        "\"NodeResourcesFit\""
    } else {
        cluster.filters
    };
    let answers: Vec<Answer> = [DefaultPluginRuntime::Wasm, DefaultPluginRuntime::Native]
        .into_iter()
        .map(|runtime| {
            let mut config = Config::parse("test.toml", Path::new("."), profile(filters)).unwrap();
            config.default_plugins = runtime;
            let mut s = Decider::new(&config.profiles().unwrap(), 1).unwrap();
            for node in &cluster.nodes {
                s.cache_mut().upsert_node(node.clone());
            }
            for (placed, node) in &cluster.pods {
                s.cache_mut().add_pod(placed, node);
            }
            for budget in &cluster.budgets {
                s.cache_mut().upsert_budget(budget.clone());
            }
            let outcome = s.schedule(pod, false).expect("a profile");
            for (placed, node) in &cluster.pods {
                assert_eq!(
                    s.cache().pod_node(&placed.key()),
                    Some(*node),
                    "{runtime:?}: {} is back on its node after the dry runs",
                    placed.key()
                );
            }
            answer(outcome)
        })
        .collect();
    assert_eq!(answers[0], answers[1], "WASM and native differ");
    answers.into_iter().next().unwrap()
}

/// A node that holds `pods` pods and 4 cpus.
fn pods_node(name: &str, pods: i64) -> NodeInfo {
    let mut n = node(name);
    n.allocatable.pods = pods;
    n
}

/// A node with `milli_cpu` cpu.
fn cpu_node(name: &str, milli_cpu: i64) -> NodeInfo {
    let mut n = node(name);
    n.allocatable.milli_cpu = milli_cpu;
    n
}

fn prioritized(mut pod: Pod, priority: i32) -> Pod {
    pod.priority = priority;
    pod
}

fn started(mut pod: Pod, millis: i64) -> Pod {
    pod.start_time_millis = Some(millis);
    pod
}

fn labelled(mut pod: Pod, pairs: &[(&str, &str)]) -> Pod {
    pod.labels = labels(pairs);
    pod
}

fn budget(name: &str, selects: &[(&str, &str)], allowed: i32) -> DisruptionBudget {
    DisruptionBudget {
        namespace: "default".into(),
        name: name.into(),
        selector: Some(LabelSelector {
            match_labels: labels(selects),
            ..LabelSelector::default()
        }),
        disruptions_allowed: allowed,
        disrupted_pods: Vec::new(),
    }
}

#[test]
fn the_node_whose_victims_are_less_important_is_nominated() {
    // TestPostFilter "pod can be made schedulable on one node".
    let cluster = Cluster {
        nodes: vec![pods_node("node1", 1), pods_node("node2", 1)],
        pods: vec![
            (prioritized(pod("p1"), HIGH), "node1"),
            (prioritized(pod("p2"), LOW), "node2"),
        ],
        ..Cluster::default()
    };
    let got = preempt(&cluster, &prioritized(pod("p"), MID));
    assert_eq!(got.node, None, "the pod waits for its victims");
    assert_eq!(got.nominated.as_deref(), Some("node2"));
    assert_eq!(got.victims, ["default/p2"]);
    assert_eq!(
        got.message.as_deref(),
        Some("0/2 nodes are available: 2 Too many pods."),
        "a preemption that found room adds nothing to the FitError"
    );
}

#[test]
fn budgets_decide_first_then_the_highest_victim_priority() {
    // TestPostFilter "pod can be made schedulable on minHighestPriority node": both nodes break
    // one budget, node2's victims are less important.
    let cluster = Cluster {
        nodes: vec![pods_node("node1", 1), pods_node("node2", 1)],
        pods: vec![
            (
                labelled(prioritized(pod("p1"), HIGH), &[("pdb", "non-violating")]),
                "node1",
            ),
            (
                labelled(prioritized(pod("p2"), LOW), &[("pdb", "violating")]),
                "node1",
            ),
            (
                labelled(prioritized(pod("p3"), MID), &[("pdb", "violating")]),
                "node2",
            ),
        ],
        budgets: vec![
            budget("violating-pdb", &[("pdb", "violating")], 0),
            budget("non-violating-pdb", &[("pdb", "non-violating")], i32::MAX),
        ],
        ..Cluster::default()
    };
    let got = preempt(&cluster, &prioritized(pod("p"), VERY_HIGH));
    assert_eq!(got.nominated.as_deref(), Some("node2"));
    assert_eq!(got.victims, ["default/p3"]);
    assert_eq!(got.pdb_violations, 1);

    // When only node2's eviction breaks a budget, node1 wins despite evicting two pods of
    // higher priority.
    let mut spared = cluster.clone();
    spared.budgets = vec![budget("guard-p3", &[("pdb", "violating")], 0)];
    spared.pods[1].0.labels = labels(&[("pdb", "free")]);
    let got = preempt(&spared, &prioritized(pod("p"), VERY_HIGH));
    assert_eq!(
        got.nominated.as_deref(),
        Some("node1"),
        "fewest violations first"
    );
    assert_eq!(
        got.victims,
        ["default/p1", "default/p2"],
        "most important first"
    );
    assert_eq!(got.pdb_violations, 0);
}

#[test]
fn a_node_still_short_without_its_victims_gives_its_own_reason() {
    // TestPostFilter "no candidate nodes found, no enough resource after removing low priority
    // pods".
    let cluster = Cluster {
        nodes: vec![cpu_node("node1", 1000), cpu_node("node2", 1000)],
        pods: vec![(pod("p1"), "node1"), (pod("p2"), "node2")],
        ..Cluster::default()
    };
    let got = preempt(&cluster, &prioritized(cpu_pod("p", 2000), HIGH));
    assert_eq!(got.nominated, None);
    assert_eq!(
        got.message.as_deref(),
        Some("0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 Insufficient cpu.")
    );
}

#[test]
fn nodes_without_lower_priority_pods_have_no_victims() {
    // TestPostFilter "no candidate nodes found with mixed reasons, no lower priority pod and no
    // enough CPU resource".
    let cluster = Cluster {
        nodes: vec![
            pods_node("node1", 1),
            cpu_node("node2", 1000),
            pods_node("node3", 1),
        ],
        pods: vec![
            (prioritized(pod("p1"), HIGH), "node1"),
            (pod("p2"), "node2"),
            (prioritized(pod("p3"), HIGH), "node3"),
        ],
        ..Cluster::default()
    };
    let got = preempt(&cluster, &prioritized(cpu_pod("p", 2000), HIGH));
    assert_eq!(
        got.message.as_deref(),
        Some("0/3 nodes are available: 1 Insufficient cpu, 2 Too many pods. preemption: 0/3 nodes are available: 1 Insufficient cpu, 2 No preemption victims found for incoming pod.")
    );
}

#[test]
fn unresolvable_nodes_are_not_helped_by_preemption() {
    // TestPostFilter "no candidate nodes found with mixed reason, 2 UnschedulableAndUnresolvable
    // nodes and 2 nodes don't have enough CPU resource".
    let zone = |n: NodeInfo, z: &str| with_labels(n, &[("zone", z)]);
    let cluster = Cluster {
        nodes: vec![
            zone(cpu_node("node1", 1000), "a"),
            zone(cpu_node("node2", 1000), "a"),
            zone(cpu_node("node3", 1000), "b"),
            zone(cpu_node("node4", 1000), "b"),
        ],
        pods: vec![(pod("p1"), "node1"), (pod("p2"), "node2")],
        filters: "\"NodeAffinity\", \"NodeResourcesFit\"",
        ..Cluster::default()
    };
    let mut wanting = prioritized(cpu_pod("p", 2000), HIGH);
    wanting.node_selector = labels(&[("zone", "a")]);
    let got = preempt(&cluster, &wanting);
    assert_eq!(
        got.message.as_deref(),
        Some("0/4 nodes are available: 2 Insufficient cpu, 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/4 nodes are available: 2 Insufficient cpu, 2 Preemption is not helpful for scheduling.")
    );

    // Every node unresolvable: nothing is looked at.
    wanting.node_selector = labels(&[("zone", "c")]);
    let got = preempt(&cluster, &wanting);
    assert_eq!(
        got.message.as_deref(),
        Some("0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector. preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling.")
    );
}

#[test]
fn a_pod_that_never_preempts_is_not_eligible() {
    let cluster = Cluster {
        nodes: vec![pods_node("node1", 1)],
        pods: vec![(pod("p1"), "node1")],
        ..Cluster::default()
    };
    let mut polite = prioritized(pod("p"), HIGH);
    polite.never_preempts = true;
    let got = preempt(&cluster, &polite);
    assert_eq!(got.nominated, None);
    assert_eq!(
        got.message.as_deref(),
        Some("0/1 nodes are available: 1 Too many pods. preemption: not eligible due to preemptionPolicy=Never.")
    );
}

#[test]
fn a_pod_whose_victims_are_still_terminating_waits() {
    // TestPodEligibleToPreemptOthers: a lower-priority pod terminating by preemption on the
    // nominated node holds the pod back; a terminating pod of higher priority does not.
    let mut victim = prioritized(pod("p1"), LOW);
    victim.terminating = true;
    victim.terminating_by_preemption = true;
    let cluster = Cluster {
        nodes: vec![pods_node("node1", 1)],
        pods: vec![(victim.clone(), "node1")],
        ..Cluster::default()
    };
    let mut preemptor = prioritized(pod("p"), HIGH);
    preemptor.nominated_node_name = "node1".into();
    let got = preempt(&cluster, &preemptor);
    assert_eq!(
        got.message.as_deref(),
        Some("0/1 nodes are available: 1 Too many pods. preemption: not eligible due to a terminating pod on the nominated node.")
    );

    let mut higher = cluster.clone();
    higher.pods[0].0.priority = VERY_HIGH;
    let got = preempt(&higher, &preemptor);
    assert!(
        got.message.as_deref().unwrap().ends_with(
            "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
        ),
        "{got:?}"
    );
}

#[test]
fn the_most_important_victims_are_reprieved() {
    // SelectVictimsOnNode: with every lower-priority pod gone the pod fits; the higher-priority
    // one comes back first, then among equals the one running longer; the last no longer fits.
    let cluster = Cluster {
        nodes: vec![cpu_node("node1", 5000)],
        pods: vec![
            (
                started(prioritized(cpu_pod("young", 2000), 5), 3_000),
                "node1",
            ),
            (
                started(prioritized(cpu_pod("old", 2000), 5), 1_000),
                "node1",
            ),
            (prioritized(cpu_pod("important", 1000), 10), "node1"),
        ],
        ..Cluster::default()
    };
    let got = preempt(&cluster, &prioritized(cpu_pod("p", 2000), HIGH));
    assert_eq!(got.nominated.as_deref(), Some("node1"));
    assert_eq!(got.victims, ["default/young"]);

    // The younger one started first: it stays and the other goes.
    let mut swapped = cluster.clone();
    swapped.pods[0].0.start_time_millis = Some(500);
    let got = preempt(&swapped, &prioritized(cpu_pod("p", 2000), HIGH));
    assert_eq!(got.victims, ["default/old"]);

    // A start time that is not known counts as now: that pod goes first.
    let mut unknown = cluster.clone();
    unknown.pods[1].0.start_time_millis = None;
    let got = preempt(&unknown, &prioritized(cpu_pod("p", 2000), HIGH));
    assert_eq!(got.victims, ["default/old"]);
}

#[test]
fn candidates_are_ranked_by_priority_sum_count_and_start_time() {
    // pickOneNodeForPreemption, past the budgets and priorities.
    let cluster = Cluster {
        nodes: vec![pods_node("node1", 2), pods_node("node2", 1)],
        pods: vec![
            (prioritized(pod("a1"), 1), "node1"),
            (prioritized(pod("a2"), 1), "node1"),
            (prioritized(pod("b1"), 1), "node2"),
        ],
        ..Cluster::default()
    };
    // On node1 one victim is enough: both nodes need one eviction of priority 1. Equal so far;
    // the start times decide: node2's victim started last.
    let mut timed = cluster.clone();
    timed.pods[0].0.start_time_millis = Some(1_000);
    timed.pods[1].0.start_time_millis = Some(2_000);
    timed.pods[2].0.start_time_millis = Some(5_000);
    let got = preempt(&timed, &prioritized(pod("p"), HIGH));
    assert_eq!(got.nominated.as_deref(), Some("node2"), "latest start wins");
    assert_eq!(got.victims, ["default/b1"]);

    timed.pods[2].0.start_time_millis = Some(500);
    let got = preempt(&timed, &prioritized(pod("p"), HIGH));
    assert_eq!(got.nominated.as_deref(), Some("node1"));
    assert_eq!(
        got.victims,
        ["default/a2"],
        "the younger of node1's pods goes"
    );

    // A lower highest victim priority decides before start times.
    let mut cheaper = cluster.clone();
    cheaper.pods[2].0.priority = 50;
    let got = preempt(&cheaper, &prioritized(pod("p"), HIGH));
    assert_eq!(got.nominated.as_deref(), Some("node1"));
}

#[test]
fn budgets_count_only_selected_pods_not_yet_disrupted() {
    // filterPodsWithPDBViolation: an empty selector selects nothing, a pod already among the
    // budget's disruptedPods does not use up an allowed disruption.
    let cluster = Cluster {
        nodes: vec![pods_node("node1", 1), pods_node("node2", 1)],
        pods: vec![
            (
                labelled(prioritized(pod("guarded"), LOW), &[("app", "db")]),
                "node1",
            ),
            (
                labelled(prioritized(pod("other"), MID), &[("app", "web")]),
                "node2",
            ),
        ],
        budgets: vec![budget("db", &[("app", "db")], 0)],
        ..Cluster::default()
    };
    let got = preempt(&cluster, &prioritized(pod("p"), HIGH));
    assert_eq!(
        got.nominated.as_deref(),
        Some("node2"),
        "the budget makes node1 the worse choice despite its lower priority"
    );

    let mut disrupted = cluster.clone();
    disrupted.budgets[0].disrupted_pods = vec!["guarded".into()];
    let got = preempt(&disrupted, &prioritized(pod("p"), HIGH));
    assert_eq!(got.nominated.as_deref(), Some("node1"));
    assert_eq!(got.pdb_violations, 0);

    let mut empty = cluster.clone();
    empty.budgets[0].selector = Some(LabelSelector::default());
    let got = preempt(&empty, &prioritized(pod("p"), HIGH));
    assert_eq!(
        got.nominated.as_deref(),
        Some("node1"),
        "an empty selector guards nothing"
    );
}

/// A member of a running gang is evicted only when the whole gang is outranked: here the gang
/// `train` has a member of priority HIGH on node3, so its LOW member on node1 is spared and the
/// node of the lone LOW pod is chosen although node1's victim would rank first otherwise (it
/// started later). With the gang's every member below the preemptor, node1 is open again.
#[test]
fn a_running_gang_loses_no_member_unless_every_member_is_outranked() {
    let gang = [("scheduling.x-k8s.io/pod-group", "train")];
    let cluster = |high_member: i32| Cluster {
        nodes: vec![
            pods_node("node1", 1),
            pods_node("node2", 1),
            pods_node("node3", 1),
        ],
        pods: vec![
            (
                labelled(started(prioritized(pod("worker-0"), LOW), 2_000), &gang),
                "node1",
            ),
            (started(prioritized(pod("loner"), LOW), 1_000), "node2"),
            (
                labelled(
                    started(prioritized(pod("worker-1"), high_member), 500),
                    &gang,
                ),
                "node3",
            ),
        ],
        ..Cluster::default()
    };
    let got = preempt(&cluster(HIGH), &prioritized(pod("p"), MID));
    assert_eq!(got.nominated.as_deref(), Some("node2"), "{got:?}");
    assert_eq!(got.victims, ["default/loner"]);

    // Without `loner` on node2 there is no victim outside the gang: none is found.
    let mut only_gang = cluster(HIGH);
    only_gang.pods.remove(1);
    only_gang.nodes[1].allocatable.pods = 0;
    let got = preempt(&only_gang, &prioritized(pod("p"), MID));
    assert_eq!(got.nominated, None, "{got:?}");
    assert!(
        got.message
            .as_deref()
            .is_some_and(|m| m.contains("No preemption victims found for incoming pod")),
        "{got:?}"
    );

    // Every member below the preemptor: the gang member that started later goes, as
    // kube-scheduler picks (the latest start among the highest-priority victims).
    let got = preempt(&cluster(LOW), &prioritized(pod("p"), MID));
    assert_eq!(got.nominated.as_deref(), Some("node1"), "{got:?}");
    assert_eq!(got.victims, ["default/worker-0"]);
}
