//! From Kubernetes API objects (as `kubectl get -o yaml/json` prints them) to the plugin model.

pub mod devices;
mod placement;
pub mod podgroup;
mod volumes;

pub use placement::selector as label_selector;
pub use volumes::{csi_driver, csi_node, persistent_volume_source, storage_capacity};
pub mod quantity;
pub mod resourceclaims;
pub mod validation;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1 as policy;
use k8s_openapi::api::storage::v1 as storage;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use wasched_sdk as sdk;
use wasched_sdk::{resource, Labels, Resources};

/// What is wrong with one field of an object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    /// The field's path (`spec.containers[0].resources.requests.cpu`).
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

fn field_error(field: impl Into<String>, message: impl ToString) -> FieldError {
    FieldError {
        field: field.into(),
        message: message.to_string(),
    }
}

/// The default cpu request (millicores) that scoring assumes for a container without one.
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// The default memory request (bytes) that scoring assumes for a container without one.
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// The phase of a pod that no longer holds resources on its node.
pub fn is_terminated(pod: &core::Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// `namespace/name`, with `default` for a pod without a namespace.
pub fn pod_key(pod: &core::Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// `namespace/name` of a claim.
pub fn claim_key(claim: &core::PersistentVolumeClaim) -> String {
    format!(
        "{}/{}",
        claim.metadata.namespace.as_deref().unwrap_or("default"),
        claim.metadata.name.as_deref().unwrap_or_default()
    )
}

fn labels(map: &Option<BTreeMap<String, String>>) -> Labels {
    map.iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Converts a resource list (`requests`, `allocatable`, `overhead`) to canonical units.
///
/// # Errors
/// A quantity that does not parse, is negative or does not fit an i64 in its canonical unit,
/// naming `field` and the resource.
pub fn resources(list: &BTreeMap<String, Quantity>, field: &str) -> Result<Resources, FieldError> {
    let mut out = Resources::default();
    for (name, Quantity(text)) in list {
        // The API server takes only qualified names (`example.com/gpu`) as resource names; the
        // standard ones, nearly every name read, need no check.
        let standard = matches!(
            name.as_str(),
            resource::CPU | resource::MEMORY | resource::PODS | resource::EPHEMERAL_STORAGE
        );
        if !standard {
            validation::qualified_name(&format!("{field}[{name}]"), name)?;
        }
        let parsed = if name == resource::CPU {
            quantity::milli_value(text)
        } else {
            quantity::value(text)
        };
        let field = || format!("{field}.{name}");
        let amount = parsed.map_err(|e| field_error(field(), e))?;
        // As the API server's validation: a negative request or capacity would free room on a node.
        if quantity::is_negative(text).map_err(|e| field_error(field(), e))? {
            return Err(field_error(
                field(),
                format!("invalid quantity {text:?}: must be greater than or equal to 0"),
            ));
        }
        out.set(name, amount);
    }
    Ok(out)
}

/// A container's effective requests: `requests`, with a resource that only has a limit requesting
/// the limit (what the API server's defaulting does before the scheduler sees the pod).
fn container_requests(
    container: &core::Container,
    field: &str,
) -> Result<BTreeMap<String, Quantity>, FieldError> {
    let Some(requirements) = &container.resources else {
        return Ok(BTreeMap::new());
    };
    let mut requests = requirements.requests.clone().unwrap_or_default();
    for (name, limit) in requirements.limits.iter().flatten() {
        requests
            .entry(name.clone())
            .or_insert_with(|| limit.clone());
    }
    // Validate here so that the error names the container.
    resources(&requests, &format!("{field}.resources.requests"))?;
    Ok(requests)
}

/// Sums of a container list's requests, as kube-scheduler computes a pod's request
/// (`resourcehelper.PodRequests`): containers plus sidecars, against each regular init container
/// plus the sidecars started before it, plus the pod overhead. With `non_zero`, a container missing
/// a cpu or memory request counts the scheduler's defaults.
fn pod_requests(spec: &core::PodSpec, non_zero: bool) -> Result<Resources, FieldError> {
    let container_resources =
        |c: &core::Container, field: String| -> Result<Resources, FieldError> {
            let requests = container_requests(c, &field)?;
            let mut r = resources(&requests, &field)?;
            if non_zero {
                if !requests.contains_key(resource::CPU) {
                    r.milli_cpu = DEFAULT_MILLI_CPU_REQUEST;
                }
                if !requests.contains_key(resource::MEMORY) {
                    r.memory = DEFAULT_MEMORY_REQUEST;
                }
            }
            Ok(r)
        };
    let mut total = Resources::default();
    for (i, c) in spec.containers.iter().enumerate() {
        total.add(&container_resources(c, format!("spec.containers[{i}]"))?);
    }
    let mut sidecars = Resources::default();
    let mut init_peak = Resources::default();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let own = container_resources(c, format!("spec.initContainers[{i}]"))?;
        let during_init = if c.restart_policy.as_deref() == Some("Always") {
            total.add(&own);
            sidecars.add(&own);
            sidecars.clone()
        } else {
            let mut with_sidecars = own;
            with_sidecars.add(&sidecars);
            with_sidecars
        };
        init_peak.max_with(&during_init);
    }
    total.max_with(&init_peak);
    if let Some(overhead) = &spec.overhead {
        total.add(&resources(overhead, "spec.overhead")?);
    }
    // `max_with`/`add` may leave explicit zero entries for scalar resources; they are kept so a
    // plugin can tell "requested 0" from "not requested", as Kubernetes' maps do.
    Ok(total)
}

/// The plugin model of a node (with empty usage: the cache fills it in).
///
/// # Errors
/// An allocatable (or capacity) quantity that is not a valid one.
pub fn node_info(node: &core::Node) -> Result<sdk::NodeInfo, FieldError> {
    let spec = node.spec.as_ref();
    let status = node.status.as_ref();
    // The API server defaults a missing `allocatable` to `capacity` (`SetDefaults_NodeStatus`), and
    // node templates written by hand, kube-scheduler's own benchmark ones among them, rely on it.
    let allocatable = match (
        status.and_then(|s| s.allocatable.as_ref()),
        status.and_then(|s| s.capacity.as_ref()),
    ) {
        (Some(list), _) => resources(list, "status.allocatable")?,
        (None, Some(capacity)) => resources(capacity, "status.capacity")?,
        (None, None) => Resources::default(),
    };
    Ok(sdk::NodeInfo {
        name: node.metadata.name.clone().unwrap_or_default(),
        labels: labels(&node.metadata.labels),
        annotations: labels(&node.metadata.annotations),
        taints: spec
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(i, t)| taint(i, t))
            .collect::<Result<_, _>>()?,
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        allocatable,
        usage: sdk::NodeUsage::default(),
        // The cache puts the node's CSINode and device pools in.
        csi_node: None,
        device_pools: Vec::new(),
        images: status
            .and_then(|s| s.images.as_ref())
            .into_iter()
            .flatten()
            .map(|image| sdk::NodeImage {
                names: image.names.clone().unwrap_or_default(),
                size_bytes: image.size_bytes.unwrap_or(0),
            })
            .collect(),
    })
}

/// A node's taint, checked as the API server checks it (`validateNodeTaints`).
fn taint(index: usize, t: &core::Taint) -> Result<sdk::Taint, FieldError> {
    let field = format!("spec.taints[{index}]");
    validation::qualified_name(&format!("{field}.key"), &t.key)?;
    let value = t.value.clone().unwrap_or_default();
    validation::label_value(&format!("{field}.value"), &value)?;
    if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&t.effect.as_str()) {
        return Err(field_error(
            format!("{field}.effect"),
            format!(
                "Unsupported value: {:?}: supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\"",
                t.effect
            ),
        ));
    }
    Ok(sdk::Taint {
        key: t.key.clone(),
        value,
        effect: t.effect.clone(),
    })
}

