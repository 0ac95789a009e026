//! `serve --kubernetes`: a Kubernetes API server, not the embedded store, holds the cluster's
//! objects. Watches of nodes, pods, PersistentVolumes, claims, StorageClasses and namespaces feed the event
//! pipeline (kube-runtime's watcher lists, then watches from the list's resourceVersion, and
//! lists again after `410 Gone` or a dropped connection); the status writer binds pods through the
//! `binding` subresource and writes the `PodScheduled` condition of pods no node fits. The
//! binding comes back through the pod watch, which confirms the pod the cycle assumed.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use futures_util::{StreamExt, TryFutureExt as _};
use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1 as policy;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;
use kube::runtime::WatchStreamExt as _;
use kube::{Api, Client, Config};
use serde::de::DeserializeOwned;
use wasched_core::events::{Action, Event, EventPipeline, Kind, Object, ObjectKey};
use wasched_core::framework::Preemption;
use wasched_core::k8s;
use wasched_core::service::{BindingFailures, CycleResult};

use crate::engine::{
    watch_event, ApiWrite, ApiWriteFailures, EngineMetrics, ResultSink, StartGate,
};
use crate::lenient::{shortened, Lenient, Undecodable};

/// `wasched serve` options of Kubernetes mode.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct KubeArgs {
    /// Schedule the pods of a Kubernetes cluster (those whose `schedulerName` is one of the
    /// configured profiles) instead of objects kept in the embedded store.
    #[arg(long)]
    pub kubernetes: bool,
    /// The kubeconfig to use (default: `$KUBECONFIG`, `~/.kube/config`, or the in-cluster
    /// service account).
    #[arg(long, value_name = "FILE", requires = "kubernetes")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, requires = "kubernetes")]
    pub context: Option<String>,
    /// Requests (bindings, conditions, Events) sent to the API server a second on average, as
    /// kube-scheduler's `--kube-api-qps` (default 50). Raise it with the API server's capacity:
    /// it bounds how many pods a second are bound.
    #[arg(long, default_value_t = 50.0, value_parser = positive_rate)]
    pub kube_api_qps: f64,
    /// Requests sent at once, and in flight at most (kube-scheduler's `--kube-api-burst`,
    /// default 100).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub kube_api_burst: u32,
    #[command(flatten)]
    pub leader: crate::leader::LeaderArgs,
    #[command(flatten)]
    pub policy: crate::shared_policy::SharedPolicyArgs,
}

fn positive_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(qps) if qps > 0.0 && qps.is_finite() => Ok(qps),
        _ => Err(format!(
            "`{text}` is not a positive number of requests a second"
        )),
    }
}

/// A client for the API server `args` name.
///
/// # Errors
/// No kubeconfig or in-cluster account was found, or it is invalid.
pub async fn client(args: &KubeArgs) -> anyhow::Result<Client> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..Default::default()
    };
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
            Config::from_custom_kubeconfig(kubeconfig, &options).await?
        }
        None if args.context.is_some() => Config::from_kubeconfig(&options).await?,
        None => Config::infer().await?,
    };
    Ok(Client::try_from(config)?)
}

/// Counters of the watches, for `/metrics`.
#[derive(Default)]
pub struct WatchStats {
    /// Full lists, the first of each kind included.
    pub lists: AtomicU64,
    /// Objects the cache held that a new list no longer had: deleted then, as a lost watch event
    /// would have.
    pub repaired: AtomicU64,
    /// Watch errors (each retried with backoff).
    pub errors: AtomicU64,
}

impl WatchStats {
    /// Appends the watch counters in the Prometheus text format.
    pub fn render(&self, out: &mut String) {
        for (name, help, value) in [
            (
                "wasched_kube_lists_total",
                "Full lists of a kind from the API server (at start, and after 410 Gone or a lost watch).",
                &self.lists,
            ),
            (
                "wasched_kube_repaired_total",
                "Objects deleted while no watch was open, found missing by a new list and deleted from the cache.",
                &self.repaired,
            ),
            (
                "wasched_kube_watch_errors_total",
                "Failed watch or list requests (each retried with backoff).",
                &self.errors,
            ),
        ] {
            crate::engine::render_counter(out, name, help, value);
        }
    }
}

