//! kube-scheduler's behaviour as a table, converted from its VolumeBinding tests
//! (`volume_binding_test.go` and `binder_test.go`): run natively by this crate's tests and
//! through the WebAssembly build by the host's (`tests/e2e/plugins.rs`), which insists both builds
//! agree. [`tests`] checks which volume each binding takes.

use wasched_sdk::testing::{fail, node, pass, pod, unresolvable, with_labels, Case};
use wasched_sdk::{
    ClaimInfo, ClaimRef, Code, Failure, FilterPlan, LabelSelector, NodeInfo,
    NodeSelectorRequirement, NodeSelectorTerm, Pod, PodVolume, StorageCapacity, StorageClassInfo,
    VolumeClaim, VolumeInfo,
};

use super::{
    REASON_BIND_CONFLICT, REASON_NODE_CONFLICT, REASON_NOT_ENOUGH_SPACE, REASON_PV_NOT_EXIST,
};

const GI: i64 = 1 << 30;
const HOSTNAME: &str = "kubernetes.io/hostname";
const ZONE: &str = "topology.kubernetes.io/zone";

/// A node with its hostname label and a zone.
pub(crate) fn host(name: &str, zone: &str) -> NodeInfo {
    with_labels(node(name), &[(HOSTNAME, name), (ZONE, zone)])
}

pub(crate) fn requirement(key: &str, values: &[&str]) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.into(),
        operator: "In".into(),
        values: values.iter().map(|v| v.to_string()).collect(),
    }
}

pub(crate) fn term(key: &str, values: &[&str]) -> NodeSelectorTerm {
    NodeSelectorTerm {
        match_expressions: vec![requirement(key, values)],
        match_fields: Vec::new(),
    }
}

pub(crate) fn class(name: &str, mode: &str, provisioner: &str) -> StorageClassInfo {
    StorageClassInfo {
        name: name.into(),
        volume_binding_mode: Some(mode.into()),
        provisioner: provisioner.into(),
        allowed_topologies: Vec::new(),
    }
}

/// An available volume of `size` GiB usable from the nodes `affinity` selects.
pub(crate) fn volume(name: &str, size: i64, affinity: Option<NodeSelectorTerm>) -> VolumeInfo {
    VolumeInfo {
        name: name.into(),
        capacity: size * GI,
        access_modes: vec!["ReadWriteOnce".into()],
        volume_mode: "Filesystem".into(),
        phase: "Available".into(),
        node_affinity: affinity.map(|t| vec![t]),
        ..VolumeInfo::default()
    }
}

/// A volume pinned to one host, as the local static provisioner makes them.
pub(crate) fn local(name: &str, size: i64, on: &str) -> VolumeInfo {
    volume(name, size, Some(term(HOSTNAME, &[on])))
}

/// A claim of `size` GiB in `class`, not bound.
pub(crate) fn waiting(size: i64, class_info: StorageClassInfo) -> ClaimInfo {
    ClaimInfo {
        storage_class_name: class_info.name.clone(),
        storage_class: Some(class_info),
        uid: "claim-uid".into(),
        phase: "Pending".into(),
        requested_storage: size * GI,
        access_modes: vec!["ReadWriteOnce".into()],
        volume_mode: "Filesystem".into(),
        ..ClaimInfo::default()
    }
}

/// `volumes` as volumes of `class_info`'s class.
pub(crate) fn offered(class_info: &StorageClassInfo, volumes: Vec<VolumeInfo>) -> Vec<VolumeInfo> {
    volumes
        .into_iter()
        .map(|v| VolumeInfo {
            storage_class_name: class_info.name.clone(),
            ..v
        })
        .collect()
}

/// A claim fully bound to `volume` (`None`: the volume does not exist).
pub(crate) fn bound(volume_name: &str, volume: Option<VolumeInfo>) -> ClaimInfo {
    ClaimInfo {
        volume_name: volume_name.into(),
        storage_class_name: "local".into(),
        storage_class: Some(class("local", "WaitForFirstConsumer", "")),
        volume,
        phase: "Bound".into(),
        bind_completed: true,
        ..ClaimInfo::default()
    }
}