fn term(t: &core::NodeSelectorTerm) -> sdk::NodeSelectorTerm {
    let requirements = |list: &Option<Vec<core::NodeSelectorRequirement>>| {
        list.iter()
            .flatten()
            .map(|r| sdk::NodeSelectorRequirement {
                key: r.key.clone(),
                operator: r.operator.clone(),
                values: r.values.clone().unwrap_or_default(),
            })
            .collect()
    };
    sdk::NodeSelectorTerm {
        match_expressions: requirements(&t.match_expressions),
        match_fields: requirements(&t.match_fields),
    }
}

/// The plugin model of a pod. Its volume claims are listed by name only; the cache looks the
/// claims up at each scheduling attempt.
///
/// # Errors
/// A request or overhead quantity that does not parse.
pub fn pod(pod: &core::Pod) -> Result<sdk::Pod, FieldError> {
    if let Some(error) = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_UNDECODABLE))
    {
        let (field, message) = error.split_once(": ").unwrap_or(("", error));
        return Err(field_error(field, message));
    }
    let empty = core::PodSpec::default();
    let spec = pod.spec.as_ref().unwrap_or(&empty);
    let node_affinity = node_affinity(spec);
    let (meta, status) = (&pod.metadata, pod.status.as_ref());
    let pod_labels = labels(&pod.metadata.labels);
    Ok(sdk::Pod {
        namespace: meta.namespace.clone().unwrap_or_else(|| "default".into()),
        name: pod.metadata.name.clone().unwrap_or_default(),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        annotations: labels(&pod.metadata.annotations),
        scheduler_name: spec
            .scheduler_name
            .clone()
            .unwrap_or_else(|| crate::DEFAULT_SCHEDULER_NAME.to_string()),
        priority: spec.priority.unwrap_or(0),
        node_name: spec.node_name.clone().unwrap_or_default(),
        node_selector: labels(&spec.node_selector),
        node_affinity,
        tolerations: tolerations(spec),
        requests: pod_requests(spec, false)?,
        non_zero_requests: pod_requests(spec, true)?,
        volume_claims: volume_claims(pod, spec),
        containers: containers(spec),
        images: images(spec),
        volumes: volumes::pod_volumes(pod, spec),
        claims: devices::pod_claims(pod),
        group: None,
        pod_affinity: placement::pod_affinity(spec, &pod_labels),
        host_ports: placement::host_ports(spec),
        topology_spread_constraints: placement::topology_spread_constraints(spec),
        default_spread_selector: None,
        terminating: pod.metadata.deletion_timestamp.is_some(),
        controller: controller(pod),
        never_preempts: spec.preemption_policy.as_deref() == Some("Never"),
        start_time_millis: status
            .and_then(|s| s.start_time.as_ref())
            .map(|t| t.0.as_millisecond()),
        nominated_node_name: status
            .and_then(|s| s.nominated_node_name.clone())
            .unwrap_or_default(),
        terminating_by_preemption: pod.metadata.deletion_timestamp.is_some()
            && preempted_by_scheduler(pod),
        labels: pod_labels,
        scheduling_gates: scheduling_gates(spec),
        workload_ref: spec
            .workload_ref
            .as_ref()
            .map(|r| match r.pod_group_replica_key.as_deref() {
                Some(replica) if !replica.is_empty() => {
                    format!("{}/{}/{replica}", r.name, r.pod_group)
                }
                _ => format!("{}/{}", r.name, r.pod_group),
            })
            .unwrap_or_default(),
    })
}

