//! The binding cycle's writes through the API server ([`ApiSink`], [`ApiBackend`]): bindings,
//! VolumeBinding's PreBind, evictions and conditions.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::resource::v1::ResourceClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use wasched_core::binding::{self, AsyncBackend};
use wasched_core::cache::PodVolumes;
use wasched_core::framework::Victim;
use wasched_core::k8s;
use wasched_core::service::{BindingFailures, CycleResult};

use super::events::{now_rfc3339, Recorder};
use super::rate::RateLimiter;
use crate::engine::{watch_event, ApiWrite, EngineMetrics, ResultSink};
use crate::lenient::Lenient;

/// Writes cycle results to the API server: `POST pods/{name}/binding` for a placement, the
/// `PodScheduled=False` condition for a pod no node fits, and the `Scheduled` /
/// `FailedScheduling` Events users read with `kubectl describe pod`. Each result is written by a
/// task of its own, as kube-scheduler binds each pod in a goroutine: a slow response holds up
/// only its own pod. At most `burst` writes are in flight (the status writer waits for a free
/// slot), and requests keep to the client's QPS.
pub struct ApiSink {
    client: Client,
    /// Where refused bindings go, so the pod is queued again at once.
    failures: BindingFailures,
    recorder: Arc<Recorder>,
    runtime: tokio::runtime::Handle,
    in_flight: Arc<tokio::sync::Semaphore>,
    burst: u32,
    rate: Arc<RateLimiter>,
    /// The Events' own QPS, as kube-scheduler's event recorder has a client of its own: a burst
    /// of Events never holds up a binding.
    event_rate: Arc<RateLimiter>,
    /// Numbers the `/v1/watch` events (the API server's own versions are per object); held
    /// while publishing, so the watch log stays in order.
    sequence: Arc<std::sync::Mutex<u64>>,
}

impl ApiSink {
    /// A sink writing through `client` on `runtime`, keeping to `qps` and `burst`.
    pub fn new(
        client: Client,
        failures: BindingFailures,
        recorder: Arc<Recorder>,
        runtime: tokio::runtime::Handle,
        qps: f64,
        burst: u32,
    ) -> Self {
        ApiSink {
            client,
            failures,
            recorder,
            runtime,
            in_flight: Arc::new(tokio::sync::Semaphore::new(burst as usize)),
            burst,
            rate: Arc::new(RateLimiter::new(qps, burst)),
            event_rate: Arc::new(RateLimiter::new(qps, burst)),
            sequence: Default::default(),
        }
    }
}

impl ApiSink {
    /// The limiter of the bindings' client, which other writes of the scheduler share.
    pub fn rate(&self) -> Arc<RateLimiter> {
        self.rate.clone()
    }
}

impl ResultSink for ApiSink {
    fn record(
        &mut self,
        batch: Vec<CycleResult>,
        watch: &Arc<crate::watch::WatchLog>,
        metrics: &Arc<EngineMetrics>,
    ) {
        metrics.status_write_batches.fetch_add(1, Ordering::Relaxed);
        for result in batch {
            let Ok(slot) = self
                .runtime
                .block_on(self.in_flight.clone().acquire_owned())
            else {
                return;
            };
            let mut backend = ApiBackend {
                client: self.client.clone(),
                recorder: self.recorder.clone(),
                rate: self.rate.clone(),
                event_rate: self.event_rate.clone(),
                metrics: metrics.clone(),
            };
            let (failures, sequence, watch) =
                (self.failures.clone(), self.sequence.clone(), watch.clone());
            // Each pod's writes are a task of their own: a slow answer holds up only its own
            // pod, as kube-scheduler's binding goroutines. A task, not a thread: with hundreds in
            // flight, a blocked thread each cost more CPU in wake-ups than the requests did.
            self.runtime.spawn(async move {
                let carried = binding::carry_out_async(&mut backend, &result).await;
                failures.record(&result.pod, &carried);
                if carried.applied() {
                    backend.record_events(&result);
                    backend
                        .metrics
                        .status_writes
                        .fetch_add(1, Ordering::Relaxed);
                    let mut sequence = sequence.lock().unwrap_or_else(|e| e.into_inner());
                    *sequence += 1;
                    watch.publish([watch_event(result, *sequence)]);
                }
                drop(slot);
            });
        }
    }
}

