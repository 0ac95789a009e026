//! Allocates without bound in `filter` until its memory limit stops it.

use wasched_sdk::{FilterPlugin, NodeInfo, Plugin, Pod, Verdict};

pub struct Hog;

impl Plugin for Hog {
    const NAME: &'static str = "Hog";
    fn new(_config: &str) -> Result<Self, String> {
        Ok(Hog)
    }
}

impl FilterPlugin for Hog {
    fn filter(&self, _pod: &Pod, _node: &NodeInfo) -> Verdict {
        loop {
            // Forgotten 1 MiB blocks: the instance's memory only grows.
            let block: Vec<u8> = Vec::with_capacity(1 << 20);
            std::mem::forget(std::hint::black_box(block));
        }
    }
}

wasched_sdk::export_plugin!(Hog: filter);
