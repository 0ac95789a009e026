//! Cluster objects under `/v1` (list, get, create, replace, delete, apply many) and the watch of
//! scheduling events.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::path::Path as FsPath;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{guard, limit_bodies, ApiError, Shared};
use crate::auth::Access;
use crate::store::{kind_name, object_json, Rejection, StoreError, WriteMode, Written};
use crate::watch::{WatchEvent, WatchLog};
use crate::Server;
use k8s_openapi::api::core::v1 as core;
use wasched_core::events::{Action, Event, Kind, Object, ObjectKey};
use wasched_core::input;
use wasched_core::k8s;
use wasched_core::service::ExplainError;

/// Reads need a read token, changes a write token (when the cluster API is guarded).
fn needs(method: &Method) -> Access {
    match *method {
        Method::GET | Method::HEAD => Access::Read,
        _ => Access::Write,
    }
}

/// The cluster API's routes.
pub(super) fn routes(server: &Shared) -> Router<Shared> {
    let mut cluster = Router::new()
        .route("/v1/objects", axum::routing::post(apply_objects))
        .route("/v1/watch", get(watch_events))
        .route(
            "/v1/namespaces/{namespace}/pods/{name}/explain",
            get(explain_pod),
        );
    // In Kubernetes mode the API server holds the objects: only the scheduling events are ours.
    let kinds = if server.args.kube.kubernetes {
        &[][..]
    } else {
        &Kind::ALL[..]
    };
    for &kind in kinds {
        cluster = if kind.is_namespaced() {
            namespaced_routes(cluster, kind.resource(), kind)
        } else {
            cluster_wide_routes(cluster, kind.resource(), kind)
        };
    }
    guard(
        limit_bodies(cluster, server.args.max_request_bytes),
        server,
        needs,
    )
}

/// List, create, get, replace and delete of a namespaced resource; listed across namespaces too.
fn namespaced_routes(cluster: Router<Shared>, resource: &str, kind: Kind) -> Router<Shared> {
    let list = move |s: State<Shared>| async move { list(s, kind, None).await };
    cluster
        .route(&format!("/v1/{resource}"), get(list))
        .route(
            &format!("/v1/namespaces/{{namespace}}/{resource}"),
            get(move |s: State<Shared>, Path(ns): Path<String>| async move {
                self::list(s, kind, Some(ns)).await
            })
            .post(
                move |s: State<Shared>,
                      Path(ns): Path<String>,
                      headers: HeaderMap,
                      body: Result<Bytes, BytesRejection>| async move {
                    create(s, kind, Some(ns), headers, body).await
                },
            ),
        )
        .route(
            &format!("/v1/namespaces/{{namespace}}/{resource}/{{name}}"),
            get(
                move |s: State<Shared>, Path((ns, name)): Path<(String, String)>| async move {
                    get_one(s, kind, ns, name).await
                },
            )
            .put(
                move |s: State<Shared>,
                      Path((ns, name)): Path<(String, String)>,
                      headers: HeaderMap,
                      body: Result<Bytes, BytesRejection>| async move {
                    replace(s, kind, ns, name, headers, body).await
                },
            )
            .delete(
                move |s: State<Shared>, Path((ns, name)): Path<(String, String)>| async move {
                    delete(s, kind, ns, name).await
                },
            ),
        )
}

/// List, create, get, replace and delete of a resource outside namespaces.
fn cluster_wide_routes(cluster: Router<Shared>, resource: &str, kind: Kind) -> Router<Shared> {
    let list = move |s: State<Shared>| async move { list(s, kind, None).await };
    // `/v1/namespaces/{namespace}` shares its first segments with the namespaced routes, whose
    // parameter there is named `namespace`; the router wants one name per place.
    let one = if kind == Kind::Namespace {
        "{namespace}"
    } else {
        "{name}"
    };
    cluster
        .route(
            &format!("/v1/{resource}"),
            get(list).post(
                move |s: State<Shared>,
                      headers: HeaderMap,
                      body: Result<Bytes, BytesRejection>| async move {
                    create(s, kind, None, headers, body).await
                },
            ),
        )
        .route(
            &format!("/v1/{resource}/{one}"),
            get(move |s: State<Shared>, Path(name): Path<String>| async move {
                get_one(s, kind, String::new(), name).await
            })
            .put(
                move |s: State<Shared>,
                      Path(name): Path<String>,
                      headers: HeaderMap,
                      body: Result<Bytes, BytesRejection>| async move {
                    replace(s, kind, String::new(), name, headers, body).await
                },
            )
            .delete(
                move |s: State<Shared>, Path(name): Path<String>| async move {
                    delete(s, kind, String::new(), name).await
                },
            ),
        )
}

