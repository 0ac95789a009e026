//! NodeAffinity: `spec.nodeSelector` and required node affinity must both hold; preferred node
//! affinity terms add their weights to a node's score.

mod selector;

use selector::{parse_term, CompiledTerm, Term};
use wasched_sdk::{
    Failure, FilterPlan, FilterPlugin, FilterResults, LabelTest, Labels, NodeInfo, Nodes,
    Normalize, Plugin, Pod, PodParts, PodPlan, ScorePlugin, Verdict,
};

/// The name used in configs and messages.
pub const NAME: &str = "NodeAffinity";
/// kube-scheduler's reason for a node that fails the selector or required affinity.
pub const REASON: &str = "node(s) didn't match Pod's node affinity/selector";
/// kube-scheduler's reason when every term names nodes by `metadata.name` and no name is common.
pub const REASON_CONFLICT: &str = "pod affinity terms conflict";
/// The field key `matchFields` supports.
pub const NAME_FIELD: &str = "metadata.name";

/// The plugin; holds the current pod's parsed selector and terms.
#[derive(Default)]
pub struct NodeAffinity {
    node_selector: Labels,
    /// `None`: no required affinity. `Some`: the valid, non-empty terms (ORed).
    required: Option<Vec<Term>>,
    preferred: Vec<(i64, Term)>,
    /// The above as label tests against the mirror, made at the pod's first batch, with the
    /// mirror's generation they were made at.
    compiled: Option<(u64, Compiled)>,
}

/// The current pod's selector and terms as label tests: one table lookup per node and label.
struct Compiled {
    node_selector: Vec<LabelTest>,
    required: Option<Vec<CompiledTerm>>,
    preferred: Vec<(i64, CompiledTerm)>,
}

impl Compiled {
    fn new(plugin: &NodeAffinity, nodes: &Nodes) -> Self {
        Compiled {
            node_selector: plugin
                .node_selector
                .iter()
                .map(|(key, wanted)| nodes.label_test(key, |value| value == Some(wanted)))
                .collect(),
            required: plugin
                .required
                .as_ref()
                .map(|terms| terms.iter().map(|t| t.compile(nodes)).collect()),
            preferred: plugin
                .preferred
                .iter()
                .map(|(weight, term)| (*weight, term.compile(nodes)))
                .collect(),
        }
    }

    fn filter(&self, nodes: &Nodes, id: u32) -> bool {
        self.node_selector.iter().all(|test| nodes.passes(id, test))
            && self
                .required
                .as_ref()
                .is_none_or(|terms| terms.iter().any(|t| t.matches(nodes, id)))
    }

    fn score(&self, nodes: &Nodes, id: u32) -> i64 {
        self.preferred
            .iter()
            .filter(|(_, term)| term.matches(nodes, id))
            .map(|(weight, _)| weight)
            .sum()
    }
}

impl NodeAffinity {
    fn compiled(&mut self, nodes: &Nodes) -> &Compiled {
        if !matches!(&self.compiled, Some((generation, _)) if *generation == nodes.generation()) {
            self.compiled = Some((nodes.generation(), Compiled::new(self, nodes)));
        }
        &self.compiled.as_ref().expect("just compiled").1
    }
}

impl Plugin for NodeAffinity {
    const NAME: &'static str = NAME;
    const READS_POD: PodParts = PodParts::NODE_SELECTION;
    const INDEXES_LABELS: bool = true;

    fn new(_config: &str) -> Result<Self, String> {
        Ok(Self::default())
    }

