//! The server's two worker threads.
//!
//! The *scheduling thread* owns the [`Service`]: it applies events, runs cycles, and between two
//! cycles takes control messages (a new set of profiles from a hot load or a config reload,
//! shutdown). It never waits on the store or on compilation.
//!
//! The *status writer* records each cycle's result in the store: a binding sets the pod's
//! `spec.nodeName` (the binding confirmation flows back through the event pipeline like an API
//! server's watch would deliver it), a failure sets the pod's `PodScheduled=False` condition with
//! the FitError message and the attempt count. Results waiting while a write commits go into the
//! next transaction together, so one fsync covers many pods.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::watch::{WatchEvent, WatchLog};
use wasched_core::events::EventPipeline;
use wasched_core::framework::Profile;
use wasched_core::metrics::{escape, Histogram, ATTEMPT_BUCKETS, PLUGIN_BUCKETS};
use wasched_core::service::{CycleResult, ExplainError, Explanation, Service};
use wasched_core::util::Rng;

/// The annotation holding how many times the scheduler tried a pod.
pub const ATTEMPTS_ANNOTATION: &str = "scheduling.wasched.io/attempts";
/// The annotation of a pod placed by `serve` that keeps why its node was chosen (the scores per
/// plugin, the total, how many nodes were feasible) and when, as JSON.
pub const CHOICE_ANNOTATION: &str = "scheduling.wasched.io/choice";

/// Where the status writer records each cycle's result: the embedded store ([`StoreSink`]) or a
/// Kubernetes API server (`kubernetes::ApiSink`).
pub trait ResultSink: Send + 'static {
    /// Records a batch of results (bindings, and conditions of pods not placed) and publishes
    /// the watch events of those that still applied, at once or as each write completes.
    fn record(
        &mut self,
        batch: Vec<CycleResult>,
        watch: &Arc<WatchLog>,
        metrics: &Arc<EngineMetrics>,
    );
}

/// Opens once each of its conditions has passed: every kind of object listed (so no pod is
/// placed against a partial picture of the cluster, as kube-scheduler waits for its informers'
/// caches), and, with leader election, the Lease held.
pub struct StartGate {
    remaining: Mutex<usize>,
    opened: std::sync::Condvar,
}

impl StartGate {
    /// A gate that opens after `conditions` calls of [`StartGate::open`].
    pub fn requiring(conditions: usize) -> Self {
        StartGate {
            remaining: Mutex::new(conditions),
            opened: std::sync::Condvar::new(),
        }
    }

    /// One condition has passed.
    pub fn open(&self) {
        let mut remaining = self.remaining.lock().unwrap_or_else(|e| e.into_inner());
        *remaining = remaining.saturating_sub(1);
        if *remaining == 0 {
            self.opened.notify_all();
        }
    }

    /// True once every condition has passed.
    pub fn is_open(&self) -> bool {
        *self.remaining.lock().unwrap_or_else(|e| e.into_inner()) == 0
    }

    /// True once open; waits up to `timeout` for it.
    pub fn wait(&self, timeout: Duration) -> bool {
        let remaining = self.remaining.lock().unwrap_or_else(|e| e.into_inner());
        let (remaining, _) = self
            .opened
            .wait_timeout_while(remaining, timeout, |remaining| *remaining > 0)
            .unwrap_or_else(|e| e.into_inner());
        *remaining == 0
    }
}

/// A message to the scheduling thread, handled between two cycles.
pub enum Control {
    /// Put these profiles in place; the old ones are sent back to be dropped elsewhere.
    Swap {
        /// The new profiles.
        profiles: Vec<Profile>,
        /// Where the old ones go.
        done: mpsc::Sender<Vec<Profile>>,
    },
    /// Answer why the pending pod `key` waits ([`Service::explain`]).
    Explain {
        /// The pod, `namespace/name`.
        key: String,
        /// Where the answer goes.
        reply: mpsc::Sender<Result<Explanation, ExplainError>>,
    },
    /// Run this read of the scheduler's state (its cache and queue) between two cycles; `None`
    /// when the thread does not schedule yet and its cache may not hold the cluster.
    Inspect(ServiceQuery),
}

/// A read of the scheduler's state, given `None` when the thread does not schedule yet.
pub type ServiceQuery = Box<dyn FnOnce(Option<&Service>) + Send>;

