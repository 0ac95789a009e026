//! VolumeBinding: a pod's PersistentVolumeClaims must be usable from the node. Bound claims need
//! their volume's node affinity to hold; claims that wait for their first consumer need, on that
//! node, an available volume to bind or a class that can provision one there.
//!
//! The plugin keeps the cluster's PersistentVolumes in its mirror, so a pod's cycle sends only its
//! claims. Its Reserve runs the filter's matching again for the chosen node and hands the host
//! the volumes it found there, which the host binds before the pod (kube-scheduler's PreBind), so
//! the filter and the binding never disagree.

#![warn(missing_docs)]

use std::collections::HashMap;

use wasched_sdk::helpers::selector_matches;
use wasched_sdk::node_selector::{parse_term, Term};
pub use wasched_sdk::PodVolumes;
use wasched_sdk::{
    ClaimInfo, Failure, FilterPlan, FilterPlugin, NodeInfo, NodeSelectorTerm, Nodes, Plugin, Pod,
    PodParts, PodPlan, Reservation, StorageCapacity, Verdict, VolumeInfo,
};

/// The name used in configs and messages.
pub const NAME: &str = "VolumeBinding";
/// A bound claim's volume cannot be used from the node.
pub const REASON_NODE_CONFLICT: &str = "node(s) didn't match PersistentVolume's node affinity";
/// A waiting claim finds no volume to bind and cannot be provisioned for the node.
pub const REASON_BIND_CONFLICT: &str = "node(s) didn't find available persistent volumes to bind";
/// A bound claim's volume does not exist.
pub const REASON_PV_NOT_EXIST: &str =
    "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";
/// A claim to provision whose driver reports no room for it on the node (CSIStorageCapacity).
pub const REASON_NOT_ENOUGH_SPACE: &str = "node(s) did not have enough free storage";
/// A claim that should have been bound by the PV controller already.
pub const REASON_UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";

const HOSTNAME: &str = "kubernetes.io/hostname";
/// A class whose volumes are only ever created by an administrator.
const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";

/// A volume's required node affinity, ready to check nodes against.
#[derive(Debug)]
enum Affinity {
    /// No required node affinity: every node.
    Any,
    /// Every node whose `kubernetes.io/hostname` label is one of these (the usual local volume).
    Hosts(Vec<String>),
    /// Terms, any of which must hold; `None` for a term that never holds.
    Terms(Vec<Option<Term>>),
}

impl Affinity {
    fn of(terms: Option<&Vec<NodeSelectorTerm>>) -> Self {
        let Some(terms) = terms else {
            return Affinity::Any;
        };
        if let [term] = terms.as_slice() {
            if let ([r], []) = (
                term.match_expressions.as_slice(),
                term.match_fields.as_slice(),
            ) {
                if r.key == HOSTNAME && r.operator == "In" {
                    return Affinity::Hosts(r.values.clone());
                }
            }
        }
        Affinity::Terms(terms.iter().map(volume_term).collect())
    }

    fn matches(&self, node: &NodeInfo) -> bool {
        match self {
            Affinity::Any => true,
            Affinity::Hosts(hosts) => node
                .labels
                .get(HOSTNAME)
                .is_some_and(|h| hosts.iter().any(|x| x == h)),
            Affinity::Terms(terms) => terms.iter().flatten().any(|t| t.matches(node)),
        }
    }
}

/// A volume's node selector term as kube-scheduler checks it: against a node made of the labels
/// only, so field requirements see an empty name. An empty term holds for no node.
fn volume_term(term: &NodeSelectorTerm) -> Option<Term> {
    if term.match_expressions.is_empty() && term.match_fields.is_empty() {
        return None;
    }
    let fields_hold = term.match_fields.iter().all(|r| match r.operator.as_str() {
        "In" => r.values.iter().any(String::is_empty),
        "NotIn" => !r.values.iter().any(String::is_empty),
        _ => false,
    });
    if !fields_hold {
        return None;
    }
    parse_term(&NodeSelectorTerm {
        match_expressions: term.match_expressions.clone(),
        match_fields: Vec::new(),
    })
    .ok()
}