/// Why a pending pod waits: its queue, attempts and last FitError, and a dry-run cycle against the
/// live cache with every examined node's verdict or scores, as `simulate --explain` prints them.
async fn explain_pod(
    State(server): State<Shared>,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let key = format!("{namespace}/{name}");
    let s = server.clone();
    let asked = key.clone();
    let answer = tokio::task::spawn_blocking(move || s.engine.explain(asked))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e))?;
    let explanation = answer.map_err(|e| match e {
        ExplainError::Unknown => ApiError::new(
            StatusCode::NOT_FOUND,
            format!("pod {key:?} is not pending: {e}"),
        ),
        ExplainError::NotScheduling => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
        }
        _ => ApiError::new(StatusCode::CONFLICT, format!("pod {key:?}: {e}")),
    })?;
    let status = explanation.status;
    let outcome = explanation.outcome;
    Ok(Json(json!({
        "pod": key,
        "queue": status.queue.name(),
        "attempts": status.attempts,
        "lastMessage": status.message,
        "node": outcome.node,
        "message": outcome.message,
        "error": outcome.error,
        "nodes": outcome.nodes,
        "preemption": outcome.preemption,
        "preemptionCandidates": outcome.preemption_candidates,
    }))
    .into_response())
}

/// Parses a request body (JSON, or YAML by `Content-Type` or by its first character).
fn parse_body(headers: &HeaderMap, body: &[u8]) -> Result<Vec<Value>, ApiError> {
    let (text, json) = body_text(headers, body)?;
    if json {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, format!("invalid JSON: {e}")))?;
        return Ok(vec![value]);
    }
    let documents =
        input::yaml_documents(text).map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e))?;
    Ok(documents.into_iter().filter(|d| !d.is_null()).collect())
}

/// A request body's text, and whether it is JSON (by `Content-Type`, or by its first character).
fn body_text<'b>(headers: &HeaderMap, body: &'b [u8]) -> Result<(&'b str, bool), ApiError> {
    let text = std::str::from_utf8(body)
        .map_err(|_| ApiError::new(StatusCode::BAD_REQUEST, "the request body is not UTF-8"))?;
    let text = input::without_bom(text);
    if text.trim().is_empty() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "the request body is empty",
        ));
    }
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let json = if content_type.contains("json") {
        true
    } else if content_type.contains("yaml") {
        false
    } else {
        text.trim_start().starts_with('{')
    };
    Ok((text, json))
}

/// The objects of a request body, read a document (or a List's item) at a time and every pod
/// kept as JSON until it is written: a large List is never held as JSON values, nor as typed
/// objects, all at once.
fn objects_of_body(
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(CheckedObjects, BTreeMap<String, usize>), ApiError> {
    let (text, json) = body_text(headers, body)?;
    let cluster =
        input::parse_text_compact(text, json, FsPath::new("request body")).map_err(|e| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                e.to_string().replace("request body: document 1, ", ""),
            )
        })?;
    checked_objects(cluster)
}

/// Turns JSON documents (objects or lists) into checked objects, and the kinds wasched does not
/// keep, counted: a file of manifests holds Services and Deployments beside the Pods, and `simulate`
/// skips them too. A request with nothing but such kinds is refused, since it changes nothing.
fn objects_of(documents: Vec<Value>) -> Result<(Vec<Object>, BTreeMap<String, usize>), ApiError> {
    let text = json!({"kind": "List", "apiVersion": "v1", "items": documents}).to_string();
    let cluster = input::parse_text(&text, true, FsPath::new("request body")).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            e.to_string().replace("request body: document 1, ", ""),
        )
    })?;
    let (objects, skipped) = checked_objects(cluster)?;
    Ok((objects.collect(), skipped))
}

/// The objects of a parsed body, in the order a cluster is best loaded, namespaced as the API
/// server would as each is reached.
type CheckedObjects = Box<dyn Iterator<Item = Object> + Send>;

