//! VolumeZone: a pod whose bound PersistentVolumes carry zone/region labels can only run on nodes in
//! those zones/regions.

#![warn(missing_docs)]

use wasched_sdk::{
    Failure, FilterPlan, FilterPlugin, FilterResults, LabelTest, NodeInfo, Nodes, Plugin, Pod,
    PodParts, PodPlan, Verdict, VolumeInfo,
};

/// The name used in configs and messages.
pub const NAME: &str = "VolumeZone";
/// kube-scheduler's reason for a node outside the volumes' zones.
pub const REASON: &str = "node(s) had no available volume zone";

const BETA_ZONE: &str = "failure-domain.beta.kubernetes.io/zone";
const BETA_REGION: &str = "failure-domain.beta.kubernetes.io/region";
const ZONE: &str = "topology.kubernetes.io/zone";
const REGION: &str = "topology.kubernetes.io/region";
/// The labels checked, in kube-scheduler's order.
const TOPOLOGY_LABELS: [&str; 4] = [BETA_ZONE, BETA_REGION, ZONE, REGION];

/// A zone/region constraint from one volume: the node's `key` label must be one of `values`.
#[derive(Debug)]
struct Constraint {
    key: &'static str,
    values: Vec<String>,
}

/// The plugin; holds the current pod's volume constraints.
#[derive(Default)]
pub struct VolumeZone {
    constraints: Vec<Constraint>,
    /// The constraints as label tests, with the mirror generation they were made at.
    compiled: Option<(u64, Compiled)>,
}

/// The filter as label tests: one table lookup per node and label.
struct Compiled {
    /// Per topology label: the node has it.
    has_topology_label: Vec<LabelTest>,
    /// Per constraint: the node has the constraint's label, it is one of the values, and (for a
    /// beta label) the GA label is one of the values.
    constraints: Vec<[LabelTest; 3]>,
}

impl Compiled {
    fn new(constraints: &[Constraint], nodes: &Nodes) -> Self {
        let in_values =
            |values: &[String], v: Option<&str>| v.is_some_and(|v| values.iter().any(|z| z == v));
        Compiled {
            has_topology_label: TOPOLOGY_LABELS
                .iter()
                .map(|key| nodes.label_test(key, |v| v.is_some()))
                .collect(),
            constraints: constraints
                .iter()
                .map(|c| {
                    let ga = ga_label(c.key);
                    [
                        nodes.label_test(c.key, |v| v.is_some()),
                        nodes.label_test(c.key, |v| in_values(&c.values, v)),
                        match ga {
                            Some(ga) => nodes.label_test(ga, |v| in_values(&c.values, v)),
                            None => nodes.label_test(c.key, |v| in_values(&c.values, v)),
                        },
                    ]
                })
                .collect(),
        }
    }

    fn fits(&self, nodes: &Nodes, id: u32) -> bool {
        if !self.has_topology_label.iter().any(|t| nodes.passes(id, t)) {
            return true;
        }
        self.constraints
            .iter()
            .all(|[has_key, key_fits, fallback_fits]| {
                if nodes.passes(id, has_key) {
                    nodes.passes(id, key_fits)
                } else {
                    nodes.passes(id, fallback_fits)
                }
            })
    }
}

/// Looks up every claim of the pod, as kube-scheduler's PreFilter does.
fn constraints_of(pod: &Pod) -> Result<Vec<Constraint>, Failure> {
    let mut constraints = Vec::new();
    // kube-scheduler's VolumeZone looks at `persistentVolumeClaim` volumes only.
    for claim_ref in pod.volume_claims.iter().filter(|c| !c.ephemeral) {
        if claim_ref.claim_name.is_empty() {
            return Err(Failure::unresolvable("PersistentVolumeClaim had no name"));
        }
        let Some(claim) = &claim_ref.claim else {
            return Err(Failure::unresolvable(format!(
                "persistentvolumeclaim \"{}\" not found",
                claim_ref.claim_name
            )));
        };
        if claim.volume_name.is_empty() {
            if claim.storage_class_name.is_empty() {
                return Err(Failure::unresolvable(
                    "PersistentVolumeClaim had no pv name and storageClass name",
                ));
            }
            let Some(class) = &claim.storage_class else {
                return Err(Failure::unresolvable(format!(
                    "storageclass.storage.k8s.io \"{}\" not found",
                    claim.storage_class_name
                )));
            };
            match class.volume_binding_mode.as_deref() {
                None => {
                    return Err(Failure::unresolvable(format!(
                        "VolumeBindingMode not set for StorageClass \"{}\"",
                        claim.storage_class_name
                    )))
                }
                // The volume will be provisioned where the pod lands.
                Some("WaitForFirstConsumer") => continue,
                Some(_) => return Err(Failure::unresolvable("PersistentVolume had no name")),
            }
        }
        let Some(volume) = &claim.volume else {
            return Err(Failure::unresolvable(format!(
                "persistentvolume \"{}\" not found",
                claim.volume_name
            )));
        };
        constraints.extend(volume_constraints(volume));
    }
    Ok(constraints)
}

