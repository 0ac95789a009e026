//! InterPodAffinity: keeps a pod where its required pod affinity finds matching pods and its
//! required anti-affinity (and that of the pods already placed) finds none, and scores nodes by
//! preferred terms (kube-scheduler's `interpodaffinity` plugin).
//!
//! kube-scheduler counts, for every pod it schedules, the matching pods of the whole cluster per
//! topology pair. This plugin keeps those counts as pods enter and leave its mirror
//! ([`Plugin::pod_added`]): per term list of recent pods ([`state::Tallies`]) and per distinct term
//! of placed pods ([`state::Groups`]). `prepare` then only reads counts, and turns them into the
//! failing nodes (through the mirror's label index, never looking at a node that cannot fail) and
//! a raw score per node that has one, so the host calls neither the filter nor the score per node.

#![warn(missing_docs)]

mod args;
pub mod state;
pub mod terms;

use wasched_sdk::{
    ExistingPodParts, ExistingPodRef, Failure, FilterPlan, FilterPlugin, FilterResults, Labels,
    NodeId, NodeInfo, Nodes, Normalize, Plugin, Pod, PodId, PodParts, PodPlan, ScorePlugin,
    Verdict, WeightedPodAffinityTerm,
};

pub use args::Args;
use state::{Counts, Groups, ScoringKey, Tallies};
use terms::{IncomingTerm, OwnedTerm};
use wasched_sdk::helpers::extend_in_blocks;
use wasched_sdk::pod_index::PodsByLabel;

/// The name used in configs and messages.
pub const NAME: &str = "InterPodAffinity";
/// `ErrReasonAffinityRulesNotMatch` (UnschedulableAndUnresolvable).
pub const AFFINITY_REASON: &str = "node(s) didn't match pod affinity rules";
/// `ErrReasonAntiAffinityRulesNotMatch` (Unschedulable).
pub const ANTI_AFFINITY_REASON: &str = "node(s) didn't match pod anti-affinity rules";
/// `ErrReasonExistingAntiAffinityRulesNotMatch` (Unschedulable).
pub const EXISTING_ANTI_AFFINITY_REASON: &str =
    "node(s) didn't satisfy existing pods anti-affinity rules";

/// Verdicts of the failing-nodes plan, in kube-scheduler's order of checks: a node failing
/// several is reported with the first.
const AFFINITY: u8 = 1;
const ANTI_AFFINITY: u8 = 2;
const EXISTING_ANTI_AFFINITY: u8 = 3;

fn failures() -> Vec<Failure> {
    vec![
        Failure::unresolvable(AFFINITY_REASON),
        Failure::unschedulable(ANTI_AFFINITY_REASON),
        Failure::unschedulable(EXISTING_ANTI_AFFINITY_REASON),
    ]
}

/// What `prepare` worked out for the current pod (kube-scheduler's PreFilter and PreScore
/// state), read by the per-node filter and score.
#[derive(Default)]
struct Prepared {
    /// The tally of the pod's required affinity terms, if it has any.
    affinity: Option<usize>,
    /// No pod matches the terms anywhere and the pod matches them itself: the first pod of a
    /// group with affinity to itself may go to any node that has the topology keys.
    first_of_group: bool,
    /// The tallies of the pod's required anti-affinity terms.
    anti_affinity: Vec<usize>,
    /// The placed pods' required anti-affinity groups that match the pod, by position (ascending)
    /// in `existing_anti_affinity.candidates(pod labels)`, which holds still during the cycle.
    existing_anti_affinity: Vec<usize>,
    /// The tallies of the pod's preferred terms, with their weight (negative for anti-affinity).
    score_tallies: Vec<(usize, i64)>,
    /// The placed pods' scoring groups that match the pod, by position (ascending) in
    /// `scoring.candidates(pod labels)`.
    score_groups: Vec<usize>,
}