impl Drop for ApiSink {
    /// Waits (up to 10 s) for the writes in flight when the server stops.
    fn drop(&mut self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while self.in_flight.available_permits() < self.burst as usize
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

/// The binding cycle's writes through the API server, each kept to the client's QPS and bounded
/// by [`REQUEST_TIMEOUT`]; a refused write is counted in `wasched_api_write_failures_total`.
/// Runs on the async runtime.
struct ApiBackend {
    client: Client,
    recorder: Arc<Recorder>,
    rate: Arc<RateLimiter>,
    event_rate: Arc<RateLimiter>,
    metrics: Arc<EngineMetrics>,
}

impl ApiBackend {
    fn pods(&self, namespace: &str) -> Api<Lenient<core::Pod>> {
        // The answers are read leniently: a pod that does not decode is still told why it waits.
        Api::namespaced(self.client.clone(), namespace)
    }

    fn refused(&self, write: ApiWrite, e: impl std::fmt::Display) -> String {
        self.metrics.api_write_failures.count(write);
        e.to_string()
    }

    /// The `Scheduled` / `FailedScheduling` Event of a result that was written, recorded in
    /// the background as kube-scheduler's event broadcaster does: the pod's write slot is free
    /// at once.
    fn record_events(&self, result: &CycleResult) {
        let (recorder, client, rate, metrics) = (
            self.recorder.clone(),
            self.client.clone(),
            self.event_rate.clone(),
            self.metrics.clone(),
        );
        let result = result.clone();
        tokio::spawn(async move {
            let refused = &metrics.api_write_failures;
            recorder.record(&client, &rate, &result, refused).await;
        });
    }
}

impl AsyncBackend for ApiBackend {
    async fn bind_volumes(&mut self, result: &CycleResult, node: &str) -> Result<(), String> {
        let bound = bind_volumes(&self.client, &self.rate, result, node, BIND_TIMEOUT).await;
        bound.map_err(|e| self.refused(ApiWrite::VolumeBinding, format!("binding volumes: {e}")))
    }

    async fn bind_claims(&mut self, result: &CycleResult) -> Result<(), String> {
        let written = write_claims(&self.client, &self.rate, result, ClaimChange::Reserve).await;
        written.map_err(|e| self.refused(ApiWrite::ClaimAllocation, e))
    }

    async fn unbind_claims(&mut self, result: &CycleResult) -> Result<(), String> {
        let written = write_claims(&self.client, &self.rate, result, ClaimChange::Unreserve).await;
        written.map_err(|e| self.refused(ApiWrite::ClaimAllocation, e))
    }

    async fn bind(&mut self, result: &CycleResult, node: &str) -> Result<(), String> {
        let (namespace, name) = result.pod.split_once('/').unwrap_or(("", &result.pod));
        let binding = core::Binding {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(namespace.to_string()),
                ..Default::default()
            },
            target: core::ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(node.to_string()),
                ..Default::default()
            },
        };
        self.recorder.forget_condition(&result.pod);
        let pods = self.pods(namespace);
        self.rate.acquire().await;
        let bound = bounded(pods.create_subresource::<_, serde::de::IgnoredAny>(
            "binding",
            name,
            &PostParams::default(),
            &binding,
        ))
        .await;
        bound
            .map(|_| ())
            .map_err(|e| self.refused(ApiWrite::Binding, e))
    }

    /// kube-scheduler's eviction of a preemption victim: the condition `DisruptionTarget`
    /// (reason `PreemptionByScheduler`), then the deletion. A victim already gone is fine.
    async fn evict(&mut self, result: &CycleResult, victim: &Victim) -> Result<(), String> {
        let Some((namespace, name)) = victim.pod.split_once('/') else {
            return Ok(());
        };
        let pods: Api<core::Pod> = Api::namespaced(self.client.clone(), namespace);
        let condition = serde_json::json!({"status": {"conditions": [{
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": format!("{}: preempting to accommodate a higher priority pod", result.scheduler_name),
            "lastTransitionTime": now_rfc3339(),
        }]}});
        let deleted = async {
            self.rate.acquire().await;
            let patch = Patch::Strategic(condition);
            bounded(pods.patch_status(name, &PatchParams::default(), &patch)).await?;
            self.rate.acquire().await;
            bounded(pods.delete(name, &DeleteParams::default())).await
        }
        .await;
        match deleted {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(e) => Err(self.refused(ApiWrite::Eviction, e)),
        }
    }

