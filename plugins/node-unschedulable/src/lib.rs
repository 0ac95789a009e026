//! NodeUnschedulable: keeps pods off cordoned nodes (`spec.unschedulable: true`) unless they tolerate
//! the `node.kubernetes.io/unschedulable:NoSchedule` taint.

#![warn(missing_docs)]

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

    /// The cordoned nodes are the ones that fail, and the mirror lists them: the filter is never
    /// called. Every node passes when the pod tolerates cordoned nodes or none is cordoned.
    fn prepare(&mut self, pod: &Pod, nodes: &Nodes) -> PodPlan {
        let taint = Taint {
            key: UNSCHEDULABLE_TAINT_KEY.to_string(),
            value: String::new(),
            effect: effect::NO_SCHEDULE.to_string(),
        };
        self.tolerates_unschedulable = tolerated_by_any(&pod.tolerations, &taint);
        let mut plan = PodPlan {
            score: false,
            ..PodPlan::default()
        };
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

/// kube-scheduler's behaviour as a table: run natively by this crate's tests and through the
/// WebAssembly build by the host's (`tests/e2e/plugins.rs`), which insists both builds agree.
#[cfg(not(target_arch = "wasm32"))]
pub fn cases() -> Vec<wasched_sdk::testing::Case> {
    use wasched_sdk::testing::{failing_plan, node, pass, pod, toleration, unresolvable, Case};

    let cordoned = || NodeInfo {
        unschedulable: true,
        ..node("cordoned")
    };
    let tolerating = |effect: &str| Pod {
        tolerations: vec![toleration(UNSCHEDULABLE_TAINT_KEY, "Exists", "", effect)],
        ..pod("p")
    };
    let second_listed = failing_plan(2, &[1], Failure::unresolvable(REASON));
    vec![
        Case::filter(
            "a plain pod fits a schedulable node but not a cordoned one, listed in the plan",
            pod("p"),
            vec![node("ok"), cordoned()],
            vec![pass(), unresolvable(REASON)],
        )
        .with_plan(second_listed),
        Case::filter(
            "without a cordoned node nothing is filtered",
            pod("p"),
            vec![node("a"), node("b")],
            vec![pass(), pass()],
        )
        .with_plan(FilterPlan::Skip),
        Case::filter(
            "tolerating the unschedulable taint lets the pod in",
            tolerating(effect::NO_SCHEDULE),
            vec![node("a"), cordoned()],
            vec![pass(), pass()],
        )
        .with_plan(FilterPlan::Skip),
        Case::filter(
            "a toleration with an empty effect also matches",
            tolerating(""),
            vec![cordoned()],
            vec![pass()],
        ),
        Case::filter(
            "a NoExecute toleration does not match the NoSchedule taint",
            tolerating(effect::NO_EXECUTE),
            vec![cordoned()],
            vec![unresolvable(REASON)],
        ),
    ]
}

#[cfg(test)]
mod tests {
    #[test]
    fn answers_as_kube_scheduler() {
        wasched_sdk::testing::check::<super::NodeUnschedulable>(&super::cases());
    }
}
