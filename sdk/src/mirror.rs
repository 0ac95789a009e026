//! A plugin instance's copy of the cluster's nodes, with a compact summary of each node beside it.
//!
//! A filter or score over a batch touches every node of the batch once per cycle. Reading the full
//! [`NodeInfo`] means several cache lines and pointer chases per node (labels, taints, resources),
//! so the mirror also keeps a fixed-size [`NodeSummary`] per node in one dense array, and interns
//! taint lists so that nodes with the same taints share one id. Batch overrides
//! ([`crate::FilterPlugin::filter_batch`], [`crate::ScorePlugin::score_batch`]) read those and
//! compute per distinct taint set instead of per node.

use crate::helpers::{FastMap, Interner};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use crate::types::{
    ExistingPod, ExistingPodRef, Failure, Labels, NodeId, NodeInfo, NodeUsage, PodId, Resources,
    Taint, VolumeInfo,
};

/// The resources and flags of one node in 88 bytes: what the default plugins read per node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeSummary {
    /// `status.allocatable` cpu in millicores.
    pub allocatable_milli_cpu: i64,
    /// `status.allocatable` memory in bytes.
    pub allocatable_memory: i64,
    /// `status.allocatable` ephemeral storage in bytes.
    pub allocatable_ephemeral_storage: i64,
    /// `status.allocatable` pod slots.
    pub allocatable_pods: i64,
    /// Sum of the pods' effective cpu requests, in millicores.
    pub requested_milli_cpu: i64,
    /// Sum of the pods' effective memory requests, in bytes.
    pub requested_memory: i64,
    /// Sum of the pods' effective ephemeral-storage requests, in bytes.
    pub requested_ephemeral_storage: i64,
    /// Sum of the pods' cpu requests counting a missing one as 100m.
    pub non_zero_requested_milli_cpu: i64,
    /// Sum of the pods' memory requests counting a missing one as 200Mi.
    pub non_zero_requested_memory: i64,
    /// Pods on the node.
    pub pod_count: u32,
    /// The node's taint list as an id: equal ids mean equal lists (see [`Nodes::taint_set`]).
    pub taint_set: u32,
    /// `spec.unschedulable`.
    pub unschedulable: bool,
    /// True when the node lists any scalar (extended) resource in allocatable or usage: the summary
    /// then does not tell the whole story and the full [`NodeInfo`] must be read for those.
    pub has_scalar_resources: bool,
    /// The mirror has the node: [`Nodes::summary`] reads it here, in the line it reads next,
    /// rather than from a list of its own.
    present: bool,
}

impl NodeSummary {
    fn of(node: &NodeInfo, taint_set: u32) -> Self {
        let mut summary = NodeSummary {
            allocatable_milli_cpu: node.allocatable.milli_cpu,
            allocatable_memory: node.allocatable.memory,
            allocatable_ephemeral_storage: node.allocatable.ephemeral_storage,
            allocatable_pods: node.allocatable.pods,
            taint_set,
            unschedulable: node.unschedulable,
            present: true,
            ..NodeSummary::default()
        };
        summary.set_usage(&node.allocatable, &node.usage);
        summary
    }

    fn set_usage(&mut self, allocatable: &Resources, usage: &NodeUsage) {
        self.requested_milli_cpu = usage.requested.milli_cpu;
        self.requested_memory = usage.requested.memory;
        self.requested_ephemeral_storage = usage.requested.ephemeral_storage;
        self.non_zero_requested_milli_cpu = usage.non_zero_requested.milli_cpu;
        self.non_zero_requested_memory = usage.non_zero_requested.memory;
        self.pod_count = usage.pod_count;
        self.has_scalar_resources = !allocatable.scalar.is_empty()
            || !usage.requested.scalar.is_empty()
            || !usage.non_zero_requested.scalar.is_empty();
    }
}

/// The id of the empty taint list.
pub const NO_TAINTS: u32 = 0;

/// How many of the latest node changes [`Nodes::changed_since`] can tell: past this many, work
/// over a few changed nodes would cost about as much as starting over.
const CHANGES_KEPT: usize = 1024;

/// The nodes a plugin instance knows, by the ids the host gave them.
///
/// Ids of taint sets and label values stay valid while the mirror does not change, which holds
/// for the whole of a scheduling cycle (the host only updates mirrors between cycles).
pub struct Nodes {
    infos: Vec<Option<NodeInfo>>,
    /// Whether each id holds a node: what batch filters check per node, one byte each instead of
    /// a cache line of the large `infos` entry.
    present: Vec<bool>,
    summaries: Vec<NodeSummary>,
    live: usize,
    /// The live nodes that are cordoned: few in a healthy cluster, so a plugin can list them.
    cordoned: BTreeSet<u32>,
    /// Interned taint lists; index [`NO_TAINTS`] is the empty list.
    taint_sets: Vec<Vec<Taint>>,
    taint_set_ids: HashMap<Vec<Taint>, u32>,
    /// Per taint set but [`NO_TAINTS`]: the live nodes that have it. Tainted nodes are usually a
    /// minority, so a plugin can name the nodes a pod's tolerations leave out.
    taint_set_members: Vec<Vec<u32>>,
    /// Per node id: its position in its taint set's entry of `taint_set_members`.
    member_positions: Vec<u32>,
    /// Present when the plugin asked for it ([`crate::Plugin::INDEXES_LABELS`]).
    labels: Option<LabelIndex>,
    /// How many times the label index was rebuilt ([`Nodes::label_ids_epoch`]).
    label_rebuilds: u64,
    /// Changes whenever a node is added, replaced or removed.
    generation: u64,
    /// The node each of the latest generations changed, oldest first ([`Nodes::changed_since`]).
    changes: VecDeque<NodeId>,
    /// The pods on the nodes, when the plugin reads them ([`crate::Plugin::READS_EXISTING_PODS`]).
    pods: PodMirror,
    /// Namespace labels by name, when the plugin reads them ([`crate::Plugin::READS_NAMESPACES`]).
    namespaces: HashMap<String, Labels>,
    /// PersistentVolumes, when the plugin reads them ([`crate::Plugin::READS_VOLUMES`]).
    volumes: VolumeMirror,
}

