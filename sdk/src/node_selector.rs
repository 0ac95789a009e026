//! Node selector terms parsed once per pod, with Kubernetes' validation rules: a term with any
//! invalid requirement is an error (and, for required affinity, matches nothing). What the
//! NodeAffinity plugin filters with, and what PodTopologySpread's `nodeAffinityPolicy: Honor`
//! counts nodes by (Kubernetes' `component-helpers/scheduling/corev1/nodeaffinity`).

use crate::{LabelTest, Labels, NodeInfo, NodeSelectorRequirement, NodeSelectorTerm, Nodes, Pod};

/// The field key `matchFields` supports.
pub const NAME_FIELD: &str = "metadata.name";

/// A pod's `spec.nodeSelector` and required node affinity, parsed: what a node must match for the
/// pod to run there (Kubernetes' `RequiredNodeAffinity`).
#[derive(Debug, Default)]
pub struct RequiredNodeAffinity {
    node_selector: Labels,
    /// `None`: no required affinity. `Some`: the valid, non-empty terms (ORed).
    terms: Option<Vec<Term>>,
}

impl RequiredNodeAffinity {
    /// Parses `pod`'s selector and required terms. An empty or invalid term matches nothing, so it
    /// is left out of the ORed list (Kubernetes ignores the parse error for backward
    /// compatibility).
    pub fn of(pod: &Pod) -> Self {
        let required = pod.node_affinity.as_ref().and_then(|a| a.required.as_ref());
        RequiredNodeAffinity {
            node_selector: pod.node_selector.clone(),
            terms: required.map(|terms| {
                terms
                    .iter()
                    .filter(|t| !t.match_expressions.is_empty() || !t.match_fields.is_empty())
                    .filter_map(|t| parse_term(t).ok())
                    .collect()
            }),
        }
    }

    /// True when the pod has neither a node selector nor required node affinity.
    pub fn is_empty(&self) -> bool {
        self.node_selector.is_empty() && self.terms.is_none()
    }

    /// The node selector, as given.
    pub fn node_selector(&self) -> &Labels {
        &self.node_selector
    }

    /// The required terms: `None` when the pod has no required affinity.
    pub fn terms(&self) -> Option<&[Term]> {
        self.terms.as_deref()
    }

    /// Whether `node` matches the selector and one of the terms.
    pub fn matches(&self, node: &NodeInfo) -> bool {
        self.node_selector
            .iter()
            .all(|(key, value)| node.labels.get(key) == Some(value))
            && self
                .terms
                .as_ref()
                .is_none_or(|terms| terms.iter().any(|t| t.matches(node)))
    }
}

/// A [`RequiredNodeAffinity`] compiled against one cycle's mirror: checking a node is a few table
/// lookups, with no string compared.
#[derive(Debug)]
pub struct CompiledNodeAffinity {
    node_selector: Vec<LabelTest>,
    terms: Option<Vec<CompiledTerm>>,
}

impl RequiredNodeAffinity {
    /// The selector and terms as label tests on `nodes`' index (which the plugin must keep:
    /// [`crate::Plugin::INDEXES_LABELS`]).
    pub fn compile(&self, nodes: &Nodes) -> CompiledNodeAffinity {
        CompiledNodeAffinity {
            node_selector: self
                .node_selector
                .iter()
                .map(|(key, wanted)| nodes.label_test(key, |value| value == Some(wanted)))
                .collect(),
            terms: self
                .terms
                .as_ref()
                .map(|terms| terms.iter().map(|t| t.compile(nodes)).collect()),
        }
    }
}

impl CompiledNodeAffinity {
    /// What [`RequiredNodeAffinity::matches`] gives for node `id` of the mirror it was compiled
    /// against.
    #[inline]
    pub fn matches(&self, nodes: &Nodes, id: u32) -> bool {
        self.node_selector.iter().all(|test| nodes.passes(id, test))
            && self
                .terms
                .as_ref()
                .is_none_or(|terms| terms.iter().any(|t| t.matches(nodes, id)))
    }
}

/// A parsed node selector term.
#[derive(Debug)]
pub struct Term {
    expressions: Vec<Requirement>,
    fields: Vec<FieldRequirement>,
}

#[derive(Debug)]
struct Requirement {
    key: String,
    op: Operator,
}

#[derive(Debug)]
enum Operator {
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
    Gt(i64),
    Lt(i64),
}

