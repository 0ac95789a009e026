//! Dynamic Resource Allocation's objects (`resource.k8s.io/v1`) as the cache keeps them: a pod's
//! `spec.resourceClaims`, ResourceSlices, ResourceClaims and DeviceClasses.

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::resource::v1 as resource;
use wasched_sdk as sdk;

use super::term;

/// A pod's `spec.resourceClaims`, each with the claim it names: its `resourceClaimName`, or for a
/// template the claim `status.resourceClaimStatuses` records (empty until kube's controller has
/// created it). The cache fills in the rest when the pod is scheduled.
pub fn pod_claims(pod: &core::Pod) -> Vec<sdk::PodClaim> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_ref());
    spec.resource_claims
        .iter()
        .flatten()
        .map(|entry| {
            let from_template =
                entry.resource_claim_name.is_none() && entry.resource_claim_template_name.is_some();
            let claim_name = if from_template {
                statuses
                    .into_iter()
                    .flatten()
                    .find(|s| s.name == entry.name)
                    .and_then(|s| s.resource_claim_name.clone())
                    .unwrap_or_default()
            } else {
                entry.resource_claim_name.clone().unwrap_or_default()
            };
            sdk::PodClaim {
                name: entry.name.clone(),
                claim_name,
                from_template,
                ..sdk::PodClaim::default()
            }
        })
        .collect()
}

/// A ResourceSlice as the cache keeps it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Slice {
    /// `spec.driver`.
    pub driver: String,
    /// `spec.pool.name`.
    pub pool: String,
    /// `spec.pool.generation`.
    pub generation: i64,
    /// `spec.pool.resourceSliceCount`.
    pub slice_count: i64,
    /// `spec.nodeName`: the one node it serves.
    pub node_name: Option<String>,
    /// `spec.nodeSelector`: the nodes it serves.
    pub node_selector: Option<Vec<sdk::NodeSelectorTerm>>,
    /// `spec.allNodes`.
    pub all_nodes: bool,
    /// `spec.devices`, none allocated.
    pub devices: Vec<sdk::Device>,
}

/// A ResourceSlice's spec.
pub fn resource_slice(slice: &resource::ResourceSlice) -> Slice {
    let spec = &slice.spec;
    Slice {
        driver: spec.driver.clone(),
        pool: spec.pool.name.clone(),
        generation: spec.pool.generation,
        slice_count: spec.pool.resource_slice_count,
        node_name: spec.node_name.clone().filter(|n| !n.is_empty()),
        node_selector: spec
            .node_selector
            .as_ref()
            .map(|s| s.node_selector_terms.iter().map(term).collect()),
        all_nodes: spec.all_nodes.unwrap_or(false),
        devices: spec.devices.iter().flatten().map(device).collect(),
    }
}

fn device(device: &resource::Device) -> sdk::Device {
    sdk::Device {
        name: device.name.clone(),
        attributes: device
            .attributes
            .iter()
            .flatten()
            .filter_map(|(name, value)| Some((name.clone(), attribute_value(value)?)))
            .collect(),
        capacity: device
            .capacity
            .iter()
            .flatten()
            .map(|(name, capacity)| (name.clone(), capacity.value.0.clone()))
            .collect(),
        allocated: false,
    }
}

fn attribute_value(value: &resource::DeviceAttribute) -> Option<sdk::AttributeValue> {
    Some(if let Some(v) = value.int {
        sdk::AttributeValue::Int(v)
    } else if let Some(v) = value.bool {
        sdk::AttributeValue::Bool(v)
    } else if let Some(v) = &value.string {
        sdk::AttributeValue::String(v.clone())
    } else {
        sdk::AttributeValue::Version(value.version.clone()?)
    })
}

/// A DeviceClass's CEL selectors, in order.
pub fn device_class_selectors(class: &resource::DeviceClass) -> Vec<String> {
    cel_selectors(class.spec.selectors.as_deref())
}