/// PersistentVolumes by name, and per storage class the names of its volumes, in name order.
#[derive(Default)]
struct VolumeMirror {
    by_name: HashMap<String, Arc<VolumeInfo>>,
    by_class: HashMap<String, BTreeSet<String>>,
}

/// Existing pods by id, and per node the ids of its pods.
///
/// A slot holds the pod's node and its other parts, which pods that differ only in their node
/// (the replicas of one Deployment, in the parts the plugin reads) share: in a large cluster's
/// dump a slot the size of the whole pod per plugin was the largest item of the heap.
#[derive(Default)]
struct PodMirror {
    slots: Vec<PodSlot>,
    /// Every distinct set of parts a slot holds (a pod with node 0), held once.
    shared: Interner<ExistingPod>,
    /// Per node id: its pods' ids, in no particular order.
    on_node: Vec<Vec<PodId>>,
    /// Per pod id: its position in its node's entry of `on_node`.
    positions: Vec<u32>,
    live: usize,
}

#[derive(Default)]
struct PodSlot {
    node: NodeId,
    /// `None`: no pod has this id. The pod's node is in `node`; the shared copy's is 0.
    parts: Option<Arc<ExistingPod>>,
}

/// The pod in `slot`, if any, on its node.
fn lend(slot: &PodSlot) -> Option<ExistingPodRef<'_>> {
    let parts = slot.parts.as_ref()?;
    Some(ExistingPodRef {
        node: slot.node,
        ..parts.view()
    })
}

impl PodMirror {
    fn upsert(&mut self, id: PodId, pod: ExistingPod) {
        self.remove(id);
        let slot = id as usize;
        if slot >= self.slots.len() {
            self.slots.resize_with(slot + 1, PodSlot::default);
            self.positions.resize(slot + 1, 0);
        }
        let node = pod.node;
        let parts = ExistingPod { node: 0, ..pod };
        let parts = self.shared.intern(parts);
        let on = node as usize;
        if on >= self.on_node.len() {
            self.on_node.resize_with(on + 1, Vec::new);
        }
        self.positions[slot] = self.on_node[on].len() as u32;
        self.on_node[on].push(id);
        self.slots[slot] = PodSlot {
            node,
            parts: Some(parts),
        };
        self.live += 1;
    }

    fn get(&self, id: PodId) -> Option<ExistingPodRef<'_>> {
        lend(self.slots.get(id as usize)?)
    }

    /// Takes pod `id` out; true when there was one.
    fn remove(&mut self, id: PodId) -> bool {
        let Some(slot) = self.slots.get_mut(id as usize) else {
            return false;
        };
        let Some(parts) = slot.parts.take() else {
            return false;
        };
        self.shared.release(parts);
        let members = &mut self.on_node[slot.node as usize];
        let position = self.positions[id as usize] as usize;
        members.swap_remove(position);
        if let Some(&moved) = members.get(position) {
            self.positions[moved as usize] = position as u32;
        }
        self.live -= 1;
        true
    }

    fn remove_node(&mut self, node: NodeId) {
        while let Some(&id) = self.on_node.get(node as usize).and_then(|ids| ids.last()) {
            self.remove(id);
        }
    }
}

impl Default for Nodes {
    fn default() -> Self {
        Nodes::new(false)
    }
}

/// Per label key, every node's value as a small integer: a label test is then one table lookup.
#[derive(Default)]
struct LabelIndex {
    keys: FastMap<String, usize>,
    columns: Vec<LabelColumn>,
    /// Values interned over all keys, live or not; compared with `live_pairs` to compact.
    interned: usize,
    live_pairs: usize,
}

#[derive(Default)]
struct LabelColumn {
    /// Value id 0 is "no such label"; value `i` is `texts[i - 1]`.
    ids: FastMap<String, u32>,
    texts: Vec<String>,
    /// Per node slot: the id of the node's value.
    of_node: Vec<u32>,
    /// Per value id: the nodes that have it, in no particular order (entry 0 stays empty).
    members: Vec<Vec<NodeId>>,
    /// Per node slot that has the label: its position in its value's entry of `members`.
    member_positions: Vec<u32>,
}

impl LabelIndex {
    fn add(&mut self, slot: usize, node: &NodeInfo, slots: usize) {
        for (key, value) in node.labels.iter() {
            let column = match self.keys.get(key) {
                Some(&c) => c,
                None => {
                    self.keys.insert(key.to_string(), self.columns.len());
                    self.columns.push(LabelColumn::default());
                    self.columns.len() - 1
                }
            };
            let column = &mut self.columns[column];
            let id = match column.ids.get(value) {
                Some(&id) => id,
                None => {
                    column.texts.push(value.to_string());
                    let id = column.texts.len() as u32;
                    column.ids.insert(value.to_string(), id);
                    self.interned += 1;
                    id
                }
            };
            if column.of_node.len() < slots {
                column.of_node.resize(slots, 0);
                column.member_positions.resize(slots, 0);
            }
            column.of_node[slot] = id;
            if column.members.len() <= id as usize {
                column.members.resize_with(id as usize + 1, Vec::new);
            }
            column.member_positions[slot] = column.members[id as usize].len() as u32;
            column.members[id as usize].push(slot as NodeId);
            self.live_pairs += 1;
        }
    }

