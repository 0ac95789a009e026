//! `wasched bench`: a synthetic cluster scheduled with the default profile, once with the default
//! plugins as WebAssembly components and once natively, in the same process.
//!
//! The cluster spreads nodes over three zones with instance-type and disk labels, some tainted
//! (NoSchedule and PreferNoSchedule) and a few cordoned. Pods mix cpu/memory requests, tolerations,
//! node selectors, required and preferred node affinity, and zonal PersistentVolumeClaims. The same
//! seed gives the same cluster and the same pods.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1 as core;
use serde::Serialize;

use crate::config::{Config, DefaultPluginRuntime, MAX_PARALLELISM};
use crate::framework::{Decider, Phase};
use crate::metrics::{ExtensionPoint, PluginStatsRegistry};
use crate::shadow::{LiveDecision, Seed, ShadowFeed};
use crate::synthetic::{self, Scenario, Synthetic};
use crate::util::Rng;

/// Command-line arguments of `wasched bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Cluster sizes to run, comma-separated (e.g. `500,5000,50000`).
    #[arg(long, value_delimiter = ',', default_value = "5000", value_parser = crate::flags::bench_nodes)]
    pub nodes: Vec<usize>,
    /// Number of pods to schedule per run.
    #[arg(long, default_value_t = 5000, value_parser = crate::flags::bench_pods)]
    pub pods: usize,
    /// Workloads to run, comma-separated (basic, node-affinity, taints, volume-zones, mixed, churn,
    /// pod-anti-affinity, pod-affinity, topology-spread, preemption, volume-binding, gated,
    /// volume-limits, dra, gangs), or `all` (mirroring kube-scheduler's scheduler_perf).
    #[arg(long, value_delimiter = ',', default_value = "mixed")]
    pub scenario: Vec<Scenario>,
    /// Seed of the synthetic cluster and of tie-breaking.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print one JSON object per run instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Node-update events pushed through the event pipeline for its throughput figure (0 skips it).
    #[arg(long, default_value_t = 200_000, value_parser = crate::flags::bench_events)]
    pub events: usize,
    /// Also run WASM with call deadlines off, to show what they cost.
    #[arg(long)]
    pub without_deadlines: bool,
    /// Schedule with this configuration's `default-scheduler` profile instead of the default one
    /// (its default plugins run as WASM, then natively): run it beside a plain run to see what an
    /// added plugin costs per pod.
    #[arg(long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
    /// Threads that filter and score each cycle, comma-separated (e.g. `1,2`): each count is run,
    /// and the speed-up over one thread is printed.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub threads: Vec<usize>,
    /// Runs of each runtime, alternating WASM and native, of which the table shows each runtime's
    /// median: on a machine whose speed drifts, a ratio from one run of each swings by tens of
    /// percent.
    #[arg(long, default_value_t = 1, value_parser = crate::flags::bench_rounds)]
    pub rounds: usize,
    /// Run the workloads of kube-scheduler's scheduler_perf file `performance-config.yaml`
    /// (template paths relative to it, as in kube's tree) instead of the synthetic scenarios;
    /// repeat for more files. `--nodes`, `--pods`, `--scenario` and `--events` do not apply.
    #[arg(long = "scheduler-perf", value_name = "FILE")]
    pub scheduler_perf: Vec<std::path::PathBuf>,
    /// With `--scheduler-perf`: the labels a workload (with its test case's) must have,
    /// comma-separated, `-label` for one it must not have; as scheduler_perf's
    /// `-perf-scheduling-label-filter`. Empty runs every workload.
    #[arg(long, default_value = "performance")]
    pub label_filter: String,
    /// With `--scheduler-perf`: only workloads whose `TestCase/Workload` name contains this.
    #[arg(long)]
    pub workload: Option<String>,
}

/// Figures for one runtime.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// `wasm`, `wasm-nodl` (deadlines off) or `native`.
    pub runtime: &'static str,
    /// Pods scheduled in the run.
    pub pods: usize,
    /// Pods placed.
    pub scheduled: usize,
    /// Pods no node could take.
    pub unschedulable: usize,
    /// Cycles a plugin failed.
    pub errors: usize,
    /// Time to create plugin instances and send them every node.
    pub setup_ms: f64,
    /// Pods per second of wall time.
    pub pods_per_second: f64,
    /// Median cycle latency (µs).
    pub p50_cycle_us: f64,
    /// 99th percentile cycle latency (µs).
    pub p99_cycle_us: f64,
    /// Peak resident memory of the process during the run.
    pub peak_rss_mb: f64,
    /// What the run added to resident memory: its peak over the RSS when it started (the cache,
    /// the plugin instances and their mirrors).
    pub rss_growth_mb: f64,
    /// Mean time per pod in each host phase (µs), in cycle order.
    pub phases_us: Vec<(&'static str, f64)>,
    /// Mean time per pod in each plugin's calls (µs), by plugin then extension point.
    pub plugins_us: Vec<PluginTime>,
    /// Pods placed after preemption evicted pods for them.
    pub preemptions: usize,
    /// Mean time of a cycle that ended in a preemption: the failed search, then the dry runs
    /// on candidate nodes (µs).
    pub preemption_attempt_us: Option<f64>,
    /// In the gated scenario: the same pods per second through a service without the gated
    /// pods (`pods_per_second` is with them).
    pub without_gated_pods_per_second: Option<f64>,
    /// In the gangs scenario: gangs bound whole, and the median and 99th-percentile time from
    /// a gang's first member leaving the queue to its last member's binding, in milliseconds.
    pub gangs: Option<GangTimes>,
    /// With a configuration whose profile has a shadow: what the shadow compared and dropped.
    pub shadow: Option<ShadowFigures>,
}

