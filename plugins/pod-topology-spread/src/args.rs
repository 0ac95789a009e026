//! PodTopologySpread's configuration, in the shape of kube-scheduler's `PodTopologySpreadArgs`:
//!
//! ```toml
//! [plugins.PodTopologySpread.config]
//! defaultingType = "List"
//! defaultConstraints = [
//!   { maxSkew = 1, topologyKey = "topology.kubernetes.io/zone", whenUnsatisfiable = "ScheduleAnyway" },
//! ]
//! ```
//!
//! `defaultingType = "System"` (the default) spreads pods that have no constraints of their own
//! by kube-scheduler's built-in constraints; `"List"` by `defaultConstraints` (none turns cluster
//! defaults off).

use std::collections::HashSet;

use serde::Deserialize;
use wasched_sdk::node_selector::is_qualified_name;
use wasched_sdk::TopologySpreadConstraint;

/// `DoNotSchedule`: the filter's constraints.
pub const DO_NOT_SCHEDULE: &str = "DoNotSchedule";
/// `ScheduleAnyway`: the score's constraints.
pub const SCHEDULE_ANYWAY: &str = "ScheduleAnyway";
/// The label of a node's own domain.
pub const HOSTNAME: &str = "kubernetes.io/hostname";
/// The zone label.
pub const ZONE: &str = "topology.kubernetes.io/zone";

/// Where the constraints of a pod without its own come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub enum Defaulting {
    /// kube-scheduler's built-in constraints ([`system_defaults`]).
    #[default]
    System,
    /// The configuration's `defaultConstraints`.
    List,
}

/// One of `defaultConstraints`, as kube-scheduler accepts them (no label selector: it is deduced
/// per pod).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DefaultConstraint {
    /// `maxSkew`.
    pub max_skew: i32,
    /// `topologyKey`.
    pub topology_key: String,
    /// `whenUnsatisfiable`: `DoNotSchedule` or `ScheduleAnyway`.
    pub when_unsatisfiable: String,
    /// `labelSelector`: refused when set, as kube-scheduler refuses it in default constraints.
    #[serde(default)]
    pub label_selector: Option<serde_json::Value>,
    /// `minDomains`.
    #[serde(default)]
    pub min_domains: Option<i32>,
    /// `nodeAffinityPolicy`: `Honor` or `Ignore`.
    #[serde(default)]
    pub node_affinity_policy: Option<String>,
    /// `nodeTaintsPolicy`: `Honor` or `Ignore`.
    #[serde(default)]
    pub node_taints_policy: Option<String>,
    /// `matchLabelKeys`.
    #[serde(default)]
    pub match_label_keys: Vec<String>,
}

