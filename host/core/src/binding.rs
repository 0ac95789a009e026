//! What happens after a cycle decided: kube-scheduler's binding cycle (PreBind, Bind, PostBind)
//! for a placed pod, and for a pod placed nowhere the evictions of its preemption and the
//! `PodScheduled=False` condition.
//!
//! The order of those writes and what a failure of each means are written once, in
//! [`carry_out_async`]; a [`Backend`] (or [`AsyncBackend`]) only says how one write is made where
//! the cluster lives: in memory (`simulate`, `replay`, `bench`: [`MemoryBackend`]), in the
//! embedded store (`serve`) or through the API server (Kubernetes mode). Nothing else binds or
//! evicts.

use std::collections::HashMap;
use std::future::Future as _;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::resource::v1::ResourceClaim;

use crate::events::{EventPipeline, Object};
use crate::framework::Victim;
use crate::k8s;
use crate::k8s::resourceclaims::Released;
use crate::result::Gated;
use crate::service::{bound_pod, CycleResult, Sequencer};

/// The writes that differ between where the cluster lives. Each is one of kube-scheduler's
/// requests; [`carry_out`] decides which are made and in what order.
pub trait Backend {
    /// VolumeBinding's PreBind: binds each statically matched volume to its claim and marks each
    /// claim to provision with the node (`volume.kubernetes.io/selected-node`), then waits until
    /// the claims are bound where the backend has a PV controller to wait for.
    ///
    /// # Errors
    /// Why the volumes were not bound; the pod is unreserved and retried after backoff.
    fn bind_volumes(&mut self, result: &CycleResult, node: &str) -> Result<(), String>;

    /// DynamicResources' PreBind: writes each of `result`'s claim writes into its ResourceClaim's
    /// status (the allocation, when the claim had none, and the pod in `reservedFor`) before the
    /// binding.
    ///
    /// # Errors
    /// Why a claim was not written; the pod is unreserved and retried after backoff.
    fn bind_claims(&mut self, result: &CycleResult) -> Result<(), String>;

    /// Takes back what [`Backend::bind_claims`] wrote for `result` when its binding failed: the
    /// pod leaves each claim's `reservedFor`, and an allocation made for it is dropped when no
    /// other pod uses the claim.
    ///
    /// # Errors
    /// Why a claim was not written back; logged (kube's resourceclaim controller deallocates
    /// claims no pod uses).
    fn unbind_claims(&mut self, result: &CycleResult) -> Result<(), String>;

    /// DefaultBinder's Bind: sets the pod's node (`pods/binding`).
    ///
    /// # Errors
    /// Why the binding was refused; the pod is unreserved and retried after backoff.
    fn bind(&mut self, result: &CycleResult, node: &str) -> Result<(), String>;

    /// Evicts one preemption victim (not already terminating) of `result`'s pod.
    ///
    /// # Errors
    /// Why the victim was not evicted; logged, and the preemptor tries again when victims leave.
    fn evict(&mut self, result: &CycleResult, victim: &Victim) -> Result<(), String>;

    /// Records why the pod was placed nowhere: the `PodScheduled=False` condition with the
    /// FitError message, and the nomination a preemption set (or cleared). `Ok(false)` when it
    /// no longer applies (the pod is gone, or bound meanwhile) and nothing was written.
    ///
    /// # Errors
    /// Why the condition was not written.
    fn record_condition(&mut self, result: &CycleResult) -> Result<bool, String>;
}

/// [`Backend`]'s writes made without holding a thread while each waits for its answer: through
/// the API server, where hundreds of bindings are in flight at once and a thread each would cost
/// more than the requests. Each method means what [`Backend`]'s method of the same name means.
// Only generic callers use it, so the futures' `Send` is checked where a concrete backend's are
// spawned, not promised here.
#[allow(async_fn_in_trait)]
pub trait AsyncBackend {
    /// [`Backend::bind_volumes`].
    async fn bind_volumes(&mut self, result: &CycleResult, node: &str) -> Result<(), String>;
    /// [`Backend::bind_claims`].
    async fn bind_claims(&mut self, result: &CycleResult) -> Result<(), String>;
    /// [`Backend::unbind_claims`].
    async fn unbind_claims(&mut self, result: &CycleResult) -> Result<(), String>;
    /// [`Backend::bind`].
    async fn bind(&mut self, result: &CycleResult, node: &str) -> Result<(), String>;
    /// [`Backend::evict`].
    async fn evict(&mut self, result: &CycleResult, victim: &Victim) -> Result<(), String>;
    /// [`Backend::record_condition`].
    async fn record_condition(&mut self, result: &CycleResult) -> Result<bool, String>;
}

