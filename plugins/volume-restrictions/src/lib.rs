//! VolumeRestrictions: a pod may not mount an inline disk (GCE PD, AWS EBS, Ceph RBD, iSCSI)
//! that a pod on the node already mounts, unless both mount it read-only where the disk allows
//! that; nor use a ReadWriteOncePod claim another pod already uses.

#![warn(missing_docs)]

use wasched_sdk::helpers::FastMap;

use wasched_sdk::{
    ExistingPodParts, ExistingPodRef, Failure, FilterPlan, FilterPlugin, NodeInfo, Nodes, Plugin,
    Pod, PodId, PodParts, PodPlan, PodVolume, Verdict,
};

/// The name used in configs and messages.
pub const NAME: &str = "VolumeRestrictions";
/// kube-scheduler's reason for a node where a pod already mounts one of the pod's disks.
pub const REASON_DISK_CONFLICT: &str = "node(s) had no available disk";
/// kube-scheduler's reason when a ReadWriteOncePod claim of the pod is in use.
pub const REASON_READ_WRITE_ONCE_POD: &str = "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod";

const GCE_PD: &str = "kubernetes.io/gce-pd";
const AWS_EBS: &str = "kubernetes.io/aws-ebs";
const RBD: &str = "kubernetes.io/rbd";
const ISCSI: &str = "kubernetes.io/iscsi";

/// An inline disk whose mounts can conflict (kube-scheduler's `needsRestrictionsCheck`).
fn is_checked_disk(volume: &PodVolume) -> bool {
    volume.claim_name.is_empty() && [GCE_PD, AWS_EBS, RBD, ISCSI].contains(&volume.plugin.as_str())
}

/// Whether mounting `new` where `existing` is mounted conflicts (kube-scheduler's
/// `isVolumeConflict`): the same GCE PD or iSCSI target unless both are read-only, the same EBS
/// volume always, the same RBD image (a shared monitor, the same pool) unless both are read-only.
fn conflicts(new: &PodVolume, existing: &PodVolume) -> bool {
    if new.plugin != existing.plugin || new.handle != existing.handle {
        return false;
    }
    let both_read_only = new.read_only && existing.read_only;
    match new.plugin.as_str() {
        GCE_PD | ISCSI => !both_read_only,
        AWS_EBS => true,
        RBD => {
            let shares_monitor = new.monitors.iter().any(|m| existing.monitors.contains(m));
            shares_monitor && new.pool == existing.pool && !both_read_only
        }
        _ => false,
    }
}

/// The plugin: the placed pods' disks per node and claims per namespace, kept up to date as
/// pods come and go, and the current pod's check.
#[derive(Default)]
pub struct VolumeRestrictions {
    /// Per node name: the checked inline disks of the pods on it.
    disks: FastMap<String, Vec<(PodId, PodVolume)>>,
    /// Per namespace, per claim: how many placed pods use the claim (`persistentVolumeClaim`
    /// volumes, as kube-scheduler's snapshot counts them). Nested so that a placed pod's claims
    /// are looked up by the names it brings, without building a key.
    claim_users: FastMap<String, FastMap<String, u32>>,
    /// The current pod's checked inline disks.
    pod_disks: Vec<PodVolume>,
    /// How many of the pod's ReadWriteOncePod claims placed pods use.
    conflicting_claims: usize,
}

/// The claims a pod's `persistentVolumeClaim` volumes name (generic ephemeral ones aside).
fn claims_of(volumes: &[PodVolume]) -> impl Iterator<Item = &PodVolume> {
    volumes
        .iter()
        .filter(|v| !v.claim_name.is_empty() && !v.ephemeral)
}

