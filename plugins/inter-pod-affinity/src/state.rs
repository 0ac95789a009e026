//! What kube-scheduler's PreFilter and PreScore recount from every pod of the cluster for each pod
//! they schedule, kept up to date instead as pods enter and leave the mirror: per topology value,
//! how many placed pods match a term.

use std::cell::Cell;
use std::hash::Hash;

use wasched_sdk::helpers::{DenseCounts, FastMap};
use wasched_sdk::pod_index::{
    anchor, for_each_candidate, place_least_recently_used, ByAnchor, PodsByLabel,
};
use wasched_sdk::{ExistingPodRef, LabelColumnId, Labels, Nodes};

use crate::terms::{IncomingTerm, OwnedTerm};

/// Per value of a term's topology key: how many pods count there, in one dense list (PreFilter
/// and PreScore walk every domain of every term of every pod). A value is absent rather than
/// zero, so no domain means no pod counts anywhere.
///
/// Each domain keeps its value's id in the mirror's label index with the mirror generation
/// (plus one) it was looked up at; a generation of 0 means not looked up yet. Looking each
/// value's text up again cost a string hash and compare per domain per pod, which for a hostname
/// key is one per counted node.
#[derive(Clone, Debug, Default)]
pub struct Counts {
    domains: DenseCounts<String, Cell<(u64, u32)>>,
}

impl Counts {
    /// Counts a pod in (`up`) or out of domain `value`.
    pub fn add(&mut self, value: &str, up: bool) {
        self.domains.add(value, up);
    }

    /// No pod is counted in any domain.
    pub fn is_empty(&self) -> bool {
        self.domains.is_empty()
    }

    /// Whether a pod counts in domain `value`.
    pub fn contains(&self, value: &str) -> bool {
        self.domains.contains(value)
    }

    /// The pods counted in domain `value`.
    pub fn get(&self, value: &str) -> Option<u32> {
        self.domains.get(value)
    }

    /// Every domain with its count.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u32)> {
        self.domains
            .iter()
            .map(|(value, pods, _)| (value.as_str(), pods))
    }

    /// Calls `each` with the value id in `column` of every domain some node of the mirror has,
    /// and the domain's count.
    pub fn each_domain(
        &self,
        nodes: &Nodes,
        column: LabelColumnId,
        mut each: impl FnMut(u32, u32),
    ) {
        let generation = nodes.generation() + 1;
        for (value, pods, value_at) in self.domains.iter() {
            let (at, cached) = value_at.get();
            let id = if at == generation {
                cached
            } else {
                let id = nodes.label_value_id(column, value).unwrap_or(0);
                value_at.set((generation, id));
                id
            };
            if id != 0 {
                each(id, pods);
            }
        }
    }
}

/// Counts are equal when they count the same pods in the same domains (the cached ids aside).
impl PartialEq for Counts {
    fn eq(&self, other: &Counts) -> bool {
        self.domains.len() == other.domains.len()
            && self
                .iter()
                .all(|(value, pods)| other.get(value) == Some(pods))
    }
}

impl Eq for Counts {}

/// The placed pods that match every one of some terms of pods being scheduled, counted on each
/// term's topology value (kube-scheduler's `updateWithAffinityTerms`; a single term is the
/// anti-affinity and preferred case).
pub struct Tally {
    /// The incoming pod's terms the tally counts matching pods for.
    pub terms: Vec<IncomingTerm>,
    /// One per term.
    pub counts: Vec<Counts>,
    /// When a pod last asked for it, for eviction.
    used: u64,
}

impl Tally {
    fn apply(&mut self, pod: ExistingPodRef<'_>, node_labels: &Labels, up: bool) {
        if !self
            .terms
            .iter()
            .all(|term| term.matches(pod.namespace, pod.labels))
        {
            return;
        }
        for (term, counts) in self.terms.iter().zip(&mut self.counts) {
            if let Some(value) = node_labels.get(&term.topology_key) {
                counts.add(value, up);
            }
        }
    }

    /// True when no pod matching every term is on a node with the terms' keys.
    pub fn is_empty(&self) -> bool {
        self.counts.iter().all(Counts::is_empty)
    }
}

/// How many distinct term lists are kept counted. Pods of one workload share their terms, so this
/// covers the workloads being scheduled at a time; the least recently used list is dropped (and
/// counted again from the mirror if asked for again). A placed pod updates only the tallies
/// anchored on one of its labels (and the few without an anchor), so a large table costs little.
pub const TALLY_CAPACITY: usize = 1024;

/// The tallies of the term lists recent pods asked for.
#[derive(Default)]
pub struct Tallies {
    slots: Vec<Tally>,
    index: FastMap<Vec<IncomingTerm>, usize>,
    /// Slots by a label pair every pod they count has.
    by_anchor: ByAnchor<Vec<usize>>,
    clock: u64,
}

