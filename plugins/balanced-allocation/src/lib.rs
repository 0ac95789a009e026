//! NodeResourcesBalancedAllocation: prefers nodes whose cpu and memory would be used in similar
//! proportions after placing the pod.

use serde::Deserialize;
use wasched_sdk::helpers::MAX_NODE_SCORE;
use wasched_sdk::{NodeInfo, Plugin, Pod, PodPlan, ScorePlugin};

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

/// The plugin; holds the resources it compares and the current pod's request of each.
pub struct BalancedAllocation {
    resources: Vec<String>,
    pod_requests: Vec<i64>,
}

impl Plugin for BalancedAllocation {
    const NAME: &'static str = NAME;
    const READS_USAGE: bool = true;

    fn new(config: &str) -> Result<Self, String> {
        let args: Args = serde_json::from_str(config).map_err(|e| e.to_string())?;
        if args.resources.is_empty() {
            return Err("resources must name at least one resource".to_string());
        }
        Ok(BalancedAllocation {
            resources: args.resources.into_iter().map(|r| r.name).collect(),
            pod_requests: Vec::new(),
        })
    }

    fn prepare(&mut self, pod: &Pod) -> PodPlan {
        // Uses the real requests (no 100m/200Mi defaults).
        self.pod_requests = self.resources.iter().map(|r| pod.requests.get(r)).collect();
        PodPlan {
            // A best-effort pod (no request for any of these resources) gets no opinion.
            score: self.pod_requests.iter().any(|r| *r != 0),
            ..PodPlan::default()
        }
    }
}

impl BalancedAllocation {
    /// The used fraction (capped at 1) of each resource that takes part, in order.
    fn fractions<'a>(&'a self, node: &'a NodeInfo) -> impl Iterator<Item = f64> + 'a {
        self.resources
            .iter()
            .zip(&self.pod_requests)
            .filter_map(move |(name, pod_request)| {
                let allocatable = node.allocatable.get(name);
                // An extended resource the pod does not ask for is left out.
                let is_scalar = !matches!(name.as_str(), "cpu" | "memory" | "ephemeral-storage");
                if allocatable == 0 || (is_scalar && *pod_request == 0) {
                    return None;
                }
                let requested = node.usage.requested.get(name) + pod_request;
                Some((requested as f64 / allocatable as f64).min(1.0))
            })
    }
}

impl ScorePlugin for BalancedAllocation {
    fn score(&self, _pod: &Pod, node: &NodeInfo) -> i64 {
        let (count, total) = self
            .fractions(node)
            .fold((0usize, 0f64), |(n, sum), f| (n + 1, sum + f));
        let std = match count {
            0 | 1 => 0.0,
            2 => {
                let mut pair = self.fractions(node);
                let (a, b) = (pair.next().unwrap(), pair.next().unwrap());
                ((a - b) / 2.0).abs()
            }
            n => {
                let mean = total / n as f64;
                let variance = self
                    .fractions(node)
                    .map(|f| (f - mean) * (f - mean))
                    .sum::<f64>()
                    / n as f64;
                variance.sqrt()
            }
        };
        ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
    }
}

wasched_sdk::export_plugin!(BalancedAllocation: score);
