//! The trace's GPUs as Dynamic Resource Allocation devices (`replay --gpus dra`), so one trace
//! shows how the two ways of asking for GPUs place it.
//!
//! Conversion (stated because results depend on it):
//! - each GPU node publishes one ResourceSlice (driver [`DRIVER`], pool = the node's name) with a
//!   device `gpu-K` per GPU, attributes `model` (string) and `index` (int); the node has no GPU
//!   extended resources;
//! - a DeviceClass per GPU model (`gpu-t4`: `device.driver == DRIVER && model == "T4"`), and
//!   [`ANY_GPU_CLASS`] for any model;
//! - a GPU pod names one ResourceClaimTemplate (one per GPU count and accepted models) whose one
//!   request asks `exactly` `count` devices: of its model's class when it accepts one model, of
//!   [`ANY_GPU_CLASS`] with a `model in [...]` selector when several, of [`ANY_GPU_CLASS`] when any;
//!   `gpu_spec` is not also node affinity;
//! - a GPU-sharing pod (`gpu_milli` < 1000) asks for one whole device: DRA in Kubernetes 1.34
//!   shares a device only through a shared claim or the alpha `DRAConsumableCapacity`, neither of
//!   which the trace describes, so the comparison shows what shares cost without them;
//! - each pod's claim is made from its template as kube's resourceclaim controller makes it
//!   (`wasched_core::k8s::resourceclaims`, as `serve` does), created with the pod and deleted
//!   with it.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::resource::v1 as resource;
use serde_json::json;

use super::{TraceNode, TracePod, GPU, GPU_MILLI};
use crate::events::Object;
use wasched_core::k8s::resourceclaims;
use wasched_core::util::Rng;

/// The driver publishing the trace's GPUs.
pub const DRIVER: &str = "gpu.trace.wasched.io";
/// The DeviceClass every GPU of the trace belongs to.
pub const ANY_GPU_CLASS: &str = "gpu";
/// The name of a GPU pod's claim entry.
const ENTRY: &str = "gpu";

/// The DeviceClass of one GPU model.
pub fn model_class(model: &str) -> String {
    format!("gpu-{}", dns_label(model))
}

fn dns_label(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect()
}

/// A CEL string literal.
fn cel_string(text: &str) -> String {
    serde_json::Value::String(text.to_string()).to_string()
}

fn from_json<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> T {
    serde_json::from_value(value).expect("a well-formed resource.k8s.io/v1 object")
}

/// [`ANY_GPU_CLASS`], then one class per model the nodes name.
pub fn device_classes(nodes: &[TraceNode]) -> Vec<resource::DeviceClass> {
    let driver = format!("device.driver == {}", cel_string(DRIVER));
    let models: BTreeSet<&str> = nodes.iter().filter_map(|n| n.model.as_deref()).collect();
    let mut classes = vec![from_json(json!({
        "metadata": {"name": ANY_GPU_CLASS},
        "spec": {"selectors": [{"cel": {"expression": driver}}]}
    }))];
    for model in models {
        let expression = format!(
            "{driver} && device.attributes[{}].model == {}",
            cel_string(DRIVER),
            cel_string(model)
        );
        classes.push(from_json(json!({
            "metadata": {"name": model_class(model)},
            "spec": {"selectors": [{"cel": {"expression": expression}}]}
        })));
    }
    classes
}

/// The node's GPUs as one slice, or `None` for a node without GPUs.
pub fn resource_slice(node: &TraceNode) -> Option<resource::ResourceSlice> {
    let model = node.model.as_deref().filter(|_| node.gpu > 0)?;
    let devices: Vec<serde_json::Value> = (0..node.gpu)
        .map(|k| {
            json!({
                "name": format!("gpu-{k}"),
                "attributes": {"model": {"string": model}, "index": {"int": k}}
            })
        })
        .collect();
    Some(from_json(json!({
        "metadata": {"name": format!("{}-gpus", node.name)},
        "spec": {
            "driver": DRIVER,
            "nodeName": node.name,
            "pool": {"name": node.name, "generation": 1, "resourceSliceCount": 1},
            "devices": devices
        }
    })))
}

/// Whole devices a pod asks for: its GPUs, and one for a share.
pub fn devices_asked(pod: &TracePod) -> i64 {
    pod.num_gpu
}

/// The template a GPU pod names (one per GPU count and accepted models), or `None` for a pod
/// without GPUs.
fn template_name(pod: &TracePod) -> Option<String> {
    let count = devices_asked(pod);
    if count == 0 {
        return None;
    }
    let mut name = format!("gpu-{count}");
    for model in &pod.gpu_spec {
        name.push('-');
        name.push_str(&dns_label(model));
    }
    Some(name)
}

