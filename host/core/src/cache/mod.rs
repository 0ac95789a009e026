//! The cluster cache: nodes with the pods placed on them and their summed requests, the storage
//! objects volume plugins look up, and a change log that keeps every plugin instance's node mirror
//! current without re-sending nodes that did not change.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::storage::v1::StorageClass;
use std::sync::Arc;
use wasched_sdk as sdk;
use wasched_sdk::helpers::Interner;
pub use wasched_sdk::PodVolumes;

use crate::nodetree::{zone_key, NodeTree};
use crate::spread::SpreadSelectors;

mod devices;
mod storage;

pub use devices::{DeviceId, DeviceStore};

/// One node and what is placed on it.
#[derive(Debug, Clone)]
pub struct NodeEntry {
    /// The node as plugins see it (usage included).
    pub info: sdk::NodeInfo,
    zone: String,
    /// Ids of the pods on the node (the cache's `pod_ids` names each), in the order they came.
    pods: Vec<u32>,
    /// How many of its pods have each priority: preemption asks for the lowest on every node
    /// a failed cycle leaves, which looking each pod up would make cost more than the cycle.
    priorities: BTreeMap<i32, u32>,
}

impl NodeEntry {
    fn hold(&mut self, id: u32, priority: i32) {
        self.pods.push(id);
        *self.priorities.entry(priority).or_default() += 1;
    }

    fn release(&mut self, id: u32, priority: i32) {
        self.pods.retain(|&held| held != id);
        if let Some(count) = self.priorities.get_mut(&priority) {
            *count -= 1;
            if *count == 0 {
                self.priorities.remove(&priority);
            }
        }
    }
}

impl NodeEntry {
    /// How many pods are placed on it (bound or assumed).
    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }
}

/// A pod that holds resources on a node.
#[derive(Debug, Clone)]
struct PlacedPod {
    /// Its id in plugin mirrors (reused after it leaves).
    id: u32,
    /// What plugins that read existing pods see of it (every part; the node filled in when sent),
    /// shared with the pods that have the same parts (the cache's `shared_parts`).
    existing: Arc<sdk::ExistingPod>,
    node: String,
    /// Shared with the pods that request the same (the cache's `shared_requests`).
    requests: Arc<PodRequests>,
    /// Placed by this scheduler and not yet seen bound: [`Cache::forget_pod`] may release it,
    /// [`Cache::add_pod`] on the same node confirms it.
    assumed: bool,
    /// What preemption weighs a pod by.
    standing: Standing,
}

/// What a placed pod holds on its node: its requests, and the same with kube's defaults for
/// containers that request no CPU or memory (what scoring counts).
#[derive(Debug, PartialEq, Eq, Hash)]
struct PodRequests {
    requests: sdk::Resources,
    non_zero: sdk::Resources,
}

/// What preemption reads of a placed pod besides its labels.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Standing {
    /// `spec.priority`.
    pub priority: i32,
    /// `status.startTime` in milliseconds since the epoch.
    pub start_time_millis: Option<i64>,
    /// `metadata.uid`.
    pub uid: String,
    /// Already terminating because a scheduler preempted it.
    pub terminating_by_preemption: bool,
}

impl Standing {
    fn is_of(&self, pod: &sdk::Pod) -> bool {
        self.priority == pod.priority
            && self.start_time_millis == pod.start_time_millis
            && self.uid == pod.uid
            && self.terminating_by_preemption == pod.terminating_by_preemption
    }

    fn of(pod: &sdk::Pod) -> Standing {
        Standing {
            priority: pod.priority,
            start_time_millis: pod.start_time_millis,
            uid: pod.uid.clone(),
            terminating_by_preemption: pod.terminating_by_preemption,
        }
    }
}

/// A pod on a node, as preemption sees it.
#[derive(Debug, Clone, Copy)]
pub struct PodOnNode<'a> {
    /// `namespace/name`.
    pub key: &'a str,
    /// The pod as plugins see it.
    pub pod: &'a sdk::ExistingPod,
    /// What preemption reads of it besides.
    pub standing: &'a Standing,
}

/// A placed pod taken out of the cache by [`Cache::detach_pod`], to be put back as it was by
/// [`Cache::reattach_pod`]: how preemption asks plugins whether a pod would fit without it.
#[derive(Debug)]
pub struct DetachedPod {
    key: String,
    placed: Box<PlacedPod>,
}

impl DetachedPod {
    /// `namespace/name`.
    pub fn key(&self) -> &str {
        &self.key
    }
}

/// A PodDisruptionBudget as preemption reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DisruptionBudget {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `spec.selector`; none, or one without requirements, matches no pod.
    pub selector: Option<sdk::LabelSelector>,
    /// `status.disruptionsAllowed`.
    pub disruptions_allowed: i32,
    /// The names in `status.disruptedPods`: evictions the API server already counted.
    pub disrupted_pods: Vec<String>,
}

/// A change to one node, as recorded in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    /// Added or changed: send the whole node.
    Upsert(u32),
    /// Gone: its id may be reused.
    Remove(u32),
    /// Only its usage changed.
    Usage(u32),
    /// Only details some plugins read changed (its images, CSINode or device pools, which an
    /// allocation changes): send the node to those plugins alone.
    Details(u32, sdk::wire::NodeDetails),
    /// A pod (by pod id) was placed, moved, removed, or its node came or went: send its current
    /// state (or its removal) to plugins that read existing pods.
    Pod(u32),
    /// A namespace (by namespace id) was added, relabelled or removed.
    Namespace(u32),
    /// A PersistentVolume (by volume id) was added, changed, removed, reserved or given back.
    Volume(u32),
}

/// What a plugin instance must be told to catch up with the cache.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Delta {
    /// Node ids added or changed.
    pub upserts: Vec<u32>,
    /// Node ids removed.
    pub removals: Vec<u32>,
    /// Node ids whose usage changed.
    pub usage: Vec<u32>,
    /// Node ids whose images, CSINode or device pools alone changed, with which of them: a
    /// plugin that reads none of those has nothing to learn of them.
    pub details: Vec<(u32, sdk::wire::NodeDetails)>,
    /// Pod ids whose state to send: [`Cache::existing_pod`] says whether to upsert or remove.
    pub pods: Vec<u32>,
    /// Namespace ids whose state to send: [`Cache::namespace`] says which.
    pub namespaces: Vec<u32>,
    /// Volume ids whose state to send: [`Cache::volume_entry`] says which.
    pub volumes: Vec<u32>,
}

impl Delta {
    /// Nothing to tell.
    pub fn is_empty(&self) -> bool {
        self.upserts.is_empty()
            && self.removals.is_empty()
            && self.usage.is_empty()
            && self.details.is_empty()
            && self.pods.is_empty()
            && self.namespaces.is_empty()
            && self.volumes.is_empty()
    }
}

/// A namespace as plugins see it; the name stays after removal so that mirrors can be told.
#[derive(Debug, Clone)]
struct NamespaceSlot {
    name: String,
    /// None once removed.
    labels: Option<sdk::Labels>,
}

