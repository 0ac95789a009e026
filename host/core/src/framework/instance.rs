//! What the framework wraps around every plugin instance: call timing, and leaving out the
//! `set-pod` calls whose answer is already known.

use std::sync::Arc;

use wasched_sdk as sdk;

use super::PluginSpec;
use crate::metrics::{ExtensionPoint, PluginCallStats};
use crate::runtime::{CallError, LoadError, PermitAnswer, PluginInstance, Reservation};

impl PluginSpec {
    /// A fresh instance whose calls are timed into [`PluginSpec::stats`].
    pub(super) fn instantiate(&self) -> Result<Box<dyn PluginInstance>, LoadError> {
        let inner = self.factory.instantiate(&self.config)?;
        Ok(Box::new(FrameworkInstance {
            inner,
            stats: self.stats.clone(),
            last: None,
            settled: Vec::new(),
        }))
    }
}

/// An instance as the framework calls it: every call timed into the plugin's stats (one clock
/// read per batch, not per node), and `set-pod` left out when the plugin could not tell the pod
/// from one it answered already.
///
/// A `set-pod` is left out when the parts of the pod the plugin reads equal those of the pod it
/// holds and its mirror has not changed since: it keeps its current pod and its plan stands.
/// For a plugin whose plans ignore usage ([`sdk::Descriptor::plan_ignores_usage`]), a change of
/// usage alone leaves them standing too.
/// Pods of one ReplicaSet or Job arrive together, and for each of them most plugins would
/// otherwise be asked the same question; a call into a component costs several times what the
/// comparison does.
///
/// Pods of several workloads interleave in a queue, so it also keeps the last few plans that
/// leave nothing more to ask the plugin for their pod (every node passes or the failing ones
/// are listed, and no score): such a plan stands for a pod with the same parts whichever pod
/// the instance holds, since the cycle makes no further call into it. In the `mixed` bench
/// scenario this left out nearly every `set-pod` of NodeUnschedulable and some of NodeAffinity's
/// and VolumeZone's, a few microseconds each as WebAssembly. A call left out is not timed.
pub(super) struct FrameworkInstance {
    pub(super) inner: Box<dyn PluginInstance>,
    pub(super) stats: Arc<PluginCallStats>,
    /// The pod the instance holds (only the parts it reads) and the plan it gave for it; none
    /// after its mirror changed or a call failed.
    pub(super) last: Option<(sdk::Pod, sdk::PodPlan)>,
    /// Recent plans that need no further call (see [`settles`]), oldest first, at most
    /// [`SETTLED_PLANS`]; emptied with `last`.
    pub(super) settled: Vec<(sdk::Pod, sdk::PodPlan)>,
}

/// How many settled plans [`FrameworkInstance`] keeps: the shapes of pods a queue interleaves.
pub(super) const SETTLED_PLANS: usize = 8;

/// Whether the cycle asks nothing more of the plugin for a pod with this plan: no filter call
/// (every node passes, or the failing ones are listed, or none can pass) and no score.
fn settles(plan: &sdk::PodPlan) -> bool {
    !plan.score
        && matches!(
            plan.filter,
            sdk::FilterPlan::Skip
                | sdk::FilterPlan::FailingNodes { .. }
                | sdk::FilterPlan::Reject(_)
        )
}

impl FrameworkInstance {
    /// The one way every call reaches the plugin: timed, counted as `point`.
    fn timed<T>(
        &mut self,
        point: ExtensionPoint,
        call: impl FnOnce(&mut dyn PluginInstance) -> Result<T, CallError>,
    ) -> Result<T, CallError> {
        let started = std::time::Instant::now();
        let result = call(self.inner.as_mut());
        self.stats.observe(point, started.elapsed(), result.is_ok());
        result
    }

    /// A change of the plugin's mirror: the plans it gave may no longer stand.
    fn mirror_change(
        &mut self,
        call: impl FnOnce(&mut dyn PluginInstance) -> Result<(), CallError>,
    ) -> Result<(), CallError> {
        self.forget();
        self.timed(ExtensionPoint::Sync, call)
    }

    /// Forgets every plan: the mirror changed, or a call failed.
    fn forget(&mut self) {
        self.last = None;
        self.settled.clear();
    }

    /// The plan already given for a pod the plugin cannot tell from this one, if any.
    fn known_plan(&self, pod: &sdk::Pod) -> Option<sdk::PodPlan> {
        let parts = self.inner.descriptor().reads_pod;
        let last = self.last.iter();
        let mut known = last.chain(&self.settled);
        let (_, plan) = known.find(|(seen, _)| pod.same_parts(seen, parts))?;
        Some(plan.clone())
    }
}

