//! The same two cycles through the in-memory backend (`simulate`, `replay`) and the store's
//! (`serve`): a pod whose WaitForFirstConsumer claim is to be provisioned on its node, then a pod
//! that preempts.
//! Both must make the writes `tests/backends/two-cycles.txt` lists, in that order, as the API
//! server's backend must (`tests/e2e/kubernetes.rs`), so the backends cannot drift apart.

use std::path::Path;
use std::sync::Arc;

use wasched_core::binding::MemoryBackend;
use wasched_core::clock::FakeClock;
use wasched_core::events::{Action, Event, EventPipeline, Object};
use wasched_core::framework::Decider;
use wasched_core::input::{parse_text, Cluster};
use wasched_core::service::{CycleResult, Sequencer, Service};
use wasched_wasm::config::{Config, DefaultPluginRuntime};

use crate::engine::{EngineMetrics, ResultSink};
use crate::store::{Store, WriteMode};
use crate::store_binding::StoreSink;
use crate::watch::WatchLog;

const CLUSTER: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: node-a}
status: {allocatable: {cpu: "2", memory: 8Gi, pods: "110"}}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: wffc}
provisioner: example.com/disk
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: default}
spec:
  storageClassName: wffc
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: low, namespace: default, uid: low-uid}
spec:
  nodeName: node-a
  priority: -10
  containers: [{name: c, resources: {requests: {cpu: 1500m}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: app, namespace: default}
spec:
  priority: 0
  containers: [{name: c, resources: {requests: {cpu: 500m}}}]
  volumes: [{name: d, persistentVolumeClaim: {claimName: data}}]
---
apiVersion: v1
kind: Pod
metadata: {name: high, namespace: default}
spec:
  priority: 0
  containers: [{name: c, resources: {requests: {cpu: 1500m}}}]
"#;

fn cluster() -> Cluster {
    parse_text(CLUSTER, false, Path::new("backends.yaml")).unwrap()
}

fn decider() -> Decider {
    let mut config = Config::parse("t.toml", Path::new("."), String::new()).unwrap();
    config.default_plugins = DefaultPluginRuntime::Native;
    Decider::new(&config.profiles().unwrap(), 1).unwrap()
}

/// One write as the scheduler sees it come back, in words both backends share.
fn describe(event: &Event) -> String {
    match (&event.action, &event.object) {
        (Action::Upsert, Object::PersistentVolume(v)) => {
            let claim = v.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
            let claim = claim.map(|c| format!("{:?}/{:?}", c.namespace, c.name));
            format!("volume {:?} claimRef={claim:?}", v.metadata.name)
        }
        (Action::Upsert, Object::PersistentVolumeClaim(c)) => {
            let annotations = c.metadata.annotations.clone().unwrap_or_default();
            format!(
                "claim {:?} volumeName={:?} selectedNode={:?}",
                c.metadata.name,
                c.spec.as_ref().and_then(|s| s.volume_name.clone()),
                annotations.get("volume.kubernetes.io/selected-node"),
            )
        }
        (Action::Upsert, Object::Pod(p)) => format!(
            "pod {:?} node={:?} nominated={:?}",
            p.metadata.name,
            p.spec.as_ref().and_then(|s| s.node_name.clone()),
            p.status
                .as_ref()
                .and_then(|s| s.nominated_node_name.clone()),
        ),
        (Action::Delete, object) => {
            format!("delete {:?} {:?}", object.key().kind, object.key().name)
        }
        (Action::Upsert, object) => format!("other {:?}", object.key()),
    }
}

/// Runs the two cycles; `carry_out` makes each result's writes and returns the events they
/// sent back, which go to the service as a watch would deliver them.
fn two_cycles(
    mut service: Service,
    sequence: &Sequencer,
    mut carry_out: impl FnMut(CycleResult) -> Vec<Event>,
) -> (Vec<CycleResult>, Vec<String>) {
    for object in cluster().into_objects() {
        service.pipeline().submit(sequence.upsert(object));
    }
    let mut results = Vec::new();
    let mut writes = Vec::new();
    for _ in 0..2 {
        let result = service.schedule_one().expect("a pod is pending");
        results.push(result.clone());
        for event in carry_out(result) {
            writes.push(describe(&event));
            service.pipeline().submit(event);
        }
    }
    (results, writes)
}

/// Through the in-memory API server; `compact`: with every pod held as JSON between writes, as
/// `simulate` holds them.
fn through_memory(compact: bool) -> (Vec<CycleResult>, Vec<String>) {
    let cluster = cluster();
    let written = Arc::new(EventPipeline::default());
    let sequence = Arc::new(Sequencer::default());
    let backend = match compact {
        false => MemoryBackend::new(written.clone(), sequence.clone(), cluster.pods.clone()),
        true => MemoryBackend::new(written.clone(), sequence.clone(), [])
            .kept_compact()
            .with_compact_pods(&cluster.pods),
    }
    .with_storage(&cluster.volumes, &cluster.claims);
    let service = Service::with_pipeline(
        decider(),
        Some(Box::new(backend)),
        Arc::new(FakeClock::default()),
        Arc::new(EventPipeline::default()),
    );
    two_cycles(service, &sequence, |_| written.drain().collect())
}

fn through_store(dir: &Path) -> (Vec<CycleResult>, Vec<String>) {
    let store = Store::open(&dir.join("state.redb")).unwrap();
    store
        .write_objects(
            cluster().into_objects(),
            WriteMode::Create,
            |_, _, _| Ok(()),
        )
        .unwrap()
        .unwrap();
    let service = Service::deferred(decider(), Arc::new(FakeClock::default()));
    let written = Arc::new(EventPipeline::default());
    let mut sink = StoreSink {
        store,
        pipeline: written.clone(),
        bindings: service.binding_failures(),
    };
    let (watch, metrics) = (
        Arc::new(WatchLog::new(0)),
        Arc::new(EngineMetrics::default()),
    );
    two_cycles(service, &Sequencer::default(), |result| {
        sink.record(vec![result], &watch, &metrics);
        written.drain().collect()
    })
}

#[test]
fn the_memory_and_store_backends_make_the_same_writes_in_the_same_order() {
    let dir = std::env::temp_dir().join(format!("wasched-backends-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (memory_results, memory) = through_memory(false);
    let (compact_results, compact) = through_memory(true);
    assert_eq!(
        compact_results, memory_results,
        "pods kept as JSON between writes"
    );
    assert_eq!(compact, memory, "pods kept as JSON between writes");
    let (store_results, store) = through_store(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    let placed = |results: &[CycleResult]| -> Vec<(String, Option<String>)> {
        results
            .iter()
            .map(|r| (r.pod.clone(), r.outcome.node.clone()))
            .collect()
    };
    assert_eq!(
        placed(&memory_results),
        [
            ("default/app".to_string(), Some("node-a".to_string())),
            ("default/high".to_string(), None)
        ]
    );
    assert_eq!(placed(&store_results), placed(&memory_results));
    let expected: Vec<&str> = include_str!("../../../tests/backends/two-cycles.txt")
        .lines()
        .collect();
    assert_eq!(
        memory, expected,
        "PreBind, Bind; then the eviction, then the nomination"
    );
    assert_eq!(store, memory);
}
