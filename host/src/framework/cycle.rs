//! One scheduling cycle, as kube-scheduler runs it: PreFilter (`set-pod`), Filter over a sample of
//! nodes starting where the last cycle stopped, Score + normalize + weights, then the best node with
//! ties broken at random.

use std::collections::BTreeSet;
use std::time::Instant;

use wasched_sdk::{self as sdk, Code, FilterPlan, FilterResults, Normalize};

use super::fit_error::{nodes_unavailable, rejected_before_filtering, NO_NODES_AVAILABLE};
use super::spin::SpinPool;
use super::{catch_up, OnFailure, Phase, Profile, Slot, Worker};
use crate::cache::Cache;
use crate::runtime::{CallError, PluginInstance};

/// A plugin instance place: a slot's (the scheduling thread's) or a worker's, emptied when the
/// instance fails so that the next sync makes a fresh one.
type InstanceRef<'a> = &'a mut Option<Box<dyn PluginInstance>>;

/// Fewest nodes per thread worth handing to a worker: below this the hand-off costs more than it
/// saves.
const MIN_NODES_PER_WORKER: usize = 64;

/// kube-scheduler's `minFeasibleNodesToFind`: below this many nodes every node is checked.
pub const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
/// kube-scheduler's `minFeasibleNodesPercentageToFind`.
pub const MIN_FEASIBLE_NODES_PERCENTAGE: usize = 5;

/// How many feasible nodes a cycle looks for among `nodes` (kube-scheduler's
/// `numFeasibleNodesToFind`). A percentage of 0 is adaptive: 50% minus 1% per 125 nodes, at least 5%.
pub fn feasible_nodes_to_find(percentage: u32, nodes: usize) -> usize {
    if nodes < MIN_FEASIBLE_NODES_TO_FIND {
        return nodes;
    }
    let mut percentage = percentage as usize;
    if percentage == 0 {
        percentage = 50usize
            .saturating_sub(nodes / 125)
            .max(MIN_FEASIBLE_NODES_PERCENTAGE);
    }
    (nodes * percentage / 100).max(MIN_FEASIBLE_NODES_TO_FIND)
}

/// What `--explain` shows for one node the cycle looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeReport {
    pub node: String,
    pub feasible: bool,
    /// Why the node was ruled out (empty when feasible).
    pub reasons: Vec<String>,
    /// Normalized score per score plugin that had an opinion.
    pub scores: Vec<(String, i64)>,
    /// Weighted sum of the scores.
    pub total: i64,
}

/// The result of one cycle.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The chosen node.
    pub node: Option<String>,
    /// Why the pod was not placed: the FitError message, or the plugin error.
    pub message: Option<String>,
    /// True when a plugin failed, as opposed to no node fitting.
    pub error: bool,
    /// Filled only when the cycle was asked to explain itself.
    pub nodes: Vec<NodeReport>,
}

impl Outcome {
    fn unschedulable(message: String, nodes: Vec<NodeReport>) -> Outcome {
        Outcome {
            message: Some(message),
            nodes,
            ..Outcome::default()
        }
    }

    fn quarantined(slot: &Slot, now: std::time::Duration) -> Outcome {
        let remaining = slot.quarantined_until.unwrap_or(now).saturating_sub(now);
        Outcome {
            message: Some(format!(
                "plugin {} is quarantined for {}s more after {} consecutive failures (last: {})",
                slot.spec.name,
                remaining.as_secs(),
                slot.consecutive_failures,
                slot.last_error.as_deref().unwrap_or("unknown")
            )),
            error: true,
            ..Outcome::default()
        }
    }

    fn plugin_error(plugin: &str, error: &CallError) -> Outcome {
        Outcome {
            message: Some(format!("plugin {plugin} failed in {error}")),
            error: true,
            ..Outcome::default()
        }
    }
}

/// A node's failure: which filter plugin rejected it and the index of the failure in the cycle's
/// table of distinct failures.
#[derive(Clone, Copy)]
struct Rejection {
    failure: u32,
}

