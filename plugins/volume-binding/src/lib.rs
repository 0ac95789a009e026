//! VolumeBinding: a pod's PersistentVolumeClaims must be usable from the node. Bound claims need
//! their volume's node affinity to hold; claims that wait for their first consumer need, on that
//! node, an available volume to bind or a class that can provision one there.
//!
//! The plugin keeps the cluster's PersistentVolumes in its mirror, so a pod's cycle sends only its
//! claims. Its Reserve runs the filter's matching again for the chosen node and hands the host
//! the volumes it found there, which the host binds before the pod (kube-scheduler's PreBind), so
//! the filter and the binding never disagree.
//!
//! The batch filter keeps each node's answer for the last few sets of claims pods came with
//! ([`HeldAnswers`]): the pods of a StatefulSet or a Job ask alike, and between two of them only
//! the host whose volume the last one took has changed.

#![warn(missing_docs)]

use std::collections::BTreeMap;
use std::sync::Arc;

use wasched_sdk::helpers::{selector_matches, FastMap};
use wasched_sdk::node_selector::{parse_term, Term};
pub use wasched_sdk::PodVolumes;
use wasched_sdk::{
    ClaimInfo, ClaimRef, Failure, FilterPlan, FilterPlugin, FilterResults, LabelColumnId,
    LabelSelector, LabelTest, NodeId, NodeInfo, NodeSelectorTerm, Nodes, Plugin, Pod, PodParts,
    PodPlan, Reservation, StorageCapacity, StorageClassInfo, Verdict, VolumeInfo,
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
        if let Some(hosts) = pinned_hosts(terms) {
            return Affinity::Hosts(hosts.to_vec());
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

/// The hosts a volume's node affinity pins it to, when it is the usual local volume's: one term,
/// one requirement, `kubernetes.io/hostname In [...]`.
fn pinned_hosts(terms: &[NodeSelectorTerm]) -> Option<&[String]> {
    let [term] = terms else {
        return None;
    };
    let ([r], []) = (
        term.match_expressions.as_slice(),
        term.match_fields.as_slice(),
    ) else {
        return None;
    };
    (r.key == HOSTNAME && r.operator == "In").then_some(r.values.as_slice())
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

/// What [`Claims::find`] asks about a claim's class's topologies, answered from `node`'s labels.
fn by_labels(node: &NodeInfo) -> impl Fn(&WaitingClaim) -> bool + '_ {
    move |claim| {
        claim
            .claim
            .storage_class
            .as_ref()
            .is_none_or(|class| topology_allows(&class.allowed_topologies, node))
    }
}

/// [`topology_allows`] as label tests on one batch's mirror: a node is then a table lookup per
/// requirement, not a search of its labels (which at 50,000 nodes miss the cache).
enum Topology {
    /// No `allowedTopologies`: every node.
    Everywhere,
    /// The terms with requirements (an empty term holds for no node), each requirement's test.
    Terms(Vec<Vec<LabelTest>>),
}

impl Topology {
    fn compile(terms: &[NodeSelectorTerm], nodes: &Nodes) -> Self {
        if terms.is_empty() {
            return Topology::Everywhere;
        }
        Topology::Terms(
            terms
                .iter()
                .filter(|t| !t.match_expressions.is_empty())
                .map(|t| {
                    t.match_expressions
                        .iter()
                        .map(|r| {
                            nodes.label_test(&r.key, |value| {
                                value.is_some_and(|v| r.values.iter().any(|x| x == v))
                            })
                        })
                        .collect()
                })
                .collect(),
        )
    }

    fn allows(&self, nodes: &Nodes, id: NodeId) -> bool {
        match self {
            Topology::Everywhere => true,
            Topology::Terms(terms) => terms
                .iter()
                .any(|tests| tests.iter().all(|test| nodes.passes(id, test))),
        }
    }
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

impl Candidate {
    fn of(volume: &VolumeInfo) -> Self {
        Candidate {
            name: volume.name.clone(),
            capacity: volume.capacity,
            affinity: Affinity::of(volume.node_affinity.as_ref()),
        }
    }
}

/// The cluster's PersistentVolumes by storage class, as a pod's cycle looks them up. Volumes
/// pinned to hosts (local volumes) are found through the host of the node being filtered, so a
/// cycle costs what the nodes it examines hold rather than every volume of the class: walking
/// them all per pod made a 50,000-node cluster with a local volume per node 2.7x dearer per
/// examined node than a 5,000-node one.
#[derive(Debug, Default)]
struct VolumeIndex {
    classes: FastMap<String, ClassVolumes>,
    /// Every host a volume is pinned to, numbered. Hosts that no volume is pinned to any more
    /// stay until they outnumber the others ([`VolumeIndex::release_unpinned_hosts`]).
    hosts: FastMap<String, HostId>,
    /// Changes whenever `hosts` is numbered again.
    hosts_epoch: u64,
    /// Per host number, how many times a volume was pinned to it or unpinned from it: a filter
    /// answer held for a node holds while its host's count stays ([`HeldAnswers`]).
    host_changes: Vec<u32>,
    /// Per class name, how many times a volume entered or left its `elsewhere` group (kept
    /// when the class empties, so a count never goes back).
    elsewhere_changes: FastMap<String, u64>,
    /// Every [`Shape`] of a volume pinned to a host, numbered in `shape_list`'s order.
    shapes: FastMap<Shape, u32>,
    shape_list: Vec<Shape>,
}

/// What a claim asks of a volume's kind, as a pinned volume has it: its mode, attributes class
/// and access modes. Volumes share a handful of shapes, so a pod's claim is checked against each
/// shape once rather than against each volume's strings on every node.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Shape {
    volume_mode: String,
    attributes_class: Option<String>,
    access_modes: Vec<String>,
}

impl Shape {
    fn of(volume: &VolumeInfo) -> Shape {
        Shape {
            volume_mode: volume.volume_mode.clone(),
            attributes_class: volume.volume_attributes_class_name.clone(),
            access_modes: volume.access_modes.clone(),
        }
    }

    /// [`bindable`]'s checks of these fields.
    fn fits(&self, claim: &ClaimInfo) -> bool {
        self.volume_mode == claim.volume_mode
            && self.attributes_class == claim.volume_attributes_class_name
            && claim
                .access_modes
                .iter()
                .all(|mode| self.access_modes.contains(mode))
    }
}

/// An [`offered`] volume pinned to a host, with what a filter checks first kept beside its name:
/// a node's check reads this record, and the volume itself only for a claim with a selector.
#[derive(Debug)]
struct Pinned {
    name: String,
    capacity: i64,
    /// Its [`Shape`]'s number in [`VolumeIndex::shapes`].
    shape: u32,
    volume: Arc<VolumeInfo>,
}

/// A host's number in [`VolumeIndex::hosts`].
type HostId = u32;

/// The volumes of one storage class a claim may be offered; each is in one of the three groups.
#[derive(Debug, Default)]
struct ClassVolumes {
    /// Volumes with a claim reference, by the claim's namespace and name, in name order.
    claimed: FastMap<(String, String), BTreeMap<String, Arc<VolumeInfo>>>,
    /// [`offered`] volumes pinned to hosts, indexed by host number: a node's are one read away,
    /// with no hashing and, for the usual one volume, no pointer to follow.
    on_host: Vec<HostVolumes>,
    /// How many entries of `on_host` hold a volume.
    hosts_with_volumes: usize,
    /// The other [`offered`] volumes, in name order.
    elsewhere: BTreeMap<String, Arc<VolumeInfo>>,
}

impl ClassVolumes {
    fn is_empty(&self) -> bool {
        self.claimed.is_empty() && self.hosts_with_volumes == 0 && self.elsewhere.is_empty()
    }

    /// The volumes pinned to host `host`.
    fn pinned_to(&self, host: HostId) -> &[Pinned] {
        self.on_host
            .get(host as usize)
            .map_or(&[], HostVolumes::as_slice)
    }

    fn pin(&mut self, host: HostId, pinned: Pinned) {
        if self.on_host.len() <= host as usize {
            self.on_host
                .resize_with(host as usize + 1, HostVolumes::default);
        }
        let volumes = &mut self.on_host[host as usize];
        if volumes.as_slice().is_empty() {
            self.hosts_with_volumes += 1;
        }
        volumes.remove(&pinned.name);
        volumes.insert(pinned);
    }

    fn unpin(&mut self, host: HostId, name: &str) {
        if let Some(volumes) = self.on_host.get_mut(host as usize) {
            let had = !volumes.as_slice().is_empty();
            volumes.remove(name);
            if had && volumes.as_slice().is_empty() {
                self.hosts_with_volumes -= 1;
            }
        }
    }
}

/// The volumes of one class pinned to one host (in no order: a claim takes the smallest, the
/// first by name of equals).
#[derive(Debug, Default)]
enum HostVolumes {
    #[default]
    None,
    One(Pinned),
    Many(Vec<Pinned>),
}

impl HostVolumes {
    fn as_slice(&self) -> &[Pinned] {
        match self {
            HostVolumes::None => &[],
            HostVolumes::One(pinned) => std::slice::from_ref(pinned),
            HostVolumes::Many(pinned) => pinned,
        }
    }

    fn insert(&mut self, pinned: Pinned) {
        *self = match std::mem::take(self) {
            HostVolumes::None => HostVolumes::One(pinned),
            HostVolumes::One(first) => HostVolumes::Many(vec![first, pinned]),
            HostVolumes::Many(mut all) => {
                all.push(pinned);
                HostVolumes::Many(all)
            }
        };
    }

    fn remove(&mut self, name: &str) {
        *self = match std::mem::take(self) {
            HostVolumes::One(pinned) if pinned.name == name => HostVolumes::None,
            HostVolumes::Many(mut all) => {
                all.retain(|v| v.name != name);
                match all.len() {
                    0 => HostVolumes::None,
                    1 => HostVolumes::One(all.remove(0)),
                    _ => HostVolumes::Many(all),
                }
            }
            unchanged => unchanged,
        };
    }
}

/// Where a volume goes in its class's [`ClassVolumes`].
enum Group<'a> {
    Claimed(&'a ClaimRef),
    OnHosts(&'a [String]),
    Elsewhere,
    /// Not [`offered`] to any claim, and not pre-bound: kept nowhere.
    Unoffered,
}

impl Group<'_> {
    fn of(volume: &VolumeInfo) -> Group<'_> {
        if let Some(claim) = &volume.claim_ref {
            return Group::Claimed(claim);
        }
        if !offered(volume) {
            return Group::Unoffered;
        }
        match volume.node_affinity.as_deref().and_then(pinned_hosts) {
            Some(hosts) => Group::OnHosts(hosts),
            None => Group::Elsewhere,
        }
    }
}

impl VolumeIndex {
    /// How many times the volumes pinned to `host` changed (see [`VolumeIndex::host_changes`]).
    #[inline]
    fn changes_of_host(&self, host: HostId) -> u32 {
        self.host_changes.get(host as usize).copied().unwrap_or(0)
    }

    fn elsewhere_changes_of(&self, class: &str) -> u64 {
        self.elsewhere_changes.get(class).copied().unwrap_or(0)
    }

    fn add(&mut self, volume: &Arc<VolumeInfo>) {
        let class = self
            .classes
            .entry(volume.storage_class_name.clone())
            .or_default();
        let name = &volume.name;
        match Group::of(volume) {
            Group::Claimed(claim) => {
                let key = (claim.namespace.clone(), claim.name.clone());
                let volumes = class.claimed.entry(key).or_default();
                volumes.insert(name.clone(), Arc::clone(volume));
            }
            Group::OnHosts(hosts) => {
                let next = self.shape_list.len() as u32;
                let shape_list = &mut self.shape_list;
                let shape = *self
                    .shapes
                    .entry(Shape::of(volume))
                    .or_insert_with_key(|shape| {
                        shape_list.push(shape.clone());
                        next
                    });
                for host in hosts {
                    let next = self.hosts.len() as HostId;
                    let host = *self.hosts.entry(host.clone()).or_insert(next);
                    changed(&mut self.host_changes, host);
                    class.pin(
                        host,
                        Pinned {
                            name: name.clone(),
                            capacity: volume.capacity,
                            shape,
                            volume: Arc::clone(volume),
                        },
                    );
                }
            }
            Group::Elsewhere => {
                class.elsewhere.insert(name.clone(), Arc::clone(volume));
                *self
                    .elsewhere_changes
                    .entry(volume.storage_class_name.clone())
                    .or_default() += 1;
            }
            Group::Unoffered => {}
        }
    }

    /// Lets go of the hosts no volume is pinned to any more once they outnumber those that have
    /// one, and numbers the rest again: in a cluster whose nodes come and go, each with local
    /// volumes, every hostname ever seen would otherwise stay, with an entry in each class's
    /// vector by host number.
    fn release_unpinned_hosts(&mut self) {
        let pinned: usize = self.classes.values().map(|c| c.hosts_with_volumes).sum();
        if self.hosts.len() <= 2 * pinned + 1024 {
            return;
        }
        let mut renumbered = vec![HostId::MAX; self.hosts.len()];
        let mut kept: HostId = 0;
        for class in self.classes.values() {
            for (old, volumes) in class.on_host.iter().enumerate() {
                if !volumes.as_slice().is_empty() && renumbered[old] == HostId::MAX {
                    renumbered[old] = kept;
                    kept += 1;
                }
            }
        }
        self.hosts.retain(|_, id| {
            *id = renumbered[*id as usize];
            *id != HostId::MAX
        });
        for class in self.classes.values_mut() {
            let mut on_host = Vec::new();
            on_host.resize_with(kept as usize, HostVolumes::default);
            for (old, volumes) in std::mem::take(&mut class.on_host).into_iter().enumerate() {
                if !volumes.as_slice().is_empty() {
                    on_host[renumbered[old] as usize] = volumes;
                }
            }
            class.on_host = on_host;
        }
        // Answers held by host number are all forgotten with the old numbering.
        self.host_changes = vec![0; kept as usize];
        self.hosts_epoch += 1;
    }

    /// Removes `volume`, which must be the version [`VolumeIndex::add`] was given.
    fn remove(&mut self, volume: &VolumeInfo) {
        let Some(class) = self.classes.get_mut(&volume.storage_class_name) else {
            return;
        };
        match Group::of(volume) {
            Group::Claimed(claim) => {
                let key = (claim.namespace.clone(), claim.name.clone());
                remove_named(&mut class.claimed, &key, &volume.name);
            }
            Group::OnHosts(hosts) => {
                for &host in hosts.iter().filter_map(|h| self.hosts.get(h)) {
                    changed(&mut self.host_changes, host);
                    class.unpin(host, &volume.name);
                }
            }
            Group::Elsewhere => {
                class.elsewhere.remove(&volume.name);
                if let Some(changes) = self.elsewhere_changes.get_mut(&volume.storage_class_name) {
                    *changes += 1;
                }
            }
            Group::Unoffered => {}
        }
        if class.is_empty() {
            self.classes.remove(&volume.storage_class_name);
        }
    }
}

/// Counts a change of the volumes pinned to `host`.
fn changed(host_changes: &mut Vec<u32>, host: HostId) {
    if host_changes.len() <= host as usize {
        host_changes.resize(host as usize + 1, 0);
    }
    host_changes[host as usize] = host_changes[host as usize].wrapping_add(1);
}

/// Removes the volume `name` from the group `key` of `groups`, and the group once it is empty.
fn remove_named<K, Q>(
    groups: &mut FastMap<K, BTreeMap<String, Arc<VolumeInfo>>>,
    key: &Q,
    name: &str,
) where
    K: std::borrow::Borrow<Q> + std::hash::Hash + Eq,
    Q: std::hash::Hash + Eq + ?Sized,
{
    if let Some(volumes) = groups.get_mut(key) {
        volumes.remove(name);
        if volumes.is_empty() {
            groups.remove(key);
        }
    }
}

/// A claim waiting for its first consumer.
#[derive(Debug)]
struct WaitingClaim {
    name: String,
    /// The claim, to check the volumes pinned to each filtered node's host against.
    claim: ClaimInfo,
    /// Volumes pre-bound to this claim (`claimRef`), in name order: the first decides.
    prebound: Vec<Candidate>,
    /// Available volumes not pinned to hosts it could bind to, in name order; those pinned to
    /// hosts are looked up per node in the [`VolumeIndex`].
    elsewhere: Vec<Candidate>,
    /// The CSIStorageCapacities of the claim's class, when its driver reports capacity and the
    /// claim requests storage: one with room for it must be for the node.
    capacities: Option<Vec<StorageCapacity>>,
    /// Per [`Shape`] number: whether the claim can take a volume of that shape.
    shape_fits: Vec<bool>,
    /// Its place in [`Claims::waiting`], where a batch keeps what it compiled for it.
    index: usize,
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
    /// The claim `namespace/name`, offered the volumes of `class` (none when the claim already
    /// has a selected node).
    fn new(namespace: &str, name: &str, claim: &ClaimInfo, class: Option<&ClassVolumes>) -> Self {
        let mut waiting = WaitingClaim {
            name: name.to_string(),
            claim: claim.clone(),
            prebound: Vec::new(),
            elsewhere: Vec::new(),
            capacities: None,
            shape_fits: Vec::new(),
            index: 0,
        };
        let Some(class) = class else {
            return waiting;
        };
        let key = (namespace.to_string(), name.to_string());
        for volume in class
            .claimed
            .get(&key)
            .into_iter()
            .flat_map(BTreeMap::values)
        {
            let same_claim = volume
                .claim_ref
                .as_ref()
                .is_some_and(|r| r.uid.is_empty() || r.uid == claim.uid);
            if same_claim && usable_by(volume, claim) {
                waiting.prebound.push(Candidate::of(volume));
            }
        }
        for volume in class.elsewhere.values() {
            if bindable(volume, claim) {
                waiting.elsewhere.push(Candidate::of(volume));
            }
        }
        waiting
    }

    /// kube-scheduler's `FindMatchingVolume` on `node`, leaving out the volumes `taken` by the
    /// pod's other claims (claim and volume names): a volume pre-bound to the claim decides alone;
    /// otherwise the smallest available volume usable from the node, the first by name of equals.
    fn matching_volume<'a>(
        &'a self,
        node: &NodeInfo,
        host: Option<HostId>,
        class: Option<&'a ClassVolumes>,
        taken: &[(&str, &str)],
    ) -> Option<&'a str> {
        let free = |name: &str| taken.iter().all(|&(_, volume)| volume != name);
        if let Some(prebound) = self.prebound.iter().find(|c| free(&c.name)) {
            return prebound
                .affinity
                .matches(node)
                .then_some(prebound.name.as_str());
        }
        let pinned = class
            .zip(host)
            .map_or(&[][..], |(class, host)| class.pinned_to(host))
            .iter()
            .filter(|v| self.takes(v))
            .map(|v| (v.capacity, v.name.as_str()));
        let elsewhere = self
            .elsewhere
            .iter()
            .filter(|c| c.affinity.matches(node))
            .map(|c| (c.capacity, c.name.as_str()));
        pinned
            .chain(elsewhere)
            .filter(|&(_, name)| free(name))
            .min()
            .map(|(_, name)| name)
    }

    /// [`bindable`] for a pinned volume, from its record and the claim's [`Shape`] answers
    /// (pinned volumes are [`offered`], so none is being deleted).
    fn takes(&self, pinned: &Pinned) -> bool {
        pinned.capacity >= self.claim.requested_storage
            && match self.shape_fits.get(pinned.shape as usize) {
                Some(&fits) => {
                    fits && self
                        .claim
                        .selector
                        .as_ref()
                        .is_none_or(|s| selector_matches(s, &pinned.volume.labels))
                }
                None => bindable(&pinned.volume, &self.claim),
            }
    }

    /// Whether the claim can be provisioned for `node`, whose labels the class's
    /// `allowedTopologies` take in when `allows` says so.
    fn provision_on(&self, node: &NodeInfo, allows: impl Fn(&WaitingClaim) -> bool) -> Provision {
        // A class with a provisioner whose topologies take the node in.
        let provisionable = self.claim.storage_class.as_ref().is_some_and(|c| {
            !c.provisioner.is_empty() && c.provisioner != NO_PROVISIONER && allows(self)
        });
        if !provisionable {
            return Provision::Impossible;
        }
        let Some(capacities) = &self.capacities else {
            return Provision::Possible;
        };
        let has_room = capacities.iter().any(|c| {
            c.limit
                .is_some_and(|limit| limit >= self.claim.requested_storage)
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

/// The checks of `FindMatchingVolume` for a volume not pre-bound to the claim that do not depend
/// on the claim: only such volumes are offered, and [`VolumeIndex`] keeps no other.
fn offered(volume: &VolumeInfo) -> bool {
    volume.claim_ref.is_none() && volume.phase == "Available" && !volume.deleting
}

/// The other checks of `FindMatchingVolume` for an [`offered`] volume, but its node affinity.
fn bindable(volume: &VolumeInfo, claim: &ClaimInfo) -> bool {
    usable_by(volume, claim)
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
    fn of(pod: &Pod, volumes: &VolumeIndex) -> Result<Option<Self>, Failure> {
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
                    None
                } else {
                    volumes.classes.get(&claim.storage_class_name)
                };
                let mut waiting = WaitingClaim::new(&pod.namespace, name, claim, offered);
                waiting.capacities = tracked_capacities(pod, name, claim);
                waiting.shape_fits = volumes.shape_list.iter().map(|s| s.fits(claim)).collect();
                claims.waiting.push(waiting);
            } else {
                immediate = true;
            }
        }
        if immediate {
            return Err(Failure::unresolvable(REASON_UNBOUND_IMMEDIATE));
        }
        claims.waiting.sort_by_key(|c| c.claim.requested_storage);
        for (index, claim) in claims.waiting.iter_mut().enumerate() {
            claim.index = index;
        }
        Ok(Some(claims))
    }

    /// Whether a node's verdict for these claims is the same for any pod whose claims search
    /// alike ([`ClaimSearch`]), while the node, its host's volumes and the classes' volumes pinned
    /// to no host stay: no bound volume limits the nodes, and no volume is pre-bound to a waiting
    /// claim (which names the claim).
    fn holdable(&self) -> bool {
        self.bound
            .iter()
            .all(|c| matches!(c.volume, Some(Affinity::Any)))
            && self.waiting.iter().all(|c| c.prebound.is_empty())
    }

    /// No claim waits and every bound volume exists and can be used from any node.
    fn fit_everywhere(&self) -> bool {
        self.waiting.is_empty()
            && self
                .bound
                .iter()
                .all(|c| matches!(c.volume, Some(Affinity::Any)))
    }

    /// The volumes of each waiting claim's class in `volumes`, in the order of `waiting`: looked
    /// up once for all the nodes a batch examines rather than by class name on every node.
    fn classes<'a>(&self, volumes: &'a VolumeIndex) -> Vec<Option<&'a ClassVolumes>> {
        self.waiting
            .iter()
            .map(|c| volumes.classes.get(&c.claim.storage_class_name))
            .collect()
    }

    /// Each waiting claim's class's `allowedTopologies` compiled for a batch on `nodes`, in the
    /// order of `waiting`.
    fn topologies(&self, nodes: &Nodes) -> Vec<Topology> {
        self.waiting
            .iter()
            .map(|c| {
                let terms = c
                    .claim
                    .storage_class
                    .as_ref()
                    .map(|class| &class.allowed_topologies);
                Topology::compile(terms.map_or(&[][..], Vec::as_slice), nodes)
            })
            .collect()
    }

    /// kube-scheduler's `FindPodVolumes`: the volumes for `node`, whose `kubernetes.io/hostname`
    /// is `host` (none when no volume was ever pinned to it), with `classes` from
    /// [`Claims::classes`], written into `found` (emptied first); or the node's reasons. A batch
    /// passes the same `found` for every node, so a filter allocates for the first node only.
    /// `allows` says whether a waiting claim's class's `allowedTopologies` take the node in
    /// ([`by_labels`] reads the node's labels).
    fn find<'a>(
        &'a self,
        node: &NodeInfo,
        host: Option<HostId>,
        classes: &[Option<&'a ClassVolumes>],
        allows: impl Fn(&WaitingClaim) -> bool,
        found: &mut Found<'a>,
    ) -> Result<(), Reasons> {
        found.static_bindings.clear();
        found.provisions.clear();
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
        let provision = if self.waiting.is_empty() {
            Provision::Possible
        } else {
            self.bind_waiting(node, host, classes, allows, found)
        };
        let reasons = Reasons(
            [
                node_conflict,
                provision == Provision::Impossible,
                provision == Provision::NoSpace,
                missing_volume,
            ]
            .into_iter()
            .enumerate()
            .fold(0, |mask, (bit, failed)| mask | (u8::from(failed) << bit)),
        );
        if reasons.0 == 0 {
            Ok(())
        } else {
            Err(reasons)
        }
    }

    /// Finds a volume or provisioning for every waiting claim on `node`; what stops it if
    /// something does.
    fn bind_waiting<'a>(
        &'a self,
        node: &NodeInfo,
        host: Option<HostId>,
        classes: &[Option<&'a ClassVolumes>],
        allows: impl Fn(&WaitingClaim) -> bool,
        found: &mut Found<'a>,
    ) -> Provision {
        if self.waiting.iter().any(|c| {
            c.claim
                .selected_node
                .as_ref()
                .is_some_and(|n| *n != node.name)
        }) {
            return Provision::Impossible;
        }
        found.provisions.extend(
            self.waiting
                .iter()
                .filter(|c| c.claim.selected_node.is_some()),
        );
        for (claim, &class) in self
            .waiting
            .iter()
            .zip(classes)
            .filter(|(c, _)| c.claim.selected_node.is_none())
        {
            match claim.matching_volume(node, host, class, &found.static_bindings) {
                Some(volume) => found.static_bindings.push((&claim.name, volume)),
                None => found.provisions.push(claim),
            }
        }
        // The first claim that cannot be provisioned decides, as kube-scheduler returns there.
        found
            .provisions
            .iter()
            .map(|c| c.provision_on(node, &allows))
            .find(|p| *p != Provision::Possible)
            .unwrap_or(Provision::Possible)
    }
}