/// `spec.containers`, by name and image.
fn containers(spec: &core::PodSpec) -> Vec<sdk::Container> {
    spec.containers
        .iter()
        .map(|c| sdk::Container {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
        })
        .collect()
}

/// The images of `spec.initContainers`, then of `spec.containers` (what ImageLocality scores).
fn images(spec: &core::PodSpec) -> Vec<String> {
    let init = spec.init_containers.iter().flatten();
    init.chain(&spec.containers)
        .map(|c| c.image.clone().unwrap_or_default())
        .collect()
}

/// `spec.schedulingGates`, by name.
fn scheduling_gates(spec: &core::PodSpec) -> Vec<String> {
    spec.scheduling_gates
        .iter()
        .flatten()
        .map(|gate| gate.name.clone())
        .collect()
}

/// kube-scheduler's view of the pod's required and preferred node affinity.
fn node_affinity(spec: &core::PodSpec) -> Option<sdk::NodeAffinity> {
    let na = spec.affinity.as_ref()?.node_affinity.as_ref()?;
    Some(sdk::NodeAffinity {
        required: na
            .required_during_scheduling_ignored_during_execution
            .as_ref()
            .map(|s| s.node_selector_terms.iter().map(term).collect()),
        preferred: na
            .preferred_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
            .map(|p| sdk::PreferredSchedulingTerm {
                weight: p.weight,
                preference: term(&p.preference),
            })
            .collect(),
    })
}