impl Profile {
    /// Runs one cycle for `pod` against the cache. Does not place the pod.
    pub(super) fn schedule(&mut self, cache: &mut Cache, pod: &sdk::Pod, explain: bool) -> Outcome {
        let now = self.clock.now();
        let mut mark = Instant::now();
        // Plugins left out of this cycle: quarantined or failed with the `ignore` policy.
        let mut left_out = vec![false; self.slots.len()];
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if slot.quarantined(now) {
                match slot.spec.policy.on_failure {
                    OnFailure::Ignore => left_out[i] = true,
                    OnFailure::Fail => return Outcome::quarantined(slot, now),
                }
                continue;
            }
            if let Err(e) = slot.sync(cache) {
                if let Some(outcome) = fail(slot, &e, now) {
                    return outcome;
                }
                left_out[i] = true;
            }
        }
        cache.refresh_listing();
        self.phases.lap(Phase::Snapshot, &mut mark);
        let cache: &Cache = cache;
        let all = cache.listing();
        if all.is_empty() {
            return Outcome::unschedulable(NO_NODES_AVAILABLE.to_string(), Vec::new());
        }

        // PreFilter / PreScore: every plugin sees the pod once.
        let left_out_plan = sdk::PodPlan {
            filter: FilterPlan::Skip,
            score: false,
        };
        // Workers bring their mirrors up to date and start the pod while this thread starts it on
        // the slots' instances: each slot lends its spec to the workers and its instance here.
        let mut answers: Vec<Option<Result<sdk::PodPlan, CallError>>> = Vec::new();
        let mut worker_errors: Vec<Vec<(usize, CallError)>> = vec![Vec::new(); self.workers.len()];
        {
            let (specs, mut instances): (Vec<(&super::PluginSpec, bool)>, Vec<InstanceRef>) = self
                .slots
                .iter_mut()
                .map(|slot| {
                    let reads_usage = slot.descriptor.reads_usage;
                    ((&slot.spec, reads_usage), &mut slot.instance)
                })
                .unzip();
            let left_out = &left_out;
            let main = || {
                answers = instances
                    .iter_mut()
                    .zip(left_out)
                    .map(|(instance, &out)| {
                        (!out).then(|| instance.as_mut().expect("synced above").set_pod(pod))
                    })
                    .collect();
            };
            let helpers = self.workers.iter_mut().zip(&mut worker_errors);
            run_beside(self.pool.as_ref(), main, helpers, |(worker, errors)| {
                prepare_worker(worker, &specs, cache, left_out, pod, errors)
            });
        }
        let mut plans = Vec::with_capacity(self.slots.len());
        for (i, answer) in answers.into_iter().enumerate() {
            let error = match answer {
                None => None,
                Some(Ok(plan)) => {
                    plans.push(plan);
                    continue;
                }
                Some(Err(e)) => Some(e),
            };
            if let Some(e) = error {
                if let Some(outcome) = fail(&mut self.slots[i], &e, now) {
                    return outcome;
                }
                left_out[i] = true;
            }
            plans.push(left_out_plan.clone());
        }
        for (i, e) in worker_errors.into_iter().flatten() {
            if left_out[i] {
                continue;
            }
            if let Some(outcome) = fail(&mut self.slots[i], &e, now) {
                return outcome;
            }
            left_out[i] = true;
            plans[i] = left_out_plan.clone();
        }
        self.failing
            .resize_with(self.slots.len(), FailingTable::default);
        for table in &mut self.failing {
            table.active = false;
        }
        for &i in &self.filters {
            if let FilterPlan::FailingNodes { nodes, results } = &plans[i].filter {
                if let Err(message) = self.failing[i].fill(nodes, results, cache.id_bound()) {
                    let e = CallError::new("set-pod", message);
                    if let Some(outcome) = fail(&mut self.slots[i], &e, now) {
                        return outcome;
                    }
                    left_out[i] = true;
                    plans[i] = left_out_plan.clone();
                }
            }
        }
        let mut only: Option<BTreeSet<&str>> = None;
        let mut narrowing_plugins: Vec<&str> = Vec::new();
        let mut active_filters = Vec::with_capacity(self.filters.len());
        for &i in &self.filters {
            let name = self.slots[i].spec.name.as_str();
            match &plans[i].filter {
                FilterPlan::Run | FilterPlan::FailingNodes { .. } => active_filters.push(i),
                FilterPlan::Skip => {}
                FilterPlan::OnlyNodes(names) => {
                    active_filters.push(i);
                    narrowing_plugins.push(name);
                    let names: BTreeSet<&str> = names.iter().map(String::as_str).collect();
                    only = Some(match only {
                        None => names,
                        Some(previous) => previous.intersection(&names).copied().collect(),
                    });
                }
                FilterPlan::Reject(failure) if failure.code == Code::Error => {
                    return Outcome {
                        message: Some(format!(
                            "running PreFilter plugin {name:?}: {}",
                            failure.reasons.join(", ")
                        )),
                        error: true,
                        ..Outcome::default()
                    };
                }
                FilterPlan::Reject(failure) => {
                    let reasons: Vec<String> =
                        failure.reasons.iter().map(|r| r.to_string()).collect();
                    let report = if explain {
                        all.iter()
                            .map(|&id| infeasible(cache, id, reasons.clone()))
                            .collect()
                    } else {
                        Vec::new()
                    };
                    return Outcome::unschedulable(
                        rejected_before_filtering(all.len(), &failure.reasons),
                        report,
                    );
                }
            }
        }
        if let Some(names) = &only {
            if names.is_empty() {
                let reason = if narrowing_plugins.len() == 1 {
                    format!("node(s) didn't satisfy plugin {}", narrowing_plugins[0])
                } else {
                    format!(
                        "node(s) didn't satisfy plugin(s) [{}] simultaneously",
                        narrowing_plugins.join(" ")
                    )
                };
                return Outcome::unschedulable(
                    rejected_before_filtering(all.len(), &[reason]),
                    Vec::new(),
                );
            }
        }
        let narrowed: Vec<u32>;
        let candidates: &[u32] = match &only {
            None => all,
            Some(names) => {
                narrowed = all
                    .iter()
                    .copied()
                    .filter(|&id| {
                        cache
                            .node(id)
                            .is_some_and(|n| names.contains(n.info.name.as_str()))
                    })
                    .collect();
                &narrowed
            }
        };
        narrowing_plugins.sort_unstable();
        let absent_reason = format!(
            "node(s) didn't satisfy plugin(s) [{}]",
            narrowing_plugins.join(" ")
        );
        let absent = all.len() - candidates.len();

