//! `wasched replay`: a recorded cluster trace (the Alibaba GPU cluster trace v2023, "OpenB")
//! through the same event pipeline, queue and assume/bind path as the service, in logical time.
//!
//! Conversion (stated because results depend on it):
//! - a node row becomes a Node with allocatable `cpu` = `cpu_milli`m, `memory` = `memory_mib`Mi,
//!   `pods` = 1000 (the trace has no pod limit), `nvidia.com/gpu` = `gpu` and
//!   [`GPU_MILLI`] = `gpu` * 1000, labelled [`GPU_MODEL_LABEL`] = `model` when it has GPUs;
//! - a pod row becomes a Pod requesting `cpu_milli`m and `memory_mib`Mi; a whole-GPU pod
//!   (`gpu_milli` = 1000) also requests `num_gpu` `nvidia.com/gpu` and `num_gpu` * 1000 of
//!   [`GPU_MILLI`]; a GPU-sharing pod (`num_gpu` = 1, `gpu_milli` < 1000) requests only `gpu_milli`
//!   of [`GPU_MILLI`]. So whole-GPU pods never get a GPU that shares are using, and shares fit while
//!   the node's total GPU capacity allows: per-GPU placement of shares is not modelled (two 600m
//!   shares may land on a node with one whole GPU free plus 200m of another);
//! - `gpu_spec` (models separated by `|`) becomes required node affinity `In` on the model label;
//! - an optional `job` column makes the pods of one job a gang: a PodGroup of them all
//!   (`minMember` their number, the plugin's default wait), its pods labelled with it. The
//!   v2023 trace has no such column (no job identity: at most 145 groups of 2-4 pods share a
//!   creation second and shape, too few and too uncertain to call jobs); lists converted from
//!   traces that have jobs (the v2020 trace's `job_name` and `inst_num`) can carry one.
//!
//! With `--gpus dra` the GPUs are DRA devices instead ([`dra`] states that conversion), and
//! `--gpus both` replays the trace both ways side by side.
//!
//! Pods are created at `creation_time` and deleted at `deletion_time`; the clock jumps from one
//! event time to the next, and every pod waiting in the queue is retried as it would be in the
//! service (on events that may help it, after its backoff, or after 5 minutes).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::{Deserialize, Serialize};

use crate::binding::MemoryBackend;
use crate::clock::FakeClock;
use crate::config::Config;
use crate::events::{EventPipeline, Object};
use crate::framework::Decider;
use crate::service::{PodState, Sequencer, Service};
use wasched_core::k8s::resourceclaims::Released;

pub mod dra;
pub mod report;

/// The label carrying a node's GPU model.
pub const GPU_MODEL_LABEL: &str = "gpu.model";
/// The extended resource counting GPU capacity in thousandths of a GPU.
pub const GPU_MILLI: &str = "alibaba.com/gpu-milli";
/// Whole GPUs.
pub const GPU: &str = "nvidia.com/gpu";

/// `wasched replay` options.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// The node list (`sn,cpu_milli,memory_mib,gpu,model`).
    #[arg(long)]
    pub nodes: PathBuf,
    /// The pod list (`name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec][,creation_time][,deletion_time][,job],...`);
    /// without times, pods arrive in row order and stay. The pods of one `job` are a gang (a
    /// PodGroup of them all; add `Coscheduling` to the profile, as examples/configs/gangs.toml).
    #[arg(long)]
    pub pods: PathBuf,
    /// Scheduler configuration (TOML); without it, the default profile.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Run the default plugins as WebAssembly components or natively (overrides the config).
    #[arg(long, value_enum)]
    pub runtime: Option<crate::config::DefaultPluginRuntime>,
    /// Seed for breaking ties between equally good nodes.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Replay only the first N pods (by creation time).
    #[arg(long)]
    pub limit: Option<usize>,
    /// How many points in logical time the allocation, pending and fragmentation series have.
    #[arg(long, default_value_t = 200, value_parser = crate::flags::replay_samples)]
    pub samples: usize,
    /// Keep every pod once placed, as the FGD paper's simulator does with this trace: the cluster
    /// fills up in creation order and shows how GPUs fragment as it does.
    #[arg(long)]
    pub ignore_deletions: bool,
    /// Replay the trace once with each of two configurations and put them side by side (in the
    /// JSON and in the report); `default` names the built-in default profile.
    #[arg(long, num_args = 2, value_names = ["CONFIG_A", "CONFIG_B"], conflicts_with = "config")]
    pub compare: Option<Vec<PathBuf>>,
    /// Pace the replay: N seconds of trace time per second of wall time (so a live `serve`-like
    /// run can be watched). Without it the clock jumps from event to event.
    #[arg(long, value_name = "N", conflicts_with = "as_fast_as_possible", value_parser = crate::flags::replay_speed)]
    pub speed: Option<f64>,
    /// Jump from event to event without waiting (the default).
    #[arg(long)]
    pub as_fast_as_possible: bool,
    /// How pods ask for GPUs: extended resources (`nvidia.com/gpu`), DRA devices (a ResourceSlice
    /// per node, a DeviceClass per model, a claim per pod from a template), or both, side by side.
    #[arg(long, value_enum, default_value_t = GpuRequests::ExtendedResources)]
    pub gpus: GpuRequests,
    /// Write DIR/summary.json (with the full series) and DIR/report.html (plots as inline SVG,
    /// viewable without a server).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// `--gpus`: how the trace's pods ask for GPUs.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GpuRequests {
    /// `nvidia.com/gpu` and [`GPU_MILLI`] extended resources, model by node affinity.
    #[default]
    ExtendedResources,
    /// Dynamic Resource Allocation devices ([`dra`]).
    Dra,
    /// One replay each way, side by side.
    Both,
}

/// How one replay runs, beyond the configuration and the trace.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Seed for breaking ties between equally good nodes.
    pub seed: u64,
    /// Points of the series over logical time.
    pub samples: usize,
    /// Keep every pod once placed.
    pub ignore_deletions: bool,
    /// Trace seconds per wall second; `None`: as fast as possible.
    pub speed: Option<f64>,
    /// The GPUs are DRA devices ([`dra`]) rather than extended resources.
    pub dra: bool,
}

/// One replay, named after its configuration.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// The configuration file's stem, or `default`.
    pub label: String,
    /// The configuration file, when there was one.
    pub config: Option<PathBuf>,
    /// What the replay found.
    pub summary: Summary,
}

/// A node row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceNode {
    /// The node's name.
    pub name: String,
    /// CPU, in millicores.
    pub cpu_milli: i64,
    /// Memory, in MiB.
    pub memory_mib: i64,
    /// Whole GPUs.
    pub gpu: i64,
    /// The GPU model, when the trace names one.
    pub model: Option<String>,
}

