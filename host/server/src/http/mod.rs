//! The HTTP API, split by concern: [`cluster`] (objects under `/v1` and the watch), [`admin`]
//! (plugins and configuration) and [`operations`] (health, readiness, metrics, the API
//! description). This module assembles them, with what they share: the error shape, body limits
//! and the token checks.
//!
//! Every error is a Kubernetes `Status` object (`{"kind":"Status","status":"Failure","message":...,
//! "reason":...,"code":...}`), so `kubectl`-minded clients and scripts read one shape.

mod admin;
mod cluster;
mod operations;
mod shadow;
pub(crate) mod site;
mod status;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use serde_json::json;

use super::auth::Access;
use super::{PolicyError, Server};

type Shared = Arc<Server>;
/// An API error as a Kubernetes `Status`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
        }
    }
}

impl From<PolicyError> for ApiError {
    fn from(e: PolicyError) -> Self {
        ApiError {
            status: e.status,
            message: e.message,
        }
    }
}

impl From<super::store::StoreError> for ApiError {
    fn from(e: super::store::StoreError) -> Self {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(e: QueryRejection) -> Self {
        ApiError {
            status: e.status(),
            message: e.body_text(),
        }
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
        414 => "RequestURITooLong",
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

/// The routes.
pub fn router(server: Shared) -> Router {
    Router::new()
        .merge(cluster::routes(&server))
        .merge(admin::routes(&server))
        .merge(operations::routes(&server))
        .merge(status::routes(&server))
        .merge(shadow::routes(&server))
        .fallback(|| async {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "no such endpoint (see /openapi.json)",
            )
        })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method not allowed on this endpoint (see /openapi.json)",
            )
        })
        .layer(middleware::from_fn_with_state(
            server.clone(),
            site::guard_site,
        ))
        .with_state(server)
}

/// `routes` with bodies limited to `limit` bytes.
fn limit_bodies(routes: Router<Shared>, limit: usize) -> Router<Shared> {
    routes
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn(move |request: Request, next: Next| {
            refuse_oversized(limit, request, next)
        }))
}

/// What a request needs, from its method.
type Needs = fn(&Method) -> Access;

/// `routes` answering only requests whose token grants what `needs` says.
fn guard(routes: Router<Shared>, server: &Shared, needs: Needs) -> Router<Shared> {
    routes.route_layer(middleware::from_fn_with_state(
        (server.clone(), needs),
        require,
    ))
}

async fn require(
    State((server, needs)): State<(Shared, Needs)>,
    request: Request,
    next: Next,
) -> Response {
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match server.tokens.check(needs(request.method()), authorization) {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            // A client sending a component without the right token must read the 401/403, not a
            // broken pipe.
            drain_body(request).await;
            ApiError::new(refusal.status, refusal.message).into_response()
        }
    }
}

/// Reads and drops a request's body before it is refused, unless the client asked to be told
/// first (`Expect: 100-continue`, which then gets no `100 Continue`), declares more than
/// [`DRAIN_AT_MOST`], or declares no length at all (a chunked body, which could go on forever):
/// a client still sending a body of a length it declared would otherwise see the connection
/// reset (a broken pipe) instead of the refusal.
async fn drain_body(request: Request) {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let Some(declared) = declared else {
        return;
    };
    let waits_for_continue = request
        .headers()
        .get(header::EXPECT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
    if waits_for_continue || declared > DRAIN_AT_MOST {
        return;
    }
    use futures_util::StreamExt as _;
    let mut body = request.into_body().into_data_stream();
    while let Some(chunk) = body.next().await {
        if chunk.is_err() {
            break;
        }
    }
}

/// The most of an oversized body read and dropped before answering 413.
const DRAIN_AT_MOST: u64 = 256 << 20;

/// Answers 413 to a body declared larger than `limit`, after reading it ([`drain_body`]).
async fn refuse_oversized(limit: usize, request: Request, next: Next) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let Some(length) = declared.filter(|&l| l > limit as u64) else {
        return next.run(request).await;
    };
    drain_body(request).await;
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "request body too large: {length} bytes, at most {limit} (see --max-request-bytes / --max-component-bytes)"
        ),
    )
    .into_response()
}
