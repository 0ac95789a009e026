//! Permit: a test plugin that lets a gang's pods go only once enough of them are reserved. A
//! pod waits, the next pod of its gang lets it go, and a pod whose gang never fills times out and
//! is unreserved: its requests and its claim's reservation return to the cache.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use wasched::binding::Backend;
use wasched::clock::FakeClock;
use wasched::config::{Config, DefaultPluginRuntime};
use wasched::events::Object;
use wasched::framework::{Decider, FailurePolicy, PluginSpec, Victim};
use wasched::runtime::{CallError, LoadError, Permit, PermitAnswer, PluginFactory, PluginInstance};
use wasched::service::{CycleResult, PodState, Sequencer, Service};
use wasched_sdk as sdk;

/// How many pods of a gang (label `gang`) must be reserved before any of them is bound.
const GANG_SIZE: usize = 2;
const GANG_WAIT: Duration = Duration::from_secs(10);

/// The test plugin: waits at Permit until `GANG_SIZE` pods of the gang are reserved, then lets
/// them all go; forgets a pod at Unreserve.
struct Gang {
    descriptor: sdk::Descriptor,
    reserved: HashMap<String, Vec<String>>,
    unreserved: Arc<Mutex<Vec<String>>>,
}

impl PluginInstance for Gang {
    fn descriptor(&self) -> &sdk::Descriptor {
        &self.descriptor
    }
    fn upsert_nodes(&mut self, _: &[(u32, &sdk::NodeInfo)]) -> Result<(), CallError> {
        Ok(())
    }
    fn remove_nodes(&mut self, _: &[u32]) -> Result<(), CallError> {
        Ok(())
    }
    fn update_usage(&mut self, _: &[(u32, &sdk::NodeUsage)]) -> Result<(), CallError> {
        Ok(())
    }
    fn upsert_pods(&mut self, _: &[(u32, sdk::ExistingPod)]) -> Result<(), CallError> {
        Ok(())
    }
    fn remove_pods(&mut self, _: &[u32]) -> Result<(), CallError> {
        Ok(())
    }
    fn upsert_namespaces(&mut self, _: &[(&str, &sdk::Labels)]) -> Result<(), CallError> {
        Ok(())
    }
    fn remove_namespaces(&mut self, _: &[&str]) -> Result<(), CallError> {
        Ok(())
    }
    fn upsert_volumes(&mut self, _: &[&sdk::VolumeInfo]) -> Result<(), CallError> {
        Ok(())
    }
    fn remove_volumes(&mut self, _: &[&str]) -> Result<(), CallError> {
        Ok(())
    }
    fn set_pod(&mut self, _: &sdk::Pod) -> Result<sdk::PodPlan, CallError> {
        Ok(sdk::PodPlan {
            filter: sdk::FilterPlan::Skip,
            score: false,
        })
    }
    fn filter(&mut self, ids: &[u32], out: &mut sdk::FilterResults) -> Result<(), CallError> {
        ids.iter().for_each(|_| out.push(Ok(())));
        Ok(())
    }
    fn score(&mut self, ids: &[u32], out: &mut Vec<i64>) -> Result<(), CallError> {
        out.extend(ids.iter().map(|_| 0));
        Ok(())
    }
    fn normalize(&mut self, _: &mut Vec<i64>) -> Result<(), CallError> {
        Ok(())
    }
    fn permit(&mut self, pod: &sdk::Pod, _node: &str) -> Result<PermitAnswer, CallError> {
        let gang = pod.labels.get("gang").unwrap_or_default().to_string();
        let members = self.reserved.entry(gang).or_default();
        members.push(pod.key());
        if members.len() < GANG_SIZE {
            return Ok(PermitAnswer {
                permit: Permit::Wait { timeout: GANG_WAIT },
                allow: Vec::new(),
                reject: Vec::new(),
            });
        }
        let others = members.iter().filter(|k| **k != pod.key()).cloned();
        Ok(PermitAnswer {
            permit: Permit::Allow,
            allow: others.collect(),
            reject: Vec::new(),
        })
    }
    fn unreserve(&mut self, pod: &sdk::Pod, _node: &str) -> Result<(), CallError> {
        for members in self.reserved.values_mut() {
            members.retain(|k| *k != pod.key());
        }
        self.unreserved.lock().unwrap().push(pod.key());
        Ok(())
    }
}

