//! Places each pod where it grows GPU fragmentation the least (the "fragmentation gradient
//! descent" of Weng et al., "Beware of Fragmentation", USENIX ATC '23).
//!
//! On a shared GPU cluster the expensive waste is a GPU nobody can use: a free 300m sliver beside a
//! 700m share that no waiting pod fits in, or free GPUs on a node whose CPU or memory other pods
//! have used up. kube-scheduler's default LeastAllocated scoring spreads pods and strands GPUs on
//! every node; MostAllocated packs CPU-only pods onto GPU nodes.
//!
//! The plugin is told the cluster's typical workload: request shapes with how often each occurs.
//! A node's fragmentation for one shape is the free GPU capacity that shape cannot use there: all
//! of it when the shape does not fit the node at all (GPUs, CPU or memory), else the free sliver of
//! a partly used GPU when the shape needs a whole GPU or more than the sliver. The node's
//! fragmentation is the weighted sum over the shapes, and each node is scored by how much placing
//! the pod would increase it: the smallest increase scores 100, the largest 0. Without a workload
//! the pod's own shape is the workload, which makes the plugin a GPU best fit.
//!
//! GPUs are counted per node, as `wasched replay` models the Alibaba trace: whole GPUs in use are
//! `gpu_resource` requests, GPU capacity in use is `gpu_milli_resource` requests (thousandths of a
//! GPU, which both whole-GPU pods and GPU shares request); shares are taken to be packed onto as
//! few GPUs as possible.
//!
//! ```toml
//! [plugins.GpuPacking]
//! config = { workload = [
//!   { gpus = 1, weight = 0.55, cpu_milli = 11000, memory_mib = 42000 },
//!   { gpu_milli = 810, weight = 0.15, cpu_milli = 3200, memory_mib = 5700 },
//! ] }
//! ```
//!
//! Each shape gives `gpus` (whole GPUs) or `gpu_milli` (a share of one GPU), and optionally its
//! CPU and memory; weights need not sum to 1.

use serde::Deserialize;
use wasched_sdk::{
    FilterPlan, NodeInfo, Nodes, Normalize, Plugin, Pod, PodParts, PodPlan, ScorePlugin,
};

const MIB: i64 = 1 << 20;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    #[serde(default = "default_milli_resource")]
    gpu_milli_resource: String,
    #[serde(default = "default_gpu_resource")]
    gpu_resource: String,
    #[serde(default)]
    workload: Vec<ShapeArgs>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ShapeArgs {
    #[serde(default)]
    gpus: i64,
    #[serde(default)]
    gpu_milli: i64,
    #[serde(default)]
    cpu_milli: i64,
    #[serde(default)]
    memory_mib: i64,
    weight: f64,
}

fn default_milli_resource() -> String {
    "alibaba.com/gpu-milli".to_string()
}

fn default_gpu_resource() -> String {
    "nvidia.com/gpu".to_string()
}

/// A request shape: whole GPUs, or a share of one GPU, with its CPU and memory.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Shape {
    whole: i64,
    /// Thousandths of a GPU; `whole * 1000` for whole-GPU shapes.
    milli: i64,
    cpu_milli: i64,
    memory: i64,
    weight: f64,
}

/// What is free on a node.
#[derive(Clone, Copy, Debug)]
struct Free {
    gpus: i64,
    /// GPUs not held by whole-GPU pods.
    untouched_gpus: i64,
    milli: i64,
    cpu_milli: i64,
    memory: i64,
}

impl Free {
    /// GPU capacity (in GPUs) that `shape` cannot use on a node with this much free.
    fn fragment(&self, shape: &Shape) -> f64 {
        if self.milli <= 0 {
            return 0.0;
        }
        let whole_free = self.untouched_gpus.min(self.milli / 1000);
        let sliver = self.milli - whole_free * 1000;
        let fits_host = self.cpu_milli >= shape.cpu_milli && self.memory >= shape.memory;
        let fits_gpu = if shape.whole > 0 {
            whole_free >= shape.whole
        } else {
            self.milli >= shape.milli
        };
        if !(fits_host && fits_gpu) {
            return self.milli as f64 / 1000.0;
        }
        if shape.whole > 0 || sliver < shape.milli {
            sliver as f64 / 1000.0
        } else {
            0.0
        }
    }

    fn fragmentation(&self, workload: &[Shape]) -> f64 {
        workload.iter().map(|s| s.weight * self.fragment(s)).sum()
    }

    fn minus(&self, pod: &Shape) -> Free {
        Free {
            gpus: self.gpus,
            untouched_gpus: self.untouched_gpus - pod.whole,
            milli: self.milli - pod.milli,
            cpu_milli: self.cpu_milli - pod.cpu_milli,
            memory: self.memory - pod.memory,
        }
    }
}

