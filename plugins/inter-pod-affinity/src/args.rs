//! InterPodAffinity's configuration, in the shape of kube-scheduler's `InterPodAffinityArgs`:
//!
//! ```toml
//! [plugins.InterPodAffinity.config]
//! hardPodAffinityWeight = 1
//! ignorePreferredTermsOfExistingPods = false
//! ```

use serde::Deserialize;

/// The parsed configuration.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Args {
    /// The score a placed pod's required affinity term gives the domains of pods it matches;
    /// 0 turns that off.
    #[serde(default = "default_hard_weight")]
    pub hard_pod_affinity_weight: i64,
    /// When the pod has no preferred terms, do not score by placed pods' terms either.
    #[serde(default)]
    pub ignore_preferred_terms_of_existing_pods: bool,
}

fn default_hard_weight() -> i64 {
    1
}

impl Args {
    /// Parses and validates the JSON configuration (`{}` gives kube-scheduler's defaults).
    ///
    /// # Errors
    /// What is wrong, in kube-scheduler's words where it has them.
    pub fn parse(config: &str) -> Result<Args, String> {
        let args: Args = serde_json::from_str(config).map_err(|e| format!("{e}"))?;
        if !(0..=100).contains(&args.hard_pod_affinity_weight) {
            return Err(format!(
                "hardPodAffinityWeight: Invalid value: {}: not in valid range [0-100]",
                args.hard_pod_affinity_weight
            ));
        }
        Ok(args)
    }
}
