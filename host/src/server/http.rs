//! The HTTP API: cluster objects under `/v1`, the watch, `/admin`, health and metrics.
//!
//! Every error is a Kubernetes `Status` object (`{"kind":"Status","status":"Failure","message":...,
//! "reason":...,"code":...}`), so `kubectl`-minded clients and scripts read one shape.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::fmt::Write as _;
use std::path::Path as FsPath;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Multipart, Path, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::store::{kind_name, object_json, Rejection, WriteMode};
use super::watch::{WatchEvent, WatchLog};
use super::{PolicyError, Server};
use crate::events::{Action, Event, Kind, Object, ObjectKey};
use crate::input;
use crate::metrics::ExtensionPoint;
use crate::runtime::defaults;
use crate::runtime::wasm::sha256_hex;

type Shared = Arc<Server>;

/// An API error as a Kubernetes `Status`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn new(status: u16, message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            message: message.into(),
        }
    }
}

impl From<PolicyError> for ApiError {
    fn from(e: PolicyError) -> Self {
        ApiError::new(e.status, e.message)
    }
}

impl From<super::store::StoreError> for ApiError {
    fn from(e: super::store::StoreError) -> Self {
        ApiError::new(500, e.to_string())
    }
}

impl From<BytesRejection> for ApiError {
    fn from(e: BytesRejection) -> Self {
        let status = e.status();
        let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
            "request body too large (see --max-request-bytes / --max-component-bytes)".to_string()
        } else {
            e.body_text()
        };
        ApiError { status, message }
    }
}

fn reason(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        409 => "AlreadyExists",
        410 => "Expired",
        413 => "RequestEntityTooLarge",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        503 => "ServiceUnavailable",
        _ => "InternalError",
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "message": self.message,
            "reason": reason(self.status),
            "code": self.status.as_u16(),
        });
        (self.status, Json(body)).into_response()
    }
}

/// A resource path segment, its kind and whether it lives in a namespace.
const RESOURCES: &[(&str, Kind, bool)] = &[
    ("nodes", Kind::Node, false),
    ("persistentvolumes", Kind::PersistentVolume, false),
    ("storageclasses", Kind::StorageClass, false),
    ("pods", Kind::Pod, true),
    ("persistentvolumeclaims", Kind::PersistentVolumeClaim, true),
];

/// The routes.
pub fn router(server: Shared) -> Router {
    let mut cluster = Router::new()
        .route("/v1/objects", axum::routing::post(apply_objects))
        .route("/v1/watch", get(watch_events));
    for &(resource, kind, namespaced) in RESOURCES {
        let list = move |s: State<Shared>| async move { list(s, kind, None).await };
        if namespaced {
            cluster = cluster
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
                );
        } else {
            cluster = cluster
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
                    &format!("/v1/{resource}/{{name}}"),
                    get(
                        move |s: State<Shared>, Path(name): Path<String>| async move {
                            get_one(s, kind, String::new(), name).await
                        },
                    )
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
                );
        }
    }
    let request_limit = server.args.max_request_bytes;
    let cluster = cluster
        .layer(DefaultBodyLimit::max(request_limit))
        .layer(middleware::from_fn(move |request: Request, next: Next| {
            refuse_oversized(request_limit, request, next)
        }));
    let component_limit = server.args.max_component_bytes;
    let admin = Router::new()
        .route("/admin/plugins", get(list_plugins).post(upload_multipart))
        .route(
            "/admin/plugins/{name}",
            put(upload_raw).delete(remove_plugin),
        )
        .route("/admin/config", get(get_config).put(put_config))
        .layer(DefaultBodyLimit::max(component_limit))
        .layer(middleware::from_fn(move |request: Request, next: Next| {
            refuse_oversized(component_limit, request, next)
        }))
        .route_layer(middleware::from_fn_with_state(
            server.clone(),
            require_token,
        ));
    Router::new()
        .merge(cluster)
        .merge(admin)
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
        .fallback(|| async { ApiError::new(404, "no such endpoint (see /openapi.json)") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                405,
                "method not allowed on this endpoint (see /openapi.json)",
            )
        })
        .with_state(server)
}

// ----- cluster objects -------------------------------------------------------------------------