/// Why a node fails, one bit per reason in the order kube-scheduler lists them
/// ([`Reasons::ORDER`]): a batch interns each combination once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Reasons(u8);

impl Reasons {
    const ORDER: [&'static str; 4] = [
        REASON_NODE_CONFLICT,
        REASON_BIND_CONFLICT,
        REASON_NOT_ENOUGH_SPACE,
        REASON_PV_NOT_EXIST,
    ];

    /// Every reason VolumeBinding's filter gives is UnschedulableAndUnresolvable.
    fn failure(self) -> Failure {
        Failure {
            code: wasched_sdk::Code::UnschedulableAndUnresolvable,
            reasons: Self::ORDER
                .iter()
                .enumerate()
                .filter(|&(bit, _)| self.0 & (1 << bit) != 0)
                .map(|(_, &reason)| reason.into())
                .collect(),
        }
    }
}

/// What [`Claims::find`] found on a node, borrowed: a filter drops it, and only Reserve copies it
/// into the [`PodVolumes`] it hands the host.
#[derive(Default)]
struct Found<'a> {
    /// (claim, volume) names, in the order they are to be bound.
    static_bindings: Vec<(&'a str, &'a str)>,
    /// The claims whose volume is to be provisioned for the node.
    provisions: Vec<&'a WaitingClaim>,
}