/// A pod row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracePod {
    /// The pod's name.
    pub name: String,
    /// CPU requested, in millicores.
    pub cpu_milli: i64,
    /// Memory requested, in MiB.
    pub memory_mib: i64,
    /// GPUs requested.
    pub num_gpu: i64,
    /// The share of each GPU requested, in thousandths.
    pub gpu_milli: i64,
    /// GPU models the pod accepts (any when empty).
    pub gpu_spec: Vec<String>,
    /// Seconds from the trace's start to the pod's creation.
    pub creation: u64,
    /// `None` for a list without `deletion_time`: the pod stays until the replay ends.
    pub deletion: Option<u64>,
    /// 1-based line in the file.
    pub line: usize,
    /// The `job` column, when the list has one: the pods of one job are a gang (a PodGroup of
    /// them all, `minMember` their number), bound all together or not at all under a profile
    /// with `Coscheduling`.
    pub job: Option<String>,
}

impl TracePod {
    /// GPU demand in thousandths of a GPU.
    pub fn gpu_demand_milli(&self) -> i64 {
        if self.gpu_milli >= 1000 {
            self.num_gpu * 1000
        } else {
            self.gpu_milli * self.num_gpu.min(1)
        }
    }

    fn whole_gpus(&self) -> i64 {
        if self.gpu_milli >= 1000 {
            self.num_gpu
        } else {
            0
        }
    }
}

/// A row that could not be converted.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SkippedRow {
    /// The file.
    pub file: String,
    /// The 1-based line.
    pub line: usize,
    /// Why it was skipped.
    pub reason: String,
}

