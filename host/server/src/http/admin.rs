//! The admin API: plugins (list, upload, replace, remove) and the configuration.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Multipart, Path, Query, State};
use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::{Json, Router};
use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{json, Value};

use super::{guard, limit_bodies, ApiError, Shared};
use crate::auth::Access;
use crate::{ConfigSource, Policy};
use wasched_core::metrics::ExtensionPoint;
use wasched_core::runtime::defaults;
use wasched_wasm::component::sha256_hex;

/// The admin API's routes: every request needs the admin token (when one is set).
pub(super) fn routes(server: &Shared) -> Router<Shared> {
    let admin = Router::new()
        .route("/admin/plugins", get(list_plugins).post(upload_multipart))
        .route(
            "/admin/plugins/{name}",
            put(upload_raw).delete(remove_plugin),
        )
        .route("/admin/config", get(get_config).put(put_config));
    let admin_only: fn(&Method) -> Access = |_| Access::Admin;
    guard(
        limit_bodies(admin, server.args.max_component_bytes),
        server,
        admin_only,
    )
}

async fn list_plugins(State(server): State<Shared>) -> Result<Response, ApiError> {
    Ok(Json(plugin_list(&server).await).into_response())
}

/// Every plugin (default, uploaded, or configured from a file) with its version, sha256 and
/// health: `{"plugins": [...]}`.
pub(super) async fn plugin_list(server: &Shared) -> Value {
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
            let component = match (policy.uploaded.get(name), policy.records.get(name)) {
                (Some(bytes), Some(record)) => Some((record.sha256.clone(), bytes.as_slice())),
                _ => defaults::find(name).map(|default| {
                    // The embedded components never change: their name identifies them.
                    (
                        format!("default:{name}"),
                        wasched_wasm::embedded::component(default),
                    )
                }),
            };
            if let Some(language) = component.and_then(|(key, bytes)| language_of(key, bytes)) {
                fields.insert("language".into(), language.into());
            }
            if let Some(record) = policy.records.get(name) {
                fields.insert("source".into(), "uploaded".into());
                fields.insert("version".into(), record.version.clone().into());
                fields.insert("sha256".into(), record.sha256.clone().into());
                fields.insert("size".into(), record.size.into());
                fields.insert("uploadedAt".into(), record.uploaded_at.into());
            } else if let Some(default) = defaults::find(name) {
                fields.insert("source".into(), "default".into());
                fields.insert("version".into(), env!("CARGO_PKG_VERSION").into());
                fields.insert(
                    "sha256".into(),
                    sha256_hex(wasched_wasm::embedded::component(default)).into(),
                );
                fields.insert(
                    "size".into(),
                    wasched_wasm::embedded::component(default).len().into(),
                );
            } else {
                fields.insert("source".into(), "config".into());
            }
            entry
        })
        .collect();
    json!({ "plugins": plugins })
}

/// A component's source language ([`wasched_wasm::language::language`]), remembered under `key`
/// (its digest): a Python component is tens of megabytes to scan, and the plugin list is read
/// often.
fn language_of(key: String, component: &[u8]) -> Option<String> {
    static KNOWN: std::sync::Mutex<BTreeMap<String, Option<String>>> =
        std::sync::Mutex::new(BTreeMap::new());
    let mut known = KNOWN.lock().unwrap_or_else(|e| e.into_inner());
    known
        .entry(key)
        .or_insert_with(|| wasched_wasm::language::language(component))
        .clone()
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
            StatusCode::BAD_REQUEST,
            "the upload is empty: send the component's bytes",
        ));
    }
    let mut policy = server.policy.clone().lock_owned().await;
    let s = server.clone();
    let crate::LoadedPlugin {
        record,
        replaced,
        active,
    } = tokio::task::spawn_blocking(move || {
        s.load_plugin(&mut policy, &name, bytes, sha256.as_deref())
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
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
    query: Result<Query<UploadQuery>, QueryRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query?;
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
        ApiError::new(
            e.status(),
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
                    StatusCode::BAD_REQUEST,
                    format!("unexpected form field {other:?} (expected name, sha256, component)"),
                ))
            }
        }
    }
    let name =
        name.ok_or_else(|| ApiError::new(StatusCode::BAD_REQUEST, "missing form field `name`"))?;
    let component = component
        .ok_or_else(|| ApiError::new(StatusCode::BAD_REQUEST, "missing form field `component`"))?;
    load(server, name, component, sha256.filter(|s| !s.is_empty())).await
}

async fn remove_plugin(
    State(server): State<Shared>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let mut policy = server.policy.clone().lock_owned().await;
    let s = server.clone();
    let removed = name.clone();
    tokio::task::spawn_blocking(move || s.remove_plugin(&mut policy, &removed))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    Ok(Json(json!({ "removed": name })).into_response())
}

/// Where the configuration in force comes from: a file's path, `store`, `configmap:...` or
/// `default`.
pub(super) fn config_source(policy: &Policy) -> String {
    match &policy.source {
        ConfigSource::File(path) => path.display().to_string(),
        ConfigSource::Store => "store".to_string(),
        ConfigSource::Cluster(location) => format!("configmap:{location}"),
        ConfigSource::Default => "default".to_string(),
    }
}

/// The configuration in force (the embedded default's text when none was given).
pub(super) fn config_text(policy: &Policy) -> String {
    match policy.source {
        ConfigSource::Default => wasched_wasm::config::default_text(),
        _ => policy.text.clone(),
    }
}

async fn get_config(State(server): State<Shared>) -> Response {
    let policy = server.policy.lock().await;
    let text = config_text(&policy);
    // Given back as it was put: TOML, or kube-scheduler's own configuration.
    let media_type = match wasched_wasm::kube_config::is_kube_scheduler_configuration(&text) {
        true => "application/yaml",
        false => "application/toml",
    };
    (
        [
            (header::CONTENT_TYPE, media_type.to_string()),
            (
                header::HeaderName::from_static("x-wasched-config-source"),
                config_source(&policy),
            ),
        ],
        text,
    )
        .into_response()
}

async fn put_config(
    State(server): State<Shared>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body?;
    let text = String::from_utf8(body.to_vec())
        .map_err(|_| ApiError::new(StatusCode::BAD_REQUEST, "the configuration is not UTF-8"))?;
    let mut policy = server.policy.clone().lock_owned().await;
    let s = server.clone();
    tokio::task::spawn_blocking(move || s.apply_config(&mut policy, text, true))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    Ok(Json(json!({ "applied": true })).into_response())
}