/// A pod whose one claim, of 10 GiB, is to be provisioned by a driver that reports its
/// capacity (`tracked`) in `capacities`, as the host sends it in the `volumes` part.
fn provisioning_with(tracked: bool, capacities: Vec<StorageCapacity>) -> Pod {
    let class_info = class("fast", "WaitForFirstConsumer", "csi.example.com");
    Pod {
        volumes: vec![PodVolume {
            name: "data-0".into(),
            claim_name: "pvc-0".into(),
            claim_found: true,
            provisioner: "csi.example.com".into(),
            capacity_tracked: tracked,
            capacities: if tracked { capacities } else { Vec::new() },
            ..PodVolume::default()
        }],
        ..claiming(vec![Some(waiting(10, class_info))])
    }
}

/// Room of `gib` GiB (none: not stated) on the nodes of zone `zone` (none: no node topology).
fn room(zone: Option<&str>, gib: Option<i64>) -> StorageCapacity {
    StorageCapacity {
        node_topology: zone.map(|z| LabelSelector {
            match_labels: [(ZONE.to_string(), z.to_string())].into_iter().collect(),
            match_expressions: Vec::new(),
        }),
        limit: gib.map(|g| g * GI),
    }
}

/// A pod using these claims, named `pvc-0`, `pvc-1`, ...
pub(crate) fn claiming(claims: Vec<Option<ClaimInfo>>) -> Pod {
    Pod {
        volume_claims: claims
            .into_iter()
            .enumerate()
            .map(|(i, claim)| VolumeClaim {
                volume: format!("data-{i}"),
                claim_name: format!("pvc-{i}"),
                ephemeral: false,
                claim,
            })
            .collect(),
        ..pod("p")
    }
}

fn rejected(name: &'static str, pod: Pod, failure: Failure) -> Case {
    Case::filter(name, pod, vec![host("n", "a")], vec![]).with_plan(FilterPlan::Reject(failure))
}

