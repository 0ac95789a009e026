//! A workload's run: the service against an in-memory API server, the ops applied to it, and
//! the background work (churn, paced deletions) done between scheduling cycles.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::storage::v1 as storage;

use super::{ChurnMode, CreatePods, NodeStrategy, Op, Options, PerfRun, Plan, Template};
use crate::binding::{Backend, MemoryBackend};
use crate::clock::Clock;
use crate::config::{Config, DefaultPluginRuntime};
use crate::events::{EventPipeline, Object};
use crate::framework::{Decider, Victim};
use crate::service::{CycleResult, Sequencer, Service};

/// The in-memory cluster as a backend the runner can add objects to while the service holds it.
struct SharedBackend(Arc<Mutex<MemoryBackend>>);

impl SharedBackend {
    fn lock(&self) -> std::sync::MutexGuard<'_, MemoryBackend> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Backend for SharedBackend {
    fn bind_volumes(&mut self, result: &CycleResult, node: &str) -> Result<(), String> {
        self.lock().bind_volumes(result, node)
    }
    fn bind_claims(&mut self, result: &CycleResult) -> Result<(), String> {
        self.lock().bind_claims(result)
    }
    fn unbind_claims(&mut self, result: &CycleResult) -> Result<(), String> {
        self.lock().unbind_claims(result)
    }
    fn bind(&mut self, result: &CycleResult, node: &str) -> Result<(), String> {
        self.lock().bind(result, node)
    }
    fn evict(&mut self, result: &CycleResult, victim: &Victim) -> Result<(), String> {
        self.lock().evict(result, victim)
    }
    fn record_condition(&mut self, result: &CycleResult) -> Result<bool, String> {
        self.lock().record_condition(result)
    }
}

/// The cluster a workload runs against: the service, and what the ops have created.
struct World {
    service: Service,
    clock: Arc<crate::clock::SystemClock>,
    pipeline: Arc<EventPipeline>,
    sequence: Arc<Sequencer>,
    backend: Arc<Mutex<MemoryBackend>>,
    /// Names handed out per `generateName` prefix.
    generated: HashMap<String, usize>,
    namespaces: HashSet<String>,
    /// Background work (churn, paced deletions) done between cycles.
    background: Vec<Background>,
    /// Measured pods not yet placed.
    measured: HashSet<String>,
    placed: usize,
    last_placed: Option<Instant>,
    preemptions: usize,
    /// Nodes created so far, for node names and per-node strategies.
    nodes_made: usize,
    /// Time from the first measured pod's creation to the last one's placement, summed over
    /// the `collectMetrics` ops, and how many pods they measured.
    measured_time: Duration,
    measured_total: usize,
}

impl World {
    fn submit(&mut self, object: Object) {
        if let Object::Pod(pod) = &object {
            let namespace = pod.metadata.namespace.clone().unwrap_or_default();
            self.ensure_namespace(&namespace);
        }
        self.backend
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .hold(&object);
        self.pipeline.submit(self.sequence.upsert(object));
    }

    fn delete(&mut self, object: Object) {
        if let Object::Pod(pod) = &object {
            self.backend
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .forget_pod(&crate::k8s::pod_key(pod));
        }
        self.pipeline.submit(self.sequence.delete(object));
    }

