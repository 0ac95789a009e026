//! The long-running scheduler core: events in, placements out.
//!
//! [`Service`] owns the [`Decider`] (cache + profiles), the [`SchedulingQueue`] and the assumed
//! pods, and is driven by one thread: [`Service::apply_events`] drains the [`EventPipeline`]
//! (which any thread may feed), [`Service::schedule_one`] runs one cycle and reserves the pod on
//! its node at once (Reserve). The binding cycle ([`crate::binding::carry_out`]) then runs on
//! the service's own [`Backend`], or, for a service built with [`Service::deferred`], where the
//! caller carries out each result (the server's status writer, which reports back through
//! [`BindingFailures`]). A binding not confirmed (by a pod update with `spec.nodeName`, which
//! the cache then counts as observed) within the TTL expires, is forgotten (Unreserve) and
//! requeues the pod. The service alone reserves and unreserves.
//!
//! Events are only applied between cycles, on the same thread, so the cache a cycle reads cannot
//! change under it; the cycle's first stage brings every plugin instance to that cache generation.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1 as core;
use wasched_sdk as sdk;

use crate::binding::{self, Backend, Carried};
use crate::cache::PodVolumes;
use crate::clock::Clock;
use crate::events::{Action, Event, EventPipeline, Kind, Object, ObjectKey};
use crate::framework::{Decider, Outcome, Profile};
use crate::gangs::Gangs;
use crate::k8s;
use crate::queue::{ClusterEvent, PendingStatus, QueueName, SchedulingQueue};
pub use crate::result::{CycleResult, Gated};
use crate::runtime::LoadError;
use crate::waiting::{WaitingPod, WaitingPods};
use kept::KeptObject;

mod gangs;
mod kept;
mod shadow;
pub use gangs::{GangMember, GangProgress};

/// How long a placement may wait for its binding to be confirmed.
pub const DEFAULT_ASSUME_TTL: Duration = Duration::from_secs(30);

/// Counters of the core, for metrics and tests.
#[derive(Debug, Default)]
pub struct ServiceStats {
    /// Events applied to the cache and the queue.
    pub events_applied: AtomicU64,
    /// Events refused (an object that cannot be read).
    pub events_invalid: AtomicU64,
    /// Objects a resync found different and repaired.
    pub resync_repairs: AtomicU64,
    /// Assumed placements whose binding was not confirmed in time.
    pub assumed_expired: AtomicU64,
    /// Bindings that failed.
    pub binds_failed: AtomicU64,
    /// Pods placed.
    pub scheduled: AtomicU64,
    /// Attempts that found no node.
    pub unschedulable: AtomicU64,
    /// Preemptions carried out (victims evicted, the pod nominated).
    pub preemptions: AtomicU64,
    /// Reserved pods that began to wait at Permit.
    pub permit_waits: AtomicU64,
    /// Waiting pods let go, and bound.
    pub permit_released: AtomicU64,
    /// Waiting pods whose wait ran out.
    pub permit_timeouts: AtomicU64,
    /// Waiting pods a plugin rejected.
    pub permit_rejections: AtomicU64,
    /// Milliseconds waited at Permit by the pods that stopped waiting (let go or rejected).
    pub permit_wait_millis: AtomicU64,
    /// Gangs whose quorum was reached: the member that brought its assigned pods to
    /// `minMember` passed Permit.
    pub gangs_admitted: AtomicU64,
    /// Members of PodGroups whose wait at Permit ran out.
    pub gangs_timed_out: AtomicU64,
    /// What the profiles' shadow policies found.
    pub shadows: crate::shadow::ShadowBoard,
}

struct Assumed {
    pod: sdk::Pod,
    node: String,
    /// When the assumption expires; `None` until the bind call returned.
    deadline: Option<Duration>,
    /// Scheduling attempts so far: a pod queued again backs off by them.
    attempts: u32,
}

/// Where a pod stands, as far as the scheduler knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodState {
    /// Waiting in the queue (or out of it, gated).
    Pending(PendingStatus),
    /// Placed by the scheduler, binding not yet confirmed.
    Assumed {
        /// The node.
        node: String,
    },
    /// Running on (bound to) a node.
    Bound {
        /// The node.
        node: String,
    },
}

/// The scheduling loop: events into the cache and the queue, a cycle per pod, Reserve, Permit
/// and the binding cycle.
pub struct Service {
    decider: Decider,
    queue: SchedulingQueue,
    pipeline: Arc<EventPipeline>,
    /// Where the binding cycle writes; `None` when the caller carries out each result.
    backend: Option<Box<dyn Backend + Send>>,
    clock: Arc<dyn Clock>,
    assume_ttl: Duration,
    assumed: HashMap<String, Assumed>,
    /// The last applied version of every object, for resync and for seeding shadows.
    objects: HashMap<ObjectKey, (u64, KeptObject)>,
    /// False for a service that never resyncs and has no shadow to seed: `objects` stays empty.
    keeps_objects: bool,
    explain: bool,
    /// Its counters.
    pub stats: Arc<ServiceStats>,
    binding_failures: BindingFailures,
    /// Pending pods of this scheduler whose spec cannot be read (a request that is not a
    /// quantity, say): reported by the next calls of [`Service::schedule_one`] as failed
    /// attempts, so their users see why they wait instead of a bare Pending.
    unreadable: std::collections::VecDeque<CycleResult>,
    /// Why each unreadable pod was reported, so a change that does not change that (its own
    /// condition written back) is not reported again.
    told_unreadable: HashMap<String, String>,
    /// Reserved pods Permit plugins hold back.
    waiting: WaitingPods,
    /// Results of waiting pods that were let go or timed out, carried out already, returned by
    /// the next calls of [`Service::schedule_one`].
    released: std::collections::VecDeque<CycleResult>,
    /// Pods a PreEnqueue plugin newly keeps out of the queue: reported by the next calls of
    /// [`Service::schedule_one`] (and their condition written), once per gating.
    newly_gated: std::collections::VecDeque<CycleResult>,
    /// The gated pods already reported, so the pod's own update (its condition written back)
    /// does not report it again.
    told_gated: std::collections::HashSet<String>,
    /// The PodGroups and their members.
    gangs: Gangs,
    /// The profiles' shadow policies.
    shadows: shadow::Shadows,
}