/// What a shadow did beside one run.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ShadowFigures {
    /// Live cycles compared.
    pub compared: u64,
    /// Live cycles not compared because the shadow was behind.
    pub dropped: u64,
    /// The share of compared cycles whose verdict was `same` or `tie`.
    pub agreement: f64,
    /// How long the shadow took to finish its queued cycles after the live run ended (ms).
    pub drain_ms: f64,
}

/// Mean time per pod one plugin spent at one extension point.
#[derive(Debug, Clone, Serialize)]
pub struct PluginTime {
    /// The plugin's name.
    pub plugin: String,
    /// The extension point.
    pub extension_point: &'static str,
    /// Mean µs per pod.
    pub us_per_pod: f64,
}

/// One scenario at one size.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The scenario.
    pub scenario: Scenario,
    /// Nodes in the cluster.
    pub nodes: usize,
    /// Pods scheduled.
    pub pods: usize,
    /// The seed of the generated cluster and of tie-breaking.
    pub seed: u64,
    /// Filter/score threads per profile.
    pub threads: usize,
    /// The run with the plugins as WebAssembly.
    pub wasm: RunReport,
    /// WASM and native throughput over the same run on one thread, when `--threads` had 1 too.
    pub wasm_speedup_over_one_thread: Option<f64>,
    /// Native throughput over the same run on one thread.
    pub native_speedup_over_one_thread: Option<f64>,
    /// The same WASM run with call deadlines (epoch interruption) off, with `--without-deadlines`.
    pub wasm_without_deadlines: Option<RunReport>,
    /// The run with the plugins linked natively.
    pub native: RunReport,
    /// WASM throughput over native throughput (none when either scheduled nothing).
    pub wasm_native_ratio: Option<f64>,
    /// How much slower WASM runs with deadlines than without, in percent of throughput.
    pub deadline_overhead_percent: Option<f64>,
    /// What the WASM run added to resident memory, per 1,000 nodes (none without nodes).
    pub wasm_mb_per_1000_nodes: Option<f64>,
    /// The configuration file, when not the default profile.
    pub config: Option<String>,
    /// Per round (`--rounds`), WASM and native pods per second.
    pub rounds: Vec<(f64, f64)>,
}

/// How the gangs of the gangs scenario fared.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct GangTimes {
    /// Gangs whose every member was bound.
    pub admitted: usize,
    /// Gangs in the run.
    pub gangs: usize,
    /// Median time to admit a gang, in milliseconds.
    pub p50_ms: f64,
    /// 99th percentile, in milliseconds.
    pub p99_ms: f64,
}

/// Schedules the synthetic cluster with one runtime, with or without call deadlines.
///
/// # Errors
/// The default plugins failed to load.
pub fn run_once(
    cluster: &Synthetic,
    scenario: Scenario,
    runtime: DefaultPluginRuntime,
    deadlines: bool,
    threads: usize,
    seed: u64,
    config_file: Option<&std::path::Path>,
) -> anyhow::Result<RunReport> {
    let config = bench_config(config_file, scenario, runtime, deadlines, threads)?;
    reset_peak_rss();
    let rss_before = proc_status_mb("VmRSS");
    let mut profiles = config.profiles()?;
    if scenario == Scenario::Preemption {
        for profile in &mut profiles {
            profile.preemption.enabled = true;
        }
    }
    let mut decider = Decider::new(&profiles, seed)?;
    cluster.load_into(decider.cache_mut());
    let setup = Instant::now();
    decider.warm_up()?;
    let setup = setup.elapsed();
    let stats = config.stats().clone();
    let without_gated_pods_per_second = match scenario {
        Scenario::Gated => Some(without_gated(&profiles, cluster, seed)?),
        _ => None,
    };
    let before: Vec<(String, Vec<Duration>)> = plugin_totals(&stats);
    let mut tally = Tally::default();
    let (decider, elapsed) = match scenario {
        Scenario::Gated | Scenario::Gangs => {
            let gated = if scenario == Scenario::Gated {
                synthetic::GATED_PODS
            } else {
                0
            };
            through_service(decider, cluster, gated, &mut tally)
        }
        _ => place_each(decider, cluster, scenario, seed, &mut tally),
    };
    let shadow = tally.shadow.take().map(finish_shadow);
    let per_pod = |d: Duration| d.as_secs_f64() * 1e6 / cluster.pods.len().max(1) as f64;
    let phases = decider.phase_times();
    let peak = peak_rss_mb();
    let (p50_cycle_us, p99_cycle_us) = tally.percentiles();
    Ok(RunReport {
        runtime: match (runtime, deadlines) {
            (DefaultPluginRuntime::Wasm, true) => "wasm",
            (DefaultPluginRuntime::Wasm, false) => "wasm-nodl",
            (DefaultPluginRuntime::Native, _) => "native",
        },
        pods: cluster.pods.len(),
        scheduled: tally.scheduled,
        unschedulable: tally.unschedulable,
        errors: tally.errors,
        setup_ms: setup.as_secs_f64() * 1e3,
        pods_per_second: cluster.pods.len() as f64 / elapsed.as_secs_f64(),
        p50_cycle_us,
        p99_cycle_us,
        peak_rss_mb: peak,
        rss_growth_mb: (peak - rss_before).max(0.0),
        phases_us: Phase::ALL
            .iter()
            .map(|&p| (p.name(), per_pod(phases.get(p))))
            .collect(),
        plugins_us: plugin_times(&stats, &before, per_pod),
        preemptions: tally.preemptions,
        preemption_attempt_us: (tally.preemptions > 0)
            .then(|| tally.preemption_time.as_secs_f64() * 1e6 / tally.preemptions as f64),
        without_gated_pods_per_second,
        gangs: (scenario == Scenario::Gangs).then(|| tally.gang_times(cluster.groups.len())),
        shadow,
    })
}