impl Found<'_> {
    fn owned(&self) -> PodVolumes {
        PodVolumes {
            static_bindings: self
                .static_bindings
                .iter()
                .map(|&(claim, volume)| (claim.to_string(), volume.to_string()))
                .collect(),
            provisions: self.provisions.iter().map(|c| c.name.clone()).collect(),
        }
    }
}

/// The plugin; holds the cluster's volumes and the current pod's claims.
#[derive(Default)]
pub struct VolumeBinding {
    volumes: VolumeIndex,
    claims: Claims,
    hosts: HostsByValue,
    held: HeldAnswers,
}

impl VolumeBinding {
    /// [`Claims::find`] for one node, read from the node itself (Reserve, the one-node filter).
    fn find_on<'a>(&'a self, node: &NodeInfo, found: &mut Found<'a>) -> Result<(), Reasons> {
        self.claims.find(
            node,
            host_of(node, &self.volumes),
            &self.claims.classes(&self.volumes),
            by_labels(node),
            found,
        )
    }
}

/// What a waiting claim's search on a node reads besides the node and the volumes: two claims
/// equal in these get the same answer on a node whose host's volumes and class's volumes pinned
/// to no host did not change. Names and uids are left out (a claim that volumes are pre-bound to
/// is never held), and so are the phase and deletion, which [`Claims::of`] has already decided.
#[derive(Debug)]
struct ClaimSearch {
    requested_storage: i64,
    storage_class_name: String,
    storage_class: Option<StorageClassInfo>,
    access_modes: Vec<String>,
    volume_mode: String,
    volume_attributes_class_name: Option<String>,
    selector: Option<LabelSelector>,
    selected_node: Option<String>,
    capacities: Option<Vec<StorageCapacity>>,
    shape_fits: Vec<bool>,
    /// The class's [`VolumeIndex::elsewhere_changes`] when the answers were found.
    elsewhere_changes: u64,
}