        self.phases.lap(Phase::PreFilter, &mut mark);

        // Filter.
        let to_find = if self.scores.is_empty() {
            1
        } else {
            feasible_nodes_to_find(
                self.percentage_of_nodes_to_score.unwrap_or(0),
                candidates.len(),
            )
        };
        let mut search = Search::default();
        if !candidates.is_empty() {
            if let Err(outcome) = self.find_feasible(
                candidates,
                to_find,
                &active_filters,
                &mut left_out,
                &mut search,
            ) {
                return *outcome;
            }
            if let Some((slot, message)) = search.error.take() {
                return Outcome {
                    message: Some(format!(
                        "running {:?} filter plugin: {message}",
                        self.slots[slot].spec.name
                    )),
                    error: true,
                    ..Outcome::default()
                };
            }
        }
        self.next_start = (self.next_start + search.processed) % all.len();

        let mut reports: Vec<NodeReport> = Vec::new();
        if explain {
            for &(id, rejection) in &search.rejected {
                reports.push(infeasible(cache, id, search.reasons(rejection)));
            }
        }
        if search.feasible.is_empty() {
            self.record_successes(&left_out);
            let absent_reasons = std::iter::repeat_n(absent_reason.as_str(), absent);
            let reasons = search
                .rejected
                .iter()
                .flat_map(|&(_, r)| {
                    search.failures[r.failure as usize]
                        .reasons
                        .iter()
                        .map(|s| s.as_ref())
                })
                .chain(absent_reasons);
            return Outcome::unschedulable(nodes_unavailable(all.len(), reasons), reports);
        }

        self.phases.lap(Phase::Filter, &mut mark);