/// Starts the shadow of the configuration's profile, if it has one, with the cluster's nodes.
fn start_shadow(decider: &mut Decider, cluster: &Synthetic) -> Option<ShadowFeed> {
    let pair = decider.take_shadows().into_iter().next()?;
    let nodes = cluster.clone();
    let seed = Seed {
        load: Some(Box::new(move |cache| nodes.load_into(cache))),
        ..Seed::default()
    };
    let clock = Arc::new(crate::clock::SystemClock::default());
    let board = crate::shadow::ShadowBoard::default();
    let ttl = Duration::from_secs(3600);
    Some(ShadowFeed::start(pair, seed, clock, ttl, &board).expect("start the shadow's thread"))
}

/// `part` of `whole`, in percent.
fn share(part: u64, whole: u64) -> f64 {
    match whole {
        0 => 0.0,
        w => part as f64 * 100.0 / w as f64,
    }
}

/// Waits for the shadow to compare what it took, and reads its figures.
fn finish_shadow(feed: ShadowFeed) -> ShadowFigures {
    let ended = Instant::now();
    while feed.behind() > 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let report = feed.report();
    ShadowFigures {
        compared: report.compared,
        dropped: report.dropped,
        agreement: report.agreement.unwrap_or(0.0),
        drain_ms: ended.elapsed().as_secs_f64() * 1e3,
    }
}

/// The gated scenario's pods per second through a service of their own without the gated pods:
/// what the gated pods cost is the difference.
fn without_gated(
    profiles: &[crate::framework::ProfileSpec],
    cluster: &Synthetic,
    seed: u64,
) -> anyhow::Result<f64> {
    let mut decider = Decider::new(profiles, seed)?;
    cluster.load_into(decider.cache_mut());
    decider.warm_up()?;
    let (_, elapsed) = through_service(decider, cluster, 0, &mut Tally::default());
    Ok(cluster.pods.len() as f64 / elapsed.as_secs_f64())
}

/// Places each pod of `cluster` with the decider alone, as the service would (see [`place`]),
/// with the churn scenario's changes between cycles; returns the decider and the time taken.
fn place_each(
    mut decider: Decider,
    cluster: &Synthetic,
    scenario: Scenario,
    seed: u64,
    tally: &mut Tally,
) -> (Decider, Duration) {
    let mut churn = Churn::new(seed, cluster.nodes.len());
    tally.shadow = start_shadow(&mut decider, cluster);
    let start = Instant::now();
    for (i, pod) in cluster.pods.iter().enumerate() {
        if scenario == Scenario::Churn && i > 0 {
            churn.between_cycles(i, &mut decider, cluster);
        }
        let search = tally
            .shadow
            .as_ref()
            .and(decider.search_state(&pod.scheduler_name));
        let cycle = Instant::now();
        let outcome = place(&mut decider, pod, tally, cycle);
        if let (Some(feed), Some(search)) = (&tally.shadow, search) {
            feed.cycle(LiveDecision::of(pod, search, &outcome));
        }
        tally.latencies.push(cycle.elapsed());
        tally.count(&outcome);
        if scenario == Scenario::Churn && outcome.node.is_some() {
            churn.placed.push(pod.key());
        }
    }
    (decider, start.elapsed())
}