impl ClaimSearch {
    fn of(waiting: &WaitingClaim, volumes: &VolumeIndex) -> Self {
        let claim = &waiting.claim;
        ClaimSearch {
            requested_storage: claim.requested_storage,
            storage_class_name: claim.storage_class_name.clone(),
            storage_class: claim.storage_class.clone(),
            access_modes: claim.access_modes.clone(),
            volume_mode: claim.volume_mode.clone(),
            volume_attributes_class_name: claim.volume_attributes_class_name.clone(),
            selector: claim.selector.clone(),
            selected_node: claim.selected_node.clone(),
            capacities: waiting.capacities.clone(),
            shape_fits: waiting.shape_fits.clone(),
            elsewhere_changes: volumes.elsewhere_changes_of(&claim.storage_class_name),
        }
    }

    /// Whether `waiting` searches as this claim did (its class's volumes pinned to no host
    /// aside, which [`HeldAnswers::hold_for`] checks).
    fn searches_as(&self, waiting: &WaitingClaim) -> bool {
        let claim = &waiting.claim;
        self.requested_storage == claim.requested_storage
            && self.storage_class_name == claim.storage_class_name
            && self.storage_class == claim.storage_class
            && self.access_modes == claim.access_modes
            && self.volume_mode == claim.volume_mode
            && self.volume_attributes_class_name == claim.volume_attributes_class_name
            && self.selector == claim.selector
            && self.selected_node == claim.selected_node
            && self.capacities == waiting.capacities
            && self.shape_fits == waiting.shape_fits
    }
}

