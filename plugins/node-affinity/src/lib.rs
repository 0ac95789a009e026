//! NodeAffinity: `spec.nodeSelector` and required node affinity must both hold; preferred node
//! affinity terms add their weights to a node's score. The profile may add affinity of its own
//! to every pod (`addedAffinity`, [`args`]).

#![warn(missing_docs)]

pub mod args;

use wasched_sdk::node_selector::{
    parse_term, CompiledNodeAffinity, CompiledTerm, RequiredNodeAffinity, Term,
};
use wasched_sdk::{
    Failure, FilterPlan, FilterPlugin, FilterResults, NodeInfo, Nodes, Normalize, Plugin, Pod,
    PodParts, PodPlan, ScorePlugin, Verdict,
};

/// The name used in configs and messages.
pub const NAME: &str = "NodeAffinity";
/// kube-scheduler's reason for a node that fails the selector or required affinity.
pub const REASON: &str = "node(s) didn't match Pod's node affinity/selector";
/// kube-scheduler's reason for a node that fails the profile's `addedAffinity`.
pub const REASON_ENFORCED: &str = "node(s) didn't match scheduler-enforced node affinity";
/// kube-scheduler's reason when every term names nodes by `metadata.name` and no name is common.
pub const REASON_CONFLICT: &str = "pod affinity terms conflict";
pub use wasched_sdk::node_selector::NAME_FIELD;

/// The plugin; holds the profile's added affinity and the current pod's parsed selector and terms.
#[derive(Default)]
pub struct NodeAffinity {
    added: args::Args,
    required: RequiredNodeAffinity,
    preferred: Vec<(i64, Term)>,
    /// The above as label tests against the mirror, made at the pod's first batch, with the
    /// mirror's generation they were made at.
    compiled: Option<(u64, Compiled)>,
}

/// The current pod's selector and terms as label tests: one table lookup per node and label.
struct Compiled {
    required: CompiledNodeAffinity,
    /// The pod's preferred terms, then the profile's added ones: a node's score is the sum of
    /// the weights of those it matches.
    preferred: Vec<(i64, CompiledTerm)>,
    added_required: Option<Vec<CompiledTerm>>,
}

impl Compiled {
    fn new(plugin: &NodeAffinity, nodes: &Nodes) -> Self {
        let compile = |terms: &[(i64, Term)]| {
            let compiled = terms
                .iter()
                .map(|(weight, term)| (*weight, term.compile(nodes)));
            compiled.collect::<Vec<_>>()
        };
        let mut preferred = compile(&plugin.preferred);
        preferred.extend(compile(&plugin.added.preferred));
        Compiled {
            required: plugin.required.compile(nodes),
            preferred,
            added_required: plugin
                .added
                .required
                .as_ref()
                .map(|terms| terms.iter().map(|term| term.compile(nodes)).collect()),
        }
    }

    fn filter(&self, nodes: &Nodes, id: u32) -> bool {
        self.required.matches(nodes, id)
    }

