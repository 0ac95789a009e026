//! kube-scheduler's DefaultPreemption (its PostFilter): when a pod fits nowhere, find a node where
//! evicting lower-priority pods makes room, and the fewest and least important pods to evict.
//!
//! "Would the pod fit without these pods?" is answered by the real filter plugins, WASM ones
//! included, with no addition to the plugin contract: the pods are taken out of the cache, the
//! plugins' mirrors catch up as after any eviction, one node is filtered, and the pods are put
//! back. A plugin cannot tell this from pods that really left and came back, so every mirror is
//! consistent afterwards, and 0.1 components (which only see node usage) answer the same way.

use std::cmp::Reverse;

use wasched_sdk::{self as sdk, helpers::selector_matches};

use super::{reasons, Profile};
use crate::cache::{Cache, DetachedPod, DisruptionBudget};

/// A profile's preemption settings (kube-scheduler's `DefaultPreemptionArgs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreemptionSettings {
    /// On by default, as DefaultPreemption is in kube-scheduler's default profile. Off: a pod
    /// that fits nowhere waits, as with DefaultPreemption disabled.
    pub enabled: bool,
    /// `minCandidateNodesPercentage`: candidates to find, as a share of the nodes where
    /// preemption could help.
    pub min_candidate_nodes_percentage: u32,
    /// `minCandidateNodesAbsolute`: at least this many candidates (or every such node).
    pub min_candidate_nodes_absolute: u32,
}

impl Default for PreemptionSettings {
    fn default() -> Self {
        PreemptionSettings {
            enabled: true,
            min_candidate_nodes_percentage: 10,
            min_candidate_nodes_absolute: 100,
        }
    }
}

impl PreemptionSettings {
    /// kube-scheduler's `calculateNumCandidates`.
    pub fn candidates_to_find(&self, nodes: usize) -> usize {
        let share = nodes * self.min_candidate_nodes_percentage as usize / 100;
        share
            .max(self.min_candidate_nodes_absolute as usize)
            .min(nodes)
    }
}

/// A pod chosen for eviction.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Victim {
    /// `namespace/name`.
    pub pod: String,
    /// Its `metadata.uid` (the eviction's precondition).
    pub uid: String,
    /// Its priority.
    pub priority: i32,
    /// Already terminating: nothing is sent for it.
    pub terminating: bool,
}

/// Where preemption makes room: the node the pod is nominated to, and what goes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Preemption {
    /// The node the pod is nominated to.
    pub node: String,
    /// Most important first.
    pub victims: Vec<Victim>,
    /// Victims whose eviction goes past a PodDisruptionBudget.
    pub pdb_violations: usize,
}

/// The reason a node with only pods of equal or higher priority gets.
pub const NO_VICTIMS: &str = "No preemption victims found for incoming pod";
/// The reason of every node preemption did not look at.
pub const NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";

/// Why preemption made no room, for the text after the FitError.
pub(super) struct NotPreempted {
    /// What follows `preemption: `.
    pub text: String,
    /// The search ran and found no node: the pod's nomination is cleared, as kube-scheduler's
    /// PostFilter result with an empty nominated node does. Ineligibility and plugin errors
    /// leave it as it was.
    pub search_failed: bool,
}

impl NotPreempted {
    fn keeping_nomination(text: &str) -> NotPreempted {
        NotPreempted {
            text: text.to_string(),
            search_failed: false,
        }
    }

    fn nothing_found(text: String) -> NotPreempted {
        NotPreempted {
            text,
            search_failed: true,
        }
    }
}

/// One candidate node and its victims, before the choice.
struct Candidate {
    node: u32,
    victims: Vec<Victim>,
    /// Per victim: `status.startTime` (ms), `now` when unknown.
    start_times: Vec<i64>,
    pdb_violations: usize,
}

impl Candidate {
    fn to_preemption(&self, cache: &Cache) -> Preemption {
        Preemption {
            node: cache
                .node(self.node)
                .map(|n| n.info.name.clone())
                .unwrap_or_default(),
            victims: self.victims.clone(),
            pdb_violations: self.pdb_violations,
        }
    }
}

/// A pod that could be evicted, with what orders it.
struct Potential {
    key: String,
    namespace: String,
    labels: sdk::Labels,
    victim: Victim,
    start: i64,
    violates_budget: bool,
}

