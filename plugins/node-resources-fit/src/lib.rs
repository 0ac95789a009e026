//! NodeResourcesFit: a pod fits a node when the node's allocatable covers what is already requested
//! there plus the pod's request; among fitting nodes it scores by LeastAllocated (default),
//! MostAllocated or RequestedToCapacityRatio.

#![warn(missing_docs)]

mod args;

use std::borrow::Cow;

pub use args::Args;
use args::Strategy;
use wasched_sdk::helpers::{round_half_away, MAX_NODE_SCORE};
use wasched_sdk::{
    resource, Failure, FilterPlugin, FilterResults, NodeInfo, NodeSummary, Nodes, Plugin, Pod,
    PodParts, PodPlan, ScorePlugin, Verdict,
};

/// The name used in configs and messages.
pub const NAME: &str = "NodeResourcesFit";
/// kube-scheduler's reason when the node has no pod slot left.
pub const REASON_TOO_MANY_PODS: &str = "Too many pods";

/// The plugin; holds its configuration and the current pod's request per scored resource.
pub struct NodeResourcesFit {
    args: Args,
    pod_score_requests: Vec<i64>,
    /// The [`NodeSummary`] field of each scored resource, in order, when they all have one.
    /// Worked out once: matching each resource's name per node was a string compare per node
    /// and resource, a library call in a component.
    summary_fields: Option<Vec<SummaryField>>,
    /// True when the current pod requests no extended resource the filter checks, so the filter
    /// only needs [`NodeSummary`].
    filter_from_summary: bool,
}

impl Plugin for NodeResourcesFit {
    const NAME: &'static str = NAME;
    const READS_POD: PodParts = PodParts::REQUESTS;
    const READS_USAGE: bool = true;
    const PLAN_IGNORES_USAGE: bool = true;

    fn new(config: &str) -> Result<Self, String> {
        let args = Args::parse(config)?;
        let summary_fields = args
            .scoring
            .resources
            .iter()
            .map(|r| SummaryField::of(&r.name))
            .collect();
        Ok(NodeResourcesFit {
            args,
            pod_score_requests: Vec::new(),
            summary_fields,
            filter_from_summary: false,
        })
    }

    fn prepare(&mut self, pod: &Pod, _nodes: &Nodes) -> PodPlan {
        self.pod_score_requests = self
            .args
            .scoring
            .resources
            .iter()
            .map(|r| score_request(pod, &r.name))
            .collect();
        self.filter_from_summary = pod
            .requests
            .scalar
            .iter()
            .all(|(name, want)| *want == 0 || self.args.ignores(name));
        PodPlan::default()
    }
}

/// The pod's request of `name` as scoring sees it: a missing cpu/memory request counts as
/// 100m/200Mi, other resources use the real request.
fn score_request(pod: &Pod, name: &str) -> i64 {
    match name {
        resource::CPU | resource::MEMORY => pod.non_zero_requests.get(name),
        _ => pod.requests.get(name),
    }
}

/// `(allocatable, requested including the pod)` of one resource on `node`, or `(0, 0)` when the
/// resource does not take part in scoring.
fn allocatable_and_requested(node: &NodeInfo, name: &str, pod_request: i64) -> (i64, i64) {
    let usage = &node.usage;
    match name {
        resource::CPU => (
            node.allocatable.milli_cpu,
            usage.non_zero_requested.milli_cpu + pod_request,
        ),
        resource::MEMORY => (
            node.allocatable.memory,
            usage.non_zero_requested.memory + pod_request,
        ),
        resource::EPHEMERAL_STORAGE => (
            node.allocatable.ephemeral_storage,
            usage.requested.ephemeral_storage + pod_request,
        ),
        // An extended resource the pod does not request is left out of the score.
        _ if pod_request == 0 => (0, 0),
        _ => match node.allocatable.scalar(name) {
            Some(allocatable) => (allocatable, usage.requested.get(name) + pod_request),
            None => (0, 0),
        },
    }
}

/// A scored resource [`NodeSummary`] holds.
#[derive(Clone, Copy)]
enum SummaryField {
    Cpu,
    Memory,
    EphemeralStorage,
}

impl SummaryField {
    fn of(name: &str) -> Option<SummaryField> {
        match name {
            resource::CPU => Some(SummaryField::Cpu),
            resource::MEMORY => Some(SummaryField::Memory),
            resource::EPHEMERAL_STORAGE => Some(SummaryField::EphemeralStorage),
            _ => None,
        }
    }