/// A class's `allowedTopologies`: empty allows every node, else some term whose every
/// requirement holds (an empty term holds for none).
fn topology_allows(terms: &[NodeSelectorTerm], node: &NodeInfo) -> bool {
    terms.is_empty()
        || terms.iter().any(|t| {
            !t.match_expressions.is_empty()
                && t.match_expressions.iter().all(|r| {
                    node.labels
                        .get(&r.key)
                        .is_some_and(|v| r.values.iter().any(|x| x == v))
                })
        })
}

/// A bound claim: its volume's affinity, or `None` when the volume does not exist.
#[derive(Debug)]
struct BoundClaim {
    volume: Option<Affinity>,
}

/// A volume a waiting claim could bind to, with what does not depend on the node checked.
#[derive(Debug)]
struct Candidate {
    name: String,
    capacity: i64,
    affinity: Affinity,
}

/// A claim waiting for its first consumer.
#[derive(Debug)]
struct WaitingClaim {
    name: String,
    requested: i64,
    selected_node: Option<String>,
    /// Volumes pre-bound to this claim (`claimRef`), in order: the first decides.
    prebound: Vec<Candidate>,
    /// Available volumes it could bind to, in order.
    available: Vec<Candidate>,
    /// Positions in `available` by the one host a volume is pinned to.
    by_host: HashMap<String, Vec<usize>>,
    /// Positions in `available` of the volumes not pinned to one host.
    elsewhere: Vec<usize>,
    /// The class has a provisioner.
    provisionable: bool,
    allowed_topologies: Vec<NodeSelectorTerm>,
    /// The CSIStorageCapacities of the claim's class, when its driver reports capacity and the
    /// claim requests storage: one with room for it must be for the node.
    capacities: Option<Vec<StorageCapacity>>,
}

/// Whether a claim can be provisioned for a node (kube-scheduler's `checkVolumeProvisions`).
#[derive(Debug, PartialEq, Eq)]
enum Provision {
    Possible,
    /// No provisioner, or the class's topologies leave the node out.
    Impossible,
    /// The driver reports no room for it there.
    NoSpace,
}