/// What [`carry_out`] made of one result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Carried {
    /// PreBind and Bind succeeded: the binding is sent, and its confirmation comes back as the
    /// pod with its node.
    Bound,
    /// PreBind or Bind failed, with why (kube's message): the placement is to be undone
    /// (Unreserve) and the pod retried after backoff.
    BindingFailed(String),
    /// The victims were asked to leave and the condition written.
    Recorded,
    /// The result no longer applies (the pod is gone or bound): nothing was written.
    Stale,
    /// The condition was not written, with why; nothing is undone.
    ConditionFailed(String),
    /// The pod waits at Permit plugins: nothing is written until it is let go or rejected.
    Waiting,
    /// The pod is gated (kept out of the queue by PreEnqueue): its `SchedulingGated` condition
    /// was written when it has scheduling gates; nothing else happens, no Event is recorded.
    Gated,
}

impl Carried {
    /// Something was written for the pod: the result is worth telling watchers about.
    pub fn applied(&self) -> bool {
        matches!(self, Carried::Bound | Carried::Recorded)
    }
}

/// The message of a failed VolumeBinding PreBind, as kube-scheduler words it.
pub fn prebind_failure(reason: &str) -> String {
    format!("running PreBind plugin \"VolumeBinding\": {reason}")
}

/// Makes the writes `result` calls for through `backend`, awaiting each, in kube-scheduler's
/// order (none for a pod waiting at Permit plugins; for a gated pod, only the condition the API
/// server writes for scheduling gates):
/// - a placed pod: PreBind (its volumes, when it has any to bind), then Bind; nothing follows a
///   failure. PostBind has no default plugin.
/// - a pod placed nowhere: its preemption's victims are evicted (a failure is logged and the
///   rest still go), then its condition and nomination are written.
pub async fn carry_out_async<B: AsyncBackend>(backend: &mut B, result: &CycleResult) -> Carried {
    if !result.waiting_on.is_empty() {
        return Carried::Waiting;
    }
    match result.gated {
        Some(Gated::Plugin(_)) => return Carried::Gated,
        Some(Gated::SchedulingGates) => {
            return match backend.record_condition(result).await {
                Ok(_) => Carried::Gated,
                Err(e) => Carried::ConditionFailed(e),
            }
        }
        None => {}
    }
    if let Some(node) = &result.outcome.node {
        if !result.outcome.volumes.is_empty() {
            if let Err(e) = backend.bind_volumes(result, node).await {
                return Carried::BindingFailed(prebind_failure(&e));
            }
        }
        if !result.outcome.claim_writes.is_empty() {
            if let Err(e) = backend.bind_claims(result).await {
                return Carried::BindingFailed(format!(
                    "running PreBind plugin \"DynamicResources\": {e}"
                ));
            }
        }
        return match backend.bind(result, node).await {
            Ok(()) => Carried::Bound,
            Err(e) => {
                if !result.outcome.claim_writes.is_empty() {
                    if let Err(undo) = backend.unbind_claims(result).await {
                        tracing::warn!(pod = %result.pod, "taking back the claims' allocation failed: {undo}");
                    }
                }
                Carried::BindingFailed(e)
            }
        };
    }
    if let Some(preemption) = &result.outcome.preemption {
        for victim in preemption.victims.iter().filter(|v| !v.terminating) {
            if let Err(e) = backend.evict(result, victim).await {
                tracing::warn!(victim = %victim.pod, preemptor = %result.pod, "evicting the victim failed: {e}");
            }
        }
    }
    match backend.record_condition(result).await {
        Ok(true) => Carried::Recorded,
        Ok(false) => Carried::Stale,
        Err(e) => Carried::ConditionFailed(e),
    }
}