    /// [`allocatable_and_requested`] from a node's summary.
    fn amounts(self, node: &NodeSummary, pod_request: i64) -> (i64, i64) {
        match self {
            SummaryField::Cpu => (
                node.allocatable_milli_cpu,
                node.non_zero_requested_milli_cpu + pod_request,
            ),
            SummaryField::Memory => (
                node.allocatable_memory,
                node.non_zero_requested_memory + pod_request,
            ),
            SummaryField::EphemeralStorage => (
                node.allocatable_ephemeral_storage,
                node.requested_ephemeral_storage + pod_request,
            ),
        }
    }
}

/// Bits of a summary verdict: which of the filter's four checks failed.
const SHORT_OF_PODS: usize = 1;
const SHORT_OF_CPU: usize = 2;
const SHORT_OF_MEMORY: usize = 4;
const SHORT_OF_EPHEMERAL_STORAGE: usize = 8;

/// The filter's checks on cpu, memory, ephemeral storage and pod slots, as a set of bits.
fn shortages(pod: &Pod, node: &NodeSummary) -> usize {
    let request = &pod.requests;
    let mut short = 0;
    if i64::from(node.pod_count) + 1 > node.allocatable_pods {
        short |= SHORT_OF_PODS;
    }
    let checks = [
        (
            SHORT_OF_CPU,
            request.milli_cpu,
            node.requested_milli_cpu,
            node.allocatable_milli_cpu,
        ),
        (
            SHORT_OF_MEMORY,
            request.memory,
            node.requested_memory,
            node.allocatable_memory,
        ),
        (
            SHORT_OF_EPHEMERAL_STORAGE,
            request.ephemeral_storage,
            node.requested_ephemeral_storage,
            node.allocatable_ephemeral_storage,
        ),
    ];
    for (bit, want, used, have) in checks {
        if want > 0 && have < want + used {
            short |= bit;
        }
    }
    short
}

/// The failure for a set of shortage bits, with the reasons in the per-node filter's order.
fn shortage_failure(short: usize) -> Failure {
    let mut reasons: Vec<Cow<'static, str>> = Vec::new();
    if short & SHORT_OF_PODS != 0 {
        reasons.push(REASON_TOO_MANY_PODS.into());
    }
    for (bit, name) in [
        (SHORT_OF_CPU, resource::CPU),
        (SHORT_OF_MEMORY, resource::MEMORY),
        (SHORT_OF_EPHEMERAL_STORAGE, resource::EPHEMERAL_STORAGE),
    ] {
        if short & bit != 0 {
            reasons.push(insufficient(name));
        }
    }
    Failure {
        code: wasched_sdk::Code::Unschedulable,
        reasons,
    }
}

impl FilterPlugin for NodeResourcesFit {
    fn filter(&self, pod: &Pod, node: &NodeInfo) -> Verdict {
        let mut reasons: Vec<Cow<'static, str>> = Vec::new();
        let allocatable = &node.allocatable;
        let requested = &node.usage.requested;
        if i64::from(node.usage.pod_count) + 1 > allocatable.pods {
            reasons.push(REASON_TOO_MANY_PODS.into());
        }
        let request = &pod.requests;
        let fixed = [
            (
                resource::CPU,
                request.milli_cpu,
                requested.milli_cpu,
                allocatable.milli_cpu,
            ),
            (
                resource::MEMORY,
                request.memory,
                requested.memory,
                allocatable.memory,
            ),
            (
                resource::EPHEMERAL_STORAGE,
                request.ephemeral_storage,
                requested.ephemeral_storage,
                allocatable.ephemeral_storage,
            ),
        ];
        for (name, want, used, have) in fixed {
            if want > 0 && have < want + used {
                reasons.push(insufficient(name));
            }
        }
        for (name, want) in &request.scalar {
            // A zero request is skipped: the pod fits even where the node is over-committed on it.
            if *want == 0 || self.args.ignores(name) {
                continue;
            }
            if allocatable.scalar(name).unwrap_or(0) < want + requested.get(name) {
                reasons.push(format!("Insufficient {name}").into());
            }
        }
        if reasons.is_empty() {
            Ok(())
        } else {
            Err(Failure {
                code: wasched_sdk::Code::Unschedulable,
                reasons,
            })
        }
    }