/// Starts one watch per kind of object the cache holds; each of `gates` opens once every kind
/// has listed.
pub fn watch_cluster(
    client: &Client,
    pipeline: &Arc<EventPipeline>,
    gates: &[Arc<StartGate>],
    stats: &Arc<WatchStats>,
) {
    let unlisted = Arc::new(AtomicUsize::new(11));
    let feed = |kind| Feed {
        kind,
        pipeline: pipeline.clone(),
        gates: gates.to_vec(),
        unlisted: unlisted.clone(),
        stats: stats.clone(),
    };
    tokio::spawn(watch_kind(
        Api::<core::Node>::all(client.clone()),
        feed(Kind::Node),
        |node| Some(Object::Node(Box::new(node))),
    ));
    tokio::spawn(watch_kind(
        Api::<core::Pod>::all(client.clone()),
        feed(Kind::Pod),
        // Finished pods hold nothing on their nodes: to the cache they are gone.
        |pod| {
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            (!matches!(phase, Some("Succeeded" | "Failed"))).then(|| Object::Pod(Box::new(pod)))
        },
    ));
    tokio::spawn(watch_kind(
        Api::<core::PersistentVolume>::all(client.clone()),
        feed(Kind::PersistentVolume),
        |volume| Some(Object::Volume(Box::new(volume))),
    ));
    tokio::spawn(watch_kind(
        Api::<core::PersistentVolumeClaim>::all(client.clone()),
        feed(Kind::PersistentVolumeClaim),
        |claim| Some(Object::Claim(Box::new(claim))),
    ));
    tokio::spawn(watch_kind(
        Api::<StorageClass>::all(client.clone()),
        feed(Kind::StorageClass),
        |class| Some(Object::Class(Box::new(class))),
    ));
    tokio::spawn(watch_kind(
        Api::<core::Namespace>::all(client.clone()),
        feed(Kind::Namespace),
        |namespace| Some(Object::Namespace(Box::new(namespace))),
    ));
    // What kube-scheduler's default topology spreading selects a pod's peers by.
    tokio::spawn(watch_kind(
        Api::<core::Service>::all(client.clone()),
        feed(Kind::Service),
        |service| Some(Object::Service(Box::new(service))),
    ));
    tokio::spawn(watch_kind(
        Api::<core::ReplicationController>::all(client.clone()),
        feed(Kind::ReplicationController),
        |controller| Some(Object::ReplicationController(Box::new(controller))),
    ));
    tokio::spawn(watch_kind(
        Api::<apps::ReplicaSet>::all(client.clone()),
        feed(Kind::ReplicaSet),
        |set| Some(Object::ReplicaSet(Box::new(set))),
    ));
    tokio::spawn(watch_kind(
        Api::<apps::StatefulSet>::all(client.clone()),
        feed(Kind::StatefulSet),
        |set| Some(Object::StatefulSet(Box::new(set))),
    ));
    // What preemption must not disrupt past its allowance.
    tokio::spawn(watch_kind(
        Api::<policy::PodDisruptionBudget>::all(client.clone()),
        feed(Kind::PodDisruptionBudget),
        |budget| Some(Object::PodDisruptionBudget(Box::new(budget))),
    ));
}

/// Where one kind's watch sends what it sees.
struct Feed {
    kind: Kind,
    pipeline: Arc<EventPipeline>,
    gates: Vec<Arc<StartGate>>,
    /// Kinds that have not finished their first list.
    unlisted: Arc<AtomicUsize>,
    stats: Arc<WatchStats>,
}

