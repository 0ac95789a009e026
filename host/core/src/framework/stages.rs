//! What the service asks of the [`Decider`] for one pod, in the order it asks: PreEnqueue, the
//! cycle (in [`super::cycle`]; Reserve is its last stage), assuming the pod on its node, Permit,
//! and Unreserve or forgetting the pod when its reservation is undone.
//!
//! Before a pending pod enters the scheduling queue, every plugin of its profile whose descriptor
//! sets `pre_enqueue` is asked, in profile order, whether it may (kube-scheduler's
//! `runPreEnqueuePlugins`): the first that says no gates the pod, which then waits outside the
//! queue until it changes. SchedulingGates is the default one.
//!
//! After the service reserved a pod on its node, every plugin of the pod's profile whose
//! descriptor sets `permit` is asked, in profile order, whether the pod may go on to be bound
//! (kube-scheduler's `RunPermitPlugins`): the first rejection ends the stage; waits add up (the
//! pod waits until every plugin it waits at lets it go). Whatever a plugin answered, the waiting
//! pods it lets go are returned for the service to release. Unreserve runs on the same plugins,
//! and on the cycle's Reserve plugins, in reverse order when a reservation is undone.

use std::time::{Duration, Instant};

use wasched_sdk as sdk;

use super::{Decider, OnFailure, Outcome, Phase, Profile};
use crate::cache::Cache;
use crate::runtime::Permit;

/// What the Permit plugins of a pod's profile decided for it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PermitOutcome {
    /// The plugin that rejected the pod, or failed under `on_failure = "fail"`: the pod is to be
    /// unreserved.
    pub rejected: Option<PermitRejection>,
    /// The plugins the pod is to wait at, each with its timeout.
    pub waits: Vec<(String, Duration)>,
    /// Waiting pods the plugins let go, as (plugin, `namespace/name`).
    pub allowed: Vec<(String, String)>,
    /// Waiting pods the plugins reject, as (plugin, rejection).
    pub rejected_waiting: Vec<(String, sdk::Rejection)>,
}

/// What the PostFilter plugins of a pod's profile said about a pod that fits no node.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PostFilterOutcome {
    /// Their reasons, in profile order, to join the pod's FitError.
    pub reasons: Vec<String>,
    /// Waiting pods they reject, as (plugin, rejection).
    pub rejected_waiting: Vec<(String, sdk::Rejection)>,
}

/// Why a pending pod is kept out of the scheduling queue: the PreEnqueue plugin that said no.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gate {
    /// The plugin.
    pub plugin: String,
    /// Its reasons, joined (kube-scheduler's status message), or
    /// `running PreEnqueue plugin "P": ...` when it failed.
    pub message: String,
}

/// Why a pod may not be bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermitRejection {
    /// The plugin that rejected the pod or failed.
    pub plugin: String,
    /// kube-scheduler's message: the plugin's reason, or `running Permit plugin "P": ...`.
    pub message: String,
    /// The plugin failed (an error, retried after backoff) rather than rejected the pod.
    pub error: bool,
}

impl Decider {
    /// Chooses a node for one pod with the profile of its scheduler name, changing nothing in the
    /// cache (see [`Decider::assume`]). Returns `None` when no profile serves the pod's
    /// scheduler name.
    pub fn schedule(&mut self, pod: &sdk::Pod, explain: bool) -> Option<Outcome> {
        self.cycle(pod, |profile, cache, pod| {
            profile.schedule(cache, pod, explain, true)
        })
    }

    /// What a cycle for `pod` would decide now, with every examined node's verdict and scores
    /// (as [`Decider::schedule`] with `explain`), without placing the pod or changing where
    /// later cycles start their search and how they break ties. `None` when no profile has the
    /// pod's scheduler name.
    pub fn explain(&mut self, pod: &sdk::Pod) -> Option<Outcome> {
        self.cycle(pod, Profile::dry_run)
    }

    /// A cycle for `pod` that reserves nothing and leaves where later cycles start their search
    /// and how they break ties as they were; preemption runs as in a real cycle. What a gang's
    /// other members would get, asked before one of them preempts. `None` when no profile has
    /// the pod's scheduler name.
    pub fn plan(&mut self, pod: &sdk::Pod) -> Option<Outcome> {
        self.cycle(pod, Profile::plan)
    }

    /// Whether a profile serves pods of `scheduler_name`.
    pub fn serves(&self, scheduler_name: &str) -> bool {
        self.profiles
            .iter()
            .any(|p| p.scheduler_name == scheduler_name)
    }