/// The objects of a parsed body, and the kinds skipped.
fn checked_objects(
    mut cluster: input::Cluster,
) -> Result<(CheckedObjects, BTreeMap<String, usize>), ApiError> {
    let skipped = std::mem::take(&mut cluster.skipped);
    if cluster.kept_objects() == 0 && !skipped.is_empty() {
        let kinds: Vec<&str> = skipped.keys().map(String::as_str).collect();
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!(
                "unsupported kind(s) {}: wasched serves {}",
                kinds.join(", "),
                Kind::ALL.map(Kind::name).join(", ")
            ),
        ));
    }
    let objects = cluster.into_object_iter().map(|mut object| {
        let namespaced = object.kind().is_namespaced();
        let metadata = object.metadata_mut();
        if namespaced {
            if metadata.namespace.as_deref().is_none_or(str::is_empty) {
                metadata.namespace = Some("default".into());
            }
        } else {
            metadata.namespace = None;
        }
        object
    });
    Ok((Box::new(objects), skipped))
}

/// One object of `kind` from a resource endpoint's body, with the path's namespace and name.
fn one_object(
    kind: Kind,
    namespace: Option<&str>,
    name: Option<&str>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Object, ApiError> {
    let mut documents = parse_body(headers, body)?;
    if documents.len() != 1 {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!(
                "expected one {} object, got {} documents (POST /v1/objects takes many)",
                kind_name(kind),
                documents.len()
            ),
        ));
    }
    let value = &mut documents[0];
    let Some(map) = value.as_object_mut() else {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "the body is not an object",
        ));
    };
    match map.get("kind").and_then(Value::as_str) {
        None => {
            map.insert("kind".into(), kind_name(kind).into());
        }
        Some(k) if k == kind_name(kind) => {}
        Some(k) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("a {k} was sent to the {} endpoint", kind_name(kind)),
            ))
        }
    }
    let metadata = map
        .entry("metadata")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(|| ApiError::new(StatusCode::BAD_REQUEST, "metadata is not an object"))?;
    for (field, wanted) in [("namespace", namespace), ("name", name)] {
        let Some(wanted) = wanted else { continue };
        match metadata.get(field).and_then(Value::as_str) {
            None | Some("") => {
                metadata.insert(field.into(), wanted.into());
            }
            Some(given) if given == wanted => {}
            Some(given) => {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    format!("metadata.{field} {given:?} does not match the URL's {wanted:?}"),
                ))
            }
        }
    }
    let (mut objects, _) = objects_of(documents)?;
    Ok(objects.remove(0))
}

/// Keeps what the server owns when a client writes an object, as the API server does on a
/// replace: its uid; for pods the binding, the scheduler's condition and nomination, and the
/// status; for claims and volumes what VolumeBinding and the PV controller wrote (a claim's
/// `volumeName`, bind annotations and status, a volume's `claimRef`, annotation and status
/// while the claim it names is bound to it). A client re-applying its manifests, or retrying a
/// batch that was stored but not answered, must never unbind a claim under a bound pod;
/// `lookup` reads other stored objects.
fn merge(
    server: &Server,
    stored: Option<&Object>,
    incoming: &mut Object,
    lookup: &dyn Fn(&ObjectKey) -> Option<Object>,
) -> Result<(), String> {
    let stored_uid = stored.and_then(|s| s.metadata().uid.clone());
    let metadata = incoming.metadata_mut();
    metadata.uid = stored_uid.or_else(|| metadata.uid.take()).or_else(|| {
        let mut rng = server.uids.lock().unwrap_or_else(|e| e.into_inner());
        Some(crate::engine::new_uid(&mut rng))
    });
    match (stored, incoming) {
        (Some(Object::Pod(old)), Object::Pod(new)) => keep_pod_binding(old, new),
        (Some(Object::PersistentVolumeClaim(old)), Object::PersistentVolumeClaim(new)) => {
            keep_claim_binding(old, new)
        }
        (Some(Object::PersistentVolume(old)), Object::PersistentVolume(new)) => {
            keep_volume_binding(old, new, lookup)
        }
        _ => Ok(()),
    }
}

/// The annotations the scheduler and the PV controller write on claims and volumes.
const BINDER_ANNOTATIONS: [&str; 3] = [
    k8s::ANNOTATION_BIND_COMPLETED,
    k8s::ANNOTATION_BOUND_BY_CONTROLLER,
    k8s::ANNOTATION_SELECTED_NODE,
];