/// [`carry_out_async`] through a backend whose writes are done when they return: in memory, in
/// the embedded store.
pub fn carry_out(backend: &mut dyn Backend, result: &CycleResult) -> Carried {
    let mut immediate = Immediate(backend);
    let carried = std::pin::pin!(carry_out_async(&mut immediate, result));
    match carried.poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(carried) => carried,
        Poll::Pending => unreachable!("a synchronous backend's writes are done when they return"),
    }
}

/// A [`Backend`] as an [`AsyncBackend`] whose futures are ready at their first poll.
struct Immediate<'a>(&'a mut dyn Backend);

impl AsyncBackend for Immediate<'_> {
    async fn bind_volumes(&mut self, result: &CycleResult, node: &str) -> Result<(), String> {
        self.0.bind_volumes(result, node)
    }
    async fn bind_claims(&mut self, result: &CycleResult) -> Result<(), String> {
        self.0.bind_claims(result)
    }
    async fn unbind_claims(&mut self, result: &CycleResult) -> Result<(), String> {
        self.0.unbind_claims(result)
    }
    async fn bind(&mut self, result: &CycleResult, node: &str) -> Result<(), String> {
        self.0.bind(result, node)
    }
    async fn evict(&mut self, result: &CycleResult, victim: &Victim) -> Result<(), String> {
        self.0.evict(result, victim)
    }
    async fn record_condition(&mut self, result: &CycleResult) -> Result<bool, String> {
        self.0.record_condition(result)
    }
}

/// The cluster kept in memory by `simulate`, `replay` and `bench`: every write is applied at
/// once and fed back through the event pipeline as the API server's watch would deliver it.
/// Nothing here provisions volumes: a claim marked with its node keeps waiting, holding the node
/// for the pods that share it.
pub struct MemoryBackend {
    pipeline: Arc<EventPipeline>,
    sequence: Arc<Sequencer>,
    /// Pods by `namespace/name`, volumes by name and claims by `namespace/name`, as this
    /// backend last wrote them.
    pods: HashMap<String, core::Pod>,
    /// Pods held as JSON (for running pods, shared with the dump as read: `simulate` applies
    /// them from the same copy): most are never written, and a typed pod takes several times its
    /// JSON's size. Made typed (moved to `pods`) when written.
    compact: HashMap<String, Arc<str>>,
    /// Whether a pod goes back to `compact` after each write ([`MemoryBackend::kept_compact`]).
    compact_after_writes: bool,
    volumes: HashMap<String, core::PersistentVolume>,
    claims: HashMap<String, core::PersistentVolumeClaim>,
    /// ResourceClaims by `namespace/name`.
    resource_claims: HashMap<String, ResourceClaim>,
}

impl MemoryBackend {
    /// A backend holding `pods`, feeding its writes back through `pipeline`.
    pub fn new(
        pipeline: Arc<EventPipeline>,
        sequence: Arc<Sequencer>,
        pods: impl IntoIterator<Item = core::Pod>,
    ) -> Self {
        MemoryBackend {
            pipeline,
            sequence,
            pods: pods.into_iter().map(|p| (k8s::pod_key(&p), p)).collect(),
            compact: HashMap::new(),
            compact_after_writes: false,
            volumes: HashMap::new(),
            claims: HashMap::new(),
            resource_claims: HashMap::new(),
        }
    }

