//! One scheduling cycle, as kube-scheduler runs it.
//!
//! [`Profile::schedule`] is a short driver over named stages, each a method or function below in
//! the order the driver calls it:
//! 1. [`Profile::sync_plugins`]: bring every plugin's node mirror up to the cache (quarantined
//!    plugins are left out or end the cycle, by their failure policy);
//! 2. [`Profile::prepare_pod`]: every plugin instance, on every thread, gets the pod once
//!    (`set-pod`: kube-scheduler's PreFilter and PreScore) and answers with its plan;
//! 3. [`Profile::narrow_candidates`]: the plans decide which filters run and on which nodes
//!    (`only-nodes`, `failing-nodes`, `reject`);
//! 4. [`Profile::find_feasible`]: the filters run over a sample of the candidates starting where
//!    the last cycle stopped, until enough nodes passed;
//! 5. [`Profile::score`]: scores, normalized and weighted, of the feasible nodes;
//! 6. [`Profile::select`]: the best total, ties broken at random;
//! 7. [`explain`]: what `--explain` shows per node;
//! 8. [`Profile::reserve`]: when the cycle places the pod, the plugins that declare Reserve set
//!    aside what it needs on the chosen node (VolumeBinding its volumes).
//!
//! A stage that ends the cycle early returns `Err` with the cycle's [`Outcome`]. A plugin failing
//! mid-cycle goes through one path, [`Profile::plugin_failed`], which applies its failure policy.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use wasched_sdk::{self as sdk, Code, FilterPlan, FilterResults, Normalize};

use super::reasons;
use super::threads::{filter_part, FailingTable, PartVerdicts};
use super::{OnFailure, Phase, Profile, Slot};
use crate::cache::Cache;
use crate::result::Outcome;
use crate::runtime::{CallError, PluginInstance};

/// A plugin instance place: a slot's (the scheduling thread's) or a worker's, emptied when the
/// instance fails so that the next sync makes a fresh one.
pub(super) type InstanceRef<'a> = &'a mut Option<Box<dyn PluginInstance>>;

/// A stage's result: `Err` ends the cycle with that outcome.
/// A stage of the cycle gives its result, or the outcome the cycle ends with (boxed: it is large
/// and rare).
type Stage<T> = Result<T, Box<Outcome>>;

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
    /// The node's name.
    pub node: String,
    /// It passed every filter.
    pub feasible: bool,
    /// Why the node was ruled out (empty when feasible).
    pub reasons: Vec<String>,
    /// Normalized score per score plugin that had an opinion.
    pub scores: Vec<(String, i64)>,
    /// Weighted sum of the scores.
    pub total: i64,
}

/// Scores by plugin, serialized as an object in the order the plugins ran.
struct ScoresByPlugin<'a>(&'a [(String, i64)]);

impl serde::Serialize for ScoresByPlugin<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (plugin, score) in self.0 {
            map.serialize_entry(plugin, score)?;
        }
        map.end()
    }
}

/// As `simulate --explain --output json` and `serve`'s explain print it: the scores as an object
/// in the order the plugins ran.
impl serde::Serialize for NodeReport {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut report = serializer.serialize_struct("NodeReport", 5)?;
        report.serialize_field("node", &self.node)?;
        report.serialize_field("feasible", &self.feasible)?;
        report.serialize_field("reasons", &self.reasons)?;
        report.serialize_field("scores", &ScoresByPlugin(&self.scores))?;
        report.serialize_field("total", &self.total)?;
        report.end()
    }
}

/// Why the chosen node won: its normalized score per plugin and weighted total, and how many
/// feasible nodes it was chosen from (with one, nothing is scored, as in kube-scheduler).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Choice {
    /// Normalized score per score plugin, times its weight.
    pub scores: Vec<(String, i64)>,
    /// The weighted total.
    pub total: i64,
    /// How many feasible nodes it was chosen from.
    pub feasible_nodes: usize,
}

impl serde::Serialize for Choice {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut choice = serializer.serialize_struct("Choice", 3)?;
        choice.serialize_field("scores", &ScoresByPlugin(&self.scores))?;
        choice.serialize_field("total", &self.total)?;
        choice.serialize_field("feasibleNodes", &self.feasible_nodes)?;
        choice.end()
    }
}

/// Refuses volumes reserved for claims the pod does not have: the host writes these bindings to
/// the API server, so a plugin must not name another pod's claims.
fn own_claims(pod: &sdk::Pod, reservation: &sdk::Reservation) -> Result<(), String> {
    for allocated in &reservation.claims {
        let unallocated = pod
            .claims
            .iter()
            .any(|c| c.found && c.allocated.is_none() && c.claim_name == allocated.claim);
        if !unallocated {
            return Err(format!(
                "allocated devices for the claim {:?}, which is not an unallocated claim of the pod",
                allocated.claim
            ));
        }
    }
    let volumes = &reservation.volumes;
    let named = volumes
        .static_bindings
        .iter()
        .map(|(claim, _)| claim)
        .chain(&volumes.provisions);
    for claim in named {
        if !pod.volume_claims.iter().any(|c| c.claim_name == *claim) {
            return Err(format!(
                "reserved a volume for the claim {claim:?}, which the pod does not use"
            ));
        }
    }
    Ok(())
}

/// How a Reserve plugin's failure ends the cycle: an unschedulable failure leaves the pod
/// unschedulable, as kube-scheduler's FitError for the one node, and an error fails the cycle.
fn reserve_failed(plugin: &str, failure: &sdk::Failure) -> Outcome {
    match failure.code {
        Code::Error => Outcome::error(reasons::reserve_error(plugin, &failure.reasons)),
        _ => Outcome::unschedulable(
            reasons::nodes_unavailable(1, failure.reasons.iter().map(|r| r.as_ref())),
            Vec::new(),
        ),
    }
}

/// The statuses of a cycle that found no node, as far as preemption needs them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Diagnosis {
    /// The nodes whose failure is `unschedulable`: removing pods could make room there.
    pub potential: Vec<u32>,
    /// The failure of the first node rejected (of the only node, in a one-node check).
    pub failure: Option<sdk::Failure>,
    /// A node was found, but a Reserve plugin rejected the pod there: the cycle ends without
    /// PostFilter (kube-scheduler runs no preemption after Reserve) and clears any nomination.
    pub reserve_rejected: bool,
    /// The slot whose PreFilter plan rejected the pod (kube-scheduler runs no PreFilter after
    /// it).
    pub prefilter_rejected_by: Option<usize>,
}

/// kube-scheduler's name for the plugin whose PostFilter the host words.
const DYNAMIC_RESOURCES: &str = "DynamicResources";

/// What DynamicResources' PostFilter answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DevicesPostFilter {
    /// Its PreFilter never ran (an earlier one rejected the pod): its state is missing, the
    /// PostFilter fails with `not found` and preemption does not run.
    StateMissing,
    /// Its PreFilter rejected the pod before looking at any claim.
    NoNewClaims,
    /// No allocated claim is to be deallocated.
    StillNotSchedulable,
}

impl DevicesPostFilter {
    fn reason(self) -> Option<&'static str> {
        match self {
            DevicesPostFilter::StateMissing => None,
            DevicesPostFilter::NoNewClaims => Some("no new claims to deallocate"),
            DevicesPostFilter::StillNotSchedulable => Some("still not schedulable"),
        }
    }
}

/// What one cycle carries from stage to stage besides the profile.
struct CycleState<'p> {
    /// The scheduler clock's reading when the cycle began (quarantines are timed with it).
    now: Duration,
    explain: bool,
    /// Per slot: left out of the rest of this cycle (quarantined, or failed under `ignore`). A
    /// plugin left out passes every node and scores none.
    left_out: Vec<bool>,
    /// Where the current phase began, for [`super::PhaseTimes`].
    mark: Instant,
    /// The pod, to tell a plugin failing for one pod from one failing for all.
    pod: &'p sdk::Pod,
    /// Per slot: its answer for this pod is known without a call
    /// ([`super::PluginSpec::idle_when`]).
    idle: Vec<bool>,
    /// Only this node is looked at, and the cycle ends once it is filtered (preemption's check
    /// of a node without its victims): nothing is scored and the next search start stays.
    only_node: Option<u32>,
}

/// How far (in cache changes) an idle plugin's mirror may fall behind before it is brought up
/// to date anyway: the change log is kept from the oldest mirror on, so this bounds it, and the
/// changes go in one batch instead of one call per cycle.
const IDLE_SYNC_LAG: u64 = 1024;

/// The nodes the filters will look at, and what the plans said about the others.
struct Candidates<'a> {
    nodes: Cow<'a, [u32]>,
    /// The slots whose filter runs (or whose `failing-nodes` table is read), in filter order.
    active_filters: Vec<usize>,
    /// The reason of each node an `only-nodes` plan left out.
    absent_reason: String,
}

/// What the filter stage found: the feasible nodes in the order examined, and the rejected ones
/// with their failures.
#[derive(Default)]
struct Search {
    feasible: Vec<u32>,
    /// The rejected nodes; `rejections.verdicts` holds each one's verdict, in the same order.
    rejected: Vec<u32>,
    rejections: FilterResults,
    /// Candidates examined, feasible or not.
    examined: usize,
}

impl Search {
    fn reasons(&self, position: usize) -> Vec<String> {
        self.rejections
            .failure(position)
            .map(|f| f.reasons.iter().map(|r| r.to_string()).collect())
            .unwrap_or_default()
    }
}

/// The scores of the feasible nodes, by position.
#[derive(Default)]
struct Scores {
    totals: Vec<i64>,
    /// Per plugin that scored: its slot and normalized scores.
    per_plugin: Vec<(usize, Vec<i64>)>,
}