fn cel_selectors(selectors: Option<&[resource::DeviceSelector]>) -> Vec<String> {
    selectors
        .into_iter()
        .flatten()
        .map(|s| {
            s.cel
                .as_ref()
                .map(|c| c.expression.clone())
                .unwrap_or_default()
        })
        .collect()
}

/// A ResourceClaim as the cache keeps it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Claim {
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// The uid of its controlling owner (a pod, for a template's claim).
    pub owner_uid: Option<String>,
    /// `spec.devices.requests`, their classes not looked up.
    pub requests: Vec<sdk::DeviceRequest>,
    /// `spec.devices.constraints`.
    pub constraints: Vec<sdk::DeviceConstraint>,
    /// `status.allocation`.
    pub allocation: Option<Allocation>,
    /// The uids in `status.reservedFor`.
    pub reserved_for: Vec<String>,
}

/// A claim's `status.allocation`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Allocation {
    /// `devices.results`.
    pub devices: Vec<sdk::DeviceResult>,
    /// `nodeSelector`: none when the devices can be reached from every node.
    pub node_selector: Option<Vec<sdk::NodeSelectorTerm>>,
}

/// A ResourceClaim.
pub fn resource_claim(claim: &resource::ResourceClaim) -> Claim {
    let meta = &claim.metadata;
    let devices = claim.spec.devices.as_ref();
    let status = claim.status.as_ref();
    Claim {
        uid: meta.uid.clone().unwrap_or_default(),
        deleting: meta.deletion_timestamp.is_some(),
        owner_uid: meta
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .map(|o| o.uid.clone()),
        requests: devices
            .and_then(|d| d.requests.as_ref())
            .into_iter()
            .flatten()
            .map(device_request)
            .collect(),
        constraints: devices
            .and_then(|d| d.constraints.as_ref())
            .into_iter()
            .flatten()
            .map(|c| sdk::DeviceConstraint {
                requests: c.requests.clone().unwrap_or_default(),
                match_attribute: c.match_attribute.clone().unwrap_or_default(),
            })
            .collect(),
        allocation: status.and_then(|s| s.allocation.as_ref()).map(allocation),
        reserved_for: status
            .and_then(|s| s.reserved_for.as_ref())
            .into_iter()
            .flatten()
            .map(|r| r.uid.clone())
            .collect(),
    }
}

fn device_request(request: &resource::DeviceRequest) -> sdk::DeviceRequest {
    let exactly = request.exactly.as_ref();
    sdk::DeviceRequest {
        name: request.name.clone(),
        class_name: exactly
            .map(|e| e.device_class_name.clone())
            .unwrap_or_default(),
        selectors: cel_selectors(exactly.and_then(|e| e.selectors.as_deref())),
        mode: mode(
            exactly.and_then(|e| e.allocation_mode.as_deref()),
            exactly.and_then(|e| e.count),
        ),
        admin_access: exactly.and_then(|e| e.admin_access).unwrap_or(false),
        first_available: request
            .first_available
            .iter()
            .flatten()
            .map(|sub| sdk::DeviceRequest {
                name: sub.name.clone(),
                class_name: sub.device_class_name.clone(),
                selectors: cel_selectors(sub.selectors.as_deref()),
                mode: mode(sub.allocation_mode.as_deref(), sub.count),
                ..sdk::DeviceRequest::default()
            })
            .collect(),
        ..sdk::DeviceRequest::default()
    }
}

fn mode(allocation_mode: Option<&str>, count: Option<i64>) -> sdk::AllocationMode {
    match allocation_mode {
        Some("All") => sdk::AllocationMode::All,
        _ => sdk::AllocationMode::ExactCount(count.unwrap_or(1).clamp(0, u32::MAX.into()) as u32),
    }
}

fn allocation(allocation: &resource::AllocationResult) -> Allocation {
    Allocation {
        devices: allocation
            .devices
            .as_ref()
            .and_then(|d| d.results.as_ref())
            .into_iter()
            .flatten()
            .map(|r| sdk::DeviceResult {
                request: r.request.clone(),
                driver: r.driver.clone(),
                pool: r.pool.clone(),
                device: r.device.clone(),
                admin_access: r.admin_access.unwrap_or(false),
            })
            .collect(),
        node_selector: allocation
            .node_selector
            .as_ref()
            .map(|s| s.node_selector_terms.iter().map(term).collect()),
    }
}

