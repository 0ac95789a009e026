//! Synthetic clusters for benchmarks and tests: nodes spread over three zones with instance-type
//! and disk labels, some tainted (NoSchedule and PreferNoSchedule) and a few cordoned; pods mixing
//! cpu/memory requests, tolerations, node selectors, required and preferred node affinity, and
//! zonal PersistentVolumeClaims. The same seed gives the same cluster and the same pods.

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::storage::v1::StorageClass;
use serde::Serialize;
use wasched_sdk as sdk;
use wasched_sdk::{Labels, Resources};

use crate::util::Rng;

/// What the pods and nodes of a run exercise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// Requests only: no taints, affinity or volumes.
    Basic,
    /// Node selectors, required and preferred node affinity.
    NodeAffinity,
    /// NoSchedule/PreferNoSchedule taints (and cordoned nodes), pods with tolerations.
    Taints,
    /// Pods with zonal PersistentVolumes.
    VolumeZones,
    /// All of the above.
    Mixed,
    /// Mixed, with a placed pod deleted every 10 cycles and a node replaced every 100.
    Churn,
    /// Every scenario above.
    All,
}

impl Scenario {
    /// Every scenario but [`Scenario::All`].
    pub const EACH: [Scenario; 6] = [
        Scenario::Basic,
        Scenario::NodeAffinity,
        Scenario::Taints,
        Scenario::VolumeZones,
        Scenario::Mixed,
        Scenario::Churn,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::Basic => "basic",
            Scenario::NodeAffinity => "node-affinity",
            Scenario::Taints => "taints",
            Scenario::VolumeZones => "volume-zones",
            Scenario::Mixed => "mixed",
            Scenario::Churn => "churn",
            Scenario::All => "all",
        }
    }

    fn affinity(self) -> bool {
        matches!(
            self,
            Scenario::NodeAffinity | Scenario::Mixed | Scenario::Churn
        )
    }

    fn taints(self) -> bool {
        matches!(self, Scenario::Taints | Scenario::Mixed | Scenario::Churn)
    }

    fn volumes(self) -> bool {
        matches!(
            self,
            Scenario::VolumeZones | Scenario::Mixed | Scenario::Churn
        )
    }
}

impl std::str::FromStr for Scenario {
    type Err = String;

    fn from_str(text: &str) -> Result<Scenario, String> {
        Scenario::EACH
            .into_iter()
            .chain([Scenario::All])
            .find(|s| s.name() == text)
            .ok_or_else(|| {
                let names: Vec<&str> = Scenario::EACH.iter().map(|s| s.name()).collect();
                format!(
                    "unknown scenario `{text}` (one of {}, all)",
                    names.join(", ")
                )
            })
    }
}

const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];
const INSTANCE_TYPES: [&str; 4] = ["m5.2xlarge", "m5.4xlarge", "c5.4xlarge", "r5.4xlarge"];

/// A generated cluster: nodes and the pods to schedule.
pub struct Synthetic {
    pub nodes: Vec<sdk::NodeInfo>,
    pub pods: Vec<sdk::Pod>,
    pub volumes: Vec<core::PersistentVolume>,
    pub claims: Vec<core::PersistentVolumeClaim>,
    pub classes: Vec<StorageClass>,
}

impl Synthetic {
    /// Puts the storage objects and the nodes (not the pods) into a cache.
    pub fn load_into(&self, cache: &mut crate::cache::Cache) {
        for class in &self.classes {
            cache.upsert_class(class.clone());
        }
        for volume in &self.volumes {
            cache.upsert_volume(volume.clone());
        }
        for claim in &self.claims {
            cache.upsert_claim(claim.clone());
        }
        for node in &self.nodes {
            cache.upsert_node(node.clone());
        }
    }
}

fn resources(milli_cpu: i64, memory_gib: i64, pods: i64) -> Resources {
    Resources {
        milli_cpu,
        memory: memory_gib << 30,
        ephemeral_storage: 100 << 30,
        pods,
        scalar: Vec::new(),
    }
}

/// One synthetic node; without `taints_on` it has no taints and is never cordoned.
fn synthetic_node(rng: &mut Rng, i: usize, taints_on: bool) -> sdk::NodeInfo {
    let zone = ZONES[i % ZONES.len()];
    let instance = INSTANCE_TYPES[rng.below(INSTANCE_TYPES.len() as u64) as usize];
    let disk = if rng.chance(0.6) { "ssd" } else { "hdd" };
    let mut taints = Vec::new();
    if rng.chance(0.15) {
        taints.push(sdk::Taint {
            key: "dedicated".into(),
            value: "gpu".into(),
            effect: "NoSchedule".into(),
        });
    }
    if rng.chance(0.1) {
        taints.push(sdk::Taint {
            key: "spot".into(),
            value: "true".into(),
            effect: "PreferNoSchedule".into(),
        });
    }
    let big = rng.chance(0.5);
    if !taints_on {
        taints.clear();
    }
    let cordoned = rng.chance(0.02) && taints_on;
    sdk::NodeInfo {
        name: format!("node-{i:05}"),
        labels: [
            ("kubernetes.io/hostname", format!("node-{i:05}")),
            ("topology.kubernetes.io/zone", zone.to_string()),
            ("topology.kubernetes.io/region", "region-1".to_string()),
            ("node.kubernetes.io/instance-type", instance.to_string()),
            ("disktype", disk.to_string()),
        ]
        .into_iter()
        .collect(),
        annotations: Labels::default(),
        taints,
        unschedulable: cordoned,
        allocatable: if big {
            resources(64_000, 256, 110)
        } else {
            resources(32_000, 128, 110)
        },
        usage: sdk::NodeUsage::default(),
    }
}

