//! `wasched bench`: a synthetic cluster scheduled with the default profile, once with the default
//! plugins as WebAssembly components and once natively, in the same process.
//!
//! The cluster spreads nodes over three zones with instance-type and disk labels, some tainted
//! (NoSchedule and PreferNoSchedule) and a few cordoned. Pods mix cpu/memory requests, tolerations,
//! node selectors, required and preferred node affinity, and zonal PersistentVolumeClaims. The same
//! seed gives the same cluster and the same pods.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::storage::v1::StorageClass;
use serde::Serialize;
use wasched_sdk as sdk;
use wasched_sdk::{Labels, Resources};

use crate::config::{Config, DefaultPluginRuntime};
use crate::framework::Scheduler;
use crate::util::Rng;

/// Command-line arguments of `wasched bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Number of nodes.
    #[arg(long, default_value_t = 5000)]
    pub nodes: usize,
    /// Number of pods to schedule.
    #[arg(long, default_value_t = 5000)]
    pub pods: usize,
    /// Seed of the synthetic cluster and of tie-breaking.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Node-update events pushed through the event pipeline for its throughput figure (0 skips it).
    #[arg(long, default_value_t = 200_000)]
    pub events: usize,
}

const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];
const INSTANCE_TYPES: [&str; 4] = ["m5.2xlarge", "m5.4xlarge", "c5.4xlarge", "r5.4xlarge"];

/// A generated cluster: nodes and the pods to schedule.
pub struct Synthetic {
    pub nodes: Vec<sdk::NodeInfo>,
    pub pods: Vec<sdk::Pod>,
    pub volumes: Vec<core::PersistentVolume>,
    pub claims: Vec<core::PersistentVolumeClaim>,
    pub classes: Vec<StorageClass>,
}

impl Synthetic {
    /// Puts the storage objects and the nodes (not the pods) into a cache.
    pub fn load_into(&self, cache: &mut crate::cache::Cache) {
        for class in &self.classes {
            cache.upsert_class(class.clone());
        }
        for volume in &self.volumes {
            cache.upsert_volume(volume.clone());
        }
        for claim in &self.claims {
            cache.upsert_claim(claim.clone());
        }
        for node in &self.nodes {
            cache.upsert_node(node.clone());
        }
    }
}

fn resources(milli_cpu: i64, memory_gib: i64, pods: i64) -> Resources {
    Resources {
        milli_cpu,
        memory: memory_gib << 30,
        ephemeral_storage: 100 << 30,
        pods,
        scalar: Vec::new(),
    }
}

