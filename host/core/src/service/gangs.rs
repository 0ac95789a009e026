//! What the service does for gangs: it knows every PodGroup and its members (pending or
//! placed), fills in a pod's [`sdk::PodGroup`] before each call that reads it, places pods in
//! the queue as the QueueSort plugin says, runs PostFilter, and rejects the waiting pods the
//! plugins reject.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use wasched_sdk as sdk;

use super::Service;
use crate::cache::DetachedPod;
use crate::framework::Victim;
use crate::k8s::podgroup::{group_name, is_grouped};
use crate::result::CycleResult;

/// Where a gang stands, for the status page.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GangProgress {
    /// `namespace/name` of the group.
    pub name: String,
    /// Whether its PodGroup exists.
    pub found: bool,
    /// `minMember` (0 when the PodGroup is not found).
    pub min_member: u32,
    /// Members with a node: bound, binding, or waiting at Permit.
    pub assigned: usize,
    /// Each member and where it stands, by name.
    pub members: Vec<GangMember>,
}

/// One member of a gang.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GangMember {
    /// `namespace/name`.
    pub pod: String,
    /// `bound`, `binding` (assumed, its binding not seen yet), `waiting` (reserved, held at
    /// Permit) or `pending`.
    pub state: &'static str,
    /// Its node, unless pending.
    pub node: Option<String>,
}

impl Service {
    /// Every gang with its members and where each stands, by name.
    pub fn gangs(&self) -> Vec<GangProgress> {
        self.gangs
            .groups()
            .map(|(name, spec, _)| {
                let members: Vec<GangMember> = self
                    .gangs
                    .members(name)
                    .map(|key| self.gang_member(key))
                    .collect();
                GangProgress {
                    name: name.to_string(),
                    found: spec.is_some(),
                    min_member: spec.map_or(0, |s| s.min_member),
                    assigned: members.iter().filter(|m| m.node.is_some()).count(),
                    members,
                }
            })
            .collect()
    }

    fn gang_member(&self, key: &str) -> GangMember {
        let (state, node) = match self.pod_state(key) {
            Some(super::PodState::Bound { node }) => ("bound", Some(node)),
            Some(super::PodState::Assumed { node }) if self.waiting.contains(key) => {
                ("waiting", Some(node))
            }
            Some(super::PodState::Assumed { node }) => ("binding", Some(node)),
            _ => ("pending", None),
        };
        GangMember {
            pod: key.to_string(),
            state,
            node,
        }
    }