fn volume_constraints(volume: &VolumeInfo) -> impl Iterator<Item = Constraint> + '_ {
    TOPOLOGY_LABELS.into_iter().filter_map(|key| {
        let value = volume.labels.get(key)?;
        // A label listing several zones separates them with "__"; an unparsable one is ignored.
        let values: Vec<String> = value.split("__").map(|z| z.trim().to_string()).collect();
        if values.iter().any(String::is_empty) {
            return None;
        }
        Some(Constraint { key, values })
    })
}

/// The GA label a beta label falls back to on the node (the fallback is one way only).
fn ga_label(key: &str) -> Option<&'static str> {
    match key {
        BETA_ZONE => Some(ZONE),
        BETA_REGION => Some(REGION),
        _ => None,
    }
}

impl Plugin for VolumeZone {
    const NAME: &'static str = NAME;
    const READS_POD: PodParts = PodParts::VOLUME_CLAIMS;
    const INDEXES_LABELS: bool = true;

    fn new(_config: &str) -> Result<Self, String> {
        Ok(Self::default())
    }

    fn prepare(&mut self, pod: &Pod, _nodes: &Nodes) -> PodPlan {
        self.compiled = None;
        let filter = match constraints_of(pod) {
            Err(failure) => FilterPlan::Reject(failure),
            Ok(constraints) if constraints.is_empty() => FilterPlan::Skip,
            Ok(constraints) => {
                self.constraints = constraints;
                FilterPlan::Run
            }
        };
        PodPlan {
            filter,
            score: false,
        }
    }
}

impl FilterPlugin for VolumeZone {
    fn filter(&self, _pod: &Pod, node: &NodeInfo) -> Verdict {
        let constrained = TOPOLOGY_LABELS.iter().any(|l| node.labels.contains_key(l));
        if !constrained {
            return Ok(());
        }
        for constraint in &self.constraints {
            let value = node
                .labels
                .get(constraint.key)
                .or_else(|| ga_label(constraint.key).and_then(|ga| node.labels.get(ga)));
            if !value.is_some_and(|v| constraint.values.iter().any(|z| z == v)) {
                return Err(Failure::unresolvable(REASON));
            }
        }
        Ok(())
    }

    fn filter_batch(&mut self, _pod: &Pod, nodes: &Nodes, ids: &[u32], out: &mut FilterResults) {
        if !matches!(&self.compiled, Some((generation, _)) if *generation == nodes.generation()) {
            let compiled = Compiled::new(&self.constraints, nodes);
            self.compiled = Some((nodes.generation(), compiled));
        }
        let compiled = &self.compiled.as_ref().expect("just compiled").1;
        out.push_each(
            nodes,
            ids,
            |id| compiled.fits(nodes, id),
            || Failure::unresolvable(REASON),
        );
    }
}

wasched_sdk::export_plugin!(VolumeZone: filter);