impl WaitingClaim {
    fn new<'a>(
        namespace: &str,
        name: &str,
        claim: &ClaimInfo,
        volumes: impl IntoIterator<Item = &'a VolumeInfo>,
    ) -> Self {
        let class = claim.storage_class.as_ref();
        let mut waiting = WaitingClaim {
            name: name.to_string(),
            requested: claim.requested_storage,
            selected_node: claim.selected_node.clone(),
            prebound: Vec::new(),
            available: Vec::new(),
            by_host: HashMap::new(),
            elsewhere: Vec::new(),
            provisionable: class
                .is_some_and(|c| !c.provisioner.is_empty() && c.provisioner != NO_PROVISIONER),
            allowed_topologies: class
                .map(|c| c.allowed_topologies.clone())
                .unwrap_or_default(),
            capacities: None,
        };
        for volume in volumes {
            let for_claim = volume.claim_ref.as_ref().map(|r| {
                r.namespace == namespace
                    && r.name == name
                    && (r.uid.is_empty() || r.uid == claim.uid)
            });
            if for_claim == Some(false) || !usable_by(volume, claim) {
                continue;
            }
            let candidate = Candidate {
                name: volume.name.clone(),
                capacity: volume.capacity,
                affinity: Affinity::of(volume.node_affinity.as_ref()),
            };
            if for_claim == Some(true) {
                waiting.prebound.push(candidate);
            } else if bindable(volume, claim) {
                let position = waiting.available.len();
                match &candidate.affinity {
                    Affinity::Hosts(hosts) => {
                        for host in hosts {
                            waiting
                                .by_host
                                .entry(host.clone())
                                .or_default()
                                .push(position);
                        }
                    }
                    _ => waiting.elsewhere.push(position),
                }
                waiting.available.push(candidate);
            }
        }
        waiting
    }

    /// kube-scheduler's `FindMatchingVolume` on `node`, leaving out the volumes in `taken`: a
    /// volume pre-bound to the claim decides alone; otherwise the smallest available volume usable
    /// from the node, the first of equals.
    fn matching_volume(&self, node: &NodeInfo, taken: &[&str]) -> Option<&str> {
        let free = |c: &&Candidate| !taken.contains(&c.name.as_str());
        if let Some(prebound) = self.prebound.iter().find(free) {
            return prebound
                .affinity
                .matches(node)
                .then_some(prebound.name.as_str());
        }
        let pinned = node
            .labels
            .get(HOSTNAME)
            .and_then(|h| self.by_host.get(h))
            .map(Vec::as_slice)
            .unwrap_or_default();
        let mut best: Option<usize> = None;
        for &i in pinned.iter().chain(&self.elsewhere) {
            let candidate = &self.available[i];
            if !free(&candidate) || !candidate.affinity.matches(node) {
                continue;
            }
            let better = best.is_none_or(|b| {
                let current = &self.available[b];
                (candidate.capacity, i) < (current.capacity, b)
            });
            if better {
                best = Some(i);
            }
        }
        best.map(|i| self.available[i].name.as_str())
    }

    fn provision_on(&self, node: &NodeInfo) -> Provision {
        if !self.provisionable || !topology_allows(&self.allowed_topologies, node) {
            return Provision::Impossible;
        }
        let Some(capacities) = &self.capacities else {
            return Provision::Possible;
        };
        let has_room = capacities.iter().any(|c| {
            c.limit.is_some_and(|limit| limit >= self.requested)
                && c.node_topology
                    .as_ref()
                    .is_some_and(|topology| selector_matches(topology, &node.labels))
        });
        if has_room {
            Provision::Possible
        } else {
            Provision::NoSpace
        }
    }
}

/// The CSIStorageCapacities a claim to provision must find room in on a node
/// (kube-scheduler's `hasEnoughCapacity`): none to check when the claim requests no storage or
/// its driver does not report capacity. The host sends them with the pod's `volumes` part.
fn tracked_capacities(pod: &Pod, name: &str, claim: &ClaimInfo) -> Option<Vec<StorageCapacity>> {
    if claim.requested_storage == 0 {
        return None;
    }
    let volume = pod.volumes.iter().find(|v| v.claim_name == name)?;
    volume.capacity_tracked.then(|| volume.capacities.clone())
}

/// The checks of `FindMatchingVolume` that come before it looks at the claim reference.
fn usable_by(volume: &VolumeInfo, claim: &ClaimInfo) -> bool {
    volume.capacity >= claim.requested_storage
        && volume.volume_mode == claim.volume_mode
        && volume.volume_attributes_class_name == claim.volume_attributes_class_name
        && !volume.deleting
}

/// The checks of `FindMatchingVolume` for a volume not pre-bound to the claim, but its node
/// affinity.
fn bindable(volume: &VolumeInfo, claim: &ClaimInfo) -> bool {
    volume.claim_ref.is_none()
        && volume.phase == "Available"
        && claim
            .selector
            .as_ref()
            .is_none_or(|s| selector_matches(s, &volume.labels))
        && claim
            .access_modes
            .iter()
            .all(|mode| volume.access_modes.contains(mode))
}

/// The pod's claims in kube-scheduler's groups (its PreFilter).
#[derive(Debug, Default)]
struct Claims {
    bound: Vec<BoundClaim>,
    /// Smallest request first (a stable sort, so equal requests keep the pod's order).
    waiting: Vec<WaitingClaim>,
}

