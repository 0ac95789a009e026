//! Prints a flood of output on every filter call, and otherwise behaves: the host must route it to
//! its logs at a bounded rate and keep scheduling.

use wasched_sdk::{FilterPlugin, NodeInfo, Plugin, Pod, Verdict};

pub struct Flood;

impl Plugin for Flood {
    const NAME: &'static str = "Flood";
    fn new(_config: &str) -> Result<Self, String> {
        Ok(Flood)
    }
}

impl FilterPlugin for Flood {
    fn filter(&self, _pod: &Pod, node: &NodeInfo) -> Verdict {
        for i in 0..200 {
            println!("flood line {i} about node {}", node.name);
            eprintln!("flood error {i}");
        }
        Ok(())
    }
}

wasched_sdk::export_plugin!(Flood: filter);