        // Score. With a single feasible node there is nothing to compare (as in kube-scheduler).
        let feasible = &search.feasible;
        let mut totals = vec![0i64; feasible.len()];
        let mut per_plugin: Vec<(String, Vec<i64>)> = Vec::new();
        if feasible.len() > 1 {
            let scored: Vec<(usize, i64)> = self
                .scores
                .iter()
                .copied()
                .filter(|&(i, _)| plans[i].score && !left_out[i])
                .collect();
            let plugins: Vec<usize> = scored.iter().map(|&(i, _)| i).collect();
            let mut parts: Vec<Vec<Result<Vec<i64>, CallError>>> =
                vec![Vec::new(); 1 + self.workers.len()];
            let used = self.on_each_part(feasible, &mut parts, |instances, nodes, part| {
                score_part(instances, &plugins, nodes, part)
            });
            parts.truncate(used);
            let mut per_part: Vec<_> = parts.into_iter().map(Vec::into_iter).collect();
            for &(i, weight) in &scored {
                let mut scores = Vec::with_capacity(feasible.len());
                let mut failed = None;
                for part in &mut per_part {
                    match part.next().expect("one result per plugin") {
                        Ok(part_scores) => scores.extend(part_scores),
                        Err(e) => failed = failed.or(Some(e)),
                    }
                }
                let slot = &mut self.slots[i];
                let result = match failed {
                    Some(e) => Err(e),
                    None => finish_scores(slot, feasible.len(), &mut scores),
                };
                if let Err(e) = result {
                    if let Some(outcome) = fail(slot, &e, now) {
                        return outcome;
                    }
                    left_out[i] = true;
                    continue;
                }
                for (total, score) in totals.iter_mut().zip(&scores) {
                    *total += score * weight;
                }
                if explain {
                    per_plugin.push((self.slots[i].spec.name.clone(), scores));
                }
            }
        }

        self.record_successes(&left_out);
        self.phases.lap(Phase::Score, &mut mark);

        // Select: the highest total; ties broken uniformly at random (reservoir sampling).
        let mut best = 0;
        let mut ties = 1u64;
        for (position, &total) in totals.iter().enumerate().skip(1) {
            if total > totals[best] {
                best = position;
                ties = 1;
            } else if total == totals[best] {
                ties += 1;
                if self.rng.below(ties) == 0 {
                    best = position;
                }
            }
        }
        if explain {
            for (position, &id) in feasible.iter().enumerate() {
                reports.push(NodeReport {
                    node: node_name(cache, id),
                    feasible: true,
                    reasons: Vec::new(),
                    scores: per_plugin
                        .iter()
                        .map(|(name, scores)| (name.clone(), scores[position]))
                        .collect(),
                    total: totals[position],
                });
            }
        }
        let node = node_name(cache, feasible[best]);
        self.phases.lap(Phase::Select, &mut mark);
        Outcome {
            node: Some(node),
            message: None,
            error: false,
            nodes: reports,
        }
    }

    /// Walks `candidates` from `next_start`, running the active filters over growing chunks, until
    /// `to_find` nodes passed or every candidate was examined. The result is exactly what examining
    /// one node at a time would give; later nodes of the last chunk are discarded.
    fn find_feasible(
        &mut self,
        candidates: &[u32],
        to_find: usize,
        active_filters: &[usize],
        left_out: &mut [bool],
        search: &mut Search,
    ) -> Result<(), Box<Outcome>> {
        let now = self.clock.now();
        let n = candidates.len();
        let start = self.next_start % n;
        let mut chunk_len = to_find.max(1);
        let mut position = 0;
        let mut chunk: Vec<u32> = Vec::new();
        let mut verdicts: Vec<Option<Rejection>> = Vec::new();
        let mut parts: Vec<PartVerdicts> = (0..=self.workers.len())
            .map(|_| PartVerdicts::default())
            .collect();
        let mut interned: Vec<Option<u32>> = Vec::new();
        while position < n && search.feasible.len() < to_find {
            let end = n.min(position + chunk_len);
            chunk.clear();
            // Positions count from `start`, wrapping around: two plain copies, no division per node.
            let (from, to) = (start + position, start + end);
            if to <= n {
                chunk.extend_from_slice(&candidates[from..to]);
            } else if from >= n {
                chunk.extend_from_slice(&candidates[from - n..to - n]);
            } else {
                chunk.extend_from_slice(&candidates[from..]);
                chunk.extend_from_slice(&candidates[..to - n]);
            }
            let left_out_now: &[bool] = left_out;
            let failing = std::mem::take(&mut self.failing);
            let used = self.on_each_part(&chunk, &mut parts, |instances, nodes, part| {
                filter_part(
                    instances,
                    active_filters,
                    left_out_now,
                    &failing,
                    nodes,
                    part,
                )
            });
            self.failing = failing;
            for part in &parts[..used] {
                for (slot_index, e) in &part.errors {
                    if left_out[*slot_index] {
                        continue;
                    }
                    if let Some(outcome) = fail(&mut self.slots[*slot_index], e, now) {
                        return Err(Box::new(outcome));
                    }
                    // Ignored: this plugin passes every node for the rest of the cycle.
                    left_out[*slot_index] = true;
                }
            }
            verdicts.clear();
            for part in &parts[..used] {
                interned.clear();
                interned.resize(part.failures.len(), None);
                for &verdict in &part.verdicts {
                    if verdict == 0 {
                        verdicts.push(None);
                        continue;
                    }
                    let local = verdict as usize - 1;
                    let failure = match interned[local] {
                        Some(f) => f,
                        None => {
                            let (slot_index, f) = &part.failures[local];
                            if f.code == Code::Error {
                                search.error = Some((*slot_index, f.reasons.join(", ")));
                                return Ok(());
                            }
                            let index = search.intern(f);
                            interned[local] = Some(index);
                            index
                        }
                    };
                    verdicts.push(Some(Rejection { failure }));
                }
            }
            for (k, verdict) in verdicts.iter().enumerate() {
                match verdict {
                    None => {
                        search.feasible.push(chunk[k]);
                        if search.feasible.len() == to_find {
                            search.processed = position + k + 1;
                            return Ok(());
                        }
                    }
                    Some(rejection) => search.rejected.push((chunk[k], *rejection)),
                }
            }
            position = end;
            chunk_len = next_chunk_len(
                to_find - search.feasible.len(),
                search.feasible.len(),
                position,
            );
        }
        search.processed = position;
        Ok(())
    }
}

