//! What kube-scheduler's PreFilter and PreScore recount from every pod and node of the cluster
//! for each pod they schedule, kept instead: per selector, how many placed pods it matches on
//! each node ([`Tallies`], kept up to date as pods come and go), and per set of constraints, which
//! nodes count and which domains they make ([`Eligibility`], read again for the nodes that
//! change).

use wasched_sdk::helpers::{DenseCounts, FastMap};

use wasched_sdk::helpers::tolerated_by_any;
use wasched_sdk::node_selector::{CompiledNodeAffinity, RequiredNodeAffinity};
use wasched_sdk::pod_index::{
    for_each_candidate, place_least_recently_used, ByAnchor, PodsByLabel,
};
use wasched_sdk::{
    effect, ExistingPodRef, LabelColumnId, Labels, NodeAffinity, NodeId, NodeInfo,
    NodeSelectorTerm, Nodes, Pod, Toleration,
};

use crate::constraints::{Constraint, SpreadSelector};

/// The placed pods of one namespace that one selector matches, per node (terminating pods left
/// out, as kube-scheduler's `countPodsMatchSelector` does).
pub struct Tally {
    /// The namespace whose pods count.
    pub namespace: String,
    /// Which of them count.
    pub selector: SpreadSelector,
    /// Node id → matching pods on it; absent when none. PreFilter and PreScore walk it for
    /// every pod, hence a dense list.
    pub per_node: DenseCounts<NodeId>,
    /// The same by node name, for the single-node score.
    pub per_name: FastMap<String, u32>,
    used: u64,
}

impl Tally {
    fn counts(&self, pod: ExistingPodRef<'_>) -> bool {
        !pod.terminating && pod.namespace == self.namespace && self.selector.matches(pod.labels)
    }

    fn apply(&mut self, pod: ExistingPodRef<'_>, node: &NodeInfo, up: bool) {
        if !self.counts(pod) {
            return;
        }
        self.per_node.add(&pod.node, up);
        match self.per_name.get_mut(node.name.as_str()) {
            Some(n) if up => *n += 1,
            Some(n) => {
                *n -= 1;
                if *n == 0 {
                    self.per_name.remove(node.name.as_str());
                }
            }
            None if up => {
                self.per_name.insert(node.name.clone(), 1);
            }
            None => {}
        }
    }

    /// Matching pods on node `id`.
    pub fn on_node(&self, id: NodeId) -> u32 {
        self.per_node.get(&id).unwrap_or(0)
    }
}

/// How many selectors are kept counted: those of the workloads being scheduled at a time. The
/// least recently used is dropped (and counted again from the mirror if asked for again).
pub const TALLY_CAPACITY: usize = 1024;

/// The tallies of the selectors recent pods asked for, filed under a label pair their pods have
/// so a placed pod updates only those it can match.
#[derive(Default)]
pub struct Tallies {
    slots: Vec<Tally>,
    /// Namespace → selector → slot, looked up without copying either.
    index: FastMap<String, FastMap<SpreadSelector, usize>>,
    by_anchor: ByAnchor<Vec<usize>>,
    by_label: PodsByLabel,
    clock: u64,
}

impl Tallies {
    /// Starts a pod's cycle: the tallies it asks for from now on are not evicted during it.
    pub fn begin(&mut self) {
        self.clock += 1;
    }

    /// The slot of the tally of `selector` in `namespace`, counted from the mirror the first
    /// time (only over the pods with the label pair the selector requires, when it requires one).
    pub fn slot(&mut self, namespace: &str, selector: &SpreadSelector, nodes: &Nodes) -> usize {
        if let Some(&slot) = self.index.get(namespace).and_then(|s| s.get(selector)) {
            self.slots[slot].used = self.clock;
            return slot;
        }
        let mut tally = Tally {
            namespace: namespace.to_string(),
            selector: selector.clone(),
            per_node: DenseCounts::default(),
            per_name: FastMap::default(),
            used: self.clock,
        };
        let none = NodeInfo::default();
        let narrowed = match selector.pairs().first() {
            Some((key, value)) => Some(self.by_label.with_label(key, value)),
            None => selector
                .selector()
                .and_then(|s| self.by_label.candidates(s)),
        };
        if !selector.counts_nothing() {
            for_each_candidate(nodes, narrowed, |pod, node| {
                tally.apply(pod, node.unwrap_or(&none), true);
            });
        }
        let (slot, evicted) = place_least_recently_used(
            &mut self.slots,
            &mut self.by_anchor,
            TALLY_CAPACITY,
            self.clock,
            |t| t.used,
            |t| t.selector.anchor(),
            tally,
        );
        if let Some(old) = evicted {
            if let Some(selectors) = self.index.get_mut(&old.namespace) {
                selectors.remove(&old.selector);
                if selectors.is_empty() {
                    self.index.remove(&old.namespace);
                }
            }
        }
        self.index
            .entry(namespace.to_string())
            .or_default()
            .insert(selector.clone(), slot);
        slot
    }