#[derive(Debug, Clone)]
struct FieldRequirement {
    key: String,
    value: String,
    equal: bool,
}

impl Term {
    /// True when every requirement holds for `node`.
    pub fn matches(&self, node: &NodeInfo) -> bool {
        self.expressions
            .iter()
            .all(|r| r.holds(node.labels.get(&r.key)))
            && fields_match(&self.fields, node)
    }

    /// The term as label tests on `nodes`' index, for checking many nodes in one cycle.
    pub fn compile(&self, nodes: &Nodes) -> CompiledTerm {
        CompiledTerm {
            labels: self
                .expressions
                .iter()
                .map(|r| nodes.label_test(&r.key, |value| r.holds(value)))
                .collect(),
            fields: self.fields.clone(),
        }
    }
}

/// A [`Term`] compiled against one cycle's mirror.
#[derive(Debug)]
pub struct CompiledTerm {
    labels: Vec<LabelTest>,
    fields: Vec<FieldRequirement>,
}

impl CompiledTerm {
    /// What [`Term::matches`] gives for node `id` of the mirror the term was compiled against.
    #[inline]
    pub fn matches(&self, nodes: &Nodes, id: u32) -> bool {
        self.labels.iter().all(|test| nodes.passes(id, test))
            && (self.fields.is_empty()
                || nodes
                    .get(id)
                    .is_some_and(|node| fields_match(&self.fields, node)))
    }
}

fn fields_match(fields: &[FieldRequirement], node: &NodeInfo) -> bool {
    fields.iter().all(|f| {
        // Only `metadata.name` exists as a node field; any other key reads as empty.
        let actual = if f.key == NAME_FIELD {
            node.name.as_str()
        } else {
            ""
        };
        (actual == f.value) == f.equal
    })
}

impl Requirement {
    /// Whether a node whose label `key` has `value` (`None`: no such label) satisfies this.
    fn holds(&self, value: Option<&str>) -> bool {
        match &self.op {
            Operator::In(values) => value.is_some_and(|v| values.iter().any(|x| x == v)),
            Operator::NotIn(values) => !value.is_some_and(|v| values.iter().any(|x| x == v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::Gt(bound) => value
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v > *bound),
            Operator::Lt(bound) => value
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v < *bound),
        }
    }
}

/// Parses a term, as Kubernetes' `newNodeSelectorTerm` does.
///
/// # Errors
/// The first invalid requirement, described.
pub fn parse_term(term: &NodeSelectorTerm) -> Result<Term, String> {
    Ok(Term {
        expressions: term
            .match_expressions
            .iter()
            .map(parse_requirement)
            .collect::<Result<_, _>>()?,
        fields: term
            .match_fields
            .iter()
            .map(parse_field)
            .collect::<Result<_, _>>()?,
    })
}

fn parse_requirement(r: &NodeSelectorRequirement) -> Result<Requirement, String> {
    if !is_qualified_name(&r.key) {
        return Err(format!("invalid label key {:?}", r.key));
    }
    let values = &r.values;
    let op = match r.operator.as_str() {
        "In" | "NotIn" if values.is_empty() => {
            return Err(format!("{}: values set can't be empty", r.operator))
        }
        "In" => Operator::In(values.clone()),
        "NotIn" => Operator::NotIn(values.clone()),
        "Exists" | "DoesNotExist" if !values.is_empty() => {
            return Err(format!("{}: values set must be empty", r.operator))
        }
        "Exists" => Operator::Exists,
        "DoesNotExist" => Operator::DoesNotExist,
        "Gt" | "Lt" => {
            let [value] = values.as_slice() else {
                return Err(format!("{}: exactly one value is required", r.operator));
            };
            let bound = value
                .parse::<i64>()
                .map_err(|_| format!("{}: {value:?} is not an integer", r.operator))?;
            if r.operator == "Gt" {
                Operator::Gt(bound)
            } else {
                Operator::Lt(bound)
            }
        }
        other => return Err(format!("unsupported operator {other:?}")),
    };
    if let Some(bad) = values.iter().find(|v| !is_label_value(v)) {
        return Err(format!("invalid label value {bad:?}"));
    }
    Ok(Requirement {
        key: r.key.clone(),
        op,
    })
}