impl Feed {
    /// Submits `kept` (or the deletion of `key` when it is None) at `version`.
    fn submit(&self, key: ObjectKey, version: u64, kept: Option<Object>) {
        let event = match kept {
            Some(object) => Event::with_version(Action::Upsert, object, version),
            None => Event::with_version(Action::Delete, Object::stub(&key), version),
        };
        self.pipeline.submit(event);
    }
}

/// What becomes of an object that does not decode: for pods, a stand-in the service reports as
/// unreadable ([`k8s::undecodable_pod`]); for other kinds nothing (the object is skipped, as a
/// kind wasched does not read).
type OnUndecodable = fn(&Undecodable) -> Option<Object>;

fn undecodable_pod(object: &Undecodable) -> Option<Object> {
    let pod = k8s::undecodable_pod(&object.raw, &object.field, &object.message);
    Some(Object::Pod(Box::new(pod)))
}

/// Lists and watches one kind for as long as the server runs. Events carry the objects'
/// resourceVersions, so the pipeline applies each object's changes in order whatever order the
/// watches deliver them in.
async fn watch_kind<K>(api: Api<K>, feed: Feed, keep: fn(K) -> Option<Object>)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    let on_undecodable: OnUndecodable = if feed.kind == Kind::Pod {
        undecodable_pod
    } else {
        |_| None
    };
    let api: Api<Lenient<K>> = Api::all(api.into_client());
    let kind = feed.kind;
    let keep = move |object: Lenient<K>| match object.decoded {
        Ok(object) => keep(object),
        Err(undecodable) => {
            tracing::warn!(
                ?kind,
                name = object.metadata.name.as_deref().unwrap_or_default(),
                "an object that does not decode: {}: {}",
                undecodable.field,
                shortened(&undecodable.message)
            );
            on_undecodable(&undecodable)
        }
    };
    // The version each object was last seen at, to find what a new list no longer has.
    let mut known: HashMap<ObjectKey, u64> = HashMap::new();
    let mut listing: Option<HashMap<ObjectKey, u64>> = None;
    let mut first_list = true;
    let mut stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    while let Some(next) = stream.next().await {
        let event = match next {
            Ok(event) => event,
            Err(e) => {
                feed.stats.errors.fetch_add(1, Ordering::Relaxed);
                let e = e.to_string();
                tracing::warn!(kind = ?feed.kind, "watch failed, retrying: {}", shortened(&e));
                continue;
            }
        };
        match event {
            watcher::Event::Init => listing = Some(HashMap::new()),
            watcher::Event::InitApply(object) | watcher::Event::Apply(object) => {
                let Some((key, version)) = parts(&feed, &object.metadata) else {
                    continue;
                };
                feed.submit(key.clone(), version, keep(object));
                if let Some(listing) = listing.as_mut() {
                    listing.insert(key.clone(), version);
                }
                known.insert(key, version);
            }
            watcher::Event::Delete(object) => {
                if let Some((key, version)) = parts(&feed, &object.metadata) {
                    feed.submit(key.clone(), version, None);
                    known.remove(&key);
                }
            }
            watcher::Event::InitDone => {
                let listed = listing.take().unwrap_or_default();
                repair(&feed, &mut known, &listed);
                feed.stats.lists.fetch_add(1, Ordering::Relaxed);
                if std::mem::take(&mut first_list)
                    && feed.unlisted.fetch_sub(1, Ordering::AcqRel) == 1
                {
                    for gate in &feed.gates {
                        gate.open();
                    }
                }
            }
        }
    }
}