    /// The verdict with the profile's added affinity, checked first as kube-scheduler does.
    fn enforced_filter(&self, nodes: &Nodes, id: u32, added: &[CompiledTerm]) -> Verdict {
        if !added.iter().any(|term| term.matches(nodes, id)) {
            Err(Failure::unresolvable(REASON_ENFORCED))
        } else if !self.required.matches(nodes, id) {
            Err(Failure::unresolvable(REASON))
        } else {
            Ok(())
        }
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

    fn new(config: &str) -> Result<Self, String> {
        Ok(NodeAffinity {
            added: args::Args::parse(config)?,
            ..NodeAffinity::default()
        })
    }

    fn prepare(&mut self, pod: &Pod, _nodes: &Nodes) -> PodPlan {
        self.compiled = None;
        self.required = RequiredNodeAffinity::of(pod);
        let affinity = pod.node_affinity.as_ref();
        let required_terms = affinity.and_then(|a| a.required.as_ref());
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
        } else if self.required.is_empty() && self.added.required.is_none() {
            FilterPlan::Skip
        } else {
            required_terms.map_or(FilterPlan::Run, |terms| plan_by_node_name(terms))
        };
        PodPlan {
            filter,
            score: !self.preferred.is_empty() || !self.added.preferred.is_empty(),
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
        if let Some(added) = &self.added.required {
            if !added.iter().any(|term| term.matches(node)) {
                return Err(Failure::unresolvable(REASON_ENFORCED));
            }
        }
        if self.required.matches(node) {
            Ok(())
        } else {
            Err(Failure::unresolvable(REASON))
        }
    }

    fn filter_batch(&mut self, _pod: &Pod, nodes: &Nodes, ids: &[u32], out: &mut FilterResults) {
        let compiled = self.compiled(nodes);
        if let Some(added) = &compiled.added_required {
            for &id in ids {
                out.push(match nodes.contains(id) {
                    true => compiled.enforced_filter(nodes, id, added),
                    false => Err(Nodes::unknown(id)),
                });
            }
            return;
        }
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
            .chain(&self.added.preferred)
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

/// kube-scheduler's behaviour as a table: run natively by this crate's tests and through the
/// WebAssembly build by the host's (`tests/e2e/plugins.rs`), which insists both builds agree.
#[cfg(not(target_arch = "wasm32"))]
pub fn cases() -> Vec<wasched_sdk::testing::Case> {
    use wasched_sdk::testing::{
        labels, node, pass, pod, requirement, term, unresolvable, with_labels, Case,
    };
    use wasched_sdk::{NodeAffinity as Affinity, NodeSelectorTerm, PreferredSchedulingTerm};

    let reason = "node(s) didn't match Pod's node affinity/selector";
    let zone = |z: &str| with_labels(node(&format!("n-{z}")), &[("zone", z), ("cores", "8")]);
    let bare = || node("bare");
    let requiring = |required: Vec<NodeSelectorTerm>| Pod {
        node_affinity: Some(Affinity {
            required: Some(required),
            preferred: Vec::new(),
        }),
        ..pod("p")
    };
    let fields_term = |operator: &str, values: &[&str]| NodeSelectorTerm {
        match_expressions: Vec::new(),
        match_fields: vec![requirement(NAME_FIELD, operator, values)],
    };
    let preferring = Pod {
        node_affinity: Some(Affinity {
            required: None,
            preferred: vec![
                PreferredSchedulingTerm {
                    weight: 30,
                    preference: term(vec![requirement("disk", "In", &["ssd"])]),
                },
                PreferredSchedulingTerm {
                    weight: 10,
                    preference: term(vec![requirement("zone", "In", &["a"])]),
                },
                PreferredSchedulingTerm {
                    weight: 50,
                    preference: term(vec![]),
                },
            ],
        }),
        ..pod("p")
    };
    let preference_nodes = vec![
        with_labels(node("both"), &[("disk", "ssd"), ("zone", "a")]),
        with_labels(node("ssd"), &[("disk", "ssd")]),
        with_labels(node("zone"), &[("zone", "a")]),
        node("none"),
    ];
    vec![
        Case::filter(
            "nodeSelector needs every pair",
            Pod {
                node_selector: labels(&[("zone", "a"), ("cores", "8")]),
                ..pod("p")
            },
            vec![zone("a"), zone("b"), bare()],
            vec![pass(), unresolvable(reason), unresolvable(reason)],
        ),
        Case::filter(
            "In and NotIn; NotIn matches a node without the key",
            requiring(vec![term(vec![requirement("zone", "NotIn", &["b"])])]),
            vec![zone("a"), zone("b"), bare()],
            vec![pass(), unresolvable(reason), pass()],
        ),
        Case::filter(
            "terms are ORed, expressions inside a term ANDed",
            requiring(vec![
                term(vec![
                    requirement("zone", "In", &["a"]),
                    requirement("cores", "In", &["16"]),
                ]),
                term(vec![requirement("zone", "In", &["b"])]),
            ]),
            vec![zone("a"), zone("b")],
            vec![unresolvable(reason), pass()],
        ),
        Case::filter(
            "Exists and DoesNotExist",
            requiring(vec![term(vec![
                requirement("zone", "Exists", &[]),
                requirement("gpu", "DoesNotExist", &[]),
            ])]),
            vec![
                zone("a"),
                bare(),
                with_labels(node("g"), &[("zone", "a"), ("gpu", "t4")]),
            ],
            vec![pass(), unresolvable(reason), unresolvable(reason)],
        ),
        Case::filter(
            "Gt and Lt compare integers; a non-integer label never matches",
            requiring(vec![term(vec![
                requirement("cores", "Gt", &["4"]),
                requirement("cores", "Lt", &["10"]),
            ])]),
            vec![
                zone("a"),
                with_labels(node("big"), &[("cores", "12")]),
                with_labels(node("odd"), &[("cores", "eight")]),
            ],
            vec![pass(), unresolvable(reason), unresolvable(reason)],
        ),
        Case::filter(
            "an empty list of terms matches nothing",
            requiring(vec![]),
            vec![zone("a")],
            vec![unresolvable(reason)],
        ),
        Case::filter(
            "an empty term matches nothing, but the other terms still count",
            requiring(vec![term(vec![]), term(vec![requirement("zone", "In", &["a"])])]),
            vec![zone("a"), zone("b")],
            vec![pass(), unresolvable(reason)],
        ),
        Case::filter(
            "an invalid value (even under NotIn) makes its whole term match nothing",
            requiring(vec![term(vec![requirement("zone", "NotIn", &["not a valid value"])])]),
            vec![zone("a"), bare()],
            vec![unresolvable(reason), unresolvable(reason)],
        ),
        Case::filter(
            "metadata.name in matchExpressions is an ordinary label key",
            requiring(vec![term(vec![requirement(NAME_FIELD, "In", &["bare"])])]),
            vec![bare(), with_labels(node("x"), &[(NAME_FIELD, "bare")])],
            vec![unresolvable(reason), pass()],
        ),
        Case::filter(
            "nodeSelector and required affinity must both hold",
            Pod {
                node_selector: labels(&[("cores", "8")]),
                ..requiring(vec![term(vec![requirement("zone", "In", &["b"])])])
            },
            vec![zone("a"), zone("b")],
            vec![unresolvable(reason), pass()],
        ),
        Case::filter(
            "matchFields In narrows the candidates to the named nodes",
            requiring(vec![fields_term("In", &["b"])]),
            vec![node("a"), node("b")],
            vec![unresolvable(reason), pass()],
        )
        .with_plan(FilterPlan::OnlyNodes(vec!["b".into()])),
        Case::filter(
            "matchFields NotIn is filtered node by node",
            requiring(vec![fields_term("NotIn", &["b"])]),
            vec![node("a"), node("b")],
            vec![pass(), unresolvable(reason)],
        )
        .with_plan(FilterPlan::Run),
        Case::filter(
            "two matchFields naming different nodes in one term conflict: rejected before filtering",
            requiring(vec![NodeSelectorTerm {
                match_expressions: Vec::new(),
                match_fields: vec![
                    requirement(NAME_FIELD, "In", &["a"]),
                    requirement(NAME_FIELD, "In", &["b"]),
                ],
            }]),
            vec![node("a"), node("b")],
            vec![],
        )
        .with_plan(FilterPlan::Reject(Failure::unresolvable(
            "pod affinity terms conflict",
        ))),
        Case::score(
            "matching preferred weights summed (40, 30, 10, 0) and scaled; an empty term counts for nothing",
            preferring.clone(),
            preference_nodes.clone(),
            vec![100, 75, 25, 0],
        )
        .with_plan(FilterPlan::Skip),
        Case::score(
            "no preferred terms: no opinion, no scores",
            pod("plain"),
            preference_nodes.clone(),
            vec![],
        ),
        Case::filter(
            "addedAffinity is checked before the pod's own affinity, with its own reason",
            requiring(vec![term(vec![requirement("zone", "In", &["b"])])]),
            vec![zone("a"), zone("b"), with_labels(node("small"), &[("zone", "b")])],
            vec![
                unresolvable(reason),
                pass(),
                unresolvable(REASON_ENFORCED),
            ],
        )
        .with_config(ADDED_CORES)
        .with_plan(FilterPlan::Run),
        Case::filter(
            "addedAffinity filters a pod without any affinity of its own",
            pod("plain"),
            vec![zone("a"), bare()],
            vec![pass(), unresolvable(REASON_ENFORCED)],
        )
        .with_config(ADDED_CORES)
        .with_plan(FilterPlan::Run),
        Case::score(
            "added preferred terms score a pod without preferences of its own",
            pod("plain"),
            vec![zone("a"), zone("b")],
            vec![100, 0],
        )
        .with_config(ADDED_ZONE_A_PREFERRED)
        .with_plan(FilterPlan::Skip),
        Case::score(
            "added preferred weights add to the pod's (60, 30, 30, 0) before scaling",
            preferring,
            preference_nodes,
            vec![100, 50, 50, 0],
        )
        .with_config(ADDED_ZONE_A_PREFERRED),
    ]
}

/// `addedAffinity` requiring 8 cores.
#[cfg(not(target_arch = "wasm32"))]
const ADDED_CORES: &str = r#"{"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
    {"nodeSelectorTerms": [{"matchExpressions": [{"key": "cores", "operator": "In", "values": ["8"]}]}]}}}"#;

/// `addedAffinity` preferring zone a with weight 20.
#[cfg(not(target_arch = "wasm32"))]
const ADDED_ZONE_A_PREFERRED: &str = r#"{"addedAffinity": {"preferredDuringSchedulingIgnoredDuringExecution":
    [{"weight": 20, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}]}}"#;