    fn clear(&mut self, slot: usize, node: &NodeInfo) {
        for (key, _) in node.labels.iter() {
            if let Some(&c) = self.keys.get(key) {
                let column = &mut self.columns[c];
                let id = std::mem::take(&mut column.of_node[slot]) as usize;
                let position = column.member_positions[slot] as usize;
                let members = &mut column.members[id];
                members.swap_remove(position);
                if let Some(&moved) = members.get(position) {
                    column.member_positions[moved as usize] = position as u32;
                }
                self.live_pairs -= 1;
            }
        }
    }
}

/// A label key's column in the mirror's label index ([`Nodes::label_column`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LabelColumnId(usize);

/// A condition on one label, worked out once per distinct value of that label in the mirror, so
/// that checking a node is one table lookup. Made by [`Nodes::label_test`]; valid for the cycle.
#[derive(Clone, Debug)]
pub struct LabelTest {
    /// `None` when no node has the label.
    column: Option<usize>,
    /// Indexed by value id; entry 0 is the verdict for a node without the label.
    holds: Vec<bool>,
}

impl Nodes {
    /// An empty mirror; `index_labels` keeps the label index that [`Nodes::label_test`] needs.
    pub fn new(index_labels: bool) -> Self {
        Nodes {
            infos: Vec::new(),
            present: Vec::new(),
            summaries: Vec::new(),
            live: 0,
            cordoned: BTreeSet::new(),
            taint_sets: vec![Vec::new()],
            taint_set_ids: HashMap::from([(Vec::new(), NO_TAINTS)]),
            taint_set_members: vec![Vec::new()],
            member_positions: Vec::new(),
            labels: index_labels.then(LabelIndex::default),
            label_rebuilds: 0,
            generation: 0,
            changes: VecDeque::new(),
            pods: PodMirror::default(),
            namespaces: HashMap::new(),
            volumes: VolumeMirror::default(),
        }
    }

    /// Compiles `test` on the value of label `key` (`None` when a node lacks it) into a table
    /// over the values the mirror's nodes have: `test` runs once per distinct value, not per node.
    ///
    /// # Panics
    /// When the plugin did not set [`crate::Plugin::INDEXES_LABELS`].
    pub fn label_test(&self, key: &str, test: impl Fn(Option<&str>) -> bool) -> LabelTest {
        let index = self
            .labels
            .as_ref()
            .expect("Nodes::label_test needs `const INDEXES_LABELS: bool = true` in the plugin");
        let column = index.keys.get(key).copied();
        let mut holds = vec![test(None)];
        if let Some(c) = column {
            holds.extend(index.columns[c].texts.iter().map(|v| test(Some(v))));
        }
        LabelTest { column, holds }
    }

    /// The nodes whose label `key` is `value`, in no particular order: how a plugin finds the
    /// nodes of one topology domain without looking at every node.
    ///
    /// # Panics
    /// When the plugin did not set [`crate::Plugin::INDEXES_LABELS`].
    pub fn nodes_with_label(&self, key: &str, value: &str) -> &[NodeId] {
        let index = self.labels.as_ref().expect(
            "Nodes::nodes_with_label needs `const INDEXES_LABELS: bool = true` in the plugin",
        );
        index
            .keys
            .get(key)
            .map(|&c| &index.columns[c])
            .and_then(|column| {
                let id = *column.ids.get(value)? as usize;
                column.members.get(id).map(Vec::as_slice)
            })
            .unwrap_or(&[])
    }

    /// The column of label `key` in the label index, `None` when no node ever had it: a node's
    /// value of it is then one array read ([`Nodes::label_value`]), and per-value state of a
    /// plugin fits a vector of [`Nodes::label_value_bound`] entries.
    ///
    /// # Panics
    /// When the plugin did not set [`crate::Plugin::INDEXES_LABELS`].
    pub fn label_column(&self, key: &str) -> Option<LabelColumnId> {
        let index = self
            .labels
            .as_ref()
            .expect("Nodes::label_column needs `const INDEXES_LABELS: bool = true` in the plugin");
        index.keys.get(key).map(|&c| LabelColumnId(c))
    }

    /// Node `id`'s value of the label of `column` as a small integer: 0 when it lacks the label
    /// (or the mirror lacks the node), else 1 up to [`Nodes::label_value_bound`] (excluded). Ids
    /// stay valid while the mirror does not change.
    #[inline]
    pub fn label_value(&self, column: LabelColumnId, id: NodeId) -> u32 {
        self.label_values(column)
            .get(id as usize)
            .copied()
            .unwrap_or(0)
    }

    /// Every node's value id of `column` ([`Nodes::label_value`]), indexed by node id: a loop
    /// over many nodes reads this slice instead of finding the column again for each node, which
    /// as WebAssembly costs several loads and bounds checks per node. Ids past its end have no
    /// such label.
    pub fn label_values(&self, column: LabelColumnId) -> &[u32] {
        self.labels
            .as_ref()
            .map_or(&[], |index| &index.columns[column.0].of_node)
    }

    /// One past the largest value id of `column`.
    pub fn label_value_bound(&self, column: LabelColumnId) -> usize {
        self.labels
            .as_ref()
            .map_or(1, |index| index.columns[column.0].texts.len() + 1)
    }

    /// The text of value id `value` of `column` (`None` for 0, which means no label).
    pub fn label_value_text(&self, column: LabelColumnId, value: u32) -> Option<&str> {
        let index = self.labels.as_ref()?;
        let texts = &index.columns[column.0].texts;
        texts
            .get((value as usize).checked_sub(1)?)
            .map(String::as_str)
    }

    /// The value id of text `value` in `column` (what [`Nodes::label_value`] gives the nodes
    /// with that value), `None` when no node has it: a plugin that keeps per-value counts by text
    /// finds the nodes of each with [`Nodes::nodes_with_label_value`] and no string hashing per
    /// key.
    pub fn label_value_id(&self, column: LabelColumnId, value: &str) -> Option<u32> {
        let index = self.labels.as_ref()?;
        index.columns[column.0].ids.get(value).copied()
    }

