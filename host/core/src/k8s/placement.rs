//! The parts of a pod spec that place it relative to other pods: pod (anti-)affinity, host ports
//! and topology spread constraints, as the pod-aware plugins read them.

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use wasched_sdk as sdk;

use super::labels;

/// A Kubernetes label selector as the plugins read it.
pub fn selector(s: &meta::LabelSelector) -> sdk::LabelSelector {
    sdk::LabelSelector {
        match_labels: labels(&s.match_labels),
        match_expressions: s
            .match_expressions
            .iter()
            .flatten()
            .map(requirement_of)
            .collect(),
    }
}

fn requirement_of(r: &meta::LabelSelectorRequirement) -> sdk::LabelSelectorRequirement {
    sdk::LabelSelectorRequirement {
        key: r.key.clone(),
        operator: r.operator.clone(),
        values: r.values.clone().unwrap_or_default(),
    }
}

/// A term with `matchLabelKeys` / `mismatchLabelKeys` merged into its selector as kube-apiserver
/// does at pod creation (`key In (value)` / `key NotIn (value)` for each key the pod has; nothing
/// when the term has no selector). Pods read back from a cluster already carry the merge, and
/// merging twice only repeats a requirement.
fn affinity_term(term: &core::PodAffinityTerm, pod_labels: &sdk::Labels) -> sdk::PodAffinityTerm {
    let label_selector = term.label_selector.as_ref().map(|s| {
        let mut merged = selector(s);
        let keys = [
            (&term.match_label_keys, "In"),
            (&term.mismatch_label_keys, "NotIn"),
        ];
        for (keys, operator) in keys {
            for key in keys.iter().flatten() {
                if let Some(value) = pod_labels.get(key) {
                    merged
                        .match_expressions
                        .push(sdk::LabelSelectorRequirement {
                            key: key.clone(),
                            operator: operator.to_string(),
                            values: vec![value.to_string()],
                        });
                }
            }
        }
        merged
    });
    sdk::PodAffinityTerm {
        label_selector,
        namespaces: term.namespaces.clone().unwrap_or_default(),
        namespace_selector: term.namespace_selector.as_ref().map(selector),
        topology_key: term.topology_key.clone(),
    }
}

fn weighted_terms(
    terms: &Option<Vec<core::WeightedPodAffinityTerm>>,
    pod_labels: &sdk::Labels,
) -> Vec<sdk::WeightedPodAffinityTerm> {
    terms
        .iter()
        .flatten()
        .map(|w| sdk::WeightedPodAffinityTerm {
            weight: w.weight,
            term: affinity_term(&w.pod_affinity_term, pod_labels),
        })
        .collect()
}

fn required_terms(
    terms: &Option<Vec<core::PodAffinityTerm>>,
    pod_labels: &sdk::Labels,
) -> Vec<sdk::PodAffinityTerm> {
    terms
        .iter()
        .flatten()
        .map(|t| affinity_term(t, pod_labels))
        .collect()
}

/// `spec.affinity.podAffinity` and `podAntiAffinity`.
pub fn pod_affinity(spec: &core::PodSpec, pod_labels: &sdk::Labels) -> sdk::PodAffinity {
    let Some(affinity) = &spec.affinity else {
        return sdk::PodAffinity::default();
    };
    let mut result = sdk::PodAffinity::default();
    if let Some(a) = &affinity.pod_affinity {
        result.required_affinity = required_terms(
            &a.required_during_scheduling_ignored_during_execution,
            pod_labels,
        );
        result.preferred_affinity = weighted_terms(
            &a.preferred_during_scheduling_ignored_during_execution,
            pod_labels,
        );
    }
    if let Some(a) = &affinity.pod_anti_affinity {
        result.required_anti_affinity = required_terms(
            &a.required_during_scheduling_ignored_during_execution,
            pod_labels,
        );
        result.preferred_anti_affinity = weighted_terms(
            &a.preferred_during_scheduling_ignored_during_execution,
            pod_labels,
        );
    }
    result
}

