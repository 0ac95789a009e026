//! A pod's spread constraints as kube-scheduler evaluates them (`filterTopologySpreadConstraints`
//! and `buildDefaultConstraints`): its own of one kind, or the cluster defaults with the selector
//! deduced from its Services and controller.

use wasched_sdk::helpers::selector_matches;
use wasched_sdk::pod_index::anchor;
use wasched_sdk::{LabelSelector, Labels, Pod, TopologySpreadConstraint};

use crate::args::{Args, HOSTNAME};

/// Which pods a constraint counts: its label selector ANDed with the pod's own values of its
/// `matchLabelKeys`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SpreadSelector {
    /// `None` matches no pod.
    selector: Option<LabelSelector>,
    /// `matchLabelKeys` pairs, sorted.
    pairs: Vec<(String, String)>,
}

impl SpreadSelector {
    /// `selector` with the pairs of `match_label_keys` the pod has; a selector matching nothing
    /// stays so (Kubernetes' `mergeLabelSetWithSelector`).
    pub fn new(
        selector: Option<&LabelSelector>,
        match_label_keys: &[String],
        pod: &Labels,
    ) -> Self {
        let mut pairs: Vec<(String, String)> = match selector {
            None => Vec::new(),
            Some(_) => match_label_keys
                .iter()
                .filter_map(|key| Some((key.clone(), pod.get(key)?.to_string())))
                .collect(),
        };
        pairs.sort();
        pairs.dedup();
        SpreadSelector {
            selector: selector.cloned(),
            pairs,
        }
    }

    /// Whether a pod with `labels` matches.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.selector.as_ref().is_some_and(|selector| {
            self.pairs
                .iter()
                .all(|(key, value)| labels.get(key) == Some(value.as_str()))
                && selector_matches(selector, labels)
        })
    }

    /// A selector without requirements: kube-scheduler counts no pod for it (a quirk of
    /// `countPodsMatchSelector`, which stops at `selector.Empty()`), though the pod itself matches.
    /// A selector matching nothing counts no pod either.
    pub fn counts_nothing(&self) -> bool {
        match &self.selector {
            None => true,
            Some(s) => {
                self.pairs.is_empty() && s.match_labels.is_empty() && s.match_expressions.is_empty()
            }
        }
    }

    /// A label pair every pod it matches has, if there is one.
    pub fn anchor(&self) -> Option<(&str, &str)> {
        self.pairs
            .first()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .or_else(|| anchor(self.selector.as_ref()))
    }

    /// The selector part, for narrowing the pods a new count looks at.
    pub fn selector(&self) -> Option<&LabelSelector> {
        self.selector.as_ref()
    }

    /// The `matchLabelKeys` pairs.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }
}

/// One constraint, resolved for the pod.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Constraint {
    /// `maxSkew`.
    pub max_skew: i64,
    /// `topologyKey`: the node label whose values are the domains.
    pub topology_key: String,
    /// Which pods count.
    pub selector: SpreadSelector,
    /// `minDomains` (1 when unset).
    pub min_domains: i64,
    /// `nodeAffinityPolicy: Honor` (the default): only nodes matching the pod's node selector
    /// and required node affinity count.
    pub honor_affinity: bool,
    /// `nodeTaintsPolicy: Honor`: only nodes whose NoSchedule/NoExecute taints the pod tolerates
    /// count (the default ignores taints).
    pub honor_taints: bool,
}

impl Constraint {
    fn of(c: &TopologySpreadConstraint, selector: SpreadSelector) -> Self {
        Constraint {
            max_skew: i64::from(c.max_skew),
            topology_key: c.topology_key.clone(),
            selector,
            min_domains: c.min_domains.map_or(1, i64::from),
            honor_affinity: c.node_affinity_policy != "Ignore",
            honor_taints: c.node_taints_policy == "Honor",
        }
    }

    /// The key of a node's own domain: counted on the node itself when scoring.
    pub fn is_hostname(&self) -> bool {
        self.topology_key == HOSTNAME
    }
}

/// The pod's constraints whose `whenUnsatisfiable` is `action`: its own if it has any, else the
/// cluster defaults, which apply only when the pod has a default selector with requirements.
pub fn constraints(pod: &Pod, args: &Args, action: &str) -> Vec<Constraint> {
    if !pod.topology_spread_constraints.is_empty() {
        return pod
            .topology_spread_constraints
            .iter()
            .filter(|c| c.when_unsatisfiable == action)
            .map(|c| {
                let selector = SpreadSelector::new(
                    c.label_selector.as_ref(),
                    &c.match_label_keys,
                    &pod.labels,
                );
                Constraint::of(c, selector)
            })
            .collect();
    }
    let Some(default_selector) = &pod.default_spread_selector else {
        return Vec::new();
    };
    if default_selector.match_labels.is_empty() && default_selector.match_expressions.is_empty() {
        return Vec::new();
    }
    args.default_constraints
        .iter()
        .filter(|c| c.when_unsatisfiable == action)
        .map(|c| {
            Constraint::of(
                c,
                SpreadSelector::new(Some(default_selector), &[], &pod.labels),
            )
        })
        .collect()
}
