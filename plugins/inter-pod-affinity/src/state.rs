//! What kube-scheduler's PreFilter and PreScore recount from every pod of the cluster for each pod
//! they schedule, kept up to date instead as pods enter and leave the mirror: per topology value,
//! how many placed pods match a term.

use std::collections::HashMap;
use std::hash::Hash;

use wasched_sdk::{ExistingPod, Labels, Nodes};

use crate::terms::{IncomingTerm, OwnedTerm};

/// Per value of a term's topology key: how many pods count there. A value is absent rather than
/// zero, so an empty map means no pod counts anywhere.
pub type Counts = HashMap<String, u32>;

fn count(counts: &mut Counts, value: &str, up: bool) {
    if up {
        *counts.entry(value.to_string()).or_insert(0) += 1;
    } else if let Some(n) = counts.get_mut(value) {
        *n -= 1;
        if *n == 0 {
            counts.remove(value);
        }
    }
}

/// The placed pods that match every one of some terms of pods being scheduled, counted on each
/// term's topology value (kube-scheduler's `updateWithAffinityTerms`; a single term is the
/// anti-affinity and preferred case).
pub struct Tally {
    pub terms: Vec<IncomingTerm>,
    /// One per term.
    pub counts: Vec<Counts>,
    /// When a pod last asked for it, for eviction.
    used: u64,
}

impl Tally {
    fn apply(&mut self, pod: &ExistingPod, node_labels: &Labels, up: bool) {
        if !self
            .terms
            .iter()
            .all(|term| term.matches(&pod.namespace, &pod.labels))
        {
            return;
        }
        for (term, counts) in self.terms.iter().zip(&mut self.counts) {
            if let Some(value) = node_labels.get(&term.topology_key) {
                count(counts, value, up);
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
/// counted again from the mirror if asked for again).
const TALLY_CAPACITY: usize = 64;

/// The tallies of the term lists recent pods asked for.
#[derive(Default)]
pub struct Tallies {
    slots: Vec<Tally>,
    index: HashMap<Vec<IncomingTerm>, usize>,
    clock: u64,
}

impl Tallies {
    /// Starts a pod's cycle: the tallies it asks for from now on are not evicted during it.
    pub fn begin(&mut self) {
        self.clock += 1;
    }

    /// The slot of the tally of `terms`, counted from the mirror's pods the first time.
    pub fn slot(&mut self, terms: Vec<IncomingTerm>, nodes: &Nodes) -> usize {
        if let Some(&slot) = self.index.get(&terms) {
            self.slots[slot].used = self.clock;
            return slot;
        }
        let mut tally = Tally {
            counts: vec![Counts::new(); terms.len()],
            terms: terms.clone(),
            used: self.clock,
        };
        let none = Labels::default();
        for (_, pod) in nodes.pods() {
            let labels = nodes.get(pod.node).map_or(&none, |n| &n.labels);
            tally.apply(pod, labels, true);
        }
        let evictable = (self.slots.len() >= TALLY_CAPACITY)
            .then(|| {
                (0..self.slots.len())
                    .filter(|&s| self.slots[s].used != self.clock)
                    .min_by_key(|&s| self.slots[s].used)
            })
            .flatten();
        let slot = match evictable {
            Some(slot) => {
                self.index.remove(&self.slots[slot].terms);
                self.slots[slot] = tally;
                slot
            }
            None => {
                self.slots.push(tally);
                self.slots.len() - 1
            }
        };
        self.index.insert(terms, slot);
        slot
    }

    pub fn get(&self, slot: usize) -> &Tally {
        &self.slots[slot]
    }

    pub fn apply(&mut self, pod: &ExistingPod, node_labels: &Labels, up: bool) {
        for tally in &mut self.slots {
            tally.apply(pod, node_labels, up);
        }
    }

    /// Every tally, for checks.
    pub fn iter(&self) -> impl Iterator<Item = &Tally> {
        self.slots.iter()
    }
}

/// Placed pods' terms that are equal, with how many pods have them and where those pods are.
pub struct Group {
    pub pods: u32,
    pub counts: Counts,
}

/// Groups by term (and whatever else tells them apart, e.g. a weight).
pub struct Groups<K> {
    pub map: HashMap<K, Group>,
}

impl<K> Default for Groups<K> {
    fn default() -> Self {
        Groups {
            map: HashMap::new(),
        }
    }
}

impl<K: Hash + Eq> Groups<K> {
    pub fn apply(&mut self, key: K, topology_value: Option<&str>, up: bool) {
        if up {
            let group = self.map.entry(key).or_insert_with(|| Group {
                pods: 0,
                counts: Counts::new(),
            });
            group.pods += 1;
            if let Some(value) = topology_value {
                count(&mut group.counts, value, true);
            }
        } else if let Some(group) = self.map.get_mut(&key) {
            if let Some(value) = topology_value {
                count(&mut group.counts, value, false);
            }
            group.pods -= 1;
            if group.pods == 0 {
                self.map.remove(&key);
            }
        }
    }
}

/// Where a placed pod's term counts in the score, and with what weight.
pub type ScoringKey = (OwnedTerm, i64);