    /// This backend, holding the ResourceClaims among `objects` too.
    pub fn with_resource_claims<'o>(
        mut self,
        objects: impl IntoIterator<Item = &'o Object>,
    ) -> Self {
        for object in objects {
            if let Object::ResourceClaim(claim) = object {
                self.insert_resource_claim(claim);
            }
        }
        self
    }

    fn insert_resource_claim(&mut self, claim: &ResourceClaim) {
        let meta = &claim.metadata;
        let key = format!(
            "{}/{}",
            meta.namespace.as_deref().unwrap_or("default"),
            meta.name.as_deref().unwrap_or_default()
        );
        self.resource_claims.insert(key, claim.clone());
    }

    /// This backend, holding these volumes and claims too.
    pub fn with_storage(
        mut self,
        volumes: &[core::PersistentVolume],
        claims: &[core::PersistentVolumeClaim],
    ) -> Self {
        self.volumes = volumes
            .iter()
            .map(|v| (v.metadata.name.clone().unwrap_or_default(), v.clone()))
            .collect();
        self.claims = claims
            .iter()
            .map(|c| (k8s::claim_key(c), c.clone()))
            .collect();
        self
    }

    /// Keeps `object` as the cluster's copy, if it is of a kind this backend writes (pods,
    /// volumes, claims and ResourceClaims): for objects created while a run goes on, which
    /// `new` and the `with_` methods did not see.
    pub fn hold(&mut self, object: &Object) {
        match object {
            Object::Pod(pod) => {
                self.pods.insert(k8s::pod_key(pod), (**pod).clone());
            }
            Object::PersistentVolume(volume) => {
                let name = volume.metadata.name.clone().unwrap_or_default();
                self.volumes.insert(name, (**volume).clone());
            }
            Object::PersistentVolumeClaim(claim) => {
                self.claims.insert(k8s::claim_key(claim), (**claim).clone());
            }
            Object::ResourceClaim(claim) => self.insert_resource_claim(claim),
            _ => {}
        }
    }

    /// This backend, holding `pods` too, as JSON until one is written: for a dump's pods, most of
    /// which are never written (running pods) or written once (pending pods, bound).
    pub fn with_compact_pods<'p>(mut self, pods: impl IntoIterator<Item = &'p core::Pod>) -> Self {
        for pod in pods {
            let json = serde_json::to_string(pod).expect("Kubernetes objects serialize");
            self.compact.insert(k8s::pod_key(pod), Arc::from(json));
        }
        self
    }

    /// This backend, holding pods already as their key and JSON (as
    /// [`crate::input::Cluster::json_pods`] keeps them: shared, not copied).
    pub fn with_pods_json(mut self, pods: impl IntoIterator<Item = (String, Arc<str>)>) -> Self {
        self.compact.extend(pods);
        self
    }

    /// This backend, putting each pod back into JSON after a write (`simulate`, whose dump may
    /// have tens of thousands of pending pods to bind): [`MemoryBackend::pods`] then lists none.
    pub fn kept_compact(mut self) -> Self {
        self.compact_after_writes = true;
        self
    }

    /// The pods as this backend last wrote them (those held as JSON, by
    /// [`MemoryBackend::with_compact_pods`] or [`MemoryBackend::kept_compact`], are not listed).
    pub fn pods(&self) -> impl Iterator<Item = &core::Pod> {
        self.pods.values()
    }

    /// Forgets a deleted pod, as the API server would.
    pub fn forget_pod(&mut self, key: &str) {
        self.pods.remove(key);
        self.compact.remove(key);
    }

    /// Puts pod `key` back into JSON after a write, when the backend is [`MemoryBackend::kept_compact`].
    fn written(&mut self, key: &str) {
        if !self.compact_after_writes {
            return;
        }
        if let Some(pod) = self.pods.remove(key) {
            let json = serde_json::to_string(&pod).expect("Kubernetes objects serialize");
            self.compact.insert(key.to_string(), Arc::from(json));
        }
    }

    /// The pod `key`, typed (a compact one is made typed here).
    fn pod_mut(&mut self, key: &str) -> Option<&mut core::Pod> {
        if let Some(json) = self.compact.remove(key) {
            let pod: core::Pod = serde_json::from_str(&json).expect("the JSON this backend wrote");
            self.pods.insert(key.to_string(), pod);
        }
        self.pods.get_mut(key)
    }

    fn claim(&self, namespace: &str, name: &str) -> Result<&core::PersistentVolumeClaim, String> {
        self.claims
            .get(&format!("{namespace}/{name}"))
            .ok_or_else(|| format!("persistentvolumeclaim \"{name}\" not found"))
    }
}

impl Backend for MemoryBackend {
    fn bind_volumes(&mut self, result: &CycleResult, node: &str) -> Result<(), String> {
        let namespace = result.namespace();
        let mut updates = Vec::new();
        for (claim_name, volume_name) in &result.outcome.volumes.static_bindings {
            let claim = self.claim(namespace, claim_name)?;
            let volume = self
                .volumes
                .get(volume_name)
                .ok_or_else(|| format!("persistentvolume \"{volume_name}\" not found"))?;
            let (volume, claim) = k8s::bound_volume_and_claim(volume, claim);
            updates.push((Some(volume), claim));
        }
        for claim_name in &result.outcome.volumes.provisions {
            let claim = self.claim(namespace, claim_name)?;
            updates.push((None, k8s::claim_with_selected_node(claim, node)));
        }
        for (volume, claim) in updates {
            if let Some(volume) = volume {
                let name = volume.metadata.name.clone().unwrap_or_default();
                self.volumes.insert(name, volume.clone());
                self.pipeline.submit(
                    self.sequence
                        .upsert(Object::PersistentVolume(Box::new(volume))),
                );
            }
            self.claims.insert(k8s::claim_key(&claim), claim.clone());
            self.pipeline.submit(
                self.sequence
                    .upsert(Object::PersistentVolumeClaim(Box::new(claim))),
            );
        }
        Ok(())
    }