/// Copies each of `keys` that `old` has and `new` lacks.
fn keep_annotations(
    old: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    new: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    keys: &[&str],
) {
    for key in keys {
        if let Some(value) = old.annotations.as_ref().and_then(|a| a.get(*key)) {
            new.annotations
                .get_or_insert_with(Default::default)
                .entry((*key).to_string())
                .or_insert_with(|| value.clone());
        }
    }
}

/// A field the binder set (`bound`) in the client's object: taken when left out, refused with
/// `refusal(bound, given)` when set to anything else.
fn keep_bound(
    bound: String,
    given: &mut Option<String>,
    refusal: impl FnOnce(&str, &str) -> String,
) -> Result<(), String> {
    match given.as_deref() {
        None | Some("") => *given = Some(bound),
        Some(g) if g == bound => {}
        Some(g) => return Err(refusal(&bound, g)),
    }
    Ok(())
}

fn keep_pod_binding(old: &core::Pod, new: &mut core::Pod) -> Result<(), String> {
    let bound = old
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .filter(|n| !n.is_empty());
    if let Some(bound) = bound {
        let spec = new.spec.get_or_insert_with(Default::default);
        keep_bound(bound, &mut spec.node_name, |bound, n| {
            format!("spec.nodeName is immutable once set: the pod is bound to {bound}, not {n}")
        })?;
    }
    keep_annotations(
        &old.metadata,
        &mut new.metadata,
        &[
            crate::engine::ATTEMPTS_ANNOTATION,
            crate::engine::CHOICE_ANNOTATION,
        ],
    );
    let Some(old_status) = &old.status else {
        return Ok(());
    };
    let status = new.status.get_or_insert_with(|| old_status.clone());
    // The controller's record of the claims it made: without it the pod would get new ones.
    if status.resource_claim_statuses.is_none() {
        status
            .resource_claim_statuses
            .clone_from(&old_status.resource_claim_statuses);
    }
    if status.nominated_node_name.is_none() {
        status
            .nominated_node_name
            .clone_from(&old_status.nominated_node_name);
    }
    let scheduled = |s: &core::PodStatus| {
        s.conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "PodScheduled")
            .cloned()
    };
    if let (None, Some(condition)) = (scheduled(status), scheduled(old_status)) {
        status
            .conditions
            .get_or_insert_with(Vec::new)
            .push(condition);
    }
    Ok(())
}

fn keep_claim_binding(
    old: &core::PersistentVolumeClaim,
    new: &mut core::PersistentVolumeClaim,
) -> Result<(), String> {
    let bound = old
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.clone())
        .filter(|v| !v.is_empty());
    keep_annotations(&old.metadata, &mut new.metadata, &BINDER_ANNOTATIONS);
    let Some(bound) = bound else {
        if new.status.is_none() {
            new.status.clone_from(&old.status);
        }
        return Ok(());
    };
    let spec = new.spec.get_or_insert_with(Default::default);
    keep_bound(bound, &mut spec.volume_name, |bound, v| {
        format!(
            "spec.volumeName is immutable once the claim is bound: it is bound to persistentvolume {bound:?}, not {v:?}"
        )
    })?;
    // The binder's status (Bound, capacity, access modes) stands while the claim is bound.
    new.status.clone_from(&old.status);
    Ok(())
}