/// Schedules `cluster`'s pods through a service, beside `gated` pods held by scheduling gates
/// that arrived first: each pod's event applied, its cycle run, its binding written to an
/// in-memory cluster and confirmed by the event that write sends back. The clock runs from the
/// first measured pod's event to the last binding; returns the decider and that time.
fn through_service(
    decider: Decider,
    cluster: &Synthetic,
    gated: usize,
    tally: &mut Tally,
) -> (Decider, Duration) {
    use crate::binding::MemoryBackend;
    use crate::events::{EventPipeline, Object};
    use crate::service::{Sequencer, Service};
    use std::sync::Arc;

    let measured: Vec<core::Pod> = cluster.pods.iter().map(synthetic::pod_object).collect();
    let gated = synthetic::gated_pod_objects(gated);
    let sequence = Arc::new(Sequencer::default());
    let pipeline = Arc::new(EventPipeline::default());
    let every_pod = gated.iter().chain(&measured).cloned();
    let backend = MemoryBackend::new(pipeline.clone(), sequence.clone(), every_pod);
    let clock = Arc::new(crate::clock::SystemClock::default());
    let mut service =
        Service::with_pipeline(decider, Some(Box::new(backend)), clock, pipeline.clone());
    let submit = |pods: Vec<core::Pod>| {
        for pod in pods {
            pipeline.submit(sequence.upsert(Object::Pod(Box::new(pod))));
        }
    };
    submit(gated);
    for group in synthetic::pod_group_objects(cluster) {
        pipeline.submit(sequence.upsert(group));
    }
    let held = service.run_until_idle();
    debug_assert!(held.iter().all(|r| r.gated.is_some()));
    let gang_of: HashMap<String, (&str, u32)> = gang_members(cluster);
    let mut gangs: HashMap<&str, (Instant, u32)> = HashMap::new();
    let start = Instant::now();
    submit(measured);
    loop {
        let cycle = Instant::now();
        let Some(result) = service.schedule_one() else {
            break;
        };
        tally.latencies.push(cycle.elapsed());
        // A member waiting at Permit is counted when it is let go (or rejected).
        if result.waiting_on.is_empty() {
            tally.count(&result.outcome);
        }
        if let Some(&(gang, size)) = gang_of.get(&result.pod) {
            let (first, placed) = gangs.entry(gang).or_insert((cycle, 0));
            if result.outcome.node.is_some() {
                *placed += 1;
                if *placed == size {
                    tally.gang_admissions.push(first.elapsed());
                }
            }
        }
    }
    // The last bindings' own events, which confirm them.
    service.apply_events();
    let elapsed = start.elapsed();
    (service.into_decider(), elapsed)
}

/// Each gang member's gang and the gang's size, by pod key.
fn gang_members(cluster: &Synthetic) -> HashMap<String, (&str, u32)> {
    let sizes: HashMap<&str, u32> = cluster
        .groups
        .iter()
        .map(|(name, size)| (name.as_str(), *size))
        .collect();
    cluster
        .pods
        .iter()
        .filter_map(|pod| {
            let gang = crate::k8s::podgroup::group_of(pod)?;
            let (name, size) = sizes.get_key_value(gang)?;
            Some((pod.key(), (*name, *size)))
        })
        .collect()
}

/// The profile the gangs scenario runs without a configuration file: the default one with
/// Coscheduling added, as `examples/configs/gangs.toml` has it.
const GANGS_CONFIG: &str = include_str!("../../../examples/configs/gangs.toml");

/// The configuration a run uses: the file's, or the default, with the run's runtime, deadlines
/// and threads.
fn bench_config(
    config_file: Option<&std::path::Path>,
    scenario: Scenario,
    runtime: DefaultPluginRuntime,
    deadlines: bool,
    threads: usize,
) -> anyhow::Result<Config> {
    let mut config = match (config_file, scenario) {
        (Some(path), _) => Config::load(path)?,
        (None, Scenario::Gangs) => Config::parse(
            "examples/configs/gangs.toml",
            std::path::Path::new("."),
            GANGS_CONFIG.to_string(),
        )?,
        (None, _) => Config::default(),
    };
    config.default_plugins = runtime;
    config.deadlines = deadlines;
    config.parallelism = threads;
    Ok(config)
}

/// What a run counted, pod by pod.
#[derive(Default)]
struct Tally {
    latencies: Vec<Duration>,
    scheduled: usize,
    unschedulable: usize,
    errors: usize,
    preemptions: usize,
    preemption_time: Duration,
    /// Per gang bound whole: from its first member leaving the queue to its last binding.
    gang_admissions: Vec<Duration>,
    /// The configuration's shadow, when its profile has one.
    shadow: Option<ShadowFeed>,
}

impl Tally {
    /// The gangs admitted of `gangs`, and the median and 99th percentile of their admission.
    fn gang_times(&mut self, gangs: usize) -> GangTimes {
        self.gang_admissions.sort();
        let at = |q: f64| {
            let n = self.gang_admissions.len();
            if n == 0 {
                return 0.0;
            }
            let i = ((n as f64 * q).ceil() as usize).clamp(1, n) - 1;
            self.gang_admissions[i].as_secs_f64() * 1e3
        };
        GangTimes {
            admitted: self.gang_admissions.len(),
            gangs,
            p50_ms: at(0.5),
            p99_ms: at(0.99),
        }
    }

    /// Counts one cycle's outcome.
    fn count(&mut self, outcome: &crate::framework::Outcome) {
        match (&outcome.node, outcome.error) {
            (Some(_), _) => self.scheduled += 1,
            (None, true) => self.errors += 1,
            (None, false) => self.unschedulable += 1,
        }
    }

    /// The median and 99th percentile cycle latencies (µs).
    fn percentiles(&mut self) -> (f64, f64) {
        let latencies = &mut self.latencies;
        latencies.sort_unstable();
        let percentile = |p: f64| -> f64 {
            if latencies.is_empty() {
                return 0.0;
            }
            let index =
                ((latencies.len() as f64 * p).ceil() as usize).clamp(1, latencies.len()) - 1;
            latencies[index].as_secs_f64() * 1e6
        };
        (percentile(0.50), percentile(0.99))
    }
}