/// kube-scheduler's behaviour as a table: run natively by this crate's tests and through the
/// WebAssembly build by the host's (`tests/e2e/plugins.rs`), which insists both builds agree.
#[cfg(not(target_arch = "wasm32"))]
pub fn cases() -> Vec<wasched_sdk::testing::Case> {
    use wasched_sdk::testing::{labels, node, pass, pod, unresolvable, with_labels, Case};
    use wasched_sdk::{ClaimInfo, StorageClassInfo, VolumeClaim, VolumeInfo};

    const ZONE: &str = "topology.kubernetes.io/zone";
    const REGION: &str = "topology.kubernetes.io/region";
    const BETA_ZONE: &str = "failure-domain.beta.kubernetes.io/zone";
    let reason = "node(s) had no available volume zone";
    let in_zone = |label: &str, z: &str| with_labels(node(&format!("{label}-{z}")), &[(label, z)]);
    let ga_zone = |z: &str| in_zone(ZONE, z);
    let beta_zone = |z: &str| in_zone(BETA_ZONE, z);
    let claiming = |info: Option<ClaimInfo>| Pod {
        volume_claims: vec![VolumeClaim {
            volume: "data".into(),
            claim_name: "c".into(),
            ephemeral: false,
            claim: info,
        }],
        ..pod("p")
    };
    let bound = |pv_labels: &[(&str, &str)]| {
        claiming(Some(ClaimInfo {
            volume_name: "pv-1".into(),
            storage_class_name: "standard".into(),
            storage_class: None,
            volume: Some(VolumeInfo {
                name: "pv-1".into(),
                labels: labels(pv_labels),
                ..VolumeInfo::default()
            }),
            ..ClaimInfo::default()
        }))
    };
    let unbound = |mode: &str| {
        claiming(Some(ClaimInfo {
            volume_name: String::new(),
            storage_class_name: "fast".into(),
            storage_class: Some(StorageClassInfo {
                name: "fast".into(),
                volume_binding_mode: Some(mode.into()),
                ..StorageClassInfo::default()
            }),
            volume: None,
            ..ClaimInfo::default()
        }))
    };
    let rejected = |name, pod, why: &'static str| {
        Case::filter(name, pod, vec![node("n")], vec![])
            .with_plan(FilterPlan::Reject(Failure::unresolvable(why)))
    };
    vec![
        Case::filter(
            "a GA zone label on the volume; unlabelled nodes pass",
            bound(&[(ZONE, "a")]),
            vec![ga_zone("a"), ga_zone("b"), node("unlabelled")],
            vec![pass(), unresolvable(reason), pass()],
        ),
        Case::filter(
            "several zones separated by __",
            bound(&[(ZONE, "a__b")]),
            vec![ga_zone("a"), ga_zone("b"), ga_zone("c")],
            vec![pass(), pass(), unresolvable(reason)],
        ),
        Case::filter(
            "a beta label on the volume is satisfied by the node's GA label",
            bound(&[(BETA_ZONE, "a")]),
            vec![ga_zone("a"), beta_zone("a"), ga_zone("b")],
            vec![pass(), pass(), unresolvable(reason)],
        ),
        Case::filter(
            "a GA label on the volume is not satisfied by a beta-only node",
            bound(&[(ZONE, "a")]),
            vec![beta_zone("a")],
            vec![unresolvable(reason)],
        ),
        Case::filter(
            "every label of the volume must hold (zone and region)",
            bound(&[(ZONE, "a"), (REGION, "r1")]),
            vec![
                with_labels(node("ok"), &[(ZONE, "a"), (REGION, "r1")]),
                with_labels(node("bad"), &[(ZONE, "a"), (REGION, "r2")]),
            ],
            vec![pass(), unresolvable(reason)],
        ),
        rejected(
            "a claim that does not exist",
            Pod {
                volume_claims: vec![VolumeClaim {
                    volume: "data".into(),
                    claim_name: "data".into(),
                    ephemeral: false,
                    claim: None,
                }],
                ..pod("p")
            },
            "persistentvolumeclaim \"data\" not found",
        ),
        rejected(
            "an unbound claim of an Immediate class",
            unbound("Immediate"),
            "PersistentVolume had no name",
        ),
        rejected(
            "an unbound claim whose class does not exist",
            claiming(Some(ClaimInfo {
                volume_name: String::new(),
                storage_class_name: "fast".into(),
                storage_class: None,
                volume: None,
                ..ClaimInfo::default()
            })),
            "storageclass.storage.k8s.io \"fast\" not found",
        ),
        rejected(
            "a claim bound to a volume that does not exist",
            claiming(Some(ClaimInfo {
                volume_name: "pv-9".into(),
                storage_class_name: String::new(),
                storage_class: None,
                volume: None,
                ..ClaimInfo::default()
            })),
            "persistentvolume \"pv-9\" not found",
        ),
        Case::filter(
            "an unbound WaitForFirstConsumer claim is skipped",
            unbound("WaitForFirstConsumer"),
            vec![node("n")],
            vec![pass()],
        )
        .with_plan(FilterPlan::Skip),
    ]
}

#[cfg(test)]
mod table_tests {
    #[test]
    fn answers_as_kube_scheduler() {
        wasched_sdk::testing::check::<super::VolumeZone>(&super::cases());
    }
}
