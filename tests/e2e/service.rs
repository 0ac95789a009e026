//! The long-running core: events in any order and from many threads, the queue's reactions,
//! assume/bind/confirm/expire, resync, and pending-pod status.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1 as core;
use proptest::prelude::*;
use wasched::binding::Backend;
use wasched::clock::FakeClock;
use wasched::config::{Config, DefaultPluginRuntime};
use wasched::events::{Action, Event, Object, Submitted};
use wasched::framework::Decider;
use wasched::framework::Victim;
use wasched::queue::QueueName;
use wasched::service::{bound_pod, CycleResult, PodState, Sequencer, Service};

fn node_obj(name: &str, cpu: &str, labels: &[(&str, &str)]) -> Object {
    let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
    Object::Node(Box::new(
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}}
        }))
        .unwrap(),
    ))
}

fn pod_k8s(name: &str, cpu: &str, node: Option<&str>) -> core::Pod {
    let mut spec =
        serde_json::json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]});
    if let Some(node) = node {
        spec["nodeName"] = node.into();
    }
    serde_json::from_value(
        serde_json::json!({"metadata": {"name": name, "namespace": "default"}, "spec": spec}),
    )
    .unwrap()
}

fn pod_obj(name: &str, cpu: &str, node: Option<&str>) -> Object {
    Object::Pod(Box::new(pod_k8s(name, cpu, node)))
}

/// Accepts every binding (or refuses all) and records them; confirmations are up to the test.
#[derive(Clone, Default)]
struct RecordingBinder {
    binds: Arc<Mutex<Vec<(String, String)>>>,
    refuse: bool,
}

impl Backend for RecordingBinder {
    fn bind_volumes(&mut self, _result: &CycleResult, _node: &str) -> Result<(), String> {
        Err("this backend cannot bind volumes".into())
    }

    fn bind_claims(&mut self, _result: &CycleResult) -> Result<(), String> {
        Err("this backend cannot write ResourceClaims".into())
    }

    fn unbind_claims(&mut self, _result: &CycleResult) -> Result<(), String> {
        Ok(())
    }

    fn bind(&mut self, result: &CycleResult, node: &str) -> Result<(), String> {
        if self.refuse {
            return Err("the API server said no".into());
        }
        self.binds
            .lock()
            .unwrap()
            .push((result.pod.clone(), node.to_string()));
        Ok(())
    }

    fn evict(&mut self, _result: &CycleResult, _victim: &Victim) -> Result<(), String> {
        Ok(())
    }

    fn record_condition(&mut self, _result: &CycleResult) -> Result<bool, String> {
        Ok(true)
    }
}

fn decider() -> Decider {
    let mut config = Config::parse("t.toml", Path::new("."), String::new()).unwrap();
    config.default_plugins = DefaultPluginRuntime::Native;
    Decider::new(&config.profiles().unwrap(), 1).unwrap()
}

fn service(binder: RecordingBinder) -> (Service, FakeClock) {
    let clock = FakeClock::default();
    let service = Service::new(decider(), Box::new(binder), Arc::new(clock.clone()));
    (service, clock)
}

/// A service whose bindings are sent later by the caller, as the server's status writer does.
fn deferred_service() -> (Service, FakeClock) {
    let clock = FakeClock::default();
    (Service::deferred(decider(), Arc::new(clock.clone())), clock)
}