/// A volume as the cluster has it.
#[derive(Debug)]
struct StoredVolume {
    info: sdk::VolumeInfo,
    /// Its source as VolumeRestrictions and NodeVolumeLimits read it (the source fields of a
    /// [`sdk::PodVolume`]).
    source: sdk::PodVolume,
}

/// What reservations assumed of volumes and claims, and which pod holds which.
#[derive(Debug, Default)]
struct VolumeReservations {
    volumes: HashMap<String, sdk::VolumeInfo>,
    claims: HashMap<(String, String), sdk::ClaimInfo>,
    by_pod: HashMap<String, Reservation>,
}

#[derive(Debug, Default)]
struct Reservation {
    volumes: Vec<String>,
    claims: Vec<(String, String)>,
}

/// The cluster as the scheduler knows it.
#[derive(Debug, Default)]
pub struct Cache {
    nodes: Vec<Option<NodeEntry>>,
    free_ids: Vec<u32>,
    by_name: HashMap<String, u32>,
    tree: NodeTree,
    listing: Option<Vec<u32>>,
    /// Boxed: a `PlacedPod` is ~200 bytes, and a table of them inline doubled (and, while it
    /// grew, briefly held both sizes) with every power of two of placed pods.
    pods: HashMap<Arc<str>, Box<PlacedPod>>,
    /// One copy of each distinct [`PlacedPod::existing`]: a Deployment's replicas have the same
    /// namespace, labels and affinity, and held whole per pod they were the largest part of a
    /// placed pod.
    shared_parts: Interner<sdk::ExistingPod>,
    /// One copy of each distinct [`PlacedPod::requests`], for the same reason.
    shared_requests: Interner<PodRequests>,
    /// Per pod id: the key of the pod holding it (the allocation of its key in `pods`).
    pod_ids: Vec<Option<Arc<str>>>,
    free_pod_ids: Vec<u32>,
    /// Namespaces by id; ids are not reused (namespaces are few and rarely deleted).
    namespaces: Vec<NamespaceSlot>,
    namespace_ids: HashMap<String, u32>,
    /// Pods placed on nodes the cache does not have (yet), by node name.
    orphans: BTreeMap<String, Vec<String>>,
    claims: HashMap<(String, String), sdk::ClaimInfo>,
    volumes: HashMap<String, StoredVolume>,
    /// Volume names by storage class, for the volumes a waiting claim could bind to.
    volumes_by_class: HashMap<String, BTreeSet<String>>,
    /// Volume ids for the change log, by name; ids are not reused.
    volume_ids: HashMap<String, u32>,
    volume_names: Vec<String>,
    classes: HashMap<String, sdk::StorageClassInfo>,
    /// CSINodes by node name.
    csi_nodes: HashMap<String, sdk::CsiNode>,
    /// CSIDrivers by name: whether each publishes storage capacity.
    csi_drivers: HashMap<String, bool>,
    /// CSIStorageCapacities by `(namespace, name)`: their class and what they offer.
    capacities: HashMap<(String, String), (String, sdk::StorageCapacity)>,
    /// Volume bindings reserved for pods whose cycle chose a node, until the binding is seen
    /// (the volume or claim comes back changed) or given up ([`Cache::unreserve_volumes`]).
    reserved: VolumeReservations,
    /// Services and controllers, for pods' default spread selectors.
    spread: SpreadSelectors,
    log: Vec<Change>,
    /// The generation of `log[0]`.
    log_base: u64,
    /// Placed pods with any pod (anti-)affinity term.
    pods_with_pod_affinity: usize,
    /// PodDisruptionBudgets by `namespace/name`.
    budgets: BTreeMap<String, DisruptionBudget>,
    /// Pending pods nominated to a node by a preemption (`status.nominatedNodeName`), by key.
    nominated: BTreeMap<String, sdk::Pod>,
    /// Dynamic Resource Allocation's objects.
    devices: DeviceStore,
}

impl Cache {
    /// The current generation: every change to a node advances it by one.
    pub fn generation(&self) -> u64 {
        self.log_base + self.log.len() as u64
    }