impl Profile {
    /// Splits `nodes` between this thread and the workers and runs `work` on each share with that
    /// thread's plugin instances, writing into its entry of `parts` (one per thread). Returns how
    /// many entries were used, in the order of `nodes`.
    fn on_each_part<P: Send>(
        &mut self,
        nodes: &[u32],
        parts: &mut [P],
        work: impl Fn(&mut [InstanceRef], &[u32], &mut P) + Sync,
    ) -> usize {
        let ranges = split(nodes.len(), parts.len());
        let (main_part, helper_parts) = parts.split_at_mut(1);
        let mut main_instances: Vec<InstanceRef> =
            self.slots.iter_mut().map(|s| &mut s.instance).collect();
        let work = &work;
        let main = || {
            work(
                &mut main_instances,
                &nodes[ranges[0].clone()],
                &mut main_part[0],
            )
        };
        let helpers = self.workers.iter_mut().zip(helper_parts).zip(&ranges[1..]);
        run_beside(
            self.pool.as_ref(),
            main,
            helpers,
            |((worker, part), range)| {
                let mut instances: Vec<InstanceRef> = worker.instances.iter_mut().collect();
                work(&mut instances, &nodes[range.clone()], part);
            },
        );
        ranges.len()
    }
}

/// How many nodes the next chunk should hold to find `missing` more feasible nodes, judging by
/// the share that passed so far, with a margin so one more chunk usually suffices. Every node
/// filtered past the last needed one is wasted work, so this aims close rather than doubling.
fn next_chunk_len(missing: usize, found: usize, examined: usize) -> usize {
    const MARGIN: f64 = 1.2;
    const MIN_CHUNK: usize = 32;
    let pass_rate = (found.max(1) as f64 / examined.max(1) as f64).min(1.0);
    ((missing as f64 / pass_rate * MARGIN) as usize).max(MIN_CHUNK)
}

/// Records a plugin failure and applies its policy: `Some(outcome)` ends the cycle (`fail`),
/// `None` leaves the plugin out of the rest of the cycle (`ignore`).
fn fail(slot: &mut Slot, error: &CallError, now: std::time::Duration) -> Option<Outcome> {
    slot.record_failure(error, now);
    match slot.spec.policy.on_failure {
        OnFailure::Fail => Some(Outcome::plugin_error(&slot.spec.name, error)),
        OnFailure::Ignore => None,
    }
}

impl Profile {
    fn record_successes(&mut self, left_out: &[bool]) {
        for (slot, &out) in self.slots.iter_mut().zip(left_out) {
            if !out {
                slot.record_success();
            }
        }
    }
}

