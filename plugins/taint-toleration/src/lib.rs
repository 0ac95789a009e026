//! TaintToleration: a pod may only land on a node whose `NoSchedule`/`NoExecute` taints it
//! tolerates, and prefers nodes with fewer `PreferNoSchedule` taints it does not tolerate.

#![warn(missing_docs)]

use wasched_sdk::helpers::tolerated_by_any;
use wasched_sdk::{
    effect, Failure, FilterPlan, FilterPlugin, FilterResults, NodeInfo, Nodes, Normalize, Plugin,
    Pod, PodParts, PodPlan, ScorePlugin, Taint, Toleration, Verdict,
};

/// The name used in configs and messages.
pub const NAME: &str = "TaintToleration";

/// Most distinct taint sets `prepare` checks up front; past that, checking every set
/// per pod could cost as much as filtering.
const MOST_SETS_CHECKED_UP_FRONT: usize = 64;

/// Largest share of the mirror (1 / this) a plan lists as failing instead of letting the host call
/// the filter: past it, a cycle usually examines fewer nodes than the plan would list. Measured
/// with 15% of the nodes listed: `taints` at 5,000 nodes 0.73 -> 0.76 WASM/native, at 50,000 no
/// change (`wasched bench`).
const MOST_LISTED_SHARE: usize = 4;

/// Marks a taint set whose verdict or score a batch has not computed yet.
const NOT_YET: u32 = u32::MAX;

/// The plugin; holds the current pod's tolerations that matter for scoring.
#[derive(Default)]
pub struct TaintToleration {
    prefer_no_schedule_tolerations: Vec<Toleration>,
    /// Per taint set of the mirror, within one batch: the verdict (filter) or score, once known.
    per_taint_set: Vec<u32>,
    /// The mirror's generation when the current pod was found to score 0 on every node: no
    /// node has a `PreferNoSchedule` taint it does not tolerate (most clusters have none).
    scores_zero_at: Option<u64>,
}

/// kube-scheduler's reason, naming the first untolerated taint (a taint without a value prints as
/// `{key: }`).
pub fn untolerated_reason(key: &str, value: &str) -> String {
    format!("node(s) had untolerated taint {{{key}: {value}}}")
}

impl Plugin for TaintToleration {
    const NAME: &'static str = NAME;
    const READS_POD: PodParts = PodParts::TOLERATIONS;

    fn new(_config: &str) -> Result<Self, String> {
        Ok(Self::default())
    }

    /// With few taint sets, the nodes a pod cannot go to are the members of the sets it does not
    /// tolerate: none (the filter is skipped), a minority (listed as the plan, the filter is not
    /// called), or many (the filter runs on the nodes the host examines).
    fn prepare(&mut self, pod: &Pod, nodes: &Nodes) -> PodPlan {
        // Only tolerations that can match a PreferNoSchedule taint count when scoring.
        self.prefer_no_schedule_tolerations = pod
            .tolerations
            .iter()
            .filter(|t| t.effect.is_empty() || t.effect == effect::PREFER_NO_SCHEDULE)
            .cloned()
            .collect();
        let mut plan = PodPlan::default();
        let sets = nodes.taint_set_count();
        self.scores_zero_at = None;
        if sets > MOST_SETS_CHECKED_UP_FRONT {
            return plan;
        }
        let scores_zero = (0..sets as u32).all(|set| {
            nodes.nodes_with_taint_set(set).is_empty()
                || untolerated_preferences(
                    &self.prefer_no_schedule_tolerations,
                    nodes.taint_set(set),
                ) == 0
        });
        if scores_zero {
            self.scores_zero_at = Some(nodes.generation());
        }
        let mut failing = Vec::new();
        let mut results = FilterResults::default();
        for set in 0..sets as u32 {
            let members = nodes.nodes_with_taint_set(set);
            if members.is_empty() {
                continue;
            }
            if let Err(failure) = untolerated(pod, nodes.taint_set(set)) {
                if failing.len() + members.len() > nodes.len() / MOST_LISTED_SHARE {
                    return plan;
                }
                let verdict = results.intern(failure);
                failing.extend_from_slice(members);
                results
                    .verdicts
                    .extend(std::iter::repeat_n(verdict, members.len()));
            }
        }
        plan.filter = if failing.is_empty() {
            FilterPlan::Skip
        } else {
            FilterPlan::FailingNodes {
                nodes: failing,
                results,
            }
        };
        plan
    }
}