    fn bind_claims(&mut self, result: &CycleResult) -> Result<(), String> {
        let namespace = result.namespace();
        let pod_name = result.pod.split_once('/').map_or("", |(_, name)| name);
        let mut updated = Vec::new();
        for write in &result.outcome.claim_writes {
            let key = format!("{namespace}/{}", write.claim);
            let claim = self.resource_claims.get(&key).ok_or_else(|| {
                format!(
                    "resourceclaims.resource.k8s.io \"{}\" not found",
                    write.claim
                )
            })?;
            updated.push((key, k8s::devices::reserved_claim(claim, write, pod_name)));
        }
        for (key, claim) in updated {
            self.resource_claims.insert(key, claim.clone());
            self.pipeline
                .submit(self.sequence.upsert(Object::ResourceClaim(Box::new(claim))));
        }
        Ok(())
    }

    fn unbind_claims(&mut self, result: &CycleResult) -> Result<(), String> {
        let namespace = result.namespace();
        for write in &result.outcome.claim_writes {
            let key = format!("{namespace}/{}", write.claim);
            let Some(claim) = self.resource_claims.get(&key) else {
                continue;
            };
            let claim = k8s::devices::unreserved_claim(claim, write);
            self.resource_claims.insert(key, claim.clone());
            self.pipeline
                .submit(self.sequence.upsert(Object::ResourceClaim(Box::new(claim))));
        }
        Ok(())
    }

    fn bind(&mut self, result: &CycleResult, node: &str) -> Result<(), String> {
        let pod = self.pod_mut(&result.pod).ok_or("unknown pod")?;
        *pod = bound_pod(pod, node);
        let bound = Object::Pod(Box::new(pod.clone()));
        self.pipeline.submit(self.sequence.upsert(bound));
        self.written(&result.pod);
        Ok(())
    }

    /// Deletes the victim at once (nothing here has a grace period), and gives its claims back
    /// as kube's resourceclaim controller would.
    fn evict(&mut self, _result: &CycleResult, victim: &Victim) -> Result<(), String> {
        self.pod_mut(&victim.pod);
        let evicted = self
            .pods
            .remove(&victim.pod)
            .ok_or_else(|| format!("unknown victim {}", victim.pod))?;
        let namespace = evicted.metadata.namespace.as_deref().unwrap_or("default");
        let released = k8s::resourceclaims::released_claims(&evicted, |name| {
            self.resource_claims
                .get(&format!("{namespace}/{name}"))
                .cloned()
        });
        let namespace = namespace.to_string();
        self.pipeline
            .submit(self.sequence.delete(Object::Pod(Box::new(evicted))));
        for change in released {
            let (claim, deleted) = match change {
                Released::Updated(claim) => (claim, false),
                Released::Deleted(claim) => (claim, true),
            };
            let key = format!(
                "{namespace}/{}",
                claim.metadata.name.as_deref().unwrap_or_default()
            );
            let object = Object::ResourceClaim(Box::new(claim.clone()));
            if deleted {
                self.resource_claims.remove(&key);
                self.pipeline.submit(self.sequence.delete(object));
            } else {
                self.resource_claims.insert(key, claim);
                self.pipeline.submit(self.sequence.upsert(object));
            }
        }
        Ok(())
    }

    /// Keeps the condition on the pod; only a change of nomination is fed back, as the queue
    /// takes no notice of a pod's own status.
    fn record_condition(&mut self, result: &CycleResult) -> Result<bool, String> {
        let Some(pod) = self.pod_mut(&result.pod) else {
            return Ok(false);
        };
        let nominated = pod_scheduled_false(pod, result);
        if nominated {
            let changed = Object::Pod(Box::new(pod.clone()));
            self.pipeline.submit(self.sequence.upsert(changed));
        }
        self.written(&result.pod);
        Ok(true)
    }
}