/// Parses a request body (JSON, or YAML by `Content-Type` or by its first character).
fn parse_body(headers: &HeaderMap, body: &[u8]) -> Result<Vec<Value>, ApiError> {
    let text = std::str::from_utf8(body)
        .map_err(|_| ApiError::new(400, "the request body is not UTF-8"))?;
    let text = input::without_bom(text);
    if text.trim().is_empty() {
        return Err(ApiError::new(400, "the request body is empty"));
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
    if json {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| ApiError::new(400, format!("invalid JSON: {e}")))?;
        return Ok(vec![value]);
    }
    let documents = input::yaml_documents(text).map_err(|e| ApiError::new(400, e))?;
    Ok(documents.into_iter().filter(|d| !d.is_null()).collect())
}

/// Turns JSON documents (objects or lists) into checked objects, and the kinds wasched does not
/// keep, counted: a file of manifests holds Services and Deployments beside the Pods, and `simulate`
/// skips them too. A request with nothing but such kinds is refused, since it changes nothing.
fn objects_of(documents: Vec<Value>) -> Result<(Vec<Object>, BTreeMap<String, usize>), ApiError> {
    let text = json!({"kind": "List", "apiVersion": "v1", "items": documents}).to_string();
    let mut cluster = input::parse_text(&text, true, FsPath::new("request body"))
        .map_err(|e| ApiError::new(400, e.to_string().replace("request body: document 1, ", "")))?;
    let skipped = std::mem::take(&mut cluster.skipped);
    if cluster.kept_objects() == 0 && !skipped.is_empty() {
        let kinds: Vec<&str> = skipped.keys().map(String::as_str).collect();
        return Err(ApiError::new(
            400,
            format!(
                "unsupported kind(s) {}: wasched serves Node, Pod, PersistentVolume, PersistentVolumeClaim and StorageClass",
                kinds.join(", ")
            ),
        ));
    }
    let mut objects: Vec<Object> = Vec::new();
    objects.extend(
        cluster
            .classes
            .into_iter()
            .map(|o| Object::Class(Box::new(o))),
    );
    objects.extend(
        cluster
            .volumes
            .into_iter()
            .map(|o| Object::Volume(Box::new(o))),
    );
    objects.extend(
        cluster
            .claims
            .into_iter()
            .map(|o| Object::Claim(Box::new(o))),
    );
    objects.extend(cluster.nodes.into_iter().map(|o| Object::Node(Box::new(o))));
    objects.extend(cluster.pods.into_iter().map(|o| Object::Pod(Box::new(o))));
    for object in &mut objects {
        let (namespaced, metadata) = match object {
            Object::Pod(o) => (true, &mut o.metadata),
            Object::Claim(o) => (true, &mut o.metadata),
            Object::Node(o) => (false, &mut o.metadata),
            Object::Volume(o) => (false, &mut o.metadata),
            Object::Class(o) => (false, &mut o.metadata),
        };
        if namespaced {
            if metadata.namespace.as_deref().is_none_or(str::is_empty) {
                metadata.namespace = Some("default".into());
            }
        } else {
            metadata.namespace = None;
        }
    }
    Ok((objects, skipped))
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
            400,
            format!(
                "expected one {} object, got {} documents (POST /v1/objects takes many)",
                kind_name(kind),
                documents.len()
            ),
        ));
    }
    let value = &mut documents[0];
    let Some(map) = value.as_object_mut() else {
        return Err(ApiError::new(400, "the body is not an object"));
    };
    match map.get("kind").and_then(Value::as_str) {
        None => {
            map.insert("kind".into(), kind_name(kind).into());
        }
        Some(k) if k == kind_name(kind) => {}
        Some(k) => {
            return Err(ApiError::new(
                400,
                format!("a {k} was sent to the {} endpoint", kind_name(kind)),
            ))
        }
    }
    let metadata = map
        .entry("metadata")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(|| ApiError::new(400, "metadata is not an object"))?;
    for (field, wanted) in [("namespace", namespace), ("name", name)] {
        let Some(wanted) = wanted else { continue };
        match metadata.get(field).and_then(Value::as_str) {
            None | Some("") => {
                metadata.insert(field.into(), wanted.into());
            }
            Some(given) if given == wanted => {}
            Some(given) => {
                return Err(ApiError::new(
                    400,
                    format!("metadata.{field} {given:?} does not match the URL's {wanted:?}"),
                ))
            }
        }
    }
    let (mut objects, _) = objects_of(documents)?;
    Ok(objects.remove(0))
}