/// Per node id, the failing-plan verdict of the current pod (0 = passes), and the nodes that have
/// one.
#[derive(Default)]
struct Verdicts {
    of_node: Vec<u8>,
    failing: Vec<NodeId>,
}

impl Verdicts {
    /// Records `verdict` for node `id`, keeping the first check's when it fails several.
    fn mark(&mut self, id: NodeId, verdict: u8) {
        let slot = &mut self.of_node[id as usize];
        if *slot == 0 {
            *slot = verdict;
            self.failing.push(id);
        } else {
            *slot = (*slot).min(verdict);
        }
    }
}

/// Per node id, the current pod's raw score, and the nodes that have one.
#[derive(Default)]
struct RawScores {
    of_node: Vec<i64>,
    scored: Vec<bool>,
    ids: Vec<NodeId>,
}

impl RawScores {
    fn add(&mut self, id: NodeId, points: i64) {
        let slot = id as usize;
        if !self.scored[slot] {
            self.scored[slot] = true;
            self.ids.push(id);
        }
        self.of_node[slot] += points;
    }
}

/// Calls `each` with every node of every domain of `counts` (values of label `key`) and that
/// domain's count, finding the domains by value id (cached in `counts` while the nodes stay).
fn each_node_counted(nodes: &Nodes, key: &str, counts: &Counts, mut each: impl FnMut(NodeId, u32)) {
    let Some(column) = nodes.label_column(key) else {
        return;
    };
    counts.each_domain(nodes, column, |value, count| {
        for &id in nodes.nodes_with_label_value(column, value) {
            each(id, count);
        }
    });
}

/// How many nodes [`each_node_counted`] would visit, from the sizes of the domains' node lists.
fn nodes_counted(nodes: &Nodes, key: &str, counts: &Counts) -> usize {
    let Some(column) = nodes.label_column(key) else {
        return 0;
    };
    let mut covered = 0;
    counts.each_domain(nodes, column, |value, _| {
        covered += nodes.nodes_with_label_value(column, value).len();
    });
    covered
}

/// The plugin: its configuration, the counts it keeps, the current pod's state and per-node
/// scratch space reused from pod to pod.
pub struct InterPodAffinity {
    args: Args,
    failures: Vec<Failure>,
    tallies: Tallies,
    pods_by_label: PodsByLabel,
    /// Placed pods' required anti-affinity terms.
    existing_anti_affinity: Groups<OwnedTerm>,
    /// Placed pods' required affinity (at `hardPodAffinityWeight`) and preferred terms (at their
    /// weight, negative for anti-affinity).
    scoring: Groups<ScoringKey>,
    prepared: Prepared,
    verdicts: Verdicts,
    /// Per node id: whether it passes the current pod's required affinity.
    passing: Vec<bool>,
    passing_ids: Vec<NodeId>,
    raw: RawScores,
}

impl InterPodAffinity {
    /// Counts a placed pod in (or out of) every tally and group.
    fn track(&mut self, id: PodId, pod: ExistingPodRef<'_>, node_labels: &Labels, up: bool) {
        self.tallies.apply(pod, node_labels, up);
        self.pods_by_label.apply(id, pod.labels, up);
        let affinity = &pod.pod_affinity;
        for term in &affinity.required_anti_affinity {
            let term = OwnedTerm::of(term, pod.namespace);
            let value = node_labels.get(&term.topology_key);
            self.existing_anti_affinity.apply(term, value, up);
        }
        let hard = self.args.hard_pod_affinity_weight;
        if hard > 0 {
            for term in &affinity.required_affinity {
                let term = OwnedTerm::of(term, pod.namespace);
                let value = node_labels.get(&term.topology_key);
                self.scoring.apply((term, hard), value, up);
            }
        }
        let weighted = |list: &[WeightedPodAffinityTerm], sign: i64| {
            list.iter()
                .map(|w| {
                    (
                        OwnedTerm::of(&w.term, pod.namespace),
                        sign * i64::from(w.weight),
                    )
                })
                .collect::<Vec<_>>()
        };
        for key in weighted(&affinity.preferred_affinity, 1)
            .into_iter()
            .chain(weighted(&affinity.preferred_anti_affinity, -1))
        {
            let value = node_labels.get(&key.0.topology_key);
            self.scoring.apply(key, value, up);
        }
    }

