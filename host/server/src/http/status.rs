//! What the status page at `/` reads, and the page itself.
//!
//! The summaries are computed on the scheduling thread between two cycles ([`Engine::inspect`]),
//! from the scheduler's own cache and queue, so they show what the scheduler decides with (assumed
//! pods included) and work the same in Kubernetes mode, where the objects live in the API server:
//! the nodes with their usage, one node's labels, a page of the pending pods with their last
//! FitError. A placed pod's choice comes from the watch log, the plugins and profiles from the
//! policy. These need read access, as the cluster API; the page needs none (it holds no data).
//!
//! [`Engine::inspect`]: crate::engine::Engine::inspect

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::{admin, guard, ApiError, Shared};
use crate::auth::Access;
use crate::engine::{ATTEMPTS_ANNOTATION, CHOICE_ANNOTATION};
use wasched_core::events::{Kind, Object, ObjectKey};
use wasched_core::service::PodState;
use wasched_sdk as sdk;

/// The status routes.
pub(super) fn routes(server: &Shared) -> Router<Shared> {
    let read: fn(&Method) -> Access = |_| Access::Read;
    let data = Router::new()
        .route("/v1/status/nodes", get(nodes))
        .route("/v1/status/nodes/{name}", get(node_labels))
        .route("/v1/status/pending", get(pending))
        .route("/v1/status/pods/{namespace}/{name}", get(pod_status))
        .route("/v1/status/plugins", get(plugins))
        .route("/v1/status/gangs", get(gangs))
        .route(
            "/v1/namespaces/{namespace}/pods/{name}/placement",
            get(placement),
        );
    Router::new()
        .route("/", get(page))
        .merge(guard(data, server, read))
}

/// The page: one file, its script and styles inline, built into the binary.
async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        include_str!("../../page/index.html"),
    )
        .into_response()
}

/// Runs `read` on the scheduling thread, off the async runtime.
async fn inspect<T: Send + 'static>(
    server: &Shared,
    read: impl FnOnce(&wasched_core::service::Service) -> T + Send + 'static,
) -> Result<T, ApiError> {
    let s = server.clone();
    tokio::task::spawn_blocking(move || s.engine.inspect(read))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e))
}

/// A node's resources by their Kubernetes names: cpu in millicores, memory and storage in bytes.
fn resources(r: &sdk::Resources, pods: i64) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert(sdk::resource::CPU.into(), r.milli_cpu.into());
    out.insert(sdk::resource::MEMORY.into(), r.memory.into());
    out.insert(
        sdk::resource::EPHEMERAL_STORAGE.into(),
        r.ephemeral_storage.into(),
    );
    out.insert(sdk::resource::PODS.into(), pods.into());
    for (name, amount) in &r.scalar {
        out.insert(name.clone(), (*amount).into());
    }
    out
}

/// `GET /v1/status/nodes`: every node with its zone, allocatable and requested resources, pod
/// count, taints and cordon, as the scheduler's cache holds them.
async fn nodes(State(server): State<Shared>) -> Result<Response, ApiError> {
    let body = inspect(&server, |service| {
        let cache = service.decider().cache();
        let mut nodes: Vec<Value> = cache
            .nodes()
            .map(|(_, entry)| {
                let info = &entry.info;
                let taints: Vec<String> = info
                    .taints
                    .iter()
                    .map(|t| {
                        if t.value.is_empty() {
                            format!("{}:{}", t.key, t.effect)
                        } else {
                            format!("{}={}:{}", t.key, t.value, t.effect)
                        }
                    })
                    .collect();
                json!({
                    "name": info.name,
                    "zone": zone_of(&info.labels),
                    "unschedulable": info.unschedulable,
                    "taints": taints,
                    "labels": info.labels.len(),
                    "allocatable": resources(&info.allocatable, info.allocatable.pods),
                    "requested": resources(&info.usage.requested, entry.pod_count() as i64),
                })
            })
            .collect();
        nodes.sort_by(|a, b| {
            (a["zone"].as_str(), a["name"].as_str()).cmp(&(b["zone"].as_str(), b["name"].as_str()))
        });
        json!({ "nodes": nodes })
    })
    .await?;
    Ok(Json(body).into_response())
}