fn metadata_mut(
    object: &mut Object,
) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
    match object {
        Object::Node(o) => &mut o.metadata,
        Object::Pod(o) => &mut o.metadata,
        Object::Volume(o) => &mut o.metadata,
        Object::Claim(o) => &mut o.metadata,
        Object::Class(o) => &mut o.metadata,
    }
}

/// Keeps what the server owns when a client writes an object: its uid, and for pods the binding
/// and the status.
fn merge(server: &Server, stored: Option<&Object>, incoming: &mut Object) -> Result<(), String> {
    let stored_uid = stored.and_then(|s| match s {
        Object::Node(o) => o.metadata.uid.clone(),
        Object::Pod(o) => o.metadata.uid.clone(),
        Object::Volume(o) => o.metadata.uid.clone(),
        Object::Claim(o) => o.metadata.uid.clone(),
        Object::Class(o) => o.metadata.uid.clone(),
    });
    let metadata = metadata_mut(incoming);
    metadata.uid = stored_uid.or_else(|| metadata.uid.take()).or_else(|| {
        let mut rng = server.uids.lock().unwrap_or_else(|e| e.into_inner());
        Some(super::engine::new_uid(&mut rng))
    });
    if let (Some(Object::Pod(old)), Object::Pod(new)) = (stored, incoming) {
        let bound = old
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty());
        if let Some(bound) = bound {
            let spec = new.spec.get_or_insert_with(Default::default);
            match spec.node_name.as_deref() {
                None | Some("") => spec.node_name = Some(bound),
                Some(n) if n == bound => {}
                Some(n) => {
                    return Err(format!(
                        "spec.nodeName is immutable once set: the pod is bound to {bound}, not {n}"
                    ))
                }
            }
        }
        if new.status.is_none() {
            new.status = old.status.clone();
        }
    }
    Ok(())
}

fn submit_written(server: &Server, written: &[super::store::Written]) {
    for w in written {
        server.pipeline.submit(Event::with_version(
            Action::Upsert,
            w.object.clone(),
            w.version,
        ));
    }
}

async fn write(
    server: Shared,
    objects: Vec<Object>,
    mode: WriteMode,
) -> Result<Vec<super::store::Written>, ApiError> {
    let keys: Vec<ObjectKey> = objects.iter().map(Object::key).collect();
    let s = server.clone();
    let outcome = tokio::task::spawn_blocking(move || {
        s.store.write_objects(objects, mode, |stored, incoming| {
            merge(&s, stored, incoming)
        })
    })
    .await
    .map_err(|e| ApiError::new(500, e.to_string()))??;
    let describe = |index: usize| {
        let key = &keys[index];
        if key.namespace.is_empty() {
            format!("{} {}", kind_name(key.kind), key.name)
        } else {
            format!("{} {}/{}", kind_name(key.kind), key.namespace, key.name)
        }
    };
    match outcome {
        Ok(written) => {
            submit_written(&server, &written);
            Ok(written)
        }
        Err(Rejection::Exists { index }) => Err(ApiError::new(
            409,
            format!("{} already exists (PUT replaces it)", describe(index)),
        )),
        Err(Rejection::Refused { index, reason }) => {
            Err(ApiError::new(422, format!("{}: {reason}", describe(index))))
        }
    }
}

async fn create(
    State(server): State<Shared>,
    kind: Kind,
    namespace: Option<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body?;
    let object = one_object(kind, namespace.as_deref(), None, &headers, &body)?;
    let written = write(server, vec![object], WriteMode::Create).await?;
    Ok((StatusCode::CREATED, Json(object_json(&written[0].object))).into_response())
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
    let namespace = (!namespace.is_empty()).then_some(namespace.as_str());
    let object = one_object(kind, namespace, Some(&name), &headers, &body)?;
    let written = write(server, vec![object], WriteMode::Upsert).await?;
    let status = if written[0].created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(object_json(&written[0].object))).into_response())
}

/// `POST /v1/objects`: any number of objects (multi-document YAML, a `List`, or one object),
/// created or replaced in one transaction.
async fn apply_objects(
    State(server): State<Shared>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body?;
    let (objects, skipped) = objects_of(parse_body(&headers, &body)?)?;
    let written = write(server, objects, WriteMode::Upsert).await?;
    let items: Vec<Value> = written
        .iter()
        .map(|w| {
            let key = w.object.key();
            json!({
                "kind": kind_name(key.kind),
                "namespace": key.namespace,
                "name": key.name,
                "resourceVersion": w.version.to_string(),
                "result": if w.created { "created" } else { "updated" },
            })
        })
        .collect();
    Ok(Json(json!({ "items": items, "skipped": skipped })).into_response())
}