    /// The tally in `slot`.
    pub fn get(&self, slot: usize) -> &Tally {
        &self.slots[slot]
    }

    /// Counts a placed pod in (or out of) every tally it matches.
    pub fn apply(
        &mut self,
        id: wasched_sdk::PodId,
        pod: ExistingPodRef<'_>,
        node: &NodeInfo,
        up: bool,
    ) {
        self.by_label.apply(id, pod.labels, up);
        for slots in self.by_anchor.matching(pod.labels) {
            for &slot in slots {
                self.slots[slot].apply(pod, node, up);
            }
        }
    }

    /// Every tally, for checks.
    pub fn iter(&self) -> impl Iterator<Item = &Tally> {
        self.slots.iter()
    }
}

/// What decides which nodes count for a set of constraints: their keys, their policies, and the
/// parts of the pod the policies read.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EligibilityKey {
    /// Keys every counted node must have (none when the score's system defaults allow nodes
    /// missing some).
    required_keys: Vec<String>,
    /// Per constraint: its key and whether it honors node affinity and taints.
    policies: Vec<(String, bool, bool)>,
    /// The pod's node selector and required node affinity terms (preferred terms never change
    /// which nodes count, so pods that differ only there share one entry).
    node_selection: Option<(Labels, Option<Vec<NodeSelectorTerm>>)>,
    tolerations: Option<Vec<Toleration>>,
}

impl EligibilityKey {
    /// The key of the nodes `pod`'s `constraints` may count (with every topology key present
    /// when `require_all_keys`).
    pub fn new(pod: &Pod, constraints: &[Constraint], require_all_keys: bool) -> Self {
        let honors_affinity = constraints.iter().any(|c| c.honor_affinity);
        let honors_taints = constraints.iter().any(|c| c.honor_taints);
        let mut required_keys: Vec<String> = if require_all_keys {
            constraints.iter().map(|c| c.topology_key.clone()).collect()
        } else {
            Vec::new()
        };
        required_keys.sort();
        required_keys.dedup();
        let selects_nodes = !pod.node_selector.is_empty()
            || pod
                .node_affinity
                .as_ref()
                .is_some_and(|a| a.required.is_some());
        EligibilityKey {
            required_keys,
            policies: constraints
                .iter()
                .map(|c| {
                    (
                        c.topology_key.clone(),
                        c.honor_affinity && selects_nodes,
                        c.honor_taints,
                    )
                })
                .collect(),
            node_selection: (honors_affinity && selects_nodes).then(|| {
                let required = pod.node_affinity.as_ref().and_then(|a| a.required.clone());
                (pod.node_selector.clone(), required)
            }),
            tolerations: honors_taints.then(|| pod.tolerations.clone()),
        }
    }
}

/// The nodes that count for each constraint of a set, and the domains they make.
pub struct Eligibility {
    generation: u64,
    used: u64,
    /// How the nodes' domains were read: when it no longer holds, they are read again.
    reading: Reading,
    /// Per constraint, per node id: the domain the node counts in (its value id of the key, 0
    /// for a node without the key or with an empty value), [`NOT_COUNTED`] when it does not count.
    domains: Vec<Vec<u32>>,
    /// Per constraint, per domain: how many nodes count in it.
    members: Vec<Vec<u32>>,
    /// Per constraint: how many domains the nodes that count make (a node without the key, when
    /// keys are not required, makes the empty value's).
    pub domain_count: Vec<usize>,
}

/// A node's entry in [`Eligibility`]'s domains when it does not count.
const NOT_COUNTED: u32 = u32::MAX;

/// How a set of constraints reads nodes' domains from the mirror's label index: kept with the
/// domains read, since a key or an empty value seen for the first time, or an index numbered
/// again, makes them read otherwise.
#[derive(PartialEq)]
struct Reading {
    label_ids_epoch: u64,
    /// Per constraint, its key's column.
    columns: Vec<Option<LabelColumnId>>,
    /// Per constraint, the value id of the empty value of its key.
    empty_values: Vec<Option<u32>>,
    /// The columns of the keys every counted node must have; `None` when some key has none.
    required_columns: Option<Vec<LabelColumnId>>,
}