pub struct GpuPacking {
    milli_resource: String,
    gpu_resource: String,
    workload: Vec<Shape>,
    /// The pod being scheduled, as a shape.
    pod: Shape,
}

impl GpuPacking {
    fn free(&self, node: &NodeInfo) -> Free {
        let requested = &node.usage.requested;
        let gpus = node.allocatable.get(&self.gpu_resource);
        Free {
            gpus,
            untouched_gpus: gpus - requested.get(&self.gpu_resource),
            milli: node.allocatable.get(&self.milli_resource) - requested.get(&self.milli_resource),
            cpu_milli: node.allocatable.milli_cpu - requested.milli_cpu,
            memory: node.allocatable.memory - requested.memory,
        }
    }
}

impl Plugin for GpuPacking {
    const NAME: &'static str = "GpuPacking";
    const READS_USAGE: bool = true;
    const READS_POD: PodParts = PodParts::REQUESTS;

    fn new(config: &str) -> Result<Self, String> {
        let args: Args =
            serde_json::from_str(config).map_err(|e| format!("GpuPacking config: {e}"))?;
        if args.gpu_milli_resource.is_empty() || args.gpu_resource.is_empty() {
            return Err("GpuPacking config: resource names must not be empty".into());
        }
        let mut workload = Vec::new();
        for (i, s) in args.workload.iter().enumerate() {
            let shape = match (s.gpus, s.gpu_milli) {
                (g, 0) if g > 0 => Shape {
                    whole: g,
                    milli: g * 1000,
                    cpu_milli: s.cpu_milli,
                    memory: s.memory_mib * MIB,
                    weight: s.weight,
                },
                (0, m) if (1..1000).contains(&m) => Shape {
                    whole: 0,
                    milli: m,
                    cpu_milli: s.cpu_milli,
                    memory: s.memory_mib * MIB,
                    weight: s.weight,
                },
                _ => {
                    return Err(format!(
                        "GpuPacking config: workload[{i}] needs either gpus >= 1 or gpu_milli in 1..999, not gpus = {}, gpu_milli = {}",
                        s.gpus, s.gpu_milli
                    ))
                }
            };
            if !(s.weight.is_finite() && s.weight > 0.0) {
                return Err(format!(
                    "GpuPacking config: workload[{i}].weight must be positive, not {}",
                    s.weight
                ));
            }
            workload.push(shape);
        }
        Ok(GpuPacking {
            milli_resource: args.gpu_milli_resource,
            gpu_resource: args.gpu_resource,
            workload,
            pod: Shape {
                whole: 0,
                milli: 0,
                cpu_milli: 0,
                memory: 0,
                weight: 1.0,
            },
        })
    }

    fn prepare(&mut self, pod: &Pod, _nodes: &Nodes) -> PodPlan {
        let requests = &pod.requests;
        self.pod = Shape {
            whole: requests.get(&self.gpu_resource),
            milli: requests.get(&self.milli_resource),
            cpu_milli: requests.milli_cpu,
            memory: requests.memory,
            weight: 1.0,
        };
        let no_opinion = self.workload.is_empty() && self.pod.milli == 0;
        PodPlan {
            filter: FilterPlan::Skip,
            score: !no_opinion,
        }
    }
}

/// Fragmentation is scored in thousandths of a GPU.
const SCALE: f64 = 1000.0;
/// Raw scores are `growth * TIE_BREAK + free GPU capacity left`, the second below `TIE_BREAK`.
const TIE_BREAK: i64 = 1 << 20;

impl ScorePlugin for GpuPacking {
    const NORMALIZE: Normalize = Normalize::Custom;

    /// Minus the growth of the node's fragmentation (higher is better); normalized below.
    fn score(&self, _pod: &Pod, node: &NodeInfo) -> i64 {
        let free = self.free(node);
        let own = [self.pod];
        let workload = if self.workload.is_empty() {
            &own[..]
        } else {
            &self.workload[..]
        };
        let after = free.minus(&self.pod);
        let growth =
            ((after.fragmentation(workload) - free.fragmentation(workload)) * SCALE).round();
        // Among nodes of equal growth, the one with the least GPU capacity left (best fit).
        -(growth as i64) * TIE_BREAK - after.milli.clamp(0, TIE_BREAK - 1)
    }

    fn normalize(&self, _pod: &Pod, scores: &mut [i64]) {
        let (Some(&low), Some(&high)) = (scores.iter().min(), scores.iter().max()) else {
            return;
        };
        for score in scores.iter_mut() {
            *score = if high == low {
                100
            } else {
                (*score - low) * 100 / (high - low)
            };
        }
    }
}

wasched_sdk::export_plugin!(GpuPacking: score);

#[cfg(test)]
mod tests {
    use super::*;
    use wasched_sdk::Resources;

