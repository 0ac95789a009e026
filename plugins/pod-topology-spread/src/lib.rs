//! PodTopologySpread: keeps the pods a selector matches spread over topology domains within
//! `maxSkew` (filter, `whenUnsatisfiable: DoNotSchedule`) and prefers the domains with the fewest
//! (score, `ScheduleAnyway`), with kube-scheduler's cluster default constraints for pods without
//! their own (kube-scheduler's `podtopologyspread` plugin).
//!
//! kube-scheduler counts, for every pod it schedules, the matching pods of every node. This plugin
//! keeps per selector the matching pods per node as pods enter and leave its mirror
//! ([`counts::Tallies`]), and per constraint set the nodes that count and their domains
//! ([`counts::EligibilityCache`], worked out again only when nodes change). `prepare` then sums
//! the few nodes that have matching pods into domains and names the failing nodes through the
//! mirror's label index, so the host calls the filter for no node.

pub mod args;
pub mod constraints;
pub mod counts;

use std::collections::{HashMap, HashSet};

use wasched_sdk::{
    ExistingPod, ExistingPodParts, Failure, FilterPlan, FilterPlugin, FilterResults, NodeId,
    NodeInfo, Nodes, Normalize, Plugin, Pod, PodId, PodParts, PodPlan, ScorePlugin, Verdict,
};

pub use args::{Args, Defaulting};
use args::{DO_NOT_SCHEDULE, SCHEDULE_ANYWAY};
use constraints::{constraints, Constraint};
use counts::{EligibilityCache, EligibilityKey, Tallies};

/// The name used in configs and messages.
pub const NAME: &str = "PodTopologySpread";
/// `ErrReasonNodeLabelNotMatch` (UnschedulableAndUnresolvable).
pub const MISSING_LABEL_REASON: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";
/// `ErrReasonConstraintsNotMatch` (Unschedulable).
pub const CONSTRAINTS_REASON: &str = "node(s) didn't match pod topology spread constraints";

/// Verdicts of the failing-nodes plan.
const MISSING_LABEL: u8 = 1;
const SKEW: u8 = 2;

/// The raw score of a node the score leaves out (it lacks a key of the pod's own constraints):
/// normalized to 0 and not counted in the minimum and maximum.
const IGNORED: i64 = -1;

/// One `DoNotSchedule` constraint as PreFilter leaves it for Filter.
struct FilterConstraint {
    topology_key: String,
    max_skew: i64,
    /// The smallest count over the eligible domains (0 with fewer than `minDomains` of them).
    min_match: i64,
    /// 1 when the pod matches its own selector.
    self_match: i64,
    /// Domain value → matching pods on the eligible nodes there; absent means 0.
    counts: HashMap<String, i64>,
}

impl FilterConstraint {
    fn skew_fails(&self, value: &str) -> bool {
        self.counts.get(value).copied().unwrap_or(0) + self.self_match - self.min_match
            > self.max_skew
    }
}

/// The `ScheduleAnyway` constraints of the current pod, from `prepare`.
struct PreScore {
    constraints: Vec<Constraint>,
    /// The tally of each constraint; `None` when its selector counts no pod.
    slots: Vec<Option<usize>>,
    eligibility: EligibilityKey,
    /// Nodes lacking a key are left out (the pod's own constraints, or listed defaults).
    require_all_keys: bool,
}

/// What the score worked out over the feasible nodes (kube-scheduler's PreScore state).
#[derive(Default)]
struct Scored {
    /// Per constraint: `ln(domains + 2)`.
    weights: Vec<f64>,
    /// Per constraint (not by hostname): matching pods per domain value.
    counts: Vec<HashMap<String, i64>>,
}

/// The plugin.
pub struct PodTopologySpread {
    args: Args,
    tallies: Tallies,
    eligibility: EligibilityCache,
    filter: Vec<FilterConstraint>,
    prescore: Option<PreScore>,
    scored: Scored,
    /// Per topology key: the nodes without it, at the mirror generation they were listed at.
    missing: HashMap<String, (u64, Vec<NodeId>)>,
    /// Per node id: the failing-plan verdict of the current pod (0 = passes).
    verdicts: Vec<u8>,
    failing: Vec<NodeId>,
}

