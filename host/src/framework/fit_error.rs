//! kube-scheduler's "0/N nodes are available: ..." message.

use std::collections::BTreeMap;

/// kube-scheduler's message when the cluster has no node at all.
pub const NO_NODES_AVAILABLE: &str = "no nodes available to schedule pods";

/// The FitError message for a pod no node could take.
///
/// `reasons` holds one entry per failing node and reason (a node failing for two reasons appears
/// twice). Each distinct reason is printed as `"<count> <reason>"`; the entries are sorted as
/// strings (so "10 ..." sorts before "2 ...") and joined with ", ".
pub fn nodes_unavailable<'a>(
    all_nodes: usize,
    reasons: impl IntoIterator<Item = &'a str>,
) -> String {
    let mut histogram: BTreeMap<&str, usize> = BTreeMap::new();
    for reason in reasons {
        *histogram.entry(reason).or_default() += 1;
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