/// What the search for preemption candidates found.
#[derive(Default)]
struct CandidateSearch {
    /// Candidates whose evictions break no disruption budget, and those whose evictions do.
    sparing: Vec<Candidate>,
    violating: Vec<Candidate>,
    /// Why the nodes where evicting every lower-priority pod would not help still fail.
    failures: Vec<sdk::Failure>,
    /// Nodes with nothing to evict, the usual case where every pod has one priority: counted
    /// rather than collected, so a pod that fits nowhere costs little more than its cycle.
    without_victims: usize,
    /// Plugin errors met while checking nodes.
    errors: Vec<String>,
}

/// Why `pod` cannot preempt before any node is searched, if it cannot.
fn not_eligible(cache: &Cache, pod: &sdk::Pod, potential_nodes: &[u32]) -> Option<NotPreempted> {
    if pod.never_preempts {
        return Some(NotPreempted::keeping_nomination(
            "not eligible due to preemptionPolicy=Never.",
        ));
    }
    if let Some(nominated) = cache.node_id(&pod.nominated_node_name) {
        // A nominated node that nothing could fix does not hold the pod back.
        let terminating = potential_nodes.contains(&nominated)
            && cache.pods_on(nominated).iter().any(|p| {
                p.standing.priority < pod.priority && p.standing.terminating_by_preemption
            });
        if terminating {
            return Some(NotPreempted::keeping_nomination(
                "not eligible due to a terminating pod on the nominated node.",
            ));
        }
    }
    let all_nodes = cache.node_count();
    if potential_nodes.is_empty() {
        return Some(NotPreempted::nothing_found(not_found(all_nodes, &[], 0)));
    }
    if !potential_nodes
        .iter()
        .any(|&node| cache.has_pod_below(node, pod.priority))
    {
        // Nothing to evict anywhere: said without drawing the search's random start, so
        // tie-breaking in later cycles goes on as if preemption had not run.
        return Some(NotPreempted::nothing_found(not_found(
            all_nodes,
            &[],
            potential_nodes.len(),
        )));
    }
    None
}

impl Profile {
    /// DefaultPreemption for a pod the last cycle placed nowhere (its statuses are in
    /// `self.diagnosis`): the nomination, or the text kube-scheduler appends to the FitError
    /// (`preemption: ...`). The cache is as before when it returns. `examined`, when given,
    /// receives every candidate node the search found with its victims, in search order (what
    /// `--explain` shows).
    pub(super) fn preempt(
        &mut self,
        cache: &mut Cache,
        pod: &sdk::Pod,
        examined: Option<&mut Vec<Preemption>>,
    ) -> Result<Preemption, NotPreempted> {
        let potential_nodes = &std::mem::take(&mut self.diagnosis).potential;
        if let Some(not_eligible) = not_eligible(cache, pod, potential_nodes) {
            return Err(not_eligible);
        }
        let mut search = self.search_candidates(cache, pod, potential_nodes, examined);
        let to_find = self.preemption.candidates_to_find(potential_nodes.len());
        search.sparing.truncate(to_find);
        search.violating.truncate(to_find);
        search.sparing.append(&mut search.violating);
        let Some(best) = pick_one(search.sparing) else {
            if let Some(error) = search.errors.into_iter().next() {
                return Err(NotPreempted::keeping_nomination(&error));
            }
            return Err(NotPreempted::nothing_found(not_found(
                cache.node_count(),
                &search.failures,
                search.without_victims,
            )));
        };
        Ok(best.to_preemption(cache))
    }

    /// Looks for victims on the potential nodes from a random start, until enough candidates are
    /// found (kube-scheduler's `DryRunPreemption`).
    fn search_candidates(
        &mut self,
        cache: &mut Cache,
        pod: &sdk::Pod,
        potential_nodes: &[u32],
        mut examined: Option<&mut Vec<Preemption>>,
    ) -> CandidateSearch {
        let budgets: Vec<DisruptionBudget> = cache.budgets().cloned().collect();
        let mut gangs = Gangs::default();
        let now = now_millis();
        let to_find = self.preemption.candidates_to_find(potential_nodes.len());
        let offset = self.rng.below(potential_nodes.len() as u64) as usize;
        let mut search = CandidateSearch::default();
        for i in 0..potential_nodes.len() {
            let node = potential_nodes[(offset + i) % potential_nodes.len()];
            if !cache.has_pod_below(node, pod.priority) {
                search.without_victims += 1;
                continue;
            }
            let found = self.select_victims(cache, pod, node, (&budgets, &mut gangs), now);
            if let (Some(examined), Ok(candidate)) = (examined.as_deref_mut(), &found) {
                examined.push(candidate.to_preemption(cache));
            }
            match found {
                Ok(candidate) if candidate.pdb_violations == 0 => search.sparing.push(candidate),
                Ok(candidate) => search.violating.push(candidate),
                Err(Ok(failure)) => search.failures.push(failure),
                Err(Err(error)) => search.errors.push(error),
            }
            if !search.sparing.is_empty()
                && search.sparing.len() + search.violating.len() >= to_find
            {
                break;
            }
        }
        search
    }