    /// Namespaces exist before their pods, as kube's runner creates them first.
    fn ensure_namespace(&mut self, name: &str) {
        if name.is_empty() || !self.namespaces.insert(name.to_string()) {
            return;
        }
        let namespace = core::Namespace {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.to_string()),
                ..Default::default()
            },
            ..Default::default()
        };
        self.pipeline
            .submit(self.sequence.upsert(Object::Namespace(Box::new(namespace))));
    }

    /// A fresh name for an object of `template`.
    fn name_for(&mut self, object: &Object) -> String {
        let prefix = Template::generate_name(object);
        let next = self.generated.entry(prefix.clone()).or_default();
        let name = format!("{prefix}{next}");
        *next += 1;
        name
    }

    /// The `index`th object of `count` from `template`, named (unless the template gives a name
    /// without `generateName`) and put in `namespace`.
    fn instance(
        &mut self,
        template: &Template,
        index: usize,
        count: usize,
        namespace: Option<&str>,
    ) -> anyhow::Result<Object> {
        let mut object = template.render(index, count)?;
        let fixed_name = object.metadata().generate_name.is_none();
        if !fixed_name {
            let name = self.name_for(&object);
            object.metadata_mut().name = Some(name);
        }
        if object.kind().is_namespaced() {
            let meta = object.metadata_mut();
            if let Some(ns) = namespace {
                meta.namespace = Some(ns.to_string());
            } else if meta.namespace.is_none() {
                meta.namespace = Some("default".to_string());
            }
        }
        Ok(object)
    }

    /// Cycles, with background work between them, until `until` says to stop.
    fn schedule(&mut self, until: Until) {
        let mut idle_waits = 0;
        loop {
            if until == Until::MeasuredPlaced && self.measured.is_empty() {
                break;
            }
            let now = Instant::now();
            self.poll_background(now);
            if let Some(result) = self.service.schedule_one() {
                if self.count(&result) {
                    idle_waits = 0;
                }
                continue;
            }
            match until {
                Until::Idle => break,
                Until::Time(end) => {
                    if now >= end {
                        break;
                    }
                    let wake = self
                        .background
                        .iter()
                        .filter_map(Background::next_due)
                        .min()
                        .unwrap_or(end)
                        .min(end);
                    std::thread::sleep(
                        wake.saturating_duration_since(now)
                            .min(Duration::from_millis(5)),
                    );
                }
                Until::MeasuredPlaced => {
                    let next = [
                        self.service.queue().next_backoff_ready(),
                        self.service.waiting().next_deadline(),
                    ]
                    .into_iter()
                    .flatten()
                    .min();
                    let Some(next) = next else { break };
                    idle_waits += 1;
                    if idle_waits > MAX_IDLE_WAITS {
                        break;
                    }
                    std::thread::sleep(next.saturating_sub(self.clock.now()));
                    self.service.release_expired();
                }
            }
            self.service.apply_events();
        }
        self.service.apply_events();
    }

    /// Counts a cycle's result; true when it placed a measured pod.
    fn count(&mut self, result: &CycleResult) -> bool {
        if result.outcome.preemption.is_some() {
            self.preemptions += 1;
        }
        if result.outcome.node.is_none() || !result.waiting_on.is_empty() {
            return false;
        }
        let measured = self.measured.remove(&result.pod);
        if measured {
            self.placed += 1;
            self.last_placed = Some(Instant::now());
        }
        measured
    }

    fn poll_background(&mut self, now: Instant) {
        if self.background.is_empty() {
            return;
        }
        let mut background = std::mem::take(&mut self.background);
        for work in &mut background {
            work.poll(now, self);
        }
        background.retain(|w| !w.finished());
        debug_assert!(self.background.is_empty(), "polls start no work");
        self.background = background;
    }
}

/// When [`World::schedule`] stops cycling.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Until {
    /// No pod is ready.
    Idle,
    /// This moment; until then it waits for background work when no pod is ready.
    Time(Instant),
    /// Every measured pod is placed, or none is ready and none will be: a pod waiting out its
    /// backoff (a preemptor whose victims are gone) or at Permit is waited for, as kube's runner
    /// waits for its pods, but not past [`MAX_IDLE_WAITS`] waits in a row that place no measured
    /// pod.
    MeasuredPlaced,
}

/// Work that goes on between cycles as wall time passes.
enum Background {
    Churn {
        mode: ChurnMode,
        number: usize,
        interval: Duration,
        namespace: String,
        templates: Vec<Arc<Template>>,
        next: Instant,
        ticks: usize,
        /// Per template, the objects created and not yet deleted (recreate mode: a ring of
        /// `number` slots).
        created: Vec<Vec<Option<Object>>>,
        made: usize,
    },
    Deletions {
        pods: Vec<Object>,
        interval: Duration,
        next: Instant,
    },
}