impl Claims {
    /// `None` when the pod has no claims (the plugin skips it).
    fn of<'a>(
        pod: &Pod,
        class_volumes: &dyn Fn(&str) -> Vec<&'a VolumeInfo>,
    ) -> Result<Option<Self>, Failure> {
        if pod.volume_claims.is_empty() {
            return Ok(None);
        }
        let mut found = Vec::with_capacity(pod.volume_claims.len());
        for volume in &pod.volume_claims {
            let name = &volume.claim_name;
            let Some(claim) = &volume.claim else {
                return Err(Failure::unresolvable(if volume.ephemeral {
                    format!(
                        "waiting for ephemeral volume controller to create the persistentvolumeclaim \"{name}\""
                    )
                } else {
                    format!("persistentvolumeclaim \"{name}\" not found")
                }));
            };
            if claim.phase == "Lost" {
                return Err(Failure::unresolvable(format!(
                    "persistentvolumeclaim \"{name}\" bound to non-existent persistentvolume \"{}\"",
                    claim.volume_name
                )));
            }
            if claim.deleting {
                return Err(Failure::unresolvable(format!(
                    "persistentvolumeclaim \"{name}\" is being deleted"
                )));
            }
            found.push((name, claim));
        }
        let mut claims = Claims::default();
        let mut immediate = false;
        for (name, claim) in found {
            if claim.is_fully_bound() {
                claims.bound.push(BoundClaim {
                    volume: claim
                        .volume
                        .as_ref()
                        .map(|v| Affinity::of(v.node_affinity.as_ref())),
                });
                continue;
            }
            if let Some(class) = &claim.storage_class {
                if class.volume_binding_mode.is_none() {
                    return Err(Failure::error(format!(
                        "VolumeBindingMode not set for StorageClass \"{}\"",
                        class.name
                    )));
                }
            }
            if claim.waits_for_first_consumer() {
                let offered = if claim.selected_node.is_some() {
                    Vec::new()
                } else {
                    class_volumes(&claim.storage_class_name)
                };
                let mut waiting = WaitingClaim::new(&pod.namespace, name, claim, offered);
                waiting.capacities = tracked_capacities(pod, name, claim);
                claims.waiting.push(waiting);
            } else {
                immediate = true;
            }
        }
        if immediate {
            return Err(Failure::unresolvable(REASON_UNBOUND_IMMEDIATE));
        }
        claims.waiting.sort_by_key(|c| c.requested);
        Ok(Some(claims))
    }

    /// No claim waits and every bound volume exists and can be used from any node.
    fn fit_everywhere(&self) -> bool {
        self.waiting.is_empty()
            && self
                .bound
                .iter()
                .all(|c| matches!(c.volume, Some(Affinity::Any)))
    }

    /// kube-scheduler's `FindPodVolumes`: the volumes for `node`, or the node's reasons.
    fn find(&self, node: &NodeInfo) -> Result<PodVolumes, Vec<&'static str>> {
        let mut node_conflict = false;
        let mut missing_volume = false;
        for claim in &self.bound {
            match &claim.volume {
                None => {
                    missing_volume = true;
                    break;
                }
                Some(affinity) if !affinity.matches(node) => {
                    node_conflict = true;
                    break;
                }
                Some(_) => {}
            }
        }
        let mut volumes = PodVolumes::default();
        let provision = if self.waiting.is_empty() {
            Provision::Possible
        } else {
            self.bind_waiting(node, &mut volumes)
        };
        let reasons: Vec<&'static str> = [
            (node_conflict, REASON_NODE_CONFLICT),
            (provision == Provision::Impossible, REASON_BIND_CONFLICT),
            (provision == Provision::NoSpace, REASON_NOT_ENOUGH_SPACE),
            (missing_volume, REASON_PV_NOT_EXIST),
        ]
        .into_iter()
        .filter_map(|(failed, reason)| failed.then_some(reason))
        .collect();
        if reasons.is_empty() {
            Ok(volumes)
        } else {
            Err(reasons)
        }
    }

    /// Finds a volume or provisioning for every waiting claim on `node`; what stops it if
    /// something does.
    fn bind_waiting(&self, node: &NodeInfo, volumes: &mut PodVolumes) -> Provision {
        if self
            .waiting
            .iter()
            .any(|c| c.selected_node.as_ref().is_some_and(|n| *n != node.name))
        {
            return Provision::Impossible;
        }
        let mut to_provision: Vec<&WaitingClaim> = self
            .waiting
            .iter()
            .filter(|c| c.selected_node.is_some())
            .collect();
        let mut taken: Vec<&str> = Vec::new();
        for claim in self.waiting.iter().filter(|c| c.selected_node.is_none()) {
            match claim.matching_volume(node, &taken) {
                Some(volume) => {
                    taken.push(volume);
                    volumes
                        .static_bindings
                        .push((claim.name.clone(), volume.to_string()));
                }
                None => to_provision.push(claim),
            }
        }
        // The first claim that cannot be provisioned decides, as kube-scheduler returns there.
        let stopped = to_provision
            .iter()
            .map(|c| c.provision_on(node))
            .find(|p| *p != Provision::Possible);
        if let Some(stopped) = stopped {
            return stopped;
        }
        volumes.provisions = to_provision.iter().map(|c| c.name.clone()).collect();
        Provision::Possible
    }
}

