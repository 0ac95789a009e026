//! Loops forever in `filter`: the epoch deadline must stop it.

use wasched_sdk::{FilterPlugin, NodeInfo, Plugin, Pod, Verdict};

pub struct Spin;

impl Plugin for Spin {
    const NAME: &'static str = "Spin";
    fn new(_config: &str) -> Result<Self, String> {
        Ok(Spin)
    }
}

impl FilterPlugin for Spin {
    fn filter(&self, _pod: &Pod, node: &NodeInfo) -> Verdict {
        let mut counter = 0u64;
        loop {
            counter = std::hint::black_box(counter.wrapping_add(node.name.len() as u64 + 1));
        }
    }
}

wasched_sdk::export_plugin!(Spin: filter);
