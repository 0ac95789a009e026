//! Shadow policies over HTTP: what each shadow found (`GET /v1/status/shadow`), and setting,
//! removing and promoting a shadow (`/admin/shadow`, admin token). A change is an edit of the
//! configuration's text, applied as any configuration is (so in Kubernetes mode every replica
//! takes it).

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{guard, limit_bodies, ApiError, Shared};
use crate::auth::Access;
use wasched_wasm::shadow_config::{self, Refusal};

/// Largest shadow table accepted: a profile's chains and plugin settings.
const MAX_SHADOW_BYTES: usize = 1 << 20;

/// The shadow routes.
pub(super) fn routes(server: &Shared) -> Router<Shared> {
    let admin = Router::new()
        .route("/admin/shadow", put(set_shadow).delete(remove_shadow))
        .route("/admin/shadow/promote", post(promote_shadow));
    let admin_only: fn(&Method) -> Access = |_| Access::Admin;
    let read: fn(&Method) -> Access = |_| Access::Read;
    let status = Router::new().route("/v1/status/shadow", get(report));
    Router::new()
        .merge(guard(
            limit_bodies(admin, MAX_SHADOW_BYTES),
            server,
            admin_only,
        ))
        .merge(guard(status, server, read))
}

/// `?profile=NAME`: the live profile (`default-scheduler` when left out).
#[derive(Deserialize)]
struct ProfileQuery {
    profile: Option<String>,
}

impl ProfileQuery {
    fn name(self) -> String {
        self.profile
            .unwrap_or_else(|| wasched_core::DEFAULT_SCHEDULER_NAME.to_string())
    }
}

/// `GET /v1/status/shadow`: each running shadow's report with both profiles' chains.
async fn report(State(server): State<Shared>) -> Result<Response, ApiError> {
    let reports = server.service_stats.shadows.reports();
    let policy = server.policy.lock().await;
    let shadows: Vec<Value> = reports
        .into_iter()
        .map(|report| {
            let chain = policy
                .chains
                .iter()
                .find(|c| c.scheduler_name == report.profile);
            let mut entry = serde_json::to_value(&report).expect("a report serializes");
            entry["live"] = json!(chain.map(|c| {
                let mut live = c.clone();
                live.shadow = None;
                live
            }));
            entry["shadow"] = json!(chain.and_then(|c| c.shadow.clone()));
            entry
        })
        .collect();
    let configured: Vec<&str> = policy
        .chains
        .iter()
        .filter(|c| c.shadow.is_some())
        .map(|c| c.scheduler_name.as_str())
        .collect();
    Ok(Json(json!({ "shadows": shadows, "configured": configured })).into_response())
}

/// `PUT /admin/shadow?profile=NAME`: the body (TOML, the keys of a profile) becomes the
/// profile's shadow.
async fn set_shadow(
    State(server): State<Shared>,
    query: Result<Query<ProfileQuery>, QueryRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let profile = query?.0.name();
    let body = body?;
    let shadow = String::from_utf8(body.to_vec())
        .map_err(|_| ApiError::new(StatusCode::BAD_REQUEST, "the shadow is not UTF-8"))?;
    edit(server, move |text| {
        shadow_config::set_shadow(text, &profile, Some(&shadow))
    })
    .await?;
    Ok(Json(json!({ "applied": true })).into_response())
}

/// `DELETE /admin/shadow?profile=NAME`: the profile runs without a shadow.
async fn remove_shadow(
    State(server): State<Shared>,
    query: Result<Query<ProfileQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let profile = query?.0.name();
    edit(server, move |text| {
        shadow_config::set_shadow(text, &profile, None)
    })
    .await?;
    Ok(Json(json!({ "removed": true })).into_response())
}

/// `POST /admin/shadow/promote?profile=NAME`: the shadow becomes the live profile and the
/// live one its shadow, in one swap.
async fn promote_shadow(
    State(server): State<Shared>,
    query: Result<Query<ProfileQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let profile = query?.0.name();
    edit(server, move |text| {
        shadow_config::promote_shadow(text, &profile)
    })
    .await?;
    Ok(Json(json!({ "promoted": true })).into_response())
}

/// Applies the configuration `change` makes of the current one, as `PUT /admin/config` would.
async fn edit(
    server: Shared,
    change: impl FnOnce(&str) -> Result<String, shadow_config::EditError> + Send + 'static,
) -> Result<(), ApiError> {
    let mut policy = server.policy.clone().lock_owned().await;
    let text = change(&super::admin::config_text(&policy)).map_err(|e| {
        let status = match e.refusal {
            Refusal::NotFound => StatusCode::NOT_FOUND,
            Refusal::Conflict => StatusCode::CONFLICT,
            Refusal::Invalid => StatusCode::BAD_REQUEST,
        };
        ApiError::new(status, e.message)
    })?;
    tokio::task::spawn_blocking(move || server.apply_config(&mut policy, text, true))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    Ok(())
}