/// What the filter phase found.
#[derive(Default)]
struct Search {
    feasible: Vec<u32>,
    rejected: Vec<(u32, Rejection)>,
    /// Distinct failures seen this cycle.
    failures: Vec<sdk::Failure>,
    /// Nodes examined, feasible or not.
    processed: usize,
    /// A filter reported an error (not a verdict): the slot and its message.
    error: Option<(usize, String)>,
}

impl Search {
    fn intern(&mut self, failure: &sdk::Failure) -> u32 {
        match self.failures.iter().position(|f| f == failure) {
            Some(i) => i as u32,
            None => {
                self.failures.push(failure.clone());
                (self.failures.len() - 1) as u32
            }
        }
    }

    fn reasons(&self, rejection: Rejection) -> Vec<String> {
        self.failures[rejection.failure as usize]
            .reasons
            .iter()
            .map(|r| r.to_string())
            .collect()
    }
}

fn node_name(cache: &Cache, id: u32) -> String {
    cache
        .node(id)
        .map(|n| n.info.name.clone())
        .unwrap_or_default()
}

fn infeasible(cache: &Cache, id: u32, reasons: Vec<String>) -> NodeReport {
    NodeReport {
        node: node_name(cache, id),
        feasible: false,
        reasons,
        scores: Vec::new(),
        total: 0,
    }
}

/// Normalizes one plugin's raw scores of the `count` feasible nodes and checks their range.
fn finish_scores(slot: &mut Slot, count: usize, scores: &mut Vec<i64>) -> Result<(), CallError> {
    match slot.descriptor.normalize {
        Normalize::None => {}
        Normalize::Scale => sdk::helpers::default_normalize(scores, false),
        Normalize::Reverse => sdk::helpers::default_normalize(scores, true),
        Normalize::Custom => slot.instance.as_mut().expect("synced").normalize(scores)?,
    }
    if let Some((position, bad)) = scores
        .iter()
        .enumerate()
        .find(|(_, s)| !(sdk::helpers::MIN_NODE_SCORE..=sdk::helpers::MAX_NODE_SCORE).contains(*s))
    {
        return Err(CallError::new(
            "score",
            format!(
                "returned {bad} for node #{position} of {count}, outside 0..=100 after normalizing"
            ),
        ));
    }
    Ok(())
}

/// Splits `len` nodes into at most `threads` contiguous, nearly equal ranges, none smaller than
/// [`MIN_NODES_PER_WORKER`] unless there is only one.
fn split(len: usize, threads: usize) -> Vec<std::ops::Range<usize>> {
    let count = threads.min(len / MIN_NODES_PER_WORKER).max(1);
    (0..count)
        .map(|t| len * t / count..len * (t + 1) / count)
        .collect()
}

/// Runs `main` on this thread while the pool's workers run `work` on the helper items (one
/// each); returns when all are done. Without a pool everything runs here, in order.
fn run_beside<T: Send>(
    pool: Option<&SpinPool>,
    main: impl FnOnce(),
    helpers: impl Iterator<Item = T>,
    work: impl Fn(T) + Sync,
) {
    match pool {
        None => {
            main();
            helpers.for_each(work);
        }
        Some(pool) => {
            let work = &work;
            let mut jobs: Vec<_> = helpers
                .map(|item| {
                    let mut item = Some(item);
                    move || {
                        if let Some(item) = item.take() {
                            work(item);
                        }
                    }
                })
                .collect();
            let lent: Vec<&mut (dyn FnMut() + Send)> = jobs
                .iter_mut()
                .map(|job| job as &mut (dyn FnMut() + Send))
                .collect();
            pool.run(lent, main);
        }
    }
}

/// Brings a worker's mirrors up to date and starts the cycle of `pod` on its instances; failures
/// are returned by slot (and the failed instance dropped, to be re-made at the next sync).
fn prepare_worker(
    worker: &mut Worker,
    specs: &[(&super::PluginSpec, bool)],
    cache: &Cache,
    left_out: &[bool],
    pod: &sdk::Pod,
    errors: &mut Vec<(usize, CallError)>,
) {
    for (i, (spec, reads_usage)) in specs.iter().enumerate() {
        if left_out[i] {
            continue;
        }
        let (instance, synced) = (&mut worker.instances[i], &mut worker.synced[i]);
        let result = catch_up(spec, *reads_usage, instance, synced, cache)
            .and_then(|()| instance.as_mut().expect("caught up").set_pod(pod));
        if let Err(e) = result {
            *instance = None;
            *synced = None;
            errors.push((i, e));
        }
    }
}