#[test]
fn an_unconfirmed_binding_expires_frees_the_node_and_the_pod_is_scheduled_again() {
    let binder = RecordingBinder::default();
    let (mut s, clock) = service(binder.clone());
    let seq = Sequencer::default();
    let pipeline = s.pipeline();
    pipeline.submit(seq.upsert(node_obj("n1", "1", &[])));
    pipeline.submit(seq.upsert(pod_obj("first", "800m", None)));
    pipeline.submit(seq.upsert(pod_obj("second", "800m", None)));
    let results = s.run_until_idle();
    assert_eq!(results[0].outcome.node.as_deref(), Some("n1"));
    assert_eq!(
        results[1].outcome.message.as_deref(),
        Some("0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."),
        "the assumed pod holds its cpu"
    );
    assert_eq!(
        s.pod_state("default/first"),
        Some(PodState::Assumed { node: "n1".into() })
    );

    clock.advance(Duration::from_secs(29));
    assert!(
        s.run_until_idle().is_empty(),
        "nothing changes before the TTL"
    );
    clock.advance(Duration::from_secs(1));
    let results = s.run_until_idle();
    assert_eq!(
        s.stats
            .assumed_expired
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    // The expiry freed n1, which also woke the unschedulable pod; one of the two gets it.
    let placed: Vec<&str> = results
        .iter()
        .filter(|r| r.outcome.node.is_some())
        .map(|r| r.pod.as_str())
        .collect();
    assert_eq!(placed.len(), 1, "{results:?}");
    assert_eq!(binder.binds.lock().unwrap().len(), 2);
}

#[test]
fn the_assume_ttl_of_a_queued_binding_starts_when_the_binding_completed() {
    let (mut s, clock) = deferred_service();
    let seq = Sequencer::default();
    let pipeline = s.pipeline();
    pipeline.submit(seq.upsert(node_obj("n1", "1", &[])));
    pipeline.submit(seq.upsert(pod_obj("p", "600m", None)));
    assert_eq!(s.run_until_idle()[0].outcome.node.as_deref(), Some("n1"));
    // A slow API server: the binding is still waiting to be sent long after the TTL.
    clock.advance(Duration::from_secs(120));
    assert!(s.run_until_idle().is_empty());
    assert_eq!(
        s.pod_state("default/p"),
        Some(PodState::Assumed { node: "n1".into() })
    );
    s.binding_failures().completed("default/p".into());
    assert!(s.run_until_idle().is_empty());
    clock.advance(Duration::from_secs(29));
    assert!(
        s.run_until_idle().is_empty(),
        "the TTL runs from the binding"
    );
    clock.advance(Duration::from_secs(1));
    s.run_until_idle();
    assert_eq!(
        s.stats
            .assumed_expired
            .load(std::sync::atomic::Ordering::Relaxed),
        1,
        "a binding the watch never confirms is still undone"
    );
}

#[test]
fn a_confirmed_binding_is_counted_once() {
    let binder = RecordingBinder::default();
    let (mut s, clock) = service(binder.clone());
    let seq = Sequencer::default();
    let pipeline = s.pipeline();
    pipeline.submit(seq.upsert(node_obj("n1", "1", &[])));
    pipeline.submit(seq.upsert(pod_obj("p", "600m", None)));
    assert_eq!(s.run_until_idle()[0].outcome.node.as_deref(), Some("n1"));
    // The API server reports the binding.
    pipeline.submit(seq.upsert(Object::Pod(Box::new(bound_pod(
        &pod_k8s("p", "600m", None),
        "n1",
    )))));
    s.apply_events();
    assert_eq!(
        s.pod_state("default/p"),
        Some(PodState::Bound { node: "n1".into() })
    );
    clock.advance(Duration::from_secs(60));
    s.run_until_idle();
    assert_eq!(
        s.stats
            .assumed_expired
            .load(std::sync::atomic::Ordering::Relaxed),
        0,
        "confirmed: never expires"
    );
    let id = s.decider().cache().node_id("n1").unwrap();
    let usage = &s.decider().cache().node(id).unwrap().info.usage;
    assert_eq!(
        (usage.requested.milli_cpu, usage.pod_count),
        (600, 1),
        "counted once"
    );
}

#[test]
fn a_failed_binding_frees_the_node_and_retries_after_backoff() {
    let binder = RecordingBinder {
        refuse: true,
        ..RecordingBinder::default()
    };
    let (mut s, clock) = service(binder);
    let seq = Sequencer::default();
    s.pipeline().submit(seq.upsert(node_obj("n1", "1", &[])));
    s.pipeline().submit(seq.upsert(pod_obj("p", "600m", None)));
    let first = s.run_until_idle();
    assert_eq!(
        first.len(),
        1,
        "backing off after the failed bind: {first:?}"
    );
    let Some(PodState::Pending(status)) = s.pod_state("default/p") else {
        panic!("pending")
    };
    assert_eq!(status.queue, QueueName::Backoff);
    assert_eq!(
        status.message.as_deref(),
        Some("binding to n1 failed: the API server said no")
    );
    let id = s.decider().cache().node_id("n1").unwrap();
    assert_eq!(
        s.decider().cache().node(id).unwrap().info.usage.pod_count,
        0,
        "un-assumed"
    );
    clock.advance(Duration::from_secs(1));
    assert_eq!(
        s.run_until_idle().len(),
        1,
        "retried once the 1s backoff passed"
    );
}

#[test]
fn a_pending_pod_shows_its_fit_error_and_attempts_and_a_new_node_wakes_it() {
    let (mut s, _clock) = service(RecordingBinder::default());
    let seq = Sequencer::default();
    let pipeline = s.pipeline();
    pipeline.submit(seq.upsert(node_obj("small", "1", &[])));
    pipeline.submit(seq.upsert(pod_obj("big", "4", None)));
    s.run_until_idle();
    let Some(PodState::Pending(status)) = s.pod_state("default/big") else {
        panic!("pending")
    };
    assert_eq!(status.attempts, 1);
    assert_eq!(status.queue, QueueName::Unschedulable);
    assert_eq!(
        status.message.as_deref(),
        Some("0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.")
    );

    // An irrelevant change (annotations only) does not wake it; a new big node does.
    let mut annotated = node_obj("small", "1", &[]);
    if let Object::Node(n) = &mut annotated {
        n.metadata.annotations = Some([("note".to_string(), "x".to_string())].into());
    }
    pipeline.submit(seq.upsert(annotated));
    assert!(s.run_until_idle().is_empty());
    pipeline.submit(seq.upsert(node_obj("big-node", "8", &[])));
    let results = s.run_until_idle();
    assert!(results.is_empty(), "still inside its 1s backoff");
    _clock.advance(Duration::from_secs(1));
    let results = s.run_until_idle();
    assert_eq!(results[0].outcome.node.as_deref(), Some("big-node"));
}

#[test]
fn deleting_a_pending_pod_removes_it_and_deleting_a_placed_pod_frees_its_node() {
    let (mut s, _clock) = service(RecordingBinder::default());
    let seq = Sequencer::default();
    let pipeline = s.pipeline();
    pipeline.submit(seq.upsert(node_obj("n1", "1", &[])));
    pipeline.submit(seq.upsert(pod_obj("running", "1", Some("n1"))));
    pipeline.submit(seq.upsert(pod_obj("waiting", "1", None)));
    s.run_until_idle();
    assert!(matches!(
        s.pod_state("default/waiting"),
        Some(PodState::Pending(_))
    ));
    pipeline.submit(seq.delete(pod_obj("running", "1", Some("n1"))));
    let results = s.run_until_idle();
    assert!(results.is_empty(), "woken, but inside its backoff");
    pipeline.submit(seq.delete(pod_obj("waiting", "1", None)));
    s.apply_events();
    assert_eq!(
        s.pod_state("default/waiting"),
        None,
        "gone from every queue"
    );
    assert_eq!(s.queue_lengths(), (0, 0, 0));
}

#[test]
fn stale_and_late_events_are_dropped() {
    let (mut s, _clock) = service(RecordingBinder::default());
    let pipeline = s.pipeline();
    let v = |object, version| Event::with_version(Action::Upsert, object, version);
    assert_eq!(
        pipeline.submit(v(node_obj("n", "1", &[("gen", "2")]), 2)),
        Submitted::Queued
    );
    assert_eq!(
        pipeline.submit(v(node_obj("n", "1", &[("gen", "1")]), 1)),
        Submitted::Stale
    );
    s.apply_events();
    assert_eq!(
        pipeline.submit(Event::with_version(
            Action::Delete,
            node_obj("n", "1", &[]),
            3
        )),
        Submitted::Queued
    );
    s.apply_events();
    assert_eq!(
        pipeline.submit(v(node_obj("n", "1", &[("gen", "late")]), 2)),
        Submitted::Stale,
        "an update older than the delete does not resurrect the node"
    );
    s.apply_events();
    assert_eq!(s.decider().cache().node_count(), 0);
}

#[test]
fn resync_repairs_drift_and_counts_it() {
    let (mut s, _clock) = service(RecordingBinder::default());
    let seq = Sequencer::default();
    let pipeline = s.pipeline();
    pipeline.submit(seq.upsert(node_obj("kept", "1", &[])));
    pipeline.submit(seq.upsert(node_obj("ghost", "1", &[])));
    pipeline.submit(seq.upsert(node_obj("changed", "1", &[("disk", "hdd")])));
    s.apply_events();
    // The truth: ghost is gone (its delete was lost), changed has new labels, missed was never seen.
    let truth = vec![
        node_obj("kept", "1", &[]),
        node_obj("changed", "1", &[("disk", "ssd")]),
        node_obj("missed", "2", &[]),
    ];
    assert_eq!(s.resync(truth.clone()), 3);
    let names: Vec<String> = s
        .decider()
        .cache()
        .nodes()
        .map(|(_, n)| n.info.name.clone())
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(sorted, vec!["changed", "kept", "missed"]);
    let id = s.decider().cache().node_id("changed").unwrap();
    assert_eq!(
        s.decider()
            .cache()
            .node(id)
            .unwrap()
            .info
            .labels
            .get("disk"),
        Some("ssd")
    );
    assert_eq!(s.resync(truth), 0, "nothing left to repair");
}

/// One object's event stream: versions 1..=n, the last one deciding its final state.
#[derive(Debug, Clone)]
struct Stream {
    object: usize,
    events: Vec<(u64, bool, u8)>, // (version, delete, label value)
}

fn streams() -> impl Strategy<Value = Vec<Stream>> {
    prop::collection::vec(prop::collection::vec((any::<bool>(), 0u8..4), 1..6), 1..8).prop_map(
        |objects| {
            objects
                .into_iter()
                .enumerate()
                .map(|(object, events)| Stream {
                    object,
                    events: events
                        .into_iter()
                        .enumerate()
                        .map(|(i, (delete, label))| (i as u64 + 1, delete, label))
                        .collect(),
                })
                .collect()
        },
    )
}

/// Even objects are nodes (labelled by the event); odd ones are pods, bound to node `n{2*label}`
/// or pending when the label is 3.
fn event_for(object: usize, (version, delete, label): (u64, bool, u8)) -> Event {
    let action = if delete {
        Action::Delete
    } else {
        Action::Upsert
    };
    let target = if object.is_multiple_of(2) {
        node_obj(&format!("n{object}"), "1", &[("v", &label.to_string())])
    } else {
        let node = (label < 3).then(|| format!("n{}", label * 2));
        pod_obj(&format!("p{object}"), "100m", node.as_deref())
    };
    Event::with_version(action, target, version)
}

type NodeState = BTreeMap<String, (String, u32, i64)>;

/// Nodes with their label and usage, and every pod's state.
fn final_state(s: &Service, objects: usize) -> (NodeState, Vec<Option<PodState>>) {
    let nodes = s
        .decider()
        .cache()
        .nodes()
        .map(|(_, n)| {
            let usage = &n.info.usage;
            let label = n.info.labels.get("v").unwrap_or("").to_string();
            (
                n.info.name.clone(),
                (label, usage.pod_count, usage.requested.milli_cpu),
            )
        })
        .collect();
    let pods = (0..objects)
        .filter(|i| i % 2 == 1)
        .map(|i| s.pod_state(&format!("default/p{i}")))
        .collect();
    (nodes, pods)
}

fn final_nodes(s: &Service) -> BTreeMap<String, String> {
    s.decider()
        .cache()
        .nodes()
        .map(|(_, n)| {
            (
                n.info.name.clone(),
                n.info.labels.get("v").unwrap_or("").to_string(),
            )
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn any_interleaving_ends_where_in_order_application_ends(
        streams in streams(),
        order_seed in any::<u64>(),
        duplicate_every in 2usize..5,
        drain_every in 1usize..7,
    ) {
        // Expected: each object's events applied in order.
        let (mut expected, _) = service(RecordingBinder::default());
        for stream in &streams {
            for &e in &stream.events {
                expected.pipeline().submit(event_for(stream.object, e));
                expected.apply_events();
            }
        }
        // Actual: all events shuffled, some duplicated, drained at random points.
        let mut all: Vec<Event> = streams
            .iter()
            .flat_map(|s| s.events.iter().map(move |&e| event_for(s.object, e)))
            .collect();
        let duplicates: Vec<Event> = all.iter().step_by(duplicate_every).cloned().collect();
        all.extend(duplicates);
        let mut rng = wasched::util::Rng::new(order_seed);
        for i in (1..all.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            all.swap(i, j);
        }
        let (mut actual, _) = service(RecordingBinder::default());
        for (i, event) in all.into_iter().enumerate() {
            actual.pipeline().submit(event);
            if i % drain_every == 0 {
                actual.apply_events();
            }
        }
        actual.apply_events();
        prop_assert_eq!(final_state(&actual, streams.len()), final_state(&expected, streams.len()));
        let mut decider = actual.into_decider();
        let cache = decider.cache_mut();
        cache.refresh_listing();
        prop_assert_eq!(cache.listing().len(), cache.node_count());
    }
}

#[test]
fn many_threads_feed_events_while_cycles_run() {
    let (s, clock) = service(RecordingBinder::default());
    // Bindings are never confirmed here and the loop below advances the clock for as long as the
    // producers run: expiry (tested above) must not requeue placed pods.
    let mut s = s.with_assume_ttl(Duration::from_secs(86_400));
    let pipeline = s.pipeline();
    const THREADS: usize = 4;
    const NODES_PER_THREAD: usize = 50;
    let producers: Vec<_> = (0..THREADS)
        .map(|t| {
            let pipeline = pipeline.clone();
            std::thread::spawn(move || {
                for round in 0..5u64 {
                    for i in 0..NODES_PER_THREAD {
                        let name = format!("t{t}-n{i}");
                        let version = round * 2 + 1;
                        pipeline.submit(Event::with_version(
                            Action::Upsert,
                            node_obj(&name, "4", &[("v", &round.to_string())]),
                            version,
                        ));
                        // Every thread also relabels a node shared by all threads.
                        pipeline.submit(Event::with_version(
                            Action::Upsert,
                            node_obj("shared", "4", &[("v", &round.to_string())]),
                            round * 100 + t as u64,
                        ));
                        pipeline.submit(Event::with_version(
                            Action::Upsert,
                            pod_obj(&format!("t{t}-p{round}-{i}"), "10m", None),
                            1,
                        ));
                    }
                }
            })
        })
        .collect();
    let mut placed = 0;
    // Pods that arrive before any node wait out a backoff: let time pass between rounds.
    while producers.iter().any(|p| !p.is_finished()) {
        placed += s
            .run_until_idle()
            .iter()
            .filter(|r| r.outcome.node.is_some())
            .count();
        clock.advance(Duration::from_secs(2));
        // Without a pause an idle loop turns thousands of times while slow producers run (the
        // suite in parallel on 2 cores): 2 s each took the fake clock past the day-long TTL, and
        // expired assumptions placed 31 pods twice.
        std::thread::sleep(Duration::from_millis(1));
    }
    for p in producers {
        p.join().expect("producer panicked");
    }
    for _ in 0..3 {
        placed += s
            .run_until_idle()
            .iter()
            .filter(|r| r.outcome.node.is_some())
            .count();
        clock.advance(Duration::from_secs(11));
    }
    let nodes = final_nodes(&s);
    assert_eq!(
        nodes.len(),
        THREADS * NODES_PER_THREAD + 1,
        "no node lost or duplicated"
    );
    assert!(
        nodes
            .iter()
            .filter(|(n, _)| *n != "shared")
            .all(|(_, round)| round == "4"),
        "last round wins"
    );
    let mut decider = s.into_decider();
    decider.cache_mut().refresh_listing();
    let mut listing = decider.cache().listing().to_vec();
    listing.sort_unstable();
    listing.dedup();
    assert_eq!(listing.len(), nodes.len(), "every node listed exactly once");
    assert_eq!(
        placed,
        THREADS * NODES_PER_THREAD * 5,
        "every pod placed once"
    );
}

fn gated_pod(name: &str, gates: &[&str]) -> Object {
    let mut pod = pod_k8s(name, "100m", None);
    let gates = gates
        .iter()
        .map(|g| core::PodSchedulingGate {
            name: g.to_string(),
        })
        .collect();
    pod.spec.as_mut().unwrap().scheduling_gates = Some(gates);
    Object::Pod(Box::new(pod))
}

#[test]
fn a_gated_pod_is_never_attempted_and_enters_the_queue_at_once_when_its_last_gate_is_lifted() {
    let binder = RecordingBinder::default();
    let binds = binder.binds.clone();
    let (mut s, _clock) = service(binder);
    let seq = Sequencer::default();
    let pipeline = s.pipeline();
    pipeline.submit(seq.upsert(node_obj("n", "8", &[])));
    pipeline.submit(seq.upsert(gated_pod(
        "quota",
        &["example.com/quota", "example.com/gpu"],
    )));
    pipeline.submit(seq.upsert(pod_obj("free", "100m", None)));
    let results = s.run_until_idle();
    // Reported once as gated, with kube-scheduler's text; the other pod is bound.
    let gated: Vec<&CycleResult> = results.iter().filter(|r| r.gated.is_some()).collect();
    assert_eq!(gated.len(), 1);
    assert_eq!(gated[0].pod, "default/quota");
    assert_eq!(
        gated[0].outcome.message.as_deref(),
        Some("waiting for scheduling gates: [example.com/quota example.com/gpu]")
    );
    assert_eq!(gated[0].attempts, 0);
    assert_eq!(
        binds.lock().unwrap().clone(),
        vec![("default/free".to_string(), "n".to_string())]
    );
    let Some(PodState::Pending(status)) = s.pod_state("default/quota") else {
        panic!("the gated pod is pending")
    };
    assert_eq!((status.queue, status.attempts), (QueueName::Gated, 0));

    // A cluster event that wakes unschedulable pods leaves it alone, and so does an update that
    // keeps one gate: it is not reported again.
    pipeline.submit(seq.upsert(node_obj("m", "8", &[])));
    pipeline.submit(seq.upsert(gated_pod("quota", &["example.com/gpu"])));
    let results = s.run_until_idle();
    assert!(results.is_empty(), "{results:?}");
    let Some(PodState::Pending(status)) = s.pod_state("default/quota") else {
        panic!("still pending")
    };
    assert_eq!(status.queue, QueueName::Gated);
    assert_eq!(
        status.message.as_deref(),
        Some("waiting for scheduling gates: [example.com/gpu]")
    );

    // The last gate lifted: scheduled in the same round, without backoff.
    pipeline.submit(seq.upsert(gated_pod("quota", &[])));
    let results = s.run_until_idle();
    assert_eq!(results.len(), 1);
    assert!(results[0].outcome.node.is_some() && results[0].gated.is_none());
    assert_eq!(binds.lock().unwrap().len(), 2);
}

fn dra_object(kind: &str, value: serde_json::Value) -> Object {
    Object::from_json(wasched::events::Kind::named(kind).unwrap(), value).unwrap()
}

fn claim_obj(name: &str) -> Object {
    dra_object(
        "ResourceClaim",
        serde_json::json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
            "spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}
            ]}}
        }),
    )
}