/// How long an explain request waits for the scheduling thread (which answers between two
/// cycles, so one long cycle delays it).
const EXPLAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Counters of the scheduling thread and the writer, for `/metrics`.
#[derive(Default)]
pub struct EngineMetrics {
    /// `(profile, result)` -> attempt durations.
    attempts: Mutex<BTreeMap<(String, &'static str), Arc<Histogram>>>,
    /// Pods in the active, backoff and unschedulable queues.
    pub pending: [AtomicU64; 4],
    /// Profile changes put in place (hot swaps).
    pub hot_swaps: AtomicU64,
    /// How long the scheduling thread spent putting new profiles in place.
    pub swap_pause: SwapPause,
    /// Results written to the store or the API server.
    pub status_writes: AtomicU64,
    /// Writes the API server refused or did not answer (Kubernetes mode), by what was written;
    /// a pod whose binding failed is scheduled again.
    pub api_write_failures: ApiWriteFailures,
    /// Transactions (or batches of API writes) those results took.
    pub status_write_batches: AtomicU64,
    /// Results not written because the pod was deleted or bound by someone else meanwhile.
    pub results_discarded: AtomicU64,
}

/// The swap-pause histogram (a wrapper so [`EngineMetrics`] can derive `Default`).
pub struct SwapPause(pub Histogram);

impl Default for SwapPause {
    fn default() -> Self {
        SwapPause(Histogram::new(PLUGIN_BUCKETS))
    }
}

impl EngineMetrics {
    fn attempt(&self, result: &CycleResult, elapsed: Duration) {
        let label = if result.outcome.node.is_some() {
            "scheduled"
        } else if result.outcome.error {
            "error"
        } else {
            "unschedulable"
        };
        let histogram = {
            let mut attempts = self.attempts.lock().unwrap_or_else(|e| e.into_inner());
            attempts
                .entry((result.scheduler_name.clone(), label))
                .or_insert_with(|| Arc::new(Histogram::new(ATTEMPT_BUCKETS)))
                .clone()
        };
        histogram.observe(elapsed);
    }

    /// Appends the engine's series in the Prometheus text format.
    pub fn render(&self, out: &mut String) {
        let attempts = self.attempts.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(out, "# HELP scheduler_schedule_attempts_total Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could not be scheduled, while 'error' means an internal scheduler problem.");
        let _ = writeln!(out, "# TYPE scheduler_schedule_attempts_total counter");
        for ((profile, result), histogram) in attempts.iter() {
            let _ = writeln!(
                out,
                "scheduler_schedule_attempts_total{{result=\"{result}\",profile=\"{}\"}} {}",
                escape(profile),
                histogram.count()
            );
        }
        let _ = writeln!(out, "# HELP scheduler_scheduling_attempt_duration_seconds Scheduling attempt latency in seconds (scheduling algorithm + binding).");
        let _ = writeln!(
            out,
            "# TYPE scheduler_scheduling_attempt_duration_seconds histogram"
        );
        for ((profile, result), histogram) in attempts.iter() {
            histogram.render(
                out,
                "scheduler_scheduling_attempt_duration_seconds",
                &format!("result=\"{result}\",profile=\"{}\"", escape(profile)),
            );
        }
        let _ = writeln!(
            out,
            "# HELP scheduler_pending_pods Number of pending pods, by the queue type."
        );
        let _ = writeln!(out, "# TYPE scheduler_pending_pods gauge");
        // kube-scheduler counts gated pods under their own queue label too (1.28+).
        for (queue, gauge) in ["active", "backoff", "unschedulable", "gated"]
            .iter()
            .zip(&self.pending)
        {
            let _ = writeln!(
                out,
                "scheduler_pending_pods{{queue=\"{queue}\"}} {}",
                gauge.load(Ordering::Relaxed)
            );
        }
        let _ = writeln!(out, "# HELP wasched_hot_swaps_total Profile sets put in place by plugin loads and config reloads.");
        let _ = writeln!(out, "# TYPE wasched_hot_swaps_total counter");
        let _ = writeln!(
            out,
            "wasched_hot_swaps_total {}",
            self.hot_swaps.load(Ordering::Relaxed)
        );
        let _ = writeln!(out, "# HELP wasched_hot_swap_pause_seconds Time the scheduling thread spent between two cycles putting new profiles in place.");
        let _ = writeln!(out, "# TYPE wasched_hot_swap_pause_seconds histogram");
        self.swap_pause
            .0
            .render(out, "wasched_hot_swap_pause_seconds", "");
        for (name, help, value) in [
            (
                "wasched_status_writes_total",
                "Pod bindings and scheduling failures written to the store or the API server.",
                &self.status_writes,
            ),
            (
                "wasched_status_write_batches_total",
                "Store transactions of the status writer.",
                &self.status_write_batches,
            ),
            (
                "wasched_results_discarded_total",
                "Cycle results not written because the pod was deleted or bound elsewhere meanwhile.",
                &self.results_discarded,
            ),
        ] {
            render_counter(out, name, help, value);
        }
        self.api_write_failures.render(out);
    }
}

/// What the writer sends the Kubernetes API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiWrite {
    /// `pods/binding`.
    Binding,
    /// The `PodScheduled=False` condition (and nomination) in `pods/status`.
    Condition,
    /// A `Scheduled` or `FailedScheduling` Event, or its series count.
    Event,
    /// A preemption victim's `DisruptionTarget` condition or deletion.
    Eviction,
    /// VolumeBinding's PreBind: a volume's `claimRef` or a claim's selected node.
    VolumeBinding,
    /// DynamicResources' PreBind: a ResourceClaim's allocation and `reservedFor` (or taking
    /// them back after a failed binding).
    ClaimAllocation,
}

