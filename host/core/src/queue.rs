//! The scheduling queue, as kube-scheduler keeps it: activeQ (higher priority first, then
//! arrival), backoffQ (1s * 2^(attempts-1), capped at 10s) and the unschedulable pods, which wait
//! for a cluster event that could make them fit, or 5 minutes at most.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use wasched_sdk as sdk;

use crate::clock::Clock;

/// Backoff after the first failed attempt.
pub const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
/// Backoff never grows past this.
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// An unschedulable pod is retried after this long even without a relevant event.
pub const UNSCHEDULABLE_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// The backoff after `attempts` failed attempts: 1s, 2s, 4s, 8s, then 10s.
pub fn backoff(attempts: u32) -> Duration {
    if attempts == 0 {
        return Duration::ZERO;
    }
    let exponent = (attempts - 1).min(16);
    (INITIAL_BACKOFF * (1u32 << exponent)).min(MAX_BACKOFF)
}

/// Where a pending pod is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueName {
    /// Ready to be popped, by priority then arrival.
    Active,
    /// Waiting out its backoff after a failed attempt.
    Backoff,
    /// Waiting for a cluster event that could make it fit.
    Unschedulable,
    /// Popped and being scheduled.
    InFlight,
    /// Kept out of the queue by a PreEnqueue plugin (SchedulingGates: the pod has scheduling
    /// gates) until the pod changes; never attempted meanwhile.
    Gated,
}

impl QueueName {
    /// The name the API and metrics use.
    pub fn name(self) -> &'static str {
        match self {
            QueueName::Active => "active",
            QueueName::Backoff => "backoff",
            QueueName::Unschedulable => "unschedulable",
            QueueName::InFlight => "in-flight",
            QueueName::Gated => "gated",
        }
    }
}

/// What the scheduler knows about a pending pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingStatus {
    /// The queue it is in.
    pub queue: QueueName,
    /// Scheduling attempts so far.
    pub attempts: u32,
    /// Why the last attempt failed (the FitError message, or the error).
    pub message: Option<String>,
    /// How long since the scheduler first queued it.
    pub waiting: Duration,
}

/// A cluster change, as far as the queue cares: could it make an unschedulable pod fit?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterEvent {
    /// A node was added.
    NodeAdded,
    /// A node's labels, taints, allocatable or cordon changed.
    NodeChanged,
    /// A node changed in a way no filter reads (annotations, status conditions).
    NodeChangedIrrelevant,
    /// A node was deleted.
    NodeDeleted,
    /// A pod left a node, freeing its resources.
    AssignedPodDeleted,
    /// A pod was placed on a node: it only takes resources away.
    AssignedPodAdded,
    /// A PersistentVolume, claim or StorageClass changed.
    StorageChanged,
    /// A namespace appeared, went or was relabelled (pod affinity's `namespaceSelector`s).
    NamespaceChanged,
    /// A DeviceClass or ResourceSlice changed, or a ResourceClaim freed devices: only pods with
    /// claims can be helped (DynamicResources is all that reads devices).
    DevicesChanged,
}

impl ClusterEvent {
    /// True when the event can turn an unschedulable pod into a schedulable one.
    pub fn may_help(self) -> bool {
        matches!(
            self,
            ClusterEvent::NodeAdded
                | ClusterEvent::NodeChanged
                | ClusterEvent::AssignedPodDeleted
                | ClusterEvent::StorageChanged
                | ClusterEvent::NamespaceChanged
                | ClusterEvent::DevicesChanged
        )
    }
}

struct Entry {
    pod: sdk::Pod,
    queue: QueueName,
    attempts: u32,
    /// When the last attempt ended.
    last_attempt: Option<Duration>,
    /// When it became unschedulable.
    unschedulable_since: Duration,
    message: Option<String>,
    /// Identifies the entry's current place in a heap (older heap items are stale).
    ticket: u64,
    /// The move-request counter when the pod was popped.
    popped_at_move: u64,
    /// When it was first queued (kept when it is updated or put back).
    queued_at: Duration,
    /// Where a QueueSort plugin put it among pods of its priority (empty: arrival order).
    order: (i64, String),
}