fn tolerations(spec: &core::PodSpec) -> Vec<sdk::Toleration> {
    spec.tolerations
        .iter()
        .flatten()
        .map(|t| sdk::Toleration {
            key: t.key.clone().unwrap_or_default(),
            operator: t.operator.clone().unwrap_or_default(),
            value: t.value.clone().unwrap_or_default(),
            effect: t.effect.clone().unwrap_or_default(),
            toleration_seconds: t.toleration_seconds,
        })
        .collect()
}

/// The pod's PersistentVolumeClaims, and the claims of its generic ephemeral volumes.
fn volume_claims(pod: &core::Pod, spec: &core::PodSpec) -> Vec<sdk::VolumeClaim> {
    spec.volumes
        .iter()
        .flatten()
        .filter_map(|v| {
            if let Some(c) = &v.persistent_volume_claim {
                Some(sdk::VolumeClaim {
                    volume: v.name.clone(),
                    claim_name: c.claim_name.clone(),
                    ephemeral: false,
                    claim: None,
                })
            } else {
                // The ephemeral volume controller names the claim after the pod and volume.
                v.ephemeral.as_ref().map(|_| sdk::VolumeClaim {
                    volume: v.name.clone(),
                    claim_name: format!(
                        "{}-{}",
                        pod.metadata.name.as_deref().unwrap_or_default(),
                        v.name
                    ),
                    ephemeral: true,
                    claim: None,
                })
            }
        })
        .collect()
}

/// The owner reference marked as the pod's controller.
fn controller(pod: &core::Pod) -> Option<sdk::ControllerRef> {
    let owners = pod.metadata.owner_references.iter().flatten();
    owners
        .into_iter()
        .find(|o| o.controller == Some(true))
        .map(|o| sdk::ControllerRef {
            api_version: o.api_version.clone(),
            kind: o.kind.clone(),
            name: o.name.clone(),
        })
}

/// What preemption reads of a PodDisruptionBudget.
pub fn disruption_budget(budget: &policy::PodDisruptionBudget) -> crate::cache::DisruptionBudget {
    let status = budget.status.as_ref();
    crate::cache::DisruptionBudget {
        namespace: budget
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_string()),
        name: budget.metadata.name.clone().unwrap_or_default(),
        selector: budget
            .spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .map(placement::selector),
        disruptions_allowed: status.map_or(0, |s| s.disruptions_allowed),
        disrupted_pods: status
            .and_then(|s| s.disrupted_pods.as_ref())
            .map(|pods| pods.keys().cloned().collect())
            .unwrap_or_default(),
    }
}

/// The pod carries kube-scheduler's mark of a preemption victim: the condition
/// `DisruptionTarget=True` with reason `PreemptionByScheduler` (the first `DisruptionTarget`
/// condition decides, as in kube-scheduler).
pub fn preempted_by_scheduler(pod: &core::Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|conditions| conditions.iter().find(|c| c.type_ == "DisruptionTarget"))
        .is_some_and(|c| c.status == "True" && c.reason.as_deref() == Some("PreemptionByScheduler"))
}

/// The storage class a claim asks for: the beta annotation wins over `spec.storageClassName`.
pub fn claim_storage_class(claim: &core::PersistentVolumeClaim) -> String {
    storage_class(
        &claim.metadata,
        claim
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.as_ref()),
    )
}

/// The storage class a volume belongs to: the beta annotation wins over `spec.storageClassName`.
pub fn volume_storage_class(pv: &core::PersistentVolume) -> String {
    storage_class(
        &pv.metadata,
        pv.spec.as_ref().and_then(|s| s.storage_class_name.as_ref()),
    )
}