/// Generates the cluster of `scenario`: `nodes` nodes and `pods` pods. The same seed gives the
/// same cluster.
pub fn cluster(scenario: Scenario, nodes: usize, pods: usize, seed: u64) -> Synthetic {
    let mut rng = Rng::new(seed);
    let nodes = (0..nodes)
        .map(|i| synthetic_node(&mut rng, i, scenario.taints()))
        .collect();

    let class: StorageClass = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "zonal"}, "provisioner": "example.com/disk", "volumeBindingMode": "Immediate"
    }))
    .expect("valid StorageClass");
    let mut volumes = Vec::new();
    let mut claims = Vec::new();
    let pods = (0..pods)
        .map(|i| {
            let cpu = 100 * (1 + rng.below(20) as i64);
            let memory = (128 << 20) * (1 + rng.below(32) as i64);
            let mut pod = sdk::Pod {
                namespace: "bench".into(),
                name: format!("pod-{i:06}"),
                scheduler_name: crate::DEFAULT_SCHEDULER_NAME.into(),
                requests: Resources {
                    milli_cpu: cpu,
                    memory,
                    ..Resources::default()
                },
                non_zero_requests: Resources {
                    milli_cpu: cpu,
                    memory,
                    ..Resources::default()
                },
                ..sdk::Pod::default()
            };
            if rng.chance(0.2) && scenario.taints() {
                pod.tolerations.push(sdk::Toleration {
                    key: "dedicated".into(),
                    operator: "Equal".into(),
                    value: "gpu".into(),
                    effect: "NoSchedule".into(),
                    toleration_seconds: None,
                });
            }
            if rng.chance(0.3) && scenario.affinity() {
                pod.node_selector = [("disktype", "ssd")].into_iter().collect();
            }
            let mut affinity = sdk::NodeAffinity::default();
            if rng.chance(0.2) {
                affinity.required = Some(vec![sdk::NodeSelectorTerm {
                    match_expressions: vec![sdk::NodeSelectorRequirement {
                        key: "topology.kubernetes.io/zone".into(),
                        operator: "In".into(),
                        values: vec!["zone-a".into(), "zone-b".into()],
                    }],
                    match_fields: Vec::new(),
                }]);
            }
            if rng.chance(0.3) {
                let instance = INSTANCE_TYPES[rng.below(INSTANCE_TYPES.len() as u64) as usize];
                affinity.preferred.push(sdk::PreferredSchedulingTerm {
                    weight: 50,
                    preference: sdk::NodeSelectorTerm {
                        match_expressions: vec![sdk::NodeSelectorRequirement {
                            key: "node.kubernetes.io/instance-type".into(),
                            operator: "In".into(),
                            values: vec![instance.into()],
                        }],
                        match_fields: Vec::new(),
                    },
                });
            }
            if scenario.affinity()
                && (affinity.required.is_some() || !affinity.preferred.is_empty())
            {
                pod.node_affinity = Some(affinity);
            }
            if rng.chance(0.1) && scenario.volumes() {
                let zone = ZONES[rng.below(ZONES.len() as u64) as usize];
                let (pv, pvc) = (format!("pv-{i}"), format!("data-{i}"));
                volumes.push(
                    serde_json::from_value(serde_json::json!({
                        "metadata": {"name": pv, "labels": {"topology.kubernetes.io/zone": zone}},
                        "spec": {"storageClassName": "zonal"}
                    }))
                    .expect("valid PersistentVolume"),
                );
                claims.push(
                    serde_json::from_value(serde_json::json!({
                        "metadata": {"name": pvc, "namespace": "bench"},
                        "spec": {"storageClassName": "zonal", "volumeName": pv}
                    }))
                    .expect("valid PersistentVolumeClaim"),
                );
                pod.volume_claims.push(sdk::VolumeClaim {
                    volume: "data".into(),
                    claim_name: pvc,
                    claim: None,
                });
            }
            pod
        })
        .collect();
    Synthetic {
        nodes,
        pods,
        volumes,
        claims,
        classes: vec![class],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenarios_read_back_from_their_names() {
        for scenario in Scenario::EACH.into_iter().chain([Scenario::All]) {
            assert_eq!(scenario.name().parse(), Ok(scenario));
        }
        let refused = "mixd".parse::<Scenario>().unwrap_err();
        assert!(
            refused.contains("`mixd`") && refused.contains("node-affinity"),
            "{refused}"
        );
    }

    #[test]
    fn the_same_seed_gives_the_same_cluster() {
        let names = |c: &Synthetic| -> Vec<String> {
            c.nodes
                .iter()
                .map(|n| n.name.clone())
                .chain(c.pods.iter().map(|p| format!("{:?}", p)))
                .collect()
        };
        let a = cluster(Scenario::Mixed, 50, 80, 3);
        assert_eq!(names(&a), names(&cluster(Scenario::Mixed, 50, 80, 3)));
        assert_ne!(names(&a), names(&cluster(Scenario::Mixed, 50, 80, 4)));
        assert_eq!((a.nodes.len(), a.pods.len()), (50, 80));
    }
}