/// The batch filter's answers, kept per node for the last [`HeldAnswers::SETS`] sets of claims
/// that pods came with. The pods of a StatefulSet or a Job come with claims alike but for their
/// names, and between two of them only the host whose volume the last one took has changed; the
/// filter had searched each examined node's volumes again for every pod.
///
/// An answer is for one node, the host it had and that host's [`VolumeIndex::host_changes`]: it
/// is forgotten when the node is sent again, and not used once a volume was pinned to or unpinned
/// from the host, or the node has another host. A set's answers are all forgotten when a volume
/// pinned to no host enters or leaves one of its claims' classes, and every set's when the hosts
/// are numbered again. Only the batch filter uses them; errors are never held.
#[derive(Debug, Default)]
struct HeldAnswers {
    sets: Vec<HeldSet>,
    /// The set of the pod being filtered, when its claims can be held.
    current: Option<usize>,
    /// Gives out stamps and use times; 0 is never given.
    clock: u32,
    /// [`VolumeIndex::hosts_epoch`] the answers were found under.
    hosts_epoch: u64,
    /// How many times [`HeldAnswers::answer`] found an answer (tests read it).
    used: u64,
}

#[derive(Debug)]
struct HeldSet {
    claims: Vec<ClaimSearch>,
    /// An entry made under another stamp is no answer: a set taken for new claims, or whose
    /// answers were all forgotten, takes a new stamp rather than clearing every node's entry.
    stamp: u32,
    last_used: u32,
    by_node: Vec<Held>,
}