/// The host ports of the pod's regular containers and restartable (sidecar) init containers, as
/// kube-scheduler (since 1.34) collects them: only ports with `hostPort` > 0, an empty host IP as
/// `0.0.0.0` and an empty protocol as `TCP`; sorted, each once.
pub fn host_ports(spec: &core::PodSpec) -> Vec<sdk::HostPort> {
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    let mut ports: Vec<sdk::HostPort> = spec
        .containers
        .iter()
        .chain(sidecars)
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let port = p.host_port.filter(|&port| port > 0)?;
            Some(sdk::HostPort {
                host_ip: p
                    .host_ip
                    .clone()
                    .filter(|ip| !ip.is_empty())
                    .unwrap_or_else(|| "0.0.0.0".to_string()),
                protocol: p
                    .protocol
                    .clone()
                    .filter(|p| !p.is_empty())
                    .unwrap_or_else(|| "TCP".to_string()),
                port,
            })
        })
        .collect();
    ports.sort();
    ports.dedup();
    ports
}

/// `spec.topologySpreadConstraints`.
pub fn topology_spread_constraints(spec: &core::PodSpec) -> Vec<sdk::TopologySpreadConstraint> {
    spec.topology_spread_constraints
        .iter()
        .flatten()
        .map(|c| sdk::TopologySpreadConstraint {
            max_skew: c.max_skew,
            topology_key: c.topology_key.clone(),
            when_unsatisfiable: c.when_unsatisfiable.clone(),
            label_selector: c.label_selector.as_ref().map(selector),
            min_domains: c.min_domains,
            node_affinity_policy: c.node_affinity_policy.clone().unwrap_or_default(),
            node_taints_policy: c.node_taints_policy.clone().unwrap_or_default(),
            match_label_keys: c.match_label_keys.clone().unwrap_or_default(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> core::PodSpec {
        yaml_serde::from_str(yaml).expect("pod spec")
    }

    #[test]
    fn match_label_keys_are_merged_into_affinity_selectors_only_for_keys_the_pod_has() {
        let spec = spec(
            r#"
containers: [{name: c}]
affinity:
  podAntiAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
    - topologyKey: kubernetes.io/hostname
      labelSelector: {matchLabels: {app: kafka}}
      matchLabelKeys: [pod-template-hash, missing]
      mismatchLabelKeys: [tenant]
    - topologyKey: zone
      matchLabelKeys: [pod-template-hash]
"#,
        );
        let labels = sdk::Labels::new([
            ("pod-template-hash".to_string(), "abc".to_string()),
            ("tenant".into(), "t1".into()),
        ]);
        let affinity = pod_affinity(&spec, &labels);
        let merged = affinity.required_anti_affinity[0]
            .label_selector
            .as_ref()
            .unwrap();
        let expressions: Vec<(&str, &str, &[String])> = merged
            .match_expressions
            .iter()
            .map(|r| (r.key.as_str(), r.operator.as_str(), r.values.as_slice()))
            .collect();
        assert_eq!(
            expressions,
            vec![
                ("pod-template-hash", "In", &["abc".to_string()][..]),
                ("tenant", "NotIn", &["t1".to_string()][..]),
            ]
        );
        assert_eq!(merged.match_labels.get("app"), Some("kafka"));
        assert!(
            affinity.required_anti_affinity[1].label_selector.is_none(),
            "a term without a selector stays without one"
        );
        assert!(affinity.required_affinity.is_empty());
    }

    #[test]
    fn host_ports_come_from_containers_and_sidecars_with_defaults_filled_in() {
        let spec = spec(
            r#"
containers:
- name: web
  ports:
  - {containerPort: 80, hostPort: 8080}
  - {containerPort: 53, hostPort: 53, protocol: UDP, hostIP: 10.0.0.1}
  - {containerPort: 9090}
initContainers:
- name: sidecar
  restartPolicy: Always
  ports: [{containerPort: 15000, hostPort: 15000}]
- name: setup
  ports: [{containerPort: 1, hostPort: 1}]
"#,
        );
        let ports: Vec<(String, String, i32)> = host_ports(&spec)
            .into_iter()
            .map(|p| (p.host_ip, p.protocol, p.port))
            .collect();
        assert_eq!(
            ports,
            vec![
                ("0.0.0.0".to_string(), "TCP".to_string(), 8080),
                ("0.0.0.0".into(), "TCP".into(), 15000),
                ("10.0.0.1".into(), "UDP".into(), 53),
            ]
        );
    }
}