    /// Empties the per-node scratch of the previous pod and sizes it for the mirror.
    fn reset_scratch(&mut self, bound: usize) {
        for id in self.verdicts.failing.drain(..) {
            self.verdicts.of_node[id as usize] = 0;
        }
        for id in self.raw.ids.drain(..) {
            self.raw.of_node[id as usize] = 0;
            self.raw.scored[id as usize] = false;
        }
        if self.verdicts.of_node.len() < bound {
            self.verdicts.of_node.resize(bound, 0);
            self.passing.resize(bound, false);
            self.raw.of_node.resize(bound, 0);
            self.raw.scored.resize(bound, false);
        }
    }

    /// The nodes the current pod fails on, found through the label index: the domains where
    /// anti-affinity counts, and the complement of those where affinity does.
    fn failing_plan(&mut self, pod: &Pod, nodes: &Nodes) -> FilterPlan {
        let prepared = &self.prepared;
        let verdicts = &mut self.verdicts;
        if !prepared.existing_anti_affinity.is_empty() {
            let groups = self.existing_anti_affinity.candidates(&pod.labels);
            for (position, (term, group)) in groups.enumerate() {
                if prepared.existing_anti_affinity.contains(&position) {
                    each_node_counted(nodes, &term.topology_key, &group.counts, |id, _| {
                        verdicts.mark(id, EXISTING_ANTI_AFFINITY)
                    });
                }
            }
        }
        for &slot in &prepared.anti_affinity {
            let tally = self.tallies.get(slot);
            each_node_counted(
                nodes,
                &tally.terms[0].topology_key,
                &tally.counts[0],
                |id, _| verdicts.mark(id, ANTI_AFFINITY),
            );
        }
        if let Some(slot) = prepared.affinity {
            self.mark_affinity_failures(slot, nodes);
        }
        let failing = &mut self.verdicts.failing;
        if failing.is_empty() {
            return FilterPlan::Skip;
        }
        failing.sort_unstable();
        // Only the failures some node has: the host refuses a plan with more failures than nodes.
        let mut results = FilterResults::default();
        let mut interned = [0u32; 4];
        for &id in failing.iter() {
            let verdict = self.verdicts.of_node[id as usize] as usize;
            if interned[verdict] == 0 {
                interned[verdict] = results.intern(self.failures[verdict - 1].clone());
            }
            results.verdicts.push(interned[verdict]);
        }
        FilterPlan::FailingNodes {
            nodes: failing.clone(),
            results,
        }
    }

    fn mark_affinity_failures(&mut self, slot: usize, nodes: &Nodes) {
        let tally = self.tallies.get(slot);
        let has_keys = |node: &NodeInfo| {
            tally
                .terms
                .iter()
                .all(|term| node.labels.get(&term.topology_key).is_some())
        };
        let in_every_domain = |node: &NodeInfo| {
            tally.terms.iter().zip(&tally.counts).all(|(term, counts)| {
                node.labels
                    .get(&term.topology_key)
                    .is_some_and(|value| counts.contains(value))
            })
        };
        let passing_ids = &mut self.passing_ids;
        if self.prepared.first_of_group {
            passing_ids.extend(
                nodes
                    .ids()
                    .filter(|&id| nodes.get(id).is_some_and(has_keys)),
            );
        } else if tally.terms.len() == 1 {
            // The nodes of the term's domains pass; when they are every node, none fails.
            if nodes_counted(nodes, &tally.terms[0].topology_key, &tally.counts[0]) == nodes.len() {
                return;
            }
            each_node_counted(
                nodes,
                &tally.terms[0].topology_key,
                &tally.counts[0],
                |id, _| passing_ids.push(id),
            );
        } else {
            // The nodes of the first term's domains pass it; only the other terms need a look.
            each_node_counted(
                nodes,
                &tally.terms[0].topology_key,
                &tally.counts[0],
                |id, _| {
                    if nodes.get(id).is_some_and(in_every_domain) {
                        passing_ids.push(id);
                    }
                },
            );
        }
        if passing_ids.len() < nodes.len() {
            for &id in passing_ids.iter() {
                self.passing[id as usize] = true;
            }
            for id in nodes.ids() {
                if !self.passing[id as usize] {
                    self.verdicts.mark(id, AFFINITY);
                }
            }
        }
        for id in passing_ids.drain(..) {
            self.passing[id as usize] = false;
        }
    }