/// A volume keeps its `claimRef` while the claim it names is bound to it; once that claim is
/// gone (the volume released), the client's volume stands, as an administrator or a local
/// volume provisioner makes it anew.
fn keep_volume_binding(
    old: &core::PersistentVolume,
    new: &mut core::PersistentVolume,
    lookup: &dyn Fn(&ObjectKey) -> Option<Object>,
) -> Result<(), String> {
    let claim_of = |r: &core::ObjectReference| {
        (
            r.namespace.clone().unwrap_or_else(|| "default".into()),
            r.name.clone().unwrap_or_default(),
        )
    };
    let volume_name = old.metadata.name.as_deref().unwrap_or_default();
    let bound_claim = old
        .spec
        .as_ref()
        .and_then(|s| s.claim_ref.clone())
        .filter(|held| {
            let (namespace, name) = claim_of(held);
            let key = ObjectKey {
                kind: Kind::PersistentVolumeClaim,
                namespace,
                name,
            };
            matches!(lookup(&key), Some(Object::PersistentVolumeClaim(claim))
                if claim.spec.as_ref().and_then(|s| s.volume_name.as_deref()) == Some(volume_name))
        });
    let Some(held) = bound_claim else {
        if new.status.is_none() {
            new.status.clone_from(&old.status);
        }
        return Ok(());
    };
    keep_annotations(
        &old.metadata,
        &mut new.metadata,
        &[k8s::ANNOTATION_BOUND_BY_CONTROLLER],
    );
    let spec = new.spec.get_or_insert_with(Default::default);
    match &spec.claim_ref {
        None => spec.claim_ref = Some(held),
        Some(given) if claim_of(given) == claim_of(&held) => {
            // The binder's reference carries the claim's uid; a manifest's usually does not.
            if given.uid.as_deref().is_none_or(str::is_empty) {
                spec.claim_ref = Some(held);
            }
        }
        Some(given) => {
            let (held_ns, held_name) = claim_of(&held);
            let (ns, name) = claim_of(given);
            return Err(format!(
                "spec.claimRef cannot be changed while the volume is bound: it holds claim {held_ns}/{held_name}, not {ns}/{name}"
            ));
        }
    }
    new.status.clone_from(&old.status);
    Ok(())
}

/// Hands what was written to the scheduler, as the JSON stored: a write of a large List submits
/// every object at once, and the pipeline types each only when the scheduler applies it.
fn submit_written(server: &Server, written: &[Written]) {
    for w in written {
        server
            .pipeline
            .submit_json(Action::Upsert, w.key.clone(), w.json.clone(), w.version);
    }
}

/// `POST /v1/objects`'s answer: what was written, and the kinds skipped.
#[derive(serde::Serialize)]
struct AppliedObjects<'a> {
    items: Vec<Applied<'a>>,
    skipped: &'a BTreeMap<String, usize>,
}

/// An object written, as `POST /v1/objects` answers it.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Applied<'a> {
    kind: &'static str,
    name: &'a str,
    namespace: &'a str,
    resource_version: String,
    result: &'static str,
}

async fn write(
    server: Shared,
    objects: impl IntoIterator<Item = Object> + Send + 'static,
    mode: WriteMode,
) -> Result<Vec<Written>, ApiError> {
    let s = server.clone();
    let outcome = tokio::task::spawn_blocking(move || {
        s.store.write_objects_then(
            objects,
            mode,
            |stored, incoming, lookup| merge(&s, stored, incoming, lookup),
            |txn, written| {
                let mut rng = s.uids.lock().unwrap_or_else(|e| e.into_inner());
                crate::claims::follow_write(txn, written, &mut rng)
            },
        )
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    let describe = |key: &ObjectKey| {
        if key.namespace.is_empty() {
            format!("{} {}", kind_name(key.kind), key.name)
        } else {
            format!("{} {}/{}", kind_name(key.kind), key.namespace, key.name)
        }
    };
    match outcome {
        Ok((written, followed)) => {
            submit_written(&server, &written);
            for event in followed {
                server.pipeline.submit(event);
            }
            Ok(written)
        }
        Err(Rejection::Exists { key, .. }) => Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("{} already exists (PUT replaces it)", describe(&key)),
        )),
        Err(Rejection::Refused { key, reason, .. }) => Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("{}: {reason}", describe(&key)),
        )),
    }
}

/// Runs `parse` on the blocking pool: parsing and checking a body of several megabytes takes
/// hundreds of milliseconds, which on one of the two HTTP workers would hold up `/healthz` and
/// every other request behind it.
async fn off_the_workers<T: Send + 'static>(
    parse: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(parse)
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
}

async fn create(
    State(server): State<Shared>,
    kind: Kind,
    namespace: Option<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body?;
    let object =
        off_the_workers(move || one_object(kind, namespace.as_deref(), None, &headers, &body))
            .await?;
    let written = write(server, vec![object], WriteMode::Create).await?;
    Ok(stored_json(StatusCode::CREATED, &written[0]))
}

