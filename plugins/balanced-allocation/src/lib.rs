//! NodeResourcesBalancedAllocation: prefers nodes whose cpu and memory would be used in similar
//! proportions after placing the pod.

use serde::Deserialize;
use wasched_sdk::helpers::MAX_NODE_SCORE;
use wasched_sdk::{NodeInfo, NodeSummary, Nodes, Plugin, Pod, PodPlan, ScorePlugin};

/// The name used in configs and messages.
pub const NAME: &str = "NodeResourcesBalancedAllocation";

/// Configuration: the resources compared (default cpu and memory; weights are ignored, as in
/// kube-scheduler).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Args {
    #[serde(default = "default_resources")]
    resources: Vec<ResourceSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResourceSpec {
    name: String,
    #[serde(default)]
    #[allow(dead_code)]
    weight: Option<i64>,
}

fn default_resources() -> Vec<ResourceSpec> {
    ["cpu", "memory"]
        .into_iter()
        .map(|name| ResourceSpec {
            name: name.to_string(),
            weight: None,
        })
        .collect()
}

/// A compared resource, resolved from its name once.
enum Compared {
    Cpu,
    Memory,
    EphemeralStorage,
    Scalar(String),
}

impl Compared {
    fn of(name: String) -> Self {
        match name.as_str() {
            "cpu" => Compared::Cpu,
            "memory" => Compared::Memory,
            "ephemeral-storage" => Compared::EphemeralStorage,
            _ => Compared::Scalar(name),
        }
    }

    fn name(&self) -> &str {
        match self {
            Compared::Cpu => "cpu",
            Compared::Memory => "memory",
            Compared::EphemeralStorage => "ephemeral-storage",
            Compared::Scalar(name) => name,
        }
    }
}

/// The plugin; holds the resources it compares and the current pod's request of each.
pub struct BalancedAllocation {
    resources: Vec<Compared>,
    pod_requests: Vec<i64>,
    /// True when every compared resource is in [`NodeSummary`].
    summary_suffices: bool,
}

impl Plugin for BalancedAllocation {
    const NAME: &'static str = NAME;
    const READS_USAGE: bool = true;

    fn new(config: &str) -> Result<Self, String> {
        let args: Args = serde_json::from_str(config).map_err(|e| e.to_string())?;
        if args.resources.is_empty() {
            return Err("resources must name at least one resource".to_string());
        }
        let resources: Vec<Compared> = args
            .resources
            .into_iter()
            .map(|r| Compared::of(r.name))
            .collect();
        let summary_suffices = !resources.iter().any(|r| matches!(r, Compared::Scalar(_)));
        Ok(BalancedAllocation {
            resources,
            pod_requests: Vec::new(),
            summary_suffices,
        })
    }

    fn prepare(&mut self, pod: &Pod) -> PodPlan {
        // Uses the real requests (no 100m/200Mi defaults).
        self.pod_requests = self
            .resources
            .iter()
            .map(|r| pod.requests.get(r.name()))
            .collect();
        PodPlan {
            // A best-effort pod (no request for any of these resources) gets no opinion.
            score: self.pod_requests.iter().any(|r| *r != 0),
            ..PodPlan::default()
        }
    }
}

impl BalancedAllocation {
    /// The used fraction (capped at 1) of each resource that takes part, in order, given the
    /// node's `(allocatable, requested)` of a resource.
    fn fractions<'a>(
        &'a self,
        amounts: &'a impl Fn(&Compared) -> (i64, i64),
    ) -> impl Iterator<Item = f64> + 'a {
        self.resources
            .iter()
            .zip(&self.pod_requests)
            .filter_map(move |(resource, pod_request)| {
                let (allocatable, requested) = amounts(resource);
                // An extended resource the pod does not ask for is left out.
                let is_scalar = matches!(resource, Compared::Scalar(_));
                if allocatable == 0 || (is_scalar && *pod_request == 0) {
                    return None;
                }
                let requested = requested + pod_request;
                Some((requested as f64 / allocatable as f64).min(1.0))
            })
    }

    fn score_with(&self, amounts: impl Fn(&Compared) -> (i64, i64)) -> i64 {
        let (count, total) = self
            .fractions(&amounts)
            .fold((0usize, 0f64), |(n, sum), f| (n + 1, sum + f));
        let std = match count {
            0 | 1 => 0.0,
            2 => {
                let mut pair = self.fractions(&amounts);
                let (a, b) = (pair.next().unwrap(), pair.next().unwrap());
                ((a - b) / 2.0).abs()
            }
            n => {
                let mean = total / n as f64;
                let variance = self
                    .fractions(&amounts)
                    .map(|f| (f - mean) * (f - mean))
                    .sum::<f64>()
                    / n as f64;
                variance.sqrt()
            }
        };
        ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
    }
}

fn from_summary(node: &NodeSummary, resource: &Compared) -> (i64, i64) {
    match resource {
        Compared::Cpu => (node.allocatable_milli_cpu, node.requested_milli_cpu),
        Compared::Memory => (node.allocatable_memory, node.requested_memory),
        Compared::EphemeralStorage => (
            node.allocatable_ephemeral_storage,
            node.requested_ephemeral_storage,
        ),
        Compared::Scalar(_) => unreachable!("summary_suffices excludes scalar resources"),
    }
}

impl ScorePlugin for BalancedAllocation {
    fn score(&self, _pod: &Pod, node: &NodeInfo) -> i64 {
        self.score_with(|resource| {
            (
                node.allocatable.get(resource.name()),
                node.usage.requested.get(resource.name()),
            )
        })
    }

    /// Reads only the nodes' summaries when every compared resource is in them.
    fn score_batch(&mut self, pod: &Pod, nodes: &Nodes, ids: &[u32], out: &mut Vec<i64>) {
        if !self.summary_suffices {
            out.extend(ids.iter().map(|&id| match nodes.get(id) {
                Some(node) => self.score(pod, node),
                None => i64::MIN,
            }));
            return;
        }
        out.extend(ids.iter().map(|&id| match nodes.summary(id) {
            Some(node) => self.score_with(|resource| from_summary(node, resource)),
            None => i64::MIN,
        }));
    }
}

wasched_sdk::export_plugin!(BalancedAllocation: score);