    /// Milliseconds since the epoch at the service clock's reading `at`.
    pub(super) fn epoch_millis(&self, at: Duration) -> i64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let offset = now.saturating_sub(self.clock.now());
        i64::try_from((offset + at).as_millis()).unwrap_or(i64::MAX)
    }

    /// Fills in `pod`'s group, if its label names one: the PodGroup's spec and where its other
    /// members stand (assigned: bound, assumed or waiting at Permit).
    pub(super) fn resolve_group(&self, pod: &mut sdk::Pod) {
        let Some(view) = self.gangs.view(pod) else {
            pod.group = None;
            return;
        };
        let key = pod.key();
        let mut group = sdk::PodGroup {
            full_name: view.full_name,
            found: view.spec.is_some(),
            created_millis: view.created_millis,
            ..sdk::PodGroup::default()
        };
        if let Some(spec) = view.spec {
            group.min_member = spec.min_member;
            group.min_resources.clone_from(&spec.min_resources);
            group.schedule_timeout_seconds = spec.schedule_timeout_seconds;
        }
        let members = view.members.into_iter().flatten();
        let cache = self.decider.cache();
        // A pod not recorded yet counts too, as kube-scheduler's lister would have it.
        group.members = 1;
        for member in members {
            if *member == key {
                continue;
            }
            group.members += 1;
            if cache.pod_node(member).is_none() {
                continue;
            }
            group.assigned += 1;
            if let Some(requests) = self.gangs.requests(member) {
                group.assigned_requests.add(requests);
            }
            group.assigned_requests.pods += 1;
            if self.waiting.contains(member) {
                group.waiting.push(member.clone());
            }
        }
        pod.group = Some(group);
    }

    /// A PodGroup added or changed.
    pub(super) fn apply_pod_group(
        &mut self,
        group: &crate::k8s::podgroup::PodGroup,
    ) -> Result<(), crate::k8s::FieldError> {
        let spec = crate::k8s::podgroup::group_spec(group)?;
        let meta = &group.metadata;
        let full_name = format!(
            "{}/{}",
            meta.namespace.as_deref().unwrap_or("default"),
            meta.name.as_deref().unwrap_or_default()
        );
        let now = self.epoch_millis(self.clock.now());
        self.gangs.upsert_group(&full_name, spec, now);
        self.group_changed(&full_name);
        Ok(())
    }

    /// A Workload (Kubernetes 1.35) added or changed: each of its pod groups is a gang, and
    /// those it no longer has are gone.
    pub(super) fn apply_workload(
        &mut self,
        workload: &k8s_openapi::api::scheduling::v1alpha1::Workload,
    ) {
        let meta = &workload.metadata;
        let namespace = meta.namespace.as_deref().unwrap_or("default");
        let name = meta.name.as_deref().unwrap_or_default();
        let gangs = crate::k8s::podgroup::workload_gangs(workload);
        let now = self.epoch_millis(self.clock.now());
        for old in self.gangs.workload_groups(namespace, name) {
            if !gangs.iter().any(|(spec_name, _)| *spec_name == old) {
                self.remove_workload_group(&old);
            }
        }
        for (spec_name, spec) in gangs {
            self.gangs.upsert_group(&spec_name, spec, now);
            for group in self.gangs.sharing_spec(&spec_name) {
                self.group_changed(&group);
            }
        }
    }

    /// A Workload deleted: its gangs are not found any more.
    pub(super) fn remove_workload(&mut self, namespace: &str, name: &str) {
        for old in self.gangs.workload_groups(namespace, name) {
            self.remove_workload_group(&old);
        }
    }

    fn remove_workload_group(&mut self, spec_name: &str) {
        self.gangs.remove_group(spec_name);
        for group in self.gangs.sharing_spec(spec_name) {
            self.wake_group(&group);
        }
    }

    /// Puts a queued pod where the QueueSort plugin of its profile says, if it has one.
    pub(super) fn sort_in_queue(&mut self, key: &str) {
        let Some(pod) = self.queue.pod(key) else {
            return;
        };
        if !self.decider.sorts_queue(pod) {
            return;
        }
        let mut pod = pod.clone();
        let queued = self.queue.queued_at(key).unwrap_or_default();
        let queued_millis = self.epoch_millis(queued);
        self.resolve_group(&mut pod);
        if let Some(order) = self.decider.queue_sort(&pod, queued_millis) {
            self.queue.set_order(key, order);
        }
    }

    /// A pod joined or left a group, or the group's PodGroup changed: its parked members are
    /// tried again (coscheduling's `EventsToRegister`: a pod added, a PodGroup added or
    /// updated).
    pub(super) fn wake_group(&mut self, full_name: &str) {
        let members: Vec<String> = self.gangs.members(full_name).map(str::to_string).collect();
        self.queue.wake(members.iter().map(String::as_str));
    }

    /// The PodGroup `full_name` was added or changed: its members take their place in the
    /// queue again (its creation time orders them) and its parked members are tried again.
    pub(super) fn group_changed(&mut self, full_name: &str) {
        let members: Vec<String> = self.gangs.members(full_name).map(str::to_string).collect();
        self.queue.wake(members.iter().map(String::as_str));
        for member in &members {
            self.sort_in_queue(member);
        }
    }

    /// A group pod now waits at Permit: its siblings that wait in the queue are tried at once
    /// (coscheduling's `ActivateSiblings`), so the gang fills before its wait runs out.
    pub(super) fn activate_siblings(&mut self, pod: &sdk::Pod) {
        let Some(full_name) = group_name(pod) else {
            return;
        };
        let members: Vec<String> = self.gangs.members(&full_name).map(str::to_string).collect();
        self.queue.activate(members.iter().map(String::as_str));
    }

    /// A gang preempts whole or not at all: when a member's preemption found room, the rest of
    /// the members still to place (up to `minMember`) are planned on the cluster as it would be
    /// with that member on its node and the victims gone, each preempting in turn if it must.
    /// If every one finds room, each that preempts is nominated too and its victims are evicted
    /// with the first member's (its result follows); if not, nothing is nominated and nothing
    /// evicted, and the FitError says why. The cache is as before either way.
    pub(super) fn gang_preemption(&mut self, pod: &sdk::Pod, result: &mut CycleResult) {
        let (Some(preemption), Some(group)) = (&result.outcome.preemption, &pod.group) else {
            return;
        };
        if !group.found {
            return;
        }
        let still_to_place = group.min_member.saturating_sub(group.assigned + 1) as usize;
        if still_to_place == 0 {
            return;
        }
        let key = pod.key();
        let siblings: Vec<sdk::Pod> = self
            .gangs
            .members(&group.full_name)
            .filter(|member| *member != key && self.decider.cache().pod_node(member).is_none())
            .filter_map(|member| self.queue.pod(member).cloned())
            .collect();
        let full_name = group.full_name.clone();
        let mut plan = GangPlan::default();
        plan.take(self, pod, &preemption.node, &preemption.victims);
        let mut nominations = Vec::new();
        for mut sibling in siblings {
            if plan.assumed.len() == still_to_place + 1 {
                break;
            }
            self.resolve_group(&mut sibling);
            let Some(outcome) = self.decider.plan(&sibling) else {
                continue;
            };
            if let Some(node) = &outcome.node {
                plan.take(self, &sibling, node, &[]);
            } else if let Some(preemption) = &outcome.preemption {
                plan.take(self, &sibling, &preemption.node, &preemption.victims);
                nominations.push((sibling, outcome));
            }
        }
        let found = plan.assumed.len() - 1;
        plan.undo(self);
        if found < still_to_place {
            result.outcome.preemption = None;
            let message = result.outcome.message.get_or_insert_with(String::new);
            message.push_str(&format!(
                " preemption: PodGroup {full_name} would have room for {found} of the {still_to_place} other members it needs, so none is nominated."
            ));
            result.outcome.post_filter_reasons = true;
            return;
        }
        for (sibling, outcome) in nominations {
            self.nominate_sibling(sibling, outcome);
        }
    }

    /// Nominates a gang member its gang's preemption planned a node for: its victims are evicted
    /// with the first member's, through a result of its own, and it waits in the queue for them
    /// to leave.
    fn nominate_sibling(&mut self, sibling: sdk::Pod, outcome: crate::framework::Outcome) {
        let key = sibling.key();
        let Some(preemption) = &outcome.preemption else {
            return;
        };
        let attempts = self.queue.status(&key).map_or(1, |s| s.attempts);
        self.nominate(&sibling, &preemption.node);
        let mut result = CycleResult::attempt(key, sibling.scheduler_name.clone(), attempts);
        result.outcome = outcome;
        // It waits for its victims to leave, as the member that preempted first does.
        let message = result.outcome.message.clone().unwrap_or_default();
        self.queue.unschedulable(&result.pod, message);
        self.write(&result);
        self.released.push_back(result);
    }

    /// PostFilter for a pod no node took and preemption made no room for: the reasons join its
    /// message (after the preemption's, as kube-scheduler joins PostFilter reasons), and the
    /// waiting pods the plugins reject are unreserved.
    pub(super) fn post_filter(&mut self, pod: &sdk::Pod, result: &mut CycleResult) {
        if result.outcome.error || result.outcome.preemption.is_some() {
            return;
        }
        let mut pod = pod.clone();
        self.resolve_group(&mut pod);
        let outcome = self.decider.post_filter(&pod);
        if !outcome.reasons.is_empty() {
            let message = result.outcome.message.get_or_insert_with(String::new);
            let separator = if result.outcome.post_filter_reasons {
                ", "
            } else {
                " "
            };
            message.push_str(separator);
            message.push_str(&outcome.reasons.join(", "));
        }
        self.reject_waiting(outcome.rejected_waiting);
    }

    /// Rejects waiting pods as plugins asked: all of them leave the waiting pods first (so the
    /// Unreserve of one, which may reject the rest, finds them rejected already, as
    /// kube-scheduler's first rejection of a waiting pod is the one it keeps), then each is
    /// unreserved and queued again after backoff, its result carrying the plugin's message.
    pub(super) fn reject_waiting(&mut self, rejected: Vec<(String, sdk::Rejection)>) {
        let taken: Vec<_> = rejected
            .into_iter()
            .filter_map(|(plugin, rejection)| {
                let waiting = self.waiting.remove(&rejection.pod)?;
                Some((plugin, rejection.message, waiting))
            })
            .collect();
        for (plugin, message, waiting) in taken {
            self.stats
                .permit_rejections
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.count_wait(waiting.since);
            tracing::debug!(pod = %waiting.result.pod, %plugin, "waiting pod rejected: {message}");
            let mut result = waiting.result;
            self.reject_reserved(&waiting.pod, &waiting.node, &mut result, message, false);
            self.write(&result);
            self.released.push_back(result);
        }
    }

    /// Records a pod's membership as it changes, waking its group when it joins one.
    pub(super) fn track_member(&mut self, pod: &sdk::Pod) {
        // Without gangs in the cluster, a pod without a group label changes nothing here.
        if !self.gangs.has_members() && !is_grouped(pod) {
            return;
        }
        let before = self.gangs.group_of_member(&pod.key()).map(str::to_string);
        self.gangs.upsert_member(pod);
        let after = self.gangs.group_of_member(&pod.key()).map(str::to_string);
        if before != after {
            if let Some(group) = after {
                self.wake_group(&group);
            }
        }
    }

    /// Forgets a deleted or finished pod's membership.
    pub(super) fn forget_member(&mut self, key: &str) {
        if self.gangs.has_members() {
            self.gangs.remove_member(key);
        }
    }
}

/// What planning a gang's preemption changed in the cache, to be undone.
#[derive(Default)]
struct GangPlan {
    /// Members assumed on their planned nodes, the preempting one first.
    assumed: Vec<String>,
    /// Victims taken out.
    detached: Vec<DetachedPod>,
}

impl GangPlan {
    /// Puts `pod` on `node` with `victims` gone.
    fn take(&mut self, service: &mut Service, pod: &sdk::Pod, node: &str, victims: &[Victim]) {
        let cache = service.decider.cache_mut();
        for victim in victims {
            if let Some(detached) = cache.detach_pod(&victim.pod) {
                self.detached.push(detached);
            }
        }
        cache.assume_pod(pod, node);
        self.assumed.push(pod.key());
    }

    /// Takes the planned members out and puts the victims back.
    fn undo(self, service: &mut Service) {
        let cache = service.decider.cache_mut();
        for key in &self.assumed {
            cache.forget_pod(key);
        }
        for detached in self.detached {
            cache.reattach_pod(detached);
        }
    }
}