struct GangFactory {
    unreserved: Arc<Mutex<Vec<String>>>,
}

impl PluginFactory for GangFactory {
    fn instantiate(&self, _: &str) -> Result<Box<dyn PluginInstance>, LoadError> {
        Ok(Box::new(Gang {
            descriptor: sdk::Descriptor {
                name: "Gang".into(),
                version: "0".into(),
                filter: true,
                score: false,
                normalize: sdk::Normalize::None,
                reads_usage: false,
                reads_pod: sdk::PodParts::LABELS,
                reads_existing_pods: sdk::ExistingPodParts::NONE,
                reads_namespaces: false,
                reads_volumes: false,
                pre_enqueue: false,
                permit: true,
                reserve: false,
                reads_node_images: false,
                reads_csi_nodes: false,
                reads_devices: false,
                reads_groups: false,
                post_filter: false,
                queue_sort: false,
                plan_ignores_usage: false,
            },
            reserved: HashMap::new(),
            unreserved: self.unreserved.clone(),
        }))
    }
    fn kind(&self) -> &'static str {
        "native"
    }
    fn identity(&self) -> String {
        "gang".into()
    }
}

/// Records the bindings it is asked for.
#[derive(Clone, Default)]
struct Bindings(Arc<Mutex<Vec<String>>>);

impl Backend for Bindings {
    fn bind_volumes(&mut self, _: &CycleResult, _: &str) -> Result<(), String> {
        Ok(())
    }
    fn bind_claims(&mut self, _: &CycleResult) -> Result<(), String> {
        Ok(())
    }
    fn unbind_claims(&mut self, _: &CycleResult) -> Result<(), String> {
        Ok(())
    }
    fn bind(&mut self, result: &CycleResult, node: &str) -> Result<(), String> {
        self.0
            .lock()
            .unwrap()
            .push(format!("{} -> {node}", result.pod));
        Ok(())
    }
    fn evict(&mut self, _: &CycleResult, _: &Victim) -> Result<(), String> {
        Ok(())
    }
    fn record_condition(&mut self, _: &CycleResult) -> Result<bool, String> {
        Ok(true)
    }
}

fn object(kind: &str, value: serde_json::Value) -> Object {
    let kind = wasched::events::Kind::named(kind).unwrap();
    Object::from_json(kind, value).unwrap()
}

fn gang_pod(name: &str, gang: &str, claim: Option<&str>) -> Object {
    let labels: BTreeMap<&str, &str> = [("gang", gang)].into();
    let mut spec = serde_json::json!({
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]
    });
    if let Some(claim) = claim {
        spec["volumes"] =
            serde_json::json!([{"name": "d", "persistentVolumeClaim": {"claimName": claim}}]);
    }
    object(
        "Pod",
        serde_json::json!({"metadata": {"name": name, "namespace": "default", "labels": labels}, "spec": spec}),
    )
}