    /// A number that stays the same for as long as every label column id and value id keeps the
    /// key and text it stands for. Ids are only added as nodes bring new labels, except when the
    /// index drops the values of nodes long gone, which numbers them again and changes this: a
    /// plugin may keep what it worked out per value id across cycles while this holds.
    pub fn label_ids_epoch(&self) -> u64 {
        self.label_rebuilds
    }

    /// The nodes whose value of `column` is `value` ([`Nodes::nodes_with_label`] by value id).
    pub fn nodes_with_label_value(&self, column: LabelColumnId, value: u32) -> &[NodeId] {
        self.labels
            .as_ref()
            .and_then(|index| index.columns[column.0].members.get(value as usize))
            .map_or(&[], Vec::as_slice)
    }

    /// Whether node `id` passes `test` (a node the mirror lacks counts as having no labels).
    #[inline]
    pub fn passes(&self, id: NodeId, test: &LabelTest) -> bool {
        let value = match (test.column, &self.labels) {
            (Some(c), Some(index)) => index.columns[c]
                .of_node
                .get(id as usize)
                .copied()
                .unwrap_or(0),
            _ => 0,
        };
        test.holds[value as usize]
    }
}

impl Nodes {
    /// The node with id `id`, if the mirror has it.
    #[inline]
    pub fn get(&self, id: NodeId) -> Option<&NodeInfo> {
        self.infos.get(id as usize).and_then(Option::as_ref)
    }