impl PodTopologySpread {
    fn mark(&mut self, id: NodeId, verdict: u8) {
        let slot = &mut self.verdicts[id as usize];
        if *slot == 0 {
            *slot = verdict;
            self.failing.push(id);
        }
    }

    fn nodes_missing(&mut self, key: &str, nodes: &Nodes) -> Vec<NodeId> {
        match self.missing.get(key) {
            Some((generation, ids)) if *generation == nodes.generation() => ids.clone(),
            _ => {
                let ids: Vec<NodeId> = nodes
                    .ids()
                    .filter(|&id| nodes.get(id).is_some_and(|n| n.labels.get(key).is_none()))
                    .collect();
                self.missing
                    .insert(key.to_string(), (nodes.generation(), ids.clone()));
                ids
            }
        }
    }

    /// kube-scheduler's PreFilter: per `DoNotSchedule` constraint, the matching pods per
    /// eligible domain and the global minimum.
    fn prepare_filter(&mut self, pod: &Pod, nodes: &Nodes) -> FilterPlan {
        self.filter.clear();
        let constraints = constraints(pod, &self.args, DO_NOT_SCHEDULE);
        if constraints.is_empty() {
            return FilterPlan::Skip;
        }
        let slots: Vec<Option<usize>> = constraints
            .iter()
            .map(|c| {
                (!c.selector.counts_nothing())
                    .then(|| self.tallies.slot(&pod.namespace, &c.selector, nodes))
            })
            .collect();
        let key = EligibilityKey::new(pod, &constraints, true);
        let eligibility = self.eligibility.get(key, nodes);
        for (i, c) in constraints.iter().enumerate() {
            let mut counts: HashMap<String, i64> = HashMap::new();
            if let Some(slot) = slots[i] {
                for (&id, &n) in &self.tallies.get(slot).per_node {
                    if !eligibility.counts(i, id) {
                        continue;
                    }
                    if let Some(value) = nodes.get(id).and_then(|n| n.labels.get(&c.topology_key)) {
                        match counts.get_mut(value) {
                            Some(sum) => *sum += i64::from(n),
                            None => {
                                counts.insert(value.to_string(), i64::from(n));
                            }
                        }
                    }
                }
            }
            let domains = eligibility.domains[i].len() as i64;
            let min_match = if domains < c.min_domains {
                0
            } else if domains == 0 {
                i64::from(i32::MAX)
            } else if (counts.len() as i64) < domains {
                0
            } else {
                counts.values().copied().min().unwrap_or(0)
            };
            self.filter.push(FilterConstraint {
                topology_key: c.topology_key.clone(),
                max_skew: c.max_skew,
                min_match,
                self_match: i64::from(c.selector.matches(&pod.labels)),
                counts,
            });
        }
        self.failing_plan(nodes)
    }

    /// The nodes the current pod fails on: those missing a key, and those of the domains whose
    /// skew would exceed `maxSkew`; a node failing several constraints reports the first.
    fn failing_plan(&mut self, nodes: &Nodes) -> FilterPlan {
        for id in self.failing.drain(..) {
            self.verdicts[id as usize] = 0;
        }
        if self.verdicts.len() < nodes.id_bound() {
            self.verdicts.resize(nodes.id_bound(), 0);
        }
        let filter = std::mem::take(&mut self.filter);
        for c in &filter {
            for id in self.nodes_missing(&c.topology_key, nodes) {
                self.mark(id, MISSING_LABEL);
            }
            for value in c.counts.keys().filter(|value| c.skew_fails(value)) {
                for &id in nodes.nodes_with_label(&c.topology_key, value) {
                    self.mark(id, SKEW);
                }
            }
        }
        self.filter = filter;
        if self.failing.is_empty() {
            return FilterPlan::Skip;
        }
        self.failing.sort_unstable();
        let mut results = FilterResults::default();
        let mut interned = [0u32; 3];
        for &id in &self.failing {
            let verdict = self.verdicts[id as usize] as usize;
            if interned[verdict] == 0 {
                interned[verdict] = results.intern(if verdict == MISSING_LABEL as usize {
                    Failure::unresolvable(MISSING_LABEL_REASON)
                } else {
                    Failure::unschedulable(CONSTRAINTS_REASON)
                });
            }
            results.verdicts.push(interned[verdict]);
        }
        FilterPlan::FailingNodes {
            nodes: self.failing.clone(),
            results,
        }
    }