/// Sets `result`'s `PodScheduled=False` condition on `pod`, and its nomination: the node a
/// preemption chose, or none when the result clears it. True when it set a nomination.
pub fn pod_scheduled_false(pod: &mut core::Pod, result: &CycleResult) -> bool {
    let condition = core::PodCondition {
        type_: "PodScheduled".into(),
        status: "False".into(),
        reason: Some(condition_reason(result).into()),
        message: condition_message(result),
        ..Default::default()
    };
    let status = set_pod_scheduled(pod, condition);
    status.phase.get_or_insert_with(|| "Pending".into());
    if let Some(preemption) = &result.outcome.preemption {
        status.nominated_node_name = Some(preemption.node.clone());
        return true;
    }
    if result.outcome.clears_nomination {
        status.nominated_node_name = None;
    }
    false
}

/// Replaces `pod`'s `PodScheduled` condition with `condition`; returns the pod's status.
pub fn set_pod_scheduled(
    pod: &mut core::Pod,
    condition: core::PodCondition,
) -> &mut core::PodStatus {
    let status = pod.status.get_or_insert_with(Default::default);
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    conditions.retain(|c| c.type_ != "PodScheduled");
    conditions.push(condition);
    status
}

/// The API server's message for a pod with scheduling gates (`SchedulingGated`).
pub const SCHEDULING_GATED_MESSAGE: &str =
    "Scheduling is blocked due to non-empty scheduling gates";

/// The condition's message: the API server's for a gated pod, else the result's.
pub fn condition_message(result: &CycleResult) -> Option<String> {
    match result.gated {
        Some(_) => Some(SCHEDULING_GATED_MESSAGE.to_string()),
        None => result.outcome.message.clone(),
    }
}

/// The condition's reason: `SchedulingGated` for a gated pod (the API server's), kube-scheduler's
/// `SchedulerError` for a cycle that failed with an error, `Unschedulable` for one that found no
/// node.
pub fn condition_reason(result: &CycleResult) -> &'static str {
    if result.gated.is_some() {
        "SchedulingGated"
    } else if result.outcome.error {
        "SchedulerError"
    } else {
        "Unschedulable"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Action;

    fn pending(name: &str) -> core::Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        }))
        .unwrap()
    }

    /// The pods of `events`, by action, with the node each names.
    fn written(
        events: impl IntoIterator<Item = crate::events::Event>,
    ) -> Vec<(bool, String, Option<String>)> {
        events
            .into_iter()
            .filter_map(|event| match event.object {
                Object::Pod(pod) => Some((
                    event.action == Action::Delete,
                    pod.metadata.name.clone().unwrap_or_default(),
                    pod.spec.and_then(|s| s.node_name),
                )),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_backend_kept_compact_writes_each_pod_over_its_last_write() {
        let pipeline = Arc::new(EventPipeline::default());
        let sequence = Arc::new(Sequencer::default());
        let mut backend = MemoryBackend::new(pipeline.clone(), sequence, [])
            .kept_compact()
            .with_compact_pods(&[pending("web"), pending("db")]);
        let result = |name: &str| CycleResult::attempt(format!("default/{name}"), String::new(), 1);
        Backend::bind(&mut backend, &result("web"), "node-a").unwrap();
        assert!(
            backend.pods().next().is_none(),
            "back in JSON after the binding"
        );
        assert_eq!(
            written(pipeline.drain()),
            [(false, "web".to_string(), Some("node-a".to_string()))]
        );
        let victim = Victim {
            pod: "default/web".into(),
            uid: "uid-web".into(),
            priority: 0,
            terminating: false,
        };
        Backend::evict(&mut backend, &result("high"), &victim).unwrap();
        assert_eq!(
            written(pipeline.drain()),
            [(true, "web".to_string(), Some("node-a".to_string()))],
            "the eviction deletes the pod as bound"
        );
        assert!(
            Backend::bind(&mut backend, &result("web"), "node-b").is_err(),
            "gone once evicted"
        );
        Backend::bind(&mut backend, &result("db"), "node-b").unwrap();
        assert_eq!(
            written(pipeline.drain()),
            [(false, "db".to_string(), Some("node-b".to_string()))]
        );
    }
}