impl ApiWrite {
    /// Every kind, in the order `/metrics` lists them.
    pub const ALL: [ApiWrite; 6] = [
        ApiWrite::Binding,
        ApiWrite::Condition,
        ApiWrite::Event,
        ApiWrite::Eviction,
        ApiWrite::VolumeBinding,
        ApiWrite::ClaimAllocation,
    ];

    /// The `kind` label.
    pub fn name(self) -> &'static str {
        match self {
            ApiWrite::Binding => "binding",
            ApiWrite::Condition => "condition",
            ApiWrite::Event => "event",
            ApiWrite::Eviction => "eviction",
            ApiWrite::VolumeBinding => "volume-binding",
            ApiWrite::ClaimAllocation => "claim-allocation",
        }
    }
}

/// Writes the API server refused or did not answer, by [`ApiWrite`].
#[derive(Default)]
pub struct ApiWriteFailures([AtomicU64; ApiWrite::ALL.len()]);

impl ApiWriteFailures {
    /// Counts one failed write of `kind`.
    pub fn count(&self, kind: ApiWrite) {
        self.0[kind as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Failed writes of `kind` so far.
    pub fn of(&self, kind: ApiWrite) -> u64 {
        self.0[kind as usize].load(Ordering::Relaxed)
    }

    fn render(&self, out: &mut String) {
        let name = "wasched_api_write_failures_total";
        let _ = writeln!(out, "# HELP {name} Writes the Kubernetes API server refused or did not answer, by what was written.");
        let _ = writeln!(out, "# TYPE {name} counter");
        for kind in ApiWrite::ALL {
            let _ = writeln!(out, "{name}{{kind=\"{}\"}} {}", kind.name(), self.of(kind));
        }
    }
}

/// Appends one counter in the Prometheus text format.
pub fn render_counter(out: &mut String, name: &str, help: &str, value: &AtomicU64) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} counter");
    let _ = writeln!(out, "{name} {}", value.load(Ordering::Relaxed));
}

/// The running threads.
pub struct Engine {
    control: Mutex<mpsc::Sender<Control>>,
    pipeline: Arc<EventPipeline>,
    stop: Arc<AtomicBool>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// True once the stored objects were applied and the plugins synced.
    pub ready: Arc<AtomicBool>,
    /// Seconds since the epoch of the last finished loop iteration (liveness).
    pub heartbeat: Arc<AtomicU64>,
}

impl Engine {
    /// Starts the scheduling thread (once `gate`, if any, opens) and the status writer.
    pub fn start(
        service: Service,
        mut sink: Box<dyn ResultSink>,
        watch: Arc<WatchLog>,
        metrics: Arc<EngineMetrics>,
        gate: Option<Arc<StartGate>>,
    ) -> std::io::Result<Engine> {
        let pipeline = service.pipeline();
        let (control, control_rx) = mpsc::channel::<Control>();
        let (results, results_rx) = mpsc::channel::<CycleResult>();
        let stop = Arc::new(AtomicBool::new(false));
        let ready = Arc::new(AtomicBool::new(false));
        let heartbeat = Arc::new(AtomicU64::new(now_seconds()));

        let writer = {
            let metrics = metrics.clone();
            std::thread::Builder::new()
                .name("wasched-status-writer".into())
                .spawn(move || write_results(results_rx, sink.as_mut(), &watch, &metrics))?
        };
        let scheduling = {
            let scheduling = SchedulingLoop {
                service,
                control: control_rx,
                metrics,
                results,
                stop: stop.clone(),
                ready: ready.clone(),
                heartbeat: heartbeat.clone(),
                pipeline: pipeline.clone(),
            };
            std::thread::Builder::new()
                .name("wasched-scheduler".into())
                .spawn(move || scheduling.run(gate))?
        };
        Ok(Engine {
            control: Mutex::new(control),
            pipeline,
            stop,
            threads: Mutex::new(vec![scheduling, writer]),
            ready,
            heartbeat,
        })
    }