impl Background {
    fn next_due(&self) -> Option<Instant> {
        match self {
            Background::Churn { next, .. } | Background::Deletions { next, .. } => Some(*next),
        }
    }

    fn finished(&self) -> bool {
        match self {
            Background::Churn {
                mode, number, made, ..
            } => *mode == ChurnMode::Create && *number > 0 && made >= number,
            Background::Deletions { pods, .. } => pods.is_empty(),
        }
    }

    fn poll(&mut self, now: Instant, world: &mut World) {
        match self {
            Background::Churn {
                mode,
                number,
                interval,
                namespace,
                templates,
                next,
                ticks,
                created,
                made,
            } => {
                while *next <= now {
                    *next += *interval;
                    match mode {
                        ChurnMode::Create => {
                            if *number > 0 && *made >= *number {
                                return;
                            }
                            for t in templates.iter() {
                                if let Ok(object) = world.instance(t, *made, 0, Some(namespace)) {
                                    world.submit(object);
                                }
                            }
                            *made += 1;
                        }
                        ChurnMode::Recreate => {
                            let slot = *ticks % *number;
                            for (i, t) in templates.iter().enumerate() {
                                match created[i][slot].take() {
                                    Some(object) => world.delete(object),
                                    None => {
                                        if let Ok(object) =
                                            world.instance(t, *ticks, 0, Some(namespace))
                                        {
                                            created[i][slot] = Some(object.clone());
                                            world.submit(object);
                                        }
                                    }
                                }
                            }
                        }
                    }
                    *ticks += 1;
                }
            }
            Background::Deletions {
                pods,
                interval,
                next,
            } => {
                while *next <= now {
                    let Some(pod) = pods.pop() else {
                        return;
                    };
                    world.delete(pod);
                    *next += *interval;
                }
            }
        }
    }
}