    /// Reads only the nodes' summaries unless the pod requests an extended resource, and builds
    /// each combination of shortages' failure once per batch.
    fn filter_batch(&mut self, pod: &Pod, nodes: &Nodes, ids: &[u32], out: &mut FilterResults) {
        if !self.filter_from_summary {
            for &id in ids {
                out.push(match nodes.get(id) {
                    Some(node) => self.filter(pod, node),
                    None => Err(Nodes::unknown(id)),
                });
            }
            return;
        }
        let mut verdict_of_shortages = [None; 16];
        let failures = &mut out.failures;
        out.verdicts.extend(ids.iter().map(|&id| {
            let Some(node) = nodes.summary(id) else {
                return FilterResults::intern_into(failures, Nodes::unknown(id));
            };
            match shortages(pod, node) {
                0 => 0,
                short => *verdict_of_shortages[short].get_or_insert_with(|| {
                    FilterResults::intern_into(failures, shortage_failure(short))
                }),
            }
        }));
    }
}

fn insufficient(name: &'static str) -> Cow<'static, str> {
    match name {
        resource::CPU => "Insufficient cpu".into(),
        resource::MEMORY => "Insufficient memory".into(),
        _ => "Insufficient ephemeral-storage".into(),
    }
}

impl NodeResourcesFit {
    /// The score given each scored resource's `(allocatable, requested including the pod)`, from
    /// `amounts(index, name, pod request)`.
    fn score_with(&self, amounts: impl Fn(usize, &str, i64) -> (i64, i64)) -> i64 {
        let scoring = &self.args.scoring;
        let mut node_score = 0i64;
        let mut weight_sum = 0i64;
        for (i, (spec, pod_request)) in scoring
            .resources
            .iter()
            .zip(&self.pod_score_requests)
            .enumerate()
        {
            let (allocatable, requested) = amounts(i, &spec.name, *pod_request);
            if allocatable == 0 {
                continue;
            }
            let resource_score = match &scoring.strategy {
                Strategy::LeastAllocated => least_allocated(requested, allocatable),
                Strategy::MostAllocated => {
                    requested.min(allocatable) * MAX_NODE_SCORE / allocatable
                }
                Strategy::RequestedToCapacityRatio(shape) => {
                    let utilization = if requested > allocatable {
                        100
                    } else {
                        requested * 100 / allocatable
                    };
                    let score = shape.at(utilization);
                    // A resource scoring 0 does not count towards the average here.
                    if score <= 0 {
                        continue;
                    }
                    score
                }
            };
            node_score += resource_score * spec.weight;
            weight_sum += spec.weight;
        }
        if weight_sum == 0 {
            return 0;
        }
        match scoring.strategy {
            Strategy::RequestedToCapacityRatio(_) => {
                round_half_away(node_score as f64 / weight_sum as f64) as i64
            }
            _ => node_score / weight_sum,
        }
    }
}

impl ScorePlugin for NodeResourcesFit {
    fn score(&self, _pod: &Pod, node: &NodeInfo) -> i64 {
        self.score_with(|_, name, pod_request| allocatable_and_requested(node, name, pod_request))
    }

    /// Reads only the nodes' summaries when the scored resources are all in them.
    fn score_batch(&mut self, pod: &Pod, nodes: &Nodes, ids: &[u32], out: &mut Vec<i64>) {
        let scoring = &self.args.scoring;
        if let (
            Strategy::LeastAllocated,
            Some([SummaryField::Cpu, SummaryField::Memory]),
            [cpu_spec, memory_spec],
            &[cpu, memory],
        ) = (
            &scoring.strategy,
            self.summary_fields.as_deref(),
            scoring.resources.as_slice(),
            self.pod_score_requests.as_slice(),
        ) {
            let weights = (cpu_spec.weight, memory_spec.weight);
            return least_allocated_cpu_and_memory(nodes, ids, (cpu, memory), weights, out);
        }
        out.extend(ids.iter().map(|&id| {
            if let Some(fields) = &self.summary_fields {
                if let Some(node) = nodes.summary(id) {
                    return self
                        .score_with(|i, _, pod_request| fields[i].amounts(node, pod_request));
                }
            } else if let Some(node) = nodes.get(id) {
                return self.score(pod, node);
            }
            i64::MIN
        }));
    }
}

/// [`NodeResourcesFit::score_with`] for the default scoring, LeastAllocated over cpu then memory,
/// from the nodes' summaries: the same arithmetic without the loop over resources and the
/// matches on strategy and field, whose per-node branches and spills made the general loop
/// 1.3-1.6 times as slow as native in a component (criterion `score_batch`).
fn least_allocated_cpu_and_memory(
    nodes: &Nodes,
    ids: &[u32],
    (cpu, memory): (i64, i64),
    (cpu_weight, memory_weight): (i64, i64),
    out: &mut Vec<i64>,
) {
    out.extend(ids.iter().map(|&id| {
        let Some(node) = nodes.summary(id) else {
            return i64::MIN;
        };
        let mut node_score = 0;
        let mut weight_sum = 0;
        if node.allocatable_milli_cpu != 0 {
            let requested = node.non_zero_requested_milli_cpu + cpu;
            node_score += least_allocated(requested, node.allocatable_milli_cpu) * cpu_weight;
            weight_sum += cpu_weight;
        }
        if node.allocatable_memory != 0 {
            let requested = node.non_zero_requested_memory + memory;
            node_score += least_allocated(requested, node.allocatable_memory) * memory_weight;
            weight_sum += memory_weight;
        }
        if weight_sum == 0 {
            0
        } else {
            node_score / weight_sum
        }
    }));
}

/// LeastAllocated's score of one resource; `allocatable` is not 0.
#[inline]
fn least_allocated(requested: i64, allocatable: i64) -> i64 {
    if requested > allocatable {
        0
    } else {
        (allocatable - requested) * MAX_NODE_SCORE / allocatable
    }
}

wasched_sdk::export_plugin!(NodeResourcesFit: filter, score);

/// kube-scheduler's behaviour as a table: run natively by this crate's tests and through the
/// WebAssembly build by the host's (`tests/e2e/plugins.rs`), which insists both builds agree.
#[cfg(not(target_arch = "wasm32"))]
pub fn cases() -> Vec<wasched_sdk::testing::Case> {
    use wasched_sdk::testing::{fail, node, pass, pod, requesting, with_usage, Case, GI};
    use wasched_sdk::Code;

    let short = |reasons: &[&str]| fail(Code::Unschedulable, reasons);
    let full_pods = || {
        let mut n = node("full");
        n.allocatable.pods = 3;
        with_usage(n, 0, 0, 3)
    };
    let mut gpu_pod = requesting(100, GI);
    gpu_pod.requests.set("nvidia.com/gpu", 2);
    let mut zero_gpu_pod = requesting(100, GI);
    zero_gpu_pod.requests.set("nvidia.com/gpu", 0);
    let mut gpu_node = node("gpu");
    gpu_node.allocatable.set("nvidia.com/gpu", 1);
    let mut overcommitted_gpu_node = node("over");
    overcommitted_gpu_node.allocatable.set("nvidia.com/gpu", 1);
    overcommitted_gpu_node
        .usage
        .requested
        .set("nvidia.com/gpu", 4);
    let mut ignoring = requesting(100, GI);
    ignoring.requests.set("example.com/foo", 5);

    // 4000m / 8Gi nodes; a 1000m / 2Gi pod.
    let scored_nodes = vec![
        node("empty"),
        with_usage(node("half"), 1000, 2 * GI, 1),
        with_usage(node("over"), 8000, 16 * GI, 2),
    ];
    let one_cpu = requesting(1000, 2 * GI);
    // A pod without requests scores as if it asked for 100m cpu and 200Mi memory.
    let mut best_effort = pod("be");
    best_effort.non_zero_requests.milli_cpu = 100;
    best_effort.non_zero_requests.memory = 200 << 20;
    let best_effort_score =
        ((4000 - 100) * 100 / 4000 + (8 * GI - (200 << 20)) * 100 / (8 * GI)) / 2;
    vec![
        Case::filter(
            "fits, short of cpu, short of memory, short of both",
            requesting(1000, 2 * GI),
            vec![
                node("empty"),
                with_usage(node("busy-cpu"), 3500, 0, 1),
                with_usage(node("busy-mem"), 0, 7 * GI, 1),
                with_usage(node("busy"), 3500, 7 * GI, 1),
            ],
            vec![
                pass(),
                short(&["Insufficient cpu"]),
                short(&["Insufficient memory"]),
                short(&["Insufficient cpu", "Insufficient memory"]),
            ],
        ),
        Case::filter(
            "no pod slot left",
            requesting(100, GI),
            vec![full_pods()],
            vec![short(&["Too many pods"])],
        ),
        Case::filter(
            "an extended resource short, or missing from the node",
            gpu_pod,
            vec![gpu_node, node("no-gpu")],
            vec![
                short(&["Insufficient nvidia.com/gpu"]),
                short(&["Insufficient nvidia.com/gpu"]),
            ],
        ),
        Case::filter(
            "a zero request of an extended resource fits an over-committed node",
            zero_gpu_pod,
            vec![overcommitted_gpu_node],
            vec![pass()],
        ),
        Case::filter(
            "a pod requesting nothing fits a node whose cpu is over-committed",
            requesting(0, 0),
            vec![with_usage(node("over"), 9000, 0, 1)],
            vec![pass()],
        ),
        Case::filter(
            "ignoredResources skips the check",
            ignoring.clone(),
            vec![node("n")],
            vec![pass()],
        )
        .with_config(r#"{"ignoredResources":["example.com/foo"]}"#),
        Case::filter(
            "ignoredResourceGroups skips the check",
            ignoring,
            vec![node("n")],
            vec![pass()],
        )
        .with_config(r#"{"ignoredResourceGroups":["example.com"]}"#),
        Case::score(
            "LeastAllocated: empty (75 + 75) / 2, half 50, over capacity 0",
            one_cpu.clone(),
            scored_nodes.clone(),
            vec![75, 50, 0],
        ),
        Case::score(
            "MostAllocated, requests above capacity capped",
            one_cpu.clone(),
            scored_nodes.clone(),
            vec![25, 50, 100],
        )
        .with_config(r#"{"scoringStrategy":{"type":"MostAllocated"}}"#),
        Case::score(
            "RequestedToCapacityRatio on cpu with a 0..10 shape",
            one_cpu.clone(),
            scored_nodes,
            vec![25, 50, 100],
        )
        .with_config(
            r#"{"scoringStrategy":{"type":"RequestedToCapacityRatio","resources":[{"name":"cpu","weight":1}],
                "requestedToCapacityRatio":{"shape":[{"utilization":0,"score":0},{"utilization":100,"score":10}]}}}"#,
        ),
        Case::score(
            "weights: cpu 25 (x3) and memory 75 (x1) give (75 + 75) / 4 = 37",
            one_cpu,
            vec![with_usage(node("n"), 2000, 0, 1)],
            vec![37],
        )
        .with_config(
            r#"{"scoringStrategy":{"type":"LeastAllocated","resources":[{"name":"cpu","weight":3},{"name":"memory","weight":1}]}}"#,
        ),
        Case::score(
            "a pod without requests scores with kube-scheduler's defaults",
            best_effort,
            vec![node("n")],
            vec![best_effort_score],
        ),
    ]
}

#[cfg(test)]
mod table_tests {
    use wasched_sdk::testing::{answers, random_resource_node, requesting, Case, Walk, GI};

    #[test]
    fn answers_as_kube_scheduler() {
        wasched_sdk::testing::check::<super::NodeResourcesFit>(&super::cases());
    }

    /// The default scoring's loop against the general per-node score (`answers` fails on any
    /// difference), with weights, on nodes with and without each resource, full, overcommitted or
    /// empty, and for best-effort pods (scored as 100m and 200Mi).
    #[test]
    fn the_default_scoring_batch_scores_as_the_general_path() {
        let mut walk = Walk(23);
        for round in 0..200 {
            let nodes: Vec<_> = (0..40)
                .map(|i| random_resource_node(&mut walk, &format!("n{i}")))
                .collect();
            let cpu = walk.below(5000) as i64;
            let memory = walk.below(20) as i64 * GI;
            let mut pod = requesting(cpu, memory);
            pod.non_zero_requests.milli_cpu = if cpu == 0 { 100 } else { cpu };
            pod.non_zero_requests.memory = if memory == 0 { 200 << 20 } else { memory };
            let config = format!(
                r#"{{"scoringStrategy": {{"type": "LeastAllocated", "resources": [{{"name": "cpu", "weight": {}}}, {{"name": "memory", "weight": {}}}]}}}}"#,
                1 + walk.below(5),
                1 + walk.below(5)
            );
            let case = Case::score("random", pod, nodes, Vec::new()).with_config(&config);
            let scored = answers::<super::NodeResourcesFit>(&case);
            assert_eq!(scored.scores.len(), 40, "round {round}");
        }
    }
}