fn template(pod: &TracePod, name: &str) -> resource::ResourceClaimTemplate {
    let count = devices_asked(pod);
    let exactly = match pod.gpu_spec.as_slice() {
        [] => json!({"deviceClassName": ANY_GPU_CLASS, "count": count}),
        [model] => json!({"deviceClassName": model_class(model), "count": count}),
        models => {
            let list: Vec<String> = models.iter().map(|m| cel_string(m)).collect();
            let expression = format!(
                "device.attributes[{}].model in [{}]",
                cel_string(DRIVER),
                list.join(", ")
            );
            json!({
                "deviceClassName": ANY_GPU_CLASS,
                "count": count,
                "selectors": [{"cel": {"expression": expression}}]
            })
        }
    };
    from_json(json!({
        "metadata": {"name": name, "namespace": "trace"},
        "spec": {"spec": {"devices": {"requests": [{"name": ENTRY, "exactly": exactly}]}}}
    }))
}

/// The trace as DRA objects: the cluster-wide ones (classes, slices, templates), and each pod
/// with the claim made for it (`None` for a pod without GPUs).
pub struct Workload {
    /// DeviceClasses, ResourceSlices and ResourceClaimTemplates.
    pub objects: Vec<Object>,
    /// The pods, in the trace's order, each naming its template and recording its claim.
    pub pods: Vec<core::Pod>,
    /// Each pod's claim.
    pub claims: Vec<Option<resource::ResourceClaim>>,
}

/// The trace's nodes and pods as DRA objects; `seed` draws the claims' name suffixes.
pub fn workload(nodes: &[TraceNode], pods: &[TracePod], seed: u64) -> Workload {
    let mut objects: Vec<Object> = device_classes(nodes)
        .into_iter()
        .map(|c| Object::DeviceClass(Box::new(c)))
        .collect();
    objects.extend(
        nodes
            .iter()
            .filter_map(resource_slice)
            .map(|s| Object::ResourceSlice(Box::new(s))),
    );
    let mut templates: BTreeMap<String, resource::ResourceClaimTemplate> = BTreeMap::new();
    for pod in pods {
        if let Some(name) = template_name(pod) {
            templates
                .entry(name.clone())
                .or_insert_with(|| template(pod, &name));
        }
    }
    let mut rng = Rng::new(seed);
    let mut names: BTreeSet<String> = BTreeSet::new();
    let mut pod_objects = Vec::with_capacity(pods.len());
    let mut claims = Vec::with_capacity(pods.len());
    for trace_pod in pods {
        let mut pod = pod_object(trace_pod);
        let made = resourceclaims::claims_from_templates(
            &pod,
            |name| templates.get(name).cloned(),
            |name| names.contains(name),
            || resourceclaims::name_suffix(&mut rng),
        );
        let claim = made.map(|made| {
            pod = made.pod;
            made.claims
                .into_iter()
                .next()
                .expect("one entry, one claim")
        });
        if let Some(name) = claim.as_ref().and_then(|c| c.metadata.name.clone()) {
            names.insert(name);
        }
        pod_objects.push(pod);
        claims.push(claim);
    }
    objects.extend(
        templates
            .into_values()
            .map(|t| Object::ResourceClaimTemplate(Box::new(t))),
    );
    Workload {
        objects,
        pods: pod_objects,
        claims,
    }
}

/// The node without GPU extended resources: its GPUs are in its slice.
pub fn node_object(node: &TraceNode) -> core::Node {
    let mut object = super::node_object(node);
    if let Some(allocatable) = object.status.as_mut().and_then(|s| s.allocatable.as_mut()) {
        allocatable.remove(GPU);
        allocatable.remove(GPU_MILLI);
    }
    object
}