    /// The oldest generation the change log still holds; an instance synced before it must be
    /// sent every node again.
    pub fn log_start(&self) -> u64 {
        self.log_base
    }

    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.by_name.len()
    }

    /// One past the highest node id in use (or used before and free now): every id the cache
    /// gives out is below it.
    pub fn id_bound(&self) -> usize {
        self.nodes.len()
    }

    /// The node with id `id`.
    pub fn node(&self, id: u32) -> Option<&NodeEntry> {
        self.nodes.get(id as usize).and_then(Option::as_ref)
    }

    /// The id of the node named `name`.
    pub fn node_id(&self, name: &str) -> Option<u32> {
        self.by_name.get(name).copied()
    }

    /// Every node id with its node, in id order.
    pub fn nodes(&self) -> impl Iterator<Item = (u32, &NodeEntry)> {
        self.nodes
            .iter()
            .enumerate()
            .filter_map(|(id, n)| n.as_ref().map(|n| (id as u32, n)))
    }

    /// Recomputes the node-tree listing if nodes joined, left or changed zone since the last one.
    pub fn refresh_listing(&mut self) {
        if self.listing.is_none() {
            self.listing = Some(self.tree.list());
        }
    }

    /// The nodes in node-tree order (zone by zone, round-robin) as of the last
    /// [`Cache::refresh_listing`]; empty before the first.
    pub fn listing(&self) -> &[u32] {
        self.listing.as_deref().unwrap_or_default()
    }

    /// Adds a node, or replaces the one with the same name (keeping what is placed on it).
    pub fn upsert_node(&mut self, mut info: sdk::NodeInfo) -> u32 {
        let zone = zone_key(&info.labels);
        info.csi_node = self.csi_nodes.get(&info.name).cloned();
        info.device_pools = self.device_pools_for(&info);
        if let Some(&id) = self.by_name.get(&info.name) {
            let entry = self.nodes[id as usize]
                .as_mut()
                .expect("indexed node exists");
            // The cache keeps the usage; the update's own is not the placed pods'.
            info.usage = std::mem::take(&mut entry.info.usage);
            let change = match node_change(&entry.info, &info) {
                // A status update that changes nothing plugins see (kubelet heartbeats,
                // conditions): their mirrors, and what plugins worked out from them, stay valid.
                NodeChange::None => {
                    entry.info.usage = info.usage;
                    return id;
                }
                NodeChange::Details(parts) => Change::Details(id, parts),
                NodeChange::Whole => Change::Upsert(id),
            };
            if entry.zone != zone {
                self.tree.update(id, &entry.zone, &zone);
                self.listing = None;
                entry.zone = zone;
            }
            entry.info = info;
            self.log.push(change);
            return id;
        }
        let id = self.free_ids.pop().unwrap_or(self.nodes.len() as u32);
        let name = info.name.clone();
        let mut entry = NodeEntry {
            info,
            zone,
            pods: Vec::new(),
            priorities: BTreeMap::new(),
        };
        for key in self.orphans.remove(&name).unwrap_or_default() {
            if let Some(pod) = self.pods.get(key.as_str()) {
                add_usage(&mut entry.info.usage, pod);
                self.log.push(Change::Pod(pod.id));
                entry.hold(pod.id, pod.standing.priority);
            }
        }
        self.tree.add(id, &entry.zone);
        self.listing = None;
        if id as usize == self.nodes.len() {
            self.nodes.push(Some(entry));
        } else {
            self.nodes[id as usize] = Some(entry);
        }
        self.by_name.insert(name, id);
        self.log.push(Change::Upsert(id));
        id
    }

    /// Removes a node. Its pods stay known and count again if the node comes back.
    pub fn remove_node(&mut self, name: &str) -> bool {
        let Some(id) = self.by_name.remove(name) else {
            return false;
        };
        let entry = self.nodes[id as usize].take().expect("indexed node exists");
        let keys: Vec<String> = entry
            .pods
            .iter()
            .filter_map(|&pod| self.pod_ids[pod as usize].as_deref().map(str::to_string))
            .collect();
        for &pod in &entry.pods {
            self.log.push(Change::Pod(pod));
        }
        self.tree.remove(id, &entry.zone);
        self.listing = None;
        if !keys.is_empty() {
            self.orphans.insert(name.to_string(), keys);
        }
        self.free_ids.push(id);
        self.log.push(Change::Remove(id));
        true
    }

    /// Records that `pod` runs on `node`, as the cluster says. A pod assumed on that node is
    /// confirmed (its requests are already held); a pod placed elsewhere moves.
    pub fn add_pod(&mut self, pod: &sdk::Pod, node: &str) {
        let key = pod.key();
        let volumes = self.resolved_volumes(&pod.namespace, &pod.volumes);
        if let Some(placed) = self.pods.get_mut(key.as_str()).filter(|p| p.node == node) {
            placed.assumed = false;
            if !placed.standing.is_of(pod) {
                let standing = Standing::of(pod);
                if standing.priority != placed.standing.priority {
                    if let Some(entry) = self
                        .by_name
                        .get(node)
                        .and_then(|&id| self.nodes[id as usize].as_mut())
                    {
                        entry.release(placed.id, placed.standing.priority);
                        entry.hold(placed.id, standing.priority);
                    }
                }
                placed.standing = standing;
            }
            // Labels and terminating state change on a running pod, and its claims get bound;
            // pod-aware plugins count them. Compared first: every binding the watch confirms
            // comes through here, nearly always unchanged.
            if !placed.existing.is_of(pod) || placed.existing.volumes != volumes {
                let before = usize::from(!placed.existing.pod_affinity.is_empty());
                let after = usize::from(!pod.pod_affinity.is_empty());
                self.pods_with_pod_affinity = self.pods_with_pod_affinity + after - before;
                let mut existing = sdk::ExistingPod::of(pod, 0);
                existing.volumes = volumes;
                let old =
                    std::mem::replace(&mut placed.existing, self.shared_parts.intern(existing));
                self.shared_parts.release(old);
                self.log.push(Change::Pod(placed.id));
            }
            return;
        }
        self.place(key, pod, node, false, volumes);
    }

    /// Holds `pod`'s requests on `node`, which this scheduler chose, until the binding is seen
    /// ([`Cache::add_pod`]) or given up ([`Cache::forget_pod`]).
    pub fn assume_pod(&mut self, pod: &sdk::Pod, node: &str) {
        let volumes = self.resolved_volumes(&pod.namespace, &pod.volumes);
        self.place(pod.key(), pod, node, true, volumes);
    }

    /// Releases an assumed pod. Returns false, changing nothing, when the pod is not placed or
    /// was seen bound since: a binding that failed late must not free a pod the cluster runs.
    pub fn forget_pod(&mut self, key: &str) -> bool {
        self.is_assumed(key) && self.remove_pod(key)
    }

    /// Whether the pod is placed by this scheduler and not yet seen bound.
    pub fn is_assumed(&self, key: &str) -> bool {
        self.pods.get(key).is_some_and(|p| p.assumed)
    }

    /// Places `pod` on `node` with `volumes`, its volumes as [`Cache::resolved_volumes`] looks
    /// them up.
    fn place(
        &mut self,
        key: String,
        pod: &sdk::Pod,
        node: &str,
        assumed: bool,
        volumes: Vec<sdk::PodVolume>,
    ) {
        self.remove_pod(&key);
        let mut existing = sdk::ExistingPod::of(pod, 0);
        existing.volumes = volumes;
        let placed = PlacedPod {
            id: 0,
            existing: self.shared_parts.intern(existing),
            node: node.to_string(),
            requests: self.shared_requests.intern(PodRequests {
                requests: pod.requests.clone(),
                non_zero: pod.non_zero_requests.clone(),
            }),
            assumed,
            standing: Standing::of(pod),
        };
        self.insert_placed(key, Box::new(placed));
    }

    /// Files `placed` under a fresh pod id on its node (or among the orphans).
    fn insert_placed(&mut self, key: String, mut placed: Box<PlacedPod>) {
        let key: Arc<str> = Arc::from(key);
        let id = self.free_pod_ids.pop().unwrap_or(self.pod_ids.len() as u32);
        if id as usize == self.pod_ids.len() {
            self.pod_ids.push(Some(key.clone()));
        } else {
            self.pod_ids[id as usize] = Some(key.clone());
        }
        placed.id = id;
        self.pods_with_pod_affinity += usize::from(!placed.existing.pod_affinity.is_empty());
        let node = placed.node.as_str();
        match self.by_name.get(node) {
            Some(&id) => {
                let entry = self.nodes[id as usize]
                    .as_mut()
                    .expect("indexed node exists");
                add_usage(&mut entry.info.usage, &placed);
                entry.hold(placed.id, placed.standing.priority);
                self.log.push(Change::Usage(id));
                self.log.push(Change::Pod(placed.id));
            }
            None => self
                .orphans
                .entry(node.to_string())
                .or_default()
                .push(key.to_string()),
        }
        self.pods.insert(key, placed);
    }

    /// Releases a pod's resources, assumed or observed. Returns false if the pod was not placed.
    pub fn remove_pod(&mut self, key: &str) -> bool {
        let Some(placed) = self.take_pod(key) else {
            return false;
        };
        let placed = *placed;
        self.shared_parts.release(placed.existing);
        self.shared_requests.release(placed.requests);
        true
    }

    /// Takes a placed pod out as [`Cache::remove_pod`] does, keeping what is needed to put it
    /// back with [`Cache::reattach_pod`]. Plugins see it leave at their next sync.
    pub fn detach_pod(&mut self, key: &str) -> Option<DetachedPod> {
        self.take_pod(key).map(|placed| DetachedPod {
            key: key.to_string(),
            placed,
        })
    }

    /// Puts a detached pod back on its node, assumed or bound as it was (under a new pod id).
    pub fn reattach_pod(&mut self, detached: DetachedPod) {
        self.remove_pod(&detached.key);
        self.insert_placed(detached.key, detached.placed);
    }

    /// The highest priority among the placed members of each gang (`namespace/group` by the
    /// label [`POD_GROUP_LABEL`](crate::k8s::podgroup::POD_GROUP_LABEL)): what preemption reads
    /// to spare running gangs. One pass over the placed pods, made only when a possible victim
    /// is a gang member.
    pub fn gang_priorities(&self) -> HashMap<String, i32> {
        let mut highest: HashMap<String, i32> = HashMap::new();
        for placed in self.pods.values() {
            let Some(gang) = crate::k8s::podgroup::placed_group_name(&placed.existing) else {
                continue;
            };
            let priority = placed.standing.priority;
            highest
                .entry(gang)
                .and_modify(|p| *p = (*p).max(priority))
                .or_insert(priority);
        }
        highest
    }

    /// The pods on node `id` (bound, assumed and terminating ones), in the order they came.
    pub fn pods_on(&self, id: u32) -> Vec<PodOnNode<'_>> {
        let Some(entry) = self.node(id) else {
            return Vec::new();
        };
        entry
            .pods
            .iter()
            .filter_map(|&pod| {
                let key = self.pod_ids[pod as usize].as_deref()?;
                self.pods.get(key).map(|placed| PodOnNode {
                    key,
                    pod: &placed.existing,
                    standing: &placed.standing,
                })
            })
            .collect()
    }

    /// Whether node `id` runs a pod of lower priority than `priority` (one preemption could
    /// evict), without collecting the node's pods.
    pub fn has_pod_below(&self, id: u32, priority: i32) -> bool {
        self.node(id).is_some_and(|entry| {
            entry
                .priorities
                .first_key_value()
                .is_some_and(|(&lowest, _)| lowest < priority)
        })
    }

    /// Adds a PodDisruptionBudget or replaces it.
    pub fn upsert_budget(&mut self, budget: DisruptionBudget) {
        let key = format!("{}/{}", budget.namespace, budget.name);
        self.budgets.insert(key, budget);
    }

    /// Removes a PodDisruptionBudget. Returns false when there was none.
    pub fn remove_budget(&mut self, namespace: &str, name: &str) -> bool {
        self.budgets
            .remove(&format!("{namespace}/{name}"))
            .is_some()
    }

    /// Records a pending pod's `status.nominatedNodeName`, or that it has none.
    pub fn nominate(&mut self, pod: &sdk::Pod) {
        if pod.nominated_node_name.is_empty() {
            // Every pending pod's event comes through here; most clusters have no nomination.
            if !self.nominated.is_empty() {
                self.nominated.remove(&pod.key());
            }
        } else {
            self.nominated.insert(pod.key(), pod.clone());
        }
    }

    /// Forgets a pod's nomination (it was placed, bound or deleted).
    pub fn clear_nomination(&mut self, key: &str) {
        self.nominated.remove(key);
    }

    /// The pods nominated to a node that `pod`'s filters must count as if they ran there:
    /// those of equal or higher priority, `pod` itself aside (kube-scheduler's nominated pods).
    pub fn nominees_before(&self, pod: &sdk::Pod) -> Vec<sdk::Pod> {
        if self.nominated.is_empty() {
            return Vec::new();
        }
        let key = pod.key();
        self.nominated
            .iter()
            .filter(|(k, p)| {
                **k != key
                    && p.priority >= pod.priority
                    && !self.pods.contains_key(k.as_str())
                    && self.by_name.contains_key(&p.nominated_node_name)
            })
            .map(|(_, p)| p.clone())
            .collect()
    }

    /// Every PodDisruptionBudget, by namespace and name.
    pub fn budgets(&self) -> impl Iterator<Item = &DisruptionBudget> {
        self.budgets.values()
    }

    fn take_pod(&mut self, key: &str) -> Option<Box<PlacedPod>> {
        let placed = self.pods.remove(key)?;
        self.pod_ids[placed.id as usize] = None;
        self.free_pod_ids.push(placed.id);
        self.pods_with_pod_affinity -= usize::from(!placed.existing.pod_affinity.is_empty());
        match self.by_name.get(&placed.node) {
            Some(&id) => {
                let entry = self.nodes[id as usize]
                    .as_mut()
                    .expect("indexed node exists");
                let usage = &mut entry.info.usage;
                usage.requested.subtract(&placed.requests.requests);
                usage.non_zero_requested.subtract(&placed.requests.non_zero);
                usage.pod_count = usage.pod_count.saturating_sub(1);
                entry.release(placed.id, placed.standing.priority);
                self.log.push(Change::Usage(id));
                self.log.push(Change::Pod(placed.id));
            }
            None => {
                if let Some(keys) = self.orphans.get_mut(&placed.node) {
                    keys.retain(|k| k != key);
                }
            }
        }
        Some(placed)
    }

    /// How many placed pods have a pod (anti-)affinity term.
    pub fn pods_with_pod_affinity(&self) -> usize {
        self.pods_with_pod_affinity
    }

    /// The requests of a placed pod, if it is placed.
    pub fn pod_requests(&self, key: &str) -> Option<&sdk::Resources> {
        self.pods.get(key).map(|p| &p.requests.requests)
    }

    /// The node a pod is placed on, if any.
    pub fn pod_node(&self, key: &str) -> Option<&str> {
        self.pods.get(key).map(|p| p.node.as_str())
    }

    /// The pod with pod id `id` and the id of its node, when it is on a node the cache has.
    pub fn existing_pod(&self, id: u32) -> Option<(u32, &sdk::ExistingPod)> {
        let key = self.pod_ids.get(id as usize)?.as_ref()?;
        let placed = self.pods.get(key)?;
        let node = *self.by_name.get(&placed.node)?;
        Some((node, &placed.existing))
    }

    /// Every pod on a node the cache has: pod id, node id and the pod.
    pub fn existing_pods(&self) -> impl Iterator<Item = (u32, u32, &sdk::ExistingPod)> + '_ {
        (0..self.pod_ids.len() as u32)
            .filter_map(|id| self.existing_pod(id).map(|(node, pod)| (id, node, pod)))
    }

    /// Adds a namespace or replaces its labels.
    pub fn upsert_namespace(&mut self, name: &str, labels: sdk::Labels) {
        let id = match self.namespace_ids.get(name) {
            Some(&id) => {
                if self.namespaces[id as usize].labels.as_ref() == Some(&labels) {
                    return;
                }
                self.namespaces[id as usize].labels = Some(labels);
                id
            }
            None => {
                let id = self.namespaces.len() as u32;
                self.namespaces.push(NamespaceSlot {
                    name: name.to_string(),
                    labels: Some(labels),
                });
                self.namespace_ids.insert(name.to_string(), id);
                id
            }
        };
        self.log.push(Change::Namespace(id));
    }

    /// The labels of namespace `name`, if the cache has it.
    pub fn namespace_labels(&self, name: &str) -> Option<&sdk::Labels> {
        let id = *self.namespace_ids.get(name)?;
        self.namespaces[id as usize].labels.as_ref()
    }

    /// Removes a namespace. Returns false if the cache did not have it.
    pub fn remove_namespace(&mut self, name: &str) -> bool {
        let Some(&id) = self.namespace_ids.get(name) else {
            return false;
        };
        if self.namespaces[id as usize].labels.take().is_none() {
            return false;
        }
        self.log.push(Change::Namespace(id));
        true
    }

    /// The namespace with id `id`: its name and, unless it was removed, its labels.
    pub fn namespace(&self, id: u32) -> Option<(&str, Option<&sdk::Labels>)> {
        self.namespaces
            .get(id as usize)
            .map(|slot| (slot.name.as_str(), slot.labels.as_ref()))
    }

    /// Every namespace the cache has, with its labels.
    pub fn namespaces(&self) -> impl Iterator<Item = (&str, &sdk::Labels)> + '_ {
        self.namespaces
            .iter()
            .filter_map(|slot| slot.labels.as_ref().map(|l| (slot.name.as_str(), l)))
    }

    /// Keys of every placed pod with its node.
    pub fn placed_pods(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pods.iter().map(|(k, p)| (&**k, p.node.as_str()))
    }

    /// The Services and controllers known, by which pods without spread constraints of their
    /// own are spread.
    pub fn spread_selectors(&mut self) -> &mut SpreadSelectors {
        &mut self.spread
    }

    /// Sets the pod's default spread selector from the Services and controllers known now (none
    /// for a pod with constraints of its own, which the defaults never apply to).
    pub fn resolve_spread_selector(&self, pod: &mut sdk::Pod) {
        pod.default_spread_selector = if pod.topology_spread_constraints.is_empty() {
            self.spread.default_selector(pod)
        } else {
            None
        };
    }

    /// What changed since generation `since`, each node named once: its final state.
    pub fn delta_since(&self, since: u64) -> Delta {
        let start = since.saturating_sub(self.log_base) as usize;
        let window = self.log.get(start..).unwrap_or_default();
        let mut delta = Delta::default();
        // Walk backwards so the newest upsert or removal of a node decides what is sent; the
        // usage and detail changes older than it are part of what it sends.
        let mut nodes = NodesSeen::new(window.len());
        let mut pods_seen: std::collections::HashSet<u32> = Default::default();
        let mut namespaces_seen: std::collections::HashSet<u32> = Default::default();
        let mut volumes_seen: std::collections::HashSet<u32> = Default::default();
        for change in window.iter().rev() {
            match *change {
                Change::Upsert(id) | Change::Remove(id) => {
                    let seen = nodes.get(id);
                    if !seen.decided {
                        *seen = SeenNode {
                            decided: true,
                            ..SeenNode::default()
                        };
                        match change {
                            Change::Upsert(_) if self.node(id).is_some() => delta.upserts.push(id),
                            _ => delta.removals.push(id),
                        }
                    }
                }
                Change::Usage(id) => {
                    let seen = nodes.get(id);
                    seen.usage |= !seen.decided;
                }
                Change::Details(id, parts) => {
                    let seen = nodes.get(id);
                    if !seen.decided {
                        seen.details = seen.details.union(parts);
                    }
                }
                Change::Pod(id) => {
                    if pods_seen.insert(id) {
                        delta.pods.push(id);
                    }
                }
                Change::Namespace(id) => {
                    if namespaces_seen.insert(id) {
                        delta.namespaces.push(id);
                    }
                }
                Change::Volume(id) => {
                    if volumes_seen.insert(id) {
                        delta.volumes.push(id);
                    }
                }
            }
        }
        // A node removed after a usage or detail change is a removal, nothing else.
        for (id, seen) in nodes.in_order() {
            if seen.decided || self.node(id).is_none() {
                continue;
            }
            if seen.usage {
                delta.usage.push(id);
            }
            if !seen.details.is_empty() {
                delta.details.push((id, seen.details));
            }
        }
        delta
    }

    /// Forgets log entries every consumer has seen (all consumers are at `oldest` or later).
    pub fn compact(&mut self, oldest: u64) {
        let drop = oldest
            .saturating_sub(self.log_base)
            .min(self.log.len() as u64) as usize;
        self.log.drain(..drop);
        self.log_base += drop as u64;
    }
}