/// A node's zone as people name it: its zone label (GA, else beta), after its region's when it
/// has one, as the node tree groups nodes.
fn zone_of(labels: &sdk::Labels) -> String {
    let either = |ga: &str, beta: &str| labels.get(ga).or_else(|| labels.get(beta)).unwrap_or("");
    let region = either(
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/region",
    );
    let zone = either(
        "topology.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/zone",
    );
    match (region, zone) {
        ("", zone) => zone.to_string(),
        (region, zone) => format!("{region}/{zone}"),
    }
}

/// `GET /v1/status/nodes/{name}`: a node's labels and annotations, as the scheduler sees them.
async fn node_labels(
    State(server): State<Shared>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let asked = name.clone();
    let body = inspect(&server, move |service| {
        let cache = service.decider().cache();
        let entry = cache.node_id(&asked).and_then(|id| cache.node(id))?;
        let pairs = |labels: &sdk::Labels| -> Map<String, Value> {
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), Value::from(v)))
                .collect()
        };
        Some(json!({
            "name": entry.info.name,
            "labels": pairs(&entry.info.labels),
            "annotations": pairs(&entry.info.annotations),
        }))
    })
    .await?;
    let body = body
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("no node named {name:?}")))?;
    Ok(Json(body).into_response())
}

#[derive(Deserialize, Default)]
struct PendingQuery {
    /// Words that must all match: `key=value` a label of the pod, anything else part of its
    /// `namespace/name`.
    q: Option<String>,
    offset: Option<usize>,
    limit: Option<usize>,
    /// `name` (default), `waiting` (longest first) or `attempts` (most first).
    sort: Option<String>,
}

/// The most pending pods one page may ask for.
const MAX_PAGE: usize = 500;

/// One word of a pending-pods search.
enum Term<'a> {
    Label(&'a str, &'a str),
    Text(String),
}

impl Term<'_> {
    fn matches(&self, pod: &sdk::Pod, key: &str) -> bool {
        match self {
            Term::Label(k, v) => pod.labels.get(k) == Some(v),
            Term::Text(text) => key.to_lowercase().contains(text),
        }
    }
}

/// `GET /v1/status/pending?q=&sort=&offset=&limit=`: a page of the pending pods with their
/// queue, attempts, time waiting and last FitError, and how many matched.
async fn pending(
    State(server): State<Shared>,
    query: Result<Query<PendingQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query?;
    let sort = query.sort.clone().unwrap_or_else(|| "name".into());
    if !["name", "waiting", "attempts"].contains(&sort.as_str()) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("sort {sort:?} is not one of name, waiting, attempts"),
        ));
    }
    let limit = query.limit.unwrap_or(50).clamp(1, MAX_PAGE);
    let offset = query.offset.unwrap_or(0);
    let body = inspect(&server, move |service| {
        let queue = service.queue();
        let text = query.q.unwrap_or_default();
        let terms: Vec<Term> = text
            .split_whitespace()
            .map(|word| match word.split_once('=') {
                Some((k, v)) => Term::Label(k, v),
                None => Term::Text(word.to_lowercase()),
            })
            .collect();
        let total = queue.len();
        let mut matched: Vec<(String, &sdk::Pod, wasched_core::queue::PendingStatus)> = queue
            .pods()
            .filter_map(|pod| {
                let key = pod.key();
                if !terms.iter().all(|t| t.matches(pod, &key)) {
                    return None;
                }
                let status = queue.status(&key)?;
                Some((key, pod, status))
            })
            .collect();
        match sort.as_str() {
            "waiting" => matched.sort_by(|a, b| b.2.waiting.cmp(&a.2.waiting).then(a.0.cmp(&b.0))),
            "attempts" => {
                matched.sort_by(|a, b| b.2.attempts.cmp(&a.2.attempts).then(a.0.cmp(&b.0)))
            }
            _ => matched.sort_by(|a, b| a.0.cmp(&b.0)),
        }
        let items: Vec<Value> = matched
            .iter()
            .skip(offset)
            .take(limit)
            .map(|(key, pod, status)| {
                json!({
                    "pod": key,
                    "namespace": pod.namespace,
                    "name": pod.name,
                    "schedulerName": pod.scheduler_name,
                    "priority": pod.priority,
                    "queue": status.queue.name(),
                    "attempts": status.attempts,
                    "waitingSeconds": status.waiting.as_secs(),
                    "message": status.message,
                })
            })
            .collect();
        json!({
            "total": total,
            "matched": matched.len(),
            "offset": offset,
            "items": items,
        })
    })
    .await?;
    Ok(Json(body).into_response())
}