impl Entry {
    /// A pod entering the queue at `now`, not attempted yet.
    fn new(pod: sdk::Pod, queue: QueueName, now: Duration) -> Entry {
        Entry {
            pod,
            queue,
            attempts: 0,
            last_attempt: None,
            unschedulable_since: Duration::ZERO,
            message: None,
            ticket: 0,
            popped_at_move: 0,
            queued_at: now,
            order: (0, String::new()),
        }
    }
}

/// A place in activeQ: highest priority first, then QueueSort's order (earlier timestamp, then
/// name), then arrival.
type ActiveItem = (i32, Reverse<(i64, String)>, Reverse<u64>, String);

/// The pending pods.
pub struct SchedulingQueue {
    clock: Arc<dyn Clock>,
    entries: HashMap<String, Entry>,
    /// (priority, QueueSort's order, earlier ticket first, key)
    active: BinaryHeap<ActiveItem>,
    /// (ready time, ticket, key), earliest first.
    backoff: BinaryHeap<Reverse<(Duration, u64, String)>>,
    unschedulable: HashSet<String>,
    next_ticket: u64,
    /// Counts relevant cluster events, so a pod that failed while one arrived is not parked.
    move_requests: u64,
}

impl SchedulingQueue {
    /// An empty queue timed by `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        SchedulingQueue {
            clock,
            entries: HashMap::new(),
            active: BinaryHeap::new(),
            backoff: BinaryHeap::new(),
            unschedulable: HashSet::new(),
            next_ticket: 0,
            move_requests: 0,
        }
    }

    fn ticket(&mut self) -> u64 {
        self.next_ticket += 1;
        self.next_ticket
    }

    fn move_to_active(&mut self, key: &str) {
        let ticket = self.ticket();
        let Some(entry) = self.entries.get_mut(key) else {
            return;
        };
        entry.queue = QueueName::Active;
        entry.ticket = ticket;
        self.unschedulable.remove(key);
        self.active.push((
            entry.pod.priority,
            Reverse(entry.order.clone()),
            Reverse(ticket),
            key.to_string(),
        ));
    }

    fn move_after_backoff(&mut self, key: &str) {
        let now = self.clock.now();
        let ticket = self.ticket();
        let Some(entry) = self.entries.get_mut(key) else {
            return;
        };
        let ready = entry.last_attempt.unwrap_or_default() + backoff(entry.attempts);
        if ready <= now {
            self.move_to_active(key);
            return;
        }
        entry.queue = QueueName::Backoff;
        entry.ticket = ticket;
        self.unschedulable.remove(key);
        self.backoff.push(Reverse((ready, ticket, key.to_string())));
    }

    /// Adds a new pending pod to activeQ; a pod already queued is updated instead.
    pub fn add(&mut self, pod: sdk::Pod) {
        let key = pod.key();
        if self.entries.contains_key(&key) {
            self.update(pod);
            return;
        }
        let entry = Entry::new(pod, QueueName::Active, self.clock.now());
        self.entries.insert(key.clone(), entry);
        self.move_to_active(&key);
    }

    /// Keeps a pending pod out of the queue, with why (a PreEnqueue plugin's message): it is
    /// not attempted until [`SchedulingQueue::add`] or [`SchedulingQueue::update`] lets it in.
    pub fn gate(&mut self, pod: sdk::Pod, message: String) {
        let key = pod.key();
        let now = self.clock.now();
        let entry = self
            .entries
            .entry(key.clone())
            .or_insert_with(|| Entry::new(sdk::Pod::default(), QueueName::Gated, now));
        entry.pod = pod;
        entry.queue = QueueName::Gated;
        entry.message = Some(message);
        // Any place it held in a heap is stale from now on.
        entry.ticket = 0;
        self.unschedulable.remove(&key);
    }

    /// Replaces a queued pod's spec. An unschedulable pod is retried, since the change may help;
    /// a gated one enters the active queue at once (its gates were lifted).
    pub fn update(&mut self, pod: sdk::Pod) {
        let key = pod.key();
        let Some(entry) = self.entries.get_mut(&key) else {
            self.add(pod);
            return;
        };
        let priority_changed = entry.pod.priority != pod.priority;
        entry.pod = pod;
        match entry.queue {
            QueueName::Unschedulable => self.move_after_backoff(&key),
            QueueName::Gated => {
                entry.message = None;
                self.move_to_active(&key);
            }
            QueueName::Active if priority_changed => self.move_to_active(&key),
            _ => {}
        }
    }

    /// Sets a queued pod's `status.nominatedNodeName` (empty: clears it) as a preemption just
    /// decided, before the pod's own update comes back: its next attempt tries that node first.
    pub fn set_nomination(&mut self, key: &str, node: &str) {
        if let Some(entry) = self.entries.get_mut(key) {
            entry.pod.nominated_node_name.clear();
            entry.pod.nominated_node_name.push_str(node);
        }
    }

    /// Forgets a pod (deleted, or bound elsewhere): it leaves every queue.
    pub fn delete(&mut self, key: &str) -> bool {
        self.unschedulable.remove(key);
        self.entries.remove(key).is_some()
    }

    /// Moves pods whose backoff ended, and unschedulable pods parked too long, to activeQ.
    pub fn flush(&mut self) {
        let now = self.clock.now();
        while let Some(Reverse((ready, ticket, key))) = self.backoff.peek().cloned() {
            if ready > now {
                break;
            }
            self.backoff.pop();
            let current = self
                .entries
                .get(&key)
                .is_some_and(|e| e.queue == QueueName::Backoff && e.ticket == ticket);
            if current {
                self.move_to_active(&key);
            }
        }
        let stale: Vec<String> = self
            .unschedulable
            .iter()
            .filter(|k| {
                self.entries
                    .get(*k)
                    .is_some_and(|e| e.unschedulable_since + UNSCHEDULABLE_TIMEOUT <= now)
            })
            .cloned()
            .collect();
        for key in stale {
            self.move_after_backoff(&key);
        }
    }

    /// When the earliest pod waiting out its backoff may be tried again, if any waits.
    pub fn next_backoff_ready(&self) -> Option<Duration> {
        self.backoff
            .iter()
            .filter(|Reverse((_, ticket, key))| {
                self.entries
                    .get(key)
                    .is_some_and(|e| e.queue == QueueName::Backoff && e.ticket == *ticket)
            })
            .map(|Reverse((ready, _, _))| *ready)
            .min()
    }

    /// The next pod to schedule (highest priority, then earliest arrival), marked in flight, with
    /// its attempt counted. `None` when activeQ is empty after flushing.
    pub fn pop(&mut self) -> Option<sdk::Pod> {
        self.flush();
        while let Some((_, _, Reverse(ticket), key)) = self.active.pop() {
            let Some(entry) = self.entries.get_mut(&key) else {
                continue;
            };
            if entry.queue != QueueName::Active || entry.ticket != ticket {
                continue;
            }
            entry.queue = QueueName::InFlight;
            entry.attempts += 1;
            entry.popped_at_move = self.move_requests;
            return Some(entry.pod.clone());
        }
        None
    }

    /// The pod was placed: it leaves the queue.
    pub fn done(&mut self, key: &str) {
        self.delete(key);
    }

    /// No node fitted the pod: it waits for a relevant event (or goes straight to backoff if one
    /// arrived while it was being scheduled).
    pub fn unschedulable(&mut self, key: &str, message: String) {
        let now = self.clock.now();
        let moves = self.move_requests;
        let Some(entry) = self.entries.get_mut(key) else {
            return;
        };
        entry.message = Some(message);
        entry.last_attempt = Some(now);
        if entry.popped_at_move != moves {
            self.move_after_backoff(key);
            return;
        }
        entry.queue = QueueName::Unschedulable;
        entry.unschedulable_since = now;
        self.unschedulable.insert(key.to_string());
    }

    /// The attempt failed for another reason (a plugin error, a failed bind): retry after backoff.
    pub fn failed(&mut self, key: &str, message: String) {
        let now = self.clock.now();
        let Some(entry) = self.entries.get_mut(key) else {
            return;
        };
        entry.message = Some(message);
        entry.last_attempt = Some(now);
        self.move_after_backoff(key);
    }

    /// Puts back a pod that was placed but whose placement was undone (bind failed, assumption
    /// expired), keeping its attempt count, to retry after backoff.
    pub fn requeue(&mut self, pod: sdk::Pod, attempts: u32, message: String) {
        let key = pod.key();
        self.add(pod);
        if let Some(entry) = self.entries.get_mut(&key) {
            entry.attempts = attempts.max(entry.attempts);
        }
        self.failed(&key, message);
    }

    /// A cluster change: if it may help, every unschedulable pod is retried (after its backoff).
    pub fn on_event(&mut self, event: ClusterEvent) {
        if event == ClusterEvent::AssignedPodAdded {
            // A new pod only takes resources away, but it can be the one a parked pod's required
            // pod affinity waits for (kube-scheduler's InterPodAffinity queueing hint).
            let waiting: Vec<String> = self
                .unschedulable
                .iter()
                .filter(|key| {
                    self.entries
                        .get(*key)
                        .is_some_and(|e| !e.pod.pod_affinity.required_affinity.is_empty())
                })
                .cloned()
                .collect();
            for key in waiting {
                self.move_after_backoff(&key);
            }
            return;
        }
        if !event.may_help() {
            return;
        }
        self.move_requests += 1;
        let parked: Vec<String> = self
            .unschedulable
            .iter()
            .filter(|key| {
                event != ClusterEvent::DevicesChanged
                    || self
                        .entries
                        .get(*key)
                        .is_some_and(|e| !e.pod.claims.is_empty())
            })
            .cloned()
            .collect();
        for key in parked {
            self.move_after_backoff(&key);
        }
    }

    /// The ResourceClaim `namespace/name` was created or changed without freeing devices: only
    /// the parked pods that use it may fit now (it became allocated elsewhere, so they follow it,
    /// or its spec changed), as kube-scheduler's DynamicResources queueing hint decides. Another
    /// pod's claim taking devices helps no one.
    pub fn on_claim_changed(&mut self, namespace: &str, name: &str) {
        let users: Vec<String> = self
            .unschedulable
            .iter()
            .filter(|key| {
                self.entries.get(*key).is_some_and(|e| {
                    e.pod.namespace == namespace
                        && e.pod.claims.iter().any(|c| c.claim_name == name)
                })
            })
            .cloned()
            .collect();
        if users.is_empty() {
            return;
        }
        self.move_requests += 1;
        for key in users {
            self.move_after_backoff(&key);
        }
    }

    /// Places a queued pod among pods of its priority as a QueueSort plugin said (kube-
    /// scheduler's `Less`): earlier `timestamp_millis` first, then `name`. A pod in activeQ
    /// takes its new place at once.
    pub fn set_order(&mut self, key: &str, order: sdk::QueueKey) {
        let Some(entry) = self.entries.get_mut(key) else {
            return;
        };
        let order = (order.timestamp_millis, order.name);
        if entry.order == order {
            return;
        }
        entry.order = order;
        if entry.queue == QueueName::Active {
            self.move_to_active(key);
        }
    }

    /// When pod `key` was first queued, by the queue's clock.
    pub fn queued_at(&self, key: &str) -> Option<Duration> {
        self.entries.get(key).map(|e| e.queued_at)
    }

    /// Moves the parked pods among `keys` to activeQ at once (kube-scheduler's `Activate`,
    /// which coscheduling asks for a gang's siblings once one of them waits at Permit). Unlike
    /// kube-scheduler's, it leaves pods in backoff there: a gang member rejected a moment ago
    /// would otherwise be tried again at once, fail, reject the gang again and loop without
    /// time passing (what coscheduling's `podGroupBackoffSeconds` works around).
    pub fn activate<'a>(&mut self, keys: impl IntoIterator<Item = &'a str>) {
        for key in keys {
            if self.unschedulable.contains(key) {
                self.move_to_active(key);
            }
        }
    }

    /// An event that may help exactly the parked pods among `keys` (a gang's new member or its
    /// PodGroup changing): they are retried after their backoff.
    pub fn wake<'a>(&mut self, keys: impl IntoIterator<Item = &'a str>) {
        let parked: Vec<&str> = keys
            .into_iter()
            .filter(|k| self.unschedulable.contains(*k))
            .collect();
        if parked.is_empty() {
            return;
        }
        self.move_requests += 1;
        for key in parked {
            self.move_after_backoff(key);
        }
    }

    /// Where a pending pod is, how often it was tried and why it failed last.
    pub fn status(&self, key: &str) -> Option<PendingStatus> {
        let now = self.clock.now();
        self.entries.get(key).map(|e| PendingStatus {
            queue: e.queue,
            attempts: e.attempts,
            message: e.message.clone(),
            waiting: now.saturating_sub(e.queued_at),
        })
    }

    /// Every pending pod, in no particular order.
    pub fn pods(&self) -> impl Iterator<Item = &sdk::Pod> + '_ {
        self.entries.values().map(|e| &e.pod)
    }

    /// The pending pod with `key`, as it was last queued.
    pub fn pod(&self, key: &str) -> Option<&sdk::Pod> {
        self.entries.get(key).map(|e| &e.pod)
    }

    /// Number of gated pods (kept out of the queue by PreEnqueue).
    pub fn gated_len(&self) -> usize {
        self.entries
            .values()
            .filter(|e| e.queue == QueueName::Gated)
            .count()
    }

    /// Number of pods in each queue: (active, backoff, unschedulable).
    pub fn lengths(&self) -> (usize, usize, usize) {
        let mut counts = (0, 0, 0);
        for e in self.entries.values() {
            match e.queue {
                QueueName::Active => counts.0 += 1,
                QueueName::Backoff => counts.1 += 1,
                QueueName::Unschedulable => counts.2 += 1,
                QueueName::InFlight | QueueName::Gated => {}
            }
        }
        counts
    }

    /// Number of pending pods, in flight included.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// No pending pod at all.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;

    fn pod(name: &str, priority: i32) -> sdk::Pod {
        sdk::Pod {
            namespace: "ns".into(),
            name: name.into(),
            priority,
            ..Default::default()
        }
    }

    fn queue() -> (SchedulingQueue, FakeClock) {
        let clock = FakeClock::default();
        (SchedulingQueue::new(Arc::new(clock.clone())), clock)
    }

    fn popped(q: &mut SchedulingQueue) -> Option<String> {
        q.pop().map(|p| p.name)
    }

    #[test]
    fn backoff_doubles_from_one_second_and_caps_at_ten() {
        let seconds: Vec<u64> = (1..=6).map(|a| backoff(a).as_secs()).collect();
        assert_eq!(seconds, vec![1, 2, 4, 8, 10, 10]);
        assert_eq!(backoff(100), MAX_BACKOFF);
    }

    #[test]
    fn active_queue_orders_by_priority_then_arrival() {
        let (mut q, _) = queue();
        q.add(pod("low-1", 0));
        q.add(pod("high", 100));
        q.add(pod("low-2", 0));
        q.add(pod("mid", 50));
        let order: Vec<String> = std::iter::from_fn(|| popped(&mut q)).collect();
        assert_eq!(order, vec!["high", "mid", "low-1", "low-2"]);
    }

    #[test]
    fn a_queue_sort_order_groups_pods_within_their_priority() {
        let (mut q, _) = queue();
        let key = |ts: i64, name: &str| sdk::QueueKey {
            timestamp_millis: ts,
            name: name.into(),
        };
        for (name, priority) in [("b-1", 0), ("a-1", 0), ("solo", 0), ("b-0", 0), ("vip", 9)] {
            q.add(pod(name, priority));
        }
        // Gang `a` was created first, then gang `b`; `solo` was queued after both.
        q.set_order("ns/a-1", key(10, "ns/a-1"));
        q.set_order("ns/b-0", key(20, "ns/b-0"));
        q.set_order("ns/b-1", key(20, "ns/b-1"));
        q.set_order("ns/solo", key(30, "ns/solo"));
        let order: Vec<String> = std::iter::from_fn(|| popped(&mut q)).collect();
        assert_eq!(order, vec!["vip", "a-1", "b-0", "b-1", "solo"]);
    }

    #[test]
    fn activated_and_woken_pods_leave_the_parked_pods() {
        let (mut q, clock) = queue();
        for name in ["m-1", "m-2", "other"] {
            q.add(pod(name, 0));
            popped(&mut q);
            q.unschedulable(&format!("ns/{name}"), "no".into());
        }
        q.activate(["ns/m-1"]);
        assert_eq!(popped(&mut q).as_deref(), Some("m-1"));
        // A pod in backoff stays there.
        q.failed("ns/m-1", "rejected".into());
        q.activate(["ns/m-1"]);
        assert_eq!(q.status("ns/m-1").unwrap().queue, QueueName::Backoff);
        q.wake(["ns/m-2"]);
        assert_eq!(q.status("ns/m-2").unwrap().queue, QueueName::Backoff);
        assert_eq!(
            q.status("ns/other").unwrap().queue,
            QueueName::Unschedulable
        );
        clock.advance(Duration::from_secs(5));
        let mut later: Vec<String> = std::iter::from_fn(|| popped(&mut q)).collect();
        later.sort();
        assert_eq!(later, ["m-1", "m-2"]);
    }

    #[test]
    fn a_failed_pod_waits_out_its_backoff() {
        let (mut q, clock) = queue();
        q.add(pod("p", 0));
        for (attempt, wait) in [(1u64, 1u64), (2, 2), (3, 4), (4, 8), (5, 10), (6, 10)] {
            assert_eq!(popped(&mut q).as_deref(), Some("p"), "attempt {attempt}");
            q.failed("ns/p", "boom".into());
            assert_eq!(q.status("ns/p").unwrap().queue, QueueName::Backoff);
            clock.advance(Duration::from_millis(wait * 1000 - 1));
            assert_eq!(popped(&mut q), None, "attempt {attempt}: still backing off");
            clock.advance(Duration::from_millis(1));
            assert_eq!(q.status("ns/p").unwrap().queue, QueueName::Backoff);
            q.flush();
            assert_eq!(
                q.status("ns/p").unwrap().queue,
                QueueName::Active,
                "attempt {attempt}: after {wait}s"
            );
        }
        assert_eq!(q.status("ns/p").unwrap().attempts, 6);
        assert_eq!(q.status("ns/p").unwrap().message.as_deref(), Some("boom"));
    }

    #[test]
    fn unschedulable_pods_move_on_relevant_events_only() {
        let (mut q, clock) = queue();
        q.add(pod("p", 0));
        popped(&mut q);
        q.unschedulable(
            "ns/p",
            "0/1 nodes are available: 1 Insufficient cpu.".into(),
        );
        clock.advance(Duration::from_secs(30));
        for irrelevant in [
            ClusterEvent::AssignedPodAdded,
            ClusterEvent::NodeChangedIrrelevant,
        ] {
            q.on_event(irrelevant);
            assert_eq!(
                q.status("ns/p").unwrap().queue,
                QueueName::Unschedulable,
                "{irrelevant:?}"
            );
        }
        q.on_event(ClusterEvent::AssignedPodDeleted);
        assert_eq!(
            popped(&mut q).as_deref(),
            Some("p"),
            "past its 1s backoff: straight to activeQ"
        );
        assert_eq!(q.status("ns/p").unwrap().attempts, 2);
    }

    #[test]
    fn a_placed_pod_wakes_only_the_parked_pods_with_required_pod_affinity() {
        let (mut q, clock) = queue();
        let mut web = pod("web", 0);
        web.pod_affinity
            .required_affinity
            .push(sdk::PodAffinityTerm::default());
        q.add(web);
        q.add(pod("big", 0));
        popped(&mut q);
        popped(&mut q);
        q.unschedulable("ns/web", "affinity".into());
        q.unschedulable("ns/big", "cpu".into());
        clock.advance(Duration::from_secs(30));
        q.on_event(ClusterEvent::AssignedPodAdded);
        assert_eq!(q.status("ns/web").unwrap().queue, QueueName::Active);
        assert_eq!(q.status("ns/big").unwrap().queue, QueueName::Unschedulable);
    }

    #[test]
    fn device_events_wake_only_the_parked_pods_they_can_help() {
        let (mut q, clock) = queue();
        let with_claim = |name: &str, claim: &str| {
            let mut p = pod(name, 0);
            p.claims.push(sdk::PodClaim {
                name: "gpu".into(),
                claim_name: claim.into(),
                ..Default::default()
            });
            p
        };
        q.add(with_claim("trainer", "trainer-gpu"));
        q.add(with_claim("follower", "shared"));
        q.add(pod("cpu-bound", 0));
        let park = |q: &mut SchedulingQueue| {
            for _ in 0..3 {
                popped(q);
            }
            for name in ["trainer", "follower", "cpu-bound"] {
                q.unschedulable(&format!("ns/{name}"), "no".into());
            }
        };
        park(&mut q);
        clock.advance(Duration::from_secs(30));
        let queue_of =
            |q: &SchedulingQueue, name: &str| q.status(&format!("ns/{name}")).unwrap().queue;

        q.on_claim_changed("ns", "someone-elses");
        q.on_claim_changed("other-ns", "shared");
        assert!(
            ["trainer", "follower", "cpu-bound"]
                .iter()
                .all(|n| queue_of(&q, n) == QueueName::Unschedulable),
            "another pod's claim taking devices helps no one"
        );
        q.on_claim_changed("ns", "shared");
        assert_eq!(
            queue_of(&q, "follower"),
            QueueName::Active,
            "its claim got allocated"
        );
        assert_eq!(queue_of(&q, "trainer"), QueueName::Unschedulable);

        q.on_event(ClusterEvent::DevicesChanged);
        assert_eq!(
            queue_of(&q, "trainer"),
            QueueName::Active,
            "devices were freed"
        );
        assert_eq!(
            queue_of(&q, "cpu-bound"),
            QueueName::Unschedulable,
            "a pod without claims reads no device"
        );
        q.on_event(ClusterEvent::AssignedPodDeleted);
        assert_eq!(queue_of(&q, "cpu-bound"), QueueName::Active);
    }

    #[test]
    fn an_event_during_backoff_sends_the_pod_to_backoff_first() {
        let (mut q, clock) = queue();
        q.add(pod("p", 0));
        popped(&mut q);
        q.unschedulable("ns/p", "no".into());
        q.on_event(ClusterEvent::NodeAdded);
        assert_eq!(q.status("ns/p").unwrap().queue, QueueName::Backoff);
        clock.advance(Duration::from_secs(1));
        assert_eq!(popped(&mut q).as_deref(), Some("p"));
    }

    #[test]
    fn an_event_while_in_flight_is_not_lost() {
        let (mut q, clock) = queue();
        q.add(pod("p", 0));
        popped(&mut q);
        q.on_event(ClusterEvent::NodeAdded);
        q.unschedulable("ns/p", "no".into());
        assert_eq!(
            q.status("ns/p").unwrap().queue,
            QueueName::Backoff,
            "not parked"
        );
        clock.advance(Duration::from_secs(1));
        assert_eq!(popped(&mut q).as_deref(), Some("p"));
    }

    #[test]
    fn unschedulable_pods_are_retried_after_five_minutes() {
        let (mut q, clock) = queue();
        q.add(pod("p", 0));
        popped(&mut q);
        q.unschedulable("ns/p", "no".into());
        clock.advance(UNSCHEDULABLE_TIMEOUT - Duration::from_secs(1));
        assert_eq!(popped(&mut q), None);
        clock.advance(Duration::from_secs(1));
        assert_eq!(popped(&mut q).as_deref(), Some("p"));
    }

    #[test]
    fn deleting_a_pending_pod_removes_it_from_every_queue() {
        let (mut q, clock) = queue();
        for name in ["active", "backoff", "parked"] {
            q.add(pod(name, 0));
        }
        // Pop in arrival order, then park two of them.
        assert_eq!(popped(&mut q).as_deref(), Some("active"));
        assert_eq!(popped(&mut q).as_deref(), Some("backoff"));
        assert_eq!(popped(&mut q).as_deref(), Some("parked"));
        q.add(pod("active", 0));
        q.failed("ns/backoff", "x".into());
        q.unschedulable("ns/parked", "y".into());
        q.add(pod("fresh", 0));
        for key in ["ns/active", "ns/backoff", "ns/parked"] {
            assert!(q.delete(key), "{key}");
            assert_eq!(q.status(key), None);
        }
        clock.advance(UNSCHEDULABLE_TIMEOUT);
        q.on_event(ClusterEvent::NodeAdded);
        let rest: Vec<String> = std::iter::from_fn(|| popped(&mut q)).collect();
        assert_eq!(rest, vec!["fresh"], "deleted pods never come back");
    }
}