/// Where the caller of a deferred service (which binds after the cycle, on another thread) reports
/// how each binding went:
/// the scheduling thread forgets each such placement and queues the pod again with backoff at its
/// next cycle, without waiting for the assume TTL.
#[derive(Clone, Default)]
pub struct BindingFailures {
    failed: Arc<std::sync::Mutex<Vec<(String, String)>>>,
    completed: Arc<std::sync::Mutex<Vec<String>>>,
    pipeline: Arc<EventPipeline>,
}

impl BindingFailures {
    /// The binding of pod `key` failed because of `reason`.
    pub fn report(&self, key: String, reason: String) {
        self.failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((key, reason));
        self.pipeline.wake();
    }

    /// The binding of pod `key` was accepted: the assume TTL starts now.
    pub fn completed(&self, key: String) {
        self.completed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(key);
    }

    /// Records what the binding cycle of `pod` came to: a binding accepted starts its assume
    /// TTL, a refused one is reported for backoff, a condition that could not be written is
    /// only logged (the next cycle writes it again).
    pub fn record(&self, pod: &str, carried: &crate::binding::Carried) {
        use crate::binding::Carried;
        match carried {
            Carried::Bound => self.completed(pod.to_string()),
            Carried::BindingFailed(reason) => {
                tracing::warn!(%pod, %reason, "binding the pod failed");
                self.report(pod.to_string(), reason.clone());
            }
            Carried::ConditionFailed(reason) => {
                tracing::warn!(%pod, %reason, "writing the condition of the pod failed");
            }
            Carried::Recorded | Carried::Stale | Carried::Waiting | Carried::Gated => {}
        }
    }

