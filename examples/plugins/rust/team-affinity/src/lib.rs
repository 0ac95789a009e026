//! Prefers nodes that belong to the pod's team.
//!
//! A platform team labels nodes with the team that paid for them (`team=payments`); a pod says
//! which team it belongs to with a label or an annotation (`team: payments`). Nodes of the pod's
//! team score 100, others 0, so the pod lands on its team's nodes when they have room and
//! anywhere else when they do not (it is a preference, not a filter). Pods without a team are
//! left alone.
//!
//! Configuration (all optional):
//!
//! ```toml
//! [plugins.TeamAffinity]
//! config = { node_label = "example.com/team", pod_key = "example.com/team" }
//! ```

use serde::Deserialize;
use wasched_sdk::{FilterPlan, NodeInfo, Nodes, Plugin, Pod, PodParts, PodPlan, ScorePlugin};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    /// The node label naming the node's team.
    #[serde(default = "default_key")]
    node_label: String,
    /// The pod label (or, failing that, annotation) naming the pod's team.
    #[serde(default = "default_key")]
    pod_key: String,
}

fn default_key() -> String {
    "team".to_string()
}

pub struct TeamAffinity {
    args: Args,
    /// The team of the pod being scheduled.
    team: String,
}

impl Plugin for TeamAffinity {
    const NAME: &'static str = "TeamAffinity";
    const READS_POD: PodParts = PodParts::LABELS.union(PodParts::ANNOTATIONS);

    fn new(config: &str) -> Result<Self, String> {
        let args: Args =
            serde_json::from_str(config).map_err(|e| format!("TeamAffinity config: {e}"))?;
        if args.node_label.is_empty() || args.pod_key.is_empty() {
            return Err("TeamAffinity config: node_label and pod_key must not be empty".into());
        }
        Ok(TeamAffinity {
            args,
            team: String::new(),
        })
    }

    fn prepare(&mut self, pod: &Pod, _nodes: &Nodes) -> PodPlan {
        let key = self.args.pod_key.as_str();
        self.team = pod
            .labels
            .get(key)
            .or_else(|| pod.annotations.get(key))
            .unwrap_or("")
            .to_string();
        PodPlan {
            filter: FilterPlan::Skip,
            score: !self.team.is_empty(),
        }
    }
}

impl ScorePlugin for TeamAffinity {
    fn score(&self, _pod: &Pod, node: &NodeInfo) -> i64 {
        if node.labels.get(&self.args.node_label) == Some(self.team.as_str()) {
            100
        } else {
            0
        }
    }
}

wasched_sdk::export_plugin!(TeamAffinity: score);

#[cfg(test)]
mod tests {
    use super::*;
    use wasched_sdk::Labels;

    fn node(team: &str) -> NodeInfo {
        NodeInfo {
            labels: [("team", team)].into_iter().collect::<Labels>(),
            ..NodeInfo::default()
        }
    }

    #[test]
    fn scores_the_pods_team_and_skips_pods_without_one() {
        let mut plugin = TeamAffinity::new("{}").unwrap();
        let pod = Pod {
            annotations: [("team", "payments")].into_iter().collect::<Labels>(),
            ..Pod::default()
        };
        assert!(plugin.prepare(&pod, &Nodes::default()).score);
        assert_eq!(plugin.score(&pod, &node("payments")), 100);
        assert_eq!(plugin.score(&pod, &node("search")), 0);
        assert!(!plugin.prepare(&Pod::default(), &Nodes::default()).score);
        assert!(TeamAffinity::new(r#"{"node_label": ""}"#).is_err());
        assert!(TeamAffinity::new(r#"{"colour": "red"}"#).is_err());
    }
}