/// The class an object's `volume.beta.kubernetes.io/storage-class` annotation names, else
/// `spec_class`, else empty (kube's `GetPersistentVolume(Claim)Class`).
fn storage_class(meta: &ObjectMeta, spec_class: Option<&String>) -> String {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get("volume.beta.kubernetes.io/storage-class"))
        .or(spec_class)
        .cloned()
        .unwrap_or_default()
}

/// A storage quantity in bytes; 0 when absent or unparsable (the API server refuses those).
fn storage_bytes(quantities: Option<&std::collections::BTreeMap<String, Quantity>>) -> i64 {
    quantities
        .and_then(|q| q.get("storage"))
        .and_then(|q| quantity::value(&q.0).ok())
        .unwrap_or(0)
}

/// A volume mode, `Filesystem` when unset.
fn volume_mode(mode: Option<&String>) -> String {
    mode.cloned().unwrap_or_else(|| "Filesystem".to_string())
}

/// A PersistentVolume as the plugin model holds it.
pub fn volume_info(pv: &core::PersistentVolume) -> sdk::VolumeInfo {
    let spec = pv.spec.as_ref();
    sdk::VolumeInfo {
        name: pv.metadata.name.clone().unwrap_or_default(),
        labels: labels(&pv.metadata.labels),
        storage_class_name: volume_storage_class(pv),
        capacity: storage_bytes(spec.and_then(|s| s.capacity.as_ref())),
        access_modes: spec
            .and_then(|s| s.access_modes.clone())
            .unwrap_or_default(),
        volume_mode: volume_mode(spec.and_then(|s| s.volume_mode.as_ref())),
        volume_attributes_class_name: spec.and_then(|s| s.volume_attributes_class_name.clone()),
        phase: pv
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default(),
        deleting: pv.metadata.deletion_timestamp.is_some(),
        claim_ref: spec
            .and_then(|s| s.claim_ref.as_ref())
            .map(|r| sdk::ClaimRef {
                namespace: r.namespace.clone().unwrap_or_default(),
                name: r.name.clone().unwrap_or_default(),
                uid: r.uid.clone().unwrap_or_default(),
            }),
        node_affinity: spec
            .and_then(|s| s.node_affinity.as_ref())
            .and_then(|a| a.required.as_ref())
            .map(|r| r.node_selector_terms.iter().map(term).collect()),
    }
}

/// A StorageClass as the plugin model holds it.
pub fn storage_class_info(class: &storage::StorageClass) -> sdk::StorageClassInfo {
    sdk::StorageClassInfo {
        name: class.metadata.name.clone().unwrap_or_default(),
        volume_binding_mode: class.volume_binding_mode.clone(),
        provisioner: class.provisioner.clone(),
        allowed_topologies: class
            .allowed_topologies
            .iter()
            .flatten()
            .map(|t| sdk::NodeSelectorTerm {
                match_expressions: t
                    .match_label_expressions
                    .iter()
                    .flatten()
                    .map(|r| sdk::NodeSelectorRequirement {
                        key: r.key.clone(),
                        operator: "In".to_string(),
                        values: r.values.clone(),
                    })
                    .collect(),
                match_fields: Vec::new(),
            })
            .collect(),
    }
}

/// A PersistentVolumeClaim as the plugin model holds it, without the objects it refers to.
pub fn claim_info(claim: &core::PersistentVolumeClaim) -> sdk::ClaimInfo {
    let spec = claim.spec.as_ref();
    let annotations = claim.metadata.annotations.as_ref();
    sdk::ClaimInfo {
        volume_name: spec.and_then(|s| s.volume_name.clone()).unwrap_or_default(),
        storage_class_name: claim_storage_class(claim),
        storage_class: None,
        volume: None,
        uid: claim.metadata.uid.clone().unwrap_or_default(),
        phase: claim
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default(),
        deleting: claim.metadata.deletion_timestamp.is_some(),
        bind_completed: annotations.is_some_and(|a| a.contains_key(ANNOTATION_BIND_COMPLETED)),
        selected_node: annotations.and_then(|a| a.get(ANNOTATION_SELECTED_NODE).cloned()),
        requested_storage: storage_bytes(
            spec.and_then(|s| s.resources.as_ref())
                .and_then(|r| r.requests.as_ref()),
        ),
        access_modes: spec
            .and_then(|s| s.access_modes.clone())
            .unwrap_or_default(),
        volume_mode: volume_mode(spec.and_then(|s| s.volume_mode.as_ref())),
        volume_attributes_class_name: spec.and_then(|s| s.volume_attributes_class_name.clone()),
        selector: spec
            .and_then(|s| s.selector.as_ref())
            .map(placement::selector),
    }
}

