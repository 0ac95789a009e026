//! Gangs: scheduler-plugins' coscheduling (embedded as the `Coscheduling` plugin) in `simulate`
//! and in the scheduling service. A gang is bound whole or not at all, and a gang that cannot
//! complete gives back everything it held.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use wasched::clock::FakeClock;
use wasched::config::{Config, DefaultPluginRuntime};
use wasched::events::Object;
use wasched::framework::Decider;
use wasched::service::{PodState, Sequencer, Service};
use wasched_sdk::Resources;

use crate::support::repo_root;

/// Each `simulate` decision of the gangs example as (pod, node, message), in order.
fn simulated(runtime: &str) -> Vec<(String, Option<String>, String)> {
    let output = Command::new(env!("CARGO_BIN_EXE_wasched"))
        .args([
            "simulate",
            "--runtime",
            runtime,
            "--config",
            "examples/configs/gangs.toml",
            "examples/clusters/gangs.yaml",
        ])
        .current_dir(repo_root())
        .output()
        .expect("wasched runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let d: serde_json::Value = serde_json::from_str(line).unwrap();
            (
                d["pod"].as_str().unwrap().to_string(),
                d["node"].as_str().map(str::to_string),
                d["message"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[test]
fn of_two_gangs_that_fit_one_at_a_time_one_is_bound_whole_and_the_other_holds_nothing() {
    let wasm = simulated("wasm");
    assert_eq!(wasm, simulated("native"), "WASM and native decide alike");
    let members = |gang: &'static str| (0..8).map(move |i| format!("ml/train-{gang}-{i}"));
    let last: BTreeMap<&str, (Option<&str>, &str)> = wasm
        .iter()
        .map(|(pod, node, message)| (pod.as_str(), (node.as_deref(), message.as_str())))
        .collect();

    // train-a: nothing is placed before its 8th member is reserved, then all 8 are.
    let placed: Vec<usize> = (0..wasm.len())
        .filter(|&i| wasm[i].0.starts_with("ml/train-a-") && wasm[i].1.is_some())
        .collect();
    assert_eq!(placed.len(), 8);
    assert_eq!(
        wasm[placed[0]].0, "ml/train-a-7",
        "the last member comes first"
    );
    assert_eq!(placed, (placed[0]..placed[0] + 8).collect::<Vec<_>>());
    let waits = wasm
        .iter()
        .filter(|(pod, node, _)| pod.starts_with("ml/train-a-") && node.is_none());
    assert!(waits
        .map(|(_, _, m)| m.as_str())
        .all(|m| m.contains("for Permit plugin(s) Coscheduling (PodGroup ml/train-a: ")));
    for pod in members("a") {
        assert!(last[pod.as_str()].0.is_some(), "{pod} runs");
    }

    // train-b: never placed; its member that fits nowhere rejects the gang.
    for pod in members("b") {
        assert!(last[pod.as_str()].0.is_none(), "{pod} holds nothing");
    }
    assert!(wasm
        .iter()
        .all(|(pod, node, _)| !pod.starts_with("ml/train-b-") || node.is_none()));
    assert!(wasm.contains(&(
        "ml/train-b-4".into(),
        None,
        "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are \
         available: 3 No preemption victims found for incoming pod., PodGroup ml/train-b gets \
         rejected due to Pod train-b-4 is unschedulable even after PostFilter"
            .into()
    )));
    let rejected_in_post_filter = wasm
        .iter()
        .filter(|(_, _, m)| m == "optimistic rejection in PostFilter")
        .count();
    assert!(
        rejected_in_post_filter >= 4,
        "the waiting members go at once"
    );
    assert!(wasm
        .iter()
        .any(|(_, _, m)| m == "rejected due to timeout after waiting 30s at plugin Coscheduling"));

    // eval: its minResources exceed the free GPUs, so no member is tried.
    assert_eq!(
        last["ml/eval-0"],
        (
            None,
            "0/3 nodes are available: resource gap: map[nvidia.com/gpu:24]. preemption: 0/3 nodes \
             are available: 3 Preemption is not helpful for scheduling., PodGroup ml/eval gets \
             rejected due to Pod eval-0 is unschedulable even after PostFilter"
        )
    );
}

/// A service with the profile of examples/configs/gangs.toml on `runtime`, and its clock.
fn gangs_service(runtime: DefaultPluginRuntime) -> (Service, FakeClock) {
    let mut config = Config::load(&repo_root().join("examples/configs/gangs.toml")).unwrap();
    config.default_plugins = runtime;
    let profiles = config.profiles().unwrap();
    let clock = FakeClock::default();
    let decider = Decider::with_clock(&profiles, 1, Arc::new(clock.clone())).unwrap();
    (Service::deferred(decider, Arc::new(clock.clone())), clock)
}

fn object(kind: &str, value: serde_json::Value) -> Object {
    let kind = wasched::events::Kind::named(kind).unwrap();
    Object::from_json(kind, value).unwrap()
}

fn member(name: &str, group: &str, gated: bool) -> Object {
    let mut spec = serde_json::json!({
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]
    });
    if gated {
        spec["schedulingGates"] = serde_json::json!([{"name": "example.com/later"}]);
    }
    object(
        "Pod",
        serde_json::json!({"metadata": {"name": name, "namespace": "ml",
            "labels": {"scheduling.x-k8s.io/pod-group": group}}, "spec": spec}),
    )
}

fn group(name: &str, min_member: u32, timeout: u32) -> Object {
    object(
        "PodGroup",
        serde_json::json!({"metadata": {"name": name, "namespace": "ml"},
            "spec": {"minMember": min_member, "scheduleTimeoutSeconds": timeout}}),
    )
}

/// Per node: its requested resources and its pod count.
type Usage = Vec<(Resources, u32)>;

/// Each node's requested resources and pod count as the cache holds them, and as recounted
/// from the requests of the pods the cache places there.
fn usage_and_recount(s: &Service) -> (Usage, Usage) {
    let cache = s.decider().cache();
    let held = cache
        .nodes()
        .map(|(_, n)| (n.info.usage.requested.clone(), n.info.usage.pod_count))
        .collect();
    let recount = cache
        .nodes()
        .map(|(_, n)| {
            let mut sum = Resources::default();
            let mut count = 0;
            for (key, node) in cache.placed_pods() {
                if node == n.info.name {
                    sum.add(cache.pod_requests(key).unwrap());
                    count += 1;
                }
            }
            (sum, count)
        })
        .collect();
    (held, recount)
}

#[test]
fn a_gang_whose_last_member_comes_later_is_bound_together_and_a_timed_out_gang_gives_everything_back(
) {
    let (mut s, clock) = gangs_service(DefaultPluginRuntime::Wasm);
    let seq = Sequencer::default();
    let submit = |s: &mut Service, o: Object| s.pipeline().submit(seq.upsert(o));
    submit(
        &mut s,
        object(
            "Node",
            serde_json::json!({"metadata": {"name": "n1"}, "status": {"allocatable":
                {"cpu": "8", "memory": "8Gi", "pods": "110", "nvidia.com/gpu": "4"}}}),
        ),
    );
    submit(&mut s, group("late", 3, 20));
    submit(&mut s, member("late-0", "late", false));
    submit(&mut s, member("late-1", "late", false));
    let early = s.run_until_idle();
    assert_eq!(early.len(), 2);
    assert_eq!(
        early[0].outcome.message.as_deref(),
        Some(
            "0/1 nodes are available: pre-filter pod late-0 cannot find enough sibling pods, \
             current pods number: 2, minMember of group: 3. preemption: 0/1 nodes are available: \
             1 Preemption is not helpful for scheduling., PodGroup ml/late gets rejected due to \
             Pod late-0 is unschedulable even after PostFilter"
        )
    );

    // The third member arrives: the parked two are tried again and the three go together.
    submit(&mut s, member("late-2", "late", false));
    clock.advance(Duration::from_secs(2));
    let together = s.run_until_idle();
    let placed: Vec<&str> = together
        .iter()
        .filter(|r| r.outcome.node.is_some())
        .map(|r| r.pod.as_str())
        .collect();
    assert_eq!(placed.len(), 3, "{together:?}");
    let waited = together.iter().filter(|r| !r.waiting_on.is_empty()).count();
    assert_eq!(waited, 2, "two wait for the third");
    let counter = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(counter(&s.stats.gangs_admitted), 1);
    assert_eq!(counter(&s.stats.permit_waits), 2);
    assert_eq!(counter(&s.stats.permit_released), 2);

    // A gang of two whose second member stays gated: the first waits, reserved, then times out.
    submit(&mut s, group("stuck", 2, 20));
    submit(&mut s, member("stuck-0", "stuck", false));
    submit(&mut s, member("stuck-1", "stuck", true));
    s.run_until_idle();
    assert_eq!(
        s.pod_state("ml/stuck-0"),
        Some(PodState::Assumed { node: "n1".into() }),
        "the waiting member holds its GPU"
    );
    let (held, recount) = usage_and_recount(&s);
    assert_eq!(held, recount);
    assert_eq!(held[0].0.get("nvidia.com/gpu"), 4);
    clock.advance(Duration::from_secs(20));
    let expired = s.run_until_idle();
    assert!(expired.iter().any(|r| r.pod == "ml/stuck-0"
        && r.outcome.message.as_deref()
            == Some("rejected due to timeout after waiting 20s at plugin Coscheduling")));
    assert!(matches!(
        s.pod_state("ml/stuck-0"),
        Some(PodState::Pending(_))
    ));
    assert_eq!(counter(&s.stats.gangs_timed_out), 1);
    assert_eq!(counter(&s.stats.permit_timeouts), 1);
    assert_eq!(
        counter(&s.stats.gangs_admitted),
        1,
        "the stuck gang was never admitted"
    );
    assert!(counter(&s.stats.permit_wait_millis) >= 20_000);
    let (held, recount) = usage_and_recount(&s);
    assert_eq!(held, recount, "the cache equals a recount");
    assert_eq!(
        held[0].0.get("nvidia.com/gpu"),
        3,
        "only the bound gang's GPUs"
    );
    assert!(s.waiting().next_deadline().is_none());
}

fn prioritized_pod(name: &str, priority: i32, node: Option<&str>, group: Option<&str>) -> Object {
    let mut pod = serde_json::json!({"metadata": {"name": name, "namespace": "ml"},
        "spec": {"priority": priority, "containers": [{"name": "c",
            "resources": {"requests": {"cpu": "4"}}}]}});
    if let Some(node) = node {
        pod["spec"]["nodeName"] = node.into();
    }
    if let Some(group) = group {
        pod["metadata"]["labels"] = serde_json::json!({"scheduling.x-k8s.io/pod-group": group});
    }
    object("Pod", pod)
}

/// The (pod, nominated node, victims) of each result with a preemption.
fn preemptions(results: &[wasched::service::CycleResult]) -> Vec<(String, String, Vec<String>)> {
    results
        .iter()
        .filter_map(|r| {
            let p = r.outcome.preemption.as_ref()?;
            let victims = p.victims.iter().map(|v| v.pod.clone()).collect();
            Some((r.pod.clone(), p.node.clone(), victims))
        })
        .collect()
}

/// A gang of two that needs two nodes' room: while only one node has pods it outranks, neither
/// member is nominated and nothing is evicted (without the gang rule the first member would
/// evict `low-1` and wait for a partner that cannot come); once the second node holds a
/// lower-priority pod too, both members are nominated in one go, each with its own victim.
#[test]
fn a_preempting_gang_nominates_all_its_members_or_none() {
    let (mut s, clock) = gangs_service(DefaultPluginRuntime::Wasm);
    let seq = Sequencer::default();
    for name in ["n1", "n2"] {
        let node = object(
            "Node",
            serde_json::json!({"metadata": {"name": name}, "status": {"allocatable":
                {"cpu": "4", "memory": "8Gi", "pods": "110"}}}),
        );
        s.pipeline().submit(seq.upsert(node));
    }
    s.pipeline()
        .submit(seq.upsert(prioritized_pod("low-1", 0, Some("n1"), None)));
    let vip = prioritized_pod("vip", 2000, Some("n2"), None);
    s.pipeline().submit(seq.upsert(vip.clone()));
    s.pipeline().submit(seq.upsert(group("duo", 2, 30)));
    for name in ["duo-0", "duo-1"] {
        s.pipeline()
            .submit(seq.upsert(prioritized_pod(name, 1000, None, Some("duo"))));
    }
    let first = s.run_until_idle();
    assert_eq!(preemptions(&first), [], "{first:?}");
    let preemptions_counted = || {
        s.stats
            .preemptions
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    assert_eq!(preemptions_counted(), 0);
    let message = first[0].outcome.message.as_deref().unwrap_or_default();
    assert!(
        message.contains(
            "preemption: PodGroup ml/duo would have room for 0 of the 1 other members it needs, \
             so none is nominated."
        ),
        "{message}"
    );

    // n2's pod is replaced by one the gang outranks.
    s.pipeline().submit(seq.delete(vip));
    s.pipeline()
        .submit(seq.upsert(prioritized_pod("low-2", 0, Some("n2"), None)));
    clock.advance(Duration::from_secs(10));
    let second = s.run_until_idle();
    let mut nominated = preemptions(&second);
    nominated.sort();
    let nodes: Vec<&str> = nominated.iter().map(|(_, n, _)| n.as_str()).collect();
    assert_eq!(nominated.len(), 2, "{second:?}");
    assert_eq!(
        (nominated[0].0.as_str(), nominated[1].0.as_str()),
        ("ml/duo-0", "ml/duo-1")
    );
    let mut victims: Vec<&str> = nominated.iter().map(|(_, _, v)| v[0].as_str()).collect();
    victims.sort_unstable();
    assert_eq!(victims, ["ml/low-1", "ml/low-2"]);
    assert_ne!(nodes[0], nodes[1], "one member a node");
}

fn workload_member(name: &str, pod_group: &str, replica: Option<&str>) -> Object {
    let mut reference = serde_json::json!({"name": "train", "podGroup": pod_group});
    if let Some(replica) = replica {
        reference["podGroupReplicaKey"] = replica.into();
    }
    object(
        "Pod",
        serde_json::json!({"metadata": {"name": name, "namespace": "ml"},
            "spec": {"workloadRef": reference, "containers": [{"name": "c",
                "resources": {"requests": {"cpu": "1"}}}]}}),
    )
}

/// Kubernetes 1.35's Workload API as a second source of gangs, under the same Coscheduling
/// rules: a `gang` pod group needs `minCount` members before any is bound, each replica key is
/// a gang of its own, and a `basic` pod group's pods are scheduled one by one.
#[test]
fn a_workload_s_gang_pod_groups_are_bound_whole_per_replica_and_basic_ones_alone() {
    let (mut s, clock) = gangs_service(DefaultPluginRuntime::Native);
    let seq = Sequencer::default();
    let submit = |s: &mut Service, o: Object| s.pipeline().submit(seq.upsert(o));
    submit(
        &mut s,
        object(
            "Node",
            serde_json::json!({"metadata": {"name": "n1"}, "status": {"allocatable":
                {"cpu": "8", "memory": "8Gi", "pods": "110"}}}),
        ),
    );
    submit(
        &mut s,
        object(
            "Workload",
            serde_json::json!({"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload",
                "metadata": {"name": "train", "namespace": "ml"},
                "spec": {"podGroups": [
                    {"name": "workers", "policy": {"gang": {"minCount": 2}}},
                    {"name": "driver", "policy": {"basic": {}}}]}}),
        ),
    );
    submit(&mut s, workload_member("driver-0", "driver", None));
    submit(&mut s, workload_member("w-0", "workers", None));
    submit(&mut s, workload_member("r-0", "workers", Some("a")));
    let first = s.run_until_idle();
    let placed = |results: &[wasched::service::CycleResult]| -> Vec<String> {
        let mut placed: Vec<String> = results
            .iter()
            .filter(|r| r.outcome.node.is_some() && r.waiting_on.is_empty())
            .map(|r| r.pod.clone())
            .collect();
        placed.sort();
        placed
    };
    assert_eq!(placed(&first), ["ml/driver-0"], "{first:?}");
    let w0 = first.iter().find(|r| r.pod == "ml/w-0").unwrap();
    assert!(
        w0.outcome.message.as_deref().unwrap_or_default().contains(
            "pre-filter pod w-0 cannot find enough sibling pods, current pods number: 1, \
             minMember of group: 2"
        ),
        "{w0:?}"
    );

    // Replica `a` completes first: only its two members go; then the unreplicated group.
    submit(&mut s, workload_member("r-1", "workers", Some("a")));
    clock.advance(Duration::from_secs(1));
    assert_eq!(placed(&s.run_until_idle()), ["ml/r-0", "ml/r-1"]);
    assert!(matches!(s.pod_state("ml/w-0"), Some(PodState::Pending(_))));
    submit(&mut s, workload_member("w-1", "workers", None));
    clock.advance(Duration::from_secs(1));
    assert_eq!(placed(&s.run_until_idle()), ["ml/w-0", "ml/w-1"]);
    let gangs: Vec<(String, u32, usize)> = s
        .gangs()
        .into_iter()
        .filter(|g| !g.members.is_empty())
        .map(|g| (g.name, g.min_member, g.assigned))
        .collect();
    assert_eq!(
        gangs,
        [
            ("ml/train/driver".to_string(), 1, 1),
            ("ml/train/workers".to_string(), 2, 2),
            ("ml/train/workers/a".to_string(), 2, 2),
        ]
    );
}
