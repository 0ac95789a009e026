//! NodeResourcesFit: a pod fits a node when the node's allocatable covers what is already requested
//! there plus the pod's request; among fitting nodes it scores by LeastAllocated (default),
//! MostAllocated or RequestedToCapacityRatio.

mod args;

use std::borrow::Cow;

pub use args::Args;
use args::Strategy;
use wasched_sdk::helpers::MAX_NODE_SCORE;
use wasched_sdk::{
    resource, Failure, FilterPlugin, NodeInfo, Plugin, Pod, PodPlan, ScorePlugin, Verdict,
};

/// The name used in configs and messages.
pub const NAME: &str = "NodeResourcesFit";
/// kube-scheduler's reason when the node has no pod slot left.
pub const REASON_TOO_MANY_PODS: &str = "Too many pods";

/// The plugin; holds its configuration and the current pod's request per scored resource.
pub struct NodeResourcesFit {
    args: Args,
    pod_score_requests: Vec<i64>,
}

impl Plugin for NodeResourcesFit {
    const NAME: &'static str = NAME;
    const READS_USAGE: bool = true;

    fn new(config: &str) -> Result<Self, String> {
        Ok(NodeResourcesFit {
            args: Args::parse(config)?,
            pod_score_requests: Vec::new(),
        })
    }

    fn prepare(&mut self, pod: &Pod) -> PodPlan {
        self.pod_score_requests = self
            .args
            .scoring
            .resources
            .iter()
            .map(|r| score_request(pod, &r.name))
            .collect();
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
}

fn insufficient(name: &'static str) -> Cow<'static, str> {
    match name {
        resource::CPU => "Insufficient cpu".into(),
        resource::MEMORY => "Insufficient memory".into(),
        _ => "Insufficient ephemeral-storage".into(),
    }
}

impl ScorePlugin for NodeResourcesFit {
    fn score(&self, _pod: &Pod, node: &NodeInfo) -> i64 {
        let scoring = &self.args.scoring;
        let mut node_score = 0i64;
        let mut weight_sum = 0i64;
        for (spec, pod_request) in scoring.resources.iter().zip(&self.pod_score_requests) {
            let (allocatable, requested) =
                allocatable_and_requested(node, &spec.name, *pod_request);
            if allocatable == 0 {
                continue;
            }
            let resource_score = match &scoring.strategy {
                Strategy::LeastAllocated => {
                    if requested > allocatable {
                        0
                    } else {
                        (allocatable - requested) * MAX_NODE_SCORE / allocatable
                    }
                }
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
                (node_score as f64 / weight_sum as f64).round() as i64
            }
            _ => node_score / weight_sum,
        }
    }
}

wasched_sdk::export_plugin!(NodeResourcesFit: filter, score);