impl VolumeRestrictions {
    fn count(&mut self, pod: ExistingPodRef<'_>, node: &NodeInfo, id: PodId, added: bool) {
        let mut own = pod.volumes.iter().filter(|v| is_checked_disk(v)).peekable();
        // Inline disks are rare: a pod without one, on a node without any, touches no list, so
        // a placement costs no node name copied and hashed.
        match self.disks.get_mut(node.name.as_str()) {
            Some(disks) => {
                disks.retain(|(holder, _)| *holder != id);
                if added {
                    disks.extend(own.map(|v| (id, v.clone())));
                }
                if disks.is_empty() {
                    self.disks.remove(node.name.as_str());
                }
            }
            None if added && own.peek().is_some() => {
                let disks = own.map(|v| (id, v.clone())).collect();
                self.disks.insert(node.name.clone(), disks);
            }
            None => {}
        }
        for claim in claims_of(pod.volumes) {
            let name = claim.claim_name.as_str();
            if added {
                let claims = match self.claim_users.get_mut(pod.namespace) {
                    Some(claims) => claims,
                    None => self
                        .claim_users
                        .entry(pod.namespace.to_string())
                        .or_default(),
                };
                match claims.get_mut(name) {
                    Some(users) => *users += 1,
                    None => {
                        claims.insert(name.to_string(), 1);
                    }
                }
                continue;
            }
            let Some(claims) = self.claim_users.get_mut(pod.namespace) else {
                continue;
            };
            if let Some(users) = claims.get_mut(name) {
                *users = users.saturating_sub(1);
                if *users == 0 {
                    claims.remove(name);
                }
            }
            if claims.is_empty() {
                self.claim_users.remove(pod.namespace);
            }
        }
    }
}

impl Plugin for VolumeRestrictions {
    const NAME: &'static str = NAME;
    const READS_POD: PodParts = PodParts::IDENTITY.union(PodParts::VOLUMES);
    const READS_EXISTING_PODS: ExistingPodParts =
        ExistingPodParts::LABELS.union(ExistingPodParts::VOLUMES);
    const IDLE_WITHOUT: PodParts = PodParts::VOLUMES;

    fn new(_config: &str) -> Result<Self, String> {
        Ok(VolumeRestrictions::default())
    }

    fn prepare(&mut self, pod: &Pod, _nodes: &Nodes) -> PodPlan {
        self.pod_disks = pod
            .volumes
            .iter()
            .filter(|v| is_checked_disk(v))
            .cloned()
            .collect();
        let mut read_write_once_pod = Vec::new();
        for claim in claims_of(&pod.volumes) {
            if !claim.claim_found {
                let missing = format!("persistentvolumeclaim \"{}\" not found", claim.claim_name);
                return PodPlan {
                    filter: FilterPlan::Reject(Failure::unresolvable(missing)),
                    score: false,
                };
            }
            let exclusive = claim.access_modes.iter().any(|m| m == "ReadWriteOncePod");
            if exclusive && !read_write_once_pod.contains(&&claim.claim_name) {
                read_write_once_pod.push(&claim.claim_name);
            }
        }
        self.conflicting_claims = read_write_once_pod
            .iter()
            .filter(|claim| {
                self.claim_users
                    .get(pod.namespace.as_str())
                    .is_some_and(|claims| claims.contains_key(claim.as_str()))
            })
            .count();
        let nothing_to_check = self.pod_disks.is_empty() && self.conflicting_claims == 0;
        PodPlan {
            filter: if nothing_to_check {
                FilterPlan::Skip
            } else {
                FilterPlan::Run
            },
            score: false,
        }
    }

    fn pod_added(&mut self, id: PodId, pod: ExistingPodRef<'_>, node: &NodeInfo) {
        self.count(pod, node, id, true);
    }

    fn pod_removed(&mut self, id: PodId, pod: ExistingPodRef<'_>, node: &NodeInfo) {
        self.count(pod, node, id, false);
    }
}

impl FilterPlugin for VolumeRestrictions {
    fn filter(&self, _pod: &Pod, node: &NodeInfo) -> Verdict {
        let mounted = self.disks.get(&node.name).into_iter().flatten();
        let mut mounted = mounted.map(|(_, disk)| disk);
        if mounted.any(|disk| self.pod_disks.iter().any(|new| conflicts(new, disk))) {
            return Err(Failure::unschedulable(REASON_DISK_CONFLICT));
        }
        // Unschedulable, not unresolvable: preempting the pod that uses the claim helps.
        if self.conflicting_claims > 0 {
            return Err(Failure::unschedulable(REASON_READ_WRITE_ONCE_POD));
        }
        Ok(())
    }
}

wasched_sdk::export_plugin!(VolumeRestrictions: filter);

