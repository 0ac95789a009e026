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

use futures_util::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;
use kube::runtime::WatchStreamExt as _;
use kube::{Api, Client, Config, Resource as _};
use wasched_core::events::{
    Action, Event, EventPipeline, Kind, KindType, KindVisitor, Object, ObjectKey,
};
use wasched_core::k8s;

use crate::engine::StartGate;
use crate::lenient::{shortened, Lenient, Undecodable};

mod bind;
mod events;
mod podgroups;
mod rate;

pub use bind::{ApiSink, REQUEST_TIMEOUT};
pub use events::{truncate_note, Recorder, NOTE_LIMIT};
pub use podgroups::{write_statuses, GroupStatuses};
pub use rate::RateLimiter;

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
    /// Requests (bindings, conditions, evictions) sent to the API server a second on average, as
    /// kube-scheduler's `--kube-api-qps` (default 50); Events have a limiter of their own at the
    /// same rate. Raise it with the API server's capacity: it bounds how many pods a second are
    /// bound.
    #[arg(long, default_value_t = 50.0, value_parser = positive_rate)]
    pub kube_api_qps: f64,
    /// Requests sent at once, and in flight at most (kube-scheduler's `--kube-api-burst`,
    /// default 100).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub kube_api_burst: u32,
    /// Leader election on a Lease.
    #[command(flatten)]
    pub leader: crate::leader::LeaderArgs,
    /// Where the replicas share plugins and configuration.
    #[command(flatten)]
    pub policy: crate::shared_policy::SharedPolicyArgs,
    /// Write the status of PodGroups (`scheduling.x-k8s.io/v1alpha1`) as coscheduling's
    /// PodGroup controller does: phase and member counts. Set it to false when
    /// scheduler-plugins' controller runs in the cluster.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub pod_group_status: bool,
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
    /// PodGroup statuses written.
    pub group_status_writes: AtomicU64,
    /// PodGroup status writes the API server refused or did not answer (each tried again).
    pub group_status_failures: AtomicU64,
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
            (
                "wasched_podgroup_status_writes_total",
                "PodGroup statuses written (phase and member counts, as coscheduling's controller keeps them).",
                &self.group_status_writes,
            ),
            (
                "wasched_podgroup_status_write_failures_total",
                "PodGroup status writes refused or not answered (each tried again a second later).",
                &self.group_status_failures,
            ),
        ] {
            crate::engine::render_counter(out, name, help, value);
        }
    }
}

/// Starts one watch per kind of object the cache holds; each of `gates` opens once every kind
/// has listed. `groups`, when given, sees every pod and PodGroup (done pods too).
pub fn watch_cluster(
    client: &Client,
    pipeline: &Arc<EventPipeline>,
    gates: &[Arc<StartGate>],
    stats: &Arc<WatchStats>,
    groups: Option<&Arc<GroupStatuses>>,
) {
    Kind::visit_all(&mut WatchEveryKind {
        client,
        pipeline,
        gates,
        stats,
        groups,
        unlisted: Arc::new(AtomicUsize::new(Kind::ALL.len())),
    });
}

/// Spawns the watch of each kind it visits.
struct WatchEveryKind<'a> {
    client: &'a Client,
    pipeline: &'a Arc<EventPipeline>,
    gates: &'a [Arc<StartGate>],
    stats: &'a Arc<WatchStats>,
    groups: Option<&'a Arc<GroupStatuses>>,
    unlisted: Arc<AtomicUsize>,
}

impl KindVisitor for WatchEveryKind<'_> {
    fn visit<K: KindType>(&mut self, kind: Kind) {
        let feed = Feed {
            kind,
            pipeline: self.pipeline.clone(),
            gates: self.gates.to_vec(),
            unlisted: self.unlisted.clone(),
            stats: self.stats.clone(),
            groups: self
                .groups
                .filter(|_| matches!(kind, Kind::Pod | Kind::PodGroup))
                .cloned(),
        };
        tokio::spawn(watch_kind(Api::<K>::all(self.client.clone()), feed));
    }
}

/// What the cache is told of a watched object: finished pods hold nothing on their nodes, so to
/// the cache they are gone.
fn kept(object: Object) -> Option<Object> {
    if let Object::Pod(pod) = &object {
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed")) {
            return None;
        }
    }
    Some(object)
}

