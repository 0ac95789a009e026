//! NodeName: a pod that names a node in `spec.nodeName` can only go there.

use wasched_sdk::{
    Failure, FilterPlan, FilterPlugin, NodeInfo, Plugin, Pod, PodParts, PodPlan, Verdict,
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

    fn prepare(&mut self, pod: &Pod) -> PodPlan {
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
