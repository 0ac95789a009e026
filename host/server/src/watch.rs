//! The scheduling events a client can watch: bindings and scheduling failures, each with the
//! resource version of the pod write that recorded it.
//!
//! The newest events are kept in memory; a watch from an older version than the log still holds
//! (or from before the server started) is refused, as the Kubernetes API answers `410 Gone`, and the
//! client lists again.

use std::collections::VecDeque;
use std::sync::Mutex;

use serde::Serialize;

/// How many events are kept for watches that start in the past.
pub const RETAINED_EVENTS: usize = 100_000;

/// One scheduling event.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct WatchEvent {
    /// `Scheduled` or `FailedScheduling` (the reasons of kube-scheduler's events).
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The event's version: a watch resumes after it.
    pub resource_version: u64,
    /// `namespace/name`.
    pub pod: String,
    /// The node the pod was bound to (`Scheduled`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The FitError or error (`FailedScheduling`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Scheduling attempts of the pod so far.
    pub attempts: u32,
    /// When the result was recorded, in milliseconds since the Unix epoch.
    pub time_millis: u64,
    /// Why the node was chosen (`Scheduled` events).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub choice: Option<wasched_core::framework::Choice>,
}

struct Log {
    events: VecDeque<WatchEvent>,
    /// Events at or below this version may be missing (evicted, or before this process started).
    horizon: u64,
}

/// The log, and a signal to wake watchers.
pub struct WatchLog {
    log: Mutex<Log>,
    newest: tokio::sync::watch::Sender<u64>,
}

/// A watch that starts before what the log holds.
#[derive(Debug, PartialEq, Eq)]
pub struct TooOld {
    /// The oldest version the log can resume after.
    pub oldest_available: u64,
}

impl WatchLog {
    /// A log whose history starts after `version`.
    pub fn new(version: u64) -> Self {
        WatchLog {
            log: Mutex::new(Log {
                events: VecDeque::new(),
                horizon: version,
            }),
            newest: tokio::sync::watch::Sender::new(version),
        }
    }

    /// Appends events (in version order) and wakes watchers.
    pub fn publish(&self, events: impl IntoIterator<Item = WatchEvent>) {
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        let mut newest = None;
        for event in events {
            newest = Some(event.resource_version);
            log.events.push_back(event);
            if log.events.len() > RETAINED_EVENTS {
                if let Some(evicted) = log.events.pop_front() {
                    log.horizon = evicted.resource_version;
                }
            }
        }
        drop(log);
        if let Some(version) = newest {
            self.newest.send_if_modified(|v| {
                let newer = version > *v;
                *v = (*v).max(version);
                newer
            });
        }
    }

    /// Events newer than `version`.
    ///
    /// # Errors
    /// `version` is older than the log's history.
    pub fn since(&self, version: u64) -> Result<Vec<WatchEvent>, TooOld> {
        let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        if version < log.horizon {
            return Err(TooOld {
                oldest_available: log.horizon,
            });
        }
        let start = log
            .events
            .partition_point(|e| e.resource_version <= version);
        Ok(log.events.range(start..).cloned().collect())
    }

    /// The newest `Scheduled` event of `pod` (`namespace/name`) the log still holds.
    pub fn last_scheduled(&self, pod: &str) -> Option<WatchEvent> {
        let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        log.events
            .iter()
            .rev()
            .find(|e| e.kind == "Scheduled" && e.pod == pod)
            .cloned()
    }

    /// Resolves when events newer than the last seen may exist.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.newest.subscribe()
    }

    /// The version new watches start from when they name none.
    pub fn newest(&self) -> u64 {
        *self.newest.borrow()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(version: u64) -> WatchEvent {
        WatchEvent {
            kind: "Scheduled",
            resource_version: version,
            pod: format!("ns/p{version}"),
            node: Some("n".into()),
            message: None,
            attempts: 1,
            time_millis: 0,
            choice: None,
        }
    }

    #[test]
    fn last_scheduled_finds_a_pods_newest_binding() {
        let log = WatchLog::new(0);
        let mut again = event(3);
        again.pod = "ns/p1".into();
        again.node = Some("m".into());
        let mut failed = event(4);
        failed.kind = "FailedScheduling";
        failed.pod = "ns/p1".into();
        log.publish([event(1), event(2), again, failed]);
        assert_eq!(log.last_scheduled("ns/p1").unwrap().resource_version, 3);
        assert_eq!(
            log.last_scheduled("ns/p2").unwrap().node.as_deref(),
            Some("n")
        );
        assert_eq!(log.last_scheduled("ns/p9"), None);
    }

    #[test]
    fn since_returns_newer_events_and_refuses_versions_before_the_history() {
        let log = WatchLog::new(10);
        log.publish([event(12), event(15), event(20)]);
        let versions = |v| {
            log.since(v)
                .unwrap()
                .iter()
                .map(|e| e.resource_version)
                .collect::<Vec<_>>()
        };
        assert_eq!(versions(10), vec![12, 15, 20]);
        assert_eq!(versions(15), vec![20]);
        assert_eq!(versions(20), Vec::<u64>::new());
        assert_eq!(
            log.since(9),
            Err(TooOld {
                oldest_available: 10
            })
        );
        assert_eq!(log.newest(), 20);
    }
}
