//! The Events recorder: `Scheduled` and `FailedScheduling` as kube-scheduler records them.

use std::collections::HashMap;

use futures_util::TryFutureExt as _;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use wasched_core::service::CycleResult;

use super::bind::bounded;
use super::rate::RateLimiter;
use crate::engine::{ApiWrite, ApiWriteFailures};

/// An `events.k8s.io/v1` Event the recorder made, and how often it has happened since.
struct EventSeries {
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
    recorded: std::sync::Mutex<Aging<EventKey, EventSeries>>,
    /// The `PodScheduled=False` condition last written per pod (reason and message), and when.
    conditions: std::sync::Mutex<Aging<String, (bool, String, std::time::Instant)>>,
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
    pub(super) fn condition_written(&self, result: &CycleResult) -> bool {
        let conditions = self.conditions.lock().unwrap_or_else(|e| e.into_inner());
        conditions
            .map
            .get(&result.pod)
            .is_some_and(|(error, message, at)| {
                *error == result.outcome.error
                    && Some(message) == result.outcome.message.as_ref()
                    && at.elapsed() < Self::SERIES_WINDOW
            })
    }

    pub(super) fn remember_condition(&self, result: &CycleResult) {
        let mut conditions = self.conditions.lock().unwrap_or_else(|e| e.into_inner());
        let now = std::time::Instant::now();
        conditions.prune(now, |(_, _, at)| *at);
        conditions.map.insert(
            result.pod.clone(),
            (
                result.outcome.error,
                result.outcome.message.clone().unwrap_or_default(),
                std::time::Instant::now(),
            ),
        );
    }

    pub(super) fn forget_condition(&self, pod: &str) {
        self.conditions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .map
            .remove(pod);
    }

    pub(super) async fn record(
        &self,
        client: &Client,
        rate: &RateLimiter,
        result: &CycleResult,
        refused: &ApiWriteFailures,
    ) {
        let Some((namespace, name)) = result.pod.split_once('/') else {
            return;
        };
        let text = EventText::of(result);
        let key = (result.pod.clone(), text.reason, text.note.clone());
        let now = std::time::Instant::now();
        let outcome = match self.repeat_of(&key, now) {
            Repeat::Counted => return,
            Repeat::Patch(event_name, count) => {
                rate.acquire().await;
                let series = serde_json::json!({"series": {
                    "count": count,
                    "lastObservedTime": now_micro(),
                }});
                let events: Api<Event> = Api::namespaced(client.clone(), namespace);
                bounded(events.patch(&event_name, &PatchParams::default(), &Patch::Merge(&series)))
                    .map_ok(|_| ())
                    .await
            }
            Repeat::New => {
                rate.acquire().await;
                self.create(client, namespace, name, &text, key, now).await
            }
        };
        if let Err(e) = outcome {
            refused.count(ApiWrite::Event);
            tracing::warn!(pod = %result.pod, "recording the {} event failed: {e}", text.reason);
        }
    }

    /// Whether the Event `key` happened within the series window, counting it if so.
    fn repeat_of(&self, key: &EventKey, now: std::time::Instant) -> Repeat {
        let mut recorded = self.recorded.lock().unwrap_or_else(|e| e.into_inner());
        recorded.prune(now, |r| r.first);
        let Some(series) = recorded
            .map
            .get_mut(key)
            .filter(|r| now.saturating_duration_since(r.first) < Self::SERIES_WINDOW)
        else {
            return Repeat::New;
        };
        series.count += 1;
        if series.patched.elapsed() < Self::PATCH_EVERY {
            return Repeat::Counted;
        }
        series.patched = now;
        Repeat::Patch(series.name.clone(), series.count)
    }