/// `GET /v1/namespaces/{ns}/pods/{name}/placement`: where the scheduler placed the pod, when, and
/// the scores that chose the node.
async fn placement(
    State(server): State<Shared>,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let key = format!("{namespace}/{name}");
    let placement = placement_of(&server, namespace, name)?.ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no placement of pod {key:?} is known: it is not placed, or was placed by another scheduler, or before this server recorded choices"),
        )
    })?;
    Ok(Json(placement).into_response())
}

/// The newest placement of a pod: from the retained scheduling events, else (for older ones, or
/// from before a restart) from the stored pod's choice annotation.
fn placement_of(
    server: &Shared,
    namespace: String,
    name: String,
) -> Result<Option<Value>, ApiError> {
    let key = format!("{namespace}/{name}");
    if let Some(event) = server.watch.last_scheduled(&key) {
        return Ok(Some(
            serde_json::to_value(event).expect("watch events serialize"),
        ));
    }
    if server.args.kube.kubernetes {
        return Ok(None);
    }
    let stored = server.store.get_object(&ObjectKey {
        kind: Kind::Pod,
        namespace,
        name,
    })?;
    Ok(stored.as_ref().and_then(|object| {
        let Object::Pod(pod) = object else {
            return None;
        };
        let node = pod.spec.as_ref()?.node_name.clone()?;
        let annotations = pod.metadata.annotations.as_ref()?;
        let mut choice: Value = serde_json::from_str(annotations.get(CHOICE_ANNOTATION)?).ok()?;
        let time = choice.as_object_mut()?.remove("timeMillis");
        let attempts = annotations
            .get(ATTEMPTS_ANNOTATION)
            .and_then(|a| a.parse::<u32>().ok());
        Some(json!({
            "type": "Scheduled",
            "pod": key,
            "node": node,
            "attempts": attempts,
            "timeMillis": time,
            "choice": choice,
        }))
    }))
}

/// `GET /v1/status/pods/{ns}/{name}`: where the scheduler has a pod: `pending` (with its queue,
/// `gated` among them, attempts and last message), `assumed` (placed, its binding not confirmed
/// yet), `bound` or `unknown`, with its node and placement when placed.
async fn pod_status(
    State(server): State<Shared>,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let key = format!("{namespace}/{name}");
    let asked = key.clone();
    let state = inspect(&server, move |service| service.pod_state(&asked)).await?;
    let (state, node, pending) = match state {
        Some(PodState::Pending(status)) => ("pending", None, Some(status)),
        Some(PodState::Assumed { node }) => ("assumed", Some(node), None),
        Some(PodState::Bound { node }) => ("bound", Some(node), None),
        None => ("unknown", None, None),
    };
    let placement = match node {
        Some(_) => placement_of(&server, namespace, name)?,
        None => None,
    };
    let mut body = json!({
        "pod": key,
        "state": state,
        "node": node,
        "placement": placement,
    });
    if let Some(status) = pending {
        body["queue"] = status.queue.name().into();
        body["attempts"] = status.attempts.into();
        body["message"] = status.message.into();
    }
    Ok(Json(body).into_response())
}

/// `GET /v1/status/gangs`: each gang (PodGroup, or group label without one) with its
/// `minMember`, how many members have a node, and each member's state (`bound`, `binding`,
/// `waiting` at Permit, `pending`) and node.
async fn gangs(State(server): State<Shared>) -> Result<Response, ApiError> {
    let gangs = inspect(&server, |service| service.gangs()).await?;
    Ok(Json(json!({ "gangs": gangs })).into_response())
}

/// `GET /v1/status/plugins`: each plugin with its version, digest, language and health (as
/// `GET /admin/plugins`), each profile's chains, and the configuration.
/// The configuration (which may hold plugins' settings, such as licence keys) is left out
/// unless the request may read it through `GET /admin/config`.
async fn plugins(State(server): State<Shared>, headers: HeaderMap) -> Result<Response, ApiError> {
    let mut body = admin::plugin_list(&server).await;
    let policy = server.policy.lock().await;
    body["profiles"] = serde_json::to_value(&policy.chains).expect("chains serialize");
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if server.tokens.check(Access::Admin, authorization).is_ok() {
        body["config"] = admin::config_text(&policy).into();
    }
    body["configSource"] = admin::config_source(&policy).into();
    body["adminTokenRequired"] = server.tokens.guarded(Access::Admin).into();
    Ok(Json(body).into_response())
}
