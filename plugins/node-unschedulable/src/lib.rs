//! NodeUnschedulable: keeps pods off cordoned nodes (`spec.unschedulable: true`) unless they tolerate
//! the `node.kubernetes.io/unschedulable:NoSchedule` taint.

use wasched_sdk::helpers::tolerated_by_any;
use wasched_sdk::{
    effect, Failure, FilterPlan, FilterPlugin, FilterResults, NodeInfo, Nodes, Plugin, Pod,
    PodParts, PodPlan, Taint, Verdict,
};

/// The name used in configs and messages.
pub const NAME: &str = "NodeUnschedulable";
/// kube-scheduler's reason for a cordoned node.
pub const REASON: &str = "node(s) were unschedulable";
/// The taint a pod must tolerate to land on a cordoned node.
pub const UNSCHEDULABLE_TAINT_KEY: &str = "node.kubernetes.io/unschedulable";

/// The plugin; holds whether the current pod tolerates cordoned nodes.
#[derive(Default)]
pub struct NodeUnschedulable {
    tolerates_unschedulable: bool,
}

impl Plugin for NodeUnschedulable {
    const NAME: &'static str = NAME;
    const READS_POD: PodParts = PodParts::TOLERATIONS;

    fn new(_config: &str) -> Result<Self, String> {
        Ok(Self::default())
    }

    fn prepare(&mut self, pod: &Pod) -> PodPlan {
        let taint = Taint {
            key: UNSCHEDULABLE_TAINT_KEY.to_string(),
            value: String::new(),
            effect: effect::NO_SCHEDULE.to_string(),
        };
        self.tolerates_unschedulable = tolerated_by_any(&pod.tolerations, &taint);
        PodPlan {
            score: false,
            ..PodPlan::default()
        }
    }

    /// The cordoned nodes are the ones that fail, and the mirror lists them: the filter is never
    /// called. Every node passes when the pod tolerates cordoned nodes or none is cordoned.
    fn prepare_with_nodes(&mut self, pod: &Pod, nodes: &Nodes) -> PodPlan {
        let mut plan = self.prepare(pod);
        plan.filter = if self.tolerates_unschedulable || nodes.cordoned() == 0 {
            FilterPlan::Skip
        } else {
            let failing: Vec<u32> = nodes.cordoned_ids().collect();
            FilterPlan::FailingNodes {
                results: FilterResults {
                    verdicts: vec![1; failing.len()],
                    failures: vec![Failure::unresolvable(REASON)],
                },
                nodes: failing,
            }
        };
        plan
    }
}

impl FilterPlugin for NodeUnschedulable {
    fn filter(&self, _pod: &Pod, node: &NodeInfo) -> Verdict {
        if node.unschedulable && !self.tolerates_unschedulable {
            return Err(Failure::unresolvable(REASON));
        }
        Ok(())
    }

    /// Reads only the node's summary, and stores the one failure once per batch.
    fn filter_batch(&mut self, _pod: &Pod, nodes: &Nodes, ids: &[u32], out: &mut FilterResults) {
        let tolerates = self.tolerates_unschedulable;
        out.push_each(
            nodes,
            ids,
            |id| tolerates || nodes.summary(id).is_none_or(|node| !node.unschedulable),
            || Failure::unresolvable(REASON),
        );
    }
}

wasched_sdk::export_plugin!(NodeUnschedulable: filter);