    /// Hands new profiles to the scheduling thread and waits (off the async runtime) until they
    /// are in place; returns the old ones.
    ///
    /// # Errors
    /// The scheduling thread has stopped.
    pub fn swap(&self, profiles: Vec<Profile>) -> Result<Vec<Profile>, String> {
        let (done, done_rx) = mpsc::channel();
        self.send(Control::Swap { profiles, done })?;
        done_rx
            .recv()
            .map_err(|_| "the scheduling thread has stopped".to_string())
    }

    /// Asks the scheduling thread why the pending pod `key` (`namespace/name`) waits, and waits
    /// (off the async runtime) for its answer.
    ///
    /// # Errors
    /// The scheduling thread has stopped or did not answer in time.
    pub fn explain(&self, key: String) -> Result<Result<Explanation, ExplainError>, String> {
        let (reply, answer) = mpsc::channel();
        self.send(Control::Explain { key, reply })?;
        answer.recv_timeout(EXPLAIN_TIMEOUT).map_err(|e| match e {
            mpsc::RecvTimeoutError::Timeout => format!(
                "the scheduling thread did not answer in {}s",
                EXPLAIN_TIMEOUT.as_secs()
            ),
            mpsc::RecvTimeoutError::Disconnected => "the scheduling thread has stopped".to_string(),
        })
    }

    /// Runs `read` on the scheduling thread between two cycles and waits (off the async runtime)
    /// for its answer: a consistent view of the cache and queue that the thread alone may touch.
    ///
    /// # Errors
    /// The scheduling thread has stopped, does not schedule yet (a standby, or the first listing
    /// is incomplete), or did not answer in time.
    pub fn inspect<T: Send + 'static>(
        &self,
        read: impl FnOnce(&Service) -> T + Send + 'static,
    ) -> Result<T, String> {
        let (reply, answer) = mpsc::channel();
        self.send(Control::Inspect(Box::new(move |service| {
            let _ = reply.send(service.map(read));
        })))?;
        match answer.recv_timeout(EXPLAIN_TIMEOUT) {
            Ok(Some(value)) => Ok(value),
            Ok(None) => Err(ExplainError::NotScheduling.to_string()),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(format!(
                "the scheduling thread did not answer in {}s",
                EXPLAIN_TIMEOUT.as_secs()
            )),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                Err("the scheduling thread has stopped".to_string())
            }
        }
    }

    /// Queues `message` for the scheduling thread and wakes it if it idles.
    fn send(&self, message: Control) -> Result<(), String> {
        self.control
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(message)
            .map_err(|_| "the scheduling thread has stopped".to_string())?;
        self.pipeline.wake();
        Ok(())
    }

    /// Lets the running cycle finish, writes every result, and stops both threads.
    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::Release);
        self.pipeline.wake();
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for thread in threads {
            let _ = thread.join();
        }
    }
}

/// The scheduling thread: the service, the channels it takes changes from and hands results to,
/// and the flags it shares with the [`Engine`].
struct SchedulingLoop {
    service: Service,
    control: mpsc::Receiver<Control>,
    metrics: Arc<EngineMetrics>,
    results: mpsc::Sender<CycleResult>,
    stop: Arc<AtomicBool>,
    ready: Arc<AtomicBool>,
    heartbeat: Arc<AtomicU64>,
    pipeline: Arc<EventPipeline>,
}

impl SchedulingLoop {
    /// Waits for `gate`, then schedules until stopped. Dropping `results` at the end lets the
    /// writer finish what is queued and stop.
    fn run(mut self, gate: Option<Arc<StartGate>>) {
        if let Some(gate) = gate {
            if !self.wait_for(&gate) {
                return;
            }
        }
        self.service.apply_events();
        if let Err(e) = self.service.warm_up() {
            tracing::warn!("warming up the plugins: {e}");
        }
        self.ready.store(true, Ordering::Release);
        let mut gauges_at = Instant::now();
        while !self.stop.load(Ordering::Acquire) {
            handle_controls(&mut self.service, &self.control, &self.metrics, true);
            if !self.schedule_one() {
                break;
            }
            if gauges_at.elapsed() >= Duration::from_millis(200) {
                gauges_at = Instant::now();
                self.publish_gauges();
            }
        }
    }