    /// The `ScheduleAnyway` part of PreScore that does not depend on the feasible nodes.
    fn prepare_score(&mut self, pod: &Pod, nodes: &Nodes) -> bool {
        let constraints = constraints(pod, &self.args, SCHEDULE_ANYWAY);
        if constraints.is_empty() {
            self.prescore = None;
            return false;
        }
        let require_all_keys = !pod.topology_spread_constraints.is_empty()
            || self.args.defaulting != Defaulting::System;
        let slots = constraints
            .iter()
            .map(|c| {
                (!c.selector.counts_nothing())
                    .then(|| self.tallies.slot(&pod.namespace, &c.selector, nodes))
            })
            .collect();
        self.prescore = Some(PreScore {
            eligibility: EligibilityKey::new(pod, &constraints, require_all_keys),
            constraints,
            slots,
            require_all_keys,
        });
        true
    }

    fn ignored(pre: &PreScore, node: &NodeInfo) -> bool {
        pre.require_all_keys
            && !pre
                .constraints
                .iter()
                .all(|c| node.labels.get(&c.topology_key).is_some())
    }

    /// The raw score of `node` under the state of the last score batch.
    fn raw_score(&self, pre: &PreScore, node: &NodeInfo, on_node: impl Fn(usize) -> i64) -> i64 {
        if Self::ignored(pre, node) {
            return IGNORED;
        }
        let mut score = 0.0;
        for (i, c) in pre.constraints.iter().enumerate() {
            let Some(value) = node.labels.get(&c.topology_key) else {
                continue;
            };
            let count = if c.is_hostname() {
                on_node(i)
            } else {
                self.scored.counts[i].get(value).copied().unwrap_or(0)
            };
            score += count as f64 * self.scored.weights[i] + (c.max_skew - 1) as f64;
        }
        score.round() as i64
    }
}

impl Plugin for PodTopologySpread {
    const NAME: &'static str = NAME;
    const READS_POD: PodParts = PodParts::IDENTITY
        .union(PodParts::LABELS)
        .union(PodParts::NODE_SELECTION)
        .union(PodParts::TOLERATIONS)
        .union(PodParts::TOPOLOGY_SPREAD);
    const READS_EXISTING_PODS: ExistingPodParts = ExistingPodParts::LABELS;
    const INDEXES_LABELS: bool = true;

    fn new(config: &str) -> Result<Self, String> {
        Ok(PodTopologySpread {
            args: Args::parse(config)?,
            tallies: Tallies::default(),
            eligibility: EligibilityCache::default(),
            filter: Vec::new(),
            prescore: None,
            scored: Scored::default(),
            missing: HashMap::new(),
            verdicts: Vec::new(),
            failing: Vec::new(),
        })
    }

    fn prepare(&mut self, pod: &Pod, nodes: &Nodes) -> PodPlan {
        self.tallies.begin();
        let filter = self.prepare_filter(pod, nodes);
        let score = self.prepare_score(pod, nodes);
        PodPlan { filter, score }
    }

    fn pod_added(&mut self, id: PodId, pod: &ExistingPod, node: &NodeInfo) {
        self.tallies.apply(id, pod, node, true);
    }

    fn pod_removed(&mut self, id: PodId, pod: &ExistingPod, node: &NodeInfo) {
        self.tallies.apply(id, pod, node, false);
    }
}