/// `claim` as DynamicResources' PreBind writes it for `write`: its allocation (with kube's
/// finalizer, which keeps an allocated claim from going away under a pod), and the pod named
/// `pod_name` in `reservedFor`.
pub fn reserved_claim(
    claim: &resource::ResourceClaim,
    write: &crate::result::ClaimWrite,
    pod_name: &str,
) -> resource::ResourceClaim {
    let mut claim = claim.clone();
    if write.allocation.is_some() {
        let finalizers = claim.metadata.finalizers.get_or_insert_with(Vec::new);
        if !finalizers.iter().any(|f| f == FINALIZER) {
            finalizers.push(FINALIZER.to_string());
        }
    }
    let status = claim.status.get_or_insert_with(Default::default);
    if let Some(allocation) = &write.allocation {
        status.allocation = Some(allocation_result(allocation));
    }
    let reserved = status.reserved_for.get_or_insert_with(Vec::new);
    if !reserved.iter().any(|r| r.uid == write.pod_uid) {
        reserved.push(resource::ResourceClaimConsumerReference {
            api_group: None,
            resource: "pods".into(),
            name: pod_name.to_string(),
            uid: write.pod_uid.clone(),
        });
    }
    claim
}

/// `claim` with what [`reserved_claim`] wrote for `write` taken back (a binding failed after
/// it): the pod out of `reservedFor`, and the allocation it made, when no other pod uses it.
pub fn unreserved_claim(
    claim: &resource::ResourceClaim,
    write: &crate::result::ClaimWrite,
) -> resource::ResourceClaim {
    let mut claim = claim.clone();
    let status = claim.status.get_or_insert_with(Default::default);
    if let Some(reserved) = status.reserved_for.as_mut() {
        reserved.retain(|r| r.uid != write.pod_uid);
    }
    let unused = status.reserved_for.as_ref().is_none_or(Vec::is_empty);
    if unused {
        status.reserved_for = None;
    }
    if write.allocation.is_some() && unused {
        status.allocation = None;
        if let Some(finalizers) = claim.metadata.finalizers.as_mut() {
            finalizers.retain(|f| f != FINALIZER);
        }
    }
    claim
}

/// kube's finalizer on allocated claims (`resource.kubernetes.io/delete-protection`).
pub const FINALIZER: &str = "resource.kubernetes.io/delete-protection";

/// The `status.allocation` Kubernetes stores for `allocation`.
pub fn allocation_result(allocation: &Allocation) -> resource::AllocationResult {
    resource::AllocationResult {
        devices: Some(resource::DeviceAllocationResult {
            results: Some(
                allocation
                    .devices
                    .iter()
                    .map(|d| resource::DeviceRequestAllocationResult {
                        request: d.request.clone(),
                        driver: d.driver.clone(),
                        pool: d.pool.clone(),
                        device: d.device.clone(),
                        admin_access: d.admin_access.then_some(true),
                        ..Default::default()
                    })
                    .collect(),
            ),
            config: None,
        }),
        node_selector: allocation
            .node_selector
            .as_ref()
            .map(|terms| core::NodeSelector {
                node_selector_terms: terms.iter().map(core_term).collect(),
            }),
        allocation_timestamp: None,
    }
}

fn core_term(term: &sdk::NodeSelectorTerm) -> core::NodeSelectorTerm {
    let requirements = |list: &[sdk::NodeSelectorRequirement]| {
        (!list.is_empty()).then(|| {
            list.iter()
                .map(|r| core::NodeSelectorRequirement {
                    key: r.key.clone(),
                    operator: r.operator.clone(),
                    values: Some(r.values.clone()),
                })
                .collect()
        })
    };
    core::NodeSelectorTerm {
        match_expressions: requirements(&term.match_expressions),
        match_fields: requirements(&term.match_fields),
    }
}