    /// kube-scheduler's `SelectVictimsOnNode`: every lower-priority pod is taken off the node;
    /// if the pod then fits, the most important ones (those whose eviction would break a budget
    /// first) come back one by one while it still fits. `Err(Ok)` is the node's failure,
    /// `Err(Err)` a plugin's error. A member of a gang is a possible victim only when every
    /// placed member of its gang has a lower priority than `pod`: part of a running gang is not
    /// evicted for a pod the rest of the gang outranks or equals.
    fn select_victims(
        &mut self,
        cache: &mut Cache,
        pod: &sdk::Pod,
        node: u32,
        (budgets, gangs): (&[DisruptionBudget], &mut Gangs),
        now: i64,
    ) -> Result<Candidate, Result<sdk::Failure, String>> {
        let mut potential: Vec<Potential> = cache
            .pods_on(node)
            .into_iter()
            .filter(|p| p.standing.priority < pod.priority)
            .filter(|p| gangs.may_evict(cache, p.pod, pod.priority))
            .map(|p| Potential {
                key: p.key.to_string(),
                namespace: p.pod.namespace.clone(),
                labels: p.pod.labels.clone(),
                victim: Victim {
                    pod: p.key.to_string(),
                    uid: p.standing.uid.clone(),
                    priority: p.standing.priority,
                    terminating: p.pod.terminating,
                },
                start: p.standing.start_time_millis.unwrap_or(now),
                violates_budget: false,
            })
            .collect();
        if potential.is_empty() {
            return Err(Ok(sdk::Failure::unresolvable(NO_VICTIMS)));
        }
        // Most important first: higher priority, then the one running longer.
        potential.sort_by_key(|p| (Reverse(p.victim.priority), p.start));
        mark_budget_violations(&mut potential, budgets);
        let mut detached: Vec<DetachedPod> = potential
            .iter()
            .filter_map(|p| cache.detach_pod(&p.key))
            .collect();
        let result = self.reprieve(cache, pod, node, &potential, &mut detached);
        for pod in detached {
            cache.reattach_pod(pod);
        }
        result
    }

    /// With every potential victim detached: fails when the pod does not fit even so, else
    /// brings back the budget-violating victims, then the others, most important first, keeping
    /// each that leaves the pod fitting. Victims stay in `detached`.
    fn reprieve(
        &mut self,
        cache: &mut Cache,
        pod: &sdk::Pod,
        node: u32,
        potential: &[Potential],
        detached: &mut Vec<DetachedPod>,
    ) -> Result<Candidate, Result<sdk::Failure, String>> {
        let check = |profile: &mut Profile, cache: &mut Cache| {
            profile
                .node_failure(cache, pod, node)
                .map_err(|outcome| Err(outcome.message.unwrap_or_default()))
        };
        if let Some(failure) = check(self, cache)? {
            return Err(Ok(failure));
        }
        let mut chosen: Vec<&Potential> = Vec::new();
        let order = potential
            .iter()
            .filter(|p| p.violates_budget)
            .chain(potential.iter().filter(|p| !p.violates_budget));
        for p in order {
            let Some(at) = detached.iter().position(|d| d.key() == p.key) else {
                continue;
            };
            cache.reattach_pod(detached.swap_remove(at));
            if check(self, cache)?.is_some() {
                if let Some(again) = cache.detach_pod(&p.key) {
                    detached.push(again);
                }
                chosen.push(p);
            }
        }
        // Most important first, as `potential` is ordered.
        chosen.sort_by_key(|p| (Reverse(p.victim.priority), p.start));
        Ok(Candidate {
            node,
            pdb_violations: chosen.iter().filter(|p| p.violates_budget).count(),
            start_times: chosen.iter().map(|p| p.start).collect(),
            victims: chosen.into_iter().map(|p| p.victim.clone()).collect(),
        })
    }
}