/// `volume` bound to `claim` and `claim` to `volume`, as the PV controller leaves them once it
/// completed the binding VolumeBinding asked for: the volume's `claimRef` and phase `Bound`, the
/// claim's `volumeName`, `bind-completed` and phase `Bound` with the volume's capacity.
pub fn bound_volume_and_claim(
    volume: &core::PersistentVolume,
    claim: &core::PersistentVolumeClaim,
) -> (core::PersistentVolume, core::PersistentVolumeClaim) {
    let yes = || "yes".to_string();
    let mut volume = volume_reserved_for(volume, claim);
    let mut claim = claim.clone();
    let spec = volume.spec.get_or_insert_with(Default::default);
    let capacity = spec.capacity.clone();
    let access_modes = spec.access_modes.clone();
    volume.status.get_or_insert_with(Default::default).phase = Some("Bound".into());
    claim.spec.get_or_insert_with(Default::default).volume_name = volume.metadata.name.clone();
    let annotations = claim
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    annotations.insert(ANNOTATION_BIND_COMPLETED.into(), yes());
    annotations.insert(ANNOTATION_BOUND_BY_CONTROLLER.into(), yes());
    let status = claim.status.get_or_insert_with(Default::default);
    status.phase = Some("Bound".into());
    status.capacity = capacity;
    status.access_modes = access_modes;
    (volume, claim)
}

/// `volume` reserved for `claim`, as VolumeBinding's PreBind writes it (kube-scheduler's
/// `GetBindVolumeToClaim`): `claimRef` names the claim (with its uid and resourceVersion) and
/// `pv.kubernetes.io/bound-by-controller` is set.
pub fn volume_reserved_for(
    volume: &core::PersistentVolume,
    claim: &core::PersistentVolumeClaim,
) -> core::PersistentVolume {
    let mut volume = volume.clone();
    volume.spec.get_or_insert_with(Default::default).claim_ref = Some(core::ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("PersistentVolumeClaim".into()),
        namespace: Some(
            claim
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
        ),
        name: claim.metadata.name.clone(),
        uid: claim.metadata.uid.clone(),
        resource_version: claim.metadata.resource_version.clone(),
        ..Default::default()
    });
    volume
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ANNOTATION_BOUND_BY_CONTROLLER.into(), "yes".into());
    volume
}

/// `claim` with the node its volume is to be provisioned for, as VolumeBinding's PreBind writes
/// it (`volume.kubernetes.io/selected-node`).
pub fn claim_with_selected_node(
    claim: &core::PersistentVolumeClaim,
    node: &str,
) -> core::PersistentVolumeClaim {
    let mut claim = claim.clone();
    claim
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ANNOTATION_SELECTED_NODE.into(), node.to_string());
    claim
}

/// Set by Kubernetes mode's watch on the stand-in for a pod the API server holds in a shape that
/// does not decode (`field: what is wrong`): [`pod`] refuses it with that reason instead of
/// scheduling an empty pod.
pub const ANNOTATION_UNDECODABLE: &str = "scheduling.wasched.io/undecodable";

/// A stand-in for a pod that does not decode: its metadata, scheduler name, node and phase
/// (read one by one, each where it has the right type), marked with the reason, so the pod is
/// reported as unreadable rather than ignored.
pub fn undecodable_pod(raw: &serde_json::Value, field: &str, message: &str) -> core::Pod {
    let text = |pointer: &str| {
        raw.pointer(pointer)
            .and_then(|v| v.as_str())
            .map(str::to_string)
    };
    let mut metadata = ObjectMeta {
        name: text("/metadata/name"),
        namespace: text("/metadata/namespace"),
        uid: text("/metadata/uid"),
        resource_version: text("/metadata/resourceVersion"),
        ..Default::default()
    };
    metadata.annotations = Some(
        [(
            ANNOTATION_UNDECODABLE.to_string(),
            format!("{field}: {message}"),
        )]
        .into(),
    );
    core::Pod {
        metadata,
        spec: Some(core::PodSpec {
            scheduler_name: text("/spec/schedulerName"),
            node_name: text("/spec/nodeName"),
            ..Default::default()
        }),
        status: Some(core::PodStatus {
            phase: text("/status/phase"),
            ..Default::default()
        }),
    }
}