fn untolerated(pod: &Pod, taints: &[Taint]) -> Verdict {
    let untolerated = taints.iter().find(|taint| {
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

/// How many of `taints` are `PreferNoSchedule` and not tolerated.
fn untolerated_preferences(tolerations: &[Toleration], taints: &[Taint]) -> i64 {
    taints
        .iter()
        .filter(|taint| {
            taint.effect == effect::PREFER_NO_SCHEDULE && !tolerated_by_any(tolerations, taint)
        })
        .count() as i64
}

/// An empty per-taint-set table for the next batch.
fn reset(memo: &mut Vec<u32>, nodes: &Nodes) {
    memo.clear();
    memo.resize(nodes.taint_set_count(), NOT_YET);
}

impl FilterPlugin for TaintToleration {
    fn filter(&self, pod: &Pod, node: &NodeInfo) -> Verdict {
        untolerated(pod, &node.taints)
    }

    /// Nodes with the same taints get the same verdict, so it is worked out once per taint set.
    fn filter_batch(&mut self, pod: &Pod, nodes: &Nodes, ids: &[u32], out: &mut FilterResults) {
        let memo = &mut self.per_taint_set;
        reset(memo, nodes);
        for &id in ids {
            let Some(summary) = nodes.summary(id) else {
                out.push(Err(Nodes::unknown(id)));
                continue;
            };
            let known = &mut memo[summary.taint_set as usize];
            if *known == NOT_YET {
                *known = match untolerated(pod, nodes.taint_set(summary.taint_set)) {
                    Ok(()) => 0,
                    Err(failure) => out.intern(failure),
                };
            }
            out.verdicts.push(*known);
        }
    }
}

impl ScorePlugin for TaintToleration {
    const NORMALIZE: Normalize = Normalize::Reverse;

    fn score(&self, _pod: &Pod, node: &NodeInfo) -> i64 {
        untolerated_preferences(&self.prefer_no_schedule_tolerations, &node.taints)
    }

    /// What `prepare` found, if no node has changed since.
    fn scores_zero(&self, nodes: &Nodes) -> bool {
        self.scores_zero_at == Some(nodes.generation())
    }

    /// One `extend` over the ids rather than a `push` per node: as WebAssembly each `push`
    /// loaded and stored the vector's length in memory and checked its capacity.
    fn score_batch(&mut self, _pod: &Pod, nodes: &Nodes, ids: &[u32], out: &mut Vec<i64>) {
        // Checked against the generation as a plan is: taints that came since it was made are
        // read.
        if self.scores_zero_at == Some(nodes.generation()) {
            out.extend(
                ids.iter()
                    .map(|&id| if nodes.contains(id) { 0 } else { i64::MIN }),
            );
            return;
        }
        let memo = &mut self.per_taint_set;
        reset(memo, nodes);
        let tolerations = &self.prefer_no_schedule_tolerations;
        out.extend(ids.iter().map(|&id| {
            let Some(summary) = nodes.summary(id) else {
                return i64::MIN;
            };
            let known = &mut memo[summary.taint_set as usize];
            if *known == NOT_YET {
                let taints = nodes.taint_set(summary.taint_set);
                *known = untolerated_preferences(tolerations, taints) as u32;
            }
            i64::from(*known)
        }));
    }
}

wasched_sdk::export_plugin!(TaintToleration: filter, score);

/// kube-scheduler's behaviour as a table: run natively by this crate's tests and through the
/// WebAssembly build by the host's (`tests/e2e/plugins.rs`), which insists both builds agree.
#[cfg(not(target_arch = "wasm32"))]
pub fn cases() -> Vec<wasched_sdk::testing::Case> {
    use wasched_sdk::testing::{
        failing_plan, node, pass, pod, toleration, unresolvable, with_taints, Case,
    };

    let gpu = || with_taints(node("gpu"), &[("dedicated", "gpu", effect::NO_SCHEDULE)]);
    let soft = || with_taints(node("soft"), &[("spot", "", effect::PREFER_NO_SCHEDULE)]);
    let tolerating = |tolerations| Pod {
        tolerations,
        ..pod("p")
    };
    let gpu_reason = "node(s) had untolerated taint {dedicated: gpu}";
    let mut mostly_plain: Vec<NodeInfo> = (0..7).map(|i| node(&format!("n{i}"))).collect();
    mostly_plain.insert(3, gpu());
    let mut mostly_plain_verdicts = vec![pass(); 8];
    mostly_plain_verdicts[3] = unresolvable(gpu_reason);
    let fourth_listed = failing_plan(8, &[3], Failure::unresolvable(gpu_reason));
    let spotty = vec![
        node("clean"),
        with_taints(node("one"), &[("spot", "true", effect::PREFER_NO_SCHEDULE)]),
        with_taints(
            node("two"),
            &[
                ("spot", "true", effect::PREFER_NO_SCHEDULE),
                ("old", "", effect::PREFER_NO_SCHEDULE),
                ("x", "", effect::NO_SCHEDULE),
            ],
        ),
    ];
    vec![
        Case::filter(
            "an untolerated NoSchedule taint is named in the reason; half the nodes failing is filtered, not listed",
            pod("p"),
            vec![node("plain"), gpu()],
            vec![pass(), unresolvable(gpu_reason)],
        )
        .with_plan(FilterPlan::Run),
        Case::filter(
            "a minority of untolerated nodes is listed in the plan",
            pod("p"),
            mostly_plain,
            mostly_plain_verdicts,
        )
        .with_plan(fourth_listed),
        Case::filter(
            "a taint without a value prints as {key: }",
            pod("p"),
            vec![with_taints(node("n"), &[("maintenance", "", effect::NO_EXECUTE)])],
            vec![unresolvable("node(s) had untolerated taint {maintenance: }")],
        ),
        Case::filter(
            "PreferNoSchedule never filters",
            pod("p"),
            vec![node("plain"), soft()],
            vec![pass(), pass()],
        )
        .with_plan(FilterPlan::Skip),
        Case::filter(
            "the first untolerated taint is the one named",
            tolerating(vec![toleration("a", "Exists", "", "")]),
            vec![with_taints(
                node("n"),
                &[
                    ("a", "1", effect::NO_SCHEDULE),
                    ("b", "2", effect::NO_EXECUTE),
                    ("c", "3", effect::NO_SCHEDULE),
                ],
            )],
            vec![unresolvable("node(s) had untolerated taint {b: 2}")],
        ),
        Case::filter(
            "Equal needs the same value",
            tolerating(vec![toleration("dedicated", "Equal", "cpu", effect::NO_SCHEDULE)]),
            vec![gpu()],
            vec![unresolvable(gpu_reason)],
        ),
        Case::filter(
            "Equal with the same value, and an empty operator, tolerate",
            tolerating(vec![toleration("dedicated", "", "gpu", effect::NO_SCHEDULE)]),
            vec![gpu()],
            vec![pass()],
        ),
        Case::filter(
            "an empty key with Exists tolerates everything",
            tolerating(vec![toleration("", "Exists", "", "")]),
            vec![gpu(), with_taints(node("x"), &[("x", "y", effect::NO_EXECUTE)])],
            vec![pass(), pass()],
        ),
        Case::score(
            "every node tolerated: nothing to filter, and the PreferNoSchedule score is still given",
            tolerating(vec![toleration("dedicated", "Equal", "gpu", effect::NO_SCHEDULE)]),
            vec![gpu(), soft()],
            vec![100, 0],
        )
        .with_plan(FilterPlan::Skip),
        Case::score(
            "untolerated PreferNoSchedule taints counted 0, 1, 2 and reverse-normalized",
            pod("p"),
            spotty.clone(),
            vec![100, 50, 0],
        ),
        Case::score(
            "a tolerated PreferNoSchedule taint does not count",
            tolerating(vec![toleration("spot", "Exists", "", effect::PREFER_NO_SCHEDULE)]),
            spotty.clone(),
            vec![100, 100, 0],
        ),
        Case::score(
            "a NoSchedule toleration does not count when scoring",
            tolerating(vec![toleration("spot", "Exists", "", effect::NO_SCHEDULE)]),
            spotty,
            vec![100, 50, 0],
        ),
        Case::score(
            "all-zero counts become 100 with reverse",
            pod("p"),
            vec![node("a"), node("b")],
            vec![100, 100],
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasched_sdk::testing::{node, pod, toleration, with_taints};
    use wasched_sdk::Driver;

    #[test]
    fn answers_as_kube_scheduler() {
        wasched_sdk::testing::check::<super::TaintToleration>(&super::cases());
    }

    fn scores(driver: &mut Driver<TaintToleration>, ids: &[u32]) -> Vec<i64> {
        let mut out = Vec::new();
        driver.score(ids, &mut out);
        out
    }

    #[test]
    fn a_pod_scoring_zero_everywhere_still_reads_taints_that_came_after_its_plan() {
        let spot = || with_taints(node("spot"), &[("spot", "", effect::PREFER_NO_SCHEDULE)]);
        let gpu = with_taints(node("gpu"), &[("gpu", "", effect::NO_SCHEDULE)]);
        let mut driver = Driver::<TaintToleration>::new("{}").unwrap();
        driver.upsert_nodes([(0, node("plain")), (1, gpu), (2, spot())]);
        let tolerating = Pod {
            tolerations: vec![toleration("spot", "Exists", "", effect::PREFER_NO_SCHEDULE)],
            ..pod("p")
        };
        driver.set_pod(tolerating);
        assert_eq!(scores(&mut driver, &[0, 1, 2, 7]), [0, 0, 0, i64::MIN]);

        driver.set_pod(pod("p"));
        assert_eq!(
            scores(&mut driver, &[0, 1, 2]),
            [0, 0, 1],
            "spot is not tolerated"
        );

        driver.remove_nodes(&[2]);
        driver.set_pod(pod("p"));
        assert_eq!(scores(&mut driver, &[0, 1]), [0, 0]);
        // A node tainted after the plan was made, before the score.
        driver.upsert_nodes([(0, spot())]);
        assert_eq!(scores(&mut driver, &[0, 1]), [1, 0]);
    }
}