    /// kube-scheduler's PreScore: the topology score of the current pod, added up per node.
    /// Returns false when the plugin has no opinion (kube-scheduler's Skip: no term counts
    /// anywhere).
    fn prepare_score(&mut self, pod: &Pod, nodes: &Nodes, namespace_labels: &Labels) -> bool {
        let affinity = &pod.pod_affinity;
        let has_preferred =
            !affinity.preferred_affinity.is_empty() || !affinity.preferred_anti_affinity.is_empty();
        if self.args.ignore_preferred_terms_of_existing_pods && !has_preferred {
            return false;
        }
        let mut any = false;
        let raw = &mut self.raw;
        for (list, sign) in [
            (&affinity.preferred_affinity, 1),
            (&affinity.preferred_anti_affinity, -1),
        ] {
            for weighted in list {
                let term = IncomingTerm::resolve(&weighted.term, &pod.namespace, nodes);
                let slot = self.tallies.slot(vec![term], nodes, &self.pods_by_label);
                let weight = sign * i64::from(weighted.weight);
                let tally = self.tallies.get(slot);
                any |= !tally.counts[0].is_empty();
                each_node_counted(
                    nodes,
                    &tally.terms[0].topology_key,
                    &tally.counts[0],
                    |id, count| raw.add(id, weight * i64::from(count)),
                );
                self.prepared.score_tallies.push((slot, weight));
            }
        }
        for (position, ((term, weight), group)) in self.scoring.candidates(&pod.labels).enumerate()
        {
            if !group.counts.is_empty()
                && term.matches(&pod.namespace, namespace_labels, &pod.labels)
            {
                any = true;
                each_node_counted(nodes, &term.topology_key, &group.counts, |id, count| {
                    raw.add(id, weight * i64::from(count))
                });
                self.prepared.score_groups.push(position);
            }
        }
        any
    }
}

impl Plugin for InterPodAffinity {
    const NAME: &'static str = NAME;
    const READS_POD: PodParts = PodParts::IDENTITY
        .union(PodParts::LABELS)
        .union(PodParts::POD_AFFINITY);
    const READS_EXISTING_PODS: ExistingPodParts =
        ExistingPodParts::LABELS.union(ExistingPodParts::POD_AFFINITY);
    // Without terms of its own and with no placed pod's, no node can fail or score.
    const IDLE_WITHOUT: PodParts = PodParts::POD_AFFINITY;
    const READS_NAMESPACES: bool = true;
    const INDEXES_LABELS: bool = true;

    fn new(config: &str) -> Result<Self, String> {
        Ok(InterPodAffinity {
            args: Args::parse(config)?,
            failures: failures(),
            tallies: Tallies::default(),
            pods_by_label: PodsByLabel::default(),
            existing_anti_affinity: Groups::default(),
            scoring: Groups::default(),
            prepared: Prepared::default(),
            verdicts: Verdicts::default(),
            passing: Vec::new(),
            passing_ids: Vec::new(),
            raw: RawScores::default(),
        })
    }