/// One thread's share of a chunk: what the active filters make of its nodes.
#[derive(Default)]
struct PartVerdicts {
    /// Per node: 0 when it passed, else 1 + index into `failures`.
    verdicts: Vec<u32>,
    /// The failures the part's nodes were rejected with, by the slot that rejected them.
    failures: Vec<(usize, sdk::Failure)>,
    /// Plugins whose call failed on this part, by slot; they judged none of its nodes.
    errors: Vec<(usize, CallError)>,
    alive: Vec<usize>,
    batch: Vec<u32>,
    results: FilterResults,
    /// Per failure of a [`FailingTable`]: its index in `failures` plus 1, once a node used it.
    copied: Vec<u32>,
}

/// A slot's `failing-nodes` plan as a table by node id, kept from cycle to cycle so that a cycle
/// writes it rather than allocates it. A stamp per entry tells this cycle's entries from older
/// ones, so nothing is cleared between cycles.
#[derive(Default)]
pub(super) struct FailingTable {
    /// Whether the slot's plan this cycle is `failing-nodes`.
    active: bool,
    /// Per node id: the stamp of the cycle that wrote the entry (high half) and its verdict.
    entries: Vec<u64>,
    stamp: u32,
    failures: Vec<sdk::Failure>,
}

impl FailingTable {
    /// Takes this cycle's plan; ids at or past `id_bound` name no node and are left out.
    fn fill(
        &mut self,
        nodes: &[u32],
        results: &FilterResults,
        id_bound: usize,
    ) -> Result<(), String> {
        self.active = false;
        if nodes.len() != results.verdicts.len() {
            return Err(format!(
                "failing-nodes listed {} nodes with {} verdicts",
                nodes.len(),
                results.verdicts.len()
            ));
        }
        let table_len = results.failures.len() as u32;
        let highest = results.verdicts.iter().copied().max().unwrap_or(0);
        if highest > table_len {
            return Err(format!(
                "failing-nodes verdict {highest} points past its {table_len} failures"
            ));
        }
        self.stamp = self.stamp.wrapping_add(1);
        if self.stamp == 0 {
            self.entries.fill(0);
            self.stamp = 1;
        }
        let stamp = u64::from(self.stamp) << 32;
        for (&id, &verdict) in nodes.iter().zip(&results.verdicts) {
            let id = id as usize;
            if id >= id_bound {
                continue;
            }
            if id >= self.entries.len() {
                self.entries.resize(id_bound, 0);
            }
            self.entries[id] = stamp | u64::from(verdict);
        }
        self.failures.clone_from(&results.failures);
        self.active = true;
        Ok(())
    }

    /// The verdict for node `id`: 0 (passes) unless this cycle's plan listed it.
    fn verdict(&self, id: u32) -> u32 {
        match self.entries.get(id as usize) {
            Some(&entry) if (entry >> 32) as u32 == self.stamp => entry as u32,
            _ => 0,
        }
    }
}

/// Runs the active filters over `nodes`, each on the nodes every earlier filter passed. A filter
/// whose plan listed its failing nodes is read from its table instead of called.
fn filter_part(
    instances: &mut [InstanceRef],
    active_filters: &[usize],
    left_out: &[bool],
    failing: &[FailingTable],
    nodes: &[u32],
    out: &mut PartVerdicts,
) {
    out.verdicts.clear();
    out.verdicts.resize(nodes.len(), 0);
    out.failures.clear();
    out.errors.clear();
    out.alive.clear();
    out.alive.extend(0..nodes.len());
    for &slot_index in active_filters {
        if out.alive.is_empty() {
            break;
        }
        if left_out[slot_index] {
            continue;
        }
        let table = &failing[slot_index];
        if table.active {
            out.copied.clear();
            out.copied.resize(table.failures.len(), 0);
            let mut kept = 0;
            for j in 0..out.alive.len() {
                let k = out.alive[j];
                match table.verdict(nodes[k]) {
                    0 => {
                        out.alive[kept] = k;
                        kept += 1;
                    }
                    v => {
                        let copied = &mut out.copied[v as usize - 1];
                        if *copied == 0 {
                            let failure = table.failures[v as usize - 1].clone();
                            out.failures.push((slot_index, failure));
                            *copied = out.failures.len() as u32;
                        }
                        out.verdicts[k] = *copied;
                    }
                }
            }
            out.alive.truncate(kept);
            continue;
        }
        out.batch.clear();
        out.batch.extend(out.alive.iter().map(|&k| nodes[k]));
        out.results.clear();
        let instance = instances[slot_index].as_mut().expect("synced");
        if let Err(e) = instance.filter(&out.batch, &mut out.results) {
            *instances[slot_index] = None;
            out.errors.push((slot_index, e));
            continue;
        }
        let base = out.failures.len() as u32;
        out.failures
            .extend(out.results.failures.drain(..).map(|f| (slot_index, f)));
        let mut kept = 0;
        for j in 0..out.alive.len() {
            let k = out.alive[j];
            match out.results.verdicts[j] {
                0 => {
                    out.alive[kept] = k;
                    kept += 1;
                }
                v => out.verdicts[k] = base + v,
            }
        }
        out.alive.truncate(kept);
    }
}