/// The highest priority of each running gang, read from the cache the first time a possible
/// victim is a gang member (most searches meet none).
#[derive(Default)]
struct Gangs(Option<std::collections::HashMap<String, i32>>);

impl Gangs {
    /// Whether `victim` may be evicted for a pod of `priority`: it is in no gang, or every placed
    /// member of its gang has a lower priority.
    fn may_evict(&mut self, cache: &Cache, victim: &sdk::ExistingPod, priority: i32) -> bool {
        let Some(gang) = crate::k8s::podgroup::placed_group_name(victim) else {
            return true;
        };
        let highest = self.0.get_or_insert_with(|| cache.gang_priorities());
        highest.get(&gang).is_none_or(|&p| p < priority)
    }
}

/// kube-scheduler's `filterPodsWithPDBViolation`: walking the pods most important first, each
/// budget of the pod's namespace that selects it (with a selector that has requirements, and
/// the pod not already counted in `disruptedPods`) loses one allowed disruption; a pod that takes
/// one below zero violates it.
fn mark_budget_violations(potential: &mut [Potential], budgets: &[DisruptionBudget]) {
    let mut allowed: Vec<i32> = budgets.iter().map(|b| b.disruptions_allowed).collect();
    for p in potential.iter_mut() {
        if p.labels.is_empty() {
            continue;
        }
        let name = p.key.split_once('/').map_or("", |(_, name)| name);
        for (k, budget) in budgets.iter().enumerate() {
            let selects = budget.namespace == p.namespace
                && budget.selector.as_ref().is_some_and(|s| {
                    let has_requirements =
                        !s.match_labels.is_empty() || !s.match_expressions.is_empty();
                    has_requirements && selector_matches(s, &p.labels)
                })
                && !budget.disrupted_pods.iter().any(|d| d == name);
            if selects {
                allowed[k] -= 1;
                if allowed[k] < 0 {
                    p.violates_budget = true;
                }
            }
        }
    }
}

/// kube-scheduler's `pickOneNodeForPreemption`: fewest budget violations, then the lowest
/// highest victim priority, the lowest sum of priorities, the fewest victims, the latest start
/// among the highest-priority victims; then the first found.
fn pick_one(candidates: Vec<Candidate>) -> Option<Candidate> {
    type Rank = fn(&Candidate) -> i64;
    let ranks: [Rank; 5] = [
        |c| -(c.pdb_violations as i64),
        |c| -i64::from(c.victims.first().map_or(i32::MIN, |v| v.priority)),
        |c| {
            -c.victims
                .iter()
                .map(|v| i64::from(v.priority) + i64::from(i32::MAX) + 1)
                .sum::<i64>()
        },
        |c| -(c.victims.len() as i64),
        earliest_top_start,
    ];
    let mut remaining = candidates;
    for rank in ranks {
        if remaining.len() <= 1 {
            break;
        }
        let best = remaining.iter().map(rank).max()?;
        remaining.retain(|c| rank(c) == best);
    }
    remaining.into_iter().next()
}

/// The earliest start time among a candidate's highest-priority victims (kube-scheduler's
/// `GetEarliestPodStartTime`).
fn earliest_top_start(candidate: &Candidate) -> i64 {
    let Some(top) = candidate.victims.iter().map(|v| v.priority).max() else {
        return i64::MIN;
    };
    candidate
        .victims
        .iter()
        .zip(&candidate.start_times)
        .filter(|(v, _)| v.priority == top)
        .map(|(_, &start)| start)
        .min()
        .unwrap_or(i64::MIN)
}

/// `0/N nodes are available: ...` over the nodes preemption looked at (`failures`, and
/// `without_victims` nodes with no pod to evict), every other node counted as not helped by
/// preemption.
fn not_found(all_nodes: usize, failures: &[sdk::Failure], without_victims: usize) -> String {
    let looked_at = failures.len() + without_victims;
    let counted = failures
        .iter()
        .flat_map(|f| f.reasons.iter().map(|r| (r.as_ref(), 1)))
        .chain([
            (NO_VICTIMS, without_victims),
            (NOT_HELPFUL, all_nodes - looked_at.min(all_nodes)),
        ]);
    reasons::nodes_unavailable_counted(all_nodes, counted)
}

fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