/// One node's held answer.
#[derive(Clone, Copy, Debug, Default)]
struct Held {
    stamp: u32,
    /// The node's host number + 1 (0: none) when the answer was found.
    host: u32,
    /// That host's [`VolumeIndex::host_changes`] then.
    host_changes: u32,
    reasons: Reasons,
}

impl HeldAnswers {
    /// Enough for the claim shapes of the StatefulSets and Jobs of a busy cluster; at 50,000
    /// nodes they take at most 32 x 16 bytes per node, 25.6 MB.
    const SETS: usize = 32;

    fn tick(&mut self) -> u32 {
        self.clock += 1;
        self.clock
    }

    /// Chooses the set of answers for a pod with `claims` (which [`Claims::holdable`] must
    /// allow), taking the least recently used set for claims none holds.
    fn hold_for(&mut self, claims: &Claims, volumes: &VolumeIndex) {
        self.current = None;
        // A call ticks at most once per set and three times more: the clock never wraps.
        if self.clock > u32::MAX - 2 * Self::SETS as u32 {
            self.sets.clear();
            self.clock = 0;
        }
        if volumes.hosts_epoch != self.hosts_epoch {
            self.hosts_epoch = volumes.hosts_epoch;
            for index in 0..self.sets.len() {
                self.sets[index].stamp = self.tick();
            }
        }
        let now = self.tick();
        let found = self.sets.iter().position(|set| {
            set.claims.len() == claims.waiting.len()
                && set
                    .claims
                    .iter()
                    .zip(&claims.waiting)
                    .all(|(held, waiting)| held.searches_as(waiting))
        });
        let index = match found {
            Some(index) => {
                let mut elsewhere_stayed = true;
                for claim in &mut self.sets[index].claims {
                    let changes = volumes.elsewhere_changes_of(&claim.storage_class_name);
                    elsewhere_stayed &= changes == claim.elsewhere_changes;
                    claim.elsewhere_changes = changes;
                }
                if !elsewhere_stayed {
                    self.sets[index].stamp = self.tick();
                }
                index
            }
            None => {
                let set = HeldSet {
                    claims: claims
                        .waiting
                        .iter()
                        .map(|w| ClaimSearch::of(w, volumes))
                        .collect(),
                    stamp: self.tick(),
                    last_used: now,
                    by_node: Vec::new(),
                };
                if self.sets.len() < Self::SETS {
                    self.sets.push(set);
                    self.sets.len() - 1
                } else {
                    let (oldest, _) = self
                        .sets
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, set)| set.last_used)
                        .expect("SETS > 0");
                    let by_node = std::mem::take(&mut self.sets[oldest].by_node);
                    self.sets[oldest] = HeldSet { by_node, ..set };
                    oldest
                }
            }
        };
        self.sets[index].last_used = now;
        self.current = Some(index);
    }

    /// Forgets every set's answer for node `id`.
    fn forget(&mut self, id: NodeId) {
        for set in &mut self.sets {
            if let Some(held) = set.by_node.get_mut(id as usize) {
                held.stamp = 0;
            }
        }
    }

    /// The current pod's held answer for node `id`, whose host is `host` with `host_changes`.
    #[inline]
    fn answer(&mut self, id: NodeId, host: Option<HostId>, host_changes: u32) -> Option<Reasons> {
        let set = &self.sets[self.current?];
        let held = set.by_node.get(id as usize)?;
        let same = held.stamp == set.stamp
            && held.host == host.map_or(0, |h| h + 1)
            && held.host_changes == host_changes;
        self.used += u64::from(same);
        same.then_some(held.reasons)
    }

    fn keep(&mut self, id: NodeId, host: Option<HostId>, host_changes: u32, reasons: Reasons) {
        let Some(index) = self.current else {
            return;
        };
        let set = &mut self.sets[index];
        if set.by_node.len() <= id as usize {
            set.by_node.resize(id as usize + 1, Held::default());
        }
        set.by_node[id as usize] = Held {
            stamp: set.stamp,
            host: host.map_or(0, |h| h + 1),
            host_changes,
            reasons,
        };
    }
}