impl Reading {
    fn of(key: &EligibilityKey, nodes: &Nodes) -> Self {
        let columns: Vec<Option<LabelColumnId>> = key
            .policies
            .iter()
            .map(|(topology_key, _, _)| nodes.label_column(topology_key))
            .collect();
        Reading {
            label_ids_epoch: nodes.label_ids_epoch(),
            empty_values: columns
                .iter()
                .map(|c| c.and_then(|c| nodes.label_value_id(c, "")))
                .collect(),
            columns,
            // A key no node has leaves no node eligible when it is required.
            required_columns: key
                .required_keys
                .iter()
                .map(|k| nodes.label_column(k))
                .collect(),
        }
    }
}

/// Which domains a node counts in, for a set of constraints at the mirror's present generation.
struct Judge<'a> {
    key: &'a EligibilityKey,
    required: CompiledNodeAffinity,
    /// Whether the pod tolerates each taint set, once known: nodes share few taint lists, and
    /// reading a node's own list touched its whole `NodeInfo`, a cache miss per node.
    tolerated_sets: Vec<Option<bool>>,
}

impl<'a> Judge<'a> {
    fn new(key: &'a EligibilityKey, nodes: &Nodes) -> Self {
        Judge {
            key,
            required: Eligibility::required_affinity(key, nodes),
            tolerated_sets: vec![None; nodes.taint_set_count()],
        }
    }

    /// Calls `counts(i, domain)` for each constraint `i` node `id` counts for.
    fn domains_of(
        &mut self,
        nodes: &Nodes,
        reading: &Reading,
        id: NodeId,
        mut counts: impl FnMut(usize, u32),
    ) {
        let key = self.key;
        let (Some(summary), Some(required_columns)) =
            (nodes.summary(id), &reading.required_columns)
        else {
            return;
        };
        if !required_columns
            .iter()
            .all(|&c| nodes.label_value(c, id) != 0)
        {
            return;
        }
        let matches_affinity = key.node_selection.is_none() || self.required.matches(nodes, id);
        let tolerated = key.tolerations.as_deref().is_none_or(|tolerations| {
            *self.tolerated_sets[summary.taint_set as usize].get_or_insert_with(|| {
                nodes
                    .taint_set(summary.taint_set)
                    .iter()
                    .filter(|t| t.effect == effect::NO_SCHEDULE || t.effect == effect::NO_EXECUTE)
                    .all(|t| tolerated_by_any(tolerations, t))
            })
        });
        for (i, (_, affinity, taints)) in key.policies.iter().enumerate() {
            if (*affinity && !matches_affinity) || (*taints && !tolerated) {
                continue;
            }
            let mut value = reading.columns[i].map_or(0, |c| nodes.label_value(c, id));
            if Some(value) == reading.empty_values[i] {
                value = 0;
            }
            counts(i, value);
        }
    }
}

impl Eligibility {
    /// The pod's required node affinity (its node selector and required terms), compiled.
    fn required_affinity(key: &EligibilityKey, nodes: &Nodes) -> CompiledNodeAffinity {
        key.node_selection
            .as_ref()
            .map(|(selector, required)| {
                RequiredNodeAffinity::of(&Pod {
                    node_selector: selector.clone(),
                    node_affinity: required.clone().map(|terms| NodeAffinity {
                        required: Some(terms),
                        preferred: Vec::new(),
                    }),
                    ..Pod::default()
                })
            })
            .unwrap_or_default()
            .compile(nodes)
    }

    fn compute(key: &EligibilityKey, nodes: &Nodes) -> Self {
        let count = key.policies.len();
        let mut eligibility = Eligibility {
            generation: nodes.generation(),
            used: 0,
            reading: Reading::of(key, nodes),
            domains: vec![vec![NOT_COUNTED; nodes.id_bound()]; count],
            members: vec![Vec::new(); count],
            domain_count: vec![0; count],
        };
        let mut judge = Judge::new(key, nodes);
        for id in nodes.ids() {
            eligibility.count_in(&mut judge, nodes, id);
        }
        eligibility
    }

    /// Brings the domains to the mirror's generation by reading again only the nodes changed
    /// since; `false` when that cannot be told or they are read otherwise now (then they must be
    /// worked out over every node).
    fn catch_up(&mut self, key: &EligibilityKey, nodes: &Nodes) -> bool {
        if self.generation == nodes.generation() {
            return true;
        }
        let Some(changed) = nodes.changed_since(self.generation) else {
            return false;
        };
        if Reading::of(key, nodes) != self.reading {
            return false;
        }
        let mut judge = Judge::new(key, nodes);
        for id in changed {
            self.count_out(id);
            self.count_in(&mut judge, nodes, id);
        }
        self.generation = nodes.generation();
        true
    }

    fn count_out(&mut self, id: NodeId) {
        for ((domains, members), domain_count) in self
            .domains
            .iter_mut()
            .zip(&mut self.members)
            .zip(&mut self.domain_count)
        {
            let Some(domain) = domains.get_mut(id as usize) else {
                continue;
            };
            if *domain != NOT_COUNTED {
                let in_domain = &mut members[*domain as usize];
                *in_domain -= 1;
                if *in_domain == 0 {
                    *domain_count -= 1;
                }
                *domain = NOT_COUNTED;
            }
        }
    }

