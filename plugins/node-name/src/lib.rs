//! NodeName: a pod that names a node in `spec.nodeName` can only go there.

#![warn(missing_docs)]

use wasched_sdk::{
    Failure, FilterPlan, FilterPlugin, NodeInfo, Nodes, Plugin, Pod, PodParts, PodPlan, Verdict,
};

/// The name used in configs and messages.
pub const NAME: &str = "NodeName";
/// kube-scheduler's reason for any other node.
pub const REASON: &str = "node(s) didn't match the requested node name";

/// The plugin; stateless.
pub struct NodeName;

impl Plugin for NodeName {
    const NAME: &'static str = NAME;
    const READS_POD: PodParts = PodParts::NODE_NAME;

    fn new(_config: &str) -> Result<Self, String> {
        Ok(NodeName)
    }

    fn prepare(&mut self, pod: &Pod, _nodes: &Nodes) -> PodPlan {
        PodPlan {
            filter: if pod.node_name.is_empty() {
                FilterPlan::Skip
            } else {
                FilterPlan::Run
            },
            score: false,
        }
    }
}

impl FilterPlugin for NodeName {
    fn filter(&self, pod: &Pod, node: &NodeInfo) -> Verdict {
        if pod.node_name.is_empty() || pod.node_name == node.name {
            Ok(())
        } else {
            Err(Failure::unresolvable(REASON))
        }
    }
}

wasched_sdk::export_plugin!(NodeName: filter);

/// kube-scheduler's behaviour as a table: run natively by this crate's tests and through the
/// WebAssembly build by the host's (`tests/e2e/plugins.rs`), which insists both builds agree.
#[cfg(not(target_arch = "wasm32"))]
pub fn cases() -> Vec<wasched_sdk::testing::Case> {
    use wasched_sdk::testing::{node, pass, pod, unresolvable, Case};

    let named = |node_name: &str| Pod {
        node_name: node_name.into(),
        ..pod("p")
    };
    vec![
        Case::filter(
            "only the named node passes",
            named("b"),
            vec![node("a"), node("b"), node("c")],
            vec![unresolvable(REASON), pass(), unresolvable(REASON)],
        ),
        Case::filter(
            "a pod without spec.nodeName skips the filter",
            pod("p"),
            vec![node("a")],
            vec![pass()],
        )
        .with_plan(FilterPlan::Skip),
        Case::filter(
            "a pod naming a node that is not there fits nowhere",
            named("gone"),
            vec![node("a"), node("b")],
            vec![unresolvable(REASON), unresolvable(REASON)],
        ),
    ]
}

#[cfg(test)]
mod tests {
    #[test]
    fn answers_as_kube_scheduler() {
        wasched_sdk::testing::check::<super::NodeName>(&super::cases());
    }
}