impl Profile {
    /// Runs one cycle for `pod` against the cache. Does not place the pod.
    /// A cycle for `pod` that reports every node's verdict and scores and leaves no trace on
    /// later cycles: the next one starts its node search and breaks ties as it would have.
    pub(super) fn dry_run(&mut self, cache: &mut Cache, pod: &sdk::Pod) -> Outcome {
        self.untraced(cache, pod, true)
    }

    /// A cycle for `pod` that reserves nothing and leaves no trace on later cycles' search start
    /// and tie-breaking ([`Decider::plan`](super::Decider::plan)).
    pub(super) fn plan(&mut self, cache: &mut Cache, pod: &sdk::Pod) -> Outcome {
        self.untraced(cache, pod, false)
    }

    /// A cycle that reserves nothing, with the search start and the tie-breaking state put back
    /// afterwards.
    fn untraced(&mut self, cache: &mut Cache, pod: &sdk::Pod, explain: bool) -> Outcome {
        let (next_start, rng) = (self.next_start, self.rng.clone());
        let outcome = self.schedule(cache, pod, explain, false);
        self.next_start = next_start;
        self.rng = rng;
        outcome
    }

    /// A cycle for `pod`; with `reserve`, the chosen node is reserved (kube-scheduler's Reserve),
    /// as for a pod about to be placed.
    pub(super) fn schedule(
        &mut self,
        cache: &mut Cache,
        pod: &sdk::Pod,
        explain: bool,
        reserve: bool,
    ) -> Outcome {
        // A pod nominated by an earlier preemption tries that node alone first, as in
        // kube-scheduler (an explained cycle still shows every node).
        let nominated = (!explain)
            .then(|| cache.node_id(&pod.nominated_node_name))
            .flatten();
        if let Some(id) = nominated {
            match self.check_node(cache, pod, id, reserve) {
                Ok(Some(reservation)) => {
                    return Outcome {
                        node: Some(node_name(cache, id)),
                        choice: Some(Box::new(Choice {
                            feasible_nodes: 1,
                            ..Choice::default()
                        })),
                        volumes: reservation.volumes,
                        claims: reservation.claims,
                        ..Outcome::default()
                    }
                }
                Ok(None) => {}
                Err(error) => return *error,
            }
        }
        let mut outcome = self.run_cycle(cache, pod, explain, None, reserve);
        if outcome.node.is_none() && cache.listing().is_empty() {
            // kube-scheduler's ErrNoNodesAvailable: unschedulable, but not a FitError, so no
            // PostFilter runs and any nomination is cleared.
            outcome.clears_nomination = !pod.nominated_node_name.is_empty();
            return outcome;
        }
        if outcome.node.is_none()
            && !outcome.error
            && !self.diagnosis.reserve_rejected
            && self.preemption.enabled
        {
            // kube-scheduler's PostFilter: DynamicResources first, then preemption, which
            // finds room or says why not after the FitError.
            let devices = self.dynamic_resources_post_filter(pod);
            if devices == Some(DevicesPostFilter::StateMissing) {
                let message = outcome.message.get_or_insert_with(String::new);
                message.push_str(" not found");
                return outcome;
            }
            let examined = explain.then_some(&mut outcome.preemption_candidates);
            match self.preempt(cache, pod, examined) {
                Ok(preemption) => outcome.preemption = Some(Box::new(preemption)),
                Err(not) => {
                    let message = outcome.message.get_or_insert_with(String::new);
                    if let Some(reason) = devices.and_then(DevicesPostFilter::reason) {
                        message.push(' ');
                        message.push_str(reason);
                        message.push(',');
                    }
                    message.push_str(" preemption: ");
                    message.push_str(&not.text);
                    outcome.post_filter_reasons = true;
                    outcome.clears_nomination =
                        not.search_failed && !pod.nominated_node_name.is_empty();
                }
            }
        }
        outcome
    }

    /// What kube-scheduler's DynamicResources PostFilter says of a pod no node took, when the
    /// profile has the plugin and the pod names claims (for a pod without, it says nothing).
    /// It deallocates no claim: its reason is the one it gives when there is none to
    /// deallocate.
    fn dynamic_resources_post_filter(&self, pod: &sdk::Pod) -> Option<DevicesPostFilter> {
        if pod.claims.is_empty() {
            return None;
        }
        let position = |slot: usize| self.filters.iter().position(|&i| i == slot);
        let plugin = self
            .slots
            .iter()
            .position(|s| s.in_cycle && s.spec.name == DYNAMIC_RESOURCES)?;
        let plugin = position(plugin)?;
        Some(
            match self.diagnosis.prefilter_rejected_by.and_then(position) {
                Some(rejecting) if rejecting < plugin => DevicesPostFilter::StateMissing,
                Some(rejecting) if rejecting == plugin => DevicesPostFilter::NoNewClaims,
                _ => DevicesPostFilter::StillNotSchedulable,
            },
        )
    }

    /// Whether `pod` passes every filter on node `id` as the cache stands: the volumes reserved
    /// for it there when it fits (none unless `reserve`), `None` when it does not (the node's
    /// failure is then the diagnosis'), or the cycle's error outcome when a plugin failed.
    pub(super) fn check_node(
        &mut self,
        cache: &mut Cache,
        pod: &sdk::Pod,
        id: u32,
        reserve: bool,
    ) -> Stage<Option<sdk::Reservation>> {
        let outcome = self.run_cycle(cache, pod, false, Some(id), reserve);
        if outcome.error || self.diagnosis.reserve_rejected {
            return Err(Box::new(outcome));
        }
        if outcome.node.is_some() {
            return Ok(Some(sdk::Reservation {
                volumes: outcome.volumes,
                claims: outcome.claims,
            }));
        }
        if self.diagnosis.failure.is_none() {
            self.diagnosis.failure = Some(sdk::Failure::unresolvable(
                outcome.message.unwrap_or_default(),
            ));
        }
        Ok(None)
    }

    /// Whether `pod` passes every filter on node `id`: [`Profile::check_node`] without a
    /// reservation, the node's failure when it does not fit.
    pub(super) fn node_failure(
        &mut self,
        cache: &mut Cache,
        pod: &sdk::Pod,
        id: u32,
    ) -> Stage<Option<sdk::Failure>> {
        Ok(match self.check_node(cache, pod, id, false)? {
            Some(_) => None,
            None => Some(
                std::mem::take(&mut self.diagnosis)
                    .failure
                    .unwrap_or_else(|| sdk::Failure::unresolvable("")),
            ),
        })
    }

    fn run_cycle(
        &mut self,
        cache: &mut Cache,
        pod: &sdk::Pod,
        explain: bool,
        only_node: Option<u32>,
        reserve: bool,
    ) -> Outcome {
        let mut cycle = CycleState {
            only_node,
            now: self.clock.now(),
            explain,
            left_out: vec![false; self.slots.len()],
            mark: Instant::now(),
            pod,
            idle: self
                .slots
                .iter()
                .enumerate()
                .map(|(i, slot)| {
                    // A one-node check scores nothing: score-only plugins sit it out.
                    (only_node.is_some() && !self.filters.contains(&i))
                        || slot
                            .spec
                            .idle_when
                            .is_some_and(|w| w.holds(pod, cache.pods_with_pod_affinity() > 0))
                })
                .collect(),
        };
        let mut outcome = self
            .run_stages(cache, pod, &mut cycle)
            .unwrap_or_else(|ended| *ended);
        if let Some(node) = outcome.node.as_deref().filter(|_| reserve) {
            match self.reserve(cache, node, &mut cycle) {
                Ok(reservation) => {
                    outcome.volumes = reservation.volumes;
                    outcome.claims = reservation.claims;
                }
                Err(ended) => {
                    outcome = *ended;
                    self.diagnosis.reserve_rejected = !outcome.error;
                    outcome.clears_nomination = !pod.nominated_node_name.is_empty();
                }
            }
        }
        if !outcome.error {
            self.record_successes(&cycle.left_out);
        }
        outcome
    }

    fn run_stages(
        &mut self,
        cache: &mut Cache,
        pod: &sdk::Pod,
        cycle: &mut CycleState,
    ) -> Stage<Outcome> {
        self.diagnosis = Diagnosis::default();
        self.sync_plugins(cache, cycle)?;
        cache.refresh_listing();
        self.phases.lap(Phase::Snapshot, &mut cycle.mark);
        let cache: &Cache = cache;
        let only: [u32; 1];
        let all = match cycle.only_node {
            Some(id) => {
                only = [id];
                &only[..]
            }
            None => cache.listing(),
        };
        if all.is_empty() {
            let message = reasons::NO_NODES_AVAILABLE.to_string();
            return Ok(Outcome::unschedulable(message, Vec::new()));
        }

        let plans = self.prepare_pod(cache, pod, cycle)?;
        let candidates = self.narrow_candidates(cache, all, &plans, cycle)?;
        self.phases.lap(Phase::PreFilter, &mut cycle.mark);

        let search = self.find_feasible(&candidates, cycle)?;
        if cycle.only_node.is_none() {
            // kube-scheduler's `nextStartNodeIndex`: the next search starts past the nodes this
            // one saw.
            self.next_start = (self.next_start + search.examined) % all.len();
        }
        if search.feasible.is_empty() {
            return Ok(self.no_fit(cache, cycle, all, &candidates, &search));
        }
        self.phases.lap(Phase::Filter, &mut cycle.mark);
        if cycle.only_node.is_some() {
            return Ok(Outcome {
                node: Some(node_name(cache, search.feasible[0])),
                ..Outcome::default()
            });
        }

        let scores = self.score(&search.feasible, &plans, cycle)?;
        self.phases.lap(Phase::Score, &mut cycle.mark);
        let outcome = self.choose(cache, cycle, all, &candidates, &search, &scores);
        self.phases.lap(Phase::Select, &mut cycle.mark);
        Ok(outcome)
    }