    fn count_in(&mut self, judge: &mut Judge<'_>, nodes: &Nodes, id: NodeId) {
        let Eligibility {
            reading,
            domains,
            members,
            domain_count,
            ..
        } = self;
        judge.domains_of(nodes, reading, id, |i, domain| {
            let of_nodes = &mut domains[i];
            if of_nodes.len() <= id as usize {
                of_nodes.resize(nodes.id_bound(), NOT_COUNTED);
            }
            of_nodes[id as usize] = domain;
            let of_domains = &mut members[i];
            if of_domains.len() <= domain as usize {
                of_domains.resize(domain as usize + 1, 0);
            }
            of_domains[domain as usize] += 1;
            if of_domains[domain as usize] == 1 {
                domain_count[i] += 1;
            }
        });
    }

    /// What differs between these domains, kept up to date, and those worked out now over every
    /// node (`None` when nothing does).
    #[cfg(test)]
    pub fn differs_from_computed(&self, key: &EligibilityKey, nodes: &Nodes) -> Option<String> {
        let fresh = Eligibility::compute(key, nodes);
        let trimmed = |members: &[u32]| {
            let end = members.iter().rposition(|&m| m != 0).map_or(0, |p| p + 1);
            members[..end].to_vec()
        };
        for i in 0..self.domains.len() {
            for id in 0..nodes.id_bound() as NodeId {
                let (kept, now) = (
                    self.domains[i].get(id as usize),
                    fresh.domains[i].get(id as usize),
                );
                if kept.copied().unwrap_or(NOT_COUNTED) != now.copied().unwrap_or(NOT_COUNTED) {
                    return Some(format!(
                        "constraint {i}, node {id}: {kept:?} kept, {now:?} now"
                    ));
                }
            }
            if trimmed(&self.members[i]) != trimmed(&fresh.members[i])
                || self.domain_count[i] != fresh.domain_count[i]
            {
                return Some(format!(
                    "constraint {i}: {:?} in {} domains kept, {:?} in {} now",
                    self.members[i], self.domain_count[i], fresh.members[i], fresh.domain_count[i]
                ));
            }
        }
        None
    }

    /// Whether node `id` counts for constraint `i`.
    pub fn counts(&self, i: usize, id: NodeId) -> bool {
        self.domains[i]
            .get(id as usize)
            .is_some_and(|&domain| domain != NOT_COUNTED)
    }
}

/// How many sets of constraints' eligible nodes are kept: pods of one workload share them.
const ELIGIBILITY_CAPACITY: usize = 64;

/// The [`Eligibility`] of recent constraint sets, valid while the mirror's nodes do not change.
#[derive(Default)]
pub struct EligibilityCache {
    entries: FastMap<EligibilityKey, Eligibility>,
    clock: u64,
    /// How many times eligible nodes were worked out (each a pass over every node).
    pub computed: u64,
    /// How many times they were brought up to date from the nodes changed since.
    pub caught_up: u64,
}

impl EligibilityCache {
    /// The entries at the mirror's generation (the others are brought up to date when asked).
    #[cfg(test)]
    pub fn current<'a>(
        &'a self,
        nodes: &'a Nodes,
    ) -> impl Iterator<Item = (&'a EligibilityKey, &'a Eligibility)> + 'a {
        self.entries
            .iter()
            .filter(|(_, e)| e.generation == nodes.generation())
    }

    /// The eligible nodes for `key`, computed once and then kept up to date with the nodes that
    /// change.
    pub fn get(&mut self, key: &EligibilityKey, nodes: &Nodes) -> &Eligibility {
        self.clock += 1;
        let fresh = match self.entries.get_mut(key) {
            Some(entry) if entry.generation == nodes.generation() => true,
            Some(entry) => {
                let caught_up = entry.catch_up(key, nodes);
                self.caught_up += u64::from(caught_up);
                caught_up
            }
            None => false,
        };
        if !fresh {
            if self.entries.len() >= ELIGIBILITY_CAPACITY && !self.entries.contains_key(key) {
                let oldest = self
                    .entries
                    .iter()
                    .min_by_key(|(_, e)| e.used)
                    .map(|(k, _)| k.clone());
                if let Some(oldest) = oldest {
                    self.entries.remove(&oldest);
                }
            }
            let computed = Eligibility::compute(key, nodes);
            self.computed += 1;
            self.entries.insert(key.clone(), computed);
        }
        let entry = self.entries.get_mut(key).expect("inserted above");
        entry.used = self.clock;
        entry
    }
}