/// Deletes what the cache still holds but a new list (`listed`) no longer has: the deletion
/// happened while no watch was open. The deletion's version is past every version listed, so the
/// pipeline applies it after them and still takes a later re-creation.
fn repair(feed: &Feed, known: &mut HashMap<ObjectKey, u64>, listed: &HashMap<ObjectKey, u64>) {
    let newest_listed = listed.values().copied().max().unwrap_or(0);
    let gone: Vec<(ObjectKey, u64)> = known
        .iter()
        .filter(|(key, _)| !listed.contains_key(*key))
        .map(|(key, version)| (key.clone(), *version))
        .collect();
    for (key, version) in gone {
        feed.stats.repaired.fetch_add(1, Ordering::Relaxed);
        tracing::info!(kind = ?key.kind, namespace = %key.namespace, name = %key.name, "deleted while unwatched: repaired");
        feed.submit(key.clone(), newest_listed.max(version + 1), None);
        known.remove(&key);
    }
}

/// The object's key and resourceVersion (objects without a numeric one are skipped: every API
/// server backed by etcd gives one).
fn parts(feed: &Feed, meta: &ObjectMeta) -> Option<(ObjectKey, u64)> {
    let version = meta.resource_version.as_deref()?.parse().ok()?;
    let namespaced = feed.kind.is_namespaced();
    let key = ObjectKey {
        kind: feed.kind,
        namespace: if namespaced {
            meta.namespace.clone().unwrap_or_else(|| "default".into())
        } else {
            String::new()
        },
        name: meta.name.clone()?,
    };
    Some((key, version))
}

/// kube-scheduler's client-side rate limit (client-go's token bucket): `qps` requests a second
/// on average and bursts of up to `burst`; a request over the limit waits for its turn.
pub struct RateLimiter {
    qps: f64,
    burst: f64,
    /// Tokens left (negative: requests already waiting for later tokens) and when counted.
    state: std::sync::Mutex<(f64, std::time::Instant)>,
}

impl RateLimiter {
    /// A bucket that starts full.
    pub fn new(qps: f64, burst: u32) -> Self {
        RateLimiter {
            qps,
            burst: f64::from(burst),
            state: std::sync::Mutex::new((f64::from(burst), std::time::Instant::now())),
        }
    }

    /// Takes a token at `now`; returns how long the request must wait for it.
    fn reserve(&self, now: std::time::Instant) -> std::time::Duration {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (tokens, counted) = &mut *state;
        let refill = now.saturating_duration_since(*counted).as_secs_f64() * self.qps;
        *tokens = (*tokens + refill).min(self.burst) - 1.0;
        *counted = now.max(*counted);
        if *tokens >= 0.0 {
            std::time::Duration::ZERO
        } else {
            std::time::Duration::from_secs_f64(-*tokens / self.qps)
        }
    }