    /// The outcome when no node fits: kube's "0/N nodes are available" message, and what a reader
    /// of the diagnosis will use (the node's failure for a one-node check, the potential nodes
    /// for preemption after a full cycle).
    fn no_fit(
        &mut self,
        cache: &Cache,
        cycle: &CycleState,
        all: &[u32],
        candidates: &Candidates,
        search: &Search,
    ) -> Outcome {
        let absent = all.len() - candidates.nodes.len();
        let absent_reasons = std::iter::repeat_n(candidates.absent_reason.as_str(), absent);
        let rejections = &search.rejections;
        let reasons = (0..search.rejected.len())
            .flat_map(|k| rejections.failure(k).into_iter())
            .flat_map(|f| f.reasons.iter().map(|r| r.as_ref()))
            .chain(absent_reasons);
        let message = reasons::nodes_unavailable(all.len(), reasons);
        if cycle.only_node.is_some() {
            self.diagnosis.failure = match search.rejected.is_empty() {
                false => rejections.failure(0).cloned(),
                true => Some(sdk::Failure::unresolvable(candidates.absent_reason.clone())),
            };
        } else if self.preemption.enabled {
            self.diagnosis.potential = (0..search.rejected.len())
                .filter(|&k| {
                    rejections
                        .failure(k)
                        .is_some_and(|f| f.code == Code::Unschedulable)
                })
                .map(|k| search.rejected[k])
                .collect();
        }
        Outcome::unschedulable(
            message,
            explain(cache, cycle, all, candidates, search, None),
        )
    }

    /// The outcome once the feasible nodes are scored: the best node, with its per-plugin scores.
    fn choose(
        &mut self,
        cache: &Cache,
        cycle: &CycleState,
        all: &[u32],
        candidates: &Candidates,
        search: &Search,
        scores: &Scores,
    ) -> Outcome {
        let best = self.select(&scores.totals);
        let choice = Choice {
            scores: scores
                .per_plugin
                .iter()
                .map(|(i, plugin_scores)| (self.slots[*i].spec.name.clone(), plugin_scores[best]))
                .collect(),
            total: scores.totals[best],
            feasible_nodes: search.feasible.len(),
        };
        let names = |i: usize| self.slots[i].spec.name.clone();
        Outcome {
            node: Some(node_name(cache, search.feasible[best])),
            nodes: explain(
                cache,
                cycle,
                all,
                candidates,
                search,
                Some((scores, &names)),
            ),
            choice: Some(Box::new(choice)),
            ..Outcome::default()
        }
    }

    /// The one path for a plugin failing mid-cycle: records the failure on slot `i` (its instance
    /// is dropped and it may be quarantined) and applies its policy: `fail` ends the cycle with
    /// the plugin's error; `ignore` leaves the plugin out of the rest of the cycle.
    fn plugin_failed(&mut self, cycle: &mut CycleState, i: usize, error: &CallError) -> Stage<()> {
        if cycle.left_out[i] {
            return Ok(());
        }
        let slot = &mut self.slots[i];
        let pod_key = cycle.pod.key();
        slot.record_failure(error, cycle.now, Some(&pod_key));
        match slot.spec.policy.on_failure {
            OnFailure::Fail => Err(Box::new(Outcome::error(reasons::plugin_failed(
                &slot.spec.name,
                error,
            )))),
            OnFailure::Ignore => {
                cycle.left_out[i] = true;
                Ok(())
            }
        }
    }

    /// Stage 8 (kube-scheduler's Reserve): every plugin of the cycle that declares `reserve`, in
    /// profile order, sets aside what the pod needs on `node`, and the volumes they reserve are
    /// returned for the host to bind. A plugin idle for the pod or left out of the cycle is not
    /// asked. The first that fails ends the cycle: an unschedulable failure as kube-scheduler's
    /// one-node FitError, an error as the cycle's error; the plugins that reserved before it are
    /// told to unreserve.
    fn reserve(
        &mut self,
        cache: &Cache,
        node: &str,
        cycle: &mut CycleState,
    ) -> Stage<sdk::Reservation> {
        let mut reserved_all = sdk::Reservation::default();
        let Some(id) = cache.node_id(node) else {
            return Err(Box::new(Outcome::error(format!(
                "node \"{node}\" not found"
            ))));
        };
        let mut reserved: Vec<usize> = Vec::new();
        for i in 0..self.slots.len() {
            let slot = &mut self.slots[i];
            if !slot.in_cycle || !slot.descriptor.reserve || cycle.idle[i] || cycle.left_out[i] {
                continue;
            }
            let Some(instance) = slot.instance.as_mut() else {
                continue;
            };
            let ended = match instance.reserve(id) {
                Ok(Ok(reservation)) => match own_claims(cycle.pod, &reservation) {
                    Ok(()) => {
                        let found = reservation.volumes;
                        let volumes = &mut reserved_all.volumes;
                        volumes.static_bindings.extend(found.static_bindings);
                        volumes.provisions.extend(found.provisions);
                        reserved_all.claims.extend(reservation.claims);
                        reserved.push(i);
                        continue;
                    }
                    Err(e) => self.plugin_failed(cycle, i, &CallError::new("reserve", e)),
                },
                Ok(Err(failure)) => Err(Box::new(reserve_failed(&slot.spec.name, &failure))),
                Err(e) => self.plugin_failed(cycle, i, &e),
            };
            if let Err(outcome) = ended {
                self.unreserve_slots(cycle.pod, node, &reserved);
                return Err(outcome);
            }
        }
        Ok(reserved_all)
    }

    /// Tells the plugins in `slots` (the scheduling thread's instances), in reverse order, that
    /// `pod`'s reservation on `node` is undone.
    fn unreserve_slots(&mut self, pod: &sdk::Pod, node: &str, slots: &[usize]) {
        for &i in slots.iter().rev() {
            if let Some(instance) = self.slots[i].instance.as_mut() {
                // A failure to forget changes nothing for this pod, which is not placed anyway.
                let _ = instance.unreserve(pod, node);
            }
        }
    }

    fn record_successes(&mut self, left_out: &[bool]) {
        for (slot, &out) in self.slots.iter_mut().zip(left_out) {
            if !out {
                slot.record_success();
            }
        }
    }

    /// Stage 1: brings every plugin instance of the scheduling thread up to the cache (the
    /// workers' instances catch up in [`Profile::prepare_pod`], in parallel).
    fn sync_plugins(&mut self, cache: &Cache, cycle: &mut CycleState) -> Stage<()> {
        for i in 0..self.slots.len() {
            let slot = &mut self.slots[i];
            if !slot.in_cycle {
                cycle.left_out[i] = true;
                continue;
            }
            if slot.quarantined(cycle.now) {
                match slot.spec.policy.on_failure {
                    OnFailure::Ignore => cycle.left_out[i] = true,
                    OnFailure::Fail => return Err(Box::new(quarantined(slot, cycle.now))),
                }
                continue;
            }
            let recent = slot
                .synced
                .generation
                .is_some_and(|g| g >= cache.log_start() && cache.generation() - g < IDLE_SYNC_LAG);
            if cycle.idle[i] && slot.instance.is_some() && recent {
                continue;
            }
            if let Err(e) = slot.sync(cache) {
                self.plugin_failed(cycle, i, &e)?;
            }
        }
        Ok(())
    }

    /// Stage 2 (PreFilter and PreScore): every plugin sees the pod once and answers with its
    /// plan; a plugin left out gets none (its entry is never read).
    fn prepare_pod(
        &mut self,
        cache: &Cache,
        pod: &sdk::Pod,
        cycle: &mut CycleState,
    ) -> Stage<Vec<sdk::PodPlan>> {
        let (answers, worker_errors) =
            self.start_pod_on_every_thread(cache, pod, &cycle.left_out, &cycle.idle);
        let mut plans = Vec::with_capacity(answers.len());
        for (i, answer) in answers.into_iter().enumerate() {
            match answer {
                Some(Ok(plan)) => plans.push(plan),
                Some(Err(e)) => {
                    self.plugin_failed(cycle, i, &e)?;
                    plans.push(sdk::PodPlan::default());
                }
                None => plans.push(sdk::PodPlan::default()),
            }
        }
        for (i, e) in worker_errors.into_iter().flatten() {
            self.plugin_failed(cycle, i, &e)?;
        }
        Ok(plans)
    }