    fn prepare(&mut self, pod: &Pod, nodes: &Nodes) -> PodPlan {
        self.tallies.begin();
        self.reset_scratch(nodes.id_bound());
        let none = Labels::default();
        let namespace_labels = nodes.namespace_labels(&pod.namespace).unwrap_or(&none);
        let affinity = &pod.pod_affinity;
        let resolve = |term| IncomingTerm::resolve(term, &pod.namespace, nodes);

        let mut prepared = Prepared::default();
        if !affinity.required_affinity.is_empty() {
            let terms = affinity.required_affinity.iter().map(resolve).collect();
            let slot = self.tallies.slot(terms, nodes, &self.pods_by_label);
            let tally = self.tallies.get(slot);
            prepared.first_of_group = tally.is_empty()
                && tally
                    .terms
                    .iter()
                    .all(|term| term.matches(&pod.namespace, &pod.labels));
            prepared.affinity = Some(slot);
        }
        for term in &affinity.required_anti_affinity {
            let slot = self
                .tallies
                .slot(vec![resolve(term)], nodes, &self.pods_by_label);
            prepared.anti_affinity.push(slot);
        }
        let groups = self.existing_anti_affinity.candidates(&pod.labels);
        for (position, (term, group)) in groups.enumerate() {
            if !group.counts.is_empty()
                && term.matches(&pod.namespace, namespace_labels, &pod.labels)
            {
                prepared.existing_anti_affinity.push(position);
            }
        }
        let nothing_required = prepared.affinity.is_none()
            && prepared.anti_affinity.is_empty()
            && prepared.existing_anti_affinity.is_empty();
        self.prepared = prepared;
        let filter = if nothing_required {
            FilterPlan::Skip
        } else {
            self.failing_plan(pod, nodes)
        };
        let score = self.prepare_score(pod, nodes, namespace_labels);
        PodPlan { filter, score }
    }

    fn pod_added(&mut self, id: PodId, pod: ExistingPodRef<'_>, node: &NodeInfo) {
        self.track(id, pod, &node.labels, true);
    }

    fn pod_removed(&mut self, id: PodId, pod: ExistingPodRef<'_>, node: &NodeInfo) {
        self.track(id, pod, &node.labels, false);
    }
}

impl FilterPlugin for InterPodAffinity {
    fn filter(&self, pod: &Pod, node: &NodeInfo) -> Verdict {
        let prepared = &self.prepared;
        if let Some(slot) = prepared.affinity {
            let tally = self.tallies.get(slot);
            let mut in_every_domain = true;
            for (term, counts) in tally.terms.iter().zip(&tally.counts) {
                match node.labels.get(&term.topology_key) {
                    None => return Err(Failure::unresolvable(AFFINITY_REASON)),
                    Some(value) => in_every_domain &= counts.contains(value),
                }
            }
            if !in_every_domain && !prepared.first_of_group {
                return Err(Failure::unresolvable(AFFINITY_REASON));
            }
        }
        for &slot in &prepared.anti_affinity {
            let tally = self.tallies.get(slot);
            if node
                .labels
                .get(&tally.terms[0].topology_key)
                .is_some_and(|value| tally.counts[0].contains(value))
            {
                return Err(Failure::unschedulable(ANTI_AFFINITY_REASON));
            }
        }
        if !prepared.existing_anti_affinity.is_empty() {
            let groups = self.existing_anti_affinity.candidates(&pod.labels);
            for (position, (term, group)) in groups.enumerate() {
                if prepared.existing_anti_affinity.contains(&position)
                    && node
                        .labels
                        .get(&term.topology_key)
                        .is_some_and(|value| group.counts.contains(value))
                {
                    return Err(Failure::unschedulable(EXISTING_ANTI_AFFINITY_REASON));
                }
            }
        }
        Ok(())
    }
}

impl ScorePlugin for InterPodAffinity {
    const NORMALIZE: Normalize = Normalize::Custom;