    fn cycle(
        &mut self,
        pod: &sdk::Pod,
        run: impl FnOnce(&mut Profile, &mut Cache, &sdk::Pod) -> Outcome,
    ) -> Option<Outcome> {
        let index = self
            .profiles
            .iter()
            .position(|p| p.scheduler_name == pod.scheduler_name)?;
        let mut pod = pod.clone();
        self.cache.resolve_claims(&mut pod);
        self.cache.resolve_spread_selector(&mut pod);
        // Pods nominated by a preemption hold their node against pods that do not outrank them
        // while their victims leave; they count as placed there for this cycle only.
        let nominees = self.cache.nominees_before(&pod);
        for nominee in &nominees {
            self.cache.assume_pod(nominee, &nominee.nominated_node_name);
        }
        let outcome = run(&mut self.profiles[index], &mut self.cache, &pod);
        for nominee in &nominees {
            self.cache.remove_pod(&nominee.key());
        }
        self.trim_log();
        Some(outcome)
    }

    /// Holds `pod`'s requests on `node` until its binding is seen (an observed pod on that node
    /// confirms it) or [`Decider::forget`] releases it.
    pub fn assume(&mut self, pod: &sdk::Pod, node: &str) {
        let mut mark = Instant::now();
        self.cache.assume_pod(pod, node);
        if let Some(profile) = self
            .profiles
            .iter_mut()
            .find(|p| p.scheduler_name == pod.scheduler_name)
        {
            profile.phases.lap(Phase::Assume, &mut mark);
        }
    }

    /// Releases an assumed pod whose binding failed or was not confirmed in time. Returns false
    /// when there is nothing to release (never assumed, or seen bound since).
    pub fn forget(&mut self, key: &str) -> bool {
        self.cache.forget_pod(key)
    }

    /// Runs the PreEnqueue plugins of `pod`'s profile: the first that keeps the pod out of the
    /// queue, or `None` (also for a pod no profile serves, which the cycle turns away). A plugin
    /// failing under `on_failure = "ignore"` is left out; under `"fail"` it gates the pod with its
    /// error until the pod changes, as kube-scheduler does.
    pub fn pre_enqueue(&mut self, pod: &sdk::Pod) -> Option<Gate> {
        let resolved;
        let pod = if pod.claims.is_empty() {
            pod
        } else {
            let mut with_claims = pod.clone();
            self.cache.resolve_device_claims(&mut with_claims);
            resolved = with_claims;
            &resolved
        };
        let profile = self.profile_of(pod)?;
        let now = profile.clock.now();
        let key = pod.key();
        for slot in profile
            .slots
            .iter_mut()
            .filter(|s| s.descriptor.pre_enqueue)
        {
            // A plugin with no opinion on the pod (DynamicResources on a pod without claims)
            // lets it in without being asked.
            let idle = slot.spec.idle_when.is_some_and(|w| w.holds(pod, false));
            if idle || slot.quarantined(now) {
                continue;
            }
            let answer = slot.ensure_instance().and_then(|i| i.pre_enqueue(pod));
            let failure = match answer {
                Ok(None) => {
                    slot.record_success();
                    continue;
                }
                Ok(Some(failure)) => {
                    slot.record_success();
                    failure.reasons.join(", ")
                }
                Err(e) => {
                    slot.record_failure(&e, now, Some(&key));
                    if slot.spec.policy.on_failure == OnFailure::Ignore {
                        continue;
                    }
                    format!("running PreEnqueue plugin \"{}\": {e}", slot.spec.name)
                }
            };
            return Some(Gate {
                plugin: slot.spec.name.clone(),
                message: failure,
            });
        }
        None
    }

    /// Runs the Permit plugins of `pod`'s profile for `pod` reserved on `node`.
    pub fn permit(&mut self, pod: &sdk::Pod, node: &str) -> PermitOutcome {
        let mut outcome = PermitOutcome::default();
        let Some(profile) = self.profile_of(pod) else {
            return outcome;
        };
        let now = profile.clock.now();
        let key = pod.key();
        for slot in profile.slots.iter_mut().filter(|s| s.descriptor.permit) {
            // A quarantined plugin is left out; one whose instance failed is made afresh.
            if slot.quarantined(now) {
                continue;
            }
            let answer = match slot.ensure_instance().and_then(|i| i.permit(pod, node)) {
                Ok(answer) => answer,
                Err(e) => {
                    slot.record_failure(&e, now, Some(&key));
                    if slot.spec.policy.on_failure == OnFailure::Ignore {
                        continue;
                    }
                    outcome.rejected = Some(PermitRejection {
                        plugin: slot.spec.name.clone(),
                        message: format!("running Permit plugin \"{}\": {e}", slot.spec.name),
                        error: true,
                    });
                    break;
                }
            };
            slot.record_success();
            let name = &slot.spec.name;
            outcome
                .allowed
                .extend(answer.allow.into_iter().map(|k| (name.clone(), k)));
            outcome
                .rejected_waiting
                .extend(answer.reject.into_iter().map(|r| (name.clone(), r)));
            match answer.permit {
                Permit::Allow => {}
                Permit::Wait { timeout } => outcome.waits.push((name.clone(), timeout)),
                Permit::Reject(message) => {
                    outcome.rejected = Some(PermitRejection {
                        plugin: name.clone(),
                        message,
                        error: false,
                    });
                    break;
                }
            }
        }
        outcome
    }