    /// Stage 3: reads the plans. `failing-nodes` plans become tables by node id, `only-nodes`
    /// plans narrow the candidates to the nodes every one of them names, and a `reject` plan ends
    /// the cycle.
    fn narrow_candidates<'a>(
        &mut self,
        cache: &Cache,
        all: &'a [u32],
        plans: &[sdk::PodPlan],
        cycle: &mut CycleState,
    ) -> Stage<Candidates<'a>> {
        self.fill_failing_tables(cache, plans, cycle)?;
        let mut only: Option<BTreeSet<&str>> = None;
        let mut narrowing: Vec<&str> = Vec::new();
        let mut active_filters = Vec::with_capacity(self.filters.len());
        for &i in &self.filters {
            if cycle.left_out[i] {
                continue;
            }
            let name = self.slots[i].spec.name.as_str();
            match &plans[i].filter {
                FilterPlan::Skip => {}
                FilterPlan::Run | FilterPlan::FailingNodes { .. } => active_filters.push(i),
                FilterPlan::OnlyNodes(names) => {
                    active_filters.push(i);
                    narrowing.push(name);
                    let names: BTreeSet<&str> = names.iter().map(String::as_str).collect();
                    only = Some(match only {
                        None => names,
                        Some(previous) => previous.intersection(&names).copied().collect(),
                    });
                }
                FilterPlan::Reject(failure) => {
                    let (diagnosis, outcome) = rejected_by_plan(cache, all, name, failure, cycle);
                    self.diagnosis = Diagnosis {
                        prefilter_rejected_by: Some(i),
                        ..diagnosis
                    };
                    return Err(outcome);
                }
            }
        }
        let nodes = match only {
            None => Cow::Borrowed(all),
            Some(names) if names.is_empty() => {
                let (diagnosis, outcome) =
                    no_node_in_every_narrowed_set(cache, all, &narrowing, cycle);
                self.diagnosis = diagnosis;
                return Err(outcome);
            }
            Some(names) => Cow::Owned(
                all.iter()
                    .copied()
                    .filter(|&id| {
                        cache
                            .node(id)
                            .is_some_and(|n| names.contains(n.info.name.as_str()))
                    })
                    .collect(),
            ),
        };
        Ok(Candidates {
            nodes,
            active_filters,
            absent_reason: reasons::not_among_narrowed(&narrowing),
        })
    }

    /// Keeps each active filter's `failing-nodes` plan as a table by node id; a malformed plan
    /// fails its plugin.
    fn fill_failing_tables(
        &mut self,
        cache: &Cache,
        plans: &[sdk::PodPlan],
        cycle: &mut CycleState,
    ) -> Stage<()> {
        self.failing
            .resize_with(self.slots.len(), FailingTable::default);
        for table in &mut self.failing {
            table.active = false;
        }
        for k in 0..self.filters.len() {
            let i = self.filters[k];
            if cycle.left_out[i] {
                continue;
            }
            if let FilterPlan::FailingNodes { nodes, results } = &plans[i].filter {
                if let Err(message) = self.failing[i].fill(nodes, results, cache.id_bound()) {
                    self.plugin_failed(cycle, i, &CallError::new("set-pod", message))?;
                }
            }
        }
        Ok(())
    }

    /// Stage 4 (Filter): walks the candidates from `next_start`, running the active filters over
    /// growing chunks, until enough nodes passed or every candidate was examined. The result is
    /// exactly what examining one node at a time would give; later nodes of the last chunk are
    /// discarded.
    fn find_feasible(&mut self, candidates: &Candidates, cycle: &mut CycleState) -> Stage<Search> {
        let nodes: &[u32] = &candidates.nodes;
        let mut search = Search::default();
        if nodes.is_empty() {
            return Ok(search);
        }
        // With no score plugin any feasible node is as good as another.
        let to_find = if self.scores.is_empty() {
            1
        } else {
            let percentage = self.percentage_of_nodes_to_score.unwrap_or(0);
            feasible_nodes_to_find(percentage, nodes.len())
        };
        let start = self.next_start % nodes.len();
        let mut chunk_len = to_find.max(1);
        let mut chunk: Vec<u32> = Vec::new();
        let mut parts: Vec<PartVerdicts> = (0..=self.workers.len())
            .map(|_| PartVerdicts::default())
            .collect();
        let mut verdicts: Vec<u32> = Vec::new();
        while search.examined < nodes.len() && search.feasible.len() < to_find {
            let end = nodes.len().min(search.examined + chunk_len);
            copy_wrapped(nodes, start + search.examined, start + end, &mut chunk);
            let used = self.filter_chunk(&chunk, &candidates.active_filters, &mut parts, cycle)?;
            self.merge_verdicts(&parts[..used], &mut search.rejections, &mut verdicts)?;
            for (k, &verdict) in verdicts.iter().enumerate() {
                if verdict != 0 {
                    search.rejected.push(chunk[k]);
                    search.rejections.verdicts.push(verdict);
                    continue;
                }
                search.feasible.push(chunk[k]);
                if search.feasible.len() == to_find {
                    search.examined += k + 1;
                    return Ok(search);
                }
            }
            search.examined = end;
            let missing = to_find - search.feasible.len();
            chunk_len = next_chunk_len(missing, search.feasible.len(), search.examined);
        }
        Ok(search)
    }

    /// Runs the active filters over one chunk, split between the threads; a filter call that
    /// failed goes through the failure policy (under `ignore`, the plugin passes every node for
    /// the rest of the cycle). Returns how many entries of `parts` hold the chunk, in order.
    fn filter_chunk(
        &mut self,
        chunk: &[u32],
        active_filters: &[usize],
        parts: &mut [PartVerdicts],
        cycle: &mut CycleState,
    ) -> Stage<usize> {
        let failing = std::mem::take(&mut self.failing);
        let left_out: &[bool] = &cycle.left_out;
        let used = self.on_each_part(chunk, parts, |instances, nodes, part| {
            filter_part(instances, active_filters, left_out, &failing, nodes, part)
        });
        self.failing = failing;
        for part in &parts[..used] {
            for (i, e) in &part.errors {
                self.plugin_failed(cycle, *i, e)?;
            }
        }
        Ok(used)
    }

    /// Joins the parts' verdicts into `verdicts`, one per node of the chunk, pointing into
    /// `table` (each distinct failure stored once per cycle). A failure with the `error` code is
    /// not a verdict but the plugin's error: it ends the cycle.
    fn merge_verdicts(
        &self,
        parts: &[PartVerdicts],
        table: &mut FilterResults,
        verdicts: &mut Vec<u32>,
    ) -> Stage<()> {
        verdicts.clear();
        for part in parts {
            // Per failure of the part: its verdict in `table`, once a node used it.
            let mut interned = vec![0u32; part.results.failures.len()];
            for &verdict in &part.results.verdicts {
                if verdict == 0 {
                    verdicts.push(0);
                    continue;
                }
                let local = verdict as usize - 1;
                if interned[local] == 0 {
                    let failure = &part.results.failures[local];
                    if failure.code == Code::Error {
                        let plugin = &self.slots[part.filtered_by[local]].spec.name;
                        return Err(Box::new(Outcome::error(reasons::filter_error(
                            plugin,
                            &failure.reasons,
                        ))));
                    }
                    interned[local] = table.intern(failure.clone());
                }
                verdicts.push(interned[local]);
            }
        }
        Ok(())
    }

    /// Stage 5 (Score): every scoring plugin with an opinion scores the feasible nodes (split
    /// between the threads); its scores are normalized, checked and weighted into the totals.
    /// With a single feasible node there is nothing to compare, as in kube-scheduler.
    fn score(
        &mut self,
        feasible: &[u32],
        plans: &[sdk::PodPlan],
        cycle: &mut CycleState,
    ) -> Stage<Scores> {
        let mut scores = Scores {
            totals: vec![0; feasible.len()],
            per_plugin: Vec::new(),
        };
        if feasible.len() < 2 {
            return Ok(scores);
        }
        let scoring: Vec<(usize, i64)> = self
            .scores
            .iter()
            .copied()
            .filter(|&(i, _)| plans[i].score && !cycle.left_out[i])
            .collect();
        let raw = self.raw_scores(feasible, &scoring);
        for (&(i, weight), joined) in scoring.iter().zip(raw) {
            let normalized =
                joined.and_then(|mut raw| normalize(&mut self.slots[i], &mut raw).map(|()| raw));
            let plugin_scores = match normalized {
                Ok(plugin_scores) => plugin_scores,
                Err(e) => {
                    self.plugin_failed(cycle, i, &e)?;
                    continue;
                }
            };
            for (total, score) in scores.totals.iter_mut().zip(&plugin_scores) {
                *total += score * weight;
            }
            scores.per_plugin.push((i, plugin_scores));
        }
        Ok(scores)
    }

    /// Stage 6 (Select): the position of the highest total, ties broken uniformly at random
    /// (reservoir sampling, as kube-scheduler's `selectHost`).
    fn select(&mut self, totals: &[i64]) -> usize {
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
        best
    }
}

/// A `reject` plan ends the cycle before filtering. kube-scheduler gives every node the
/// PreFilter's status, so preemption looks at every node when that status is `unschedulable`.
fn rejected_by_plan(
    cache: &Cache,
    all: &[u32],
    plugin: &str,
    failure: &sdk::Failure,
    cycle: &CycleState,
) -> (Diagnosis, Box<Outcome>) {
    let diagnosis = Diagnosis {
        potential: if failure.code == Code::Unschedulable {
            all.to_vec()
        } else {
            Vec::new()
        },
        failure: Some(failure.clone()),
        ..Diagnosis::default()
    };
    let outcome = rejected_before_filtering(cache, all, plugin, failure, cycle);
    (diagnosis, Box::new(outcome))
}

/// `only-nodes` plans whose node sets share no node end the cycle before filtering; preemption
/// cannot help, since no eviction adds a node to a set.
fn no_node_in_every_narrowed_set(
    cache: &Cache,
    all: &[u32],
    narrowing: &[&str],
    cycle: &CycleState,
) -> (Diagnosis, Box<Outcome>) {
    let reason = reasons::no_node_in_every_narrowed_set(narrowing);
    let message = reasons::rejected_before_filtering(all.len(), &[&reason]);
    let report = if cycle.explain {
        all.iter()
            .map(|&id| infeasible(cache, id, vec![reason.clone()]))
            .collect()
    } else {
        Vec::new()
    };
    let diagnosis = Diagnosis {
        potential: Vec::new(),
        failure: Some(sdk::Failure::unresolvable(reason)),
        ..Diagnosis::default()
    };
    (diagnosis, Box::new(Outcome::unschedulable(message, report)))
}