/// Generates the cluster for `args`.
pub fn synthetic(args: &Args) -> Synthetic {
    let mut rng = Rng::new(args.seed);
    let nodes = (0..args.nodes)
        .map(|i| {
            let zone = ZONES[i % ZONES.len()];
            let instance = INSTANCE_TYPES[rng.below(INSTANCE_TYPES.len() as u64) as usize];
            let disk = if rng.chance(0.6) { "ssd" } else { "hdd" };
            let mut taints = Vec::new();
            if rng.chance(0.15) {
                taints.push(sdk::Taint {
                    key: "dedicated".into(),
                    value: "gpu".into(),
                    effect: "NoSchedule".into(),
                });
            }
            if rng.chance(0.1) {
                taints.push(sdk::Taint {
                    key: "spot".into(),
                    value: "true".into(),
                    effect: "PreferNoSchedule".into(),
                });
            }
            let big = rng.chance(0.5);
            sdk::NodeInfo {
                name: format!("node-{i:05}"),
                labels: [
                    ("kubernetes.io/hostname", format!("node-{i:05}")),
                    ("topology.kubernetes.io/zone", zone.to_string()),
                    ("topology.kubernetes.io/region", "region-1".to_string()),
                    ("node.kubernetes.io/instance-type", instance.to_string()),
                    ("disktype", disk.to_string()),
                ]
                .into_iter()
                .collect(),
                annotations: Labels::default(),
                taints,
                unschedulable: rng.chance(0.02),
                allocatable: if big {
                    resources(64_000, 256, 110)
                } else {
                    resources(32_000, 128, 110)
                },
                usage: sdk::NodeUsage::default(),
            }
        })
        .collect();

    let class: StorageClass = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "zonal"}, "provisioner": "example.com/disk", "volumeBindingMode": "Immediate"
    }))
    .expect("valid StorageClass");
    let mut volumes = Vec::new();
    let mut claims = Vec::new();
    let pods = (0..args.pods)
        .map(|i| {
            let cpu = 100 * (1 + rng.below(20) as i64);
            let memory = (128 << 20) * (1 + rng.below(32) as i64);
            let mut pod = sdk::Pod {
                namespace: "bench".into(),
                name: format!("pod-{i:06}"),
                scheduler_name: crate::DEFAULT_SCHEDULER_NAME.into(),
                requests: Resources {
                    milli_cpu: cpu,
                    memory,
                    ..Resources::default()
                },
                non_zero_requests: Resources {
                    milli_cpu: cpu,
                    memory,
                    ..Resources::default()
                },
                ..sdk::Pod::default()
            };
            if rng.chance(0.2) {
                pod.tolerations.push(sdk::Toleration {
                    key: "dedicated".into(),
                    operator: "Equal".into(),
                    value: "gpu".into(),
                    effect: "NoSchedule".into(),
                    toleration_seconds: None,
                });
            }
            if rng.chance(0.3) {
                pod.node_selector = [("disktype", "ssd")].into_iter().collect();
            }
            let mut affinity = sdk::NodeAffinity::default();
            if rng.chance(0.2) {
                affinity.required = Some(vec![sdk::NodeSelectorTerm {
                    match_expressions: vec![sdk::NodeSelectorRequirement {
                        key: "topology.kubernetes.io/zone".into(),
                        operator: "In".into(),
                        values: vec!["zone-a".into(), "zone-b".into()],
                    }],
                    match_fields: Vec::new(),
                }]);
            }
            if rng.chance(0.3) {
                let instance = INSTANCE_TYPES[rng.below(INSTANCE_TYPES.len() as u64) as usize];
                affinity.preferred.push(sdk::PreferredSchedulingTerm {
                    weight: 50,
                    preference: sdk::NodeSelectorTerm {
                        match_expressions: vec![sdk::NodeSelectorRequirement {
                            key: "node.kubernetes.io/instance-type".into(),
                            operator: "In".into(),
                            values: vec![instance.into()],
                        }],
                        match_fields: Vec::new(),
                    },
                });
            }
            if affinity.required.is_some() || !affinity.preferred.is_empty() {
                pod.node_affinity = Some(affinity);
            }
            if rng.chance(0.1) {
                let zone = ZONES[rng.below(ZONES.len() as u64) as usize];
                let (pv, pvc) = (format!("pv-{i}"), format!("data-{i}"));
                volumes.push(
                    serde_json::from_value(serde_json::json!({
                        "metadata": {"name": pv, "labels": {"topology.kubernetes.io/zone": zone}},
                        "spec": {"storageClassName": "zonal"}
                    }))
                    .expect("valid PersistentVolume"),
                );
                claims.push(
                    serde_json::from_value(serde_json::json!({
                        "metadata": {"name": pvc, "namespace": "bench"},
                        "spec": {"storageClassName": "zonal", "volumeName": pv}
                    }))
                    .expect("valid PersistentVolumeClaim"),
                );
                pod.volume_claims.push(sdk::VolumeClaim {
                    volume: "data".into(),
                    claim_name: pvc,
                    claim: None,
                });
            }
            pod
        })
        .collect();
    Synthetic {
        nodes,
        pods,
        volumes,
        claims,
        classes: vec![class],
    }
}

/// Figures for one runtime.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub runtime: &'static str,
    pub pods: usize,
    pub scheduled: usize,
    pub unschedulable: usize,
    pub errors: usize,
    /// Time to create plugin instances and send them every node.
    pub setup_ms: f64,
    pub pods_per_second: f64,
    pub p50_cycle_us: f64,
    pub p99_cycle_us: f64,
    /// Peak resident memory of the process when the run ended.
    pub peak_rss_mb: f64,
}

/// The whole benchmark's output.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub nodes: usize,
    pub pods: usize,
    pub seed: u64,
    pub threads: usize,
    pub wasm: RunReport,
    /// The same WASM run with call deadlines (epoch interruption) off.
    pub wasm_without_deadlines: RunReport,
    pub native: RunReport,
    /// WASM throughput over native throughput.
    pub wasm_native_ratio: f64,
    /// How much slower WASM runs with deadlines than without, in percent of throughput.
    pub deadline_overhead_percent: f64,
    /// Events the pipeline took in, collapsed and applied to the cache per second.
    pub events_per_second: f64,
}