async fn list(
    State(server): State<Shared>,
    kind: Kind,
    namespace: Option<String>,
) -> Result<Response, ApiError> {
    let (version, objects) = server
        .store
        .list_objects(Some(kind), namespace.as_deref())?;
    let items: Vec<Value> = objects.iter().map(object_json).collect();
    Ok(Json(json!({
        "apiVersion": if kind == Kind::StorageClass { "storage.k8s.io/v1" } else { "v1" },
        "kind": format!("{}List", kind_name(kind)),
        "metadata": { "resourceVersion": version.to_string() },
        "items": items,
    }))
    .into_response())
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
            404,
            format!("{} {:?} not found", kind_name(key.kind), key.name),
        )
    } else {
        ApiError::new(
            404,
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
    let deleted = tokio::task::spawn_blocking(move || s.store.delete_object(&k))
        .await
        .map_err(|e| ApiError::new(500, e.to_string()))??;
    let Some((version, object)) = deleted else {
        return Err(not_found(&key));
    };
    let body = object_json(&object);
    server
        .pipeline
        .submit(Event::with_version(Action::Delete, object, version));
    Ok(Json(body).into_response())
}

// ----- watch -----------------------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WatchQuery {
    resource_version: Option<String>,
}

struct WatchState {
    log: Arc<WatchLog>,
    last: u64,
    pending: VecDeque<WatchEvent>,
    changed: tokio::sync::watch::Receiver<u64>,
    shutdown: tokio::sync::watch::Receiver<bool>,
    done: bool,
}

