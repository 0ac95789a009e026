//! Scores every node 1000, outside the 0..=100 range.

use wasched_sdk::{NodeInfo, Plugin, Pod, ScorePlugin};

pub struct BadScore;

impl Plugin for BadScore {
    const NAME: &'static str = "BadScore";
    fn new(_config: &str) -> Result<Self, String> {
        Ok(BadScore)
    }
}

impl ScorePlugin for BadScore {
    fn score(&self, _pod: &Pod, _node: &NodeInfo) -> i64 {
        1000
    }
}

wasched_sdk::export_plugin!(BadScore: score);