/// What an update of a known node changed, as plugins see it (its usage is the cache's).
enum NodeChange {
    None,
    /// Only details that plugins read when they say so.
    Details(sdk::wire::NodeDetails),
    Whole,
}

fn node_change(old: &sdk::NodeInfo, new: &sdk::NodeInfo) -> NodeChange {
    // Named field by field so that a field added to `NodeInfo` must be placed here.
    let sdk::NodeInfo {
        name,
        labels,
        annotations,
        taints,
        unschedulable,
        allocatable,
        usage: _,
        images,
        csi_node,
        device_pools,
    } = new;
    let whole = *name != old.name
        || *labels != old.labels
        || *annotations != old.annotations
        || *taints != old.taints
        || *unschedulable != old.unschedulable
        || *allocatable != old.allocatable;
    let details = sdk::wire::NodeDetails {
        images: *images != old.images,
        csi_node: *csi_node != old.csi_node,
        devices: *device_pools != old.device_pools,
    };
    if whole {
        NodeChange::Whole
    } else if !details.is_empty() {
        NodeChange::Details(details)
    } else {
        NodeChange::None
    }
}

/// What [`Cache::delta_since`] has met of one node, newest change first.
#[derive(Debug, Default, Clone, Copy)]
struct SeenNode {
    /// An upsert or removal was met: it sends everything older.
    decided: bool,
    usage: bool,
    details: sdk::wire::NodeDetails,
}