fn parse_field(r: &NodeSelectorRequirement) -> Result<FieldRequirement, String> {
    let [value] = r.values.as_slice() else {
        return Err("matchFields: values must have one element".to_string());
    };
    let equal = match r.operator.as_str() {
        "In" => true,
        "NotIn" => false,
        other => return Err(format!("matchFields: unsupported operator {other:?}")),
    };
    Ok(FieldRequirement {
        key: r.key.clone(),
        value: value.clone(),
        equal,
    })
}

/// A label name or value part: alphanumeric at both ends, `-`, `_`, `.` inside.
fn is_name_part(s: &str) -> bool {
    let bytes = s.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// Kubernetes' `IsValidLabelValue`: empty, or at most 63 characters of a name part.
pub fn is_label_value(value: &str) -> bool {
    value.is_empty() || (value.len() <= 63 && is_name_part(value))
}

/// Kubernetes' `IsQualifiedName`: an optional DNS subdomain prefix and `/`, then a name of at most
/// 63 characters.
pub fn is_qualified_name(key: &str) -> bool {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|label| {
                let b = label.as_bytes();
                !b.is_empty()
                    && b.len() <= 63
                    && b[0].is_ascii_lowercase() | b[0].is_ascii_digit()
                    && b[b.len() - 1].is_ascii_lowercase() | b[b.len() - 1].is_ascii_digit()
                    && b.iter()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            })
    });
    prefix_ok && name.len() <= 63 && is_name_part(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_keys_and_values_are_validated_like_kubernetes() {
        for key in [
            "zone",
            "topology.kubernetes.io/zone",
            "a_b.c-d",
            "x/y",
            "metadata.name",
        ] {
            assert!(is_qualified_name(key), "{key} should be valid");
        }
        for key in [
            "",
            "-a",
            "a-",
            "/a",
            "a/",
            "UPPER.example/x",
            "a/b/c",
            &"k".repeat(64),
        ] {
            assert!(!is_qualified_name(key), "{key} should be invalid");
        }
        for value in ["", "a", "A-b_c.d", &"v".repeat(63)] {
            assert!(is_label_value(value), "{value} should be valid");
        }
        for value in ["-a", "a b", "a/b", &"v".repeat(64)] {
            assert!(!is_label_value(value), "{value} should be invalid");
        }
    }

    #[test]
    fn compiled_affinity_answers_as_the_parsed_one() {
        use crate::testing::{labels, requirement, term};
        use crate::NodeAffinity;
        let label_sets: [&[(&str, &str)]; 5] = [
            &[("zone", "a"), ("disk", "ssd")],
            &[("zone", "b"), ("disk", "ssd")],
            &[("zone", "b")],
            &[("disk", "")],
            &[],
        ];
        let mut nodes = Nodes::new(true);
        for (id, pairs) in label_sets.iter().enumerate() {
            nodes.upsert(
                id as u32,
                NodeInfo {
                    name: format!("n{id}"),
                    labels: labels(pairs),
                    ..NodeInfo::default()
                },
            );
        }
        let pods = [
            (labels(&[("disk", "ssd")]), None),
            (labels(&[("disk", "")]), None),
            (labels(&[("rack", "r1")]), None),
            (
                labels(&[]),
                Some(vec![
                    term(vec![requirement("zone", "In", &["b"])]),
                    term(vec![requirement("disk", "DoesNotExist", &[])]),
                ]),
            ),
            (
                labels(&[("disk", "ssd")]),
                Some(vec![term(vec![requirement("zone", "NotIn", &["a"])])]),
            ),
            (labels(&[]), Some(vec![term(vec![])])),
        ];
        for (k, (node_selector, required)) in pods.into_iter().enumerate() {
            let pod = Pod {
                node_selector,
                node_affinity: Some(NodeAffinity {
                    required,
                    preferred: Vec::new(),
                }),
                ..Pod::default()
            };
            let parsed = RequiredNodeAffinity::of(&pod);
            let compiled = parsed.compile(&nodes);
            let expected: Vec<bool> = (0..5)
                .map(|id| parsed.matches(nodes.get(id).unwrap()))
                .collect();
            let got: Vec<bool> = (0..5).map(|id| compiled.matches(&nodes, id)).collect();
            assert_eq!(got, expected, "pod {k}");
            assert!(
                expected.contains(&true) || k >= 2,
                "pod {k} matches some node"
            );
        }
    }
}