fn tally_anchor(terms: &[IncomingTerm]) -> Option<(&str, &str)> {
    terms.iter().find_map(|t| anchor(t.selector.as_ref()))
}

impl Tallies {
    /// Starts a pod's cycle: the tallies it asks for from now on are not evicted during it.
    pub fn begin(&mut self) {
        self.clock += 1;
    }

    /// The slot of the tally of `terms`, counted from the mirror's pods the first time (only
    /// those `by_label` says can match, when a term's selector requires a label value).
    pub fn slot(
        &mut self,
        terms: Vec<IncomingTerm>,
        nodes: &Nodes,
        by_label: &PodsByLabel,
    ) -> usize {
        if let Some(&slot) = self.index.get(&terms) {
            self.slots[slot].used = self.clock;
            return slot;
        }
        let mut tally = Tally {
            counts: vec![Counts::default(); terms.len()],
            terms: terms.clone(),
            used: self.clock,
        };
        let none = Labels::default();
        let narrowest = terms
            .iter()
            .filter_map(|term| by_label.candidates(term.selector.as_ref()?))
            .min_by_key(Vec::len);
        for_each_candidate(nodes, narrowest, |pod, node| {
            tally.apply(pod, node.map_or(&none, |n| &n.labels), true);
        });
        let (slot, evicted) = place_least_recently_used(
            &mut self.slots,
            &mut self.by_anchor,
            TALLY_CAPACITY,
            self.clock,
            |t| t.used,
            |t| tally_anchor(&t.terms),
            tally,
        );
        if let Some(old) = evicted {
            self.index.remove(&old.terms);
        }
        self.index.insert(terms, slot);
        slot
    }

    /// The tally in `slot`.
    pub fn get(&self, slot: usize) -> &Tally {
        &self.slots[slot]
    }

    /// Counts `pod`, on a node labelled `node_labels`, in (`up`) or out of every tally whose
    /// terms it matches.
    pub fn apply(&mut self, pod: ExistingPodRef<'_>, node_labels: &Labels, up: bool) {
        for slots in self.by_anchor.matching(pod.labels) {
            for &slot in slots {
                self.slots[slot].apply(pod, node_labels, up);
            }
        }
    }

    /// Every tally, for checks.
    pub fn iter(&self) -> impl Iterator<Item = &Tally> {
        self.slots.iter()
    }
}

/// Placed pods' terms that are equal, with how many pods have them and where those pods are.
pub struct Group {
    /// How many placed pods have the term.
    pub pods: u32,
    /// Where they are, per topology domain.
    pub counts: Counts,
}

/// What a group is keyed by: its term tells the label pair every pod it matches has.
pub trait Keyed: Hash + Eq {
    /// The term the key stands for.
    fn term(&self) -> &OwnedTerm;
}

impl Keyed for OwnedTerm {
    fn term(&self) -> &OwnedTerm {
        self
    }
}

impl Keyed for ScoringKey {
    fn term(&self) -> &OwnedTerm {
        &self.0
    }
}

/// Groups by term (and whatever else tells them apart, e.g. a weight), bucketed by the label pair
/// their term requires, so a pod is checked only against the groups it can match.
pub struct Groups<K> {
    buckets: ByAnchor<FastMap<K, Group>>,
}

impl<K> Default for Groups<K> {
    fn default() -> Self {
        Groups {
            buckets: ByAnchor::default(),
        }
    }
}

impl<K: Keyed> Groups<K> {
    /// Every group, for checks.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &Group)> {
        self.buckets.all().flatten()
    }

    /// The groups whose term a pod with `labels` may match (all others cannot).
    pub fn candidates<'a>(
        &'a self,
        labels: &'a Labels,
    ) -> impl Iterator<Item = (&'a K, &'a Group)> {
        self.buckets.matching(labels).flatten()
    }

    /// Counts a pod with `key`'s term in (`up`) or out of the domain `topology_value` (none:
    /// its node lacks the term's topology key).
    pub fn apply(&mut self, key: K, topology_value: Option<&str>, up: bool) {
        if up {
            let groups = self.buckets.entry(anchor(key.term().selector.as_ref()));
            let group = groups.entry(key).or_insert_with(|| Group {
                pods: 0,
                counts: Counts::default(),
            });
            group.pods += 1;
            if let Some(value) = topology_value {
                group.counts.add(value, true);
            }
        } else {
            let change = |groups: &mut FastMap<K, Group>| {
                if let Some(group) = groups.get_mut(&key) {
                    if let Some(value) = topology_value {
                        group.counts.add(value, false);
                    }
                    group.pods -= 1;
                    if group.pods == 0 {
                        groups.remove(&key);
                    }
                }
            };
            let bucket = anchor(key.term().selector.as_ref());
            self.buckets.update(bucket, change, FastMap::is_empty);
        }
    }
}

/// Where a placed pod's term counts in the score, and with what weight.
pub type ScoringKey = (OwnedTerm, i64);