impl FilterPlugin for PodTopologySpread {
    fn filter(&self, _pod: &Pod, node: &NodeInfo) -> Verdict {
        for c in &self.filter {
            match node.labels.get(&c.topology_key) {
                None => return Err(Failure::unresolvable(MISSING_LABEL_REASON)),
                Some(value) if c.skew_fails(value) => {
                    return Err(Failure::unschedulable(CONSTRAINTS_REASON))
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}

impl ScorePlugin for PodTopologySpread {
    const NORMALIZE: Normalize = Normalize::Custom;

    /// The score of one node under the state of the last [`ScorePlugin::score_batch`], which the
    /// host always calls with every feasible node.
    fn score(&self, _pod: &Pod, node: &NodeInfo) -> i64 {
        let Some(pre) = &self.prescore else {
            return 0;
        };
        self.raw_score(pre, node, |i| {
            pre.slots[i].map_or(0, |slot| {
                let tally = self.tallies.get(slot);
                i64::from(tally.per_name.get(node.name.as_str()).copied().unwrap_or(0))
            })
        })
    }

    /// kube-scheduler's PreScore over the feasible nodes `ids` (the domains they make weigh the
    /// counts), then its Score per node.
    fn score_batch(&mut self, _pod: &Pod, nodes: &Nodes, ids: &[NodeId], out: &mut Vec<i64>) {
        let Some(pre) = self.prescore.take() else {
            out.extend(ids.iter().map(|_| 0));
            return;
        };
        let eligibility = self.eligibility.get(pre.eligibility.clone(), nodes);
        let considered: Vec<&NodeInfo> = ids
            .iter()
            .filter_map(|&id| nodes.get(id))
            .filter(|node| !Self::ignored(&pre, node))
            .collect();
        let mut scored = Scored::default();
        for (i, c) in pre.constraints.iter().enumerate() {
            let mut counts = HashMap::new();
            let size = if c.is_hostname() {
                considered.len()
            } else {
                let domains: HashSet<&str> = considered
                    .iter()
                    .map(|node| node.labels.get(&c.topology_key).unwrap_or_default())
                    .collect();
                if let Some(slot) = pre.slots[i] {
                    for (&id, &n) in &self.tallies.get(slot).per_node {
                        if !eligibility.counts(i, id) {
                            continue;
                        }
                        let Some(node) = nodes.get(id) else { continue };
                        let value = node.labels.get(&c.topology_key).unwrap_or_default();
                        if domains.contains(value) {
                            *counts.entry(value.to_string()).or_insert(0) += i64::from(n);
                        }
                    }
                }
                domains.len()
            };
            scored.weights.push(((size + 2) as f64).ln());
            scored.counts.push(counts);
        }
        self.scored = scored;
        for &id in ids {
            out.push(match nodes.get(id) {
                None => i64::MIN,
                Some(node) => self.raw_score(&pre, node, |i| {
                    pre.slots[i].map_or(0, |slot| i64::from(self.tallies.get(slot).on_node(id)))
                }),
            });
        }
        self.prescore = Some(pre);
    }

    /// kube-scheduler's NormalizeScore: `100 * (max + min - s) / max` over the nodes not left
    /// out (all 100 when the maximum is 0); a node left out scores 0.
    fn normalize(&self, _pod: &Pod, scores: &mut [i64]) {
        let counted = || scores.iter().copied().filter(|&s| s != IGNORED);
        let min = counted().min().unwrap_or(0);
        let max = counted().max().unwrap_or(0).max(0);
        for score in scores.iter_mut() {
            *score = if *score == IGNORED {
                0
            } else if max == 0 {
                100
            } else {
                100 * (max + min - *score) / max
            };
        }
    }
}

wasched_sdk::export_plugin!(PodTopologySpread: filter, score);

#[cfg(not(target_arch = "wasm32"))]
mod cases;
#[cfg(not(target_arch = "wasm32"))]
pub use cases::cases;