/// The churn scenario's changes between cycles: a placed pod deleted every 10 cycles, a node
/// replaced every 100.
struct Churn {
    rng: Rng,
    placed: Vec<String>,
    next_node: usize,
}

impl Churn {
    fn new(seed: u64, nodes: usize) -> Self {
        Churn {
            rng: Rng::new(seed ^ 0x5eed),
            placed: Vec::new(),
            next_node: nodes,
        }
    }

    /// Before cycle `i`, as the event pipeline applies changes in the service.
    fn between_cycles(&mut self, i: usize, decider: &mut Decider, cluster: &Synthetic) {
        if i.is_multiple_of(10) && !self.placed.is_empty() {
            let at = self.rng.below(self.placed.len() as u64) as usize;
            let victim = self.placed.swap_remove(at);
            decider.cache_mut().remove_pod(&victim);
        }
        if i.is_multiple_of(100) && !cluster.nodes.is_empty() {
            let gone = &cluster.nodes[self.rng.below(cluster.nodes.len() as u64) as usize];
            decider.cache_mut().remove_node(&gone.name);
            let mut fresh = gone.clone();
            fresh.name = format!("node-{:05}", self.next_node);
            self.next_node += 1;
            decider.cache_mut().upsert_node(fresh);
        }
    }
}

/// One pod's cycle, and what the service would do next: after a preemption, the victims'
/// deletion and the pod's cycle on its nominated node; for a placed pod, its assumption and
/// volumes (no binder here, so the pod stays assumed).
fn place(
    decider: &mut Decider,
    pod: &wasched_sdk::Pod,
    tally: &mut Tally,
    cycle: Instant,
) -> crate::framework::Outcome {
    let mut outcome = decider
        .schedule(pod, false)
        .expect("bench pods use the default profile");
    if let Some(preemption) = outcome.preemption.take() {
        tally.preemption_time += cycle.elapsed();
        tally.preemptions += 1;
        for victim in &preemption.victims {
            decider.cache_mut().remove_pod(&victim.pod);
        }
        let mut nominated = pod.clone();
        nominated.nominated_node_name = preemption.node.clone();
        outcome = decider
            .schedule(&nominated, false)
            .expect("bench pods use the default profile");
    }
    if let Some(node) = &outcome.node {
        decider.assume(pod, node);
        if !outcome.volumes.is_empty() {
            decider
                .cache_mut()
                .reserve_volumes(pod, node, &outcome.volumes);
        }
        if !pod.claims.is_empty() {
            decider
                .cache_mut()
                .reserve_claims(pod, node, &outcome.claims);
        }
    }
    outcome
}

/// Each plugin's time per pod and extension point since `before`, the points it spent none at
/// left out.
fn plugin_times(
    stats: &PluginStatsRegistry,
    before: &[(String, Vec<Duration>)],
    per_pod: impl Fn(Duration) -> f64,
) -> Vec<PluginTime> {
    let mut times = Vec::new();
    for (plugin, totals) in plugin_totals(stats) {
        let earlier = before.iter().find(|(p, _)| *p == plugin).map(|(_, t)| t);
        for (k, point) in ExtensionPoint::ALL.iter().enumerate() {
            let spent = totals[k].saturating_sub(earlier.map_or(Duration::ZERO, |t| t[k]));
            if spent > Duration::ZERO {
                times.push(PluginTime {
                    plugin: plugin.clone(),
                    extension_point: point.name(),
                    us_per_pod: per_pod(spent),
                });
            }
        }
    }
    times
}

/// Every plugin's time per extension point so far.
fn plugin_totals(stats: &PluginStatsRegistry) -> Vec<(String, Vec<Duration>)> {
    stats
        .all()
        .into_iter()
        .map(|(name, s)| {
            let totals = ExtensionPoint::ALL.iter().map(|&p| s.total(p)).collect();
            (name, totals)
        })
        .collect()
}

/// Pushes `count` node-update events (labels changing, so each is relevant to the queue) through
/// the pipeline from a producer thread while the scheduler thread drains and applies them; returns
/// events per second.
///
/// # Errors
/// The default plugins failed to load.
pub fn event_throughput(cluster: &Synthetic, count: usize) -> anyhow::Result<f64> {
    use crate::events::{Action, Event, Object};
    use crate::service::Service;

    if count == 0 || cluster.nodes.is_empty() {
        return Ok(0.0);
    }
    let mut config = Config::default();
    config.default_plugins = DefaultPluginRuntime::Native;
    let decider = Decider::new(&config.profiles()?, 1)?;
    // Nothing is scheduled: only events are applied.
    let clock = std::sync::Arc::new(crate::clock::SystemClock::default());
    let mut service = Service::deferred(decider, clock);
    let pipeline = service.pipeline();
    // Objects are built before the clock starts: four label revisions per node, cycled.
    const REVISIONS: usize = 4;
    let objects: Vec<Object> = (0..REVISIONS)
        .flat_map(|rev| {
            cluster.nodes.iter().map(move |n| {
                let node: core::Node = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": n.name, "labels": {"rev": rev.to_string()}},
                    "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"}}
                }))
                .expect("valid Node");
                Object::Node(Box::new(node))
            })
        })
        .collect();
    let start = Instant::now();
    let producer = std::thread::spawn(move || {
        for i in 0..count {
            let object = objects[i % objects.len()].clone();
            pipeline.submit(Event::with_version(Action::Upsert, object, i as u64 + 1));
        }
    });
    while !producer.is_finished() {
        service.apply_events();
    }
    producer
        .join()
        .map_err(|_| anyhow::anyhow!("event producer panicked"))?;
    service.apply_events();
    Ok(count as f64 / start.elapsed().as_secs_f64())
}

