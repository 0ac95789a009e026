//! Every text the host writes about a pod it did not place: kube-scheduler's "0/N nodes are
//! available: ..." (FitError) and its pieces, and the messages of a cycle that a plugin ended.
//! Kept in one module so that the words users grep their logs for change in one place.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::runtime::CallError;

/// kube-scheduler's message when the cluster has no node at all.
pub const NO_NODES_AVAILABLE: &str = "no nodes available to schedule pods";

/// The reason of a node that plugins narrowing the candidates (`only-nodes` plans) left out.
pub fn not_among_narrowed(plugins: &[&str]) -> String {
    let mut plugins = plugins.to_vec();
    plugins.sort_unstable();
    format!("node(s) didn't satisfy plugin(s) [{}]", plugins.join(" "))
}

/// The reason when the narrowing plugins' node sets have nothing in common.
pub fn no_node_in_every_narrowed_set(plugins: &[&str]) -> String {
    match plugins {
        [one] => format!("node(s) didn't satisfy plugin {one}"),
        _ => format!(
            "node(s) didn't satisfy plugin(s) [{}] simultaneously",
            plugins.join(" ")
        ),
    }
}

/// A plugin's PreFilter (`set-pod`) answered with an error status.
pub fn pre_filter_error(plugin: &str, reasons: &[impl AsRef<str>]) -> String {
    format!("running PreFilter plugin {plugin:?}: {}", join(reasons))
}

/// A plugin's filter answered a node with an error status.
pub fn filter_error(plugin: &str, reasons: &[impl AsRef<str>]) -> String {
    format!("running {plugin:?} filter plugin: {}", join(reasons))
}

/// A plugin's Reserve answered with an error status.
pub fn reserve_error(plugin: &str, reasons: &[impl AsRef<str>]) -> String {
    format!("running Reserve plugin {plugin:?}: {}", join(reasons))
}

/// A call into a plugin failed (trap, deadline, memory, invalid result).
pub fn plugin_failed(plugin: &str, error: &CallError) -> String {
    format!("plugin {plugin} failed in {error}")
}

/// A plugin under the `fail` policy is quarantined, so no pod of its profile can be placed.
pub fn quarantined(
    plugin: &str,
    remaining: Duration,
    consecutive_failures: u32,
    last_error: Option<&str>,
) -> String {
    format!(
        "plugin {plugin} is quarantined for {}s more after {consecutive_failures} consecutive failures (last: {})",
        remaining.as_secs(),
        last_error.unwrap_or("unknown")
    )
}

/// A score plugin's normalized score fell outside 0..=100.
pub fn score_out_of_range(score: i64, position: usize, count: usize) -> String {
    format!("returned {score} for node #{position} of {count}, outside 0..=100 after normalizing")
}

fn join(reasons: &[impl AsRef<str>]) -> String {
    let reasons: Vec<&str> = reasons.iter().map(AsRef::as_ref).collect();
    reasons.join(", ")
}

/// The FitError message for a pod no node could take.
///
/// `reasons` holds one entry per failing node and reason (a node failing for two reasons appears
/// twice). Each distinct reason is printed as `"<count> <reason>"`; the entries are sorted as
/// strings (so "10 ..." sorts before "2 ...") and joined with ", ".
pub fn nodes_unavailable<'a>(
    all_nodes: usize,
    reasons: impl IntoIterator<Item = &'a str>,
) -> String {
    nodes_unavailable_counted(all_nodes, reasons.into_iter().map(|reason| (reason, 1)))
}

/// [`nodes_unavailable`] from reasons already counted (a reason may come more than once).
pub fn nodes_unavailable_counted<'a>(
    all_nodes: usize,
    counted: impl IntoIterator<Item = (&'a str, usize)>,
) -> String {
    let mut histogram: BTreeMap<&str, usize> = BTreeMap::new();
    for (reason, count) in counted {
        if count > 0 {
            *histogram.entry(reason).or_default() += count;
        }
    }
    let mut entries: Vec<String> = histogram
        .into_iter()
        .map(|(reason, count)| format!("{count} {reason}"))
        .collect();
    entries.sort();
    format!("0/{all_nodes} nodes are available: {}.", entries.join(", "))
}

/// The FitError message when a plugin rejected the pod before looking at nodes: its reasons,
/// printed once and without counts.
pub fn rejected_before_filtering(all_nodes: usize, reasons: &[impl AsRef<str>]) -> String {
    let joined: Vec<&str> = reasons.iter().map(AsRef::as_ref).collect();
    format!("0/{all_nodes} nodes are available: {}.", joined.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_sorted_as_strings() {
        let mut reasons = vec!["node(s) were out of disk space"];
        reasons.extend(std::iter::repeat_n("Insufficient cpu", 38));
        assert_eq!(
            nodes_unavailable(39, reasons),
            "0/39 nodes are available: 1 node(s) were out of disk space, 38 Insufficient cpu."
        );
        let mut reasons = vec!["b"; 2];
        reasons.extend(std::iter::repeat_n("a", 10));
        assert_eq!(
            nodes_unavailable(12, reasons),
            "0/12 nodes are available: 10 a, 2 b."
        );
    }

    #[test]
    fn a_pre_filter_rejection_is_printed_once() {
        assert_eq!(
            rejected_before_filtering(3, &["persistentvolumeclaim \"data\" not found"]),
            "0/3 nodes are available: persistentvolumeclaim \"data\" not found."
        );
    }
}
