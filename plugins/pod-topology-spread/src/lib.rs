//! PodTopologySpread: keeps the pods a selector matches spread over topology domains within
//! `maxSkew` (filter, `whenUnsatisfiable: DoNotSchedule`) and prefers the domains with the fewest
//! (score, `ScheduleAnyway`), with kube-scheduler's cluster default constraints for pods without
//! their own (kube-scheduler's `podtopologyspread` plugin).
//!
//! kube-scheduler counts, for every pod it schedules, the matching pods of every node. This plugin
//! keeps per selector the matching pods per node as pods enter and leave its mirror
//! ([`counts::Tallies`]), and per constraint set the nodes that count and their domains
//! ([`counts::EligibilityCache`], read again for the nodes that change). `prepare` then sums
//! the few nodes that have matching pods into domains and names the failing nodes through the
//! mirror's label index, so the host calls the filter for no node.

#![warn(missing_docs)]

pub mod args;
pub mod constraints;
pub mod counts;

use std::collections::HashMap;

use wasched_sdk::helpers::{for_each_in_blocks, round_half_away, FastMap};

use wasched_sdk::{
    ExistingPodParts, ExistingPodRef, Failure, FilterPlan, FilterPlugin, FilterResults,
    LabelColumnId, NodeId, NodeInfo, Nodes, Normalize, Plugin, Pod, PodId, PodParts, PodPlan,
    ScorePlugin, Verdict,
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

/// Verdicts of the filter and of the failing-nodes plan.
const PASS: u8 = 0;
const MISSING_LABEL: u8 = 1;
const SKEW: u8 = 2;
/// A node the mirror lacks (the batch filter only).
const UNKNOWN: u8 = 3;

/// The raw score of a node the score leaves out (it lacks a key of the pod's own constraints):
/// normalized to 0 and not counted in the minimum and maximum.
const IGNORED: i64 = -1;

/// One `DoNotSchedule` constraint as PreFilter leaves it for Filter.
struct FilterConstraint {
    topology_key: String,
    /// The key's column in the mirror's label index (`None`: no node has the key).
    column: Option<LabelColumnId>,
    max_skew: i64,
    /// The smallest count over the eligible domains (0 with fewer than `minDomains` of them).
    min_match: i64,
    /// 1 when the pod matches its own selector.
    self_match: i64,
    /// Per value id of the key: the skew there exceeds `maxSkew`.
    fails: Vec<bool>,
}

/// Matching pods per domain value, kept from cycle to cycle so that counting allocates only for
/// values never seen before: an entry counts only when stamped with the current cycle.
#[derive(Default)]
struct DomainCounts {
    stamp: u64,
    counts: FastMap<String, (u64, i64)>,
}

/// Entries kept before the map is emptied (distinct values of one key stay far below this).
const DOMAIN_COUNTS_LIMIT: usize = 1 << 16;

impl DomainCounts {
    fn begin(&mut self, stamp: u64) {
        if self.counts.len() > DOMAIN_COUNTS_LIMIT {
            self.counts.clear();
        }
        self.stamp = stamp;
    }

    fn add(&mut self, value: &str, n: i64) {
        let stamp = self.stamp;
        match self.counts.get_mut(value) {
            Some(entry) if entry.0 == stamp => entry.1 += n,
            Some(entry) => *entry = (stamp, n),
            None => {
                self.counts.insert(value.to_string(), (stamp, n));
            }
        }
    }

    fn get(&self, value: &str) -> i64 {
        match self.counts.get(value) {
            Some(&(stamp, n)) if stamp == self.stamp => n,
            _ => 0,
        }
    }

    /// This cycle's counts.
    #[cfg(test)]
    fn current(&self) -> HashMap<String, i64> {
        self.counts
            .iter()
            .filter(|(_, (stamp, _))| *stamp == self.stamp)
            .map(|(value, &(_, n))| (value.clone(), n))
            .collect()
    }
}

/// Per-value (or per-node) sums of one cycle in a vector reused from cycle to cycle, with the
/// indexes touched so that emptying it costs what filling it did.
#[derive(Default)]
struct Scratch {
    sums: Vec<i64>,
    touched: Vec<u32>,
}

impl Scratch {
    fn add(&mut self, index: u32, n: i64) {
        let slot = index as usize;
        if slot >= self.sums.len() {
            self.sums.resize(slot + 1, 0);
        }
        if self.sums[slot] == 0 {
            self.touched.push(index);
        }
        self.sums[slot] += n;
    }

    fn get(&self, index: u32) -> i64 {
        self.sums.get(index as usize).copied().unwrap_or(0)
    }

    fn clear(&mut self) {
        for index in self.touched.drain(..) {
            self.sums[index as usize] = 0;
        }
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
    /// Per filter constraint position: its domain counts, by value text.
    domains: Vec<DomainCounts>,
    cycle: u64,
    prescore: Option<PreScore>,
    scored: Scored,
    /// Per topology key: the nodes without it, at the mirror generation they were listed at.
    missing: FastMap<String, (u64, Vec<NodeId>)>,
    /// Per node id: the failing-plan verdict of the current pod (0 = passes).
    verdicts: Vec<u8>,
    failing: Vec<NodeId>,
    /// The batch filter's verdicts, kept for the next batch's allocation.
    batch_verdicts: Vec<u8>,
    by_value: Scratch,
    by_node: Scratch,
}

/// At most this share of the nodes (1/8) goes into a failing-nodes plan; beyond it the host
/// calls the batch filter, a table lookup per node, for the nodes it examines.
const FAILING_PLAN_SHARE: usize = 8;

impl PodTopologySpread {
    fn mark(&mut self, id: NodeId, verdict: u8) {
        let slot = &mut self.verdicts[id as usize];
        if *slot == 0 {
            *slot = verdict;
            self.failing.push(id);
        }
    }

    /// The nodes without label `key`, listed again only when the nodes change.
    fn nodes_missing(&mut self, key: &str, nodes: &Nodes) -> &[NodeId] {
        let fresh = self
            .missing
            .get(key)
            .is_some_and(|(generation, _)| *generation == nodes.generation());
        if !fresh {
            let ids: Vec<NodeId> = nodes
                .ids()
                .filter(|&id| nodes.get(id).is_some_and(|n| n.labels.get(key).is_none()))
                .collect();
            self.missing
                .insert(key.to_string(), (nodes.generation(), ids));
        }
        &self.missing[key].1
    }

    /// kube-scheduler's PreFilter: per `DoNotSchedule` constraint, the matching pods per
    /// eligible domain and the global minimum.
    fn prepare_filter(&mut self, pod: &Pod, nodes: &Nodes) -> FilterPlan {
        self.filter.clear();
        let constraints = constraints(pod, &self.args, DO_NOT_SCHEDULE);
        if constraints.is_empty() {
            return FilterPlan::Skip;
        }
        self.cycle += 1;
        if self.domains.len() < constraints.len() {
            self.domains
                .resize_with(constraints.len(), DomainCounts::default);
        }
        let slots: Vec<Option<usize>> = constraints
            .iter()
            .map(|c| {
                (!c.selector.counts_nothing())
                    .then(|| self.tallies.slot(&pod.namespace, &c.selector, nodes))
            })
            .collect();
        let key = EligibilityKey::new(pod, &constraints, true);
        let eligibility = self.eligibility.get(&key, nodes);
        for (i, c) in constraints.iter().enumerate() {
            let column = nodes.label_column(&c.topology_key);
            let domains = &mut self.domains[i];
            domains.begin(self.cycle);
            if let (Some(slot), Some(column)) = (slots[i], column) {
                // Compact per-node arrays only: the nodes themselves are not read.
                for (&id, n, _) in self.tallies.get(slot).per_node.iter() {
                    let value = nodes.label_value(column, id);
                    if value != 0 && eligibility.counts(i, id) {
                        self.by_value.add(value, i64::from(n));
                    }
                }
                for &value in &self.by_value.touched {
                    let text = nodes.label_value_text(column, value).unwrap_or_default();
                    domains.add(text, self.by_value.get(value));
                }
            }
            let eligible_domains = eligibility.domain_count[i] as i64;
            let counted = &self.by_value.touched;
            let min_match = if eligible_domains < c.min_domains {
                0
            } else if eligible_domains == 0 {
                i64::from(i32::MAX)
            } else if (counted.len() as i64) < eligible_domains {
                0
            } else {
                counted
                    .iter()
                    .map(|&v| self.by_value.get(v))
                    .min()
                    .unwrap_or(0)
            };
            let self_match = i64::from(c.selector.matches(&pod.labels));
            let mut fails = vec![false; column.map_or(1, |c| nodes.label_value_bound(c))];
            for &value in counted {
                fails[value as usize] =
                    self.by_value.get(value) + self_match - min_match > c.max_skew;
            }
            self.by_value.clear();
            self.filter.push(FilterConstraint {
                topology_key: c.topology_key.clone(),
                column,
                max_skew: c.max_skew,
                min_match,
                self_match,
                fails,
            });
        }
        self.failing_plan(nodes)
    }

    /// Each prepared constraint's label values by node and failing values, found once per
    /// batch: finding the column again for every node cost several loads and bounds checks per
    /// node as WebAssembly.
    fn rules<'a>(&'a self, nodes: &'a Nodes) -> Vec<(&'a [u32], &'a [bool])> {
        self.filter
            .iter()
            .map(|c| {
                let of_node = c
                    .column
                    .map_or(&[][..], |column| nodes.label_values(column));
                (of_node, c.fails.as_slice())
            })
            .collect()
    }

    /// Names the failing nodes when they are few: those missing a key, and those of the domains
    /// whose skew would exceed `maxSkew`; a node failing several constraints reports the first.
    fn failing_plan(&mut self, nodes: &Nodes) -> FilterPlan {
        for id in self.failing.drain(..) {
            self.verdicts[id as usize] = 0;
        }
        if self.verdicts.len() < nodes.id_bound() {
            self.verdicts.resize(nodes.id_bound(), 0);
        }
        let filter = std::mem::take(&mut self.filter);
        let mut failing = 0;
        for c in &filter {
            failing += self.nodes_missing(&c.topology_key, nodes).len();
            if let Some(column) = c.column {
                for (value, _) in c.fails.iter().enumerate().filter(|(_, &f)| f) {
                    failing += nodes.nodes_with_label_value(column, value as u32).len();
                }
            }
        }
        if failing > nodes.len() / FAILING_PLAN_SHARE {
            self.filter = filter;
            return FilterPlan::Run;
        }
        for c in &filter {
            let missing = self.nodes_missing(&c.topology_key, nodes).to_vec();
            for id in missing {
                self.mark(id, MISSING_LABEL);
            }
            if let Some(column) = c.column {
                for (value, _) in c.fails.iter().enumerate().filter(|(_, &f)| f) {
                    for &id in nodes.nodes_with_label_value(column, value as u32) {
                        self.mark(id, SKEW);
                    }
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
                interned[verdict] = results.intern(failure(verdict as u8));
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

    /// kube-scheduler's Score from the counts of one node: per constraint whose key it has, its
    /// domain's count (its own for the hostname) weighted, plus `maxSkew - 1`; rounded once.
    fn raw_score(pre: &PreScore, weights: &[f64], count: impl Fn(usize) -> Option<i64>) -> i64 {
        let mut score = 0.0;
        for (i, c) in pre.constraints.iter().enumerate() {
            if let Some(count) = count(i) {
                score += count as f64 * weights[i] + (c.max_skew - 1) as f64;
            }
        }
        round_half_away(score) as i64
    }
}

/// The verdict of node `id` under the prepared constraints' `rules`: the first one it fails.
#[inline]
fn verdict(rules: &[(&[u32], &[bool])], id: NodeId) -> u8 {
    for &(of_node, fails) in rules {
        let value = of_node.get(id as usize).copied().unwrap_or(0);
        if value == 0 {
            return MISSING_LABEL;
        }
        if fails[value as usize] {
            return SKEW;
        }
    }
    PASS
}

/// `verdicts[k]`: the verdict of node `ids[k]` ([`UNKNOWN`] when the mirror lacks it).
#[inline(always)]
fn first_failures_with(
    rules: &[(&[u32], &[bool])],
    nodes: &Nodes,
    ids: &[NodeId],
    verdicts: &mut [u8],
) {
    let n = verdicts.len().min(ids.len());
    let (ids, verdicts) = (&ids[..n], &mut verdicts[..n]);
    for_each_in_blocks(n, |k| {
        let id = ids[k];
        verdicts[k] = if nodes.contains(id) {
            verdict(rules, id)
        } else {
            UNKNOWN
        };
    });
}

#[inline(never)]
fn first_failures(rules: &[(&[u32], &[bool])], nodes: &Nodes, ids: &[NodeId], verdicts: &mut [u8]) {
    first_failures_with(rules, nodes, ids, verdicts);
}

/// [`first_failures`] under one constraint, the usual case: with the rules a one-element array,
/// the loop over them per node is gone.
#[inline(never)]
fn first_failures_of_one(
    rule: (&[u32], &[bool]),
    nodes: &Nodes,
    ids: &[NodeId],
    verdicts: &mut [u8],
) {
    first_failures_with(&[rule], nodes, ids, verdicts);
}

/// What the score does with a feasible node: the host does not know it (`i64::MIN`), it lacks a
/// required key ([`IGNORED`]), or it is scored.
const UNKNOWN_NODE: u8 = 0;
const UNLABELED_NODE: u8 = 1;
const SCORED_NODE: u8 = 2;

/// `out[k]`: node `ids[k]`'s value id in a column's `of_node` (0 when it has none).
#[inline(never)]
fn gather_values(of_node: &[u32], ids: &[NodeId], out: &mut [u32]) {
    let n = out.len().min(ids.len());
    let (ids, out) = (&ids[..n], &mut out[..n]);
    for_each_in_blocks(n, |k| {
        out[k] = of_node.get(ids[k] as usize).copied().unwrap_or(0);
    });
}

#[inline(never)]
fn mark_known(nodes: &Nodes, ids: &[NodeId], kinds: &mut [u8]) {
    let n = kinds.len().min(ids.len());
    let (ids, kinds) = (&ids[..n], &mut kinds[..n]);
    for_each_in_blocks(n, |k| {
        kinds[k] = if nodes.contains(ids[k]) {
            SCORED_NODE
        } else {
            UNKNOWN_NODE
        };
    });
}

/// Leaves out the scored nodes without the constraint's key (value id 0).
#[inline(never)]
fn ignore_unlabeled(values: &[u32], kinds: &mut [u8]) {
    let n = kinds.len().min(values.len());
    let (values, kinds) = (&values[..n], &mut kinds[..n]);
    for_each_in_blocks(n, |k| {
        if values[k] == 0 && kinds[k] == SCORED_NODE {
            kinds[k] = UNLABELED_NODE;
        }
    });
}

#[inline(never)]
fn count_scored(kinds: &[u8]) -> usize {
    let mut count = 0;
    for_each_in_blocks(kinds.len(), |k| {
        count += usize::from(kinds[k] == SCORED_NODE)
    });
    count
}

/// Marks the domains (value ids) of the scored nodes.
#[inline(never)]
fn mark_domains(values: &[u32], kinds: &[u8], domain: &mut [bool]) {
    let n = kinds.len().min(values.len());
    let (values, kinds) = (&values[..n], &kinds[..n]);
    for_each_in_blocks(n, |k| {
        if kinds[k] == SCORED_NODE {
            if let Some(seen) = domain.get_mut(values[k] as usize) {
                *seen = true;
            }
        }
    });
}

/// Adds one hostname constraint's term for each node with the key: its own matching pods
/// (`per_node`, by node id) weighted, plus the skew.
#[inline(never)]
fn add_node_counts(
    values: &[u32],
    ids: &[NodeId],
    per_node: &[i64],
    weight: f64,
    skew: f64,
    sums: &mut [f64],
) {
    let n = sums.len().min(values.len()).min(ids.len());
    let (values, ids, sums) = (&values[..n], &ids[..n], &mut sums[..n]);
    for_each_in_blocks(n, |k| {
        if values[k] != 0 {
            let count = per_node.get(ids[k] as usize).copied().unwrap_or(0);
            sums[k] += count as f64 * weight + skew;
        }
    });
}

/// Adds one constraint's term for each node with the key: its domain's matching pods
/// (`by_value`, by value id) weighted, plus the skew.
#[inline(never)]
fn add_domain_counts(values: &[u32], by_value: &[i64], weight: f64, skew: f64, sums: &mut [f64]) {
    let n = sums.len().min(values.len());
    let (values, sums) = (&values[..n], &mut sums[..n]);
    for_each_in_blocks(n, |k| {
        let v = values[k];
        if v != 0 {
            let count = by_value.get(v as usize).copied().unwrap_or(0);
            sums[k] += count as f64 * weight + skew;
        }
    });
}

/// The raw scores: `i64::MIN` for a node the mirror lacks, [`IGNORED`] for one left out, else
/// its sum rounded.
#[inline(never)]
fn finish_scores(kinds: &[u8], sums: &[f64], out: &mut Vec<i64>) {
    let n = kinds.len().min(sums.len());
    let start = out.len();
    out.resize(start + n, 0);
    let (kinds, sums, scores) = (&kinds[..n], &sums[..n], &mut out[start..]);
    for_each_in_blocks(n, |k| {
        scores[k] = match kinds[k] {
            UNKNOWN_NODE => i64::MIN,
            UNLABELED_NODE => IGNORED,
            _ => round_half_away(sums[k]) as i64,
        };
    });
}

fn failure(verdict: u8) -> Failure {
    if verdict == MISSING_LABEL {
        Failure::unresolvable(MISSING_LABEL_REASON)
    } else {
        Failure::unschedulable(CONSTRAINTS_REASON)
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
    // No constraints of its own, and no selector for the cluster's default constraints.
    const IDLE_WITHOUT: PodParts = PodParts::TOPOLOGY_SPREAD;
    const INDEXES_LABELS: bool = true;

    fn new(config: &str) -> Result<Self, String> {
        Ok(PodTopologySpread {
            args: Args::parse(config)?,
            tallies: Tallies::default(),
            eligibility: EligibilityCache::default(),
            filter: Vec::new(),
            domains: Vec::new(),
            cycle: 0,
            prescore: None,
            scored: Scored::default(),
            missing: FastMap::default(),
            verdicts: Vec::new(),
            failing: Vec::new(),
            batch_verdicts: Vec::new(),
            by_value: Scratch::default(),
            by_node: Scratch::default(),
        })
    }

    fn prepare(&mut self, pod: &Pod, nodes: &Nodes) -> PodPlan {
        self.tallies.begin();
        let filter = self.prepare_filter(pod, nodes);
        let score = self.prepare_score(pod, nodes);
        PodPlan { filter, score }
    }

    fn pod_added(&mut self, id: PodId, pod: ExistingPodRef<'_>, node: &NodeInfo) {
        self.tallies.apply(id, pod, node, true);
    }

    fn pod_removed(&mut self, id: PodId, pod: ExistingPodRef<'_>, node: &NodeInfo) {
        self.tallies.apply(id, pod, node, false);
    }
}

impl FilterPlugin for PodTopologySpread {
    fn filter(&self, _pod: &Pod, node: &NodeInfo) -> Verdict {
        for (c, domains) in self.filter.iter().zip(&self.domains) {
            match node.labels.get(&c.topology_key) {
                None => return Err(failure(MISSING_LABEL)),
                Some(value) if domains.get(value) + c.self_match - c.min_match > c.max_skew => {
                    return Err(failure(SKEW))
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    fn filter_batch(&mut self, _pod: &Pod, nodes: &Nodes, ids: &[NodeId], out: &mut FilterResults) {
        let mut verdicts = std::mem::take(&mut self.batch_verdicts);
        let rules = self.rules(nodes);
        verdicts.clear();
        verdicts.resize(ids.len(), 0);
        match rules.as_slice() {
            [rule] => first_failures_of_one(*rule, nodes, ids, &mut verdicts),
            _ => first_failures(&rules, nodes, ids, &mut verdicts),
        }
        let mut interned = [0u32; 3];
        let failures = &mut out.failures;
        out.verdicts.extend(
            verdicts
                .iter()
                .zip(ids)
                .map(|(&verdict, &id)| match verdict {
                    PASS => 0,
                    UNKNOWN => FilterResults::intern_into(failures, Nodes::unknown(id)),
                    verdict => {
                        let verdict = verdict as usize;
                        if interned[verdict] == 0 {
                            interned[verdict] =
                                FilterResults::intern_into(failures, failure(verdict as u8));
                        }
                        interned[verdict]
                    }
                }),
        );
        self.batch_verdicts = verdicts;
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
        if Self::ignored(pre, node) {
            return IGNORED;
        }
        Self::raw_score(pre, &self.scored.weights, |i| {
            let c = &pre.constraints[i];
            let value = node.labels.get(&c.topology_key)?;
            Some(if c.is_hostname() {
                pre.slots[i].map_or(0, |slot| {
                    let per_name = &self.tallies.get(slot).per_name;
                    i64::from(per_name.get(node.name.as_str()).copied().unwrap_or(0))
                })
            } else {
                self.scored.counts[i].get(value).copied().unwrap_or(0)
            })
        })
    }

    /// kube-scheduler's PreScore over the feasible nodes `ids` (the domains they make weigh the
    /// counts), then its Score per node, on label value ids.
    ///
    /// The passes over the feasible nodes are small functions of their own (`inline(never)`),
    /// walking whole blocks of nodes: inlined into this one, their loop variables, the memory base
    /// and the deadline check's two words lived on the stack, and as WebAssembly each node cost
    /// several stack loads and a deadline check per pass.
    fn score_batch(&mut self, _pod: &Pod, nodes: &Nodes, ids: &[NodeId], out: &mut Vec<i64>) {
        let Some(pre) = self.prescore.take() else {
            out.extend(ids.iter().map(|_| 0));
            return;
        };
        let eligibility = self.eligibility.get(&pre.eligibility, nodes);
        let columns: Vec<Option<LabelColumnId>> = pre
            .constraints
            .iter()
            .map(|c| nodes.label_column(&c.topology_key))
            .collect();
        // Each feasible node's value id per constraint (0: no such label), one constraint after
        // the other.
        let n = ids.len();
        let mut values = vec![0u32; n * pre.constraints.len()];
        let of = |i: usize| i * n..(i + 1) * n;
        for (i, column) in columns.iter().enumerate() {
            if let Some(column) = *column {
                gather_values(nodes.label_values(column), ids, &mut values[of(i)]);
            }
        }
        let mut kinds = vec![UNKNOWN_NODE; n];
        mark_known(nodes, ids, &mut kinds);
        if pre.require_all_keys {
            for i in 0..pre.constraints.len() {
                ignore_unlabeled(&values[of(i)], &mut kinds);
            }
        }
        let considered_count = count_scored(&kinds);
        let mut scored = Scored::default();
        let mut counts_by_value: Vec<Vec<i64>> = Vec::with_capacity(pre.constraints.len());
        for (i, c) in pre.constraints.iter().enumerate() {
            let mut by_value = Vec::new();
            let mut counts = HashMap::new();
            let size = if c.is_hostname() {
                considered_count
            } else {
                // Domains of the feasible nodes not left out; value 0 is the domain of nodes
                // without the key, which counts when keys are not required.
                let bound = columns[i].map_or(1, |c| nodes.label_value_bound(c));
                let mut domain = vec![false; bound];
                mark_domains(&values[of(i)], &kinds, &mut domain);
                by_value = vec![0i64; bound];
                if let Some(slot) = pre.slots[i] {
                    for (&id, n, _) in self.tallies.get(slot).per_node.iter() {
                        let v = columns[i].map_or(0, |c| nodes.label_value(c, id)) as usize;
                        if eligibility.counts(i, id) && domain[v] {
                            by_value[v] += i64::from(n);
                        }
                    }
                }
                if let Some(column) = columns[i] {
                    for (v, &n) in by_value.iter().enumerate().skip(1).filter(|(_, &n)| n > 0) {
                        let text = nodes.label_value_text(column, v as u32).unwrap_or_default();
                        counts.insert(text.to_string(), n);
                    }
                }
                domain.iter().filter(|&&d| d).count()
            };
            if c.is_hostname() {
                if let Some(slot) = pre.slots[i] {
                    for (&id, n, _) in self.tallies.get(slot).per_node.iter() {
                        self.by_node.add(id, i64::from(n));
                    }
                }
            }
            scored.weights.push(((size + 2) as f64).ln());
            scored.counts.push(counts);
            counts_by_value.push(by_value);
        }
        // kube-scheduler's Score, one constraint at a time over the nodes (as `raw_score`
        // does per node, adding in the same order, so the sums are the same to the bit).
        let mut sums = vec![0.0f64; n];
        for (i, c) in pre.constraints.iter().enumerate() {
            let weight = scored.weights[i];
            let skew = (c.max_skew - 1) as f64;
            let of_constraint = &values[of(i)];
            if c.is_hostname() {
                add_node_counts(
                    of_constraint,
                    ids,
                    &self.by_node.sums,
                    weight,
                    skew,
                    &mut sums,
                );
            } else {
                add_domain_counts(of_constraint, &counts_by_value[i], weight, skew, &mut sums);
            }
        }
        finish_scores(&kinds, &sums, out);
        self.by_node.clear();
        self.scored = scored;
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
#[cfg(test)]
mod incremental_tests;
#[cfg(not(target_arch = "wasm32"))]
pub use cases::cases;