/// The outcome of a cycle whose plugin `slot` is quarantined under the `fail` policy.
fn quarantined(slot: &Slot, now: Duration) -> Outcome {
    let remaining = slot.quarantined_until.unwrap_or(now).saturating_sub(now);
    Outcome::error(reasons::quarantined(
        &slot.spec.name,
        remaining,
        slot.consecutive_failures,
        slot.last_error.as_deref(),
    ))
}

/// The outcome of a cycle whose plugin `plugin` rejected the pod before looking at nodes: its
/// error, or every node unschedulable for its reasons.
fn rejected_before_filtering(
    cache: &Cache,
    all: &[u32],
    plugin: &str,
    failure: &sdk::Failure,
    cycle: &CycleState,
) -> Outcome {
    if failure.code == Code::Error {
        return Outcome::error(reasons::pre_filter_error(plugin, &failure.reasons));
    }
    let reasons: Vec<String> = failure.reasons.iter().map(|r| r.to_string()).collect();
    let report = if cycle.explain {
        all.iter()
            .map(|&id| infeasible(cache, id, reasons.clone()))
            .collect()
    } else {
        Vec::new()
    };
    let message = reasons::rejected_before_filtering(all.len(), &failure.reasons);
    Outcome::unschedulable(message, report)
}

/// Stage 7: what `--explain` shows, when asked: every rejected node with its reasons, every node
/// a PreFilter node list left out with the reason kube-scheduler records for it, then every
/// feasible node with its scores per plugin and total.
fn explain(
    cache: &Cache,
    cycle: &CycleState,
    all: &[u32],
    candidates: &Candidates,
    search: &Search,
    scores: Option<(&Scores, &dyn Fn(usize) -> String)>,
) -> Vec<NodeReport> {
    if !cycle.explain {
        return Vec::new();
    }
    let rejected = search
        .rejected
        .iter()
        .enumerate()
        .map(|(k, &id)| infeasible(cache, id, search.reasons(k)));
    let kept: std::collections::HashSet<u32> = match &candidates.nodes {
        Cow::Borrowed(_) => std::collections::HashSet::new(),
        Cow::Owned(nodes) => nodes.iter().copied().collect(),
    };
    let narrowed = matches!(candidates.nodes, Cow::Owned(_));
    let absent = all
        .iter()
        .filter(|id| narrowed && !kept.contains(id))
        .map(|&id| infeasible(cache, id, vec![candidates.absent_reason.clone()]));
    let rejected = rejected.chain(absent);
    let feasible = scores.into_iter().flat_map(|(scores, names)| {
        search
            .feasible
            .iter()
            .enumerate()
            .map(move |(position, &id)| NodeReport {
                node: node_name(cache, id),
                feasible: true,
                reasons: Vec::new(),
                scores: scores
                    .per_plugin
                    .iter()
                    .map(|(i, plugin_scores)| (names(*i), plugin_scores[position]))
                    .collect(),
                total: scores.totals[position],
            })
    });
    rejected.chain(feasible).collect()
}