/// Set on a claim once the PV controller finished binding it.
pub const ANNOTATION_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// Set on a PV the PV controller (or the scheduler, for a delayed claim) bound to a claim.
pub const ANNOTATION_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// Set on a claim by the scheduler: the node its volume is to be provisioned for.
pub const ANNOTATION_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";

#[cfg(test)]
mod tests {
    use super::*;

    fn pod_from_yaml(yaml: &str) -> core::Pod {
        yaml_serde::from_str(yaml).unwrap()
    }

    #[test]
    fn pod_request_takes_the_larger_of_containers_and_init_containers_plus_overhead() {
        let p = pod_from_yaml(
            r#"
metadata: {name: p}
spec:
  overhead: {cpu: 50m}
  initContainers:
  - name: init
    resources: {requests: {cpu: "2", memory: 1Gi}}
  containers:
  - name: a
    resources: {requests: {cpu: 500m, memory: 128Mi}}
  - name: b
    resources: {requests: {cpu: 700m, memory: 2Gi, example.com/gpu: "1"}}
"#,
        );
        let model = pod(&p).unwrap();
        assert_eq!(
            model.requests.milli_cpu, 2050,
            "init container dominates cpu"
        );
        assert_eq!(
            model.requests.memory,
            128 * 1024 * 1024 + 2 * 1024 * 1024 * 1024
        );
        assert_eq!(model.requests.scalar("example.com/gpu"), Some(1));
    }

    #[test]
    fn taints_and_resource_names_the_api_server_refuses_are_refused_naming_the_field() {
        let node = |taint: &str, resource: &str| -> core::Node {
            yaml_serde::from_str(&format!(
                "metadata: {{name: n}}\nspec: {{taints: [{taint}]}}\nstatus: {{allocatable: {{cpu: '4', '{resource}': '1'}}}}\n"
            ))
            .unwrap()
        };
        let fine = "{key: dedicated, value: gpu, effect: NoSchedule}";
        assert!(node_info(&node(fine, "example.com/gpu")).is_ok());
        let cases = [
            (
                "a taint value with a space",
                node(
                    "{key: dedicated, value: 'not ok', effect: NoSchedule}",
                    "example.com/gpu",
                ),
                "spec.taints[0].value: Invalid value: \"not ok\"",
            ),
            (
                "a taint value over 63 characters",
                node(
                    &format!("{{key: k, value: {}, effect: NoSchedule}}", "v".repeat(64)),
                    "example.com/gpu",
                ),
                "spec.taints[0].value: Invalid value",
            ),
            (
                "a taint key with a bad prefix",
                node(
                    "{key: 'Bad_Prefix/k', effect: NoSchedule}",
                    "example.com/gpu",
                ),
                "spec.taints[0].key: Invalid value",
            ),
            (
                "an effect kube does not know",
                node("{key: k, effect: Sometimes}", "example.com/gpu"),
                "spec.taints[0].effect: Unsupported value: \"Sometimes\"",
            ),
            (
                "an extended resource name with <",
                node(fine, "example.com/<gpu>"),
                "status.allocatable[example.com/<gpu>]: Invalid value",
            ),
        ];
        for (name, node, expected) in cases {
            let error = node_info(&node).expect_err(name).to_string();
            assert!(error.starts_with(expected), "{name}: {error}");
        }
        let p = pod_from_yaml(
            "metadata: {name: p}\nspec: {containers: [{name: a, resources: {requests: {'a<b': '1'}}}]}\n",
        );
        assert!(pod(&p)
            .unwrap_err()
            .to_string()
            .contains("[a<b]: Invalid value"));
    }