    fn score(&self, pod: &Pod, node: &NodeInfo) -> i64 {
        let counted = |key: &str, counts: &Counts| {
            node.labels
                .get(key)
                .and_then(|value| counts.get(value))
                .map_or(0, i64::from)
        };
        let mut score = 0;
        for &(slot, weight) in &self.prepared.score_tallies {
            let tally = self.tallies.get(slot);
            score += weight * counted(&tally.terms[0].topology_key, &tally.counts[0]);
        }
        if !self.prepared.score_groups.is_empty() {
            let groups = self.scoring.candidates(&pod.labels);
            for (position, ((term, weight), group)) in groups.enumerate() {
                if self.prepared.score_groups.contains(&position) {
                    score += weight * counted(&term.topology_key, &group.counts);
                }
            }
        }
        score
    }

    fn score_batch(&mut self, _pod: &Pod, nodes: &Nodes, ids: &[NodeId], out: &mut Vec<i64>) {
        let of_node = &self.raw.of_node;
        extend_in_blocks(out, ids, |&id| {
            if nodes.contains(id) {
                of_node.get(id as usize).copied().unwrap_or(0)
            } else {
                i64::MIN
            }
        });
    }

    /// kube-scheduler's NormalizeScore: `100 * (s - min) / (max - min)` in floating point,
    /// truncated; all equal gives 0.
    fn normalize(&self, _pod: &Pod, scores: &mut [i64]) {
        let Some(&first) = scores.first() else {
            return;
        };
        let (min, max) = scores
            .iter()
            .fold((first, first), |(min, max), &s| (min.min(s), max.max(s)));
        let spread = max - min;
        if spread == 0 {
            scores.fill(0);
            return;
        }
        // Most feasible nodes share one raw score (0: no matching pod in their domains), so a run
        // of equal scores is converted once: the conversion (two float operations and a
        // saturating cast) cost ~4 ns a node as WebAssembly. The minimum maps to 0 exactly.
        let mut last = (min, 0);
        for score in scores.iter_mut() {
            if *score != last.0 {
                last = (
                    *score,
                    (100.0 * ((*score - min) as f64 / spread as f64)) as i64,
                );
            }
            *score = last.1;
        }
    }
}

wasched_sdk::export_plugin!(InterPodAffinity: filter, score);

#[cfg(not(target_arch = "wasm32"))]
mod cases;
#[cfg(test)]
mod incremental_tests;
#[cfg(not(target_arch = "wasm32"))]
pub use cases::cases;

#[cfg(test)]
mod normalize_tests {
    use super::*;
    use wasched_sdk::testing::Walk;

    /// kube-scheduler's NormalizeScore written out per node, as the plugin did before converting
    /// each run of equal scores once.
    fn per_node(scores: &[i64]) -> Vec<i64> {
        let (min, max) = (scores.iter().min().unwrap(), scores.iter().max().unwrap());
        let spread = max - min;
        scores
            .iter()
            .map(|s| {
                if spread > 0 {
                    (100.0 * ((s - min) as f64 / spread as f64)) as i64
                } else {
                    0
                }
            })
            .collect()
    }

    #[test]
    fn normalizing_runs_of_equal_scores_once_gives_every_node_its_own_result() {
        let plugin = InterPodAffinity::new("{}").expect("default args");
        let pod = Pod::default();
        let mut walk = Walk(7);
        for round in 0..500 {
            let len = 1 + walk.below(60) as usize;
            // Few distinct values, in runs and interleaved, negative ones too (anti-affinity).
            let values: Vec<i64> = (0..1 + walk.below(4))
                .map(|_| walk.below(400) as i64 - 150)
                .collect();
            let scores: Vec<i64> = (0..len)
                .map(|_| values[walk.below(values.len() as u64) as usize])
                .collect();
            let mut normalized = scores.clone();
            plugin.normalize(&pod, &mut normalized);
            assert_eq!(normalized, per_node(&scores), "round {round}: {scores:?}");
        }
    }
}