pub(super) fn run_plan(
    plan: &Plan,
    config_file: Option<&Path>,
    runtime: DefaultPluginRuntime,
    options: &Options,
) -> anyhow::Result<PerfRun> {
    let started = Instant::now();
    let mut config = match config_file {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    config.default_plugins = runtime;
    config.parallelism = options.threads;
    let profiles = config.profiles()?;
    let decider = Decider::new(&profiles, options.seed)?;
    let sequence = Arc::new(Sequencer::default());
    let pipeline = Arc::new(EventPipeline::default());
    let backend = Arc::new(Mutex::new(MemoryBackend::new(
        pipeline.clone(),
        sequence.clone(),
        [],
    )));
    let clock = Arc::new(crate::clock::SystemClock::default());
    let service = Service::with_pipeline(
        decider,
        Some(Box::new(SharedBackend(backend.clone()))),
        clock.clone(),
        pipeline.clone(),
    );
    let mut world = World {
        service,
        clock,
        pipeline,
        sequence,
        backend,
        generated: HashMap::new(),
        namespaces: HashSet::new(),
        background: Vec::new(),
        measured: HashSet::new(),
        placed: 0,
        last_placed: None,
        preemptions: 0,
        nodes_made: 0,
        measured_time: Duration::ZERO,
        measured_total: 0,
    };
    world.service.warm_up()?;
    for (index, (op, &count)) in plan.ops.iter().zip(&plan.counts).enumerate() {
        world.run_op(plan, index, op, count)?;
    }
    let pods_per_second = match world.measured_time.as_secs_f64() {
        t if t > 0.0 => world.placed as f64 / t,
        _ => 0.0,
    };
    Ok(PerfRun {
        runtime: match runtime {
            DefaultPluginRuntime::Wasm => "wasm",
            DefaultPluginRuntime::Native => "native",
        },
        pods_per_second,
        placed: world.placed,
        unplaced: world.measured_total - world.placed,
        preemptions: world.preemptions,
        measured_seconds: world.measured_time.as_secs_f64(),
        total_seconds: started.elapsed().as_secs_f64(),
    })
}

impl World {
    /// Applies the `index`th op of `plan`, `count` times where it repeats.
    fn run_op(&mut self, plan: &Plan, index: usize, op: &Op, count: usize) -> anyhow::Result<()> {
        let default_namespace = format!("namespace-{index}");
        match op {
            Op::CreateNodes {
                template, strategy, ..
            } => {
                for i in 0..count {
                    let (node, csi) = make_node(self, template, strategy, i, count)?;
                    if let Some(csi) = csi {
                        self.submit(csi);
                    }
                    self.submit(node);
                }
                self.service.apply_events();
                // Instances learn the new nodes now, not in the first measured cycle.
                self.service.warm_up()?;
            }
            Op::CreateNamespaces {
                prefix, template, ..
            } => {
                for i in 0..count {
                    let name = format!("{prefix}-{i}");
                    let mut namespace = match template {
                        Some(t) => t.render(i, count)?,
                        None => Object::Namespace(Box::default()),
                    };
                    namespace.metadata_mut().name = Some(name.clone());
                    namespace.metadata_mut().generate_name = None;
                    self.namespaces.insert(name);
                    self.submit(namespace);
                }
                self.service.apply_events();
            }
            Op::CreatePods(pods) => {
                let namespace = pods.namespace.clone().unwrap_or(default_namespace);
                self.create_pods(pods, count, &namespace)?;
            }
            Op::CreatePodSets {
                namespace_prefix,
                pods,
                ..
            } => {
                let per_set = plan.per_set[index];
                for set in 0..count {
                    let namespace = format!("{namespace_prefix}-{set}");
                    self.create_pods(pods, per_set, &namespace)?;
                }
            }
            Op::CreateAny {
                namespace,
                template,
                ..
            } => {
                for i in 0..count {
                    let object = self.instance(template, i, count, namespace.as_deref())?;
                    self.submit(object);
                }
                self.service.apply_events();
            }
            Op::Churn {
                mode,
                number,
                interval,
                namespace,
                templates,
            } => {
                let namespace = namespace.clone().unwrap_or(default_namespace);
                self.ensure_namespace(&namespace);
                self.background.push(Background::Churn {
                    mode: *mode,
                    number: *number,
                    interval: *interval,
                    namespace,
                    templates: templates.clone(),
                    next: Instant::now(),
                    ticks: 0,
                    created: vec![vec![None; (*number).max(1)]; templates.len()],
                    made: 0,
                });
            }
            Op::Barrier => self.schedule(Until::Idle),
            Op::DeletePods {
                namespace,
                selector,
                per_second,
                skip_wait,
            } => {
                let pods: Vec<Object> = {
                    let backend = self
                        .backend
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    backend
                        .pods()
                        .filter(|p| p.metadata.namespace.as_deref() == Some(namespace.as_str()))
                        .filter(|p| {
                            let labels = p.metadata.labels.as_ref();
                            selector
                                .iter()
                                .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
                        })
                        .map(|p| Object::Pod(Box::new(p.clone())))
                        .collect()
                };
                let mut pods = pods;
                // Deleted in name order, last first (they are popped), whatever the map's order.
                pods.sort_by(|a, b| b.metadata().name.cmp(&a.metadata().name));
                if *per_second == 0 {
                    for pod in pods {
                        self.delete(pod);
                    }
                    self.service.apply_events();
                } else {
                    self.background.push(Background::Deletions {
                        pods,
                        interval: Duration::from_secs_f64(1.0 / *per_second as f64),
                        next: Instant::now(),
                    });
                    if !skip_wait {
                        while self.background.iter().any(
                            |b| matches!(b, Background::Deletions { pods, .. } if !pods.is_empty()),
                        ) {
                            let due = self
                                .background
                                .iter()
                                .filter_map(Background::next_due)
                                .min();
                            self.schedule(due.map_or(Until::Idle, Until::Time));
                        }
                    }
                }
            }
            Op::Sleep(duration) => self.schedule(Until::Time(Instant::now() + *duration)),
        }
        Ok(())
    }

    /// One createPods op's pods, created in `namespace` and (unless it skips waiting) scheduled;
    /// with `collectMetrics`, their time and number are added to the measured ones.
    fn create_pods(
        &mut self,
        op: &CreatePods,
        count: usize,
        namespace: &str,
    ) -> anyhow::Result<()> {
        self.ensure_namespace(namespace);
        // Built before the clock starts: kube's clients send ready objects too.
        let mut pods = Vec::with_capacity(count);
        for i in 0..count {
            pods.push(self.instance(&op.template, i, count, Some(namespace))?);
        }
        if op.skip_wait {
            for pod in pods {
                self.submit(pod);
            }
            self.service.apply_events();
            return Ok(());
        }
        if !op.collect_metrics {
            for pod in pods {
                self.submit(pod);
            }
            self.schedule(Until::Idle);
            return Ok(());
        }
        let placed_before = self.placed;
        self.measured = pods
            .iter()
            .map(|p| {
                format!(
                    "{}/{}",
                    namespace,
                    p.metadata().name.as_deref().unwrap_or_default()
                )
            })
            .collect();
        let start = Instant::now();
        for pod in pods {
            self.submit(pod);
        }
        self.schedule(Until::MeasuredPlaced);
        let end = match self.last_placed {
            Some(at) if self.placed > placed_before => at,
            _ => start,
        };
        self.measured.clear();
        self.measured_time += end.saturating_duration_since(start);
        self.measured_total += count;
        Ok(())
    }
}

/// Waits for a backoff or a Permit deadline, in a row without a measured pod placed, after which
/// the measured pods left are counted as unplaced.
const MAX_IDLE_WAITS: usize = 3;

/// The workload's next node (the `index`th of its op; `world.nodes_made` counts it), with its
/// CSINode when the strategy sets volume limits.
fn make_node(
    world: &mut World,
    template: &Template,
    strategy: &NodeStrategy,
    index: usize,
    count: usize,
) -> anyhow::Result<(Object, Option<Object>)> {
    let ordinal = world.nodes_made;
    let object = world.instance(template, index, count, None)?;
    let Object::Node(mut node) = object else {
        bail!(
            "{}: a node template holds a {}",
            template.path.display(),
            object.kind().name()
        );
    };
    let name = node.metadata.name.clone().unwrap_or_default();
    let labels = node.metadata.labels.get_or_insert_with(Default::default);
    // kube's node preparer creates nodes with the usual hostname label.
    labels
        .entry("kubernetes.io/hostname".to_string())
        .or_insert_with(|| name.clone());
    let mut csi = None;
    match strategy {
        NodeStrategy::Trivial => {}
        NodeStrategy::Label { key, values } => {
            labels.insert(key.clone(), values[ordinal % values.len()].clone());
        }
        NodeStrategy::UniqueLabel { key } => {
            labels.insert(key.clone(), format!("{name}-{ordinal}"));
        }
        NodeStrategy::Allocatable {
            allocatable,
            csi: drivers,
        } => {
            let status = node.status.get_or_insert_with(Default::default);
            let mut merged = status
                .allocatable
                .clone()
                .or_else(|| status.capacity.clone())
                .unwrap_or_default();
            for (resource, quantity) in allocatable {
                merged.insert(
                    resource.clone(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity(quantity.clone()),
                );
            }
            status.allocatable = Some(merged);
            if !drivers.is_empty() {
                csi = Some(Object::CSINode(Box::new(storage::CSINode {
                    metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                        name: Some(name.clone()),
                        ..Default::default()
                    },
                    spec: storage::CSINodeSpec {
                        drivers: drivers
                            .iter()
                            .map(|(driver, count)| storage::CSINodeDriver {
                                name: driver.clone(),
                                node_id: name.clone(),
                                allocatable: Some(storage::VolumeNodeResources { count: *count }),
                                ..Default::default()
                            })
                            .collect(),
                    },
                })));
            }
        }
    }
    crate::k8s::node_info(&node).map_err(|e| anyhow!("{}: {e}", template.path.display()))?;
    world.nodes_made += 1;
    Ok((Object::Node(node), csi))
}