/// Copies the nodes at positions `from..to` of `nodes`, wrapping past the end (two plain copies,
/// no division per node), into `chunk`.
fn copy_wrapped(nodes: &[u32], from: usize, to: usize, chunk: &mut Vec<u32>) {
    let n = nodes.len();
    chunk.clear();
    if to <= n {
        chunk.extend_from_slice(&nodes[from..to]);
    } else if from >= n {
        chunk.extend_from_slice(&nodes[from - n..to - n]);
    } else {
        chunk.extend_from_slice(&nodes[from..]);
        chunk.extend_from_slice(&nodes[..to - n]);
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

/// Normalizes one plugin's raw scores of the feasible nodes and checks their range.
fn normalize(slot: &mut Slot, scores: &mut Vec<i64>) -> Result<(), CallError> {
    match slot.descriptor.normalize {
        Normalize::None | Normalize::InScore => {}
        Normalize::Scale => sdk::helpers::default_normalize(scores, false),
        Normalize::Reverse => sdk::helpers::default_normalize(scores, true),
        Normalize::Custom => slot.instance.as_mut().expect("synced").normalize(scores)?,
    }
    let range = sdk::helpers::MIN_NODE_SCORE..=sdk::helpers::MAX_NODE_SCORE;
    match scores.iter().position(|s| !range.contains(s)) {
        None => Ok(()),
        Some(position) => Err(CallError::new(
            "score",
            reasons::score_out_of_range(scores[position], position, scores.len()),
        )),
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
            "failing-nodes: returned 1 verdicts for 2 nodes"
        );
        let past = table.fill(&[1], &results(&[2], &["x"]), 10);
        assert_eq!(
            past.unwrap_err(),
            "failing-nodes: verdict 2 points past its 1 failures"
        );
        assert!(!table.active, "a refused plan leaves no plan in force");
    }
}

/// The stages through a whole cycle, with plugins whose answers a test writes down.
#[cfg(test)]
mod stage_tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use super::super::threads::MIN_NODES_PER_WORKER;
    use super::super::{Decider, FailurePolicy, PluginSpec, ProfileSpec};
    use super::*;
    use crate::runtime::{LoadError, PluginFactory};

    /// What a scripted plugin answers, by node name.
    #[derive(Clone, Default)]
    struct Script {
        plan: FilterPlan,
        /// Nodes the filter rejects, with the failure.
        rejects: HashMap<&'static str, sdk::Failure>,
        /// Raw scores by node (0 for the others).
        scores: HashMap<&'static str, i64>,
        /// The call that fails, every time.
        fails_in: Option<&'static str>,
        /// The call the failure names, when not `fails_in` (a component's `set-pod` with
        /// held-back updates is `apply-and-set-pod`).
        fails_as: Option<&'static str>,
        /// How its scores are normalized (`Custom` leaves them as they are).
        normalize: Normalize,
        /// The size of every `score` batch, across the instances.
        score_batches: Arc<std::sync::Mutex<Vec<usize>>>,
        /// How many `normalize` calls came, across the instances.
        normalize_calls: Arc<std::sync::atomic::AtomicUsize>,
        /// It takes part in PreEnqueue only (gating pods named `gated`), not in the cycle.
        pre_enqueue_only: bool,
        /// It takes part in Reserve, answering this.
        reserve: Option<Result<sdk::PodVolumes, sdk::Failure>>,
        /// `reserve NODE` and `unreserve NODE` as they came, across the instances.
        reservations: Arc<std::sync::Mutex<Vec<String>>>,
    }

    struct Scripted {
        script: Script,
        descriptor: sdk::Descriptor,
        names: HashMap<u32, String>,
    }

    impl Scripted {
        fn call(&self, call: &'static str) -> Result<(), CallError> {
            match self.script.fails_in {
                Some(failing) if failing == call => {
                    Err(CallError::new(self.script.fails_as.unwrap_or(call), "boom"))
                }
                _ => Ok(()),
            }
        }
    }

    impl PluginInstance for Scripted {
        fn descriptor(&self) -> &sdk::Descriptor {
            &self.descriptor
        }
        fn upsert_nodes(&mut self, nodes: &[(u32, &sdk::NodeInfo)]) -> Result<(), CallError> {
            self.call("upsert-nodes")?;
            for (id, node) in nodes {
                self.names.insert(*id, node.name.clone());
            }
            Ok(())
        }
        fn remove_nodes(&mut self, ids: &[u32]) -> Result<(), CallError> {
            ids.iter().for_each(|id| drop(self.names.remove(id)));
            Ok(())
        }
        fn update_usage(&mut self, _: &[(u32, &sdk::NodeUsage)]) -> Result<(), CallError> {
            Ok(())
        }
        fn upsert_pods(&mut self, _: &[(u32, sdk::ExistingPod)]) -> Result<(), CallError> {
            Ok(())
        }
        fn remove_pods(&mut self, _: &[u32]) -> Result<(), CallError> {
            Ok(())
        }
        fn upsert_namespaces(&mut self, _: &[(&str, &sdk::Labels)]) -> Result<(), CallError> {
            Ok(())
        }
        fn remove_namespaces(&mut self, _: &[&str]) -> Result<(), CallError> {
            Ok(())
        }
        fn upsert_volumes(&mut self, _: &[&sdk::VolumeInfo]) -> Result<(), CallError> {
            Ok(())
        }
        fn remove_volumes(&mut self, _: &[&str]) -> Result<(), CallError> {
            Ok(())
        }
        fn set_pod(&mut self, _: &sdk::Pod) -> Result<sdk::PodPlan, CallError> {
            self.call("set-pod")?;
            Ok(sdk::PodPlan {
                filter: self.script.plan.clone(),
                score: true,
            })
        }
        fn filter(&mut self, ids: &[u32], out: &mut FilterResults) -> Result<(), CallError> {
            self.call("filter")?;
            for id in ids {
                let failure = self.script.rejects.get(self.names[id].as_str()).cloned();
                out.push(failure.map_or(Ok(()), Err));
            }
            Ok(())
        }
        fn score(&mut self, ids: &[u32], out: &mut Vec<i64>) -> Result<(), CallError> {
            self.call("score")?;
            self.script.score_batches.lock().unwrap().push(ids.len());
            let score = |id| self.script.scores.get(self.names[id].as_str()).copied();
            out.extend(ids.iter().map(|id| score(id).unwrap_or(0)));
            Ok(())
        }
        fn normalize(&mut self, _: &mut Vec<i64>) -> Result<(), CallError> {
            let calls = &self.script.normalize_calls;
            calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(())
        }
        fn pre_enqueue(&mut self, pod: &sdk::Pod) -> Result<Option<sdk::Failure>, CallError> {
            self.call("pre-enqueue")?;
            Ok((pod.name == "gated").then(|| sdk::Failure::unresolvable("held")))
        }
        fn reserve(
            &mut self,
            node: u32,
        ) -> Result<Result<sdk::Reservation, sdk::Failure>, CallError> {
            self.call("reserve")?;
            let log = format!("reserve {}", self.names[&node]);
            self.script.reservations.lock().unwrap().push(log);
            let answer = self.script.reserve.clone().expect("takes part in Reserve");
            Ok(answer.map(|volumes| sdk::Reservation {
                volumes,
                claims: Vec::new(),
            }))
        }
        fn unreserve(&mut self, _: &sdk::Pod, node: &str) -> Result<(), CallError> {
            let log = format!("unreserve {node}");
            self.script.reservations.lock().unwrap().push(log);
            Ok(())
        }
    }

    struct ScriptedFactory(Script);

    impl PluginFactory for ScriptedFactory {
        fn instantiate(&self, _: &str) -> Result<Box<dyn PluginInstance>, LoadError> {
            Ok(Box::new(Scripted {
                script: self.0.clone(),
                descriptor: sdk::Descriptor {
                    name: "scripted".into(),
                    version: "0".into(),
                    filter: !self.0.pre_enqueue_only,
                    score: !self.0.pre_enqueue_only,
                    normalize: self.0.normalize,
                    reads_usage: false,
                    reads_pod: sdk::PodParts::ALL,
                    reads_existing_pods: sdk::ExistingPodParts::NONE,
                    reads_namespaces: false,
                    reads_volumes: false,
                    pre_enqueue: self.0.pre_enqueue_only,
                    permit: false,
                    reserve: self.0.reserve.is_some(),
                    reads_node_images: false,
                    reads_csi_nodes: false,
                    reads_devices: false,
                    reads_groups: false,
                    post_filter: false,
                    queue_sort: false,
                    plan_ignores_usage: false,
                },
                names: HashMap::new(),
            }))
        }
        fn kind(&self) -> &'static str {
            "native"
        }
        fn identity(&self) -> String {
            "scripted".into()
        }
    }

    fn plugin(name: &str, script: Script, on_failure: OnFailure) -> PluginSpec {
        PluginSpec {
            name: name.into(),
            factory: Arc::new(ScriptedFactory(script)),
            config: String::new(),
            policy: FailurePolicy {
                on_failure,
                ..FailurePolicy::default()
            },
            stats: Arc::default(),
            idle_when: None,
        }
    }

    /// A scheduler with one profile over nodes `n1`..`n{nodes}`.
    fn decider(nodes: usize, filters: Vec<PluginSpec>, scores: Vec<(PluginSpec, i64)>) -> Decider {
        threaded_decider(nodes, filters, scores, 1)
    }

    fn threaded_decider(
        nodes: usize,
        filters: Vec<PluginSpec>,
        scores: Vec<(PluginSpec, i64)>,
        parallelism: usize,
    ) -> Decider {
        let profile = ProfileSpec {
            scheduler_name: "default-scheduler".into(),
            filters,
            scores,
            pre_enqueue: Vec::new(),
            permit: Vec::new(),
            percentage_of_nodes_to_score: Some(100),
            parallelism,
            preemption: Default::default(),
            shadow: None,
        };
        let clock = Arc::new(crate::clock::FakeClock::default());
        let mut decider = Decider::with_clock(&[profile], 7, clock).expect("profile");
        for k in 1..=nodes {
            decider.cache_mut().upsert_node(sdk::NodeInfo {
                name: format!("n{k}"),
                ..sdk::NodeInfo::default()
            });
        }
        decider
    }

    fn pod() -> sdk::Pod {
        sdk::Pod {
            name: "p".into(),
            scheduler_name: "default-scheduler".into(),
            ..sdk::Pod::default()
        }
    }

    fn rejecting(nodes: &[&'static str], reason: &'static str) -> Script {
        Script {
            rejects: nodes
                .iter()
                .map(|&n| (n, sdk::Failure::unresolvable(reason)))
                .collect(),
            ..Script::default()
        }
    }

    fn failing_in(call: &'static str) -> Script {
        Script {
            fails_in: Some(call),
            ..Script::default()
        }
    }

    #[test]
    fn a_self_normalizing_plugin_scores_every_feasible_node_in_one_batch() {
        let nodes = 4 * MIN_NODES_PER_WORKER;
        let script = |normalize| Script {
            normalize,
            ..Script::default()
        };
        // `InScore` normalizes inside `score`: the host must not call `normalize` as well.
        for (kind, normalize_calls) in [(Normalize::Custom, 1), (Normalize::InScore, 0)] {
            let whole = script(kind);
            let shared = script(Normalize::None);
            let mut decider = threaded_decider(
                nodes,
                vec![],
                vec![
                    (plugin("Whole", whole.clone(), OnFailure::Fail), 1),
                    (plugin("Shared", shared.clone(), OnFailure::Fail), 1),
                ],
                2,
            );
            let outcome = decider.schedule(&pod(), false).expect("profile");
            assert!(outcome.node.is_some());
            assert_eq!(*whole.score_batches.lock().unwrap(), [nodes], "{kind:?}");
            let called = whole
                .normalize_calls
                .load(std::sync::atomic::Ordering::Relaxed);
            assert_eq!(called, normalize_calls, "{kind:?}");
            let shared_batches = shared.score_batches.lock().unwrap().clone();
            assert_eq!(shared_batches.len(), 2, "split between the threads");
            assert_eq!(shared_batches.iter().sum::<usize>(), nodes);
        }
    }

    #[test]
    fn a_plugin_failing_under_ignore_is_left_out_and_the_other_filters_decide() {
        for call in ["set-pod", "filter"] {
            let mut decider = decider(
                2,
                vec![
                    plugin("Broken", failing_in(call), OnFailure::Ignore),
                    plugin("Taints", rejecting(&["n1"], "tainted"), OnFailure::Fail),
                ],
                vec![],
            );
            let outcome = decider.schedule(&pod(), false).expect("profile");
            assert_eq!(outcome.node.as_deref(), Some("n2"), "failing in {call}");
            let health = decider.plugin_health();
            assert_eq!(
                (health[0].plugin.as_str(), health[0].failures),
                ("Broken", 1)
            );
            assert_eq!(health[1].failures, 0);
        }
    }

    #[test]
    fn a_plugin_failing_under_fail_ends_the_cycle_with_its_error() {
        for call in ["set-pod", "filter", "score"] {
            let broken = plugin("Broken", failing_in(call), OnFailure::Fail);
            let mut decider = decider(3, vec![broken.clone()], vec![(broken, 1)]);
            let outcome = decider.schedule(&pod(), false).expect("profile");
            assert!(outcome.error, "failing in {call}");
            assert_eq!(outcome.node, None);
            assert_eq!(
                outcome.message.as_deref(),
                Some(format!("plugin Broken failed in {call}: boom").as_str())
            );
        }
    }

    #[test]
    fn a_quarantined_plugin_ends_every_cycle_under_fail_and_is_left_out_under_ignore() {
        let policy = |on_failure| plugin("Broken", failing_in("filter"), on_failure);
        let mut failing = decider(2, vec![policy(OnFailure::Fail)], vec![]);
        let numbered = |k: u32| sdk::Pod {
            name: format!("p{k}"),
            ..pod()
        };
        for k in 0..super::super::DEFAULT_QUARANTINE_AFTER {
            failing.schedule(&numbered(k), false);
        }
        let outcome = failing.schedule(&pod(), false).expect("profile");
        let message = outcome.message.expect("quarantined");
        assert_eq!(
            message,
            "plugin Broken is quarantined for 60s more after 5 consecutive failures (last: filter: boom)"
        );
        let mut ignoring = decider(2, vec![policy(OnFailure::Ignore)], vec![]);
        for k in 0..=super::super::DEFAULT_QUARANTINE_AFTER {
            let outcome = ignoring.schedule(&numbered(k), false).expect("profile");
            assert!(outcome.node.is_some());
        }
        assert_eq!(
            ignoring.plugin_health()[0].failures,
            u64::from(super::super::DEFAULT_QUARANTINE_AFTER),
            "once quarantined it is not called"
        );
    }

    #[test]
    fn one_pod_failing_a_plugin_again_and_again_fails_only_its_own_cycles() {
        for named_call in ["set-pod", "apply-and-set-pod"] {
            let script = Script {
                fails_as: Some(named_call),
                ..failing_in("set-pod")
            };
            let mut decider = decider(2, vec![plugin("Broken", script, OnFailure::Fail)], vec![]);
            let named = |name: &str| sdk::Pod {
                name: name.into(),
                ..pod()
            };
            for _ in 0..10 {
                let outcome = decider.schedule(&named("hostile"), false).expect("profile");
                assert_eq!(
                    outcome.message,
                    Some(format!("plugin Broken failed in {named_call}: boom")),
                    "the pod's own cycle fails, the plugin is not quarantined"
                );
            }
            let health = &decider.plugin_health()[0];
            assert_eq!(
                (health.failures, health.consecutive_failures),
                (10, 1),
                "{named_call}"
            );
            for k in 1..super::super::DEFAULT_QUARANTINE_AFTER {
                decider.schedule(&named(&format!("other-{k}")), false);
            }
            let health = &decider.plugin_health()[0];
            assert!(
                health.quarantined_until.is_some(),
                "failing for five different pods in a row is the plugin's failure"
            );
        }
    }

    #[test]
    fn only_nodes_plans_narrow_to_their_intersection_and_the_others_are_counted_by_plugin() {
        let only = |names: &[&str]| Script {
            plan: FilterPlan::OnlyNodes(names.iter().map(|n| n.to_string()).collect()),
            ..Script::default()
        };
        let mut decider = decider(
            4,
            vec![
                plugin("B", only(&["n1", "n2", "n3"]), OnFailure::Fail),
                plugin("A", only(&["n2", "n3", "n4"]), OnFailure::Fail),
                plugin(
                    "Fit",
                    rejecting(&["n2", "n3"], "Insufficient cpu"),
                    OnFailure::Fail,
                ),
            ],
            vec![],
        );
        let outcome = decider.schedule(&pod(), true).expect("profile");
        assert_eq!(
            outcome.message.as_deref(),
            Some("0/4 nodes are available: 2 Insufficient cpu, 2 node(s) didn't satisfy plugin(s) [A B]. preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling.")
        );
        let explained: Vec<(&str, &[String])> = outcome
            .nodes
            .iter()
            .map(|r| (r.node.as_str(), r.reasons.as_slice()))
            .collect();
        let left_out = "node(s) didn't satisfy plugin(s) [A B]".to_string();
        let cpu = "Insufficient cpu".to_string();
        for (node, reasons) in [
            ("n1", &left_out),
            ("n2", &cpu),
            ("n3", &cpu),
            ("n4", &left_out),
        ] {
            assert!(
                explained.contains(&(node, std::slice::from_ref(reasons))),
                "{node}: {explained:?}"
            );
        }
        assert_eq!(explained.len(), 4, "each node once: {explained:?}");
    }

    /// The host answers for an idle InterPodAffinity only while neither the pod nor any placed
    /// pod has pod (anti-)affinity; otherwise the plugin is asked (here it rejects every pod).
    #[test]
    fn an_idle_plugin_is_answered_for_only_while_no_pod_has_pod_affinity() {
        let reject = Script {
            plan: FilterPlan::Reject(sdk::Failure::unresolvable("asked")),
            ..Script::default()
        };
        let mut gated = plugin("Gated", reject, OnFailure::Fail);
        gated.idle_when = super::super::IdleWhen::declared(
            sdk::PodParts::POD_AFFINITY,
            sdk::ExistingPodParts::POD_AFFINITY,
        );
        let mut decider = decider(2, vec![gated], vec![]);
        let plain = pod();
        assert!(decider
            .schedule(&plain, false)
            .expect("profile")
            .node
            .is_some());
        let mut with_terms = pod();
        with_terms.name = "q".into();
        with_terms
            .pod_affinity
            .required_anti_affinity
            .push(sdk::PodAffinityTerm::default());
        let asked = decider.schedule(&with_terms, false).expect("profile");
        assert_eq!(
            asked.message.as_deref(),
            Some("0/2 nodes are available: asked. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.")
        );
        decider.cache_mut().add_pod(&with_terms, "n1");
        let after = decider.schedule(&plain, false).expect("profile");
        assert!(after.node.is_none(), "a placed pod with terms wakes it");
        decider.cache_mut().remove_pod(&with_terms.key());
        assert!(decider
            .schedule(&plain, false)
            .expect("profile")
            .node
            .is_some());
    }

    /// kube-scheduler's ErrNoNodesAvailable is no FitError: no preemption text follows it, and
    /// a nomination is cleared.
    #[test]
    fn with_no_nodes_the_pod_is_unschedulable_without_preemption_and_loses_its_nomination() {
        let mut decider = decider(0, vec![], vec![]);
        let mut nominated = pod();
        nominated.nominated_node_name = "gone".into();
        let outcome = decider.schedule(&nominated, false).expect("profile");
        assert_eq!(
            outcome.message.as_deref(),
            Some(reasons::NO_NODES_AVAILABLE)
        );
        assert!(!outcome.error && outcome.preemption.is_none());
        assert!(outcome.clears_nomination);
        let plain = decider.schedule(&pod(), false).expect("profile");
        assert!(!plain.clears_nomination, "nothing to clear");
    }

    #[test]
    fn disjoint_only_nodes_plans_reject_the_pod_before_filtering() {
        let only = |name: &str| Script {
            plan: FilterPlan::OnlyNodes(vec![name.to_string()]),
            ..Script::default()
        };
        let mut both = decider(
            2,
            vec![
                plugin("NodeName", only("n1"), OnFailure::Fail),
                plugin("Pinned", only("n2"), OnFailure::Fail),
            ],
            vec![],
        );
        assert_eq!(
            both.schedule(&pod(), false).expect("profile").message.as_deref(),
            Some("0/2 nodes are available: node(s) didn't satisfy plugin(s) [NodeName Pinned] simultaneously. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.")
        );
        let explained = both.schedule(&pod(), true).expect("profile").nodes;
        assert_eq!(explained.len(), 2, "every node is explained: {explained:?}");
        assert!(explained
            .iter()
            .all(|n| n.reasons
                == ["node(s) didn't satisfy plugin(s) [NodeName Pinned] simultaneously"]));
        let none = Script {
            plan: FilterPlan::OnlyNodes(Vec::new()),
            ..Script::default()
        };
        let mut one = decider(2, vec![plugin("NodeName", none, OnFailure::Fail)], vec![]);
        assert_eq!(
            one.schedule(&pod(), false)
                .expect("profile")
                .message
                .as_deref(),
            Some("0/2 nodes are available: node(s) didn't satisfy plugin NodeName. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.")
        );
        let mut absent = decider(
            2,
            vec![plugin("NodeName", only("n9"), OnFailure::Fail)],
            vec![],
        );
        assert_eq!(
            absent
                .schedule(&pod(), false)
                .expect("profile")
                .message
                .as_deref(),
            Some("0/2 nodes are available: 2 node(s) didn't satisfy plugin(s) [NodeName]. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."),
            "a node set naming no node in the cache leaves every node out, counted"
        );
    }

    #[test]
    fn an_error_status_from_a_filter_or_its_plan_ends_the_cycle_as_an_error() {
        let filter_error = Script {
            rejects: [("n1", sdk::Failure::error("claim lookup failed"))].into(),
            ..Script::default()
        };
        let mut filtering = decider(
            1,
            vec![plugin("Volumes", filter_error, OnFailure::Fail)],
            vec![],
        );
        let outcome = filtering.schedule(&pod(), false).expect("profile");
        assert!(outcome.error);
        assert_eq!(
            outcome.message.as_deref(),
            Some("running \"Volumes\" filter plugin: claim lookup failed")
        );
        let plan_error = Script {
            plan: FilterPlan::Reject(sdk::Failure::error("no such claim")),
            ..Script::default()
        };
        let mut planning = decider(
            1,
            vec![plugin("Volumes", plan_error, OnFailure::Fail)],
            vec![],
        );
        let outcome = planning.schedule(&pod(), false).expect("profile");
        assert!(outcome.error);
        assert_eq!(
            outcome.message.as_deref(),
            Some("running PreFilter plugin \"Volumes\": no such claim")
        );
    }

    #[test]
    fn a_rejecting_plan_explains_every_node_with_its_reasons() {
        let reject = Script {
            plan: FilterPlan::Reject(sdk::Failure::unresolvable("pod has unbound claims")),
            ..Script::default()
        };
        let mut decider = decider(3, vec![plugin("Volumes", reject, OnFailure::Fail)], vec![]);
        let outcome = decider.schedule(&pod(), true).expect("profile");
        assert!(!outcome.error);
        assert_eq!(
            outcome.message.as_deref(),
            Some("0/3 nodes are available: pod has unbound claims. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.")
        );
        assert_eq!(outcome.nodes.len(), 3);
        assert!(outcome
            .nodes
            .iter()
            .all(|r| !r.feasible && r.reasons == ["pod has unbound claims"]));
    }

    #[test]
    fn weighted_scores_choose_the_node_and_are_explained_per_plugin() {
        let scores = |pairs: &[(&'static str, i64)]| Script {
            scores: pairs.iter().copied().collect(),
            ..Script::default()
        };
        let mut decider = decider(
            3,
            vec![plugin(
                "Fit",
                rejecting(&["n3"], "Insufficient cpu"),
                OnFailure::Fail,
            )],
            vec![
                (
                    plugin("Spread", scores(&[("n1", 90), ("n2", 10)]), OnFailure::Fail),
                    1,
                ),
                (
                    plugin("Pack", scores(&[("n1", 10), ("n2", 60)]), OnFailure::Fail),
                    2,
                ),
            ],
        );
        let outcome = decider.schedule(&pod(), true).expect("profile");
        assert_eq!(
            outcome.node.as_deref(),
            Some("n2"),
            "10 + 2*60 beats 90 + 2*10"
        );
        let report = |name: &str| {
            outcome
                .nodes
                .iter()
                .find(|r| r.node == name)
                .cloned()
                .expect("explained")
        };
        assert_eq!(report("n1").total, 110);
        assert_eq!(
            report("n2").scores,
            [("Spread".to_string(), 10), ("Pack".to_string(), 60)]
        );
        assert_eq!(report("n2").total, 130);
        assert_eq!(report("n3").reasons, ["Insufficient cpu"]);
    }

    #[test]
    fn a_score_outside_the_range_fails_the_plugin() {
        let wild = Script {
            scores: [("n1", 101)].into(),
            ..Script::default()
        };
        let mut decider = decider(2, vec![], vec![(plugin("Wild", wild, OnFailure::Fail), 1)]);
        let outcome = decider.schedule(&pod(), false).expect("profile");
        assert_eq!(
            outcome.message.as_deref(),
            Some("plugin Wild failed in score: returned 101 for node #0 of 2, outside 0..=100 after normalizing")
        );
    }

    #[test]
    fn ties_are_broken_uniformly_among_the_best_totals_only() {
        let mut decider = decider(1, vec![], vec![]);
        let profile = &mut decider.profiles[0];
        let totals = [5, 7, 7, 3, 7];
        let mut chosen = [0usize; 5];
        for _ in 0..3000 {
            chosen[profile.select(&totals)] += 1;
        }
        assert_eq!((chosen[0], chosen[3]), (0, 0), "{chosen:?}");
        for position in [1, 2, 4] {
            assert!(chosen[position] > 800, "{chosen:?}");
        }
    }

    #[test]
    fn a_wrapped_window_copies_the_nodes_from_the_start_position_around_the_end() {
        let nodes = [10, 11, 12, 13, 14];
        let mut chunk = Vec::new();
        copy_wrapped(&nodes, 1, 3, &mut chunk);
        assert_eq!(chunk, [11, 12]);
        copy_wrapped(&nodes, 3, 7, &mut chunk);
        assert_eq!(chunk, [13, 14, 10, 11]);
        copy_wrapped(&nodes, 6, 8, &mut chunk);
        assert_eq!(chunk, [11, 12]);
    }

    #[test]
    fn a_plugin_outside_the_cycle_is_sent_no_node_and_no_pod_yet_answers_pre_enqueue() {
        for call in ["upsert-nodes", "set-pod"] {
            let gate = Script {
                pre_enqueue_only: true,
                fails_in: Some(call),
                ..Script::default()
            };
            let profile = ProfileSpec {
                scheduler_name: "default-scheduler".into(),
                filters: vec![plugin("Fit", Script::default(), OnFailure::Fail)],
                scores: Vec::new(),
                pre_enqueue: vec![plugin("Gate", gate, OnFailure::Fail)],
                permit: Vec::new(),
                percentage_of_nodes_to_score: Some(100),
                parallelism: 2,
                preemption: Default::default(),
                shadow: None,
            };
            let clock = Arc::new(crate::clock::FakeClock::default());
            let mut decider = Decider::with_clock(&[profile], 7, clock).expect("profile");
            for k in 1..=(2 * MIN_NODES_PER_WORKER) {
                decider.cache_mut().upsert_node(sdk::NodeInfo {
                    name: format!("n{k}"),
                    ..sdk::NodeInfo::default()
                });
            }
            decider.warm_up().expect("warm-up");
            // The gate's mirror calls would fail the cycle: none is made.
            let outcome = decider.schedule(&pod(), false).unwrap();
            assert!(
                !outcome.error && outcome.node.is_some(),
                "{call}: {outcome:?}"
            );
            assert_eq!(decider.pre_enqueue(&pod()), None, "{call}");
            let gated = sdk::Pod {
                name: "gated".into(),
                ..pod()
            };
            let gate = decider.pre_enqueue(&gated).expect("gated");
            assert_eq!(
                (gate.plugin.as_str(), gate.message.as_str()),
                ("Gate", "held")
            );
        }
    }

    /// A pod using the claims `names`.
    fn claiming(names: &[&str]) -> sdk::Pod {
        sdk::Pod {
            volume_claims: names
                .iter()
                .map(|&name| sdk::VolumeClaim {
                    claim_name: name.into(),
                    ..sdk::VolumeClaim::default()
                })
                .collect(),
            ..pod()
        }
    }

    fn reserving(answer: Result<sdk::PodVolumes, sdk::Failure>, log: &Log) -> Script {
        Script {
            reserve: Some(answer),
            reservations: log.clone(),
            ..Script::default()
        }
    }

    type Log = Arc<std::sync::Mutex<Vec<String>>>;

    /// A scheduler over `nodes` nodes whose two filters reserve: `First` binds `data` to
    /// `pv-1`, `Second` answers `second`.
    fn two_reserving(
        nodes: usize,
        second: Result<sdk::PodVolumes, sdk::Failure>,
        log: &Log,
    ) -> Decider {
        let first = reserving(Ok(binding("data", "pv-1")), log);
        decider(
            nodes,
            vec![
                plugin("First", first, OnFailure::Fail),
                plugin("Second", reserving(second, log), OnFailure::Fail),
            ],
            vec![],
        )
    }

    fn binding(claim: &str, volume: &str) -> sdk::PodVolumes {
        sdk::PodVolumes {
            static_bindings: vec![(claim.into(), volume.into())],
            provisions: Vec::new(),
        }
    }

    #[test]
    fn the_reserve_plugins_volumes_are_the_outcomes_in_profile_order() {
        let log = Log::default();
        let provision = sdk::PodVolumes {
            provisions: vec!["logs".into()],
            ..sdk::PodVolumes::default()
        };
        let mut decider = two_reserving(1, Ok(provision), &log);
        let pod = claiming(&["data", "logs"]);
        let outcome = decider.schedule(&pod, false).expect("profile");
        assert_eq!(outcome.node.as_deref(), Some("n1"));
        assert_eq!(
            outcome.volumes,
            sdk::PodVolumes {
                static_bindings: vec![("data".into(), "pv-1".into())],
                provisions: vec!["logs".into()],
            }
        );
        assert_eq!(*log.lock().unwrap(), ["reserve n1", "reserve n1"]);

        log.lock().unwrap().clear();
        let explained = decider.explain(&pod).expect("profile");
        assert_eq!(explained.node.as_deref(), Some("n1"));
        assert!(explained.volumes.is_empty(), "a dry run reserves nothing");
        assert!(log.lock().unwrap().is_empty());
    }

    #[test]
    fn a_reserve_rejection_unreserves_the_plugins_before_it_and_leaves_the_pod_unschedulable() {
        let log = Log::default();
        let full = sdk::Failure::unschedulable("node(s) had no room for the volume");
        let mut decider = two_reserving(2, Err(full), &log);
        let outcome = decider
            .schedule(&claiming(&["data"]), false)
            .expect("profile");
        assert_eq!(outcome.node, None);
        assert!(!outcome.error);
        assert_eq!(
            outcome.message.as_deref(),
            Some("0/1 nodes are available: 1 node(s) had no room for the volume.")
        );
        let node = log.lock().unwrap()[0].replace("reserve ", "");
        assert_eq!(
            *log.lock().unwrap(),
            [
                format!("reserve {node}"),
                format!("reserve {node}"),
                format!("unreserve {node}")
            ]
        );

        // A pod nominated to a node is rejected there and tries no other node.
        log.lock().unwrap().clear();
        let nominated = sdk::Pod {
            nominated_node_name: "n2".into(),
            ..claiming(&["data"])
        };
        let outcome = decider.schedule(&nominated, false).expect("profile");
        assert_eq!(outcome.node, None);
        assert!(outcome.clears_nomination);
        assert_eq!(
            *log.lock().unwrap(),
            ["reserve n2", "reserve n2", "unreserve n2"]
        );

        let broken = sdk::Failure::error("the driver is gone");
        let mut erring = scheduler_with_reserve(Err(broken), OnFailure::Fail);
        let outcome = erring
            .schedule(&claiming(&["data"]), false)
            .expect("profile");
        assert!(outcome.error);
        assert_eq!(
            outcome.message.as_deref(),
            Some("running Reserve plugin \"Volumes\": the driver is gone")
        );
    }

    fn scheduler_with_reserve(
        answer: Result<sdk::PodVolumes, sdk::Failure>,
        on_failure: OnFailure,
    ) -> Decider {
        let log = Log::default();
        decider(
            1,
            vec![plugin("Volumes", reserving(answer, &log), on_failure)],
            vec![],
        )
    }

    #[test]
    fn a_plugin_reserving_a_claim_the_pod_lacks_fails_by_its_policy() {
        let stranger = || Ok(binding("someone-elses", "pv-1"));
        let mut failing = scheduler_with_reserve(stranger(), OnFailure::Fail);
        let outcome = failing
            .schedule(&claiming(&["data"]), false)
            .expect("profile");
        assert!(outcome.error);
        assert_eq!(
            outcome.message.as_deref(),
            Some(
                "plugin Volumes failed in reserve: reserved a volume for the claim \"someone-elses\", which the pod does not use"
            )
        );
        let mut ignoring = scheduler_with_reserve(stranger(), OnFailure::Ignore);
        let outcome = ignoring
            .schedule(&claiming(&["data"]), false)
            .expect("profile");
        assert_eq!(outcome.node.as_deref(), Some("n1"));
        assert!(
            outcome.volumes.is_empty(),
            "the ignored plugin's volumes are dropped"
        );
    }

    #[test]
    fn a_plugin_idle_for_the_pod_is_not_asked_to_reserve() {
        let log = Log::default();
        let mut volumes = plugin(
            "Volumes",
            reserving(Ok(binding("data", "pv-1")), &log),
            OnFailure::Fail,
        );
        volumes.idle_when = super::super::IdleWhen::declared(
            sdk::PodParts::VOLUME_CLAIMS,
            sdk::ExistingPodParts::NONE,
        );
        let mut decider = decider(1, vec![volumes], vec![]);
        let outcome = decider.schedule(&pod(), false).expect("profile");
        assert_eq!(outcome.node.as_deref(), Some("n1"));
        assert!(outcome.volumes.is_empty());
        assert!(log.lock().unwrap().is_empty());
        let outcome = decider
            .schedule(&claiming(&["data"]), false)
            .expect("profile");
        assert_eq!(outcome.volumes, binding("data", "pv-1"));
    }
}