/// The nodes a log window names, in the order first met; indexed by a map only for a long
/// window, since most windows name a few nodes.
struct NodesSeen {
    order: Vec<(u32, SeenNode)>,
    index: Option<HashMap<u32, usize>>,
}

impl NodesSeen {
    fn new(window: usize) -> NodesSeen {
        NodesSeen {
            order: Vec::new(),
            index: (window > 64).then(HashMap::new),
        }
    }

    fn get(&mut self, id: u32) -> &mut SeenNode {
        let at = match &mut self.index {
            Some(index) => *index.entry(id).or_insert(self.order.len()),
            None => self
                .order
                .iter()
                .position(|(seen, _)| *seen == id)
                .unwrap_or(self.order.len()),
        };
        if at == self.order.len() {
            self.order.push((id, SeenNode::default()));
        }
        &mut self.order[at].1
    }

    fn in_order(&self) -> impl Iterator<Item = (u32, SeenNode)> + '_ {
        self.order.iter().copied()
    }
}

fn add_usage(usage: &mut sdk::NodeUsage, pod: &PlacedPod) {
    usage.requested.add(&pod.requests.requests);
    usage.non_zero_requested.add(&pod.requests.non_zero);
    usage.pod_count += 1;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, zone: &str) -> sdk::NodeInfo {
        sdk::NodeInfo {
            name: name.into(),
            labels: [("topology.kubernetes.io/zone", zone)]
                .into_iter()
                .collect(),
            ..Default::default()
        }
    }

    fn pod(name: &str, cpu: i64) -> sdk::Pod {
        sdk::Pod {
            namespace: "default".into(),
            name: name.into(),
            requests: sdk::Resources {
                milli_cpu: cpu,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn from_json<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> T {
        serde_json::from_value(value).unwrap()
    }

    fn local_volume(claim_ref: Option<&str>) -> core::PersistentVolume {
        let mut spec =
            serde_json::json!({"storageClassName": "local", "capacity": {"storage": "10Gi"}});
        if let Some(claim) = claim_ref {
            spec["claimRef"] = serde_json::json!({"namespace": "default", "name": claim});
        }
        from_json(serde_json::json!({"metadata": {"name": "pv-1"}, "spec": spec}))
    }

    /// A pod using claim `claim` of the WaitForFirstConsumer class `local`.
    fn claiming(cache: &mut Cache, name: &str, claim: &str) -> sdk::Pod {
        cache.upsert_claim(from_json(serde_json::json!({
            "metadata": {"name": claim, "namespace": "default", "uid": format!("uid-{claim}")},
            "spec": {"storageClassName": "local"}
        })));
        sdk::Pod {
            volume_claims: vec![sdk::VolumeClaim {
                volume: "data".into(),
                claim_name: claim.into(),
                ephemeral: false,
                claim: None,
            }],
            ..pod(name, 100)
        }
    }

    /// What VolumeRestrictions, NodeVolumeLimits and VolumeBinding's capacity check read of a
    /// pod's volumes: the cache looks each claim up (the source of its bound volume, or its
    /// class's provisioner and, for a driver that reports it, the class's capacities), and a
    /// node carries its CSINode whichever of the two arrives first.
    #[test]
    fn claims_are_looked_up_to_their_volume_source_provisioner_and_capacity() {
        let mut cache = Cache::default();
        cache.upsert_csi_node("n1", sdk::CsiNode::default());
        let n1 = cache.upsert_node(node("n1", "a"));
        let n2 = cache.upsert_node(node("n2", "a"));
        cache.upsert_csi_node("n2", sdk::CsiNode::default());
        for id in [n1, n2] {
            assert!(cache.node(id).unwrap().info.csi_node.is_some(), "node {id}");
        }
        cache.upsert_volume(from_json(serde_json::json!({
            "metadata": {"name": "pv-a"},
            "spec": {"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-a"}}
        })));
        cache.upsert_claim(from_json(serde_json::json!({
            "metadata": {"name": "bound", "namespace": "default"},
            "spec": {"volumeName": "pv-a", "accessModes": ["ReadWriteOncePod"]}
        })));
        cache.upsert_claim(from_json(serde_json::json!({
            "metadata": {"name": "waiting", "namespace": "default"},
            "spec": {"storageClassName": "ebs"}
        })));
        cache.upsert_class(from_json(serde_json::json!({
            "metadata": {"name": "ebs"}, "provisioner": "ebs.csi.aws.com"
        })));
        cache.upsert_csi_driver("ebs.csi.aws.com", true);
        let offered = sdk::StorageCapacity {
            node_topology: None,
            limit: Some(5),
        };
        cache.upsert_storage_capacity(("ns".into(), "c".into()), "ebs".into(), offered.clone());
        let claim = |name: &str| sdk::PodVolume {
            name: name.into(),
            claim_name: name.into(),
            ..sdk::PodVolume::default()
        };
        let volumes = [claim("bound"), claim("waiting"), claim("missing")];
        let resolved = cache.resolved_volumes("default", &volumes);
        let bound = &resolved[0];
        assert!(bound.claim_found && bound.bound);
        assert_eq!(
            (
                bound.plugin.as_str(),
                bound.driver.as_str(),
                bound.handle.as_str()
            ),
            (sdk::CSI_PLUGIN, "ebs.csi.aws.com", "vol-a")
        );
        assert_eq!(bound.access_modes, ["ReadWriteOncePod"]);
        let waiting = &resolved[1];
        assert!(waiting.claim_found && !waiting.bound && waiting.capacity_tracked);
        assert_eq!(waiting.provisioner, "ebs.csi.aws.com");
        assert_eq!(waiting.capacities, [offered]);
        assert!(!resolved[2].claim_found);

        let mut pod = pod("p", 100);
        pod.volumes = volumes.to_vec();
        cache.assume_pod(&pod, "n1");
        let placed = cache.existing_pods().map(|(_, _, p)| p.volumes.clone());
        assert_eq!(placed.collect::<Vec<_>>(), [resolved]);
    }

    /// The names of the volumes of class `local` no claim holds, and the selected node of
    /// `pod`'s first claim.
    fn offered(cache: &Cache, pod: &sdk::Pod) -> (Vec<String>, Option<String>) {
        let mut pod = pod.clone();
        cache.resolve_claims(&mut pod);
        let claim = pod.volume_claims[0].claim.clone().unwrap();
        let free = cache
            .class_volumes("local")
            .into_iter()
            .filter(|v| v.claim_ref.is_none())
            .map(|v| v.name.clone())
            .collect();
        (free, claim.selected_node)
    }

    #[test]
    fn a_reserved_volume_is_offered_to_no_other_claim_until_given_up_or_bound() {
        let mut cache = Cache::default();
        cache.upsert_class(from_json(serde_json::json!({
            "metadata": {"name": "local"},
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "WaitForFirstConsumer"
        })));
        cache.upsert_volume(local_volume(None));
        let first = claiming(&mut cache, "first", "c1");
        let second = claiming(&mut cache, "second", "c2");
        assert_eq!(offered(&cache, &second).0, ["pv-1"]);

        let bind_first = PodVolumes {
            static_bindings: vec![("c1".into(), "pv-1".into())],
            provisions: Vec::new(),
        };
        cache.reserve_volumes(&first, "n1", &bind_first);
        assert!(offered(&cache, &second).0.is_empty(), "held for c1");
        let held = cache.class_volumes("local")[0];
        assert_eq!(
            held.claim_ref
                .as_ref()
                .map(|r| (r.name.as_str(), r.uid.as_str())),
            Some(("c1", "uid-c1")),
            "reserved for c1"
        );

        // The binding failed: the volume is free again.
        cache.unreserve_volumes(&first.key());
        assert_eq!(offered(&cache, &second).0, ["pv-1"]);

        // Held again, then bound: the cluster's volume replaces the reservation, and giving up
        // what the pod held no longer frees it.
        cache.reserve_volumes(&first, "n1", &bind_first);
        cache.upsert_volume(local_volume(Some("c1")));
        cache.settle_volumes(&first.key());
        cache.unreserve_volumes(&first.key());
        assert!(offered(&cache, &second).0.is_empty(), "bound to c1");

        // A claim to provision names the node while it is held.
        let provision_second = PodVolumes {
            static_bindings: Vec::new(),
            provisions: vec!["c2".into()],
        };
        cache.reserve_volumes(&second, "n2", &provision_second);
        assert_eq!(offered(&cache, &second).1.as_deref(), Some("n2"));
        cache.unreserve_volumes(&second.key());
        assert_eq!(offered(&cache, &second).1, None);
    }

    #[test]
    fn an_update_that_changes_nothing_plugins_see_is_not_sent_to_them() {
        let mut cache = Cache::default();
        cache.upsert_node(node("n1", "a"));
        cache.add_pod(&pod("p1", 500), "n1");
        let id = cache.node_id("n1").unwrap();
        let since = cache.generation();
        cache.upsert_node(node("n1", "a"));
        assert!(cache.delta_since(since).upserts.is_empty(), "a heartbeat");
        assert_eq!(cache.node(id).unwrap().info.usage.requested.milli_cpu, 500);
        cache.upsert_node(node("n1", "b"));
        assert_eq!(cache.delta_since(since).upserts, [id], "relabelled");
        assert_eq!(
            cache.node(id).unwrap().info.usage.requested.milli_cpu,
            500,
            "the usage stays with the node"
        );
    }

    #[test]
    fn a_change_of_details_alone_is_told_apart_from_a_whole_upsert() {
        use sdk::wire::NodeDetails;
        let devices = NodeDetails {
            devices: true,
            ..NodeDetails::default()
        };
        let with_images = |zone: &str, image: &str| sdk::NodeInfo {
            images: vec![sdk::NodeImage {
                names: vec![image.into()],
                size_bytes: 1,
            }],
            ..node("n1", zone)
        };
        let mut cache = Cache::default();
        let id = cache.upsert_node(with_images("a", "one"));
        cache.upsert_node(node("n2", "a"));
        let since = cache.generation();

        cache.upsert_node(with_images("a", "two"));
        let delta = cache.delta_since(since);
        assert!(delta.upserts.is_empty(), "only the images changed");
        let images = NodeDetails {
            images: true,
            ..NodeDetails::default()
        };
        assert_eq!(delta.details, [(id, images)]);

        // The device pools change through a slice; usage through a placement. Each kind is
        // told once, with every detail that changed since `since`.
        let mut gpu = crate::k8s::devices::Slice {
            driver: "gpu".into(),
            pool: "n1".into(),
            generation: 1,
            slice_count: 1,
            node_name: Some("n1".into()),
            devices: vec![sdk::Device {
                name: "g0".into(),
                ..sdk::Device::default()
            }],
            ..Default::default()
        };
        let after_images = cache.generation();
        cache.upsert_resource_slice("n1-gpu", gpu.clone());
        cache.add_pod(&pod("p1", 500), "n1");
        let delta = cache.delta_since(since);
        assert!(delta.upserts.is_empty());
        assert_eq!(delta.usage, [id]);
        let both = NodeDetails {
            images: true,
            devices: true,
            ..NodeDetails::default()
        };
        assert_eq!(delta.details, [(id, both)]);
        assert_eq!(
            cache.delta_since(after_images).details,
            [(id, devices)],
            "a mirror that has the images is told of the devices alone"
        );

        // A whole change older or newer than the details sends the node whole, once.
        cache.upsert_node(with_images("b", "two"));
        let delta = cache.delta_since(since);
        assert_eq!(delta.upserts, [id]);
        assert!(delta.details.is_empty() && delta.usage.is_empty());
        let relabelled = cache.generation();
        gpu.devices.clear();
        cache.upsert_resource_slice("n1-gpu", gpu);
        assert_eq!(cache.delta_since(relabelled).details, [(id, devices)]);
        assert_eq!(cache.delta_since(since).upserts, [id]);
        assert!(cache.delta_since(since).details.is_empty());

        // A node removed after its details changed is a removal.
        cache.remove_node("n1");
        let delta = cache.delta_since(relabelled);
        assert_eq!(delta.removals, [id]);
        assert!(delta.details.is_empty() && delta.upserts.is_empty());
    }

    #[test]
    fn placed_pods_with_the_same_parts_and_requests_share_one_copy_until_the_last_leaves() {
        let mut cache = Cache::default();
        cache.upsert_node(node("n1", "a"));
        cache.upsert_node(node("n2", "b"));
        let replica = |name: &str, app: &str| sdk::Pod {
            labels: sdk::Labels::from_pairs([("app", app)]),
            ..pod(name, 100)
        };
        cache.add_pod(&replica("web-1", "web"), "n1");
        cache.add_pod(&replica("web-2", "web"), "n2");
        cache.assume_pod(&replica("web-3", "web"), "n2");
        cache.add_pod(&replica("db-1", "db"), "n1");
        assert_eq!(cache.shared_parts.len(), 2, "web's three replicas and db");
        assert_eq!(cache.shared_requests.len(), 1, "all four request 100m");
        let parts = |cache: &Cache, key: &str| {
            let id = cache.pods[key].id;
            cache.existing_pod(id).map(|(_, pod)| pod.clone())
        };
        let web = parts(&cache, "default/web-2").expect("placed");
        assert_eq!(web.labels.get("app"), Some("web"));
        assert_eq!(web, sdk::ExistingPod::of(&replica("web-2", "web"), 0));

        cache.add_pod(&replica("web-2", "db"), "n2");
        assert_eq!(
            cache.shared_parts.len(),
            2,
            "relabelled to parts already held"
        );
        assert_eq!(
            parts(&cache, "default/web-2").unwrap().labels.get("app"),
            Some("db")
        );
        assert!(cache.remove_pod("default/web-1"));
        assert!(cache.forget_pod("default/web-3"));
        assert_eq!(
            cache.shared_parts.len(),
            1,
            "web's parts leave with its last pod"
        );
        let detached = cache.detach_pod("default/db-1").expect("placed");
        cache.reattach_pod(detached);
        assert!(cache.remove_pod("default/db-1"));
        assert!(cache.remove_pod("default/web-2"));
        assert!(cache.shared_parts.is_empty());
        assert!(cache.shared_requests.is_empty());
    }

    #[test]
    fn a_detached_pod_comes_back_as_it_was_and_plugins_hear_of_both_moves() {
        let mut cache = Cache::default();
        let id = cache.upsert_node(node("n1", "a"));
        cache.add_pod(&pod("bound", 500), "n1");
        cache.assume_pod(&pod("assumed", 300), "n1");
        let before = cache.generation();
        let detached: Vec<DetachedPod> = ["default/bound", "default/assumed"]
            .into_iter()
            .filter_map(|key| cache.detach_pod(key))
            .collect();
        assert_eq!(cache.node(id).unwrap().info.usage.requested.milli_cpu, 0);
        assert!(cache.pods_on(id).is_empty());
        for pod in detached {
            cache.reattach_pod(pod);
        }
        let usage = &cache.node(id).unwrap().info.usage;
        assert_eq!((usage.requested.milli_cpu, usage.pod_count), (800, 2));
        assert!(cache.is_assumed("default/assumed"), "still only assumed");
        assert!(!cache.is_assumed("default/bound"));
        let delta = cache.delta_since(before);
        assert_eq!(delta.usage, [id]);
        assert_eq!(
            delta.pods.len(),
            2,
            "each pod's final state is sent: {delta:?}"
        );
    }

    #[test]
    fn a_node_knows_its_lowest_priority_through_moves_removals_and_a_priority_change() {
        let mut cache = Cache::default();
        let n1 = cache.upsert_node(node("n1", "a"));
        let n2 = cache.upsert_node(node("n2", "a"));
        let with_priority = |name: &str, priority: i32| sdk::Pod {
            priority,
            ..pod(name, 100)
        };
        assert!(!cache.has_pod_below(n1, i32::MAX), "an empty node");
        cache.add_pod(&with_priority("batch", 0), "n1");
        cache.add_pod(&with_priority("web", 10), "n1");
        assert!(cache.has_pod_below(n1, 1));
        assert!(!cache.has_pod_below(n1, 0));
        cache.add_pod(&with_priority("batch", 0), "n2");
        assert!(!cache.has_pod_below(n1, 10), "batch moved to n2");
        assert!(cache.has_pod_below(n1, 11));
        assert!(cache.has_pod_below(n2, 1));
        cache.add_pod(&with_priority("batch", 20), "n2");
        assert!(
            !cache.has_pod_below(n2, 20),
            "its priority changed in place"
        );
        let detached = cache.detach_pod("default/web").expect("placed");
        assert!(!cache.has_pod_below(n1, i32::MAX), "detached");
        cache.reattach_pod(detached);
        assert!(cache.has_pod_below(n1, 11), "back");
        assert!(cache.remove_pod("default/web"));
        assert!(!cache.has_pod_below(n1, i32::MAX));
        // A node that leaves and comes back finds its pods' priorities again.
        cache.remove_node("n2");
        let n2 = cache.upsert_node(node("n2", "a"));
        assert!(cache.has_pod_below(n2, 21));
        assert!(!cache.has_pod_below(n2, 20));
    }

    #[test]
    fn nominees_are_the_pods_that_outrank_or_equal_the_one_scheduled() {
        let mut cache = Cache::default();
        cache.upsert_node(node("n1", "a"));
        let nominee = |name: &str, priority: i32, node: &str| sdk::Pod {
            priority,
            nominated_node_name: node.into(),
            ..pod(name, 100)
        };
        cache.nominate(&nominee("high", 100, "n1"));
        cache.nominate(&nominee("low", 1, "n1"));
        cache.nominate(&nominee("elsewhere", 100, "gone"));
        let names = |cache: &Cache, pod: &sdk::Pod| -> Vec<String> {
            cache
                .nominees_before(pod)
                .iter()
                .map(|p| p.name.clone())
                .collect()
        };
        assert_eq!(names(&cache, &nominee("me", 50, "")), ["high"]);
        assert!(
            names(&cache, &nominee("high", 100, "n1")).is_empty(),
            "not itself"
        );
        cache.nominate(&nominee("high", 100, ""));
        assert_eq!(
            names(&cache, &nominee("me", 1, "")),
            ["low"],
            "a cleared nomination"
        );
        cache.add_pod(&nominee("low", 1, "n1"), "n1");
        assert!(
            names(&cache, &nominee("me", 1, "")).is_empty(),
            "a placed pod is no nominee"
        );
    }

    #[test]
    fn placing_and_removing_pods_updates_usage() {
        let mut cache = Cache::default();
        cache.upsert_node(node("n1", "a"));
        cache.add_pod(&pod("p1", 500), "n1");
        cache.add_pod(&pod("p2", 250), "n1");
        let id = cache.node_id("n1").unwrap();
        assert_eq!(cache.node(id).unwrap().info.usage.requested.milli_cpu, 750);
        assert_eq!(cache.node(id).unwrap().info.usage.pod_count, 2);
        assert!(cache.remove_pod("default/p1"));
        assert_eq!(cache.node(id).unwrap().info.usage.requested.milli_cpu, 250);
        assert!(
            !cache.remove_pod("default/p1"),
            "removing twice changes nothing"
        );
    }

    #[test]
    fn an_assumed_pod_is_confirmed_by_its_binding_and_only_then_safe_from_forgetting() {
        let mut cache = Cache::default();
        cache.upsert_node(node("n1", "a"));
        cache.upsert_node(node("n2", "a"));
        let cpu_on = |cache: &Cache, name: &str| {
            let id = cache.node_id(name).unwrap();
            cache.node(id).unwrap().info.usage.requested.milli_cpu
        };
        cache.assume_pod(&pod("p", 500), "n1");
        assert!(cache.is_assumed("default/p"));
        cache.add_pod(&pod("p", 500), "n1");
        assert!(
            !cache.is_assumed("default/p"),
            "seen bound where assumed: confirmed"
        );
        assert_eq!(cpu_on(&cache, "n1"), 500, "held once, not twice");
        assert!(
            !cache.forget_pod("default/p"),
            "a late bind failure frees nothing"
        );
        assert_eq!(cpu_on(&cache, "n1"), 500);

        cache.assume_pod(&pod("q", 200), "n1");
        cache.add_pod(&pod("q", 200), "n2");
        assert_eq!(
            (cpu_on(&cache, "n1"), cpu_on(&cache, "n2")),
            (500, 200),
            "bound elsewhere: moved"
        );
        cache.assume_pod(&pod("r", 100), "n2");
        assert!(cache.forget_pod("default/r"));
        assert_eq!(cpu_on(&cache, "n2"), 200);
        assert!(
            cache.remove_pod("default/p"),
            "an observed pod is removed when it goes"
        );
        assert_eq!(cpu_on(&cache, "n1"), 0);
    }

    #[test]
    fn pods_on_an_unknown_node_count_once_it_arrives() {
        let mut cache = Cache::default();
        cache.add_pod(&pod("early", 300), "late-node");
        let id = cache.upsert_node(node("late-node", "a"));
        assert_eq!(cache.node(id).unwrap().info.usage.requested.milli_cpu, 300);
        assert_eq!(cache.pod_node("default/early"), Some("late-node"));
    }

    #[test]
    fn updating_a_node_keeps_its_usage_and_moves_its_zone() {
        let mut cache = Cache::default();
        cache.upsert_node(node("n1", "a"));
        cache.upsert_node(node("n2", "a"));
        cache.add_pod(&pod("p", 100), "n1");
        let id = cache.upsert_node(node("n1", "b"));
        assert_eq!(cache.node(id).unwrap().info.usage.requested.milli_cpu, 100);
        cache.refresh_listing();
        let listing = cache.listing().to_vec();
        assert_eq!(listing.len(), 2);
    }

    #[test]
    fn delta_names_each_changed_node_once_with_its_final_state() {
        let mut cache = Cache::default();
        let a = cache.upsert_node(node("a", "z"));
        let b = cache.upsert_node(node("b", "z"));
        let since = cache.generation();
        cache.add_pod(&pod("p1", 1), "a");
        cache.add_pod(&pod("p2", 1), "a");
        cache.add_pod(&pod("p3", 1), "b");
        cache.upsert_node(node("b", "y"));
        cache.remove_node("a");
        let delta = cache.delta_since(since);
        assert_eq!(delta.removals, vec![a]);
        assert_eq!(delta.upserts, vec![b]);
        assert!(delta.usage.is_empty(), "{delta:?}");

        let since = cache.generation();
        cache.add_pod(&pod("p4", 1), "b");
        assert_eq!(cache.delta_since(since).usage, vec![b]);
        cache.compact(since);
        assert_eq!(
            cache.delta_since(since).usage,
            vec![b],
            "compaction keeps unseen entries"
        );
    }
}