    /// As kube-scheduler: the same condition again is not written again.
    async fn record_condition(&mut self, result: &CycleResult) -> Result<bool, String> {
        if result.outcome.preemption.is_none()
            && !result.outcome.clears_nomination
            && self.recorder.condition_written(result)
        {
            return Ok(true);
        }
        let (namespace, name) = result.pod.split_once('/').unwrap_or(("", &result.pod));
        let mut condition = serde_json::json!({"status": {"conditions": [{
            "type": "PodScheduled",
            "status": "False",
            "reason": binding::condition_reason(result),
            "message": binding::condition_message(result),
            "lastTransitionTime": now_rfc3339(),
        }]}});
        if let Some(preemption) = &result.outcome.preemption {
            condition["status"]["nominatedNodeName"] = preemption.node.clone().into();
        } else if result.outcome.clears_nomination {
            // A strategic merge patch removes a field set to null.
            condition["status"]["nominatedNodeName"] = serde_json::Value::Null;
        }
        let pods = self.pods(namespace);
        self.rate.acquire().await;
        let patch = Patch::Strategic(condition);
        let patched = bounded(pods.patch_status(name, &PatchParams::default(), &patch)).await;
        match patched {
            Ok(_) => {
                self.recorder.remember_condition(result);
                Ok(true)
            }
            Err(e) => Err(self.refused(ApiWrite::Condition, e)),
        }
    }
}

/// The longest one write (or read) on the binding path waits for the API server: a request
/// that neither answers nor fails (a hung connection) must not hold its pod's write slot, and so
/// the writer, forever. Far above a healthy API server's answer (milliseconds) and under the
/// assume TTL's default (30 s plus the binding), so a timed-out binding is retried, not lost.
pub const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// `request`, failed with a timeout after [`REQUEST_TIMEOUT`].
pub(super) async fn bounded<T>(
    request: impl std::future::Future<Output = kube::Result<T>>,
) -> kube::Result<T> {
    match tokio::time::timeout(REQUEST_TIMEOUT, request).await {
        Ok(answer) => answer,
        Err(_) => Err(kube::Error::Service(Box::new(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer from the API server within {REQUEST_TIMEOUT:?}"),
        )))),
    }
}

/// Which of DynamicResources' writes [`write_claims`] makes.
#[derive(Clone, Copy)]
enum ClaimChange {
    /// PreBind: the allocation and the pod in `reservedFor`.
    Reserve,
    /// A failed binding: the pod out of `reservedFor`, and the allocation made for it dropped.
    Unreserve,
}

/// kube-scheduler's DynamicResources PreBind (`bindClaim`): for each claim, its finalizer with a
/// full update when the allocation is new, then `status` (allocation and `reservedFor`) with an
/// update carrying the claim's resourceVersion, so a claim another writer changed meanwhile is
/// refused (409) rather than overwritten; the pod is retried after backoff.
async fn write_claims(
    client: &Client,
    rate: &RateLimiter,
    result: &CycleResult,
    change: ClaimChange,
) -> Result<(), String> {
    let (namespace, pod_name) = result.pod.split_once('/').unwrap_or(("default", ""));
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), namespace);
    for write in &result.outcome.claim_writes {
        rate.acquire().await;
        let current = bounded(claims.get(&write.claim))
            .await
            .map_err(|e| format!("resourceclaim {namespace}/{}: {e}", write.claim))?;
        let wanted = match change {
            ClaimChange::Reserve => k8s::devices::reserved_claim(&current, write, pod_name),
            ClaimChange::Unreserve => k8s::devices::unreserved_claim(&current, write),
        };
        let mut stored = current;
        if wanted.metadata.finalizers != stored.metadata.finalizers
            && matches!(change, ClaimChange::Reserve)
        {
            stored.metadata.finalizers = wanted.metadata.finalizers.clone();
            rate.acquire().await;
            stored = bounded(claims.replace(&write.claim, &PostParams::default(), &stored))
                .await
                .map_err(|e| {
                    format!(
                        "add finalizer to resourceclaim {namespace}/{}: {e}",
                        write.claim
                    )
                })?;
        }
        stored.status = wanted.status;
        rate.acquire().await;
        stored = bounded(claims.replace_status(&write.claim, &PostParams::default(), &stored))
            .await
            .map_err(|e| format!("update resourceclaim {namespace}/{}: {e}", write.claim))?;
        if wanted.metadata.finalizers != stored.metadata.finalizers
            && matches!(change, ClaimChange::Unreserve)
        {
            stored.metadata.finalizers = wanted.metadata.finalizers;
            rate.acquire().await;
            bounded(claims.replace(&write.claim, &PostParams::default(), &stored))
                .await
                .map_err(|e| {
                    format!(
                        "remove finalizer from resourceclaim {namespace}/{}: {e}",
                        write.claim
                    )
                })?;
        }
    }
    Ok(())
}

