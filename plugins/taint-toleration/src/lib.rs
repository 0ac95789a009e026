//! TaintToleration: a pod may only land on a node whose `NoSchedule`/`NoExecute` taints it
//! tolerates, and prefers nodes with fewer `PreferNoSchedule` taints it does not tolerate.

use wasched_sdk::helpers::tolerated_by_any;
use wasched_sdk::{
    effect, Failure, FilterPlugin, NodeInfo, Normalize, Plugin, Pod, PodPlan, ScorePlugin,
    Toleration, Verdict,
};

/// The name used in configs and messages.
pub const NAME: &str = "TaintToleration";

/// The plugin; holds the current pod's tolerations that matter for scoring.
#[derive(Default)]
pub struct TaintToleration {
    prefer_no_schedule_tolerations: Vec<Toleration>,
}

/// kube-scheduler's reason, naming the first untolerated taint (a taint without a value prints as
/// `{key: }`).
pub fn untolerated_reason(key: &str, value: &str) -> String {
    format!("node(s) had untolerated taint {{{key}: {value}}}")
}

impl Plugin for TaintToleration {
    const NAME: &'static str = NAME;

    fn new(_config: &str) -> Result<Self, String> {
        Ok(Self::default())
    }

    fn prepare(&mut self, pod: &Pod) -> PodPlan {
        // Only tolerations that can match a PreferNoSchedule taint count when scoring.
        self.prefer_no_schedule_tolerations = pod
            .tolerations
            .iter()
            .filter(|t| t.effect.is_empty() || t.effect == effect::PREFER_NO_SCHEDULE)
            .cloned()
            .collect();
        PodPlan::default()
    }
}

impl FilterPlugin for TaintToleration {
    fn filter(&self, pod: &Pod, node: &NodeInfo) -> Verdict {
        let untolerated = node.taints.iter().find(|taint| {
            (taint.effect == effect::NO_SCHEDULE || taint.effect == effect::NO_EXECUTE)
                && !tolerated_by_any(&pod.tolerations, taint)
        });
        match untolerated {
            Some(taint) => Err(Failure::unresolvable(untolerated_reason(
                &taint.key,
                &taint.value,
            ))),
            None => Ok(()),
        }
    }
}

impl ScorePlugin for TaintToleration {
    const NORMALIZE: Normalize = Normalize::Reverse;

    fn score(&self, _pod: &Pod, node: &NodeInfo) -> i64 {
        node.taints
            .iter()
            .filter(|taint| {
                taint.effect == effect::PREFER_NO_SCHEDULE
                    && !tolerated_by_any(&self.prefer_no_schedule_tolerations, taint)
            })
            .count() as i64
    }
}

wasched_sdk::export_plugin!(TaintToleration: filter, score);