/// Each node's host as [`VolumeIndex::hosts`] numbers it, found through the mirror's label
/// index, for the batch filter: a node's hostname is there one array read, and the host it
/// stands for is kept per value id. The filter then neither reads the node's labels nor hashes
/// its hostname, which at 50,000 nodes cost more than the rest of it: every node's labels and
/// hostname text missed the cache, and the cost per examined node was twice 5,000 nodes'.
#[derive(Debug, Default)]
struct HostsByValue {
    /// The mirror's [`Nodes::label_ids_epoch`] the entries were made in.
    epoch: u64,
    /// [`VolumeIndex::hosts_epoch`] when the entries were made.
    hosts_epoch: u64,
    column: Option<LabelColumnId>,
    /// Per value id of the hostname column: the host's number + 1 (0: no volume was pinned to
    /// it), and how many hosts the index had when that was looked up (a host added since may be
    /// it).
    entries: Vec<(u32, u32)>,
}

impl HostsByValue {
    /// Forgets what the mirror or `index` numbered differently since the last batch.
    fn refresh(&mut self, nodes: &Nodes, index: &VolumeIndex) {
        let epoch = nodes.label_ids_epoch();
        if epoch != self.epoch || index.hosts_epoch != self.hosts_epoch {
            self.entries.clear();
            self.epoch = epoch;
            self.hosts_epoch = index.hosts_epoch;
            self.column = None;
        }
        if self.column.is_none() {
            self.column = nodes.label_column(HOSTNAME);
        }
    }