#[test]
fn a_pod_waits_at_permit_until_its_gang_is_reserved_and_one_whose_gang_never_fills_times_out_unreserved(
) {
    let mut config = Config::parse("t.toml", Path::new("."), String::new()).unwrap();
    config.default_plugins = DefaultPluginRuntime::Native;
    let mut profiles = config.profiles().unwrap();
    let unreserved = Arc::new(Mutex::new(Vec::new()));
    profiles[0].filters.push(PluginSpec {
        name: "Gang".into(),
        factory: Arc::new(GangFactory {
            unreserved: unreserved.clone(),
        }),
        config: String::new(),
        policy: FailurePolicy::default(),
        stats: Arc::default(),
        idle_when: None,
    });
    let clock = FakeClock::default();
    let bindings = Bindings::default();
    let decider = Decider::with_clock(&profiles, 1, Arc::new(clock.clone())).unwrap();
    let mut s = Service::new(decider, Box::new(bindings.clone()), Arc::new(clock.clone()));
    let seq = Sequencer::default();
    for o in [
        object(
            "Node",
            serde_json::json!({"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}),
        ),
        object(
            "StorageClass",
            serde_json::json!({"metadata": {"name": "wffc"}, "provisioner": "example.com/disk", "volumeBindingMode": "WaitForFirstConsumer"}),
        ),
        object(
            "PersistentVolumeClaim",
            serde_json::json!({"metadata": {"name": "data", "namespace": "default"}, "spec": {"storageClassName": "wffc", "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
        ),
        gang_pod("a-1", "a", None),
        gang_pod("a-2", "a", None),
        gang_pod("alone", "b", Some("data")),
    ] {
        s.pipeline().submit(seq.upsert(o));
    }
    let bound = || bindings.0.lock().unwrap().clone();

    let first = s.schedule_one().unwrap();
    assert_eq!(
        (first.pod.as_str(), first.outcome.node.as_deref()),
        ("default/a-1", None)
    );
    assert_eq!(first.waiting_on, ["Gang"]);
    assert_eq!(
        s.pod_state("default/a-1"),
        Some(PodState::Assumed { node: "n1".into() }),
        "a waiting pod stays reserved"
    );
    assert!(bound().is_empty(), "nothing is bound while a pod waits");

    let second = s.schedule_one().unwrap();
    assert_eq!(
        (second.pod.as_str(), second.outcome.node.as_deref()),
        ("default/a-2", Some("n1"))
    );
    let released = s.schedule_one().unwrap();
    assert_eq!(
        (released.pod.as_str(), released.outcome.node.as_deref()),
        ("default/a-1", Some("n1"))
    );
    assert!(released.waiting_on.is_empty());
    // The pod let go is bound at once, before the pod whose Permit let it go.
    assert_eq!(bound(), ["default/a-1 -> n1", "default/a-2 -> n1"]);

    let third = s.schedule_one().unwrap();
    assert_eq!(
        (third.pod.as_str(), third.waiting_on.as_slice()),
        ("default/alone", &["Gang".to_string()][..])
    );
    let cache = s.decider().cache();
    assert_eq!(cache.pod_node("default/alone"), Some("n1"));
    assert_eq!(
        cache
            .claim("default", "data")
            .unwrap()
            .selected_node
            .as_deref(),
        Some("n1")
    );

    clock.advance(GANG_WAIT - Duration::from_millis(1));
    assert!(s.schedule_one().is_none(), "still waiting");
    clock.advance(Duration::from_millis(1));
    let timed_out = s.schedule_one().unwrap();
    assert_eq!(timed_out.pod, "default/alone");
    assert_eq!(timed_out.outcome.node, None);
    assert_eq!(
        timed_out.outcome.message.as_deref(),
        Some("rejected due to timeout after waiting 10s at plugin Gang")
    );
    let cache = s.decider().cache();
    assert_eq!(
        cache.pod_node("default/alone"),
        None,
        "its requests left the node"
    );
    assert_eq!(
        cache.claim("default", "data").unwrap().selected_node,
        None,
        "its claim's reservation was given up"
    );
    assert!(matches!(
        s.pod_state("default/alone"),
        Some(PodState::Pending(_))
    ));
    assert_eq!(
        *unreserved.lock().unwrap(),
        ["default/alone"],
        "the plugin was told"
    );
    assert_eq!(bound().len(), 2, "the pod that timed out was never bound");
}