    /// Waits until one more request may be sent.
    pub async fn acquire(&self) {
        let wait = self.reserve(std::time::Instant::now());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

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
            sequence: Default::default(),
        }
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
            let (client, recorder, failures, rate) = (
                self.client.clone(),
                self.recorder.clone(),
                self.failures.clone(),
                self.rate.clone(),
            );
            let (sequence, watch, metrics) =
                (self.sequence.clone(), watch.clone(), metrics.clone());
            self.runtime.spawn(async move {
                let written = write(client, recorder, &rate, &failures, result, &metrics).await;
                if let Some(result) = written {
                    metrics.status_writes.fetch_add(1, Ordering::Relaxed);
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

/// Sends one result; None when the API server refused it (counted in `metrics` by what was
/// written). A refused binding is reported to the service, which forgets the placement and
/// queues the pod again with backoff (a pod bound meanwhile, 409, or deleted, 404, arrives
/// through the watch too).
async fn write(
    client: Client,
    recorder: Arc<Recorder>,
    rate: &RateLimiter,
    failures: &BindingFailures,
    result: CycleResult,
    metrics: &EngineMetrics,
) -> Option<CycleResult> {
    let refused = &metrics.api_write_failures;
    let (namespace, name) = result.pod.split_once('/')?;
    // The answers are read leniently: a pod that does not decode is still told why it waits.
    let pods: Api<Lenient<core::Pod>> = Api::namespaced(client.clone(), namespace);
    if let Some(node) = result
        .node
        .as_deref()
        .filter(|_| !result.volumes.is_empty())
    {
        if let Err(e) = bind_volumes(&client, rate, &result, node, BIND_TIMEOUT).await {
            refused.count(ApiWrite::VolumeBinding);
            tracing::warn!(pod = %result.pod, "binding the pod's volumes failed: {e}");
            failures.report(
                result.pod.clone(),
                format!("running PreBind plugin \"VolumeBinding\": binding volumes: {e}"),
            );
            return None;
        }
    }
    let outcome = match &result.node {
        Some(node) => {
            let binding = core::Binding {
                metadata: ObjectMeta {
                    name: Some(name.to_string()),
                    namespace: Some(namespace.to_string()),
                    ..Default::default()
                },
                target: core::ObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Node".into()),
                    name: Some(node.clone()),
                    ..Default::default()
                },
            };
            rate.acquire().await;
            recorder.forget_condition(&result.pod);
            bounded(pods.create_subresource::<_, serde_json::Value>(
                "binding",
                name,
                &PostParams::default(),
                &binding,
            ))
            .map_ok(|_| ())
            .await
        }
        // As kube-scheduler: the same condition again is not written again.
        None if result.preemption.is_none()
            && !result.clears_nomination
            && recorder.condition_written(&result) =>
        {
            Ok(())
        }
        None => {
            if let Some(preemption) = &result.preemption {
                evict(&client, rate, &result, preemption, refused).await;
            }
            rate.acquire().await;
            let mut condition = serde_json::json!({"status": {"conditions": [{
                "type": "PodScheduled",
                "status": "False",
                "reason": if result.error { "SchedulerError" } else { "Unschedulable" },
                "message": result.message,
                "lastTransitionTime": now_rfc3339(),
            }]}});
            if let Some(preemption) = &result.preemption {
                condition["status"]["nominatedNodeName"] = preemption.node.clone().into();
            } else if result.clears_nomination {
                // A strategic merge patch removes a field set to null.
                condition["status"]["nominatedNodeName"] = serde_json::Value::Null;
            }
            let patched = bounded(pods.patch_status(
                name,
                &PatchParams::default(),
                &Patch::Strategic(condition),
            ))
            .map_ok(|_| ())
            .await;
            if patched.is_ok() {
                recorder.remember_condition(&result);
            }
            patched
        }
    };
    match outcome {
        Ok(()) => {
            if result.node.is_some() {
                failures.completed(result.pod.clone());
            }
            recorder.record(&client, rate, &result, refused).await;
            Some(result)
        }
        Err(e) => {
            let what = if result.node.is_some() {
                refused.count(ApiWrite::Binding);
                "binding"
            } else {
                refused.count(ApiWrite::Condition);
                "writing the condition of"
            };
            tracing::warn!(pod = %result.pod, "{what} the pod failed: {e}");
            if result.node.is_some() {
                failures.report(result.pod.clone(), e.to_string());
            }
            None
        }
    }
}

/// The longest one write (or read) on the binding path waits for the API server: a request
/// that neither answers nor fails (a hung connection) must not hold its pod's write slot, and so
/// the writer, forever. Far above a healthy API server's answer (milliseconds) and under the
/// assume TTL's default (30 s plus the binding), so a timed-out binding is retried, not lost.
pub const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// `request`, failed with a timeout after [`REQUEST_TIMEOUT`].
async fn bounded<T>(
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
    let volumes: Api<core::PersistentVolume> = Api::all(client.clone());
    let claims: Api<core::PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let failed = |e: kube::Error| e.to_string();
    for (claim_name, volume_name) in &result.volumes.static_bindings {
        rate.acquire().await;
        let claim = bounded(claims.get(claim_name)).await.map_err(failed)?;
        rate.acquire().await;
        let volume = bounded(volumes.get(volume_name)).await.map_err(failed)?;
        let volume = k8s::volume_reserved_for(&volume, &claim);
        rate.acquire().await;
        bounded(volumes.replace(volume_name, &PostParams::default(), &volume))
            .await
            .map_err(failed)?;
    }
    for claim_name in &result.volumes.provisions {
        rate.acquire().await;
        let claim = bounded(claims.get(claim_name)).await.map_err(failed)?;
        let claim = k8s::claim_with_selected_node(&claim, node);
        rate.acquire().await;
        bounded(claims.replace(claim_name, &PostParams::default(), &claim))
            .await
            .map_err(failed)?;
    }
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let mut all_bound = true;
        for (claim_name, volume_name) in &result.volumes.static_bindings {
            rate.acquire().await;
            let volume = bounded(volumes.get(volume_name)).await.map_err(failed)?;
            let reserved = volume
                .spec
                .as_ref()
                .and_then(|s| s.claim_ref.as_ref())
                .is_some_and(|r| r.uid.as_deref().is_some_and(|u| !u.is_empty()));
            if !reserved {
                return Err(format!("ClaimRef got reset for pv \"{volume_name}\""));
            }
            rate.acquire().await;
            let claim = bounded(claims.get(claim_name)).await.map_err(failed)?;
            all_bound &= k8s::claim_info(&claim).is_fully_bound();
        }
        for claim_name in &result.volumes.provisions {
            rate.acquire().await;
            let claim = bounded(claims.get(claim_name)).await.map_err(failed)?;
            let claim = k8s::claim_info(&claim);
            if claim.selected_node.as_deref() != Some(node) {
                // The provisioner removes the annotation when it cannot provision.
                return Err(format!("provisioning failed for PVC \"{claim_name}\""));
            }
            all_bound &= claim.is_fully_bound();
        }
        if all_bound {
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            return Err("context deadline exceeded".into());
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

/// kube-scheduler's eviction of preemption victims: each one not already terminating gets the
/// condition `DisruptionTarget` (reason `PreemptionByScheduler`), then is deleted. A victim that
/// is already gone is fine; another failure is logged, and the preemptor, back in the queue
/// when victims leave, tries again.
async fn evict(
    client: &Client,
    rate: &RateLimiter,
    result: &CycleResult,
    preemption: &Preemption,
    refused: &ApiWriteFailures,
) {
    for victim in preemption.victims.iter().filter(|v| !v.terminating) {
        let Some((namespace, name)) = victim.pod.split_once('/') else {
            continue;
        };
        let pods: Api<core::Pod> = Api::namespaced(client.clone(), namespace);
        let condition = serde_json::json!({"status": {"conditions": [{
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": format!("{}: preempting to accommodate a higher priority pod", result.scheduler_name),
            "lastTransitionTime": now_rfc3339(),
        }]}});
        rate.acquire().await;
        let marked =
            bounded(pods.patch_status(name, &PatchParams::default(), &Patch::Strategic(condition)))
                .await;
        let deleted = match marked {
            Ok(_) => {
                rate.acquire().await;
                bounded(pods.delete(name, &DeleteParams::default()))
                    .await
                    .map(|_| ())
            }
            Err(e) => Err(e),
        };
        match deleted {
            Ok(()) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => {
                refused.count(ApiWrite::Eviction);
                tracing::warn!(victim = %victim.pod, preemptor = %result.pod, "evicting the victim failed: {e}")
            }
        }
    }
}

/// An `events.k8s.io/v1` Event the recorder made, and how often it has happened since.
struct Recorded {
    name: String,
    count: i32,
    first: std::time::Instant,
    patched: std::time::Instant,
}

/// Records Events as kube-scheduler's event recorder does: an Event that repeats (same pod,
/// reason and message) within [`Recorder::SERIES_WINDOW`] is not created again; its `series`
/// count is patched, at most every [`Recorder::PATCH_EVERY`]. A pod retried for hours makes a few
/// requests an hour, not one per attempt.
pub struct Recorder {
    /// `reportingInstance`: this replica.
    pub instance: String,
    recorded: std::sync::Mutex<HashMap<(String, &'static str, String), Recorded>>,
    /// The `PodScheduled=False` condition last written per pod (reason and message), and when.
    conditions: std::sync::Mutex<HashMap<String, (bool, String, std::time::Instant)>>,
}

impl Recorder {
    /// How long a repeated Event counts into the first one.
    pub const SERIES_WINDOW: std::time::Duration = std::time::Duration::from_secs(6 * 60);
    /// Least time between two patches of one Event's series.
    pub const PATCH_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

    /// A recorder reporting as `instance`.
    pub fn new(instance: String) -> Self {
        Recorder {
            instance,
            recorded: Default::default(),
            conditions: Default::default(),
        }
    }

    /// True when the pod already has this result's condition, written by this replica within
    /// [`Recorder::SERIES_WINDOW`] (afterwards it is written again, in case the pod was replaced
    /// by one of the same name).
    fn condition_written(&self, result: &CycleResult) -> bool {
        let conditions = self.conditions.lock().unwrap_or_else(|e| e.into_inner());
        conditions
            .get(&result.pod)
            .is_some_and(|(error, message, at)| {
                *error == result.error
                    && Some(message) == result.message.as_ref()
                    && at.elapsed() < Self::SERIES_WINDOW
            })
    }

    fn remember_condition(&self, result: &CycleResult) {
        let mut conditions = self.conditions.lock().unwrap_or_else(|e| e.into_inner());
        conditions.retain(|_, (_, _, at)| at.elapsed() < Self::SERIES_WINDOW);
        conditions.insert(
            result.pod.clone(),
            (
                result.error,
                result.message.clone().unwrap_or_default(),
                std::time::Instant::now(),
            ),
        );
    }

    fn forget_condition(&self, pod: &str) {
        self.conditions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(pod);
    }

    async fn record(
        &self,
        client: &Client,
        rate: &RateLimiter,
        result: &CycleResult,
        refused: &ApiWriteFailures,
    ) {
        let Some((namespace, name)) = result.pod.split_once('/') else {
            return;
        };
        let (reason, kind, action, note) = match &result.node {
            Some(node) => (
                "Scheduled",
                "Normal",
                "Binding",
                format!("Successfully assigned {} to {node}", result.pod),
            ),
            // The condition keeps the whole text; the API server refuses a longer note.
            None => (
                "FailedScheduling",
                "Warning",
                "Scheduling",
                truncate_note(result.message.as_deref().unwrap_or_default()),
            ),
        };
        let events: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(client.clone(), namespace);
        let key = (result.pod.clone(), reason, note.clone());
        let now = std::time::Instant::now();
        let repeat = {
            let mut recorded = self.recorded.lock().unwrap_or_else(|e| e.into_inner());
            recorded.retain(|_, r| r.first.elapsed() < Self::SERIES_WINDOW);
            match recorded.get_mut(&key) {
                Some(r) => {
                    r.count += 1;
                    let due = r.patched.elapsed() >= Self::PATCH_EVERY;
                    if due {
                        r.patched = now;
                    }
                    Some((r.name.clone(), r.count, due))
                }
                None => None,
            }
        };
        if !matches!(repeat, Some((_, _, false))) {
            rate.acquire().await;
        }
        let outcome = match repeat {
            Some((_, _, false)) => return,
            Some((event_name, count, true)) => {
                let series = serde_json::json!({"series": {
                    "count": count,
                    "lastObservedTime": now_micro(),
                }});
                bounded(events.patch(&event_name, &PatchParams::default(), &Patch::Merge(&series)))
                    .map_ok(|_| ())
                    .await
            }
            None => {
                let event_name = format!("{name}.{:x}", event_suffix());
                let event = serde_json::json!({
                    "apiVersion": "events.k8s.io/v1",
                    "kind": "Event",
                    "metadata": {"name": event_name, "namespace": namespace},
                    "eventTime": now_micro(),
                    "reportingController": "wasched",
                    "reportingInstance": self.instance,
                    "action": action,
                    "reason": reason,
                    "type": kind,
                    "note": note,
                    "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name},
                });
                let created = match serde_json::from_value(event) {
                    Ok(event) => {
                        bounded(events.create(&PostParams::default(), &event))
                            .map_ok(|_| ())
                            .await
                    }
                    Err(e) => {
                        tracing::warn!("building an Event: {e}");
                        return;
                    }
                };
                if created.is_ok() {
                    self.recorded
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(
                            key,
                            Recorded {
                                name: event_name,
                                count: 1,
                                first: now,
                                patched: now,
                            },
                        );
                }
                created
            }
        };
        if let Err(e) = outcome {
            refused.count(ApiWrite::Event);
            tracing::warn!(pod = %result.pod, "recording the {reason} event failed: {e}");
        }
    }
}

/// The most bytes an Event's `note` may hold (the API server's `NoteLengthLimit`).
pub const NOTE_LIMIT: usize = 1024;

/// `message` cut to [`NOTE_LIMIT`] bytes as kube-scheduler cuts it (`truncateMessage`): the end
/// replaced by `" ..."`, here on a character boundary so the note stays UTF-8.
pub fn truncate_note(message: &str) -> String {
    const SUFFIX: &str = " ...";
    if message.len() <= NOTE_LIMIT {
        return message.to_string();
    }
    let mut end = NOTE_LIMIT - SUFFIX.len();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{SUFFIX}", &message[..end])
}

/// A suffix that keeps Event names unique, as client-go's (a timestamp in nanoseconds).
fn event_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

fn now_micro() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S.%6fZ")
        .to_string()
}

fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn the_rate_limiter_lets_a_burst_through_then_spaces_requests_at_the_qps() {
        let limiter = RateLimiter::new(10.0, 3);
        let start = Instant::now();
        let waits: Vec<Duration> = (0..5).map(|_| limiter.reserve(start)).collect();
        let ms: Vec<u128> = waits.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [0, 0, 0, 100, 200]);
        // After a quiet second the bucket is full again, but holds no more than the burst.
        let later = start + Duration::from_secs(10);
        let waits: Vec<u128> = (0..4).map(|_| limiter.reserve(later).as_millis()).collect();
        assert_eq!(waits, [0, 0, 0, 100]);
    }

    #[test]
    fn a_note_over_the_api_servers_limit_is_cut_on_a_character_boundary_as_kube_scheduler_does() {
        let short = "0/3 nodes are available: 3 Insufficient cpu.";
        assert_eq!(truncate_note(short), short);
        let exact = "x".repeat(NOTE_LIMIT);
        assert_eq!(truncate_note(&exact), exact);
        let long = "y".repeat(6_321);
        let cut = truncate_note(&long);
        assert_eq!(cut.len(), NOTE_LIMIT);
        assert_eq!(cut, format!("{} ...", "y".repeat(NOTE_LIMIT - 4)));
        // A three-byte character straddling the cut is left out whole.
        let wide = format!("{}€{}", "z".repeat(NOTE_LIMIT - 5), "z".repeat(100));
        let cut = truncate_note(&wide);
        assert!(cut.len() <= NOTE_LIMIT, "{}", cut.len());
        assert_eq!(cut, format!("{} ...", "z".repeat(NOTE_LIMIT - 5)));
    }

    #[test]
    fn a_rate_must_be_positive() {
        assert_eq!(positive_rate("50"), Ok(50.0));
        assert!(positive_rate("0").is_err());
        assert!(positive_rate("-1").is_err());
        assert!(positive_rate("fast").is_err());
    }
}