impl PluginInstance for FrameworkInstance {
    fn descriptor(&self) -> &sdk::Descriptor {
        self.inner.descriptor()
    }
    fn upsert_nodes(&mut self, nodes: &[(u32, &sdk::NodeInfo)]) -> Result<(), CallError> {
        self.mirror_change(|i| i.upsert_nodes(nodes))
    }
    fn remove_nodes(&mut self, ids: &[u32]) -> Result<(), CallError> {
        self.mirror_change(|i| i.remove_nodes(ids))
    }
    fn update_usage(&mut self, usage: &[(u32, &sdk::NodeUsage)]) -> Result<(), CallError> {
        if !self.inner.descriptor().plan_ignores_usage {
            return self.mirror_change(|i| i.update_usage(usage));
        }
        // Its plans stand (it says they depend on the pod alone); the usage reaches it before
        // its next filter or score.
        let applied = self.timed(ExtensionPoint::Sync, |i| i.update_usage(usage));
        if applied.is_err() {
            self.forget();
        }
        applied
    }
    fn upsert_pods(&mut self, pods: &[(u32, sdk::ExistingPod)]) -> Result<(), CallError> {
        self.mirror_change(|i| i.upsert_pods(pods))
    }
    fn remove_pods(&mut self, ids: &[u32]) -> Result<(), CallError> {
        self.mirror_change(|i| i.remove_pods(ids))
    }
    fn upsert_namespaces(&mut self, namespaces: &[(&str, &sdk::Labels)]) -> Result<(), CallError> {
        self.mirror_change(|i| i.upsert_namespaces(namespaces))
    }
    fn remove_namespaces(&mut self, names: &[&str]) -> Result<(), CallError> {
        self.mirror_change(|i| i.remove_namespaces(names))
    }
    fn upsert_volumes(&mut self, volumes: &[&sdk::VolumeInfo]) -> Result<(), CallError> {
        self.mirror_change(|i| i.upsert_volumes(volumes))
    }
    fn remove_volumes(&mut self, names: &[&str]) -> Result<(), CallError> {
        self.mirror_change(|i| i.remove_volumes(names))
    }
    fn set_pod(&mut self, pod: &sdk::Pod) -> Result<sdk::PodPlan, CallError> {
        if let Some(plan) = self.known_plan(pod) {
            return Ok(plan);
        }
        self.last = None;
        let plan = match self.timed(ExtensionPoint::PreFilter, |i| i.set_pod(pod)) {
            Ok(plan) => plan,
            Err(e) => {
                self.forget();
                return Err(e);
            }
        };
        let held = pod.with_parts(self.inner.descriptor().reads_pod);
        if settles(&plan) {
            if self.settled.len() == SETTLED_PLANS {
                self.settled.remove(0);
            }
            self.settled.push((held.clone(), plan.clone()));
        }
        self.last = Some((held, plan.clone()));
        Ok(plan)
    }
    fn filter(&mut self, ids: &[u32], out: &mut sdk::FilterResults) -> Result<(), CallError> {
        self.timed(ExtensionPoint::Filter, |i| i.filter(ids, out))
    }
    fn score(&mut self, ids: &[u32], out: &mut Vec<i64>) -> Result<(), CallError> {
        self.timed(ExtensionPoint::Score, |i| i.score(ids, out))
    }
    fn normalize(&mut self, scores: &mut Vec<i64>) -> Result<(), CallError> {
        self.timed(ExtensionPoint::Score, |i| i.normalize(scores))
    }
    fn pre_enqueue(&mut self, pod: &sdk::Pod) -> Result<Option<sdk::Failure>, CallError> {
        self.timed(ExtensionPoint::PreEnqueue, |i| i.pre_enqueue(pod))
    }
    fn permit(&mut self, pod: &sdk::Pod, node: &str) -> Result<PermitAnswer, CallError> {
        self.timed(ExtensionPoint::Permit, |i| i.permit(pod, node))
    }
    fn reserve(&mut self, node: u32) -> Result<Result<Reservation, sdk::Failure>, CallError> {
        self.timed(ExtensionPoint::Reserve, |i| i.reserve(node))
    }
    fn unreserve(&mut self, pod: &sdk::Pod, node: &str) -> Result<(), CallError> {
        self.timed(ExtensionPoint::Unreserve, |i| i.unreserve(pod, node))
    }
    fn unreserve_rejects(
        &mut self,
        pod: &sdk::Pod,
        node: &str,
    ) -> Result<Vec<sdk::Rejection>, CallError> {
        self.timed(ExtensionPoint::Unreserve, |i| {
            i.unreserve_rejects(pod, node)
        })
    }
    fn post_filter(&mut self, pod: &sdk::Pod) -> Result<sdk::PostFilterAnswer, CallError> {
        self.timed(ExtensionPoint::PostFilter, |i| i.post_filter(pod))
    }
    fn queue_sort(
        &mut self,
        pod: &sdk::Pod,
        queued_millis: i64,
    ) -> Result<sdk::QueueKey, CallError> {
        self.timed(ExtensionPoint::QueueSort, |i| {
            i.queue_sort(pod, queued_millis)
        })
    }
}