/// Reads a CSV with a header into rows of named fields; `convert` turns each row into a value or
/// says why not.
fn read_csv<T>(
    path: &Path,
    required: &[&str],
    mut convert: impl FnMut(&HashMap<&str, &str>, usize) -> Result<T, String>,
) -> anyhow::Result<(Vec<T>, Vec<SkippedRow>)> {
    use std::io::BufRead;
    // Read a line at a time: a trace can be far larger than the rows kept from it.
    let file = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut lines = std::io::BufReader::new(file).lines();
    let header_line = lines
        .next()
        .with_context(|| format!("{}: empty file", path.display()))?
        .with_context(|| format!("reading {}", path.display()))?;
    let header: Vec<&str> = header_line.split(',').map(str::trim).collect();
    for column in required {
        if !header.contains(column) {
            anyhow::bail!(
                "{}:1: no `{column}` column (the header has: {})",
                path.display(),
                header.join(", ")
            );
        }
    }
    let (mut rows, mut skipped) = (Vec::new(), Vec::new());
    for (index, line) in lines.enumerate() {
        let number = index + 2;
        let line = line.with_context(|| format!("{}:{number}: reading", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let result = if fields.len() != header.len() {
            Err(format!(
                "{} fields, the header has {}",
                fields.len(),
                header.len()
            ))
        } else {
            let row: HashMap<&str, &str> = header.iter().copied().zip(fields).collect();
            convert(&row, number)
        };
        match result {
            Ok(value) => rows.push(value),
            Err(reason) => skipped.push(SkippedRow {
                file: path.display().to_string(),
                line: number,
                reason,
            }),
        }
    }
    Ok((rows, skipped))
}

fn number(row: &HashMap<&str, &str>, column: &str) -> Result<i64, String> {
    let text = row.get(column).copied().unwrap_or("");
    let value: i64 = text
        .parse()
        .map_err(|_| format!("{column} {text:?} is not a whole number"))?;
    if value < 0 {
        return Err(format!("{column} is negative ({value})"));
    }
    Ok(value)
}

/// Reads the node list.
///
/// # Errors
/// The file cannot be read or lacks a column.
pub fn read_nodes(path: &Path) -> anyhow::Result<(Vec<TraceNode>, Vec<SkippedRow>)> {
    let mut first_lines = HashMap::new();
    read_csv(
        path,
        &["sn", "cpu_milli", "memory_mib", "gpu", "model"],
        |row, line| {
            let name = row["sn"].to_string();
            if name.is_empty() {
                return Err("empty node name".into());
            }
            let gpu = number(row, "gpu")?;
            let model = Some(row["model"].to_string()).filter(|m| !m.is_empty());
            if gpu > 0 && model.is_none() {
                return Err(format!("{gpu} GPUs without a model"));
            }
            let cpu_milli = number(row, "cpu_milli")?;
            let memory_mib = number(row, "memory_mib")?;
            first_seen(&mut first_lines, &name, line, "node")?;
            Ok(TraceNode {
                name,
                cpu_milli,
                memory_mib,
                gpu,
                model,
            })
        },
    )
}

/// Records `name` as seen on `line`, or says where it was first seen: a second row of one name
/// would replace the first in the cluster, so it is refused rather than silently lost.
fn first_seen(
    first_lines: &mut HashMap<String, usize>,
    name: &str,
    line: usize,
    what: &str,
) -> Result<(), String> {
    match first_lines.entry(name.to_string()) {
        std::collections::hash_map::Entry::Occupied(first) => Err(format!(
            "duplicate {what} name {name:?} (first on line {})",
            first.get()
        )),
        std::collections::hash_map::Entry::Vacant(slot) => {
            slot.insert(line);
            Ok(())
        }
    }
}

/// Reads the pod list, in creation order.
///
/// `gpu_spec`, `creation_time` and `deletion_time` may be missing, as in the trace's
/// resource-only lists (`name,cpu_milli,memory_mib,num_gpu,gpu_milli`): then any model will do,
/// pods arrive in row order at time 0, and they stay until the replay ends.
///
/// # Errors
/// The file cannot be read or lacks a column.
pub fn read_pods(path: &Path) -> anyhow::Result<(Vec<TracePod>, Vec<SkippedRow>)> {
    let columns = ["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"];
    let mut first_lines = HashMap::new();
    let (mut pods, skipped) = read_csv(path, &columns, |row, line| {
        let name = row["name"].to_string();
        if name.is_empty() {
            return Err("empty pod name".into());
        }
        let num_gpu = number(row, "num_gpu")?;
        let gpu_milli = number(row, "gpu_milli")?;
        if gpu_milli > 1000 {
            return Err(format!("gpu_milli {gpu_milli} is more than one GPU"));
        }
        if num_gpu > 1 && gpu_milli != 1000 {
            return Err(format!(
                "{num_gpu} GPUs with a share of {gpu_milli}: shares are for one GPU"
            ));
        }
        if num_gpu > 0 && gpu_milli == 0 {
            return Err(format!("{num_gpu} GPUs with gpu_milli 0"));
        }
        let optional = |column: &str| {
            row.contains_key(column)
                .then(|| number(row, column).map(|n| n as u64))
                .transpose()
        };
        let creation = optional("creation_time")?.unwrap_or(0);
        let deletion = optional("deletion_time")?;
        if let Some(deletion) = deletion.filter(|&d| d < creation) {
            return Err(format!(
                "deleted at {deletion}, before its creation at {creation}"
            ));
        }
        let cpu_milli = number(row, "cpu_milli")?;
        let memory_mib = number(row, "memory_mib")?;
        first_seen(&mut first_lines, &name, line, "pod")?;
        Ok(TracePod {
            name,
            cpu_milli,
            memory_mib,
            num_gpu,
            gpu_milli: if num_gpu == 0 { 0 } else { gpu_milli },
            gpu_spec: row
                .get("gpu_spec")
                .unwrap_or(&"")
                .split('|')
                .filter(|m| !m.is_empty())
                .map(str::to_string)
                .collect(),
            creation,
            deletion,
            line,
            job: row
                .get("job")
                .filter(|job| !job.is_empty())
                .map(|job| job.to_string()),
        })
    })?;
    pods.sort_by_key(|p| (p.creation, p.line));
    Ok((pods, skipped))
}

fn quantities(pairs: &[(&str, String)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Quantity(v.clone())))
        .collect()
}

/// The Node a row becomes.
pub fn node_object(node: &TraceNode) -> core::Node {
    let mut labels = BTreeMap::from([("kubernetes.io/hostname".to_string(), node.name.clone())]);
    if let Some(model) = &node.model {
        labels.insert(GPU_MODEL_LABEL.into(), model.clone());
    }
    let mut allocatable = vec![
        ("cpu", format!("{}m", node.cpu_milli)),
        ("memory", format!("{}Mi", node.memory_mib)),
        ("pods", "1000".to_string()),
    ];
    if node.gpu > 0 {
        allocatable.push((GPU, node.gpu.to_string()));
        allocatable.push((GPU_MILLI, (node.gpu * 1000).to_string()));
    }
    core::Node {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(node.name.clone()),
            labels: Some(labels),
            ..Default::default()
        },
        status: Some(core::NodeStatus {
            allocatable: Some(quantities(&allocatable)),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The PodGroups of the pods' jobs (namespace `trace`): one per job, `minMember` the number of
/// its pods.
pub fn job_groups(pods: &[TracePod]) -> Vec<Object> {
    let mut sizes: BTreeMap<&str, i32> = BTreeMap::new();
    for job in pods.iter().filter_map(|p| p.job.as_deref()) {
        *sizes.entry(job).or_default() += 1;
    }
    sizes
        .into_iter()
        .map(|(job, size)| {
            let group = wasched_core::k8s::podgroup::PodGroup {
                metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                    name: Some(job.to_string()),
                    namespace: Some("trace".into()),
                    ..Default::default()
                },
                spec: wasched_core::k8s::podgroup::PodGroupSpec {
                    min_member: size,
                    ..Default::default()
                },
                status: None,
            };
            Object::PodGroup(Box::new(group))
        })
        .collect()
}

/// The Pod a row becomes (namespace `trace`; a job's pods labelled with its PodGroup).
pub fn pod_object(pod: &TracePod) -> core::Pod {
    let mut requests = vec![
        ("cpu", format!("{}m", pod.cpu_milli)),
        ("memory", format!("{}Mi", pod.memory_mib)),
    ];
    let mut limits = Vec::new();
    if pod.whole_gpus() > 0 {
        requests.push((GPU, pod.whole_gpus().to_string()));
        limits.push((GPU, pod.whole_gpus().to_string()));
    }
    if pod.gpu_demand_milli() > 0 {
        requests.push((GPU_MILLI, pod.gpu_demand_milli().to_string()));
        limits.push((GPU_MILLI, pod.gpu_demand_milli().to_string()));
    }
    let affinity = (!pod.gpu_spec.is_empty()).then(|| core::Affinity {
        node_affinity: Some(core::NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(core::NodeSelector {
                node_selector_terms: vec![core::NodeSelectorTerm {
                    match_expressions: Some(vec![core::NodeSelectorRequirement {
                        key: GPU_MODEL_LABEL.into(),
                        operator: "In".into(),
                        values: Some(pod.gpu_spec.clone()),
                    }]),
                    ..Default::default()
                }],
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    core::Pod {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(pod.name.clone()),
            namespace: Some("trace".into()),
            labels: pod.job.as_ref().map(|job| {
                BTreeMap::from([(
                    wasched_core::k8s::podgroup::POD_GROUP_LABEL.to_string(),
                    job.clone(),
                )])
            }),
            ..Default::default()
        },
        spec: Some(core::PodSpec {
            containers: vec![core::Container {
                name: "main".into(),
                resources: Some(core::ResourceRequirements {
                    requests: Some(quantities(&requests)),
                    limits: (!limits.is_empty()).then(|| quantities(&limits)),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            affinity,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// One point of the series over logical time.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Sample {
    /// Seconds from the trace's start.
    pub time: u64,
    /// Requested / allocatable, cluster-wide.
    pub cpu: f64,
    /// Requested / allocatable memory.
    pub memory: f64,
    /// Requested / allocatable GPUs.
    pub gpu: f64,
    /// Pods created and not placed yet.
    pub pending: usize,
    /// Pods placed and not deleted.
    pub running: usize,
    /// Pods created so far, and deleted so far (`pending + running + deleted = created`).
    pub created: usize,
    /// Pods deleted so far.
    pub deleted: usize,
    /// Expected GPUs that the trace's GPU workload cannot use (the FGD paper's fragmentation).
    pub gpu_fragmentation: f64,
    /// Free GPUs on nodes where the typical GPU request does not fit.
    pub gpu_free_unusable_by_typical: f64,
    /// Free GPUs.
    pub gpu_free: f64,
}

/// Latency in microseconds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Slowest.
    pub max: f64,
}

/// Cycles whose wall time was at most `le_us` (and more than the previous bucket's); the last
/// bucket also holds anything slower.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LatencyBucket {
    /// The bucket's upper bound (µs).
    pub le_us: f64,
    /// Cycles in it.
    pub count: u64,
}

/// Upper bounds of the latency histogram's buckets, in microseconds (1-2-5 steps, 10 µs to 10 s).
const LATENCY_BOUNDS_US: [f64; 19] = [
    10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6, 2e6,
    5e6, 1e7,
];

/// The histogram of `sorted_ns` (cycle times in nanoseconds, sorted).
fn latency_histogram(sorted_ns: &[u64]) -> Vec<LatencyBucket> {
    let mut buckets: Vec<LatencyBucket> = LATENCY_BOUNDS_US
        .iter()
        .map(|&le_us| LatencyBucket { le_us, count: 0 })
        .collect();
    let last = buckets.len() - 1;
    for &ns in sorted_ns {
        let us = ns as f64 / 1000.0;
        let i = LATENCY_BOUNDS_US
            .iter()
            .position(|&le| us <= le)
            .unwrap_or(last);
        buckets[i].count += 1;
    }
    buckets
}

/// Where one pod row of a trace ended in a replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodEnd {
    /// The pod's name.
    pub pod: String,
    /// The first node it was placed on.
    pub node: Option<String>,
    /// Its last FitError, when it was never placed.
    pub message: Option<String>,
}

/// What a replay found.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    /// Nodes in the trace.
    pub nodes: usize,
    /// GPUs in the trace.
    pub gpus: i64,
    /// Pods in the trace.
    pub pods: usize,
    /// Rows that could not be converted.
    pub skipped_rows: Vec<SkippedRow>,
    /// Pods placed at some point.
    pub placed: usize,
    /// Pods deleted (at their deletion time) without ever being placed.
    pub never_placed: usize,
    /// For pods never placed: how many had each reason in their last FitError message.
    pub never_placed_reasons: BTreeMap<String, usize>,
    /// Scheduling cycles run.
    pub cycles: u64,
    /// Cycles no node fitted.
    pub unschedulable_attempts: u64,
    /// Cycles a plugin failed (trap, missed deadline, invalid answer, quarantine): a difference
    /// between two runs of the same trace that placements alone would not explain.
    #[serde(default)]
    pub plugin_errors: u64,
    /// Cycle latency.
    pub latency_us: Latency,
    /// Cycle latency by bucket.
    pub latency_histogram: Vec<LatencyBucket>,
    /// Cycles per second of wall time.
    pub decisions_per_second: f64,
    /// Wall time of the replay.
    pub wall_seconds: f64,
    /// The typical GPU request (`num_gpu` x `gpu_milli`), the one used for the simple
    /// fragmentation figure.
    pub typical_gpu_request: String,
    /// The cluster sampled over the trace's time.
    pub series: Vec<Sample>,
    /// The largest share of any node's capacity ever requested (must stay <= 1).
    pub max_node_commitment: f64,
    /// Pods whose node in the scheduler's cache differs from the replay's own record, summed over
    /// the samples (must be 0).
    pub bookkeeping_mismatches: usize,
    /// sha256 over every placement in order: equal for equal inputs and seeds.
    pub placements_sha256: String,
    /// Each pod row's first node, or why it was never placed (for `wasched diff --trace`; not
    /// written out).
    #[serde(skip)]
    pub pod_ends: Vec<PodEnd>,
    /// How pods asked for GPUs: `extended-resources` or `dra`.
    #[serde(default)]
    pub gpu_requests: String,
}

/// A class of GPU request with its share of the GPU workload.
struct GpuClass {
    whole: i64,
    milli: i64,
    cpu_milli: i64,
    memory_mib: i64,
    weight: f64,
}

fn gpu_classes(pods: &[TracePod]) -> Vec<GpuClass> {
    let mut groups: BTreeMap<(i64, i64), (i64, i64, usize)> = BTreeMap::new();
    for pod in pods.iter().filter(|p| p.num_gpu > 0) {
        let entry = groups
            .entry((pod.whole_gpus(), pod.gpu_demand_milli()))
            .or_default();
        entry.0 += pod.cpu_milli;
        entry.1 += pod.memory_mib;
        entry.2 += 1;
    }
    let total: usize = groups.values().map(|g| g.2).sum();
    groups
        .into_iter()
        .map(|((whole, milli), (cpu, memory, count))| GpuClass {
            whole,
            milli,
            cpu_milli: cpu / count as i64,
            memory_mib: memory / count as i64,
            weight: count as f64 / total as f64,
        })
        .collect()
}

/// What is in use on one node, by the replay's own bookkeeping.
#[derive(Default, Clone)]
struct Usage {
    cpu_milli: i64,
    memory_mib: i64,
    gpu_milli: i64,
    whole_gpus: i64,
}

/// The GPUs of `node` that a task of `class` cannot use, with shares assumed packed onto as few
/// GPUs as possible (the node-level model above): all free GPU capacity when the task does not
/// fit, else the free part of a partly used GPU that the task cannot take.
fn fragment(node: &TraceNode, used: &Usage, class: &GpuClass) -> f64 {
    let free_milli = node.gpu * 1000 - used.gpu_milli;
    if free_milli <= 0 {
        return 0.0;
    }
    let free_whole = (node.gpu - used.whole_gpus).min(free_milli / 1000);
    let partial = free_milli - free_whole * 1000;
    let fits_host = node.cpu_milli - used.cpu_milli >= class.cpu_milli
        && node.memory_mib - used.memory_mib >= class.memory_mib;
    let fits_gpu = if class.whole > 0 {
        free_whole >= class.whole
    } else {
        free_milli >= class.milli
    };
    if !(fits_host && fits_gpu) {
        return free_milli as f64 / 1000.0;
    }
    if class.whole > 0 || partial < class.milli {
        partial as f64 / 1000.0
    } else {
        0.0
    }
}

const CREATE: u8 = 1;

/// The trace's events as (time, order, pod row), sorted. At one time, deletions free resources
/// before creations ask for them, except the deletion of a pod created at that same time, which
/// follows its creation.
fn timeline(pods: &[TracePod], options: &Options) -> Vec<(u64, u8, usize)> {
    let mut events: Vec<(u64, u8, usize)> = Vec::with_capacity(pods.len() * 2);
    for (i, pod) in pods.iter().enumerate() {
        events.push((pod.creation, CREATE, i));
        if let Some(deletion) = pod.deletion.filter(|_| !options.ignore_deletions) {
            let order = if deletion == pod.creation { 2 } else { 0 };
            events.push((deletion, order, i));
        }
    }
    events.sort_unstable();
    events
}

/// The replay's own record of where each pod runs, kept beside the scheduler's cache to check it
/// and to measure the cluster without asking the scheduler.
struct Record<'a> {
    nodes: &'a [TraceNode],
    pods: &'a [TracePod],
    usage: Vec<Usage>,
    placed_on: Vec<Option<usize>>,
    first_node: Vec<Option<usize>>,
    ever_placed: Vec<bool>,
    created: Vec<bool>,
    last_message: Vec<Option<String>>,
    created_total: usize,
    deleted_total: usize,
    unschedulable: u64,
    plugin_errors: u64,
    max_commitment: f64,
    placements: sha2::Sha256,
    /// GPUs are DRA devices: a share takes a whole device.
    dra: bool,
}

impl<'a> Record<'a> {
    fn new(nodes: &'a [TraceNode], pods: &'a [TracePod], dra: bool) -> Self {
        Record {
            nodes,
            pods,
            dra,
            usage: vec![Usage::default(); nodes.len()],
            placed_on: vec![None; pods.len()],
            first_node: vec![None; pods.len()],
            ever_placed: vec![false; pods.len()],
            created: vec![false; pods.len()],
            last_message: vec![None; pods.len()],
            created_total: 0,
            deleted_total: 0,
            unschedulable: 0,
            plugin_errors: 0,
            max_commitment: 0.0,
            placements: sha2::Sha256::default(),
        }
    }

    /// The GPU capacity (thousandths) and whole GPUs pod row `i` holds once placed.
    fn gpu_held(&self, i: usize) -> (i64, i64) {
        let pod = &self.pods[i];
        if self.dra {
            let devices = dra::devices_asked(pod);
            (devices * 1000, devices)
        } else {
            (pod.gpu_demand_milli(), pod.whole_gpus())
        }
    }

    fn created(&mut self, i: usize) {
        self.created[i] = true;
        self.created_total += 1;
    }

    fn deleted(&mut self, i: usize) {
        self.created[i] = false;
        self.deleted_total += 1;
        self.released(i);
    }

    /// Pod row `i` no longer holds a node (deleted, or rejected while it waited at Permit).
    fn released(&mut self, i: usize) {
        if let Some(n) = self.placed_on[i].take() {
            let (gpu_milli, whole_gpus) = self.gpu_held(i);
            let pod = &self.pods[i];
            let used = &mut self.usage[n];
            used.cpu_milli -= pod.cpu_milli;
            used.memory_mib -= pod.memory_mib;
            used.gpu_milli -= gpu_milli;
            used.whole_gpus -= whole_gpus;
        }
    }

    /// Pod row `i` (key `key`) placed on node row `n`, or let go there after waiting at Permit.
    fn placed(&mut self, i: usize, n: usize, key: &str) {
        if self.placed_on[i] != Some(n) {
            self.held(i, n);
        }
        self.ever_placed[i] = true;
        self.first_node[i].get_or_insert(n);
        sha2::Digest::update(
            &mut self.placements,
            format!(
                "{key} {}
",
                self.nodes[n].name
            ),
        );
    }

    /// Pod row `i` holds node row `n`: placed, or reserved there while it waits at Permit (a
    /// gang member; it counts as placed once let go).
    fn held(&mut self, i: usize, n: usize) {
        self.released(i);
        self.placed_on[i] = Some(n);
        let (gpu_milli, whole_gpus) = self.gpu_held(i);
        let pod = &self.pods[i];
        let used = &mut self.usage[n];
        used.cpu_milli += pod.cpu_milli;
        used.memory_mib += pod.memory_mib;
        used.gpu_milli += gpu_milli;
        used.whole_gpus += whole_gpus;
        let node = &self.nodes[n];
        let mut commitment = ratio_of(used.cpu_milli, node.cpu_milli)
            .max(ratio_of(used.memory_mib, node.memory_mib));
        if node.gpu > 0 {
            commitment = commitment
                .max(ratio_of(used.gpu_milli, node.gpu * 1000))
                .max(ratio_of(used.whole_gpus, node.gpu));
        }
        self.max_commitment = self.max_commitment.max(commitment);
    }

    /// Pod row `i` not placed by a cycle that ended with `message`.
    fn not_placed(&mut self, i: usize, plugin_error: bool, message: Option<String>) {
        if plugin_error {
            self.plugin_errors += 1;
        } else {
            self.unschedulable += 1;
        }
        self.last_message[i] = message;
    }

    /// Pods never placed, and how many of them the last FitError of each gave each reason.
    fn never_placed(&self) -> (usize, BTreeMap<String, usize>) {
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        let mut never_placed = 0;
        for (i, placed) in self.ever_placed.iter().enumerate() {
            if *placed {
                continue;
            }
            never_placed += 1;
            let message = self.last_message[i].as_deref().unwrap_or("never attempted");
            for reason in fit_error_reasons(message) {
                *reasons.entry(reason).or_default() += 1;
            }
        }
        (never_placed, reasons)
    }

    fn pod_ends(&self) -> Vec<PodEnd> {
        let ends = self
            .pods
            .iter()
            .zip(&self.first_node)
            .zip(&self.last_message);
        ends.map(|((pod, node), message)| PodEnd {
            pod: pod.name.clone(),
            node: node.map(|n| self.nodes[n].name.clone()),
            message: match node {
                Some(_) => None,
                None => Some(message.clone().unwrap_or_else(|| "never attempted".into())),
            },
        })
        .collect()
    }

    fn placements_sha256(&self) -> String {
        let digest = sha2::Digest::finalize(self.placements.clone());
        let mut hex = String::new();
        for byte in digest {
            let _ = write!(hex, "{byte:02x}");
        }
        hex
    }
}

/// Measures the cluster at sample times from the replay's record.
struct Sampler<'a> {
    nodes: &'a [TraceNode],
    classes: Vec<GpuClass>,
    typical: Option<GpuClass>,
    /// Total cpu (milli), memory (MiB) and GPU (milli).
    capacity: (i64, i64, i64),
}

impl<'a> Sampler<'a> {
    fn new(nodes: &'a [TraceNode], pods: &[TracePod]) -> Self {
        let classes = gpu_classes(pods);
        let typical = classes
            .iter()
            .max_by(|a, b| a.weight.total_cmp(&b.weight))
            .map(|c| GpuClass { ..*c });
        let capacity = nodes.iter().fold((0i64, 0i64, 0i64), |acc, n| {
            (
                acc.0 + n.cpu_milli,
                acc.1 + n.memory_mib,
                acc.2 + n.gpu * 1000,
            )
        });
        Sampler {
            nodes,
            classes,
            typical,
            capacity,
        }
    }

    fn sample(&self, time: u64, record: &Record) -> Sample {
        let (mut cpu, mut memory, mut gpu) = (0i64, 0i64, 0i64);
        let (mut frag, mut unusable, mut free) = (0.0, 0.0, 0.0);
        for (node, used) in self.nodes.iter().zip(&record.usage) {
            cpu += used.cpu_milli;
            memory += used.memory_mib;
            gpu += used.gpu_milli;
            let free_here = (node.gpu * 1000 - used.gpu_milli) as f64 / 1000.0;
            free += free_here;
            frag += self
                .classes
                .iter()
                .map(|c| c.weight * fragment(node, used, c))
                .sum::<f64>();
            if let Some(t) = &self.typical {
                if free_here > 0.0 && fragment(node, used, t) == free_here {
                    unusable += free_here;
                }
            }
        }
        let ratio = |used: i64, total: i64| {
            if total == 0 {
                0.0
            } else {
                used as f64 / total as f64
            }
        };
        let running = record.placed_on.iter().filter(|p| p.is_some()).count();
        let pending = record
            .created
            .iter()
            .zip(&record.placed_on)
            .filter(|(c, p)| **c && p.is_none())
            .count();
        Sample {
            time,
            cpu: ratio(cpu, self.capacity.0),
            memory: ratio(memory, self.capacity.1),
            gpu: ratio(gpu, self.capacity.2),
            pending,
            running,
            created: record.created_total,
            deleted: record.deleted_total,
            gpu_fragmentation: frag,
            gpu_free_unusable_by_typical: unusable,
            gpu_free: free,
        }
    }

    /// The most common GPU request, as the summary names it.
    fn typical_request(&self) -> String {
        match &self.typical {
            Some(t) if t.whole > 0 => format!("{} GPU", t.whole),
            Some(t) => format!("{}m GPU", t.milli),
            None => "none".into(),
        }
    }
}

/// The trace as the objects a replay submits, for one way of asking for GPUs.
struct TraceObjects {
    /// Nodes, then what the pods refer to (DRA's classes, slices and templates).
    cluster: Vec<Object>,
    /// The pods, in the trace's order, as their key and JSON (shared with the in-memory API
    /// server), each typed when it is created or deleted: typed, a 163,000-pod trace's pods
    /// took over half a gigabyte until the end of the replay.
    pods: Vec<(String, Arc<str>)>,
    /// Each pod's ResourceClaim, created with it and deleted with it.
    claims: Vec<Option<k8s_openapi::api::resource::v1::ResourceClaim>>,
}

/// A pod as its key and JSON.
fn pod_json(pod: &core::Pod) -> (String, Arc<str>) {
    let json = serde_json::to_string(pod).expect("Kubernetes objects serialize");
    (wasched_core::k8s::pod_key(pod), Arc::from(json))
}

impl TraceObjects {
    fn new(nodes: &[TraceNode], pods: &[TracePod], options: &Options) -> TraceObjects {
        if !options.dra {
            let mut cluster: Vec<Object> = nodes
                .iter()
                .map(|n| Object::Node(Box::new(node_object(n))))
                .collect();
            cluster.extend(job_groups(pods));
            return TraceObjects {
                cluster,
                pods: pods.iter().map(|p| pod_json(&pod_object(p))).collect(),
                claims: vec![None; pods.len()],
            };
        }
        let workload = dra::workload(nodes, pods, options.seed);
        let mut cluster: Vec<Object> = nodes
            .iter()
            .map(|n| Object::Node(Box::new(dra::node_object(n))))
            .collect();
        cluster.extend(workload.objects);
        cluster.extend(job_groups(pods));
        TraceObjects {
            cluster,
            pods: workload.pods.iter().map(pod_json).collect(),
            claims: workload.claims,
        }
    }

    /// Pod row `i`, typed.
    fn pod(&self, i: usize) -> core::Pod {
        wasched_core::input::json_pod(&self.pods[i].1)
    }

    /// Pod row `i` created: its claim, then the pod.
    fn create(&self, i: usize, driven: &Driven) {
        if let Some(claim) = &self.claims[i] {
            let claim = Object::ResourceClaim(Box::new(claim.clone()));
            driven.pipeline.submit(driven.sequence.upsert(claim));
        }
        let pod = Object::Pod(Box::new(self.pod(i)));
        driven.pipeline.submit(driven.sequence.upsert(pod));
    }

    /// Pod row `i` deleted: the pod, then its claims given back as kube's resourceclaim
    /// controller gives them back (the claim made for it deleted).
    fn delete(&self, i: usize, driven: &Driven) {
        let pod = self.pod(i);
        driven
            .pipeline
            .submit(driven.sequence.delete(Object::Pod(Box::new(pod.clone()))));
        let claim = |name: &str| {
            self.claims[i]
                .clone()
                .filter(|c| c.metadata.name.as_deref() == Some(name))
        };
        for released in wasched_core::k8s::resourceclaims::released_claims(&pod, claim) {
            let event = match released {
                Released::Deleted(claim) => driven
                    .sequence
                    .delete(Object::ResourceClaim(Box::new(claim))),
                Released::Updated(claim) => driven
                    .sequence
                    .upsert(Object::ResourceClaim(Box::new(claim))),
            };
            driven.pipeline.submit(event);
        }
    }
}

/// The service a replay drives, the pipeline its events go through, and their sequencer.
struct Driven {
    service: Service,
    pipeline: Arc<EventPipeline>,
    sequence: Arc<Sequencer>,
    clock: FakeClock,
}

impl Driven {
    /// A service over the trace's nodes (submitted, not yet applied) whose binder confirms each
    /// binding with the pod's update (and writes its claims), as an API server would.
    fn start(config: &Config, objects: &TraceObjects, seed: u64) -> anyhow::Result<Driven> {
        let clock = FakeClock::default();
        let decider = Decider::with_clock(&config.profiles()?, seed, Arc::new(clock.clone()))?;
        let pipeline = Arc::new(EventPipeline::default());
        let sequence = Arc::new(Sequencer::default());
        let claims: Vec<Object> = objects
            .claims
            .iter()
            .flatten()
            .map(|c| Object::ResourceClaim(Box::new(c.clone())))
            .collect();
        // The in-memory API server keeps the trace's pods as JSON (a typed pod is several times
        // larger), the same copy as `objects`, and the service no copy of every object: a
        // replay never resyncs.
        let backend = MemoryBackend::new(pipeline.clone(), sequence.clone(), [])
            .kept_compact()
            .with_pods_json(objects.pods.iter().cloned())
            .with_resource_claims(&claims);
        let service = Service::with_pipeline(
            decider,
            Some(Box::new(backend)),
            Arc::new(clock.clone()),
            pipeline.clone(),
        )
        .without_resync();
        for object in &objects.cluster {
            pipeline.submit(sequence.upsert(object.clone()));
        }
        Ok(Driven {
            service,
            pipeline,
            sequence,
            clock,
        })
    }

    /// Schedules until the queue has nothing ready, recording each cycle's time and outcome.
    fn schedule_ready(
        &mut self,
        record: &mut Record,
        node_index: &HashMap<&str, usize>,
        pod_index: &HashMap<String, usize>,
        latencies: &mut Vec<u64>,
    ) {
        loop {
            let cycle = Instant::now();
            let Some(result) = self.service.schedule_one() else {
                break;
            };
            latencies.push(cycle.elapsed().as_nanos() as u64);
            let Some(&i) = pod_index.get(&result.pod) else {
                continue;
            };
            if !result.waiting_on.is_empty() {
                // Reserved on its node while it waits at Permit (its result names no node).
                if let Some(PodState::Assumed { node }) = self.service.pod_state(&result.pod) {
                    record.held(i, node_index[node.as_str()]);
                }
                continue;
            }
            match &result.outcome.node {
                Some(node) => record.placed(i, node_index[node.as_str()], &result.pod),
                None => {
                    record.released(i);
                    record.not_placed(i, result.outcome.error, result.outcome.message.clone());
                }
            }
        }
    }
}

/// Replays the trace with the configuration's profiles.
///
/// # Errors
/// The configuration or a plugin cannot be loaded.
pub fn replay(
    config: &Config,
    nodes: &[TraceNode],
    pods: &[TracePod],
    skipped_rows: Vec<SkippedRow>,
    options: &Options,
) -> anyhow::Result<Summary> {
    let objects = TraceObjects::new(nodes, pods, options);
    let mut driven = Driven::start(config, &objects, options.seed)?;
    let events = timeline(pods, options);
    let start = events.first().map_or(0, |e| e.0);
    let end = events.last().map_or(0, |e| e.0);
    let samples = options.samples.max(1) as u64;
    // Sample k (0..samples) is taken at start + k * (end - start) / samples, then one at the end.
    let sample_time = |k: u64| start + (end - start) * k / samples;
    let mut taken = 0u64;
    let (node_index, pod_index) = indexes(nodes, pods);
    let sampler = Sampler::new(nodes, pods);
    let mut record = Record::new(nodes, pods, options.dra);
    let mut latencies: Vec<u64> = Vec::new();
    let mut series = Vec::new();
    let mut mismatches = 0usize;
    let started = Instant::now();
    let mut now = 0u64;

    for group in events.chunk_by(|a, b| a.0 == b.0) {
        let time = group[0].0;
        if taken < samples && sample_time(taken) <= time {
            let cache = driven.service.decider().cache();
            mismatches += cache_mismatches(cache, pods, nodes, &record.placed_on);
            mismatches += device_mismatches(cache, &record, options.dra);
        }
        while taken < samples && sample_time(taken) <= time {
            series.push(sampler.sample(sample_time(taken), &record));
            taken += 1;
        }
        if let Some(speed) = options.speed.filter(|s| *s > 0.0) {
            keep_pace(speed, time - start, started);
        }
        driven.clock.advance(Duration::from_secs(time - now));
        now = time;
        for &(_, order, i) in group {
            if order == CREATE {
                record.created(i);
                objects.create(i, &driven);
            } else {
                record.deleted(i);
                objects.delete(i, &driven);
            }
        }
        driven.schedule_ready(&mut record, &node_index, &pod_index, &mut latencies);
    }
    let cache = driven.service.decider().cache();
    mismatches += cache_mismatches(cache, pods, nodes, &record.placed_on);
    mismatches += device_mismatches(cache, &record, options.dra);
    series.push(sampler.sample(end, &record));
    let wall = started.elapsed().as_secs_f64();

    let (never_placed, never_placed_reasons) = record.never_placed();
    latencies.sort_unstable();
    Ok(Summary {
        nodes: nodes.len(),
        gpus: nodes.iter().map(|n| n.gpu).sum(),
        pods: pods.len(),
        skipped_rows,
        placed: record.ever_placed.iter().filter(|p| **p).count(),
        never_placed,
        never_placed_reasons,
        cycles: latencies.len() as u64,
        unschedulable_attempts: record.unschedulable,
        plugin_errors: record.plugin_errors,
        latency_us: Latency::of_sorted(&latencies),
        latency_histogram: latency_histogram(&latencies),
        decisions_per_second: latencies.len() as f64 / wall,
        wall_seconds: wall,
        typical_gpu_request: sampler.typical_request(),
        series,
        max_node_commitment: record.max_commitment,
        bookkeeping_mismatches: mismatches,
        placements_sha256: record.placements_sha256(),
        pod_ends: record.pod_ends(),
        gpu_requests: if options.dra {
            "dra"
        } else {
            "extended-resources"
        }
        .into(),
    })
}

/// Each node's index by name, and each pod's by its key in the scheduler (`trace/NAME`).
fn indexes<'a>(
    nodes: &'a [TraceNode],
    pods: &[TracePod],
) -> (HashMap<&'a str, usize>, HashMap<String, usize>) {
    let node_index = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.as_str(), i))
        .collect();
    let pod_index = pods
        .iter()
        .enumerate()
        .map(|(i, p)| (format!("trace/{}", p.name), i))
        .collect();
    (node_index, pod_index)
}

/// Sleeps until `trace_seconds` of the trace, played `speed` times faster, have passed since
/// `started`.
fn keep_pace(speed: f64, trace_seconds: u64, started: Instant) {
    let wait = Duration::try_from_secs_f64(trace_seconds as f64 / speed);
    if let Some(due) = wait.ok().and_then(|w| started.checked_add(w)) {
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
    }
}

impl Latency {
    /// The median, 99th percentile and maximum of `latencies` (ns, sorted), in µs.
    fn of_sorted(latencies: &[u64]) -> Latency {
        let at = |q: f64| {
            latencies
                .get(((latencies.len() as f64 - 1.0) * q).round() as usize)
                .map_or(0.0, |&ns| ns as f64 / 1000.0)
        };
        Latency {
            p50: at(0.5),
            p99: at(0.99),
            max: at(1.0),
        }
    }
}

/// Pods on a different node (or none) in the scheduler's cache than in the replay's record.
fn cache_mismatches(
    cache: &crate::cache::Cache,
    pods: &[TracePod],
    nodes: &[TraceNode],
    placed_on: &[Option<usize>],
) -> usize {
    let in_cache = cache.placed_pods().count();
    let running = placed_on.iter().filter(|p| p.is_some()).count();
    let differing = pods
        .iter()
        .zip(placed_on)
        .filter(|(pod, placed)| {
            let cached = cache.pod_node(&format!("trace/{}", pod.name));
            cached != placed.map(|n| nodes[n].name.as_str())
        })
        .count();
    differing + in_cache.abs_diff(running)
}

/// With DRA devices: nodes whose devices held in the scheduler's cache are not the GPUs the
/// replay's record has in use there.
fn device_mismatches(cache: &crate::cache::Cache, record: &Record, dra: bool) -> usize {
    if !dra {
        return 0;
    }
    let mut held: HashMap<&str, i64> = HashMap::new();
    for ((_, pool, _), _) in cache.device_store().holders() {
        *held.entry(pool.as_str()).or_default() += 1;
    }
    record
        .nodes
        .iter()
        .zip(&record.usage)
        .filter(|(node, used)| {
            held.get(node.name.as_str()).copied().unwrap_or(0) != used.whole_gpus
        })
        .count()
}

fn ratio_of(used: i64, total: i64) -> f64 {
    if total == 0 {
        if used > 0 {
            f64::INFINITY
        } else {
            0.0
        }
    } else {
        used as f64 / total as f64
    }
}

/// The reasons of a FitError message, without their node counts: `0/5 nodes are available: 3
/// Insufficient cpu, 2 node(s) didn't match ...` -> `Insufficient cpu`, `node(s) didn't match ...`.
pub fn fit_error_reasons(message: &str) -> Vec<String> {
    // What preemption adds after the filters' reasons says why evicting would not help.
    let message = message
        .split_once(" preemption: ")
        .map_or(message, |(fit, _)| fit);
    let Some((_, reasons)) = message.split_once(": ") else {
        return vec![message.trim_end_matches('.').to_string()];
    };
    // What a PostFilter adds before preemption's text (DynamicResources' `still not
    // schedulable,`) follows the reasons' closing full stop.
    let reasons = reasons
        .split_once(". ")
        .map_or(reasons, |(reasons, _)| reasons);
    reasons
        .trim_end_matches('.')
        .split(", ")
        .map(|part| {
            let part = part.trim();
            match part.split_once(' ') {
                Some((count, rest)) if count.parse::<usize>().is_ok() => rest.to_string(),
                _ => part.to_string(),
            }
        })
        .collect()
}

/// `default` in `--compare`, unless a file of that name exists.
fn is_builtin_default(path: &Path) -> bool {
    path == Path::new("default") && !path.exists()
}

/// One run per configuration, or two with `--gpus both` (extended resources, then DRA devices).
fn replay_each(
    configs: &[Option<PathBuf>],
    loaded: &[Config],
    gpus: GpuRequests,
    options: &Options,
    trace: (&[TraceNode], &[TracePod], &[SkippedRow]),
) -> anyhow::Result<Vec<Run>> {
    let (nodes, pods, skipped) = trace;
    let mut runs = Vec::new();
    for (path, config) in configs.iter().cloned().zip(loaded) {
        let path = path.filter(|p| !is_builtin_default(p));
        let label = path.as_deref().and_then(Path::file_stem).map_or_else(
            || "default".to_string(),
            |s| s.to_string_lossy().into_owned(),
        );
        if gpus == GpuRequests::Both {
            for (dra, way) in [(false, "extended resources"), (true, "DRA devices")] {
                let options = Options {
                    dra,
                    ..options.clone()
                };
                let summary = replay(config, nodes, pods, skipped.to_vec(), &options)?;
                runs.push(Run {
                    label: format!("{label}, {way}"),
                    config: path.clone(),
                    summary,
                });
            }
            continue;
        }
        let summary = replay(config, nodes, pods, skipped.to_vec(), options)?;
        runs.push(Run {
            label,
            config: path,
            summary,
        });
    }
    Ok(runs)
}

/// `wasched replay`: one run per configuration (two with `--compare`), written to `--out`.
///
/// # Errors
/// Unreadable files or configuration, or an output that cannot be written.
pub fn run(args: &Args) -> anyhow::Result<Vec<Run>> {
    let configs: Vec<Option<PathBuf>> = match &args.compare {
        Some(pair) => pair.iter().cloned().map(Some).collect(),
        None => vec![args.config.clone()],
    };
    let mut loaded = Vec::new();
    for path in &configs {
        let mut config = match path {
            Some(path) if !is_builtin_default(path) => Config::load(path)?,
            _ => Config::default(),
        };
        if let Some(runtime) = args.runtime {
            config.default_plugins = runtime;
        }
        loaded.push(config);
    }
    if let Some(speed) = args.speed {
        anyhow::ensure!(
            speed.is_finite() && speed > 0.0,
            "--speed must be a positive number of trace seconds per wall second, not {speed}"
        );
    }
    let (nodes, mut skipped) = read_nodes(&args.nodes)?;
    let (mut pods, skipped_pods) = read_pods(&args.pods)?;
    skipped.extend(skipped_pods);
    for row in &skipped {
        eprintln!("skipped {}:{}: {}", row.file, row.line, row.reason);
    }
    if let Some(limit) = args.limit {
        pods.truncate(limit);
    }
    let options = Options {
        seed: args.seed,
        samples: args.samples,
        ignore_deletions: args.ignore_deletions,
        speed: args.speed,
        dra: args.gpus == GpuRequests::Dra,
    };
    let mut runs = replay_each(
        &configs,
        &loaded,
        args.gpus,
        &options,
        (&nodes, &pods, &skipped),
    )?;
    if runs.len() == 2 && runs[0].label == runs[1].label {
        runs[0].label.push_str(" (A)");
        runs[1].label.push_str(" (B)");
    }
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join("summary.json");
        let json = if runs.len() > 1 {
            serde_json::to_string_pretty(&serde_json::json!({ "runs": runs }))?
        } else {
            serde_json::to_string_pretty(&runs[0].summary)?
        };
        std::fs::write(&path, json).with_context(|| format!("writing {}", path.display()))?;
        let path = dir.join("report.html");
        let context = report::Context {
            nodes: args.nodes.display().to_string(),
            pods: args.pods.display().to_string(),
            seed: args.seed,
            ignore_deletions: args.ignore_deletions,
            limit: args.limit,
        };
        std::fs::write(&path, report::html(&context, &runs)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_error_reasons_drop_counts() {
        assert_eq!(
            fit_error_reasons("0/5 nodes are available: 3 Insufficient cpu, 2 node(s) didn't match Pod's node affinity/selector."),
            vec!["Insufficient cpu", "node(s) didn't match Pod's node affinity/selector"]
        );
        assert_eq!(
            fit_error_reasons("0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."),
            vec!["Insufficient cpu"]
        );
        assert_eq!(
            fit_error_reasons("0/2 nodes are available: 1 Insufficient cpu, 1 cannot allocate all claims. still not schedulable, preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."),
            vec!["Insufficient cpu", "cannot allocate all claims"]
        );
        assert_eq!(
            fit_error_reasons("never attempted"),
            vec!["never attempted"]
        );
    }

    #[test]
    fn fragmentation_counts_free_gpus_a_task_cannot_use() {
        let node = TraceNode {
            name: "n".into(),
            cpu_milli: 8000,
            memory_mib: 8192,
            gpu: 2,
            model: Some("T4".into()),
        };
        let whole = GpuClass {
            whole: 1,
            milli: 1000,
            cpu_milli: 1000,
            memory_mib: 1024,
            weight: 1.0,
        };
        let share = GpuClass {
            whole: 0,
            milli: 500,
            cpu_milli: 1000,
            memory_mib: 1024,
            weight: 1.0,
        };
        let mut used = Usage::default();
        assert_eq!(fragment(&node, &used, &whole), 0.0, "an empty node fits");
        used.gpu_milli = 700; // a 700m share
        assert_eq!(
            fragment(&node, &used, &whole),
            0.3,
            "the rest of the shared GPU"
        );
        assert_eq!(
            fragment(&node, &used, &share),
            0.3,
            "a 500m share fits on the free GPU, but not in the 300m left beside the 700m share"
        );
        used.gpu_milli = 1700; // plus one whole GPU
        used.whole_gpus = 1;
        assert_eq!(
            fragment(&node, &used, &whole),
            0.3,
            "no whole GPU left: 0.3 is unusable"
        );
        assert_eq!(
            fragment(&node, &used, &share),
            0.3,
            "500m does not fit in 300m"
        );
        used.gpu_milli = 700;
        used.whole_gpus = 0;
        used.cpu_milli = 7500;
        assert_eq!(
            fragment(&node, &used, &whole),
            1.3,
            "no CPU left: every free GPU is stranded"
        );
    }
}
