//! Operations: `/healthz`, `/readyz` and `/openapi.json` for anyone (probes and clients need them
//! before they have a token), `/metrics` for holders of a read token.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::{guard, ApiError, Shared};
use crate::auth::Access;

/// The operations routes.
pub(super) fn routes(server: &Shared) -> Router<Shared> {
    let read: fn(&Method) -> Access = |_| Access::Read;
    let metrics = guard(Router::new().route("/metrics", get(metrics)), server, read);
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/openapi.json", get(openapi))
        .merge(metrics)
}

async fn healthz(State(server): State<Shared>) -> Response {
    let beat = server.engine.heartbeat.load(Ordering::Relaxed);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if now.saturating_sub(beat) > 30 {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the scheduling thread has not looped for {}s", now - beat),
        )
        .into_response();
    }
    "ok".into_response()
}

async fn readyz(State(server): State<Shared>) -> Response {
    // A standby replica in Kubernetes mode is ready once its cache is: it can take over at once.
    let synced = server.kube().is_some_and(|k| k.synced.is_open());
    if synced || server.engine.ready.load(Ordering::Acquire) {
        "ok".into_response()
    } else {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "loading the stored objects and syncing the plugins",
        )
        .into_response()
    }
}

async fn metrics(State(server): State<Shared>) -> Response {
    let mut out = String::new();
    server.engine_metrics.render(&mut out);
    let kube = server.kube();
    if let Some(kube) = kube {
        kube.watches.render(&mut out);
        kube.shared_policy.stats.render(&mut out);
    }
    if let Some(leading) = kube.and_then(|k| k.leading.as_ref()) {
        let _ = writeln!(out, "# HELP leader_election_master_status Whether this replica holds the Lease (1) or is a standby (0).");
        let _ = writeln!(out, "# TYPE leader_election_master_status gauge");
        let _ = writeln!(
            out,
            "leader_election_master_status{{name=\"{}\"}} {}",
            wasched_core::metrics::escape(&server.args.kube.leader.leader_elect_resource_name),
            u8::from(leading.load(Ordering::Acquire))
        );
    }
    server.plugin_stats.render(&mut out);
    server.service_stats.shadows.render(&mut out);
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
        ("wasched_preemptions_total", service.preemptions.load(Ordering::Relaxed), "Preemptions carried out: a pod nominated to a node and its victims there evicted."),
        ("wasched_permit_waits_total", service.permit_waits.load(Ordering::Relaxed), "Reserved pods that began to wait at Permit (a gang's members until its quorum)."),
        ("wasched_permit_waits_ended_total{result=\"released\"}", service.permit_released.load(Ordering::Relaxed), "Waits at Permit that ended, by how: let go and bound, timed out, or rejected by a plugin."),
        ("wasched_permit_waits_ended_total{result=\"timeout\"}", service.permit_timeouts.load(Ordering::Relaxed), ""),
        ("wasched_permit_waits_ended_total{result=\"rejected\"}", service.permit_rejections.load(Ordering::Relaxed), ""),
        ("wasched_permit_wait_milliseconds_total", service.permit_wait_millis.load(Ordering::Relaxed), "Time the pods whose wait ended spent waiting at Permit, summed."),
        ("wasched_gangs_admitted_total", service.gangs_admitted.load(Ordering::Relaxed), "Gangs whose quorum (minMember) was reached: their members were let go together."),
        ("wasched_gangs_timed_out_total", service.gangs_timed_out.load(Ordering::Relaxed), "Members of PodGroups whose wait at Permit ran out (the rest of the gang is rejected with them)."),
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
        include_str!("../openapi.json"),
    )
        .into_response()
}