/// How long PreBind waits for the PV controller to complete the bindings it asked for
/// (kube-scheduler's `bindTimeoutSeconds` default).
const BIND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// kube-scheduler's VolumeBinding PreBind: reserves each chosen volume for its claim (`claimRef`,
/// written with a full update) and marks each claim to provision with the node, then polls every
/// second until the PV controller has bound every claim (`volumeName` and `bind-completed`).
async fn bind_volumes(
    client: &Client,
    rate: &RateLimiter,
    result: &CycleResult,
    node: &str,
    timeout: std::time::Duration,
) -> Result<(), String> {
    let namespace = result.pod.split_once('/').map_or("default", |(ns, _)| ns);
    let apis = VolumeApis {
        volumes: Api::all(client.clone()),
        claims: Api::namespaced(client.clone(), namespace),
        rate,
    };
    let volumes = &result.outcome.volumes;
    apis.request_bindings(volumes, node).await?;
    let deadline = std::time::Instant::now() + timeout;
    while !apis.all_bound(volumes, node).await? {
        if std::time::Instant::now() >= deadline {
            return Err("context deadline exceeded".into());
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
    Ok(())
}

/// The volumes and the pod's claims, read and written at the client's rate.
struct VolumeApis<'a> {
    volumes: Api<core::PersistentVolume>,
    claims: Api<core::PersistentVolumeClaim>,
    rate: &'a RateLimiter,
}

impl VolumeApis<'_> {
    async fn volume(&self, name: &str) -> Result<core::PersistentVolume, String> {
        self.rate.acquire().await;
        bounded(self.volumes.get(name))
            .await
            .map_err(|e| e.to_string())
    }

    async fn claim(&self, name: &str) -> Result<core::PersistentVolumeClaim, String> {
        self.rate.acquire().await;
        bounded(self.claims.get(name))
            .await
            .map_err(|e| e.to_string())
    }

    /// Reserves each chosen volume for its claim and marks each claim to provision with `node`.
    async fn request_bindings(&self, volumes: &PodVolumes, node: &str) -> Result<(), String> {
        let failed = |e: kube::Error| e.to_string();
        let params = PostParams::default();
        for (claim_name, volume_name) in &volumes.static_bindings {
            let claim = self.claim(claim_name).await?;
            let volume = k8s::volume_reserved_for(&self.volume(volume_name).await?, &claim);
            self.rate.acquire().await;
            let replace = self.volumes.replace(volume_name, &params, &volume);
            bounded(replace).await.map_err(failed)?;
        }
        for claim_name in &volumes.provisions {
            let claim = k8s::claim_with_selected_node(&self.claim(claim_name).await?, node);
            self.rate.acquire().await;
            let replace = self.claims.replace(claim_name, &params, &claim);
            bounded(replace).await.map_err(failed)?;
        }
        Ok(())
    }

    /// One poll: whether the PV controller has bound every claim; an error when a reservation
    /// was reset or provisioning failed, as kube-scheduler's `checkBindings`.
    async fn all_bound(&self, volumes: &PodVolumes, node: &str) -> Result<bool, String> {
        let mut all_bound = true;
        for (claim_name, volume_name) in &volumes.static_bindings {
            let volume = self.volume(volume_name).await?;
            let reserved = volume
                .spec
                .as_ref()
                .and_then(|s| s.claim_ref.as_ref())
                .is_some_and(|r| r.uid.as_deref().is_some_and(|u| !u.is_empty()));
            if !reserved {
                return Err(format!("ClaimRef got reset for pv \"{volume_name}\""));
            }
            all_bound &= k8s::claim_info(&self.claim(claim_name).await?).is_fully_bound();
        }
        for claim_name in &volumes.provisions {
            let claim = k8s::claim_info(&self.claim(claim_name).await?);
            if claim.selected_node.as_deref() != Some(node) {
                // The provisioner removes the annotation when it cannot provision.
                return Err(format!("provisioning failed for PVC \"{claim_name}\""));
            }
            all_bound &= claim.is_fully_bound();
        }
        Ok(all_bound)
    }
}