/// `GET /v1/watch?resourceVersion=N`: server-sent events, one per binding (`Scheduled`) or failed
/// attempt (`FailedScheduling`), newer than N (default: from now). Each event's `id` is its
/// resource version, so a client that reconnects with `Last-Event-ID` misses nothing.
async fn watch_events(
    State(server): State<Shared>,
    Query(query): Query<WatchQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let requested = query.resource_version.or_else(|| {
        headers
            .get("last-event-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    });
    let from = match requested.as_deref() {
        None | Some("") => server.watch.newest(),
        Some(text) => text
            .parse::<u64>()
            .map_err(|_| ApiError::new(400, format!("resourceVersion {text:?} is not a number")))?,
    };
    let changed = server.watch.subscribe();
    let first = server.watch.since(from).map_err(|too_old| {
        ApiError::new(
            410,
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
        done: false,
    };
    let stream = futures_util::stream::unfold(state, |mut st| async move {
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
            match st.log.since(st.last) {
                Ok(events) if !events.is_empty() => {
                    st.pending.extend(events);
                    continue;
                }
                Ok(_) => {}
                Err(_) => {
                    st.done = true;
                    let sse = SseEvent::default().event("error").data(
                        "410 Expired: this watch fell behind the retained events; list again",
                    );
                    return Some((Ok(sse), st));
                }
            }
            tokio::select! {
                changed = st.changed.changed() => if changed.is_err() { return None },
                _ = st.shutdown.changed() => return None,
            }
        }
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

// ----- admin -----------------------------------------------------------------------------------

/// The most of an oversized body read and dropped before answering 413.
const DRAIN_AT_MOST: u64 = 256 << 20;

/// Answers 413 to a body declared larger than `limit`. Unless the client asked to be told first
/// (`Expect: 100-continue`, which then gets no `100 Continue`), the body is read and dropped before
/// the answer: a client still sending it would otherwise see the connection reset (a broken pipe)
/// instead of the refusal.
async fn refuse_oversized(limit: usize, request: Request, next: Next) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let Some(length) = declared.filter(|&l| l > limit as u64) else {
        return next.run(request).await;
    };
    let waits_for_continue = request
        .headers()
        .get(header::EXPECT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
    if !waits_for_continue && length <= DRAIN_AT_MOST {
        use futures_util::StreamExt as _;
        let mut body = request.into_body().into_data_stream();
        while let Some(chunk) = body.next().await {
            if chunk.is_err() {
                break;
            }
        }
    }
    ApiError::new(
        413,
        format!(
            "request body too large: {length} bytes, at most {limit} (see --max-request-bytes / --max-component-bytes)"
        ),
    )
    .into_response()
}

async fn require_token(State(server): State<Shared>, request: Request, next: Next) -> Response {
    let Some(token) = &server.token else {
        return next.run(request).await;
    };
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        None => ApiError::new(
            401,
            "the admin API needs a bearer token: Authorization: Bearer <token>",
        )
        .into_response(),
        Some(given) if !constant_time_eq(given.trim().as_bytes(), token.as_bytes()) => {
            ApiError::new(403, "wrong bearer token").into_response()
        }
        Some(_) => next.run(request).await,
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn list_plugins(State(server): State<Shared>) -> Result<Response, ApiError> {
    let policy = server.policy.lock().await;
    let mut names: Vec<String> = defaults::DEFAULT_PLUGINS
        .iter()
        .map(|p| p.name.to_string())
        .collect();
    for name in policy.records.keys().chain(policy.usage.keys()) {
        if !names.contains(name) {
            names.push(name.clone());
        }
    }
    let plugins: Vec<Value> = names
        .iter()
        .map(|name| {
            let stats = server.plugin_stats.get(name);
            let p99: serde_json::Map<String, Value> = ExtensionPoint::ALL
                .iter()
                .filter_map(|&p| stats.p99(p).map(|v| (p.name().to_string(), json!(v))))
                .collect();
            let mut entry = json!({
                "name": name,
                "usedBy": policy.usage.get(name).cloned().unwrap_or_default(),
                "calls": stats.calls(),
                "errors": stats.errors(),
                "failures": stats
                    .failures_by_kind()
                    .into_iter()
                    .map(|(kind, n)| (kind.name().to_string(), json!(n)))
                    .collect::<serde_json::Map<String, Value>>(),
                "quarantineSecondsLeft": stats.quarantine_left().map(|d| d.as_secs()),
                "p99Seconds": p99,
            });
            let fields = entry.as_object_mut().expect("an object");
            if let Some(record) = policy.records.get(name) {
                fields.insert("source".into(), "uploaded".into());
                fields.insert("version".into(), record.version.clone().into());
                fields.insert("sha256".into(), record.sha256.clone().into());
                fields.insert("size".into(), record.size.into());
                fields.insert("uploadedAt".into(), record.uploaded_at.into());
            } else if let Some(default) = defaults::find(name) {
                fields.insert("source".into(), "default".into());
                fields.insert("version".into(), env!("CARGO_PKG_VERSION").into());
                fields.insert("sha256".into(), sha256_hex(default.component).into());
                fields.insert("size".into(), default.component.len().into());
            } else {
                fields.insert("source".into(), "config".into());
            }
            entry
        })
        .collect();
    Ok(Json(json!({ "plugins": plugins })).into_response())
}

#[derive(Deserialize)]
struct UploadQuery {
    sha256: Option<String>,
}

async fn load(
    server: Shared,
    name: String,
    bytes: Vec<u8>,
    sha256: Option<String>,
) -> Result<Response, ApiError> {
    if bytes.is_empty() {
        return Err(ApiError::new(
            400,
            "the upload is empty: send the component's bytes",
        ));
    }
    let mut policy = server.policy.clone().lock_owned().await;
    let s = server.clone();
    let (record, replaced, active) = tokio::task::spawn_blocking(move || {
        s.load_plugin(&mut policy, &name, bytes, sha256.as_deref())
    })
    .await
    .map_err(|e| ApiError::new(500, e.to_string()))??;
    let status = if replaced {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    let mut body = serde_json::to_value(&record).expect("records serialize");
    body["active"] = active.into();
    body["replaced"] = replaced.into();
    Ok((status, Json(body)).into_response())
}

/// `PUT /admin/plugins/{name}?sha256=...` with the component as the body.
async fn upload_raw(
    State(server): State<Shared>,
    Path(name): Path<String>,
    Query(query): Query<UploadQuery>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body?;
    load(server, name, body.to_vec(), query.sha256).await
}

/// `POST /admin/plugins` as `multipart/form-data` with fields `name`, `sha256` (optional) and
/// `component` (the file).
async fn upload_multipart(
    State(server): State<Shared>,
    mut multipart: Multipart,
) -> Result<Response, ApiError> {
    let (mut name, mut sha256, mut component) = (None, None, None);
    let bad = |e: axum::extract::multipart::MultipartError| {
        let status = e.status().as_u16();
        ApiError::new(
            status,
            format!("reading the multipart body: {}", e.body_text()),
        )
    };
    while let Some(field) = multipart.next_field().await.map_err(bad)? {
        match field.name().unwrap_or("") {
            "name" => name = Some(field.text().await.map_err(bad)?),
            "sha256" => sha256 = Some(field.text().await.map_err(bad)?),
            "component" => component = Some(field.bytes().await.map_err(bad)?.to_vec()),
            other => {
                return Err(ApiError::new(
                    400,
                    format!("unexpected form field {other:?} (expected name, sha256, component)"),
                ))
            }
        }
    }
    let name = name.ok_or_else(|| ApiError::new(400, "missing form field `name`"))?;
    let component =
        component.ok_or_else(|| ApiError::new(400, "missing form field `component`"))?;
    load(server, name, component, sha256.filter(|s| !s.is_empty())).await
}

async fn remove_plugin(
    State(server): State<Shared>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let mut policy = server.policy.lock().await;
    server.remove_plugin(&mut policy, &name)?;
    Ok(Json(json!({ "removed": name })).into_response())
}

async fn get_config(State(server): State<Shared>) -> Response {
    let policy = server.policy.lock().await;
    let source = match &policy.source {
        super::ConfigSource::File(path) => path.display().to_string(),
        super::ConfigSource::Store => "store".to_string(),
        super::ConfigSource::Default => "default".to_string(),
    };
    (
        [
            (header::CONTENT_TYPE, "application/toml".to_string()),
            (
                header::HeaderName::from_static("x-wasched-config-source"),
                source,
            ),
        ],
        match policy.source {
            super::ConfigSource::Default => crate::config::default_text(),
            _ => policy.text.clone(),
        },
    )
        .into_response()
}

async fn put_config(
    State(server): State<Shared>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body?;
    let text = String::from_utf8(body.to_vec())
        .map_err(|_| ApiError::new(400, "the configuration is not UTF-8"))?;
    let mut policy = server.policy.clone().lock_owned().await;
    let s = server.clone();
    tokio::task::spawn_blocking(move || s.apply_config(&mut policy, text, true))
        .await
        .map_err(|e| ApiError::new(500, e.to_string()))??;
    Ok(Json(json!({ "applied": true })).into_response())
}

// ----- operations ------------------------------------------------------------------------------

async fn healthz(State(server): State<Shared>) -> Response {
    let beat = server.engine.heartbeat.load(Ordering::Relaxed);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if now.saturating_sub(beat) > 30 {
        return ApiError::new(
            503,
            format!("the scheduling thread has not looped for {}s", now - beat),
        )
        .into_response();
    }
    "ok".into_response()
}

async fn readyz(State(server): State<Shared>) -> Response {
    if server.engine.ready.load(Ordering::Acquire) {
        "ok".into_response()
    } else {
        ApiError::new(503, "loading the stored objects and syncing the plugins").into_response()
    }
}

async fn metrics(State(server): State<Shared>) -> Response {
    let mut out = String::new();
    server.engine_metrics.render(&mut out);
    server.plugin_stats.render(&mut out);
    let pipeline = &server.pipeline.stats;
    let service = &server.service_stats;
    let counters = [
        ("wasched_plugin_loads_total{result=\"success\"}", server.plugin_loads[0].load(Ordering::Relaxed), "Plugin uploads, by result."),
        ("wasched_plugin_loads_total{result=\"failure\"}", server.plugin_loads[1].load(Ordering::Relaxed), ""),
        ("wasched_events_submitted_total", pipeline.submitted.load(Ordering::Relaxed), "Cluster events offered to the pipeline."),
        ("wasched_events_dropped_total{reason=\"stale\"}", pipeline.stale.load(Ordering::Relaxed), "Events dropped: older than what was applied or waiting (stale), or replaced by a newer event of the same object before being applied (collapsed)."),
        ("wasched_events_dropped_total{reason=\"collapsed\"}", pipeline.collapsed.load(Ordering::Relaxed), ""),
        ("wasched_events_dropped_total{reason=\"invalid\"}", service.events_invalid.load(Ordering::Relaxed), ""),
        ("wasched_events_applied_total", service.events_applied.load(Ordering::Relaxed), "Events applied to the scheduler's cache and queue."),
        ("wasched_assumed_expired_total", service.assumed_expired.load(Ordering::Relaxed), "Placements undone because their binding was not confirmed in time."),
    ];
    for (series, value, help) in counters {
        let name = series.split('{').next().unwrap_or(series);
        if !help.is_empty() {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
        }
        let _ = writeln!(out, "{series} {value}");
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

async fn openapi() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        include_str!("openapi.json"),
    )
        .into_response()
}