    /// Waits until `gate` opens (false: stopped first). A standby waiting for the Lease is alive,
    /// so `/healthz` must say so, and takes the plugin and configuration changes it will lead
    /// with.
    ///
    /// What the watches list meanwhile is applied to the cache as it comes, without scheduling:
    /// left waiting in the pipeline until the last kind was listed, a 200,000-pod cluster's
    /// objects were all held typed at once (and a standby's until it leads).
    fn wait_for(&mut self, gate: &StartGate) -> bool {
        while !gate.wait(Duration::from_millis(200)) {
            if self.stop.load(Ordering::Acquire) {
                return false;
            }
            self.heartbeat.store(now_seconds(), Ordering::Relaxed);
            handle_controls(&mut self.service, &self.control, &self.metrics, false);
            self.service.apply_events();
        }
        true
    }

    /// One pod's cycle and its result handed to the writer; false once the writer is gone.
    fn schedule_one(&mut self) -> bool {
        let started = Instant::now();
        match self.service.schedule_one() {
            Some(result) if result.no_profile => {
                tracing::debug!(pod = %result.pod, scheduler_name = %result.scheduler_name, "left to another scheduler");
            }
            Some(result) if result.gated.is_some() => {
                // Not an attempt: only its condition is written.
                tracing::debug!(pod = %result.pod, message = ?result.outcome.message, "gated");
                return self.results.send(result).is_ok();
            }
            Some(result) if !result.waiting_on.is_empty() => {
                // Nothing to write until the plugins let it go or it times out.
                tracing::debug!(pod = %result.pod, plugins = ?result.waiting_on, "waiting at Permit");
            }
            Some(result) => {
                self.metrics.attempt(&result, started.elapsed());
                return self.results.send(result).is_ok();
            }
            None => self.pipeline.wait(Duration::from_millis(20)),
        }
        true
    }

    /// The queue lengths for `/metrics`, and a heartbeat for `/healthz`.
    fn publish_gauges(&self) {
        let (active, backoff, unschedulable) = self.service.queue_lengths();
        let pending = &self.metrics.pending;
        pending[0].store(active as u64, Ordering::Relaxed);
        pending[1].store(backoff as u64, Ordering::Relaxed);
        pending[2].store(unschedulable as u64, Ordering::Relaxed);
        pending[3].store(self.service.queue().gated_len() as u64, Ordering::Relaxed);
        self.heartbeat.store(now_seconds(), Ordering::Relaxed);
    }
}

/// Puts in place the profiles of every swap asked for since the last look, and answers explain
/// requests once the thread `schedules` (not while a standby waits for the Lease or the first
/// listing is incomplete, when its cache may not hold the cluster).
fn handle_controls(
    service: &mut Service,
    control: &mpsc::Receiver<Control>,
    metrics: &EngineMetrics,
    schedules: bool,
) {
    while let Ok(message) = control.try_recv() {
        match message {
            Control::Swap { profiles, done } => {
                let started = Instant::now();
                let old = service.swap_profiles(profiles);
                metrics.swap_pause.0.observe(started.elapsed());
                metrics.hot_swaps.fetch_add(1, Ordering::Relaxed);
                let _ = done.send(old);
            }
            Control::Explain { key, reply } => {
                let answer = if schedules {
                    service.explain(&key)
                } else {
                    Err(ExplainError::NotScheduling)
                };
                let _ = reply.send(answer);
            }
            Control::Inspect(read) => read(schedules.then_some(&*service)),
        }
    }
}

fn now_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// At most this many results go into one store transaction.
const MAX_BATCH: usize = 2048;

fn write_results(
    results: mpsc::Receiver<CycleResult>,
    sink: &mut dyn ResultSink,
    watch: &Arc<WatchLog>,
    metrics: &Arc<EngineMetrics>,
) {
    while let Ok(first) = results.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match results.try_recv() {
                Ok(result) => batch.push(result),
                Err(_) => break,
            }
        }
        sink.record(batch, watch, metrics);
    }
}

/// What `/v1/watch` says about one result.
pub fn watch_event(result: CycleResult, resource_version: u64) -> WatchEvent {
    WatchEvent {
        kind: if result.outcome.node.is_some() {
            "Scheduled"
        } else {
            "FailedScheduling"
        },
        resource_version,
        pod: result.pod,
        node: result.outcome.node,
        message: result.outcome.message,
        attempts: result.attempts,
        time_millis: unix_millis(),
        choice: result.outcome.choice.map(|c| *c),
    }
}

/// Milliseconds since the epoch.
pub fn unix_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A fresh object uid.
pub fn new_uid(rng: &mut Rng) -> String {
    let a = rng.next_u64();
    let b = rng.next_u64();
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        (b >> 48) & 0x3fff | 0x8000,
        b & 0xffff_ffff_ffff
    )
}