    fn prepare(&mut self, pod: &Pod) -> PodPlan {
        self.compiled = None;
        self.node_selector = pod.node_selector.clone();
        let affinity = pod.node_affinity.as_ref();
        let required_terms = affinity.and_then(|a| a.required.as_ref());
        // An empty or invalid term matches nothing, so it is simply left out of the ORed list.
        self.required = required_terms.map(|terms| {
            terms
                .iter()
                .filter(|t| !t.match_expressions.is_empty() || !t.match_fields.is_empty())
                .filter_map(|t| parse_term(t).ok())
                .collect()
        });
        self.preferred.clear();
        let mut invalid_preference = None;
        for term in affinity.map(|a| a.preferred.as_slice()).unwrap_or_default() {
            let preference = &term.preference;
            if term.weight == 0
                || (preference.match_expressions.is_empty() && preference.match_fields.is_empty())
            {
                continue;
            }
            match parse_term(preference) {
                Ok(parsed) => self.preferred.push((i64::from(term.weight), parsed)),
                Err(e) => invalid_preference = Some(e),
            }
        }

        let filter = if let Some(error) = invalid_preference {
            // kube-scheduler fails the whole attempt when a preferred term cannot be parsed.
            FilterPlan::Reject(Failure::error(format!(
                "invalid preferred node affinity: {error}"
            )))
        } else if required_terms.is_none() && self.node_selector.is_empty() {
            FilterPlan::Skip
        } else {
            required_terms.map_or(FilterPlan::Run, |terms| plan_by_node_name(terms))
        };
        PodPlan {
            filter,
            score: !self.preferred.is_empty(),
        }
    }
}

/// kube-scheduler's PreFilter shortcut: when every term names nodes with `metadata.name In`, only
/// those nodes need filtering.
fn plan_by_node_name(terms: &[wasched_sdk::NodeSelectorTerm]) -> FilterPlan {
    if terms.is_empty() {
        return FilterPlan::Run;
    }
    let mut names: Vec<String> = Vec::new();
    for term in terms {
        let mut term_names: Option<Vec<String>> = None;
        for field in &term.match_fields {
            if field.key == NAME_FIELD && field.operator == "In" {
                term_names = Some(match term_names {
                    None => field.values.clone(),
                    Some(previous) => previous
                        .into_iter()
                        .filter(|n| field.values.contains(n))
                        .collect(),
                });
            }
        }
        match term_names {
            // A term without a name requirement lets any node through.
            None => return FilterPlan::Run,
            Some(term_names) => {
                for name in term_names {
                    if !names.contains(&name) {
                        names.push(name);
                    }
                }
            }
        }
    }
    if names.is_empty() {
        FilterPlan::Reject(Failure::unresolvable(REASON_CONFLICT))
    } else {
        FilterPlan::OnlyNodes(names)
    }
}

impl FilterPlugin for NodeAffinity {
    fn filter(&self, _pod: &Pod, node: &NodeInfo) -> Verdict {
        let selector_matches = self
            .node_selector
            .iter()
            .all(|(key, value)| node.labels.get(key) == Some(value));
        let affinity_matches = match &self.required {
            None => true,
            Some(terms) => terms.iter().any(|t| t.matches(node)),
        };
        if selector_matches && affinity_matches {
            Ok(())
        } else {
            Err(Failure::unresolvable(REASON))
        }
    }

    fn filter_batch(&mut self, _pod: &Pod, nodes: &Nodes, ids: &[u32], out: &mut FilterResults) {
        let compiled = self.compiled(nodes);
        out.push_each(
            nodes,
            ids,
            |id| compiled.filter(nodes, id),
            || Failure::unresolvable(REASON),
        );
    }
}

impl ScorePlugin for NodeAffinity {
    const NORMALIZE: Normalize = Normalize::Scale;

    fn score(&self, _pod: &Pod, node: &NodeInfo) -> i64 {
        self.preferred
            .iter()
            .filter(|(_, term)| term.matches(node))
            .map(|(weight, _)| weight)
            .sum()
    }

    fn score_batch(&mut self, _pod: &Pod, nodes: &Nodes, ids: &[u32], out: &mut Vec<i64>) {
        let compiled = self.compiled(nodes);
        out.extend(ids.iter().map(|&id| {
            if nodes.contains(id) {
                compiled.score(nodes, id)
            } else {
                i64::MIN
            }
        }));
    }
}

wasched_sdk::export_plugin!(NodeAffinity: filter, score);
