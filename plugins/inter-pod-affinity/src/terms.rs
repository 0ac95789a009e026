//! Pod (anti-)affinity terms as kube-scheduler matches them (`framework.AffinityTerm`).

use wasched_sdk::helpers::selector_matches;
use wasched_sdk::{LabelSelector, Labels, Nodes, PodAffinityTerm};

/// A term of the pod being scheduled, its namespace selector already resolved against the
/// namespaces the mirror knows (kube-scheduler's `mergeAffinityTermNamespacesIfNotEmpty`). Two pods
/// with equal terms share one set of counts, so this is also the key of those counts.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IncomingTerm {
    /// The namespace selector was `{}`: pods of every namespace match.
    pub every_namespace: bool,
    /// Sorted, without duplicates.
    pub namespaces: Vec<String>,
    /// `None` matches no pod.
    pub selector: Option<LabelSelector>,
    /// `topologyKey`: the node label whose values are the domains.
    pub topology_key: String,
}

impl IncomingTerm {
    /// `term` of a pod in `namespace`.
    pub fn resolve(term: &PodAffinityTerm, namespace: &str, nodes: &Nodes) -> IncomingTerm {
        let mut namespaces = term.namespaces.clone();
        let mut every_namespace = false;
        match &term.namespace_selector {
            None if namespaces.is_empty() => namespaces.push(namespace.to_string()),
            None => {}
            Some(selector) if is_everything(selector) => every_namespace = true,
            Some(selector) => namespaces.extend(
                nodes
                    .namespaces()
                    .filter(|(_, labels)| selector_matches(selector, labels))
                    .map(|(name, _)| name.to_string()),
            ),
        }
        namespaces.sort_unstable();
        namespaces.dedup();
        IncomingTerm {
            every_namespace,
            namespaces,
            selector: term.label_selector.clone(),
            topology_key: term.topology_key.clone(),
        }
    }

    /// Whether a pod in `namespace` with `labels` matches the term.
    pub fn matches(&self, namespace: &str, labels: &Labels) -> bool {
        (self.every_namespace
            || self
                .namespaces
                .binary_search_by(|n| n.as_str().cmp(namespace))
                .is_ok())
            && self
                .selector
                .as_ref()
                .is_some_and(|selector| selector_matches(selector, labels))
    }
}

/// A term of a pod already placed, checked against each pod being scheduled: its namespace
/// selector is matched against that pod's namespace's labels at the time.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OwnedTerm {
    /// The owner's namespace when the term names none and has no namespace selector.
    pub namespaces: Vec<String>,
    /// `namespaceSelector`, matched against the scheduled pod's namespace labels.
    pub namespace_selector: Option<LabelSelector>,
    /// `labelSelector`; `None` matches no pod.
    pub selector: Option<LabelSelector>,
    /// `topologyKey`.
    pub topology_key: String,
}

impl OwnedTerm {
    /// `term` of a pod in `namespace`.
    pub fn of(term: &PodAffinityTerm, namespace: &str) -> OwnedTerm {
        let mut namespaces = term.namespaces.clone();
        if namespaces.is_empty() && term.namespace_selector.is_none() {
            namespaces.push(namespace.to_string());
        }
        namespaces.sort_unstable();
        namespaces.dedup();
        OwnedTerm {
            namespaces,
            namespace_selector: term.namespace_selector.clone(),
            selector: term.label_selector.clone(),
            topology_key: term.topology_key.clone(),
        }
    }

    /// Whether the pod being scheduled (in `namespace`, whose labels are `namespace_labels`, with
    /// `labels`) matches the term.
    pub fn matches(&self, namespace: &str, namespace_labels: &Labels, labels: &Labels) -> bool {
        (self.namespaces.iter().any(|n| n == namespace)
            || self
                .namespace_selector
                .as_ref()
                .is_some_and(|selector| selector_matches(selector, namespace_labels)))
            && self
                .selector
                .as_ref()
                .is_some_and(|selector| selector_matches(selector, labels))
    }
}

/// `{}`: the selector every label set satisfies.
fn is_everything(selector: &LabelSelector) -> bool {
    selector.match_labels.is_empty() && selector.match_expressions.is_empty()
}