/// Schedules the synthetic cluster with one runtime, with or without call deadlines.
///
/// # Errors
/// The default plugins failed to load.
pub fn run_once(
    cluster: &Synthetic,
    runtime: DefaultPluginRuntime,
    deadlines: bool,
    seed: u64,
) -> anyhow::Result<RunReport> {
    let mut config = Config::default();
    config.default_plugins = runtime;
    config.deadlines = deadlines;
    let profiles = config.profiles()?;
    let mut scheduler = Scheduler::new(&profiles, seed)?;
    cluster.load_into(&mut scheduler.cache);
    let setup = Instant::now();
    scheduler.warm_up()?;
    let setup = setup.elapsed();

    let mut latencies: Vec<Duration> = Vec::with_capacity(cluster.pods.len());
    let (mut scheduled, mut unschedulable, mut errors) = (0, 0, 0);
    let start = Instant::now();
    for pod in &cluster.pods {
        let cycle = Instant::now();
        let outcome = scheduler
            .schedule(pod, false)
            .expect("bench pods use the default profile");
        latencies.push(cycle.elapsed());
        match (&outcome.node, outcome.error) {
            (Some(_), _) => scheduled += 1,
            (None, true) => errors += 1,
            (None, false) => unschedulable += 1,
        }
    }
    let elapsed = start.elapsed();
    latencies.sort_unstable();
    let percentile = |p: f64| -> f64 {
        if latencies.is_empty() {
            return 0.0;
        }
        let index = ((latencies.len() as f64 * p).ceil() as usize).clamp(1, latencies.len()) - 1;
        latencies[index].as_secs_f64() * 1e6
    };
    Ok(RunReport {
        runtime: match (runtime, deadlines) {
            (DefaultPluginRuntime::Wasm, true) => "wasm",
            (DefaultPluginRuntime::Wasm, false) => "wasm-nodl",
            (DefaultPluginRuntime::Native, _) => "native",
        },
        pods: cluster.pods.len(),
        scheduled,
        unschedulable,
        errors,
        setup_ms: setup.as_secs_f64() * 1e3,
        pods_per_second: cluster.pods.len() as f64 / elapsed.as_secs_f64(),
        p50_cycle_us: percentile(0.50),
        p99_cycle_us: percentile(0.99),
        peak_rss_mb: peak_rss_mb(),
    })
}

/// Pushes `count` node-update events (labels changing, so each is relevant to the queue) through
/// the pipeline from a producer thread while the scheduler thread drains and applies them; returns
/// events per second.
///
/// # Errors
/// The default plugins failed to load.
pub fn event_throughput(cluster: &Synthetic, count: usize) -> anyhow::Result<f64> {
    use crate::events::{Action, Event, Object};
    use crate::service::{Binder, Service};

    struct NoBinder;
    impl Binder for NoBinder {
        fn bind(&mut self, _: &sdk::Pod, _: &str) -> Result<(), String> {
            Ok(())
        }
    }
    if count == 0 || cluster.nodes.is_empty() {
        return Ok(0.0);
    }
    let mut config = Config::default();
    config.default_plugins = DefaultPluginRuntime::Native;
    let scheduler = Scheduler::new(&config.profiles()?, 1)?;
    let mut service = Service::new(
        scheduler,
        NoBinder,
        std::sync::Arc::new(crate::clock::SystemClock::default()),
    );
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

/// Runs the benchmark and prints the report.
///
/// # Errors
/// The default plugins failed to load.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let cluster = synthetic(args);
    // WASM first, so its peak memory is not inflated by the native run.
    let wasm = run_once(&cluster, DefaultPluginRuntime::Wasm, true, args.seed)?;
    let wasm_without_deadlines = run_once(&cluster, DefaultPluginRuntime::Wasm, false, args.seed)?;
    let native = run_once(&cluster, DefaultPluginRuntime::Native, true, args.seed)?;
    let events_per_second = event_throughput(&cluster, args.events)?;
    let report = Report {
        events_per_second,
        nodes: args.nodes,
        pods: args.pods,
        seed: args.seed,
        threads: 1,
        wasm_native_ratio: wasm.pods_per_second / native.pods_per_second,
        deadline_overhead_percent: 100.0
            * (1.0 - wasm.pods_per_second / wasm_without_deadlines.pods_per_second),
        wasm,
        wasm_without_deadlines,
        native,
    };
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print_table(&report);
    }
    Ok(())
}

fn print_table(r: &Report) {
    println!(
        "wasched bench: {} nodes, {} pods, seed {}, default profile, {} scheduling thread",
        r.nodes, r.pods, r.seed, r.threads
    );
    println!(
        "{:<8} {:>10} {:>10} {:>10} {:>10} {:>9} {:>7} {:>7} {:>9}",
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
    for run in [&r.wasm, &r.wasm_without_deadlines, &r.native] {
        println!(
            "{:<8} {:>10.0} {:>10.1} {:>10.1} {:>10.1} {:>9} {:>7} {:>7} {:>9.1}",
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
    println!("wasm/native throughput ratio: {:.2}", r.wasm_native_ratio);
    println!(
        "call deadlines cost {:.1}% of WASM throughput (wasm vs wasm-nodl: deadlines off)",
        r.deadline_overhead_percent
    );
    if r.events_per_second > 0.0 {
        println!(
            "event pipeline: {:.0} node-update events/s submitted by one thread and applied by the scheduler thread",
            r.events_per_second
        );
    }
}