    /// A number that changes whenever a node is added, replaced or removed (not on usage
    /// updates): label tests and taint-set ids made at one generation hold until it changes.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The nodes added, replaced or removed since generation `generation` (each once per change,
    /// oldest first), or `None` when that is too long ago to tell: a plugin that worked something
    /// out over every node then updates it for these alone instead of starting over.
    pub fn changed_since(&self, generation: u64) -> Option<impl Iterator<Item = NodeId> + '_> {
        let back = self.generation.checked_sub(generation)?;
        let skip = (self.changes.len() as u64).checked_sub(back)?;
        Some(self.changes.iter().skip(skip as usize).copied())
    }

    /// A new generation, changed by node `id`.
    fn changed(&mut self, id: NodeId) {
        self.generation += 1;
        if self.changes.len() == CHANGES_KEPT {
            self.changes.pop_front();
        }
        self.changes.push_back(id);
    }

    /// One past the largest node id the mirror has held. Ids are small integers the host reuses,
    /// so per-node state of a plugin fits a vector of this length.
    pub fn id_bound(&self) -> usize {
        self.infos.len()
    }

    /// The ids of the nodes in the mirror, in increasing order.
    pub fn ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.present
            .iter()
            .enumerate()
            .filter(|(_, present)| **present)
            .map(|(id, _)| id as NodeId)
    }

    /// True when the mirror has node `id`.
    #[inline]
    pub fn contains(&self, id: NodeId) -> bool {
        self.present.get(id as usize).copied().unwrap_or(false)
    }

    /// The summary of node `id`, if the mirror has it.
    #[inline]
    pub fn summary(&self, id: NodeId) -> Option<&NodeSummary> {
        self.summaries.get(id as usize).filter(|s| s.present)
    }

    /// The taint list a [`NodeSummary::taint_set`] id stands for.
    pub fn taint_set(&self, set: u32) -> &[Taint] {
        &self.taint_sets[set as usize]
    }

    /// How many taint-set ids exist: every [`NodeSummary::taint_set`] is below this, so a plugin can
    /// keep a per-set table of this length.
    pub fn taint_set_count(&self) -> usize {
        self.taint_sets.len()
    }

    /// The ids of the nodes whose taint list is `set`, in no particular order; always empty for
    /// [`NO_TAINTS`] (untainted nodes are not listed).
    pub fn nodes_with_taint_set(&self, set: u32) -> &[NodeId] {
        self.taint_set_members
            .get(set as usize)
            .map_or(&[], Vec::as_slice)
    }

    /// How many of the mirror's nodes are cordoned (`unschedulable`).
    pub fn cordoned(&self) -> usize {
        self.cordoned.len()
    }

    /// The ids of the cordoned nodes, in increasing order.
    pub fn cordoned_ids(&self) -> impl ExactSizeIterator<Item = NodeId> + '_ {
        self.cordoned.iter().copied()
    }

    /// How many nodes the mirror holds.
    pub fn len(&self) -> usize {
        self.live
    }

    /// True when the mirror holds no node.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// The existing pod with id `id`.
    pub fn pod(&self, id: PodId) -> Option<ExistingPodRef<'_>> {
        self.pods.get(id)
    }

    /// Every existing pod with its id, in id order (empty unless the plugin reads existing pods).
    pub fn pods(&self) -> impl Iterator<Item = (PodId, ExistingPodRef<'_>)> + '_ {
        self.pods
            .slots
            .iter()
            .enumerate()
            .filter_map(|(id, slot)| Some((id as PodId, lend(slot)?)))
    }

    /// The pods on node `node`, in no particular order.
    pub fn pods_on(&self, node: NodeId) -> impl Iterator<Item = (PodId, ExistingPodRef<'_>)> + '_ {
        self.pods
            .on_node
            .get(node as usize)
            .into_iter()
            .flatten()
            .filter_map(|&id| self.pod(id).map(|pod| (id, pod)))
    }

    /// Number of existing pods in the mirror.
    pub fn pod_count(&self) -> usize {
        self.pods.live
    }

    /// The labels of namespace `name`, if the mirror has it (only when the plugin reads namespaces).
    pub fn namespace_labels(&self, name: &str) -> Option<&Labels> {
        self.namespaces.get(name)
    }

    /// Every namespace the mirror has, with its labels.
    pub fn namespaces(&self) -> impl Iterator<Item = (&str, &Labels)> + '_ {
        self.namespaces
            .iter()
            .map(|(name, labels)| (name.as_str(), labels))
    }

    pub(crate) fn upsert_pod(&mut self, id: PodId, pod: ExistingPod) {
        self.pods.upsert(id, pod);
    }

    /// Takes pod `id` out of the mirror; true when it was there.
    pub(crate) fn remove_pod(&mut self, id: PodId) -> bool {
        self.pods.remove(id)
    }

    /// The volumes of storage class `class` the mirror has, in name order (only when the plugin
    /// reads volumes).
    pub fn class_volumes<'a>(&'a self, class: &str) -> impl Iterator<Item = &'a VolumeInfo> + 'a {
        self.volumes
            .by_class
            .get(class)
            .into_iter()
            .flatten()
            .filter_map(|name| self.volumes.by_name.get(name).map(Arc::as_ref))
    }

    /// The volume `name`, if the mirror has it.
    pub fn volume(&self, name: &str) -> Option<&VolumeInfo> {
        self.volumes.by_name.get(name).map(Arc::as_ref)
    }

    /// Adds a volume whose name the mirror does not have (the driver removes the old one first).
    pub(crate) fn insert_volume(&mut self, volume: Arc<VolumeInfo>) {
        self.volumes
            .by_class
            .entry(volume.storage_class_name.clone())
            .or_default()
            .insert(volume.name.clone());
        self.volumes.by_name.insert(volume.name.clone(), volume);
    }

    /// Removes the volume `name`, returning it if the mirror had it.
    pub(crate) fn remove_volume(&mut self, name: &str) -> Option<Arc<VolumeInfo>> {
        let old = self.volumes.by_name.remove(name)?;
        if let Some(names) = self.volumes.by_class.get_mut(&old.storage_class_name) {
            names.remove(name);
            if names.is_empty() {
                self.volumes.by_class.remove(&old.storage_class_name);
            }
        }
        Some(old)
    }

    pub(crate) fn upsert_namespace(&mut self, name: String, labels: Labels) {
        self.namespaces.insert(name, labels);
    }

    pub(crate) fn remove_namespace(&mut self, name: &str) {
        self.namespaces.remove(name);
    }

    /// The failure a plugin reports for an id the host never sent (a host bug, reported as an
    /// error rather than guessed around).
    pub fn unknown(id: NodeId) -> Failure {
        Failure::error(format!("node id {id} is not in the plugin's mirror"))
    }

    pub(crate) fn upsert(&mut self, id: u32, node: NodeInfo) {
        let slot = id as usize;
        self.changed(id);
        if slot >= self.infos.len() {
            self.infos.resize_with(slot + 1, || None);
            self.present.resize(slot + 1, false);
            self.summaries.resize(slot + 1, NodeSummary::default());
            self.member_positions.resize(slot + 1, 0);
        }
        if self.present[slot] {
            self.leave_taint_set(id);
        }
        let taint_set = self.intern_taints(&node.taints);
        self.join_taint_set(id, taint_set);
        if node.unschedulable {
            self.cordoned.insert(id);
        } else {
            self.cordoned.remove(&id);
        }
        self.summaries[slot] = NodeSummary::of(&node, taint_set);
        if let Some(index) = &mut self.labels {
            if let Some(old) = &self.infos[slot] {
                index.clear(slot, old);
            }
            index.add(slot, &node, self.infos.len());
        }
        if self.infos[slot].replace(node).is_none() {
            self.live += 1;
        }
        self.present[slot] = true;
        self.compact_taint_sets_if_sparse();
        self.compact_labels_if_sparse();
    }

    pub(crate) fn remove(&mut self, id: u32) {
        if let Some(slot) = self.infos.get_mut(id as usize) {
            if let Some(old) = slot.take() {
                self.leave_taint_set(id);
                self.present[id as usize] = false;
                self.summaries[id as usize].present = false;
                self.cordoned.remove(&id);
                self.live -= 1;
                self.changed(id);
                if let Some(index) = &mut self.labels {
                    index.clear(id as usize, &old);
                }
                // The host removes a node's pods first; a mirror never keeps pods on a node it lost.
                self.pods.remove_node(id);
            }
        }
    }

    /// Values of removed or relabelled nodes stay interned; once they outnumber the live label
    /// pairs, the index is rebuilt from the live nodes.
    fn compact_labels_if_sparse(&mut self) {
        let Some(index) = &self.labels else { return };
        if index.interned <= 2 * index.live_pairs + 1024 {
            return;
        }
        let mut rebuilt = LabelIndex::default();
        for (slot, node) in self.infos.iter().enumerate() {
            if let Some(node) = node {
                rebuilt.add(slot, node, self.infos.len());
            }
        }
        self.labels = Some(rebuilt);
        self.label_rebuilds += 1;
    }

    pub(crate) fn update_usage(&mut self, id: u32, usage: NodeUsage) {
        if let Some(Some(node)) = self.infos.get_mut(id as usize) {
            self.summaries[id as usize].set_usage(&node.allocatable, &usage);
            node.usage = usage;
        }
    }

    fn intern_taints(&mut self, taints: &[Taint]) -> u32 {
        if taints.is_empty() {
            return NO_TAINTS;
        }
        if let Some(&id) = self.taint_set_ids.get(taints) {
            return id;
        }
        let id = self.taint_sets.len() as u32;
        self.taint_sets.push(taints.to_vec());
        self.taint_set_ids.insert(taints.to_vec(), id);
        self.taint_set_members.push(Vec::new());
        id
    }

    fn join_taint_set(&mut self, id: u32, set: u32) {
        if set != NO_TAINTS {
            let members = &mut self.taint_set_members[set as usize];
            self.member_positions[id as usize] = members.len() as u32;
            members.push(id);
        }
    }

    /// Takes the live node `id` out of its taint set's members.
    fn leave_taint_set(&mut self, id: u32) {
        let set = self.summaries[id as usize].taint_set;
        if set == NO_TAINTS {
            return;
        }
        let members = &mut self.taint_set_members[set as usize];
        let position = self.member_positions[id as usize] as usize;
        members.swap_remove(position);
        if let Some(&moved) = members.get(position) {
            self.member_positions[moved as usize] = position as u32;
        }
    }

    /// Taint lists of removed or changed nodes stay interned; once they outnumber the nodes, the
    /// table is rebuilt from the live nodes so churn of one-off taints cannot grow it without bound.
    fn compact_taint_sets_if_sparse(&mut self) {
        if self.taint_sets.len() <= 2 * self.live + 64 {
            return;
        }
        self.taint_sets.truncate(1);
        self.taint_set_ids.clear();
        self.taint_set_ids.insert(Vec::new(), NO_TAINTS);
        self.taint_set_members.truncate(1);
        for slot in 0..self.infos.len() {
            let Some(node) = self.infos[slot].take() else {
                continue;
            };
            let set = self.intern_taints(&node.taints);
            self.summaries[slot].taint_set = set;
            self.join_taint_set(slot as u32, set);
            self.infos[slot] = Some(node);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, taints: &[(&str, &str)]) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            taints: taints
                .iter()
                .map(|(key, value)| Taint {
                    key: key.to_string(),
                    value: value.to_string(),
                    effect: "NoSchedule".into(),
                })
                .collect(),
            ..NodeInfo::default()
        }
    }

    #[test]
    fn the_nodes_changed_since_a_generation_are_told_while_it_is_recent() {
        let mut nodes = Nodes::default();
        let since = |nodes: &Nodes, generation| {
            nodes
                .changed_since(generation)
                .map(|changed| changed.collect::<Vec<_>>())
        };
        nodes.upsert(3, node("a", &[]));
        let start = nodes.generation();
        assert_eq!(since(&nodes, start), Some(vec![]));
        nodes.upsert(5, node("b", &[]));
        nodes.remove(3);
        nodes.remove(3); // not there: no change
        nodes.upsert(5, node("b", &[("dedicated", "gpu")]));
        assert_eq!(since(&nodes, start), Some(vec![5, 3, 5]));
        assert_eq!(since(&nodes, start + 2), Some(vec![5]));
        assert_eq!(
            since(&nodes, nodes.generation() + 1),
            None,
            "a generation to come"
        );
        for i in 0..CHANGES_KEPT as u32 {
            nodes.upsert(i % 7, node("c", &[]));
        }
        assert_eq!(since(&nodes, start), None, "more changes than are kept");
        let kept = since(&nodes, nodes.generation() - CHANGES_KEPT as u64).unwrap();
        assert_eq!(kept.len(), CHANGES_KEPT);
        assert_eq!(kept[..3], [0, 1, 2]);
    }

    #[test]
    fn cordoned_nodes_are_tracked_through_replacements_and_removals() {
        let mut nodes = Nodes::default();
        let cordoned = |name: &str| NodeInfo {
            unschedulable: true,
            ..node(name, &[])
        };
        nodes.upsert(0, cordoned("a"));
        nodes.upsert(1, node("b", &[]));
        nodes.upsert(2, cordoned("c"));
        assert_eq!(nodes.cordoned(), 2);
        nodes.upsert(0, node("a", &[]));
        nodes.upsert(1, cordoned("b"));
        nodes.upsert(1, cordoned("b"));
        assert_eq!(nodes.cordoned(), 2, "uncordoned a, cordoned b (twice)");
        assert_eq!(nodes.cordoned_ids().collect::<Vec<_>>(), [1, 2]);
        nodes.remove(2);
        nodes.remove(2);
        assert_eq!(nodes.cordoned(), 1);
        assert_eq!(nodes.cordoned_ids().collect::<Vec<_>>(), [1]);
    }

    /// Nodes 0 and 5 tainted gpu=x, 2 gpu=y, 3 untainted.
    fn two_taint_sets() -> Nodes {
        let mut nodes = Nodes::default();
        nodes.upsert(0, node("a", &[("gpu", "x")]));
        nodes.upsert(5, node("b", &[("gpu", "x")]));
        nodes.upsert(2, node("c", &[("gpu", "y")]));
        nodes.upsert(3, node("d", &[]));
        nodes
    }

    #[test]
    fn nodes_with_equal_taints_share_a_taint_set() {
        let nodes = two_taint_sets();
        let set = |id| nodes.summary(id).unwrap().taint_set;
        assert_eq!(set(0), set(5));
        assert_ne!(set(0), set(2));
        assert_eq!(set(3), NO_TAINTS);
        assert_eq!(nodes.taint_set(set(2))[0].value, "y");
        assert!(nodes.summary(1).is_none(), "a gap in the ids is not a node");
        assert_eq!(nodes.len(), 4);
    }

    #[test]
    fn churn_of_one_off_taints_does_not_grow_the_table_without_bound() {
        let mut nodes = Nodes::default();
        for round in 0..1_000 {
            let value = format!("v{round}");
            nodes.upsert(round % 3, node("n", &[("k", value.as_str())]));
        }
        assert!(nodes.taint_set_count() <= 2 * 3 + 64 + 1);
        for id in 0..3 {
            let summary = nodes.summary(id).unwrap();
            assert_eq!(
                nodes.taint_set(summary.taint_set),
                nodes.get(id).unwrap().taints.as_slice(),
                "node {id} still points at its own taints after compaction"
            );
        }
    }

    /// Every taint set's listed nodes are exactly the live nodes whose summary has that set.
    fn assert_members_match_summaries(nodes: &Nodes, when: &str) {
        for set in 0..nodes.taint_set_count() as u32 {
            let mut listed = nodes.nodes_with_taint_set(set).to_vec();
            listed.sort_unstable();
            let expected: Vec<u32> = (0..nodes.infos.len() as u32)
                .filter(|_| set != NO_TAINTS)
                .filter(|&id| nodes.summary(id).is_some_and(|s| s.taint_set == set))
                .collect();
            assert_eq!(listed, expected, "taint set {set} {when}");
        }
    }

    #[test]
    fn each_taint_set_lists_its_nodes_through_retaints_removals_and_compaction() {
        let mut nodes = two_taint_sets();
        let gpu_x = nodes.summary(0).unwrap().taint_set;
        let mut listed = nodes.nodes_with_taint_set(gpu_x).to_vec();
        listed.sort_unstable();
        assert_eq!(listed, [0, 5]);
        assert!(nodes.nodes_with_taint_set(NO_TAINTS).is_empty());
        assert_members_match_summaries(&nodes, "after adds");
        nodes.upsert(0, node("a", &[]));
        assert_eq!(nodes.nodes_with_taint_set(gpu_x), [5]);
        nodes.remove(5);
        assert!(nodes.nodes_with_taint_set(gpu_x).is_empty());
        assert_members_match_summaries(&nodes, "after a retaint and a removal");
        // Many one-off taints force compactions, which renumber the sets.
        for round in 0..500u32 {
            let value = format!("v{}", round % 7);
            let id = round * 7 % 11;
            if round % 5 == 0 {
                nodes.remove(id);
            } else {
                nodes.upsert(
                    id,
                    node("n", &[("k", value.as_str()), ("r", &round.to_string())]),
                );
            }
            assert_members_match_summaries(&nodes, &format!("at round {round}"));
        }
    }

    fn labelled(pairs: &[(&str, &str)]) -> NodeInfo {
        NodeInfo {
            labels: pairs.iter().map(|(k, v)| (*k, *v)).collect(),
            ..NodeInfo::default()
        }
    }

    #[test]
    fn label_tests_follow_upserts_relabels_and_removals() {
        let mut nodes = Nodes::new(true);
        nodes.upsert(0, labelled(&[("zone", "a"), ("disk", "ssd")]));
        nodes.upsert(1, labelled(&[("zone", "b")]));
        nodes.upsert(2, labelled(&[]));
        let in_a = nodes.label_test("zone", |v| v == Some("a"));
        let no_disk = nodes.label_test("disk", |v| v.is_none());
        let unknown_key = nodes.label_test("rack", |v| v.is_none());
        let passing = |nodes: &Nodes, test: &LabelTest| -> Vec<u32> {
            (0..4).filter(|&id| nodes.passes(id, test)).collect()
        };
        assert_eq!(passing(&nodes, &in_a), [0]);
        assert_eq!(passing(&nodes, &no_disk), [1, 2, 3]);
        assert_eq!(passing(&nodes, &unknown_key), [0, 1, 2, 3]);

        nodes.upsert(0, labelled(&[("zone", "b")]));
        nodes.upsert(2, labelled(&[("zone", "a")]));
        nodes.remove(1);
        let in_a = nodes.label_test("zone", |v| v == Some("a"));
        let in_b = nodes.label_test("zone", |v| v == Some("b"));
        assert_eq!(passing(&nodes, &in_a), [2]);
        assert_eq!(
            passing(&nodes, &in_b),
            [0],
            "a removed node loses its labels"
        );
        let no_disk = nodes.label_test("disk", |v| v.is_none());
        assert_eq!(
            passing(&nodes, &no_disk),
            [0, 1, 2, 3],
            "a relabelled node loses old keys"
        );
    }

    #[test]
    fn churn_of_one_off_label_values_is_compacted() {
        let mut nodes = Nodes::new(true);
        let mut epochs = vec![nodes.label_ids_epoch()];
        for round in 0..5_000 {
            let name = format!("node-{round}");
            nodes.upsert(
                round % 4,
                labelled(&[("kubernetes.io/hostname", name.as_str())]),
            );
            let column = nodes.label_column("kubernetes.io/hostname").unwrap();
            let value = nodes.label_value(column, round % 4);
            if nodes.label_ids_epoch() != *epochs.last().unwrap() {
                epochs.push(nodes.label_ids_epoch());
            }
            assert_eq!(nodes.label_value_text(column, value), Some(name.as_str()));
        }
        let index = nodes.labels.as_ref().unwrap();
        assert!(index.interned <= 2 * index.live_pairs + 1024 + 1);
        // Each compaction numbered the values again, and said so.
        assert!(epochs.len() > 4, "{epochs:?}");
        let last = nodes.label_test("kubernetes.io/hostname", |v| v == Some("node-4999"));
        assert_eq!((0..4).filter(|&id| nodes.passes(id, &last)).count(), 1);
    }

    #[test]
    fn nodes_with_a_label_value_follow_upserts_relabels_removals_and_compaction() {
        let mut nodes = Nodes::new(true);
        let zones = ["a", "b", "c"];
        // A small deterministic walk: relabels, one-off hostnames (which force compactions) and
        // removals, checked against a scan of every node after each step.
        let mut state: u64 = 7;
        for step in 0..6_000u32 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let id = ((state >> 33) % 40) as u32;
            if (state >> 20).is_multiple_of(7) {
                nodes.remove(id);
            } else {
                let zone = zones[((state >> 40) % 3) as usize];
                let host = format!("host-{step}");
                let mut pairs = vec![("kubernetes.io/hostname", host.as_str())];
                if !(state >> 45).is_multiple_of(5) {
                    pairs.push(("zone", zone));
                }
                nodes.upsert(id, labelled(&pairs));
            }
            for zone in zones {
                let mut listed = nodes.nodes_with_label("zone", zone).to_vec();
                listed.sort_unstable();
                let scanned: Vec<NodeId> = (0..40)
                    .filter(|&n| {
                        nodes
                            .get(n)
                            .is_some_and(|i| i.labels.get("zone") == Some(zone))
                    })
                    .collect();
                assert_eq!(listed, scanned, "zone {zone} at step {step}");
            }
            if let Some(node) = nodes.get(id) {
                let host = node.labels.get("kubernetes.io/hostname").unwrap();
                assert_eq!(nodes.nodes_with_label("kubernetes.io/hostname", host), [id]);
                let column = nodes.label_column("kubernetes.io/hostname").unwrap();
                let value = nodes.label_value_id(column, host);
                assert_eq!(value, Some(nodes.label_value(column, id)), "step {step}");
                assert_eq!(nodes.nodes_with_label_value(column, value.unwrap()), [id]);
            }
        }
        assert!(nodes.nodes_with_label("zone", "z").is_empty());
        assert!(nodes.nodes_with_label("rack", "a").is_empty());
    }

    #[test]
    fn usage_updates_reach_the_summary() {
        let mut nodes = Nodes::default();
        let mut info = node("a", &[]);
        info.allocatable.milli_cpu = 4_000;
        nodes.upsert(1, info);
        let mut usage = NodeUsage::default();
        usage.requested.milli_cpu = 1_500;
        usage.non_zero_requested.milli_cpu = 1_600;
        usage.pod_count = 2;
        nodes.update_usage(1, usage.clone());
        let summary = nodes.summary(1).unwrap();
        assert_eq!(summary.allocatable_milli_cpu, 4_000);
        assert_eq!(summary.requested_milli_cpu, 1_500);
        assert_eq!(summary.non_zero_requested_milli_cpu, 1_600);
        assert_eq!(summary.pod_count, 2);
        assert!(!summary.has_scalar_resources);
        usage.requested.scalar.push(("example.com/gpu".into(), 1));
        nodes.update_usage(1, usage);
        assert!(nodes.summary(1).unwrap().has_scalar_resources);
        nodes.remove(1);
        assert!(nodes.summary(1).is_none());
        assert!(nodes.is_empty());
    }

    #[test]
    fn pods_are_listed_on_their_node_through_moves_removals_and_the_node_leaving() {
        let mut nodes = Nodes::default();
        nodes.upsert(1, node("a", &[]));
        nodes.upsert(2, node("b", &[]));
        let on = |nodes: &Nodes, id: NodeId| {
            let mut ids: Vec<PodId> = nodes.pods_on(id).map(|(pod, _)| pod).collect();
            ids.sort_unstable();
            ids
        };
        let pod = |node: NodeId| ExistingPod {
            node,
            ..ExistingPod::default()
        };
        for (id, node) in [(10, 1), (11, 1), (12, 2), (13, 1)] {
            nodes.upsert_pod(id, pod(node));
        }
        assert_eq!((on(&nodes, 1), on(&nodes, 2)), (vec![10, 11, 13], vec![12]));
        nodes.upsert_pod(10, pod(2));
        assert_eq!(
            (on(&nodes, 1), on(&nodes, 2)),
            (vec![11, 13], vec![10, 12]),
            "moved"
        );
        assert!(nodes.remove_pod(11));
        assert!(!nodes.remove_pod(11), "removing twice");
        assert_eq!(on(&nodes, 1), vec![13]);
        nodes.remove(2);
        assert!(on(&nodes, 2).is_empty(), "a node's pods leave with it");
        assert_eq!(nodes.pod_count(), 1);
        assert_eq!(nodes.pods().map(|(id, _)| id).collect::<Vec<_>>(), vec![13]);
    }

    #[test]
    fn pods_that_differ_only_in_their_node_share_one_copy_of_their_parts() {
        let mut nodes = Nodes::default();
        for (id, name) in [(1, "a"), (2, "b"), (3, "c")] {
            nodes.upsert(id, node(name, &[]));
        }
        let replica = |app: &str, node: NodeId| ExistingPod {
            node,
            namespace: "shop".to_string(),
            labels: Labels::from_pairs([("app", app)]),
            ..ExistingPod::default()
        };
        for (id, node) in [(10, 1), (11, 2), (12, 3)] {
            nodes.upsert_pod(id, replica("web", node));
        }
        nodes.upsert_pod(13, replica("db", 1));
        assert_eq!(nodes.pods.shared.len(), 2, "web's three replicas and db");
        let lent = nodes.pod(11).expect("pod 11");
        assert_eq!((lent.node, lent.labels.get("app")), (2, Some("web")));
        assert_eq!(lent.to_existing_pod(), replica("web", 2));
        assert_eq!(
            nodes.pod(13).map(|p| p.to_existing_pod()),
            Some(replica("db", 1))
        );

        nodes.upsert_pod(12, replica("db", 3));
        assert_eq!(
            nodes.pods.shared.len(),
            2,
            "relabelled to a shape already held"
        );
        assert!(nodes.remove_pod(10));
        assert_eq!(nodes.pods.shared.len(), 2, "pod 11 still holds web's parts");
        assert!(nodes.remove_pod(11));
        assert_eq!(
            nodes.pods.shared.len(),
            1,
            "web's parts leave with its last pod"
        );
        nodes.remove(1);
        assert_eq!(nodes.pods.shared.len(), 1, "pod 12 still holds db's parts");
        assert!(nodes.remove_pod(12));
        assert!(nodes.pods.shared.is_empty());
        assert_eq!(nodes.pod_count(), 0);
    }
}