#[cfg(test)]
mod table_tests {
    #[test]
    fn answers_as_kube_scheduler() {
        wasched_sdk::testing::check::<super::NodeAffinity>(&super::cases());
    }

    #[test]
    fn added_affinity_is_validated_as_kube_scheduler_validates_it() {
        use wasched_sdk::Plugin;
        let refused = |config: &str| match super::NodeAffinity::new(config) {
            Ok(_) => panic!("accepted {config}"),
            Err(e) => e,
        };
        let required = |terms: &str| {
            format!(
                r#"{{"addedAffinity": {{"requiredDuringSchedulingIgnoredDuringExecution": {{"nodeSelectorTerms": {terms}}}}}}}"#
            )
        };
        let preferred = |weight: i32| {
            format!(
                r#"{{"addedAffinity": {{"preferredDuringSchedulingIgnoredDuringExecution": [{{"weight": {weight}, "preference": {{"matchExpressions": [{{"key": "a", "operator": "Exists"}}]}}}}]}}}}"#
            )
        };
        assert!(refused(&required("[]")).contains("must have at least one node selector term"));
        assert!(refused(&required(
            r#"[{"matchExpressions": [{"key": "a", "operator": "Near", "values": ["b"]}]}]"#
        ))
        .contains("nodeSelectorTerms[0]"));
        assert!(refused(&preferred(0)).contains("weight: Invalid value: 0"));
        assert!(refused(&preferred(101)).contains("must be in the range 1-100"));
        assert!(refused(r#"{"addedAffinities": {}}"#).contains("unknown field"));
        assert!(super::NodeAffinity::new(&preferred(100)).is_ok());
        assert!(super::NodeAffinity::new("{}").is_ok());
    }
}