    /// Tells the Reserve and Permit plugins of `pod`'s profile, in reverse order, that its
    /// reservation on `node` was undone; returns the waiting pods they reject on that account
    /// (coscheduling rejects the rest of the gang), as (plugin, rejection). A failure is
    /// recorded against the plugin and goes no further.
    pub fn unreserve_plugins(
        &mut self,
        pod: &sdk::Pod,
        node: &str,
    ) -> Vec<(String, sdk::Rejection)> {
        let mut rejected = Vec::new();
        let Some(profile) = self.profile_of(pod) else {
            return rejected;
        };
        let now = profile.clock.now();
        let key = pod.key();
        for slot in profile
            .slots
            .iter_mut()
            .rev()
            .filter(|s| s.descriptor.permit || (s.descriptor.reserve && s.in_cycle))
        {
            let Some(instance) = slot.instance.as_mut() else {
                continue;
            };
            match instance.unreserve_rejects(pod, node) {
                Ok(rejections) => {
                    slot.record_success();
                    let name = &slot.spec.name;
                    rejected.extend(rejections.into_iter().map(|r| (name.clone(), r)));
                }
                Err(e) => slot.record_failure(&e, now, Some(&key)),
            }
        }
        rejected
    }

    /// PostFilter: asks the PostFilter plugins of `pod`'s profile, in order, about a pod that
    /// fits no node and for which preemption found no room. A plugin that fails is recorded and
    /// left out (its reasons would be an error's, not a FitError's).
    pub fn post_filter(&mut self, pod: &sdk::Pod) -> PostFilterOutcome {
        let mut outcome = PostFilterOutcome::default();
        let Some(profile) = self.profile_of(pod) else {
            return outcome;
        };
        let now = profile.clock.now();
        let key = pod.key();
        for slot in profile
            .slots
            .iter_mut()
            .filter(|s| s.descriptor.post_filter)
        {
            if slot.quarantined(now) {
                continue;
            }
            match slot.ensure_instance().and_then(|i| i.post_filter(pod)) {
                Ok(answer) => {
                    slot.record_success();
                    let name = &slot.spec.name;
                    outcome.reasons.extend(answer.reasons);
                    outcome
                        .rejected_waiting
                        .extend(answer.reject.into_iter().map(|r| (name.clone(), r)));
                }
                Err(e) => slot.record_failure(&e, now, Some(&key)),
            }
        }
        outcome
    }

    /// Whether a profile serving `pod` has a QueueSort plugin.
    pub fn sorts_queue(&self, pod: &sdk::Pod) -> bool {
        self.profiles
            .iter()
            .find(|p| p.scheduler_name == pod.scheduler_name)
            .is_some_and(|p| p.slots.iter().any(|s| s.descriptor.queue_sort))
    }

    /// QueueSort: where the QueueSort plugin of `pod`'s profile puts it among pods of its
    /// priority; `None` (the default order: arrival) without one, or when it fails.
    pub fn queue_sort(&mut self, pod: &sdk::Pod, queued_millis: i64) -> Option<sdk::QueueKey> {
        let profile = self.profile_of(pod)?;
        let now = profile.clock.now();
        let slot = profile
            .slots
            .iter_mut()
            .find(|s| s.descriptor.queue_sort && !s.quarantined(now))?;
        match slot
            .ensure_instance()
            .and_then(|i| i.queue_sort(pod, queued_millis))
        {
            Ok(key) => {
                slot.record_success();
                Some(key)
            }
            Err(e) => {
                slot.record_failure(&e, now, Some(&pod.key()));
                None
            }
        }
    }

    fn profile_of(&mut self, pod: &sdk::Pod) -> Option<&mut Profile> {
        self.profiles
            .iter_mut()
            .find(|p| p.scheduler_name == pod.scheduler_name)
    }
}