    const GPU_MILLI: &str = "alibaba.com/gpu-milli";
    const GPU: &str = "nvidia.com/gpu";

    /// A node with `gpus` GPUs, 64 cores and 256 GiB, of which `whole` GPUs, `milli` thousandths
    /// of GPU and `cpu` millicores are in use.
    fn node(gpus: i64, whole: i64, milli: i64, cpu: i64) -> NodeInfo {
        let mut node = NodeInfo::default();
        node.allocatable.milli_cpu = 64_000;
        node.allocatable.memory = 256 << 30;
        node.usage.requested.milli_cpu = cpu;
        if gpus > 0 {
            node.allocatable.scalar = vec![(GPU_MILLI.into(), gpus * 1000), (GPU.into(), gpus)];
            node.usage.requested.scalar = vec![(GPU_MILLI.into(), milli), (GPU.into(), whole)];
        }
        node
    }

    fn pod(whole: i64, milli: i64, cpu: i64) -> Pod {
        let mut requests = Resources {
            milli_cpu: cpu,
            memory: 1 << 30,
            ..Resources::default()
        };
        if milli > 0 {
            requests.scalar = vec![(GPU_MILLI.into(), milli)];
            if whole > 0 {
                requests.scalar.push((GPU.into(), whole));
            }
        }
        Pod {
            requests,
            ..Pod::default()
        }
    }

    fn scores(config: &str, pod: &Pod, nodes: &[NodeInfo]) -> Vec<i64> {
        let mut plugin = GpuPacking::new(config).unwrap();
        assert!(plugin.prepare(pod, &Nodes::default()).score);
        let mut s: Vec<i64> = nodes.iter().map(|n| plugin.score(pod, n)).collect();
        plugin.normalize(pod, &mut s);
        s
    }

    const WORKLOAD: &str = r#"{"workload": [
        {"gpus": 1, "weight": 0.6, "cpu_milli": 8000, "memory_mib": 1024},
        {"gpu_milli": 500, "weight": 0.4, "cpu_milli": 2000, "memory_mib": 1024}]}"#;

    #[test]
    fn a_share_fills_a_broken_gpu_before_breaking_a_whole_one() {
        // Node 0 has a whole GPU left and a 500m sliver; node 1 has two untouched GPUs.
        let nodes = [node(2, 0, 1500, 0), node(2, 0, 0, 0)];
        let s = scores(WORKLOAD, &pod(0, 500, 2000), &nodes);
        assert_eq!(s, vec![100, 0], "{s:?}");
        let s = scores("{}", &pod(0, 500, 2000), &nodes);
        assert_eq!(s, vec![100, 0], "best fit without a workload too: {s:?}");
    }

    #[test]
    fn cpu_pods_keep_away_from_gpus_they_would_strand() {
        // Node 0: GPUs free but 9 cores left; a 2-core pod would leave 7, too few for a whole-GPU
        // pod of the workload. Node 1 has no GPUs.
        let nodes = [node(2, 0, 0, 55_000), node(0, 0, 0, 0), node(2, 0, 0, 0)];
        let s = scores(WORKLOAD, &pod(0, 0, 2000), &nodes);
        assert_eq!(s[0], 0, "{s:?}");
        assert_eq!(s[1], 100, "{s:?}");
        assert!(
            s[2] > 90,
            "an idle GPU node loses nothing either, but keeps its GPUs free: {s:?}"
        );
    }

    #[test]
    fn whole_gpu_pods_take_the_node_they_fragment_least() {
        // Node 0: one whole GPU and a 300m sliver (a whole-GPU pod leaves only the sliver);
        // node 1: two untouched GPUs (the pod leaves one usable GPU).
        let nodes = [node(2, 0, 700, 0), node(2, 0, 0, 0)];
        let s = scores(WORKLOAD, &pod(1, 1000, 8000), &nodes);
        assert!(s[0] >= s[1], "{s:?}");
    }

    #[test]
    fn bad_configuration_is_refused_with_the_reason() {
        for (config, reason) in [
            (r#"{"gpu_milli_resource": ""}"#, "must not be empty"),
            (r#"{"gpus": 8}"#, "unknown field"),
            (
                r#"{"workload": [{"gpus": 1, "gpu_milli": 500, "weight": 1}]}"#,
                "workload[0]",
            ),
            (
                r#"{"workload": [{"gpu_milli": 1500, "weight": 1}]}"#,
                "gpu_milli in 1..999",
            ),
            (
                r#"{"workload": [{"gpus": 1, "weight": 0}]}"#,
                "weight must be positive",
            ),
        ] {
            let error = GpuPacking::new(config).err().unwrap();
            assert!(error.contains(reason), "{config}: {error}");
        }
    }
}