    #[test]
    fn sidecars_add_to_the_containers_and_to_later_init_containers() {
        let p = pod_from_yaml(
            r#"
metadata: {name: p}
spec:
  initContainers:
  - name: sidecar
    restartPolicy: Always
    resources: {requests: {cpu: "1"}}
  - name: migrate
    resources: {requests: {cpu: "2"}}
  containers:
  - name: app
    resources: {requests: {cpu: "1"}}
"#,
        );
        // containers + sidecar = 2; migrate runs beside the sidecar = 3.
        assert_eq!(pod(&p).unwrap().requests.milli_cpu, 3000);
    }

    #[test]
    fn missing_requests_count_defaults_only_for_scoring() {
        let p = pod_from_yaml(
            r#"
metadata: {name: p}
spec:
  containers:
  - name: none
  - name: explicit-zero
    resources: {requests: {cpu: "0", memory: "0"}}
  - name: limit-only
    resources: {limits: {cpu: 300m}}
"#,
        );
        let model = pod(&p).unwrap();
        assert_eq!(
            model.requests.milli_cpu, 300,
            "a limit without request requests the limit"
        );
        assert_eq!(model.requests.memory, 0);
        assert_eq!(model.non_zero_requests.milli_cpu, 100 + 300);
        assert_eq!(model.non_zero_requests.memory, 2 * DEFAULT_MEMORY_REQUEST);
    }

    #[test]
    fn a_bad_quantity_names_the_field() {
        let p = pod_from_yaml(
            r#"
metadata: {name: p}
spec:
  containers:
  - name: a
    resources: {requests: {memory: 12XB}}
"#,
        );
        let error = pod(&p).unwrap_err();
        assert_eq!(error.field, "spec.containers[0].resources.requests.memory");
        assert!(error.message.contains("12XB"), "{error}");
    }

    #[test]
    fn a_node_without_allocatable_has_its_capacity_as_the_api_server_defaults_it() {
        let node = |yaml: &str| -> core::Node { yaml_serde::from_str(yaml).unwrap() };
        let capacity_only = node_info(&node(
            "metadata: {name: n}\nstatus: {capacity: {cpu: '4', memory: 32Gi, pods: '110'}}",
        ))
        .unwrap();
        assert_eq!(capacity_only.allocatable.milli_cpu, 4000);
        assert_eq!(capacity_only.allocatable.memory, 32 << 30);
        assert_eq!(capacity_only.allocatable.pods, 110);
        let both = node_info(&node(
            "metadata: {name: n}\nstatus: {capacity: {cpu: '4'}, allocatable: {cpu: 3500m}}",
        ))
        .unwrap();
        assert_eq!(
            both.allocatable.milli_cpu, 3500,
            "allocatable wins when present"
        );
        let error =
            node_info(&node("metadata: {name: n}\nstatus: {capacity: {cpu: -1}}")).unwrap_err();
        assert_eq!(error.field, "status.capacity.cpu");
    }

    #[test]
    fn negative_or_overflowing_requests_and_allocatable_are_refused_with_their_field() {
        let requesting = |quantity: &str| {
            pod(&pod_from_yaml(&format!(
                "metadata: {{name: p}}\nspec:\n  containers:\n  - name: a\n    resources: {{requests: {{cpu: '{quantity}'}}}}\n"
            )))
        };
        for quantity in ["-1", "-500m", "1e17", "9223372036854775808"] {
            let error = requesting(quantity).expect_err(quantity);
            assert_eq!(
                error.field, "spec.containers[0].resources.requests.cpu",
                "{quantity}"
            );
        }
        assert!(requesting("-1")
            .unwrap_err()
            .message
            .ends_with("must be greater than or equal to 0"));
        assert_eq!(
            requesting("9223372036854775").unwrap().requests.milli_cpu,
            9_223_372_036_854_775_000
        );
        let node: core::Node =
            yaml_serde::from_str("metadata: {name: n}\nstatus: {allocatable: {memory: 100Ei}}")
                .unwrap();
        assert_eq!(
            node_info(&node).unwrap_err().field,
            "status.allocatable.memory"
        );
    }
}