fn pod_with_claim(name: &str, claim: &str) -> Object {
    let mut pod = pod_k8s(name, "100m", None);
    pod.metadata.uid = Some(format!("uid-{name}"));
    pod.spec.as_mut().unwrap().resource_claims = Some(vec![core::PodResourceClaim {
        name: "gpu".into(),
        resource_claim_name: Some(claim.into()),
        ..Default::default()
    }]);
    Object::Pod(Box::new(pod))
}

#[test]
fn a_pod_waits_out_of_the_queue_for_its_claim_and_a_reserved_device_is_taken_by_no_one_else() {
    let (mut s, _clock) = deferred_service();
    let seq = Sequencer::default();
    let pipeline = s.pipeline();
    pipeline.submit(seq.upsert(node_obj("n1", "4", &[])));
    pipeline.submit(seq.upsert(dra_object(
        "DeviceClass",
        serde_json::json!({"metadata": {"name": "gpu.example.com"}, "spec": {"selectors": [
            {"cel": {"expression": "device.driver == 'gpu.example.com'"}}
        ]}}),
    )));
    pipeline.submit(seq.upsert(dra_object(
        "ResourceSlice",
        serde_json::json!({"metadata": {"name": "n1-gpus"}, "spec": {
            "driver": "gpu.example.com", "nodeName": "n1",
            "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0"}]
        }}),
    )));
    pipeline.submit(seq.upsert(pod_with_claim("trainer", "gpu")));
    let results = s.run_until_idle();
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].gated.is_some(), "{results:?}");
    assert_eq!(
        results[0].outcome.message.as_deref(),
        Some("resourceclaim.resource.k8s.io \"gpu\" not found")
    );

    // The claim arrives: the pod is asked again, enters the queue and gets the device.
    pipeline.submit(seq.upsert(claim_obj("gpu")));
    let results = s.run_until_idle();
    assert_eq!(
        results[0].outcome.node.as_deref(),
        Some("n1"),
        "{results:?}"
    );
    let allocated = &results[0].outcome.claim_writes[0];
    assert_eq!(allocated.claim, "gpu");
    assert_eq!(allocated.pod_uid, "uid-trainer");
    let devices = &allocated.allocation.as_ref().unwrap().devices;
    assert_eq!(
        (devices[0].pool.as_str(), devices[0].device.as_str()),
        ("n1", "gpu-0")
    );

    // Its binding is not confirmed yet, but the device is held: the next claim finds none.
    pipeline.submit(seq.upsert(claim_obj("other")));
    pipeline.submit(seq.upsert(pod_with_claim("second", "other")));
    let results = s.run_until_idle();
    assert_eq!(
        results.last().unwrap().outcome.message.as_deref(),
        Some("0/1 nodes are available: 1 cannot allocate all claims. still not schedulable, preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.")
    );
}