async fn replace(
    State(server): State<Shared>,
    kind: Kind,
    namespace: String,
    name: String,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body?;
    let object = off_the_workers(move || {
        let namespace = (!namespace.is_empty()).then_some(namespace.as_str());
        one_object(kind, namespace, Some(&name), &headers, &body)
    })
    .await?;
    let written = write(server, vec![object], WriteMode::Upsert).await?;
    let status = if written[0].created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(stored_json(status, &written[0]))
}

/// `POST /v1/objects`: any number of objects (multi-document YAML, a `List`, or one object),
/// created or replaced in one transaction.
async fn apply_objects(
    State(server): State<Shared>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body?;
    let (objects, skipped) = off_the_workers(move || objects_of_body(&headers, &body)).await?;
    let written = write(server, objects, WriteMode::Upsert).await?;
    let items: Vec<Applied<'_>> = written
        .iter()
        .map(|w| Applied {
            kind: kind_name(w.key.kind),
            name: &w.key.name,
            namespace: &w.key.namespace,
            resource_version: w.version.to_string(),
            result: if w.created { "created" } else { "updated" },
        })
        .collect();
    Ok(Json(AppliedObjects {
        items,
        skipped: &skipped,
    })
    .into_response())
}

/// An object as the store wrote it, as the answer to its write.
fn stored_json(status: StatusCode, written: &Written) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        Bytes::copy_from_slice(&written.json),
    )
        .into_response()
}

/// A List of the stored objects, written from the JSON stored: listing every pod of a large
/// cluster decodes none of them.
async fn list(
    State(server): State<Shared>,
    kind: Kind,
    namespace: Option<String>,
) -> Result<Response, ApiError> {
    let body = off_the_workers(move || {
        let mut body = Vec::new();
        body.extend_from_slice(b"{\"apiVersion\":");
        write_json(&mut body, kind.api_version());
        body.extend_from_slice(b",\"items\":[");
        let mut first = true;
        let version = server
            .store
            .for_each_json(Some(kind), namespace.as_deref(), |_, json| {
                if !first {
                    body.push(b',');
                }
                first = false;
                body.extend_from_slice(json);
                Ok(())
            })?;
        body.extend_from_slice(b"],\"kind\":");
        write_json(&mut body, &format!("{}List", kind_name(kind)));
        body.extend_from_slice(b",\"metadata\":{\"resourceVersion\":");
        write_json(&mut body, &version.to_string());
        body.extend_from_slice(b"}}");
        Ok(body)
    })
    .await?;
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

/// Appends `text` as a JSON string.
fn write_json(body: &mut Vec<u8>, text: &str) {
    serde_json::to_writer(body, text).expect("a string serializes");
}

fn key(kind: Kind, namespace: String, name: String) -> ObjectKey {
    ObjectKey {
        kind,
        namespace,
        name,
    }
}

async fn get_one(
    State(server): State<Shared>,
    kind: Kind,
    namespace: String,
    name: String,
) -> Result<Response, ApiError> {
    let key = key(kind, namespace, name);
    match server.store.get_object(&key)? {
        Some(object) => Ok(Json(object_json(&object)).into_response()),
        None => Err(not_found(&key)),
    }
}

fn not_found(key: &ObjectKey) -> ApiError {
    if key.namespace.is_empty() {
        ApiError::new(
            StatusCode::NOT_FOUND,
            format!("{} {:?} not found", kind_name(key.kind), key.name),
        )
    } else {
        ApiError::new(
            StatusCode::NOT_FOUND,
            format!(
                "{} {:?} not found in namespace {:?}",
                kind_name(key.kind),
                key.name,
                key.namespace
            ),
        )
    }
}

async fn delete(
    State(server): State<Shared>,
    kind: Kind,
    namespace: String,
    name: String,
) -> Result<Response, ApiError> {
    let key = key(kind, namespace, name);
    let s = server.clone();
    let k = key.clone();
    let deleted = tokio::task::spawn_blocking(move || {
        s.store.transaction(|txn| {
            let Some((version, object)) = txn.delete(&k)? else {
                return Ok(None);
            };
            let followed = crate::claims::follow_deletion(txn, &object)?;
            Ok::<_, StoreError>(Some((version, object, followed)))
        })
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))???;
    let Some((version, object, followed)) = deleted else {
        return Err(not_found(&key));
    };
    let body = object_json(&object);
    server
        .pipeline
        .submit(Event::with_version(Action::Delete, object, version));
    for event in followed {
        server.pipeline.submit(event);
    }
    Ok(Json(body).into_response())
}

// ----- watch -----------------------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WatchQuery {
    resource_version: Option<String>,
    /// Also send a `PolicyChanged` event (its data the count of changes so far) when a plugin is
    /// loaded or removed or the configuration changes, and one at the start: the status page
    /// follows both on one connection (browsers allow six per server).
    #[serde(default)]
    policy_changes: bool,
}

