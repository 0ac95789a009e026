//! NodeAffinityArgs: `addedAffinity`, node affinity the scheduler enforces on every pod of the
//! profile beside the pod's own (kube-scheduler's `NodeAffinityArgs`).

use serde::Deserialize;
use wasched_sdk::node_selector::{parse_term, Term};
use wasched_sdk::{NodeSelectorRequirement, NodeSelectorTerm};

/// The plugin's configuration, parsed and checked as kube-scheduler's
/// `ValidateNodeAffinityArgs` checks it.
#[derive(Default)]
pub struct Args {
    /// `addedAffinity.requiredDuringSchedulingIgnoredDuringExecution`: its terms, ORed (empty
    /// terms left out, as `nodeaffinity.NewNodeSelector` leaves them out). `None` when not set.
    pub required: Option<Vec<Term>>,
    /// `addedAffinity.preferredDuringSchedulingIgnoredDuringExecution`, weight 0 and empty
    /// terms left out.
    pub preferred: Vec<(i64, Term)>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawArgs {
    added_affinity: Option<RawAffinity>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawAffinity {
    required_during_scheduling_ignored_during_execution: Option<RawSelector>,
    #[serde(default)]
    preferred_during_scheduling_ignored_during_execution: Vec<RawPreferred>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawSelector {
    #[serde(default)]
    node_selector_terms: Vec<RawTerm>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawPreferred {
    weight: i32,
    preference: RawTerm,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawTerm {
    #[serde(default)]
    match_expressions: Vec<RawRequirement>,
    #[serde(default)]
    match_fields: Vec<RawRequirement>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRequirement {
    key: String,
    operator: String,
    #[serde(default)]
    values: Vec<String>,
}

impl RawTerm {
    fn sdk(self) -> NodeSelectorTerm {
        let requirement = |r: RawRequirement| NodeSelectorRequirement {
            key: r.key,
            operator: r.operator,
            values: r.values,
        };
        NodeSelectorTerm {
            match_expressions: self
                .match_expressions
                .into_iter()
                .map(requirement)
                .collect(),
            match_fields: self.match_fields.into_iter().map(requirement).collect(),
        }
    }
}

fn is_empty(term: &NodeSelectorTerm) -> bool {
    term.match_expressions.is_empty() && term.match_fields.is_empty()
}

impl Args {
    /// Parses the plugin's JSON configuration (`{}` for none).
    ///
    /// # Errors
    /// A field that is not NodeAffinityArgs', a required selector without terms, a preferred
    /// weight outside 1..=100 or an invalid requirement, named by its path.
    pub fn parse(config: &str) -> Result<Args, String> {
        let raw: RawArgs = serde_json::from_str(config).map_err(|e| e.to_string())?;
        let Some(added) = raw.added_affinity else {
            return Ok(Args::default());
        };
        let at = "addedAffinity";
        let required = match added.required_during_scheduling_ignored_during_execution {
            None => None,
            Some(selector) => Some(required_terms(selector, at)?),
        };
        let mut preferred = Vec::new();
        let terms = added.preferred_during_scheduling_ignored_during_execution;
        for (i, term) in terms.into_iter().enumerate() {
            let path = format!("{at}.preferredDuringSchedulingIgnoredDuringExecution[{i}]");
            if !(1..=100).contains(&term.weight) {
                return Err(format!(
                    "{path}.weight: Invalid value: {}: must be in the range 1-100",
                    term.weight
                ));
            }
            let preference = term.preference.sdk();
            if is_empty(&preference) {
                continue;
            }
            let parsed = parse_term(&preference).map_err(|e| format!("{path}.preference: {e}"))?;
            preferred.push((i64::from(term.weight), parsed));
        }
        Ok(Args {
            required,
            preferred,
        })
    }
}

fn required_terms(selector: RawSelector, at: &str) -> Result<Vec<Term>, String> {
    let path = format!("{at}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms");
    if selector.node_selector_terms.is_empty() {
        return Err(format!(
            "{path}: Required value: must have at least one node selector term"
        ));
    }
    let mut terms = Vec::new();
    for (i, term) in selector.node_selector_terms.into_iter().enumerate() {
        let term = term.sdk();
        if is_empty(&term) {
            continue;
        }
        terms.push(parse_term(&term).map_err(|e| format!("{path}[{i}]: {e}"))?);
    }
    Ok(terms)
}