    fn take(&self) -> Vec<(String, String)> {
        std::mem::take(&mut *self.failed.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn take_completed(&self) -> Vec<String> {
        std::mem::take(&mut *self.completed.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Service {
    /// A service that carries out each result through `backend` as soon as its cycle ends.
    pub fn new(decider: Decider, backend: Box<dyn Backend + Send>, clock: Arc<dyn Clock>) -> Self {
        let pipeline = Arc::new(EventPipeline::default());
        Self::with_pipeline(decider, Some(backend), clock, pipeline)
    }

    /// A service whose results the caller carries out ([`binding::carry_out`], on another
    /// thread), reporting each binding through [`Service::binding_failures`]: the assume TTL
    /// starts when the binding completed, so a slow API server does not expire placements still
    /// waiting to be sent.
    pub fn deferred(decider: Decider, clock: Arc<dyn Clock>) -> Self {
        let pipeline = Arc::new(EventPipeline::default());
        Self::with_pipeline(decider, None, clock, pipeline)
    }

    /// A service draining an existing pipeline (one its backend may also feed), carrying out
    /// results through `backend`, or leaving them to the caller with `None`.
    pub fn with_pipeline(
        decider: Decider,
        backend: Option<Box<dyn Backend + Send>>,
        clock: Arc<dyn Clock>,
        pipeline: Arc<EventPipeline>,
    ) -> Self {
        Service {
            binding_failures: BindingFailures {
                failed: Default::default(),
                completed: Default::default(),
                pipeline: pipeline.clone(),
            },
            decider,
            queue: SchedulingQueue::new(clock.clone()),
            pipeline,
            backend,
            clock,
            assume_ttl: DEFAULT_ASSUME_TTL,
            assumed: HashMap::new(),
            objects: HashMap::new(),
            keeps_objects: true,
            explain: false,
            stats: Arc::new(ServiceStats::default()),
            unreadable: Default::default(),
            told_unreadable: HashMap::new(),
            waiting: WaitingPods::default(),
            released: Default::default(),
            newly_gated: Default::default(),
            told_gated: Default::default(),
            gangs: Gangs::default(),
            shadows: shadow::Shadows::new(),
        }
    }

    /// A service that will never [`Service::resync`] and whose profiles will gain no shadow
    /// (`simulate`, whose configuration is fixed): it then keeps no copy of every object unless
    /// a shadow is there to be seeded from it. In a large cluster's dump that copy was the
    /// largest item of the host's heap.
    pub fn without_resync(mut self) -> Self {
        self.keeps_objects = self.decider.has_shadows();
        self
    }

    /// Sets how long a placement may wait for confirmation.
    pub fn with_assume_ttl(mut self, ttl: Duration) -> Self {
        self.assume_ttl = ttl;
        self
    }

    /// Where the caller of a [`Service::deferred`] service reports how each binding went.
    pub fn binding_failures(&self) -> BindingFailures {
        self.binding_failures.clone()
    }

    /// Makes every cycle report each examined node (for `simulate --explain`).
    pub fn with_explain(mut self, explain: bool) -> Self {
        self.explain = explain;
        self
    }

    /// The scheduler: its cache and profiles, to read.
    pub fn decider(&self) -> &Decider {
        &self.decider
    }

    /// Stops being a service: the scheduler, with the cache as the applied events left it.
    pub fn into_decider(self) -> Decider {
        self.decider
    }

    /// Brings every plugin instance up to date with the cluster before it is needed (see
    /// [`Decider::warm_up`]).
    ///
    /// # Errors
    /// The first plugin that failed, by name.
    pub fn warm_up(&mut self) -> Result<(), LoadError> {
        self.decider.warm_up()
    }

    /// Puts new profiles in place and returns the old ones (see [`Decider::swap_profiles`]).
    pub fn swap_profiles(&mut self, profiles: Vec<Profile>) -> Vec<Profile> {
        let old = self.decider.swap_profiles(profiles);
        self.shadows_swapped();
        // The new profiles' PreEnqueue plugins may let in pods the old ones kept out.
        self.enqueue_gated_again(|_| true);
        old
    }

    /// A ResourceClaim appeared or changed in `namespace`: pods of that namespace kept out of
    /// the queue that name claims are asked again, as kube-scheduler's DynamicResources queues a
    /// pod when the claim it waits for is created.
    fn claim_arrived(&mut self, namespace: &str) {
        self.enqueue_gated_again(|p| p.namespace == namespace && !p.claims.is_empty());
    }

    /// Runs PreEnqueue again for the pods kept out of the queue that `which` picks.
    fn enqueue_gated_again(&mut self, which: impl Fn(&sdk::Pod) -> bool) {
        let gated: Vec<sdk::Pod> = self
            .queue
            .pods()
            .filter(|p| which(p))
            .filter(|p| {
                self.queue
                    .status(&p.key())
                    .is_some_and(|s| s.queue == QueueName::Gated)
            })
            .cloned()
            .collect();
        for pod in gated {
            self.enqueue(pod);
        }
    }

    /// The pipeline producers submit events to.
    pub fn pipeline(&self) -> Arc<EventPipeline> {
        self.pipeline.clone()
    }

    /// Applies every waiting event. Returns how many were applied.
    pub fn apply_events(&mut self) -> usize {
        let mut count = 0;
        for event in self.pipeline.drain() {
            self.apply(event);
            count += 1;
        }
        self.shadows.flush();
        count
    }

    fn apply(&mut self, event: Event) {
        self.shadows.observe(&event);
        let key = event.object.key();
        let result = match event.action {
            Action::Upsert => self.apply_upsert(&event.object),
            Action::Delete => {
                self.apply_delete(&key);
                Ok(())
            }
        };
        match result {
            Ok(()) => {
                self.stats.events_applied.fetch_add(1, Ordering::Relaxed);
                if key.kind == Kind::Pod && !self.told_unreadable.is_empty() {
                    // Readable again, or gone: nothing left to report.
                    let pod = format!("{}/{}", key.namespace, key.name);
                    self.unreadable.retain(|r| r.pod != pod);
                    self.told_unreadable.remove(&pod);
                }
                match event.action {
                    Action::Upsert if self.keeps_objects => {
                        self.objects
                            .insert(key, (event.version, KeptObject::new(event.object)));
                    }
                    Action::Upsert => {}
                    Action::Delete => {
                        self.objects.remove(&key);
                    }
                }
            }
            Err(e) => {
                self.stats.events_invalid.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(kind = ?key.kind, namespace = %key.namespace, name = %key.name, "event ignored: {e}");
                if let Object::Pod(pod) = &event.object {
                    self.report_unreadable(format!("{}/{}", key.namespace, key.name), pod, &e);
                }
            }
        }
    }

    /// A pending pod of this scheduler that cannot be read is neither queued nor held; its
    /// failure is reported as an attempt's, with the field that is wrong.
    fn report_unreadable(&mut self, key: String, pod: &core::Pod, error: &k8s::FieldError) {
        self.forget_pod(&key);
        let spec = pod.spec.as_ref();
        let bound = spec
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty());
        let scheduler_name = spec
            .and_then(|s| s.scheduler_name.clone())
            .unwrap_or_else(|| crate::DEFAULT_SCHEDULER_NAME.to_string());
        if bound || k8s::is_terminated(pod) || !self.decider.serves(&scheduler_name) {
            return;
        }
        let message = format!("the pod cannot be read: {error}");
        if self.told_unreadable.get(&key) == Some(&message) {
            return;
        }
        self.told_unreadable.insert(key.clone(), message.clone());
        let mut result = CycleResult::attempt(key, scheduler_name, 1);
        result.outcome.error = true;
        result.outcome.message = Some(message);
        self.unreadable.retain(|r| r.pod != result.pod);
        self.unreadable.push_back(result);
    }

    /// A node added or changed: the queue hears whether the change could help pending pods.
    fn apply_node(&mut self, node: &core::Node) -> Result<(), k8s::FieldError> {
        let cache = self.decider.cache_mut();
        let info = k8s::node_info(node)?;
        let change = match cache.node_id(&info.name).and_then(|id| cache.node(id)) {
            None => ClusterEvent::NodeAdded,
            Some(old) => {
                let old = &old.info;
                if old.labels != info.labels
                    || old.taints != info.taints
                    || old.allocatable != info.allocatable
                    || old.unschedulable != info.unschedulable
                {
                    ClusterEvent::NodeChanged
                } else {
                    ClusterEvent::NodeChangedIrrelevant
                }
            }
        };
        cache.upsert_node(info);
        self.queue.on_event(change);
        Ok(())
    }

    /// A pod added or changed: bound (by us, confirming the assumption, or by someone else),
    /// finished, or pending (queued, with what it held released).
    fn apply_pod(&mut self, pod: &core::Pod) -> Result<(), k8s::FieldError> {
        let model = k8s::pod(pod)?;
        let key = model.key();
        if k8s::is_terminated(pod) {
            self.forget_pod(&key);
            return Ok(());
        }
        self.track_member(&model);
        let cache = self.decider.cache_mut();
        if !model.node_name.is_empty() {
            // Bound, by us (this confirms the assumption) or by someone else.
            self.assumed.remove(&key);
            cache.settle_volumes(&key);
            self.queue.delete(&key);
            cache.clear_nomination(&key);
            let arrived = cache.pod_node(&key) != Some(model.node_name.as_str());
            cache.add_pod(&model, &model.node_name);
            if arrived {
                self.queue.on_event(ClusterEvent::AssignedPodAdded);
            }
        } else if !self.assumed.contains_key(&key) {
            // Not bound (any more): whatever it held is released before it queues.
            if cache.remove_pod(&key) {
                self.queue.on_event(ClusterEvent::AssignedPodDeleted);
            }
            cache.nominate(&model);
            self.enqueue(model);
        }
        Ok(())
    }

    /// PreEnqueue, then the queue: a pod a PreEnqueue plugin turns away waits outside it
    /// (gated) until it changes; any other enters it, a gated one at once.
    fn enqueue(&mut self, pod: sdk::Pod) {
        let key = pod.key();
        let Some(gate) = self.decider.pre_enqueue(&pod) else {
            self.told_gated.remove(&key);
            self.queue.add(pod);
            self.sort_in_queue(&key);
            return;
        };
        // Reported once per gating: the pod's own update (its condition written back) asks again.
        if self.told_gated.insert(key.clone()) {
            let mut result = CycleResult::attempt(key, pod.scheduler_name.clone(), 0);
            result.outcome.message = Some(gate.message.clone());
            result.gated = Some(if pod.scheduling_gates.is_empty() {
                Gated::Plugin(gate.plugin)
            } else {
                Gated::SchedulingGates
            });
            self.newly_gated.push_back(result);
        }
        self.queue.gate(pod, gate.message);
    }

    fn apply_upsert(&mut self, object: &Object) -> Result<(), k8s::FieldError> {
        let cache = self.decider.cache_mut();
        match object {
            Object::Node(node) => self.apply_node(node)?,
            Object::Pod(pod) => self.apply_pod(pod)?,
            Object::PersistentVolume(pv) => {
                cache.upsert_volume((**pv).clone());
                self.queue.on_event(ClusterEvent::StorageChanged);
            }
            Object::PersistentVolumeClaim(pvc) => {
                cache.upsert_claim((**pvc).clone());
                self.queue.on_event(ClusterEvent::StorageChanged);
            }
            Object::StorageClass(class) => {
                cache.upsert_class((**class).clone());
                self.queue.on_event(ClusterEvent::StorageChanged);
            }
            Object::Service(_)
            | Object::ReplicationController(_)
            | Object::ReplicaSet(_)
            | Object::StatefulSet(_) => {
                cache.spread_selectors().upsert(object);
            }
            Object::PodDisruptionBudget(budget) => {
                cache.upsert_budget(k8s::disruption_budget(budget));
            }
            Object::CSINode(csi_node) => {
                let (name, csi_node) = k8s::csi_node(csi_node);
                cache.upsert_csi_node(&name, csi_node);
                self.queue.on_event(ClusterEvent::NodeChanged);
            }
            Object::CSIDriver(driver) => {
                let (name, tracked) = k8s::csi_driver(driver);
                cache.upsert_csi_driver(&name, tracked);
                self.queue.on_event(ClusterEvent::StorageChanged);
            }
            Object::CSIStorageCapacity(capacity) => {
                let meta = &capacity.metadata;
                let key = (
                    meta.namespace.clone().unwrap_or_else(|| "default".into()),
                    meta.name.clone().unwrap_or_default(),
                );
                let (class, offered) = k8s::storage_capacity(capacity);
                cache.upsert_storage_capacity(key, class, offered);
                self.queue.on_event(ClusterEvent::StorageChanged);
            }
            Object::DeviceClass(class) => {
                let name = class.metadata.name.as_deref().unwrap_or_default();
                cache.upsert_device_class(name, k8s::devices::device_class_selectors(class));
                self.queue.on_event(ClusterEvent::DevicesChanged);
            }
            Object::ResourceSlice(slice) => {
                let name = slice.metadata.name.as_deref().unwrap_or_default();
                cache.upsert_resource_slice(name, k8s::devices::resource_slice(slice));
                self.queue.on_event(ClusterEvent::DevicesChanged);
            }
            Object::ResourceClaim(claim) => {
                let meta = &claim.metadata;
                let namespace = meta.namespace.as_deref().unwrap_or("default");
                let name = meta.name.as_deref().unwrap_or_default();
                let change = cache.upsert_resource_claim(
                    namespace,
                    name,
                    k8s::devices::resource_claim(claim),
                );
                if change.freed {
                    self.queue.on_event(ClusterEvent::DevicesChanged);
                } else {
                    self.queue.on_claim_changed(namespace, name);
                }
                if change.created {
                    self.claim_arrived(namespace);
                }
            }
            // Kubernetes' resourceclaim controller makes claims from templates; the cache needs
            // only the claims.
            Object::ResourceClaimTemplate(_) => {}
            Object::PodGroup(group) => self.apply_pod_group(group)?,
            Object::Workload(workload) => self.apply_workload(workload),
            Object::Namespace(namespace) => {
                let name = namespace.metadata.name.as_deref().unwrap_or_default();
                let labels = namespace.metadata.labels.iter().flatten();
                let labels = labels.map(|(k, v)| (k.clone(), v.clone())).collect();
                if cache.namespace_labels(name) != Some(&labels) {
                    cache.upsert_namespace(name, labels);
                    self.queue.on_event(ClusterEvent::NamespaceChanged);
                }
            }
        }
        Ok(())
    }

    fn forget_pod(&mut self, key: &str) {
        self.told_gated.remove(key);
        self.newly_gated.retain(|r| r.pod != key);
        if let Some(waiting) = self.waiting.remove(key) {
            let mut pod = waiting.pod;
            self.resolve_group(&mut pod);
            let rejected = self.decider.unreserve_plugins(&pod, &waiting.node);
            self.reject_waiting(rejected);
        }
        self.forget_member(key);
        if self.assumed.remove(key).is_some() {
            self.decider.cache_mut().unreserve_volumes(key);
            self.decider.cache_mut().unreserve_claims(key);
        }
        self.queue.delete(key);
        self.decider.cache_mut().clear_nomination(key);
        if self.decider.cache_mut().remove_pod(key) {
            self.queue.on_event(ClusterEvent::AssignedPodDeleted);
        }
    }

    fn apply_delete(&mut self, key: &ObjectKey) {
        let cache = self.decider.cache_mut();
        match key.kind {
            Kind::Node => {
                if cache.remove_node(&key.name) {
                    self.queue.on_event(ClusterEvent::NodeDeleted);
                }
            }
            Kind::Pod => self.forget_pod(&format!("{}/{}", key.namespace, key.name)),
            Kind::PersistentVolume => {
                cache.remove_volume(&key.name);
                self.queue.on_event(ClusterEvent::StorageChanged);
            }
            Kind::PersistentVolumeClaim => {
                cache.remove_claim(&key.namespace, &key.name);
                self.queue.on_event(ClusterEvent::StorageChanged);
            }
            Kind::StorageClass => {
                cache.remove_class(&key.name);
                self.queue.on_event(ClusterEvent::StorageChanged);
            }
            Kind::Namespace => {
                if cache.remove_namespace(&key.name) {
                    self.queue.on_event(ClusterEvent::NamespaceChanged);
                }
            }
            Kind::Service | Kind::ReplicationController | Kind::ReplicaSet | Kind::StatefulSet => {
                cache.spread_selectors().remove(key);
            }
            Kind::PodDisruptionBudget => {
                cache.remove_budget(&key.namespace, &key.name);
            }
            Kind::CSINode => {
                cache.remove_csi_node(&key.name);
            }
            Kind::CSIDriver => {
                cache.remove_csi_driver(&key.name);
                self.queue.on_event(ClusterEvent::StorageChanged);
            }
            Kind::CSIStorageCapacity => {
                cache.remove_storage_capacity(&key.namespace, &key.name);
                self.queue.on_event(ClusterEvent::StorageChanged);
            }
            Kind::DeviceClass => {
                cache.remove_device_class(&key.name);
                self.queue.on_event(ClusterEvent::DevicesChanged);
            }
            Kind::ResourceSlice => {
                cache.remove_resource_slice(&key.name);
                self.queue.on_event(ClusterEvent::DevicesChanged);
            }
            Kind::ResourceClaim => {
                if cache.remove_resource_claim(&key.namespace, &key.name) {
                    self.queue.on_event(ClusterEvent::DevicesChanged);
                }
            }
            Kind::ResourceClaimTemplate => {}
            Kind::PodGroup => {
                let full_name = format!("{}/{}", key.namespace, key.name);
                self.gangs.remove_group(&full_name);
                self.wake_group(&full_name);
            }
            Kind::Workload => self.remove_workload(&key.namespace, &key.name),
        }
    }

    /// Compares the cache with a full list of the objects that exist (the source of truth),
    /// applies what differs or is missing, deletes what no longer exists, and returns how many
    /// objects it repaired.
    pub fn resync(&mut self, truth: Vec<Object>) -> usize {
        debug_assert!(
            self.keeps_objects,
            "a service built without_resync resynced"
        );
        self.apply_events();
        let mut repairs = 0;
        let mut seen = std::collections::HashSet::new();
        for object in truth {
            let key = object.key();
            seen.insert(key.clone());
            let same = self
                .objects
                .get(&key)
                .is_some_and(|(_, known)| known.is(&object));
            if !same {
                let version = object
                    .resource_version()
                    .or_else(|| self.objects.get(&key).map(|(v, _)| v + 1))
                    .unwrap_or(0);
                repairs += 1;
                self.apply(Event::with_version(Action::Upsert, object, version));
            }
        }
        let gone: Vec<(ObjectKey, Object)> = self
            .objects
            .iter()
            .filter(|(k, _)| !seen.contains(*k))
            .map(|(k, (_, o))| (k.clone(), o.object()))
            .collect();
        for (_, object) in gone {
            repairs += 1;
            self.apply(Event::with_version(Action::Delete, object, u64::MAX));
        }
        self.stats
            .resync_repairs
            .fetch_add(repairs as u64, Ordering::Relaxed);
        if repairs > 0 {
            tracing::info!(repairs, "resync repaired drift");
        }
        repairs
    }

    /// Frees the nodes of placements whose binding was not confirmed in time and requeues their
    /// pods. Returns how many expired.
    pub fn expire_assumed(&mut self) -> usize {
        let now = self.clock.now();
        let expired: Vec<String> = self
            .assumed
            .iter()
            .filter(|(_, a)| a.deadline.is_some_and(|d| d <= now))
            .map(|(k, _)| k.clone())
            .collect();
        for key in &expired {
            tracing::warn!(pod = %key, "binding not confirmed in time; the pod is scheduled again");
            self.stats.assumed_expired.fetch_add(1, Ordering::Relaxed);
            let ttl = self.assume_ttl.as_secs();
            self.undo_assumption(key, |node| {
                format!("binding to {node} was not confirmed within {ttl}s")
            });
        }
        expired.len()
    }

    /// Undoes the placements whose binding was reported failed, and queues their pods
    /// again (after their backoff). Returns how many.
    fn forget_failed_bindings(&mut self) -> usize {
        let deadline = self.clock.now() + self.assume_ttl;
        for key in self.binding_failures.take_completed() {
            if let Some(assumed) = self.assumed.get_mut(&key) {
                assumed.deadline.get_or_insert(deadline);
            }
        }
        let failed = self.binding_failures.take();
        let mut undone = 0;
        for (key, reason) in failed {
            if !self.assumed.contains_key(&key) {
                // Confirmed, deleted or expired meanwhile: nothing is held for it.
                continue;
            }
            tracing::warn!(pod = %key, %reason, "binding failed; the pod is scheduled again");
            self.stats.binds_failed.fetch_add(1, Ordering::Relaxed);
            self.undo_assumption(&key, |node| format!("binding to {node} failed: {reason}"));
            undone += 1;
        }
        undone
    }

    /// Frees the node of pod `key`'s assumed placement and queues the pod again with the message
    /// `why` gives for its node.
    fn undo_assumption(&mut self, key: &str, why: impl FnOnce(&str) -> String) {
        let Some(assumed) = self.assumed.remove(key) else {
            return;
        };
        if self.unreserve(&assumed.pod, &assumed.node) {
            self.queue.on_event(ClusterEvent::AssignedPodDeleted);
        }
        let message = why(&assumed.node);
        self.queue.requeue(assumed.pod, assumed.attempts, message);
    }

    /// Applies waiting events, expires stale assumptions, then schedules the next pod, if any is
    /// ready, and (with a backend of its own) carries out the result.
    pub fn schedule_one(&mut self) -> Option<CycleResult> {
        self.apply_events();
        self.start_shadows();
        self.expire_assumed();
        self.forget_failed_bindings();
        self.expire_waiting();
        if let Some(released) = self.released.pop_front() {
            return Some(released);
        }
        if let Some(unreadable) = self.unreadable.pop_front() {
            self.write(&unreadable);
            return Some(unreadable);
        }
        if let Some(gated) = self.newly_gated.pop_front() {
            self.write(&gated);
            return Some(gated);
        }
        let mut pod = self.queue.pop()?;
        if k8s::podgroup::is_grouped(&pod) {
            self.resolve_group(&mut pod);
        }
        let key = pod.key();
        let attempts = self.queue.status(&key).map_or(1, |s| s.attempts);
        let mut result = CycleResult::attempt(key.clone(), pod.scheduler_name.clone(), attempts);
        let shadow_search = self.shadow_search(&pod);
        let Some(mut outcome) = self.decider.schedule(&pod, self.explain) else {
            // No profile for its scheduler name: another scheduler's pod.
            self.queue.delete(&key);
            result.no_profile = true;
            result.outcome.message = Some(format!(
                "no profile for schedulerName {:?}; kube-scheduler would leave this pod to that scheduler",
                pod.scheduler_name
            ));
            return Some(result);
        };
        if let Some(search) = shadow_search {
            self.shadow_cycle(&pod, search, &outcome);
        }
        let chosen = outcome.node.take();
        result.outcome = outcome;
        match chosen {
            Some(node) => {
                self.reserve(&pod, &node, &mut result);
                if self.permit(&pod, &node, &mut result) {
                    self.bind(pod, node, &mut result);
                }
            }
            None => {
                result.outcome.message.get_or_insert_default();
                if pod.group.is_some() {
                    self.gang_preemption(&pod, &mut result);
                }
                self.post_filter(&pod, &mut result);
                self.not_placed(&pod, &result);
                self.write(&result);
            }
        }
        Some(result)
    }

    /// Holds what a pod placed nowhere leaves behind: the nomination its preemption chose (at
    /// once, as kube-scheduler's nominator does: the next pod's cycle must see this one on its
    /// node, not the victims' room free, although neither the nomination nor the evictions came
    /// back yet), or none; and queues it as unschedulable or failed.
    fn not_placed(&mut self, pod: &sdk::Pod, result: &CycleResult) {
        let key = &result.pod;
        if result.outcome.clears_nomination {
            // It no longer holds room on that node for pods of lower priority, nor tries it
            // first.
            self.decider.cache_mut().clear_nomination(key);
            self.queue.set_nomination(key, "");
        }
        if let Some(preemption) = &result.outcome.preemption {
            self.nominate(pod, &preemption.node);
        }
        let message = result.outcome.message.clone().unwrap_or_default();
        if result.outcome.error {
            self.queue.failed(key, message);
        } else {
            self.stats.unschedulable.fetch_add(1, Ordering::Relaxed);
            self.queue.unschedulable(key, message);
        }
    }

    /// Nominates `pod` to `node`, which its preemption frees: counted, held in the cache against
    /// pods it outranks, and tried first when the pod is next popped.
    fn nominate(&mut self, pod: &sdk::Pod, node: &str) {
        self.stats.preemptions.fetch_add(1, Ordering::Relaxed);
        self.shadows.nominate(pod, node);
        let mut nominated = pod.clone();
        nominated.nominated_node_name = node.to_string();
        self.decider.cache_mut().nominate(&nominated);
        self.queue.set_nomination(&nominated.key(), node);
    }

    /// Makes the writes of a pod placed nowhere, when the service has a backend of its own; a
    /// condition that could not be written is only logged.
    fn write(&mut self, result: &CycleResult) {
        if let Some(backend) = self.backend.as_mut() {
            if let Carried::ConditionFailed(e) = binding::carry_out(backend.as_mut(), result) {
                tracing::warn!(pod = %result.pod, "writing the condition of the pod failed: {e}");
            }
        }
    }

    /// Reserve: holds `pod`'s requests on `node` and the volumes VolumeBinding chose for it
    /// there, until its binding is confirmed or undone.
    fn reserve(&mut self, pod: &sdk::Pod, node: &str, result: &mut CycleResult) {
        let outcome = &result.outcome;
        let (volumes, claims) = (&outcome.volumes, &outcome.claims);
        result.outcome.claim_writes = self.hold(pod, node, volumes, claims, None, result.attempts);
        result.outcome.node = Some(node.to_string());
    }

    /// Holds `pod`'s requests on `node`, with the volumes and devices chosen for it there, as an
    /// assumed placement expiring at `deadline` (`None`: not before its binding returns). Returns
    /// what DynamicResources' PreBind is to write into the pod's claims.
    fn hold(
        &mut self,
        pod: &sdk::Pod,
        node: &str,
        volumes: &PodVolumes,
        claims: &[sdk::ClaimAllocation],
        deadline: Option<Duration>,
        attempts: u32,
    ) -> Vec<crate::result::ClaimWrite> {
        let key = pod.key();
        self.decider.assume(pod, node);
        if !volumes.is_empty() {
            self.decider.cache_mut().reserve_volumes(pod, node, volumes);
        }
        let claim_writes = if pod.claims.is_empty() {
            Vec::new()
        } else {
            self.decider.cache_mut().reserve_claims(pod, node, claims)
        };
        self.decider.cache_mut().clear_nomination(&key);
        self.queue.done(&key);
        let held = Assumed {
            pod: pod.clone(),
            node: node.to_string(),
            deadline,
            attempts,
        };
        self.assumed.insert(key, held);
        claim_writes
    }

    /// The binding cycle of a reserved pod, when the service has a backend of its own (else the
    /// caller runs it and reports back): a binding refused is unreserved at once and the pod
    /// retried after backoff.
    fn bind(&mut self, pod: sdk::Pod, node: String, result: &mut CycleResult) {
        let key = result.pod.clone();
        let carried = match self.backend.as_mut() {
            Some(backend) => binding::carry_out(backend.as_mut(), result),
            None => {
                self.stats.scheduled.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        match carried {
            Carried::BindingFailed(e) => {
                self.assumed.remove(&key);
                self.unreserve(&pod, &node);
                self.stats.binds_failed.fetch_add(1, Ordering::Relaxed);
                let message = format!("binding to {node} failed: {e}");
                self.queue.requeue(pod, result.attempts, message.clone());
                result.outcome.node = None;
                result.outcome.choice = None;
                result.outcome.message = Some(message);
                result.outcome.error = true;
            }
            _ => {
                let deadline = self.clock.now() + self.assume_ttl;
                if let Some(a) = self.assumed.get_mut(&key) {
                    a.deadline = Some(deadline);
                }
                self.stats.scheduled.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Unreserve: releases what Reserve held for `pod` on `node` (its requests on the node and
    /// its volumes) and tells the Permit plugins. True when the pod's requests were still held.
    fn unreserve(&mut self, pod: &sdk::Pod, node: &str) -> bool {
        let key = pod.key();
        self.decider.cache_mut().unreserve_volumes(&key);
        self.decider.cache_mut().unreserve_claims(&key);
        let mut pod = pod.clone();
        self.resolve_group(&mut pod);
        let rejected = self.decider.unreserve_plugins(&pod, node);
        let held = self.decider.forget(&key);
        self.shadows.forget(&pod);
        // The rest of a gang goes after the pod's own reservation is released.
        self.reject_waiting(rejected);
        held
    }

    /// Permit: true when the reserved pod may be bound now. A pod the plugins hold back waits,
    /// reserved, in the waiting pods (its result says where it waits); a rejected one is
    /// unreserved and retried after backoff, its result carrying why. The waiting pods the
    /// plugins let go are released either way.
    fn permit(&mut self, pod: &sdk::Pod, node: &str, result: &mut CycleResult) -> bool {
        let mut grouped;
        let asked = if k8s::podgroup::is_grouped(pod) {
            grouped = pod.clone();
            self.resolve_group(&mut grouped);
            &grouped
        } else {
            pod
        };
        let outcome = self.decider.permit(asked, node);
        for (plugin, key) in &outcome.allowed {
            self.release(plugin, key);
        }
        self.reject_waiting(outcome.rejected_waiting);
        if let Some(rejection) = outcome.rejected {
            self.reject_reserved(pod, node, result, rejection.message, rejection.error);
            self.write(result);
            return false;
        }
        if outcome.waits.is_empty() {
            let quorum = asked.group.as_ref().is_some_and(|g| {
                g.found && g.assigned < g.min_member && g.assigned + 1 >= g.min_member
            });
            if quorum {
                self.stats.gangs_admitted.fetch_add(1, Ordering::Relaxed);
            }
            return true;
        }
        self.stats.permit_waits.fetch_add(1, Ordering::Relaxed);
        let now = self.clock.now();
        let waits = outcome.waits.into_iter();
        let waits: Vec<_> = waits.map(|(p, t)| (p, now + t, t)).collect();
        self.waiting.insert(WaitingPod {
            pod: pod.clone(),
            node: node.to_string(),
            result: result.clone(),
            waits: waits.clone(),
            since: now,
        });
        result.waiting_on = waits.into_iter().map(|(p, _, _)| p).collect();
        let mut message = format!(
            "waiting on node {node} for Permit plugin(s) {}",
            result.waiting_on.join(", ")
        );
        if let Some(group) = &asked.group {
            message.push_str(&format!(
                " (PodGroup {}: {} of minMember {} assigned)",
                group.full_name,
                group.assigned + 1,
                group.min_member
            ));
        }
        result.outcome.message = Some(message);
        // As coscheduling asks: only the first member to wait wakes the others.
        if asked.group.as_ref().is_some_and(|g| g.assigned == 0) {
            self.activate_siblings(pod);
        }
        result.outcome.node = None;
        result.outcome.choice = None;
        false
    }

    /// Plugin `plugin` lets the waiting pod `key` go: once no plugin holds it, its binding cycle
    /// runs and its result is returned by the next call of [`Service::schedule_one`].
    fn release(&mut self, plugin: &str, key: &str) {
        let Some(waiting) = self.waiting.allow(plugin, key) else {
            return;
        };
        self.stats.permit_released.fetch_add(1, Ordering::Relaxed);
        self.count_wait(waiting.since);
        let mut result = waiting.result;
        self.bind(waiting.pod, waiting.node, &mut result);
        self.released.push_back(result);
    }

    /// Adds the wait of a pod that began waiting at `since` and stops now.
    fn count_wait(&self, since: Duration) {
        let waited = self.clock.now().saturating_sub(since).as_millis();
        let waited = u64::try_from(waited).unwrap_or(u64::MAX);
        self.stats
            .permit_wait_millis
            .fetch_add(waited, Ordering::Relaxed);
    }

    /// Rejects the waiting pods whose wait at a plugin ran out, as kube-scheduler's waiting pods
    /// time out: each is unreserved and retried after backoff.
    fn expire_waiting(&mut self) {
        for (waiting, plugin, waited) in self.waiting.expired(self.clock.now()) {
            self.stats.permit_timeouts.fetch_add(1, Ordering::Relaxed);
            if k8s::podgroup::is_grouped(&waiting.pod) {
                self.stats.gangs_timed_out.fetch_add(1, Ordering::Relaxed);
            }
            self.count_wait(waiting.since);
            let message = format!(
                "rejected due to timeout after waiting {}s at plugin {plugin}",
                waited.as_secs()
            );
            let mut result = waiting.result;
            self.reject_reserved(&waiting.pod, &waiting.node, &mut result, message, false);
            self.write(&result);
            self.released.push_back(result);
        }
    }

    /// Undoes the reservation of `pod` on `node` that Permit refused, and queues it again with
    /// backoff; `result` says why.
    fn reject_reserved(
        &mut self,
        pod: &sdk::Pod,
        node: &str,
        result: &mut CycleResult,
        message: String,
        error: bool,
    ) {
        self.assumed.remove(&result.pod);
        if self.unreserve(pod, node) {
            self.queue.on_event(ClusterEvent::AssignedPodDeleted);
        }
        self.queue
            .requeue(pod.clone(), result.attempts, message.clone());
        if !error {
            self.stats.unschedulable.fetch_add(1, Ordering::Relaxed);
        }
        result.outcome.node = None;
        result.outcome.choice = None;
        result.outcome.volumes = PodVolumes::default();
        result.outcome.claims = Vec::new();
        result.outcome.claim_writes = Vec::new();
        result.outcome.error = error;
        result.outcome.message = Some(message);
    }

    /// The reserved pods Permit plugins hold back.
    pub fn waiting(&self) -> &WaitingPods {
        &self.waiting
    }

    /// Schedules until no pod is ready; returns every cycle's result.
    pub fn run_until_idle(&mut self) -> Vec<CycleResult> {
        std::iter::from_fn(|| self.schedule_one()).collect()
    }

    /// Rejects the waiting pods whose wait ran out by now and returns their results (and those
    /// of any pod already let go), without scheduling any pod.
    pub fn release_expired(&mut self) -> Vec<CycleResult> {
        self.expire_waiting();
        self.released.drain(..).collect()
    }

    /// Where a pod stands: pending (with its last FitError message and attempts), assumed, or
    /// bound. `None` for a pod the scheduler does not know.
    pub fn pod_state(&self, key: &str) -> Option<PodState> {
        if let Some(status) = self.queue.status(key) {
            return Some(PodState::Pending(status));
        }
        if let Some(a) = self.assumed.get(key) {
            return Some(PodState::Assumed {
                node: a.node.clone(),
            });
        }
        self.decider
            .cache()
            .pod_node(key)
            .map(|node| PodState::Bound {
                node: node.to_string(),
            })
    }

    /// Why the pending pod `key` waits: its queue, attempts and last message, and what a cycle
    /// would decide for it now against the current cache, with every node's verdict and scores
    /// (`simulate --explain`'s answer). Nothing changes: the pod keeps its place, attempts and
    /// backoff, and later cycles run as they would have.
    ///
    /// # Errors
    /// The pod is not pending (unknown, assumed or bound), or no profile schedules it.
    pub fn explain(&mut self, key: &str) -> Result<Explanation, ExplainError> {
        self.apply_events();
        let Some(status) = self.queue.status(key) else {
            return Err(match self.pod_state(key) {
                Some(PodState::Assumed { node } | PodState::Bound { node }) => {
                    ExplainError::Placed { node }
                }
                _ => ExplainError::Unknown,
            });
        };
        let pod = self
            .queue
            .pod(key)
            .expect("a queued pod has an entry")
            .clone();
        match self.decider.explain(&pod) {
            Some(outcome) => Ok(Explanation { status, outcome }),
            None => Err(ExplainError::NoProfile {
                scheduler_name: pod.scheduler_name,
            }),
        }
    }

    /// The pending pods.
    pub fn queue(&self) -> &SchedulingQueue {
        &self.queue
    }

    /// Pending pods per queue: (active, backoff, unschedulable).
    pub fn queue_lengths(&self) -> (usize, usize, usize) {
        self.queue.lengths()
    }
}

/// [`Service::explain`]'s answer.
#[derive(Debug, Clone)]
pub struct Explanation {
    /// Where the pod waits and why.
    pub status: PendingStatus,
    /// What a cycle would decide for it now, every examined node explained.
    pub outcome: Outcome,
}

/// Why [`Service::explain`] has no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExplainError {
    /// The scheduler does not know the pod.
    Unknown,
    /// The pod is placed (assumed or bound) on `node`.
    Placed {
        /// The node.
        node: String,
    },
    /// No profile has the pod's scheduler name: another scheduler's pod.
    NoProfile {
        /// The pod's `spec.schedulerName`.
        scheduler_name: String,
    },
    /// The asked replica does not schedule (yet): a standby, or one still listing the cluster.
    NotScheduling,
}

impl std::fmt::Display for ExplainError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExplainError::Unknown => write!(f, "the scheduler has no pending pod of that name"),
            ExplainError::Placed { node } => {
                write!(f, "the pod is placed on node {node:?}, not pending")
            }
            ExplainError::NoProfile { scheduler_name } => write!(
                f,
                "no profile has schedulerName {scheduler_name:?}: the pod is left to that scheduler"
            ),
            ExplainError::NotScheduling => write!(
                f,
                "this replica is not scheduling (a standby, or still listing the cluster): ask the leader"
            ),
        }
    }
}

/// A convenience for feeding objects without `resourceVersion`s: versions from a counter.
#[derive(Default)]
pub struct Sequencer(AtomicU64);

impl Sequencer {
    /// The upsert of `object`, at the next version.
    pub fn upsert(&self, object: Object) -> Event {
        Event::with_version(
            Action::Upsert,
            object,
            self.0.fetch_add(1, Ordering::Relaxed) + 1,
        )
    }

    /// The deletion of `object`, at the next version.
    pub fn delete(&self, object: Object) -> Event {
        Event::with_version(
            Action::Delete,
            object,
            self.0.fetch_add(1, Ordering::Relaxed) + 1,
        )
    }
}

/// The pod object a binding confirmation carries: the pod with `spec.nodeName` set.
pub fn bound_pod(pod: &core::Pod, node: &str) -> core::Pod {
    let mut bound = pod.clone();
    bound.spec.get_or_insert_with(Default::default).node_name = Some(node.to_string());
    bound
}
