//! Pods that Permit plugins hold back: reserved on their node, not yet sent to be bound
//! (kube-scheduler's waiting pods map).

use std::collections::HashMap;
use std::time::Duration;

use wasched_sdk as sdk;

use crate::service::CycleResult;

/// A reserved pod waiting at one or more Permit plugins.
#[derive(Debug, Clone)]
pub struct WaitingPod {
    /// The pod, as its cycle saw it.
    pub pod: sdk::Pod,
    /// The node it is reserved on.
    pub node: String,
    /// The result its cycle ended with, to be carried out once every plugin lets it go.
    pub result: CycleResult,
    /// The plugins it still waits at, each with when its wait ends and how long it was.
    pub waits: Vec<(String, Duration, Duration)>,
    /// When it began to wait.
    pub since: Duration,
}

/// The waiting pods by `namespace/name`.
#[derive(Debug, Default)]
pub struct WaitingPods {
    pods: HashMap<String, WaitingPod>,
}

impl WaitingPods {
    /// Holds `pod` until each of its waits is allowed or one runs out.
    pub fn insert(&mut self, waiting: WaitingPod) {
        self.pods.insert(waiting.result.pod.clone(), waiting);
    }

    /// Plugin `plugin` lets pod `key` go; the pod, once no plugin holds it any more.
    pub fn allow(&mut self, plugin: &str, key: &str) -> Option<WaitingPod> {
        let waiting = self.pods.get_mut(key)?;
        waiting.waits.retain(|(p, _, _)| p != plugin);
        if waiting.waits.is_empty() {
            self.pods.remove(key)
        } else {
            None
        }
    }

    /// Takes out every pod whose wait at some plugin ended by `now`, with that plugin and how
    /// long it waited.
    pub fn expired(&mut self, now: Duration) -> Vec<(WaitingPod, String, Duration)> {
        let keys: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, w)| w.waits.iter().any(|(_, deadline, _)| *deadline <= now))
            .map(|(k, _)| k.clone())
            .collect();
        let mut expired: Vec<(WaitingPod, String, Duration)> = keys
            .iter()
            .filter_map(|k| self.pods.remove(k))
            .map(|w| {
                let (plugin, _, waited) = w
                    .waits
                    .iter()
                    .filter(|(_, deadline, _)| *deadline <= now)
                    .min_by_key(|(_, deadline, _)| *deadline)
                    .cloned()
                    .expect("an expired pod has an expired wait");
                (w, plugin, waited)
            })
            .collect();
        expired.sort_by(|a, b| a.0.result.pod.cmp(&b.0.result.pod));
        expired
    }

    /// Whether pod `key` waits.
    pub fn contains(&self, key: &str) -> bool {
        self.pods.contains_key(key)
    }

    /// Takes pod `key` out (it was deleted).
    pub fn remove(&mut self, key: &str) -> Option<WaitingPod> {
        self.pods.remove(key)
    }

    /// When the next wait ends.
    pub fn next_deadline(&self) -> Option<Duration> {
        self.pods
            .values()
            .flat_map(|w| w.waits.iter().map(|(_, deadline, _)| *deadline))
            .min()
    }
}