/// The plugin; holds the current pod's claims.
#[derive(Default)]
pub struct VolumeBinding {
    claims: Claims,
}

impl Plugin for VolumeBinding {
    const NAME: &'static str = NAME;
    const READS_POD: PodParts = PodParts::VOLUME_CLAIMS
        .union(PodParts::IDENTITY)
        .union(PodParts::VOLUMES);
    const READS_VOLUMES: bool = true;
    const RESERVE: bool = true;
    const IDLE_WITHOUT: PodParts = PodParts::VOLUME_CLAIMS;

    fn new(_config: &str) -> Result<Self, String> {
        Ok(Self::default())
    }

    /// kube-scheduler's Reserve (`AssumePodVolumes` of what `FindPodVolumes` found): the
    /// volumes of the claims prepared for this pod, on the chosen node.
    fn reserve(&mut self, _pod: &Pod, node: &NodeInfo) -> Result<Reservation, Failure> {
        let volumes = self.claims.find(node).map_err(Failure::from_reasons)?;
        Ok(Reservation {
            volumes,
            claims: Vec::new(),
        })
    }

    fn prepare(&mut self, pod: &Pod, nodes: &Nodes) -> PodPlan {
        self.claims = Claims::default();
        let filter = match Claims::of(pod, &|class| nodes.class_volumes(class).collect()) {
            Err(failure) => FilterPlan::Reject(failure),
            Ok(None) => FilterPlan::Skip,
            // Every claim bound to a volume any node can use: every node passes.
            Ok(Some(claims)) if claims.fit_everywhere() => FilterPlan::Skip,
            Ok(Some(claims)) => {
                self.claims = claims;
                FilterPlan::Run
            }
        };
        PodPlan {
            filter,
            score: false,
        }
    }
}

impl FilterPlugin for VolumeBinding {
    fn filter(&self, _pod: &Pod, node: &NodeInfo) -> Verdict {
        self.claims
            .find(node)
            .map(drop)
            .map_err(Failure::from_reasons)
    }
}

wasched_sdk::export_plugin!(VolumeBinding: filter);

trait FromReasons {
    fn from_reasons(reasons: Vec<&'static str>) -> Self;
}

impl FromReasons for Failure {
    /// Every reason VolumeBinding's filter gives is UnschedulableAndUnresolvable.
    fn from_reasons(reasons: Vec<&'static str>) -> Self {
        Failure {
            code: wasched_sdk::Code::UnschedulableAndUnresolvable,
            reasons: reasons.into_iter().map(Into::into).collect(),
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod cases;
#[cfg(not(target_arch = "wasm32"))]
pub use cases::cases;