/// Where one kind's watch sends what it sees.
struct Feed {
    kind: Kind,
    pipeline: Arc<EventPipeline>,
    gates: Vec<Arc<StartGate>>,
    /// Kinds that have not finished their first list.
    unlisted: Arc<AtomicUsize>,
    stats: Arc<WatchStats>,
    /// Told of each pod and PodGroup, for their status.
    groups: Option<Arc<GroupStatuses>>,
}

impl Feed {
    /// The kind's first list is done: once every kind's is, the gates open.
    fn listed(&self) {
        if self.unlisted.fetch_sub(1, Ordering::AcqRel) == 1 {
            for gate in &self.gates {
                gate.open();
            }
        }
    }

    /// Submits `object` as the cache keeps it ([`kept`]) at `version`.
    fn apply(&self, key: ObjectKey, version: u64, object: Option<Object>) {
        if let (Some(groups), Some(object)) = (&self.groups, &object) {
            groups.observe(object);
        }
        self.submit(key, version, object.and_then(kept));
    }

    /// Submits the deletion of `key` at `version`.
    fn delete(&self, key: ObjectKey, version: u64) {
        if let Some(groups) = &self.groups {
            groups.forget(&key);
        }
        self.submit(key, version, None);
    }

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
async fn watch_kind<K: KindType>(api: Api<K>, feed: Feed) {
    let on_undecodable: OnUndecodable = if feed.kind == Kind::Pod {
        undecodable_pod
    } else {
        |_| None
    };
    let api: Api<Lenient<K>> = Api::all(api.into_client());
    let kind = feed.kind;
    let decode = move |object: Lenient<K>| match object.decoded {
        Ok(object) => Some(object.into_object()),
        Err(undecodable) => {
            tracing::warn!(
                ?kind,
                name = undecodable.metadata.name.as_deref().unwrap_or_default(),
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
    // Whether the kind was ever listed: an optional kind's failures before then are expected.
    let mut served = false;
    let mut stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    while let Some(next) = stream.next().await {
        let event = match next {
            Ok(event) => event,
            Err(e) => {
                feed.stats.errors.fetch_add(1, Ordering::Relaxed);
                let e = e.to_string();
                if feed.kind.is_optional() && first_list {
                    // Most clusters do not serve the kind (its CRD is not installed): the
                    // scheduler starts without it and the watch keeps trying, so installing the
                    // CRD later turns it on.
                    tracing::info!(
                        kind = ?feed.kind,
                        "not served by this cluster (its CustomResourceDefinition is not installed?); going on without it and retrying: {}",
                        shortened(&e)
                    );
                    first_list = false;
                    feed.listed();
                    continue;
                }
                if feed.kind.is_optional() && !served {
                    // Still not served: said once at start, not at every retry.
                    tracing::debug!(kind = ?feed.kind, "still not served, retrying: {}", shortened(&e));
                    continue;
                }
                tracing::warn!(kind = ?feed.kind, "watch failed, retrying: {}", shortened(&e));
                continue;
            }
        };
        match event {
            watcher::Event::Init => listing = Some(HashMap::new()),
            watcher::Event::InitApply(object) | watcher::Event::Apply(object) => {
                let Some((key, version)) = parts(&feed, object.meta()) else {
                    continue;
                };
                feed.apply(key.clone(), version, decode(object));
                if let Some(listing) = listing.as_mut() {
                    listing.insert(key.clone(), version);
                }
                known.insert(key, version);
            }
            watcher::Event::Delete(object) => {
                if let Some((key, version)) = parts(&feed, object.meta()) {
                    feed.delete(key.clone(), version);
                    known.remove(&key);
                }
            }
            watcher::Event::InitDone => {
                let listed = listing.take().unwrap_or_default();
                repair(&feed, &mut known, &listed);
                feed.stats.lists.fetch_add(1, Ordering::Relaxed);
                served = true;
                if std::mem::take(&mut first_list) {
                    feed.listed();
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
        feed.delete(key.clone(), newest_listed.max(version + 1));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_must_be_positive() {
        assert_eq!(positive_rate("50"), Ok(50.0));
        assert!(positive_rate("0").is_err());
        assert!(positive_rate("-1").is_err());
        assert!(positive_rate("fast").is_err());
    }
}