/// The pod asking for its GPUs through its template instead of extended resources and model
/// affinity; its uid (`trace-NAME`) is what its claim's owner and `reservedFor` name.
fn pod_object(pod: &TracePod) -> core::Pod {
    let mut object = super::pod_object(pod);
    object.metadata.uid = Some(format!("trace-{}", pod.name));
    let spec = object.spec.as_mut().expect("a trace pod has a spec");
    spec.affinity = None;
    for container in &mut spec.containers {
        if let Some(resources) = container.resources.as_mut() {
            for list in [resources.requests.as_mut(), resources.limits.as_mut()]
                .into_iter()
                .flatten()
            {
                list.remove(GPU);
                list.remove(GPU_MILLI);
            }
            if resources.limits.as_ref().is_some_and(BTreeMap::is_empty) {
                resources.limits = None;
            }
        }
    }
    if let Some(name) = template_name(pod) {
        spec.resource_claims = Some(vec![core::PodResourceClaim {
            name: ENTRY.into(),
            resource_claim_template_name: Some(name),
            resource_claim_name: None,
        }]);
    }
    object
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, gpu: i64, model: Option<&str>) -> TraceNode {
        TraceNode {
            name: name.into(),
            cpu_milli: 8000,
            memory_mib: 8192,
            gpu,
            model: model.map(str::to_string),
        }
    }

    fn pod(name: &str, num_gpu: i64, gpu_milli: i64, spec: &[&str]) -> TracePod {
        TracePod {
            name: name.into(),
            cpu_milli: 1000,
            memory_mib: 1024,
            num_gpu,
            gpu_milli,
            gpu_spec: spec.iter().map(|s| s.to_string()).collect(),
            creation: 0,
            deletion: None,
            line: 1,
            job: None,
        }
    }

    #[test]
    fn gpus_become_slices_classes_and_claims_from_templates() {
        let nodes = [node("n1", 2, Some("T4")), node("cpu", 0, None)];
        let pods = [
            pod("whole", 2, 1000, &[]),
            pod("share", 1, 300, &["T4"]),
            pod("either", 1, 1000, &["T4", "V100M16"]),
            pod("plain", 0, 0, &[]),
        ];
        let workload = workload(&nodes, &pods, 7);
        let kinds: Vec<String> = workload
            .objects
            .iter()
            .map(|o| format!("{:?} {}", o.key().kind, o.key().name))
            .collect();
        assert_eq!(
            kinds,
            [
                "DeviceClass gpu",
                "DeviceClass gpu-t4",
                "ResourceSlice n1-gpus",
                "ResourceClaimTemplate gpu-1-t4",
                "ResourceClaimTemplate gpu-1-t4-v100m16",
                "ResourceClaimTemplate gpu-2",
            ]
        );
        let slice = resource_slice(&nodes[0]).expect("a slice");
        assert_eq!(slice.spec.devices.as_ref().map(Vec::len), Some(2));
        assert_eq!(slice.spec.pool.name, "n1");
        assert!(resource_slice(&nodes[1]).is_none());

        let requests = |pod: &core::Pod| {
            let container = &pod.spec.as_ref().unwrap().containers[0];
            container
                .resources
                .as_ref()
                .unwrap()
                .requests
                .clone()
                .unwrap()
        };
        for (i, object) in workload.pods.iter().enumerate() {
            assert!(
                !requests(object).contains_key(GPU) && !requests(object).contains_key(GPU_MILLI),
                "{}: no extended resources",
                pods[i].name
            );
            assert!(object.spec.as_ref().unwrap().affinity.is_none());
        }
        assert!(workload.claims[3].is_none(), "no GPU, no claim");
        let share = workload.claims[1].as_ref().expect("the share's claim");
        let exactly = share
            .spec
            .devices
            .as_ref()
            .unwrap()
            .requests
            .as_ref()
            .unwrap()[0]
            .exactly
            .clone()
            .unwrap();
        assert_eq!(
            (exactly.device_class_name.as_str(), exactly.count),
            ("gpu-t4", Some(1)),
            "a share asks for one whole T4"
        );
        let either = workload.claims[2].as_ref().unwrap();
        let exactly = either
            .spec
            .devices
            .as_ref()
            .unwrap()
            .requests
            .as_ref()
            .unwrap()[0]
            .exactly
            .clone()
            .unwrap();
        assert_eq!(exactly.device_class_name, ANY_GPU_CLASS);
        assert_eq!(
            exactly.selectors.unwrap()[0]
                .cel
                .as_ref()
                .unwrap()
                .expression,
            "device.attributes[\"gpu.trace.wasched.io\"].model in [\"T4\", \"V100M16\"]"
        );
        let whole = &workload.pods[0];
        let recorded = whole
            .status
            .as_ref()
            .unwrap()
            .resource_claim_statuses
            .clone()
            .unwrap();
        let claim = workload.claims[0].as_ref().unwrap();
        assert_eq!(recorded[0].resource_claim_name, claim.metadata.name);
        assert!(claim
            .metadata
            .name
            .as_deref()
            .unwrap()
            .starts_with("whole-gpu-"));
        assert_eq!(
            claim.metadata.owner_references.as_ref().unwrap()[0].uid,
            "trace-whole"
        );
        let node = node_object(&nodes[0]);
        let allocatable = node.status.unwrap().allocatable.unwrap();
        assert!(!allocatable.contains_key(GPU) && allocatable.contains_key("cpu"));
    }
}