impl DefaultConstraint {
    fn constraint(&self) -> TopologySpreadConstraint {
        TopologySpreadConstraint {
            max_skew: self.max_skew,
            topology_key: self.topology_key.clone(),
            when_unsatisfiable: self.when_unsatisfiable.clone(),
            label_selector: None,
            min_domains: self.min_domains,
            node_affinity_policy: self.node_affinity_policy.clone().unwrap_or_default(),
            node_taints_policy: self.node_taints_policy.clone().unwrap_or_default(),
            match_label_keys: self.match_label_keys.clone(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawArgs {
    #[serde(default)]
    default_constraints: Vec<DefaultConstraint>,
    #[serde(default)]
    defaulting_type: Defaulting,
}

/// The parsed configuration.
#[derive(Debug, Clone)]
pub struct Args {
    /// How pods without constraints of their own are spread.
    pub defaulting: Defaulting,
    /// The constraints such pods get (the built-in ones under [`Defaulting::System`]).
    pub default_constraints: Vec<TopologySpreadConstraint>,
}

/// kube-scheduler's built-in default constraints: by node (max skew 3) and by zone (max skew 5),
/// both only scoring.
pub fn system_defaults() -> Vec<TopologySpreadConstraint> {
    [(HOSTNAME, 3), (ZONE, 5)]
        .into_iter()
        .map(|(key, max_skew)| TopologySpreadConstraint {
            max_skew,
            topology_key: key.into(),
            when_unsatisfiable: SCHEDULE_ANYWAY.into(),
            ..TopologySpreadConstraint::default()
        })
        .collect()
}

impl Args {
    /// Parses and validates the JSON configuration (`{}` gives kube-scheduler's defaults).
    ///
    /// # Errors
    /// Every problem, in kube-scheduler's words (`ValidatePodTopologySpreadArgs`), joined by `; `.
    pub fn parse(config: &str) -> Result<Args, String> {
        let raw: RawArgs = serde_json::from_str(config).map_err(|e| format!("{e}"))?;
        let mut errors = Vec::new();
        if raw.defaulting_type == Defaulting::System && !raw.default_constraints.is_empty() {
            errors.push(
                "defaultingType: Invalid value: \"System\": when .defaultConstraints are not empty"
                    .to_string(),
            );
        }
        let mut seen = HashSet::new();
        for (i, c) in raw.default_constraints.iter().enumerate() {
            let at = format!("defaultConstraints[{i}]");
            if c.max_skew <= 0 {
                errors.push(format!(
                    "{at}.maxSkew: Invalid value: {}: not in valid range",
                    c.max_skew
                ));
            }
            if c.topology_key.is_empty() {
                errors.push(format!(
                    "{at}.topologyKey: Required value: can not be empty"
                ));
            } else if !is_qualified_name(&c.topology_key) {
                errors.push(format!(
                    "{at}.topologyKey: Invalid value: {:?}: not a qualified name",
                    c.topology_key
                ));
            }
            if c.when_unsatisfiable != DO_NOT_SCHEDULE && c.when_unsatisfiable != SCHEDULE_ANYWAY {
                errors.push(format!(
                    "{at}.whenUnsatisfiable: Unsupported value: {:?}: supported values: \"DoNotSchedule\", \"ScheduleAnyway\"",
                    c.when_unsatisfiable
                ));
            }
            if c.label_selector.is_some() {
                errors.push(format!(
                    "{at}.labelSelector: Forbidden: constraint must not define a selector, as they deduced for each pod"
                ));
            }
            if !seen.insert((c.topology_key.clone(), c.when_unsatisfiable.clone())) {
                errors.push(format!(
                    "{at}: Duplicate value: {{{:?}, {:?}}}",
                    c.topology_key, c.when_unsatisfiable
                ));
            }
        }
        if !errors.is_empty() {
            return Err(errors.join("; "));
        }
        let default_constraints = match raw.defaulting_type {
            Defaulting::System => system_defaults(),
            Defaulting::List => raw
                .default_constraints
                .iter()
                .map(DefaultConstraint::constraint)
                .collect(),
        };
        Ok(Args {
            defaulting: raw.defaulting_type,
            default_constraints,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_kube_schedulers_system_constraints() {
        let args = Args::parse("{}").expect("valid");
        assert_eq!(args.defaulting, Defaulting::System);
        let keys: Vec<(&str, i32)> = args
            .default_constraints
            .iter()
            .map(|c| (c.topology_key.as_str(), c.max_skew))
            .collect();
        assert_eq!(keys, [(HOSTNAME, 3), (ZONE, 5)]);
    }

    #[test]
    fn a_list_replaces_the_system_constraints_and_an_empty_list_turns_them_off() {
        let args = Args::parse(
            r#"{"defaultingType": "List", "defaultConstraints": [
                {"maxSkew": 1, "topologyKey": "rack", "whenUnsatisfiable": "DoNotSchedule"}]}"#,
        )
        .expect("valid");
        assert_eq!(args.default_constraints.len(), 1);
        assert_eq!(args.default_constraints[0].topology_key, "rack");
        let off = Args::parse(r#"{"defaultingType": "List"}"#).expect("valid");
        assert!(off.default_constraints.is_empty());
    }

    #[test]
    fn invalid_arguments_are_refused_with_kube_schedulers_reasons() {
        let refused = |config: &str| Args::parse(config).expect_err(config);
        assert_eq!(
            refused(
                r#"{"defaultConstraints": [{"maxSkew": 1, "topologyKey": "rack", "whenUnsatisfiable": "DoNotSchedule"}]}"#
            ),
            "defaultingType: Invalid value: \"System\": when .defaultConstraints are not empty"
        );
        let many = refused(
            r#"{"defaultingType": "List", "defaultConstraints": [
                {"maxSkew": 0, "topologyKey": "", "whenUnsatisfiable": "Sometimes"},
                {"maxSkew": 1, "topologyKey": "rack", "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {}},
                {"maxSkew": 2, "topologyKey": "rack", "whenUnsatisfiable": "ScheduleAnyway"}]}"#,
        );
        for part in [
            "defaultConstraints[0].maxSkew: Invalid value: 0: not in valid range",
            "defaultConstraints[0].topologyKey: Required value",
            "defaultConstraints[0].whenUnsatisfiable: Unsupported value: \"Sometimes\"",
            "defaultConstraints[1].labelSelector: Forbidden",
            "defaultConstraints[2]: Duplicate value",
        ] {
            assert!(many.contains(part), "{part} missing from {many}");
        }
        assert!(refused(r#"{"defaultingType": "Sometimes"}"#).contains("unknown variant"));
        assert!(refused(r#"{"hardPodAffinityWeight": 1}"#).contains("unknown field"));
    }
}
