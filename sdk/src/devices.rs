//! Dynamic Resource Allocation (`resource.k8s.io/v1`) as plugins see it: the devices of the
//! ResourceSlices a node can use, and the pod's ResourceClaims with what they request. The host
//! looks the objects up (classes, claims, which devices other claims hold); a plugin that reads
//! them (kube-scheduler's DynamicResources) allocates. Sent only through the `devices` interface
//! of `wit/plugin.wit`, in the `encoded` form.

use crate::NodeSelectorTerm;

/// The value of a device attribute (`DeviceAttribute`: exactly one of its fields).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum AttributeValue {
    /// `int`.
    Int(i64),
    /// `bool`.
    Bool(bool),
    /// `string`.
    String(String),
    /// `version`: a semantic version, as the driver wrote it.
    Version(String),
}

/// A device a ResourceSlice publishes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Device {
    /// `name`, unique in its pool.
    pub name: String,
    /// `attributes`, by name as the slice writes it (a name without a domain is the driver's).
    pub attributes: Vec<(String, AttributeValue)>,
    /// `capacity`, by name as the slice writes it, each `value` as its quantity text.
    pub capacity: Vec<(String, String)>,
    /// Allocated to a claim, or set aside for one by a reservation not yet bound: only a
    /// request with admin access may take it.
    pub allocated: bool,
}

/// The devices of one resource pool that a node can use: those of the pool's slices (of its
/// newest generation) that are local to the node, select it, or serve all nodes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct DevicePool {
    /// `spec.driver` of the pool's slices.
    pub driver: String,
    /// `spec.pool.name`.
    pub name: String,
    /// Every slice of the pool's newest generation is known (`resourceSliceCount` of them). An
    /// incomplete pool's devices are not allocated, and a request for all devices fails.
    pub complete: bool,
    /// The devices, in slice order.
    pub devices: Vec<Device>,
}

/// How many devices a request asks for (`allocationMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AllocationMode {
    /// `ExactCount`: this many.
    ExactCount(u32),
    /// `All`: every matching device the node can use.
    All,
}

impl Default for AllocationMode {
    fn default() -> Self {
        AllocationMode::ExactCount(1)
    }
}

/// A request of a claim (`spec.devices.requests[]`), or one of its `firstAvailable`
/// sub-requests. The class's selectors come with it, looked up by the host.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct DeviceRequest {
    /// `name`.
    pub name: String,
    /// `deviceClassName` (of `exactly` or of the sub-request).
    pub class_name: String,
    /// The DeviceClass exists.
    pub class_found: bool,
    /// The class's `spec.selectors[].cel.expression`, in order.
    pub class_selectors: Vec<String>,
    /// The request's own `selectors[].cel.expression`, in order.
    pub selectors: Vec<String>,
    /// `allocationMode` with `count`.
    pub mode: AllocationMode,
    /// `adminAccess`.
    pub admin_access: bool,
    /// `firstAvailable`: sub-requests tried in order, one of which is allocated (empty for an
    /// `exactly` request).
    pub first_available: Vec<DeviceRequest>,
}

/// A claim constraint (`spec.devices.constraints[]`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct DeviceConstraint {
    /// `requests`: the requests it binds (empty: all of the claim's).
    pub requests: Vec<String>,
    /// `matchAttribute`: a fully qualified attribute name that must have one value across them.
    pub match_attribute: String,
}

/// An allocated claim's `status`, as a pod deciding where to go reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ClaimAllocated {
    /// `status.allocation.nodeSelector`: the nodes that can reach the devices (none: all).
    pub node_selector: Option<Vec<NodeSelectorTerm>>,
    /// `status.reservedFor` names this pod.
    pub reserved_for_pod: bool,
    /// Entries in `status.reservedFor`.
    pub reserved_count: u32,
}

/// One of a pod's `spec.resourceClaims`, with the ResourceClaim it names looked up.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct PodClaim {
    /// The entry's `name` in the pod.
    pub name: String,
    /// The ResourceClaim's name: `resourceClaimName`, or for a template the name in the pod's
    /// `status.resourceClaimStatuses`; empty while that claim is not created yet.
    pub claim_name: String,
    /// The entry names a `resourceClaimTemplateName`.
    pub from_template: bool,
    /// The claim exists.
    pub found: bool,
    /// The claim has a deletion timestamp.
    pub deleting: bool,
    /// A template's claim exists but another pod owns it.
    pub owned_by_other: bool,
    /// The claim's allocation, when it has one.
    pub allocated: Option<ClaimAllocated>,
    /// `spec.devices.requests`, in order.
    pub requests: Vec<DeviceRequest>,
    /// `spec.devices.constraints`, in order.
    pub constraints: Vec<DeviceConstraint>,
}

/// A device allocated for a request (`status.allocation.devices.results[]`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct DeviceResult {
    /// The request, `request/sub-request` for a `firstAvailable` one.
    pub request: String,
    /// The device's driver.
    pub driver: String,
    /// Its pool.
    pub pool: String,
    /// Its name.
    pub device: String,
    /// Allocated with admin access (the device may be in use by others).
    pub admin_access: bool,
}

/// What a plugin allocated for one of the pod's claims on the chosen node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ClaimAllocation {
    /// The ResourceClaim's name (in the pod's namespace).
    pub claim: String,
    /// The devices, in the order of the claim's requests.
    pub devices: Vec<DeviceResult>,
}