    /// The host of node `id` in `index`, as [`host_of`] finds it from the node's labels.
    fn host(&mut self, nodes: &Nodes, id: NodeId, index: &VolumeIndex) -> Option<HostId> {
        let column = self.column?;
        let value = nodes.label_value(column, id);
        if value == 0 {
            return None;
        }
        let hosts = index.hosts.len() as u32;
        if let Some(&(host, looked_up_at)) = self.entries.get(value as usize) {
            if host != 0 {
                return Some(host - 1);
            }
            if looked_up_at == hosts {
                return None;
            }
        }
        let host = nodes
            .label_value_text(column, value)
            .and_then(|text| index.hosts.get(text))
            .copied();
        if self.entries.len() <= value as usize {
            self.entries.resize(value as usize + 1, (0, u32::MAX));
        }
        self.entries[value as usize] = (host.map_or(0, |h| h + 1), hosts);
        host
    }
}

/// The number `index` gives `node`'s host (its `kubernetes.io/hostname` label), if a volume was
/// ever pinned to it.
fn host_of(node: &NodeInfo, index: &VolumeIndex) -> Option<HostId> {
    index.hosts.get(node.labels.get(HOSTNAME)?).copied()
}

impl Plugin for VolumeBinding {
    const NAME: &'static str = NAME;
    const READS_POD: PodParts = PodParts::VOLUME_CLAIMS
        .union(PodParts::IDENTITY)
        .union(PodParts::VOLUMES);
    const READS_VOLUMES: bool = true;
    const RESERVE: bool = true;
    const IDLE_WITHOUT: PodParts = PodParts::VOLUME_CLAIMS;
    const INDEXES_LABELS: bool = true;

    fn new(_config: &str) -> Result<Self, String> {
        Ok(Self::default())
    }

    /// kube-scheduler's Reserve (`AssumePodVolumes` of what `FindPodVolumes` found): the
    /// volumes of the claims prepared for this pod, on the chosen node.
    fn reserve(&mut self, _pod: &Pod, node: &NodeInfo) -> Result<Reservation, Failure> {
        let mut found = Found::default();
        self.find_on(node, &mut found).map_err(Reasons::failure)?;
        Ok(Reservation {
            volumes: found.owned(),
            claims: Vec::new(),
        })
    }

    fn volume_added(&mut self, volume: &Arc<VolumeInfo>) {
        self.volumes.add(volume);
    }

    fn volume_removed(&mut self, volume: &VolumeInfo) {
        self.volumes.remove(volume);
        self.volumes.release_unpinned_hosts();
    }

    fn node_upserted(&mut self, id: NodeId, _node: &NodeInfo) {
        self.held.forget(id);
    }

    fn prepare(&mut self, pod: &Pod, _nodes: &Nodes) -> PodPlan {
        self.claims = Claims::default();
        self.held.current = None;
        let filter = match Claims::of(pod, &self.volumes) {
            Err(failure) => FilterPlan::Reject(failure),
            Ok(None) => FilterPlan::Skip,
            // Every claim bound to a volume any node can use: every node passes.
            Ok(Some(claims)) if claims.fit_everywhere() => FilterPlan::Skip,
            Ok(Some(claims)) => {
                if claims.holdable() {
                    self.held.hold_for(&claims, &self.volumes);
                }
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
        self.find_on(node, &mut Found::default())
            .map_err(Reasons::failure)
    }

    fn filter_batch(&mut self, _pod: &Pod, nodes: &Nodes, ids: &[NodeId], out: &mut FilterResults) {
        let VolumeBinding {
            volumes,
            claims,
            hosts,
            held,
        } = self;
        hosts.refresh(nodes, volumes);
        let classes = claims.classes(volumes);
        // Per combination of reasons, its failure interned the first time a node fails with it.
        let mut interned = [0u32; 1 << Reasons::ORDER.len()];
        let mut found = Found::default();
        let topologies = claims.topologies(nodes);
        for &id in ids {
            if !nodes.contains(id) {
                out.push(Err(Nodes::unknown(id)));
                continue;
            }
            let host = hosts.host(nodes, id, volumes);
            let host_changes = host.map_or(0, |h| volumes.changes_of_host(h));
            let reasons = match held.answer(id, host, host_changes) {
                Some(reasons) => reasons,
                None => {
                    let node = nodes.get(id).expect("the mirror has the node");
                    let allows = |claim: &WaitingClaim| topologies[claim.index].allows(nodes, id);
                    let reasons = match claims.find(node, host, &classes, allows, &mut found) {
                        Ok(()) => Reasons::default(),
                        Err(reasons) => reasons,
                    };
                    held.keep(id, host, host_changes, reasons);
                    reasons
                }
            };
            let verdict = match reasons.0 {
                0 => 0,
                bits => {
                    let failure = &mut interned[usize::from(bits)];
                    if *failure == 0 {
                        *failure = out.intern(reasons.failure());
                    }
                    *failure
                }
            };
            out.verdicts.push(verdict);
        }
    }
}

wasched_sdk::export_plugin!(VolumeBinding: filter);

#[cfg(not(target_arch = "wasm32"))]
mod cases;
#[cfg(test)]
mod host_tests;
#[cfg(not(target_arch = "wasm32"))]
pub use cases::cases;