struct WatchState {
    log: Arc<WatchLog>,
    last: u64,
    pending: VecDeque<WatchEvent>,
    changed: tokio::sync::watch::Receiver<u64>,
    shutdown: tokio::sync::watch::Receiver<bool>,
    /// With `policyChanges`: the policy's change count, marked changed to send it at the start.
    policy: Option<tokio::sync::watch::Receiver<u64>>,
    done: bool,
}

/// `GET /v1/watch?resourceVersion=N`: server-sent events, one per binding (`Scheduled`) or failed
/// attempt (`FailedScheduling`), newer than N (default: from now). Each event's `id` is its
/// resource version, so a client that reconnects with `Last-Event-ID` misses nothing. With
/// `policyChanges=true`, also `PolicyChanged` events ([`WatchQuery::policy_changes`]).
async fn watch_events(
    State(server): State<Shared>,
    query: Result<Query<WatchQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let Query(query) = query?;
    let requested = query.resource_version.or_else(|| {
        headers
            .get("last-event-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    });
    let from = match requested.as_deref() {
        None | Some("") => server.watch.newest(),
        Some(text) => text.parse::<u64>().map_err(|_| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("resourceVersion {text:?} is not a number"),
            )
        })?,
    };
    let changed = server.watch.subscribe();
    let first = server.watch.since(from).map_err(|too_old| {
        ApiError::new(
            StatusCode::GONE,
            format!(
                "too old resource version: {from} (the oldest available is {}); list again and watch from the list's resourceVersion",
                too_old.oldest_available
            ),
        )
    })?;
    let state = WatchState {
        log: server.watch.clone(),
        last: from,
        pending: first.into(),
        changed,
        shutdown: server.shutdown.subscribe(),
        policy: query.policy_changes.then(|| {
            let mut policy = server.policy_changes.subscribe();
            policy.mark_changed();
            policy
        }),
        done: false,
    };
    let stream = futures_util::stream::unfold(state, next_watch_event);
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// The next event of a watch: a logged change, a policy change, or the end (the server stopping,
/// the log gone, or the watch falling behind, which is said once as an `error` event).
async fn next_watch_event(
    mut st: WatchState,
) -> Option<(Result<SseEvent, Infallible>, WatchState)> {
    loop {
        if let Some(event) = st.pending.pop_front() {
            st.last = event.resource_version;
            let sse = SseEvent::default()
                .id(event.resource_version.to_string())
                .event(event.kind)
                .json_data(&event)
                .expect("watch events serialize");
            return Some((Ok::<_, Infallible>(sse), st));
        }
        if st.done || *st.shutdown.borrow() {
            return None;
        }
        if let Some(policy) = st
            .policy
            .as_mut()
            .filter(|p| p.has_changed().unwrap_or(false))
        {
            let count = *policy.borrow_and_update();
            let sse = SseEvent::default()
                .event("PolicyChanged")
                .data(count.to_string());
            return Some((Ok(sse), st));
        }
        match st.log.since(st.last) {
            Ok(events) if !events.is_empty() => {
                st.pending.extend(events);
                continue;
            }
            Ok(_) => {}
            Err(_) => {
                st.done = true;
                let sse = SseEvent::default()
                    .event("error")
                    .data("410 Expired: this watch fell behind the retained events; list again");
                return Some((Ok(sse), st));
            }
        }
        let policy_changed = {
            let policy_changed = async {
                match st.policy.as_mut() {
                    Some(policy) => policy.changed().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = st.changed.changed() => if changed.is_err() { return None } else { false },
                _ = st.shutdown.changed() => return None,
                changed = policy_changed => if changed.is_err() { return None } else { true },
            }
        };
        // `changed()` marked the new count seen; the next turn sends it.
        if let Some(policy) = st.policy.as_mut().filter(|_| policy_changed) {
            policy.mark_changed();
        }
    }
}