/// kube-scheduler's `volume_restrictions_test.go` as a table (`TestGCEDiskConflicts`,
/// `TestAWSDiskConflicts`, `TestRBDDiskConflicts`, `TestISCSIDiskConflicts`,
/// `TestAccessModeConflicts`), plus read-only mounts: run natively by this crate's tests and
/// through the WebAssembly build by the host's (`tests/e2e/plugins.rs`), which insists both
/// builds agree.
#[cfg(not(target_arch = "wasm32"))]
pub fn cases() -> Vec<wasched_sdk::testing::Case> {
    use wasched_sdk::testing::{fail, node, pass, pod, Case};
    use wasched_sdk::Code;

    let disk = |plugin: &str, handle: &str, read_only: bool| PodVolume {
        name: "disk".into(),
        plugin: plugin.into(),
        handle: handle.into(),
        read_only,
        ..PodVolume::default()
    };
    let rbd = |monitors: &[&str], read_only: bool| PodVolume {
        monitors: monitors.iter().map(|m| m.to_string()).collect(),
        pool: "foo".into(),
        ..disk(RBD, "bar", read_only)
    };
    let mounting = |name: &str, volumes: Vec<PodVolume>| Pod {
        volumes,
        ..pod(name)
    };
    let claim = |name: &str, modes: &[&str], found: bool| PodVolume {
        name: name.into(),
        claim_name: name.into(),
        claim_found: found,
        access_modes: modes.iter().map(|m| m.to_string()).collect(),
        ..PodVolume::default()
    };
    let conflict = || fail(Code::Unschedulable, &[REASON_DISK_CONFLICT]);
    // Each disk kind's four rows: nothing; a pod without the disk beside one with it; the same
    // disk; a different one.
    let mut cases = Vec::new();
    for (kind, same, other) in [
        (
            "GCE PD",
            disk(GCE_PD, "foo", false),
            disk(GCE_PD, "bar", false),
        ),
        (
            "AWS EBS",
            disk(AWS_EBS, "foo", false),
            disk(AWS_EBS, "bar", false),
        ),
        ("RBD", rbd(&["a", "b"], false), rbd(&["c", "d"], false)),
        (
            "iSCSI",
            disk(ISCSI, "iqn.2016-12.server:storage.target01", false),
            disk(ISCSI, "iqn.2017-12.server:storage.target01", false),
        ),
    ] {
        let name = |row: &str| -> &'static str { format!("{kind}: {row}").leak() };
        let holding = |volume: &PodVolume| vec![(0, mounting("existing", vec![volume.clone()]))];
        cases.push(
            Case::filter(name("nothing"), pod("p"), vec![node("n")], vec![pass()])
                .with_plan(FilterPlan::Skip),
        );
        cases.push(
            Case::filter(name("one state"), pod("p"), vec![node("n")], vec![pass()])
                .with_existing(holding(&same))
                .with_plan(FilterPlan::Skip),
        );
        cases.push(
            Case::filter(
                name("same state"),
                mounting("p", vec![same.clone()]),
                vec![node("n"), node("empty")],
                vec![conflict(), pass()],
            )
            .with_existing(holding(&same)),
        );
        cases.push(
            Case::filter(
                name("different state"),
                mounting("p", vec![other]),
                vec![node("n")],
                vec![pass()],
            )
            .with_existing(holding(&same)),
        );
    }
    let read_only_gce = disk(GCE_PD, "foo", true);
    cases.extend([
        Case::filter(
            "GCE PD: both read-only share the disk",
            mounting("p", vec![read_only_gce.clone()]),
            vec![node("n")],
            vec![pass()],
        )
        .with_existing(vec![(0, mounting("existing", vec![read_only_gce.clone()]))]),
        Case::filter(
            "AWS EBS: read-only does not help",
            mounting("p", vec![disk(AWS_EBS, "foo", true)]),
            vec![node("n")],
            vec![conflict()],
        )
        .with_existing(vec![(
            0,
            mounting("existing", vec![disk(AWS_EBS, "foo", true)]),
        )]),
        Case::filter(
            "a volume without restrictions",
            mounting(
                "p",
                vec![PodVolume {
                    name: "tmp".into(),
                    ..PodVolume::default()
                }],
            ),
            vec![node("n")],
            vec![pass()],
        )
        .with_plan(FilterPlan::Skip),
        Case::filter(
            "failed to get PVC",
            mounting(
                "p",
                vec![claim("claim-with-rwop-1", &["ReadWriteOncePod"], false)],
            ),
            vec![node("node-1")],
            vec![],
        )
        .with_plan(FilterPlan::Reject(Failure::unresolvable(
            "persistentvolumeclaim \"claim-with-rwop-1\" not found",
        ))),
        Case::filter(
            "no access mode conflict",
            mounting(
                "p",
                vec![claim("claim-with-rwop-1", &["ReadWriteOncePod"], true)],
            ),
            vec![node("node-1")],
            vec![pass()],
        )
        .with_existing(vec![(
            0,
            mounting(
                "rwx",
                vec![claim("claim-with-rwx", &["ReadWriteMany"], true)],
            ),
        )])
        .with_plan(FilterPlan::Skip),
        Case::filter(
            "access mode conflict, unschedulable",
            mounting(
                "p",
                vec![
                    claim("claim-with-rwop-1", &["ReadWriteOncePod"], true),
                    claim("claim-with-rwop-2", &["ReadWriteOncePod"], true),
                ],
            ),
            vec![node("node-1"), node("node-2")],
            vec![
                fail(Code::Unschedulable, &[REASON_READ_WRITE_ONCE_POD]),
                fail(Code::Unschedulable, &[REASON_READ_WRITE_ONCE_POD]),
            ],
        )
        .with_existing(vec![(
            0,
            mounting(
                "two-claims",
                vec![
                    claim("claim-with-rwop-1", &["ReadWriteOncePod"], true),
                    claim("claim-with-rwop-2", &["ReadWriteOncePod"], true),
                ],
            ),
        )]),
        Case::filter(
            "a claim of the same name in another namespace is another claim",
            mounting(
                "p",
                vec![claim("claim-with-rwop-1", &["ReadWriteOncePod"], true)],
            ),
            vec![node("node-1")],
            vec![pass()],
        )
        .with_existing(vec![(
            0,
            Pod {
                namespace: "other".into(),
                ..mounting(
                    "elsewhere",
                    vec![claim("claim-with-rwop-1", &["ReadWriteOncePod"], true)],
                )
            },
        )])
        .with_plan(FilterPlan::Skip),
    ]);
    cases
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasched_sdk::testing::{node, pod};
    use wasched_sdk::{Driver, ExistingPod, FilterResults};

    #[test]
    fn answers_as_kube_scheduler() {
        wasched_sdk::testing::check::<super::VolumeRestrictions>(&super::cases());
    }

    /// Which of nodes 0 and 1 pass `pod`.
    fn passing(driver: &mut Driver<VolumeRestrictions>, pod: &Pod) -> [bool; 2] {
        driver.set_pod(pod.clone());
        let mut out = FilterResults::default();
        driver.filter(&[0, 1], &mut out);
        [out.failure(0).is_none(), out.failure(1).is_none()]
    }

    #[test]
    fn pods_that_leave_free_their_disks_and_claims_and_no_others() {
        let disk = PodVolume {
            name: "disk".into(),
            plugin: GCE_PD.into(),
            handle: "pd-1".into(),
            ..PodVolume::default()
        };
        let exclusive = PodVolume {
            name: "data".into(),
            claim_name: "data".into(),
            claim_found: true,
            access_modes: vec!["ReadWriteOncePod".into()],
            ..PodVolume::default()
        };
        let holder = Pod {
            volumes: vec![disk.clone(), exclusive.clone()],
            ..pod("holder")
        };
        let wants_disk = Pod {
            volumes: vec![disk],
            ..pod("p")
        };
        let wants_claim = Pod {
            volumes: vec![exclusive.clone()],
            ..pod("p")
        };
        let mut driver = Driver::<VolumeRestrictions>::new("{}").unwrap();
        driver.upsert_nodes([(0, node("a")), (1, node("b"))]);
        driver.upsert_pods([(0, ExistingPod::of(&holder, 0))]);
        // Pods beside the holder that come and go: one without volumes, one sharing its claim.
        let sharer = Pod {
            volumes: vec![exclusive],
            ..pod("sharer")
        };
        driver.upsert_pods([(1, ExistingPod::of(&pod("plain"), 0))]);
        driver.upsert_pods([(2, ExistingPod::of(&sharer, 1))]);
        driver.remove_pods(&[1, 2]);
        assert_eq!(passing(&mut driver, &wants_disk), [false, true]);
        assert_eq!(passing(&mut driver, &wants_claim), [false, false]);

        driver.remove_pods(&[0]);
        assert_eq!(passing(&mut driver, &wants_disk), [true, true]);
        assert_eq!(passing(&mut driver, &wants_claim), [true, true]);
        let plugin = driver.plugin();
        assert!(plugin.disks.is_empty(), "{:?}", plugin.disks);
        assert!(plugin.claim_users.is_empty(), "{:?}", plugin.claim_users);
    }
}