/// The table.
pub fn cases() -> Vec<Case> {
    let local_class = || {
        class(
            "local",
            "WaitForFirstConsumer",
            "kubernetes.io/no-provisioner",
        )
    };
    let dynamic = || class("fast", "WaitForFirstConsumer", "csi.example.com");
    let bind_conflict = || unresolvable(REASON_BIND_CONFLICT);
    let three = || vec![host("n1", "a"), host("n2", "a"), host("n3", "b")];
    vec![
        Case::filter("a pod without claims", pod("p"), three(), vec![pass(), pass(), pass()])
            .with_plan(FilterPlan::Skip),
        Case::filter(
            "every claim bound, volumes usable from every node: no node to check",
            claiming(vec![
                Some(bound("pv-a", Some(volume("pv-a", 1, None)))),
                Some(bound("pv-b", Some(volume("pv-b", 1, None)))),
            ]),
            three(),
            vec![pass(), pass(), pass()],
        )
        .with_plan(FilterPlan::Skip),
        rejected(
            "a claim that does not exist",
            claiming(vec![Some(bound("pv-a", None)), None]),
            Failure::unresolvable("persistentvolumeclaim \"pvc-1\" not found"),
        ),
        rejected(
            "a generic ephemeral volume whose claim the controller did not create yet",
            Pod {
                volume_claims: vec![VolumeClaim {
                    volume: "scratch".into(),
                    claim_name: "p-scratch".into(),
                    ephemeral: true,
                    claim: None,
                }],
                ..pod("p")
            },
            Failure::unresolvable(
                "waiting for ephemeral volume controller to create the persistentvolumeclaim \"p-scratch\"",
            ),
        ),
        rejected(
            "a claim that lost its volume",
            claiming(vec![Some(ClaimInfo {
                phase: "Lost".into(),
                bind_completed: false,
                ..bound("pv-a", None)
            })]),
            Failure::unresolvable(
                "persistentvolumeclaim \"pvc-0\" bound to non-existent persistentvolume \"pv-a\"",
            ),
        ),
        rejected(
            "a claim being deleted",
            claiming(vec![Some(ClaimInfo {
                deleting: true,
                ..bound("pv-a", Some(volume("pv-a", 1, None)))
            })]),
            Failure::unresolvable("persistentvolumeclaim \"pvc-0\" is being deleted"),
        ),
        rejected(
            "an Immediate claim the PV controller has not bound",
            claiming(vec![Some(waiting(1, class("std", "Immediate", "csi.example.com")))]),
            Failure::unresolvable(super::REASON_UNBOUND_IMMEDIATE),
        ),
        rejected(
            "a claim whose class does not exist counts as Immediate",
            claiming(vec![Some(ClaimInfo {
                storage_class: None,
                ..waiting(1, dynamic())
            })]),
            Failure::unresolvable(super::REASON_UNBOUND_IMMEDIATE),
        ),
        rejected(
            "a claim pre-bound to a volume (volumeName set, binding not completed) counts as Immediate",
            claiming(vec![Some(ClaimInfo {
                volume_name: "pv-a".into(),
                ..waiting(1, local_class())
            })]),
            Failure::unresolvable(super::REASON_UNBOUND_IMMEDIATE),
        ),
        rejected(
            "a class without volumeBindingMode is an error",
            claiming(vec![Some(waiting(
                1,
                StorageClassInfo {
                    volume_binding_mode: None,
                    ..dynamic()
                },
            ))]),
            Failure::error("VolumeBindingMode not set for StorageClass \"fast\""),
        ),
        Case::filter(
            "a bound claim whose volume is pinned to zone a",
            claiming(vec![Some(bound(
                "pv-a",
                Some(volume("pv-a", 1, Some(term(ZONE, &["a"])))),
            ))]),
            three(),
            vec![pass(), pass(), unresolvable(REASON_NODE_CONFLICT)],
        ),
        Case::filter(
            "a bound claim whose local volume is on n2",
            claiming(vec![Some(bound("pv-local", Some(local("pv-local", 1, "n2"))))]),
            three(),
            vec![
                unresolvable(REASON_NODE_CONFLICT),
                pass(),
                unresolvable(REASON_NODE_CONFLICT),
            ],
        ),
        Case::filter(
            "a bound claim whose volume does not exist",
            claiming(vec![Some(bound("pv-a", None))]),
            three(),
            vec![
                unresolvable(REASON_PV_NOT_EXIST),
                unresolvable(REASON_PV_NOT_EXIST),
                unresolvable(REASON_PV_NOT_EXIST),
            ],
        ),
        Case::filter(
            "bound and waiting claims both unsatisfied on a node: both reasons, node affinity first",
            claiming(vec![
                Some(bound("pv-a", Some(volume("pv-a", 1, Some(term(ZONE, &["a"])))))),
                Some(waiting(1, local_class())),
            ]),
            three(),
            vec![
                pass(),
                bind_conflict(),
                fail(
                    Code::UnschedulableAndUnresolvable,
                    &[REASON_NODE_CONFLICT, REASON_BIND_CONFLICT],
                ),
            ],
        )
        .with_volumes(offered(&local_class(), vec![local("pv-local", 1, "n1")])),
        Case::filter(
            "a waiting claim binds to the local volume of its node; no provisioner elsewhere",
            claiming(vec![Some(waiting(1, local_class()))]),
            three(),
            vec![pass(), bind_conflict(), pass()],
        )
        .with_volumes(offered(&local_class(), vec![local("pv-1", 1, "n1"), local("pv-3", 1, "n3")])),
        Case::filter(
            "a volume smaller than the request never matches (300Gi wanted, 137Gi local disks)",
            claiming(vec![Some(waiting(300, local_class()))]),
            three(),
            vec![bind_conflict(), bind_conflict(), bind_conflict()],
        )
        .with_volumes(offered(&local_class(), vec![local("pv-1", 137, "n1"), local("pv-2", 137, "n2")])),
        Case::filter(
            "volumes not Available, of another volume mode, being deleted, or missing an access mode are skipped",
            claiming(vec![Some(waiting(1, local_class()))]),
            three(),
            vec![bind_conflict(), bind_conflict(), bind_conflict()],
        )
        .with_volumes(offered(&local_class(), vec![
                    VolumeInfo {
                        phase: "Released".into(),
                        ..local("pv-1", 1, "n1")
                    },
                    VolumeInfo {
                        volume_mode: "Block".into(),
                        ..local("pv-2", 1, "n2")
                    },
                    VolumeInfo {
                        deleting: true,
                        ..local("pv-3", 1, "n3")
                    },
                ])),
        Case::filter(
            "a claim's access modes must all be offered by the volume",
            claiming(vec![Some(ClaimInfo {
                access_modes: vec!["ReadWriteOnce".into(), "ReadOnlyMany".into()],
                ..waiting(1, local_class())
            })]),
            three(),
            vec![bind_conflict(), pass(), bind_conflict()],
        )
        .with_volumes(offered(&local_class(), vec![
                        local("pv-1", 1, "n1"),
                        VolumeInfo {
                            access_modes: vec!["ReadOnlyMany".into(), "ReadWriteOnce".into()],
                            ..local("pv-2", 1, "n2")
                        },
                    ])),
        Case::filter(
            "a claim's selector must match the volume's labels",
            claiming(vec![Some(ClaimInfo {
                selector: Some(LabelSelector {
                    match_labels: [("tier".to_string(), "ssd".to_string())].into_iter().collect(),
                    match_expressions: Vec::new(),
                }),
                ..waiting(1, local_class())
            })]),
            three(),
            vec![bind_conflict(), pass(), bind_conflict()],
        )
        .with_volumes(offered(&local_class(), vec![
                        local("pv-1", 1, "n1"),
                        VolumeInfo {
                            labels: [("tier".to_string(), "ssd".to_string())].into_iter().collect(),
                            ..local("pv-2", 1, "n2")
                        },
                    ])),
        Case::filter(
            "a volume of another attributes class is skipped",
            claiming(vec![Some(ClaimInfo {
                volume_attributes_class_name: Some("gold".into()),
                ..waiting(1, local_class())
            })]),
            three(),
            vec![bind_conflict(), pass(), bind_conflict()],
        )
        .with_volumes(offered(&local_class(), vec![
                        local("pv-1", 1, "n1"),
                        VolumeInfo {
                            volume_attributes_class_name: Some("gold".into()),
                            ..local("pv-2", 1, "n2")
                        },
                        VolumeInfo {
                            volume_attributes_class_name: Some("silver".into()),
                            ..local("pv-3", 1, "n3")
                        },
                    ])),
        Case::filter(
            "a volume pre-bound to the claim decides alone: only its node",
            claiming(vec![Some(waiting(1, local_class()))]),
            three(),
            vec![bind_conflict(), pass(), bind_conflict()],
        )
        .with_volumes(offered(&local_class(), vec![
                    local("pv-1", 1, "n1"),
                    VolumeInfo {
                        phase: "Bound".into(),
                        claim_ref: Some(ClaimRef {
                            namespace: "default".into(),
                            name: "pvc-0".into(),
                            uid: String::new(),
                        }),
                        ..local("pv-2", 1, "n2")
                    },
                ])),
        Case::filter(
            "two claims cannot take the one local volume of a node",
            claiming(vec![
                Some(waiting(1, local_class())),
                Some(waiting(2, local_class())),
            ]),
            three(),
            vec![bind_conflict(), bind_conflict(), bind_conflict()],
        )
        .with_volumes(offered(&local_class(), vec![local("pv-1", 5, "n1")])),
        Case::filter(
            "a dynamic class provisions where no volume matches, within its allowed topologies",
            claiming(vec![Some(waiting(10, StorageClassInfo {
                    allowed_topologies: vec![term(ZONE, &["a"])],
                    ..dynamic()
                }))]),
            three(),
            vec![pass(), pass(), bind_conflict()],
        ),
        Case::filter(
            "two claims to provision, each within its own class's allowed topologies",
            claiming(vec![
                Some(waiting(10, StorageClassInfo {
                    allowed_topologies: vec![term(ZONE, &["a"])],
                    ..dynamic()
                })),
                Some(waiting(5, StorageClassInfo {
                    name: "anywhere".into(),
                    ..dynamic()
                })),
            ]),
            three(),
            vec![pass(), pass(), bind_conflict()],
        ),
        Case::filter(
            "storage capacity: room in zone a only",
            provisioning_with(true, vec![room(Some("a"), Some(100))]),
            three(),
            vec![pass(), pass(), unresolvable(REASON_NOT_ENOUGH_SPACE)],
        ),
        Case::filter(
            "storage capacity: too little room anywhere, and a capacity for no node",
            provisioning_with(true, vec![room(Some("a"), Some(5)), room(None, Some(100))]),
            three(),
            vec![
                unresolvable(REASON_NOT_ENOUGH_SPACE),
                unresolvable(REASON_NOT_ENOUGH_SPACE),
                unresolvable(REASON_NOT_ENOUGH_SPACE),
            ],
        ),
        Case::filter(
            "storage capacity: no capacity object, or one stating no size, is no room",
            provisioning_with(true, vec![room(Some("b"), None)]),
            three(),
            vec![
                unresolvable(REASON_NOT_ENOUGH_SPACE),
                unresolvable(REASON_NOT_ENOUGH_SPACE),
                unresolvable(REASON_NOT_ENOUGH_SPACE),
            ],
        ),
        Case::filter(
            "storage capacity: a driver that does not report capacity provisions anywhere",
            provisioning_with(false, vec![room(Some("a"), Some(5))]),
            three(),
            vec![pass(), pass(), pass()],
        ),
        Case::filter(
            "a claim whose volume is being provisioned for n2 fits n2 only",
            claiming(vec![Some(ClaimInfo {
                selected_node: Some("n2".into()),
                ..waiting(1, dynamic())
            })]),
            three(),
            vec![bind_conflict(), pass(), bind_conflict()],
        ),
        Case::filter(
            "a bound volume with an empty term or a field requirement on the name is usable from no node",
            claiming(vec![Some(bound(
                "pv-a",
                Some(VolumeInfo {
                    node_affinity: Some(vec![
                        NodeSelectorTerm::default(),
                        NodeSelectorTerm {
                            match_expressions: Vec::new(),
                            match_fields: vec![requirement("metadata.name", &["n1"])],
                        },
                    ]),
                    ..volume("pv-a", 1, None)
                }),
            ))]),
            three(),
            vec![
                unresolvable(REASON_NODE_CONFLICT),
                unresolvable(REASON_NODE_CONFLICT),
                unresolvable(REASON_NODE_CONFLICT),
            ],
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PodVolumes, VolumeBinding};
    use wasched_sdk::{Driver, FilterPlan};

    #[test]
    fn answers_as_kube_scheduler() {
        wasched_sdk::testing::check::<VolumeBinding>(&cases());
    }

    /// What the plugin's Reserve gives the host for `pod` on `node`, with these volumes in the
    /// cluster, after its PreFilter.
    fn found(pod: &Pod, node: &NodeInfo, volumes: &[VolumeInfo]) -> Result<PodVolumes, Failure> {
        let mut driver = Driver::<VolumeBinding>::new("{}").expect("no configuration");
        driver.upsert_nodes([(0, node.clone())]);
        driver.upsert_volumes(volumes.iter().cloned());
        if let FilterPlan::Reject(failure) = driver.set_pod(pod.clone()).filter {
            return Err(failure);
        }
        driver.reserve(0).map(|reservation| reservation.volumes)
    }

    fn bindings(pod: &Pod, node: &NodeInfo, volumes: &[VolumeInfo]) -> Vec<(String, String)> {
        found(pod, node, volumes).unwrap().static_bindings
    }

    #[test]
    fn the_smallest_volume_that_fits_is_taken_the_first_of_equals() {
        let local_class = class("l", "WaitForFirstConsumer", "");
        let pod = claiming(vec![Some(waiting(10, local_class.clone()))]);
        let volumes = offered(
            &local_class,
            vec![
                volume("big", 100, None),
                volume("first-of-two", 20, None),
                local("too-small", 5, "n1"),
                local("second-of-two", 20, "n1"),
                volume("exact-elsewhere", 10, Some(term(ZONE, &["b"]))),
            ],
        );
        assert_eq!(
            bindings(&pod, &host("n1", "a"), &volumes),
            [("pvc-0".into(), "first-of-two".into())]
        );
        assert_eq!(
            bindings(&pod, &host("n3", "b"), &volumes),
            [("pvc-0".into(), "exact-elsewhere".into())]
        );
        let other_class = offered(&class("other", "WaitForFirstConsumer", ""), volumes);
        assert!(
            found(&pod, &host("n1", "a"), &other_class).is_err(),
            "volumes of another class are never offered"
        );
    }

    #[test]
    fn claims_are_matched_smallest_request_first_each_volume_once() {
        let local_class = class("l", "WaitForFirstConsumer", "kubernetes.io/no-provisioner");
        let volumes = offered(
            &local_class,
            vec![local("pv-small", 10, "n1"), local("pv-large", 50, "n1")],
        );
        // In pod order the large claim comes first; matched in that order it would take the
        // small volume's place only if it fitted, so the order shows in who gets what.
        let pod = claiming(vec![
            Some(waiting(40, local_class.clone())),
            Some(waiting(5, local_class)),
        ]);
        assert_eq!(
            bindings(&pod, &host("n1", "a"), &volumes),
            [
                ("pvc-1".to_string(), "pv-small".to_string()),
                ("pvc-0".to_string(), "pv-large".to_string())
            ]
        );
    }

    #[test]
    fn the_volumes_offered_follow_the_mirror_as_volumes_are_bound_moved_and_removed() {
        let local_class = class("l", "WaitForFirstConsumer", "kubernetes.io/no-provisioner");
        let pod = claiming(vec![Some(waiting(10, local_class.clone()))]);
        let pv_on = |host: &str, claim_ref: Option<(&str, &str)>| VolumeInfo {
            claim_ref: claim_ref.map(|(namespace, name)| ClaimRef {
                namespace: namespace.into(),
                name: name.into(),
                uid: String::new(),
            }),
            ..offered(&local_class, vec![local("pv-1", 20, host)]).remove(0)
        };
        let mut driver = Driver::<VolumeBinding>::new("{}").expect("no configuration");
        driver.upsert_nodes([(0, host("n1", "a")), (1, host("n2", "a"))]);
        let bindings_on = |driver: &mut Driver<VolumeBinding>, node| {
            let plan = driver.set_pod(pod.clone());
            assert!(!matches!(plan.filter, FilterPlan::Reject(_)), "{plan:?}");
            driver
                .reserve(node)
                .ok()
                .map(|reservation| reservation.volumes.static_bindings)
        };
        let took_pv_1 = Some(vec![("pvc-0".to_string(), "pv-1".to_string())]);

        driver.upsert_volumes([pv_on("n1", None)]);
        assert_eq!(bindings_on(&mut driver, 0), took_pv_1);
        assert_eq!(bindings_on(&mut driver, 1), None, "pinned to n1");

        driver.upsert_volumes([pv_on("n1", Some(("default", "someone-else")))]);
        assert_eq!(bindings_on(&mut driver, 0), None, "bound to another claim");

        driver.upsert_volumes([pv_on("n2", Some(("default", "pvc-0")))]);
        assert_eq!(
            bindings_on(&mut driver, 1),
            took_pv_1,
            "pre-bound, now on n2"
        );
        assert_eq!(
            bindings_on(&mut driver, 0),
            None,
            "pre-bound to a volume on n2"
        );

        driver.upsert_volumes([pv_on("n2", None)]);
        assert_eq!(bindings_on(&mut driver, 1), took_pv_1);
        driver.remove_volumes(["pv-1"]);
        assert_eq!(bindings_on(&mut driver, 1), None, "removed");
    }

    #[test]
    fn a_claim_without_a_volume_is_provisioned_and_bound_claims_need_nothing() {
        let pod = claiming(vec![
            Some(bound("pv-a", Some(volume("pv-a", 1, None)))),
            Some(waiting(
                10,
                class("fast", "WaitForFirstConsumer", "csi.example.com"),
            )),
        ]);
        assert_eq!(
            found(&pod, &host("n1", "a"), &[]),
            Ok(PodVolumes {
                static_bindings: Vec::new(),
                provisions: vec!["pvc-1".into()],
            })
        );
        let all_bound = claiming(vec![Some(bound("pv-a", Some(volume("pv-a", 1, None))))]);
        assert!(found(&all_bound, &host("n1", "a"), &[]).unwrap().is_empty());
    }
}