/// Starts a new peak for [`peak_rss_mb`] (Linux: writing 5 to `/proc/self/clear_refs`), so that
/// each run's peak is its own and not the largest of every run before it in this process.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// `part / whole`, when both are positive and finite.
fn ratio(part: f64, whole: f64) -> Option<f64> {
    (part.is_finite() && whole.is_finite() && part > 0.0 && whole > 0.0).then(|| part / whole)
}

/// `megabytes` per 1,000 of `nodes`, when there are nodes.
fn per_thousand_nodes(megabytes: f64, nodes: usize) -> Option<f64> {
    (nodes > 0).then(|| megabytes * 1000.0 / nodes as f64)
}

fn or_na(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "n/a".to_string(), |v| format!("{v:.decimals$}"))
}

/// The process's peak resident set size in MB (Linux `VmHWM`), or 0 where unavailable.
pub fn peak_rss_mb() -> f64 {
    proc_status_mb("VmHWM")
}

/// A memory figure of this process from `/proc/self/status` (`VmRSS`, `VmHWM`, ...) in MB, or 0
/// where unavailable.
pub fn proc_status_mb(field: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status.lines().find_map(|line| {
                let kb = line
                    .strip_prefix(field)?
                    .strip_prefix(':')?
                    .trim()
                    .strip_suffix("kB")?;
                kb.trim().parse::<f64>().ok()
            })
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Runs every requested scenario at every requested size and prints the reports.
///
/// # Errors
/// The default plugins failed to load.
pub fn run(args: &Args) -> anyhow::Result<()> {
    if !args.scheduler_perf.is_empty() {
        let threads = match args.threads[..] {
            [t] if (1..=MAX_PARALLELISM).contains(&t) => t,
            _ => {
                anyhow::bail!("--scheduler-perf takes one --threads count in 1..={MAX_PARALLELISM}")
            }
        };
        return crate::scheduler_perf::run(&crate::scheduler_perf::Options {
            files: &args.scheduler_perf,
            label_filter: &args.label_filter,
            workload: args.workload.as_deref(),
            config: args.config.as_deref(),
            seed: args.seed,
            threads,
            rounds: args.rounds,
            json: args.json,
        });
    }
    let scenarios: Vec<Scenario> = if args.scenario.contains(&Scenario::All) {
        Scenario::EACH.to_vec()
    } else {
        args.scenario.clone()
    };
    if let Some(&bad) = args
        .threads
        .iter()
        .find(|&&t| !(1..=MAX_PARALLELISM).contains(&t))
    {
        anyhow::bail!("--threads {bad}: each count must be in 1..={MAX_PARALLELISM}");
    }
    for &nodes in &args.nodes {
        for &scenario in &scenarios {
            let mut one_thread: Option<Report> = None;
            for &threads in &args.threads {
                let mut report = run_scenario(args, scenario, nodes, threads)?;
                if let Some(single) = &one_thread {
                    report.wasm_speedup_over_one_thread =
                        Some(report.wasm.pods_per_second / single.wasm.pods_per_second);
                    report.native_speedup_over_one_thread =
                        Some(report.native.pods_per_second / single.native.pods_per_second);
                }
                if args.json {
                    println!("{}", serde_json::to_string(&report)?);
                } else {
                    print_table(&report);
                }
                if threads == 1 {
                    one_thread = Some(report);
                }
            }
        }
    }
    if args.events > 0 {
        let nodes = args.nodes.first().copied().unwrap_or(5000);
        let cluster = synthetic::cluster(Scenario::Basic, nodes, 0, args.seed);
        let events_per_second = event_throughput(&cluster, args.events)?;
        if args.json {
            println!(
                "{}",
                serde_json::json!({ "events_per_second": events_per_second, "nodes": nodes })
            );
        } else {
            println!(
                "event pipeline: {events_per_second:.0} node-update events/s submitted by one thread and applied by the scheduling thread ({nodes} nodes)"
            );
        }
    }
    Ok(())
}

fn run_scenario(
    args: &Args,
    scenario: Scenario,
    nodes: usize,
    threads: usize,
) -> anyhow::Result<Report> {
    let cluster = synthetic::cluster(scenario, nodes, args.pods, args.seed);
    let run = |runtime, deadlines| {
        run_once(
            &cluster,
            scenario,
            runtime,
            deadlines,
            threads,
            args.seed,
            args.config.as_deref(),
        )
    };
    let (mut wasms, mut nodls, mut natives) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..args.rounds.max(1) {
        // WASM first, so its peak memory is not inflated by the native run.
        wasms.push(run(DefaultPluginRuntime::Wasm, true)?);
        if args.without_deadlines {
            nodls.push(run(DefaultPluginRuntime::Wasm, false)?);
        }
        natives.push(run(DefaultPluginRuntime::Native, true)?);
    }
    let rounds = wasms
        .iter()
        .zip(&natives)
        .map(|(w, n)| (w.pods_per_second, n.pods_per_second))
        .collect();
    let wasm = median_run(wasms);
    let wasm_without_deadlines = (!nodls.is_empty()).then(|| median_run(nodls));
    let native = median_run(natives);
    Ok(Report {
        scenario,
        nodes,
        pods: args.pods,
        seed: args.seed,
        threads,
        wasm_speedup_over_one_thread: None,
        native_speedup_over_one_thread: None,
        wasm_native_ratio: ratio(wasm.pods_per_second, native.pods_per_second),
        deadline_overhead_percent: wasm_without_deadlines
            .as_ref()
            .and_then(|nodl| ratio(wasm.pods_per_second, nodl.pods_per_second))
            .map(|r| 100.0 * (1.0 - r)),
        wasm_mb_per_1000_nodes: per_thousand_nodes(wasm.rss_growth_mb, nodes),
        config: args.config.as_ref().map(|p| p.display().to_string()),
        rounds,
        wasm,
        wasm_without_deadlines,
        native,
    })
}

/// The run with the median throughput (the faster of the middle two for an even count).
fn median_run(mut runs: Vec<RunReport>) -> RunReport {
    runs.sort_by(|a, b| a.pods_per_second.total_cmp(&b.pods_per_second));
    let middle = runs.len() / 2;
    runs.swap_remove(middle)
}

fn print_table(r: &Report) {
    println!(
        "wasched bench: scenario {}, {} nodes, {} pods, seed {}, {} profile, {} filter/score thread(s)",
        r.scenario.name(),
        r.nodes,
        r.pods,
        r.seed,
        r.config.as_deref().unwrap_or("default"),
        r.threads
    );
    println!(
        "{:<9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>6} {:>8}",
        "runtime",
        "pods/s",
        "p50 µs",
        "p99 µs",
        "setup ms",
        "scheduled",
        "unsched",
        "errors",
        "peak MB"
    );
    let runs: Vec<&RunReport> = [
        Some(&r.wasm),
        r.wasm_without_deadlines.as_ref(),
        Some(&r.native),
    ]
    .into_iter()
    .flatten()
    .collect();
    for run in &runs {
        println!(
            "{:<9} {:>9.0} {:>9.1} {:>9.1} {:>9.1} {:>9} {:>7} {:>6} {:>8.1}",
            run.runtime,
            run.pods_per_second,
            run.p50_cycle_us,
            run.p99_cycle_us,
            run.setup_ms,
            run.scheduled,
            run.unschedulable,
            run.errors,
            run.peak_rss_mb
        );
    }
    println!(
        "wasm/native throughput ratio: {}; the WASM run added {:.1} MB of RSS, {} MB per 1,000 nodes",
        or_na(r.wasm_native_ratio, 2),
        r.wasm.rss_growth_mb,
        or_na(r.wasm_mb_per_1000_nodes, 1)
    );
    print_comparisons(r);
    print_phases_and_plugins(r);
}

/// The lines comparing runs: rounds, deadlines, preemption, gated pods, threads.
fn print_comparisons(r: &Report) {
    if r.rounds.len() > 1 {
        let list = |figures: Vec<String>| figures.join(", ");
        println!(
            "{} rounds, each runtime's median run shown: wasm pods/s {}; native pods/s {}; wasm/native per round {}",
            r.rounds.len(),
            list(r.rounds.iter().map(|(w, _)| format!("{w:.0}")).collect()),
            list(r.rounds.iter().map(|(_, n)| format!("{n:.0}")).collect()),
            list(
                r.rounds
                    .iter()
                    .map(|&(w, n)| or_na(ratio(w, n), 2))
                    .collect()
            ),
        );
    }
    if let Some(overhead) = r.deadline_overhead_percent {
        println!("call deadlines cost {overhead:.1}% of WASM throughput (wasm vs wasm-nodl)");
    }
    if let (Some(wasm), Some(native)) =
        (r.wasm.preemption_attempt_us, r.native.preemption_attempt_us)
    {
        println!(
            "preemptions: {} | {} (wasm | native); a cycle that preempts takes {:.0} | {:.0} µs: \
             {:.1} | {:.1} preemptions/s",
            r.wasm.preemptions,
            r.native.preemptions,
            wasm,
            native,
            1e6 / wasm,
            1e6 / native
        );
    }
    if let (Some(wasm), Some(native)) = (
        r.wasm.without_gated_pods_per_second,
        r.native.without_gated_pods_per_second,
    ) {
        println!(
            "beside {} gated pods: {:.0} | {:.0} pods/s (wasm | native); without them {wasm:.0} | \
             {native:.0}: with/without {} | {}",
            synthetic::GATED_PODS,
            r.wasm.pods_per_second,
            r.native.pods_per_second,
            or_na(ratio(r.wasm.pods_per_second, wasm), 2),
            or_na(ratio(r.native.pods_per_second, native), 2),
        );
    }
    if let (Some(wasm), Some(native)) = (r.wasm.shadow, r.native.shadow) {
        println!(
            "shadow: compared {} | {}, dropped {} | {} ({:.1}% | {:.1}%), agreement {:.1}% | {:.1}%, \
             done {:.0} | {:.0} ms after the live run (wasm | native)",
            wasm.compared,
            native.compared,
            wasm.dropped,
            native.dropped,
            share(wasm.dropped, wasm.compared + wasm.dropped),
            share(native.dropped, native.compared + native.dropped),
            wasm.agreement * 100.0,
            native.agreement * 100.0,
            wasm.drain_ms,
            native.drain_ms
        );
    }
    if let (Some(wasm), Some(native)) = (r.wasm.gangs, r.native.gangs) {
        println!(
            "gangs bound whole: {} | {} of {} (wasm | native); time to admit a gang p50 {:.2} | \
             {:.2} ms, p99 {:.2} | {:.2} ms",
            wasm.admitted,
            native.admitted,
            wasm.gangs,
            wasm.p50_ms,
            native.p50_ms,
            wasm.p99_ms,
            native.p99_ms
        );
    }
    if let (Some(wasm), Some(native)) = (
        r.wasm_speedup_over_one_thread,
        r.native_speedup_over_one_thread,
    ) {
        println!(
            "speed-up from 1 to {} threads: wasm {wasm:.2}x, native {native:.2}x",
            r.threads
        );
    }
}

/// Where the time of a pod went, in the host's phases and inside each plugin.
fn print_phases_and_plugins(r: &Report) {
    print!("µs per pod by host phase (wasm | native):");
    for ((name, wasm), (_, native)) in r.wasm.phases_us.iter().zip(&r.native.phases_us) {
        print!(" {name} {wasm:.1} | {native:.1};");
    }
    println!();
    print!("µs per pod inside plugins (wasm | native):");
    for time in &r.wasm.plugins_us {
        let native = r
            .native
            .plugins_us
            .iter()
            .find(|t| t.plugin == time.plugin && t.extension_point == time.extension_point)
            .map_or(0.0, |t| t.us_per_pod);
        print!(
            " {}.{} {:.1} | {:.1};",
            time.plugin, time.extension_point, time.us_per_pod, native
        );
    }
    println!();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_and_memory_per_node_are_not_made_up_without_pods_or_nodes() {
        assert_eq!(ratio(10.0, 20.0), Some(0.5));
        assert_eq!(ratio(0.0, 0.0), None, "0/0 pods per second is no ratio");
        assert_eq!(ratio(5.0, f64::NAN), None);
        assert_eq!(per_thousand_nodes(30.0, 5000), Some(6.0));
        assert_eq!(per_thousand_nodes(21_695.0, 0), None);
        assert_eq!(or_na(None, 2), "n/a");
        assert_eq!(or_na(Some(0.704), 2), "0.70");
    }

    fn run_at(pods_per_second: f64) -> RunReport {
        RunReport {
            runtime: "wasm",
            pods: 0,
            scheduled: 0,
            unschedulable: 0,
            errors: 0,
            setup_ms: 0.0,
            pods_per_second,
            p50_cycle_us: 0.0,
            p99_cycle_us: 0.0,
            peak_rss_mb: 0.0,
            rss_growth_mb: 0.0,
            phases_us: Vec::new(),
            plugins_us: Vec::new(),
            preemptions: 0,
            preemption_attempt_us: None,
            without_gated_pods_per_second: None,
            gangs: None,
            shadow: None,
        }
    }

    #[test]
    fn the_gated_scenario_schedules_only_its_measured_pods() {
        let cluster = synthetic::cluster(Scenario::Gated, 20, 30, 1);
        let config =
            bench_config(None, Scenario::Basic, DefaultPluginRuntime::Native, true, 1).unwrap();
        let mut loaded = Decider::new(&config.profiles().unwrap(), 1).unwrap();
        cluster.load_into(loaded.cache_mut());
        let mut tally = Tally::default();
        let (decider, _) = through_service(loaded, &cluster, 50, &mut tally);
        assert_eq!(tally.scheduled, 30);
        assert_eq!(tally.latencies.len(), 30, "no gated pod was attempted");
        let cache = decider.cache();
        let placed: usize = cache.nodes().map(|(_, node)| node.pod_count()).sum();
        assert_eq!(placed, 30, "each measured pod bound once, no gated pod");
        assert!(cluster
            .pods
            .iter()
            .all(|p| cache.pod_node(&p.key()).is_some()));
        assert_eq!(cache.pod_node("bench/gated-000000"), None);
    }

    #[test]
    fn the_median_run_of_several_rounds_is_the_one_shown() {
        let of = |figures: &[f64]| median_run(figures.iter().map(|&f| run_at(f)).collect());
        assert_eq!(of(&[9.0, 3.0, 5.0]).pods_per_second, 5.0);
        assert_eq!(of(&[4.0, 8.0]).pods_per_second, 8.0);
        assert_eq!(of(&[7.0]).pods_per_second, 7.0);
        assert_eq!(of(&[1.0, 100.0, 2.0, 3.0, 50.0]).pods_per_second, 3.0);
    }
}
