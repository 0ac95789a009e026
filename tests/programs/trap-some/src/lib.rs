//! Panics (a trap) on nodes labelled `explode=true`, behaves on the others.

use wasched_sdk::{FilterPlugin, NodeInfo, Plugin, Pod, Verdict};

pub struct TrapSome;

impl Plugin for TrapSome {
    const NAME: &'static str = "TrapSome";
    fn new(_config: &str) -> Result<Self, String> {
        Ok(TrapSome)
    }
}

impl FilterPlugin for TrapSome {
    fn filter(&self, _pod: &Pod, node: &NodeInfo) -> Verdict {
        if node.labels.get("explode") == Some("true") {
            panic!("node {} made me explode", node.name);
        }
        Ok(())
    }
}

wasched_sdk::export_plugin!(TrapSome: filter);