/// Raw scores of `nodes` from each plugin in `plugins`, in order.
fn score_part(
    instances: &mut [InstanceRef],
    plugins: &[usize],
    nodes: &[u32],
    out: &mut Vec<Result<Vec<i64>, CallError>>,
) {
    for &slot_index in plugins {
        let mut scores = Vec::with_capacity(nodes.len());
        let instance = instances[slot_index].as_mut().expect("synced");
        match instance.score(nodes, &mut scores) {
            Ok(()) => out.push(Ok(scores)),
            Err(e) => {
                *instances[slot_index] = None;
                out.push(Err(e));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adaptive_percentage_matches_kube_scheduler() {
        assert_eq!(
            feasible_nodes_to_find(0, 50),
            50,
            "small clusters check every node"
        );
        assert_eq!(feasible_nodes_to_find(0, 100), 100);
        assert_eq!(feasible_nodes_to_find(0, 500), 230, "50 - 500/125 = 46%");
        assert_eq!(feasible_nodes_to_find(0, 5000), 500, "50 - 40 = 10%");
        assert_eq!(feasible_nodes_to_find(0, 50_000), 2500, "floored at 5%");
        assert_eq!(feasible_nodes_to_find(30, 1000), 300);
        assert_eq!(feasible_nodes_to_find(1, 1000), 100, "never fewer than 100");
        assert_eq!(feasible_nodes_to_find(100, 1000), 1000);
    }

    fn results(verdicts: &[u32], reasons: &[&'static str]) -> FilterResults {
        FilterResults {
            verdicts: verdicts.to_vec(),
            failures: reasons
                .iter()
                .map(|&r| sdk::Failure::unresolvable(r))
                .collect(),
        }
    }

    #[test]
    fn a_failing_nodes_table_holds_only_the_current_plan() {
        let mut table = FailingTable::default();
        table
            .fill(
                &[4, 1, 9],
                &results(&[1, 2, 1], &["tainted", "cordoned"]),
                10,
            )
            .expect("a valid plan");
        let verdicts: Vec<u32> = (0..12).map(|id| table.verdict(id)).collect();
        assert_eq!(verdicts, [0, 2, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0]);
        table
            .fill(&[2, 900], &results(&[1, 1], &["tainted"]), 10)
            .expect("an id past the cache's bound is left out");
        let verdicts: Vec<u32> = (0..12).map(|id| table.verdict(id)).collect();
        assert_eq!(
            verdicts,
            [0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            "the previous plan's nodes pass again"
        );
        assert_eq!(table.verdict(900), 0);
        assert_eq!(
            table.entries.len(),
            10,
            "bounded by the cache, not the plugin"
        );
    }

    #[test]
    fn a_malformed_failing_nodes_plan_is_refused() {
        let mut table = FailingTable::default();
        table
            .fill(&[3], &results(&[1], &["x"]), 10)
            .expect("a valid plan");
        let short = table.fill(&[1, 2], &results(&[1], &["x"]), 10);
        assert_eq!(
            short.unwrap_err(),
            "failing-nodes listed 2 nodes with 1 verdicts"
        );
        let past = table.fill(&[1], &results(&[2], &["x"]), 10);
        assert_eq!(
            past.unwrap_err(),
            "failing-nodes verdict 2 points past its 1 failures"
        );
        assert!(!table.active, "a refused plan leaves no plan in force");
    }
}