    /// Creates the Event and, once the API server took it, starts its series.
    async fn create(
        &self,
        client: &Client,
        namespace: &str,
        name: &str,
        text: &EventText,
        key: EventKey,
        now: std::time::Instant,
    ) -> Result<(), kube::Error> {
        let event_name = format!("{name}.{:x}", event_suffix());
        let event = Event {
            metadata: ObjectMeta {
                name: Some(event_name.clone()),
                namespace: Some(namespace.to_string()),
                ..Default::default()
            },
            event_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
            reporting_controller: Some("wasched".into()),
            reporting_instance: Some(self.instance.clone()),
            action: Some(text.action.into()),
            reason: Some(text.reason.into()),
            type_: Some(text.kind.into()),
            note: Some(text.note.clone()),
            regarding: Some(ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                namespace: Some(namespace.to_string()),
                name: Some(name.to_string()),
                ..Default::default()
            }),
            ..Default::default()
        };
        bounded(create_unread(client, &event)).await?;
        let series = EventSeries {
            name: event_name,
            count: 1,
            first: now,
            patched: now,
        };
        self.recorded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .map
            .insert(key, series);
        Ok(())
    }
}

/// Creates `event` without parsing the API server's copy of it, which the recorder has no use for.
async fn create_unread(client: &Client, event: &Event) -> kube::Result<()> {
    let url = <Event as kube::Resource>::url_path(&(), event.metadata.namespace.as_deref());
    let body = serde_json::to_vec(event).map_err(kube::Error::SerdeError)?;
    let request = kube::core::Request::new(url)
        .create(&PostParams::default(), body)
        .map_err(kube::Error::BuildRequest)?;
    client
        .request::<serde::de::IgnoredAny>(request)
        .await
        .map(|_| ())
}

/// Entries kept for [`Recorder::SERIES_WINDOW`]. Those older are dropped at most once a second:
/// dropping them at every Event walked every Event of the last six minutes each time, which at
/// 10,000 pods took a third of the scheduler's CPU (`perf`: `HashMap::retain` calling
/// `Instant::elapsed` per entry). Readers check an entry's age themselves.
struct Aging<K, V> {
    map: HashMap<K, V>,
    pruned: Option<std::time::Instant>,
}

impl<K, V> Default for Aging<K, V> {
    fn default() -> Self {
        Aging {
            map: HashMap::new(),
            pruned: None,
        }
    }
}

impl<K, V> Aging<K, V> {
    /// Drops the entries older than the window (by `since`), unless that was done less than a
    /// second before `now`.
    fn prune(&mut self, now: std::time::Instant, since: impl Fn(&V) -> std::time::Instant) {
        if self
            .pruned
            .is_some_and(|at| now.saturating_duration_since(at) < std::time::Duration::from_secs(1))
        {
            return;
        }
        self.pruned = Some(now);
        self.map
            .retain(|_, v| now.saturating_duration_since(since(v)) < Recorder::SERIES_WINDOW);
    }
}

/// An Event's identity for its series: the pod, the reason and the note.
type EventKey = (String, &'static str, String);

/// What to do with an Event the recorder is asked for.
enum Repeat {
    /// It is new (or its series ran out): create it.
    New,
    /// It repeats and its series is due a patch: the Event's name and the new count.
    Patch(String, i32),
    /// It repeats; the count went up, and nothing is written now.
    Counted,
}

/// The words of a cycle's Event, as kube-scheduler writes them.
struct EventText {
    reason: &'static str,
    kind: &'static str,
    action: &'static str,
    note: String,
}

impl EventText {
    fn of(result: &CycleResult) -> Self {
        match &result.outcome.node {
            Some(node) => EventText {
                reason: "Scheduled",
                kind: "Normal",
                action: "Binding",
                note: format!("Successfully assigned {} to {node}", result.pod),
            },
            // The condition keeps the whole text; the API server refuses a longer note.
            None => EventText {
                reason: "FailedScheduling",
                kind: "Warning",
                action: "Scheduling",
                note: truncate_note(result.outcome.message.as_deref().unwrap_or_default()),
            },
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

pub(super) fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
