//! NodeResourcesBalancedAllocation: prefers nodes whose cpu and memory would be used in similar
//! proportions after placing the pod.

#![warn(missing_docs)]

use serde::Deserialize;
use wasched_sdk::helpers::MAX_NODE_SCORE;
use wasched_sdk::{NodeInfo, NodeSummary, Nodes, Plugin, Pod, PodParts, PodPlan, ScorePlugin};

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
    const READS_POD: PodParts = PodParts::REQUESTS;
    const READS_USAGE: bool = true;
    const PLAN_IGNORES_USAGE: bool = true;

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
        let summary_suffices = resources.len() <= SUMMARY_RESOURCES
            && !resources.iter().any(|r| matches!(r, Compared::Scalar(_)));
        Ok(BalancedAllocation {
            resources,
            pod_requests: Vec::new(),
            summary_suffices,
        })
    }

    fn prepare(&mut self, pod: &Pod, _nodes: &Nodes) -> PodPlan {
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

/// Most resources compared from the summary (cpu, memory, ephemeral storage, maybe repeated).
const SUMMARY_RESOURCES: usize = 4;

impl BalancedAllocation {
    /// Passes `put` the used fraction (capped at 1) of each resource that takes part, in order,
    /// given the node's `(allocatable, requested)` of a resource.
    fn fractions(&self, amounts: impl Fn(&Compared) -> (i64, i64), mut put: impl FnMut(f64)) {
        for (resource, pod_request) in self.resources.iter().zip(&self.pod_requests) {
            let (allocatable, requested) = amounts(resource);
            // An extended resource the pod does not ask for is left out.
            let is_scalar = matches!(resource, Compared::Scalar(_));
            if allocatable == 0 || (is_scalar && *pod_request == 0) {
                continue;
            }
            put(capped_fraction(requested + pod_request, allocatable));
        }
    }
}

/// kube-scheduler's score from the used fractions: 100 times one minus their standard deviation.
fn balance_score(fractions: &[f64]) -> i64 {
    let std = match fractions {
        [] | [_] => 0.0,
        [a, b] => ((a - b) / 2.0).abs(),
        _ => {
            let n = fractions.len() as f64;
            let mean = fractions.iter().sum::<f64>() / n;
            let variance = fractions
                .iter()
                .map(|f| (f - mean) * (f - mean))
                .sum::<f64>()
                / n;
            variance.sqrt()
        }
    };
    ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
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
        let mut fractions = Vec::with_capacity(self.resources.len());
        self.fractions(
            |resource| {
                (
                    node.allocatable.get(resource.name()),
                    node.usage.requested.get(resource.name()),
                )
            },
            |f| fractions.push(f),
        );
        balance_score(&fractions)
    }

    /// Reads only the nodes' summaries, without allocating, when every compared resource is in
    /// them.
    fn score_batch(&mut self, pod: &Pod, nodes: &Nodes, ids: &[u32], out: &mut Vec<i64>) {
        if !self.summary_suffices {
            out.extend(ids.iter().map(|&id| match nodes.get(id) {
                Some(node) => self.score(pod, node),
                None => i64::MIN,
            }));
            return;
        }
        if let ([Compared::Cpu, Compared::Memory], &[cpu, memory]) =
            (self.resources.as_slice(), self.pod_requests.as_slice())
        {
            return cpu_and_memory_scores(nodes, ids, cpu, memory, out);
        }
        out.extend(ids.iter().map(|&id| match nodes.summary(id) {
            Some(node) => {
                let mut fractions = [0.0; SUMMARY_RESOURCES];
                let mut count = 0;
                self.fractions(
                    |resource| from_summary(node, resource),
                    |f| {
                        fractions[count] = f;
                        count += 1;
                    },
                );
                balance_score(&fractions[..count])
            }
            None => i64::MIN,
        }));
    }
}

/// The scores of the default comparison, cpu then memory, from the nodes' summaries: the same
/// arithmetic as [`BalancedAllocation::fractions`] and [`balance_score`], without the loop over
/// resources and the slice match, whose per-node branches and spills made the general loop
/// 1.6-1.85 times as slow as native in a component (criterion `score_batch`).
fn cpu_and_memory_scores(nodes: &Nodes, ids: &[u32], cpu: i64, memory: i64, out: &mut Vec<i64>) {
    out.extend(ids.iter().map(|&id| {
        let Some(node) = nodes.summary(id) else {
            return i64::MIN;
        };
        // A resource the node has none of is left out, as in [`BalancedAllocation::fractions`].
        let std = if node.allocatable_milli_cpu != 0 && node.allocatable_memory != 0 {
            let cpu_fraction =
                capped_fraction(node.requested_milli_cpu + cpu, node.allocatable_milli_cpu);
            let memory_fraction =
                capped_fraction(node.requested_memory + memory, node.allocatable_memory);
            ((cpu_fraction - memory_fraction) / 2.0).abs()
        } else {
            0.0
        };
        ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
    }));
}

/// `requested / allocatable` capped at 1; `allocatable` is not 0.
#[inline]
fn capped_fraction(requested: i64, allocatable: i64) -> f64 {
    let fraction = requested as f64 / allocatable as f64;
    // As kube-scheduler writes it; `f64::min` would also order NaNs, which cannot occur here,
    // and costs a long instruction sequence in a component.
    if fraction > 1.0 {
        1.0
    } else {
        fraction
    }
}

wasched_sdk::export_plugin!(BalancedAllocation: score);

/// kube-scheduler's behaviour as a table: run natively by this crate's tests and through the
/// WebAssembly build by the host's (`tests/e2e/plugins.rs`), which insists both builds agree.
#[cfg(not(target_arch = "wasm32"))]
pub fn cases() -> Vec<wasched_sdk::testing::Case> {
    use wasched_sdk::testing::{node, pod, requesting, with_usage, Case, GI};

    // A 1000m/1Gi pod on a 4000m/8Gi node: fractions 0.25/0.125, std 0.0625, score 93. On a node
    // using 2000m/6Gi: 0.75/0.875, 93 as well; on one using 3000m/0: 1.0/0.125, 56.
    let nodes = vec![
        node("empty"),
        with_usage(node("mixed"), 2000, 6 * GI, 1),
        with_usage(node("cpu-heavy"), 3000, 0, 1),
    ];
    vec![
        Case::score(
            "even use of cpu and memory scores higher",
            requesting(1000, GI),
            nodes.clone(),
            vec![93, 93, 56],
        ),
        Case::score(
            "a pod with no requests gets no opinion: no scores",
            pod("best-effort"),
            nodes,
            vec![],
        ),
    ]
}

#[cfg(test)]
mod tests {
    use wasched_sdk::testing::{answers, random_resource_node, requesting, Case, Walk, GI};

    #[test]
    fn answers_as_kube_scheduler() {
        wasched_sdk::testing::check::<super::BalancedAllocation>(&super::cases());
    }

    /// The cpu-and-memory loop against the general per-node score (`answers` fails on any
    /// difference), on nodes with and without each resource, full, overcommitted or empty.
    #[test]
    fn the_cpu_and_memory_batch_scores_as_the_general_path() {
        let mut walk = Walk(19);
        for round in 0..200 {
            let nodes = (0..40)
                .map(|i| random_resource_node(&mut walk, &format!("n{i}")))
                .collect();
            let pod = requesting(walk.below(5000) as i64, walk.below(20) as i64 * GI);
            let case = Case::score("random", pod, nodes, Vec::new());
            let scored = answers::<super::BalancedAllocation>(&case);
            assert!(
                scored.scores.is_empty() || scored.scores.len() == 40,
                "round {round}"
            );
        }
    }
}
