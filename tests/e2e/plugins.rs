//! The default plugins' Kubernetes semantics, each case run as a WebAssembly component and natively
//! (`support::run` fails a case when the two disagree on any verdict, reason or score).

use wasched_sdk::{Code, FilterPlan, NodeAffinity, NodeInfo, Pod, PreferredSchedulingTerm};

use crate::support::*;

struct FilterCase {
    name: &'static str,
    pod: Pod,
    nodes: Vec<NodeInfo>,
    expected: Vec<Option<(Code, Vec<String>)>>,
}

fn check_filters(plugin: &str, config: &str, cases: Vec<FilterCase>) {
    for case in cases {
        let run = run(case.name, plugin, config, &case.nodes, &case.pod);
        assert_eq!(run.verdicts, case.expected, "{plugin}: {}", case.name);
    }
}

/// The tables that live in the plugins' own crates (run natively there), through the WebAssembly
/// build and natively: `support::run` fails a row when the two builds disagree, and both must
/// answer as the row says.
#[test]
fn each_plugin_crate_table_holds_for_its_component_too() {
    let tables = [
        (wasched_node_name::NAME, wasched_node_name::cases()),
        (
            wasched_node_unschedulable::NAME,
            wasched_node_unschedulable::cases(),
        ),
        (
            wasched_taint_toleration::NAME,
            wasched_taint_toleration::cases(),
        ),
        (
            wasched_balanced_allocation::NAME,
            wasched_balanced_allocation::cases(),
        ),
    ];
    for (plugin, cases) in tables {
        assert!(!cases.is_empty(), "{plugin} has a table");
        for case in cases {
            let answers = run(case.name, plugin, &case.config, &case.nodes, &case.pod);
            case.assert_answered(plugin, &answers);
        }
    }
}

fn affinity_pod(required: Option<Vec<wasched_sdk::NodeSelectorTerm>>) -> Pod {
    Pod {
        node_affinity: Some(NodeAffinity {
            required,
            preferred: Vec::new(),
        }),
        ..pod("p")
    }
}

#[test]
fn node_affinity_filter_follows_kubernetes() {
    let reason = "node(s) didn't match Pod's node affinity/selector";
    let zone = |z: &str| with_labels(node(&format!("n-{z}")), &[("zone", z), ("cores", "8")]);
    let bare = || node("bare");
    check_filters(
        "NodeAffinity",
        "{}",
        vec![
            FilterCase {
                name: "nodeSelector needs every pair",
                pod: Pod {
                    node_selector: labels(&[("zone", "a"), ("cores", "8")]),
                    ..pod("p")
                },
                nodes: vec![zone("a"), zone("b"), bare()],
                expected: vec![pass(), unresolvable(reason), unresolvable(reason)],
            },
            FilterCase {
                name: "In and NotIn; NotIn matches a node without the key",
                pod: affinity_pod(Some(vec![term(vec![requirement("zone", "NotIn", &["b"])])])),
                nodes: vec![zone("a"), zone("b"), bare()],
                expected: vec![pass(), unresolvable(reason), pass()],
            },
            FilterCase {
                name: "terms are ORed, expressions inside a term ANDed",
                pod: affinity_pod(Some(vec![
                    term(vec![
                        requirement("zone", "In", &["a"]),
                        requirement("cores", "In", &["16"]),
                    ]),
                    term(vec![requirement("zone", "In", &["b"])]),
                ])),
                nodes: vec![zone("a"), zone("b")],
                expected: vec![unresolvable(reason), pass()],
            },
            FilterCase {
                name: "Exists and DoesNotExist",
                pod: affinity_pod(Some(vec![term(vec![
                    requirement("zone", "Exists", &[]),
                    requirement("gpu", "DoesNotExist", &[]),
                ])])),
                nodes: vec![
                    zone("a"),
                    bare(),
                    with_labels(node("g"), &[("zone", "a"), ("gpu", "t4")]),
                ],
                expected: vec![pass(), unresolvable(reason), unresolvable(reason)],
            },
            FilterCase {
                name: "Gt and Lt compare integers; a non-integer label never matches",
                pod: affinity_pod(Some(vec![term(vec![
                    requirement("cores", "Gt", &["4"]),
                    requirement("cores", "Lt", &["10"]),
                ])])),
                nodes: vec![
                    zone("a"),
                    with_labels(node("big"), &[("cores", "12")]),
                    with_labels(node("odd"), &[("cores", "eight")]),
                ],
                expected: vec![pass(), unresolvable(reason), unresolvable(reason)],
            },
            FilterCase {
                name: "an empty list of terms matches nothing",
                pod: affinity_pod(Some(vec![])),
                nodes: vec![zone("a")],
                expected: vec![unresolvable(reason)],
            },
            FilterCase {
                name: "an empty term matches nothing, but the other terms still count",
                pod: affinity_pod(Some(vec![
                    term(vec![]),
                    term(vec![requirement("zone", "In", &["a"])]),
                ])),
                nodes: vec![zone("a"), zone("b")],
                expected: vec![pass(), unresolvable(reason)],
            },
            FilterCase {
                name: "an invalid value (even under NotIn) makes its whole term match nothing",
                pod: affinity_pod(Some(vec![term(vec![requirement(
                    "zone",
                    "NotIn",
                    &["not a valid value"],
                )])])),
                nodes: vec![zone("a"), bare()],
                expected: vec![unresolvable(reason), unresolvable(reason)],
            },
            FilterCase {
                name: "metadata.name in matchExpressions is an ordinary label key",
                pod: affinity_pod(Some(vec![term(vec![requirement(
                    "metadata.name",
                    "In",
                    &["bare"],
                )])])),
                nodes: vec![bare(), with_labels(node("x"), &[("metadata.name", "bare")])],
                expected: vec![unresolvable(reason), pass()],
            },
            FilterCase {
                name: "nodeSelector and required affinity must both hold",
                pod: Pod {
                    node_selector: labels(&[("cores", "8")]),
                    ..affinity_pod(Some(vec![term(vec![requirement("zone", "In", &["b"])])]))
                },
                nodes: vec![zone("a"), zone("b")],
                expected: vec![unresolvable(reason), pass()],
            },
        ],
    );
}

#[test]
fn node_affinity_match_fields_narrow_the_nodes_before_filtering() {
    let fields_term = |operator: &str, values: &[&str]| wasched_sdk::NodeSelectorTerm {
        match_expressions: Vec::new(),
        match_fields: vec![requirement("metadata.name", operator, values)],
    };
    let nodes = vec![node("a"), node("b")];
    let run1 = run(
        "In",
        "NodeAffinity",
        "{}",
        &nodes,
        &affinity_pod(Some(vec![fields_term("In", &["b"])])),
    );
    assert_eq!(run1.plan.filter, FilterPlan::OnlyNodes(vec!["b".into()]));
    let reason = "node(s) didn't match Pod's node affinity/selector";
    assert_eq!(run1.verdicts, vec![unresolvable(reason), pass()]);

    let run2 = run(
        "NotIn",
        "NodeAffinity",
        "{}",
        &nodes,
        &affinity_pod(Some(vec![fields_term("NotIn", &["b"])])),
    );
    assert_eq!(run2.plan.filter, FilterPlan::Run);
    assert_eq!(run2.verdicts, vec![pass(), unresolvable(reason)]);

    let conflicting = affinity_pod(Some(vec![wasched_sdk::NodeSelectorTerm {
        match_expressions: Vec::new(),
        match_fields: vec![
            requirement("metadata.name", "In", &["a"]),
            requirement("metadata.name", "In", &["b"]),
        ],
    }]));
    let run3 = run("conflict", "NodeAffinity", "{}", &nodes, &conflicting);
    match run3.plan.filter {
        FilterPlan::Reject(failure) => {
            assert_eq!(failure.code, Code::UnschedulableAndUnresolvable);
            assert_eq!(failure.reasons, vec!["pod affinity terms conflict"]);
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
}

#[test]
fn node_affinity_score_sums_matching_preferred_weights_scaled_to_100() {
    let nodes = vec![
        with_labels(node("both"), &[("disk", "ssd"), ("zone", "a")]),
        with_labels(node("ssd"), &[("disk", "ssd")]),
        with_labels(node("zone"), &[("zone", "a")]),
        node("none"),
    ];
    let pod = Pod {
        node_affinity: Some(NodeAffinity {
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
    let run1 = run("preferred", "NodeAffinity", "{}", &nodes, &pod);
    assert_eq!(
        run1.plan.filter,
        FilterPlan::Skip,
        "no selector or required affinity: nothing to filter"
    );
    assert_eq!(
        run1.scores,
        vec![100, 75, 25, 0],
        "40, 30, 10, 0 scaled; the empty term counts for nothing"
    );
    let run2 = run(
        "no preference",
        "NodeAffinity",
        "{}",
        &nodes,
        &pod_without_affinity(),
    );
    assert!(!run2.plan.score, "no preferred terms: no opinion");
}

fn pod_without_affinity() -> Pod {
    pod("plain")
}

#[test]
fn node_resources_fit_filter_reports_every_resource_short() {
    let full_pods = || {
        let mut n = node("full");
        n.allocatable.pods = 3;
        with_usage(n, 0, 0, 3)
    };
    let mut gpu_pod = requesting(100, GI);
    gpu_pod.requests.set("nvidia.com/gpu", 2);
    let mut zero_gpu_pod = requesting(100, GI);
    zero_gpu_pod.requests.set("nvidia.com/gpu", 0);
    let mut gpu_node = node("gpu");
    gpu_node.allocatable.set("nvidia.com/gpu", 1);
    let mut overcommitted_gpu_node = node("over");
    overcommitted_gpu_node.allocatable.set("nvidia.com/gpu", 1);
    overcommitted_gpu_node
        .usage
        .requested
        .set("nvidia.com/gpu", 4);
    check_filters(
        "NodeResourcesFit",
        "{}",
        vec![
            FilterCase {
                name: "fits, short of cpu, short of memory, short of both",
                pod: requesting(1000, 2 * GI),
                nodes: vec![
                    node("empty"),
                    with_usage(node("busy-cpu"), 3500, 0, 1),
                    with_usage(node("busy-mem"), 0, 7 * GI, 1),
                    with_usage(node("busy"), 3500, 7 * GI, 1),
                ],
                expected: vec![
                    pass(),
                    fail(Code::Unschedulable, &["Insufficient cpu"]),
                    fail(Code::Unschedulable, &["Insufficient memory"]),
                    fail(
                        Code::Unschedulable,
                        &["Insufficient cpu", "Insufficient memory"],
                    ),
                ],
            },
            FilterCase {
                name: "no pod slot left",
                pod: requesting(100, GI),
                nodes: vec![full_pods()],
                expected: vec![fail(Code::Unschedulable, &["Too many pods"])],
            },
            FilterCase {
                name: "an extended resource short, or missing from the node",
                pod: gpu_pod,
                nodes: vec![gpu_node.clone(), node("no-gpu")],
                expected: vec![
                    fail(Code::Unschedulable, &["Insufficient nvidia.com/gpu"]),
                    fail(Code::Unschedulable, &["Insufficient nvidia.com/gpu"]),
                ],
            },
            FilterCase {
                name: "a zero request of an extended resource fits an over-committed node",
                pod: zero_gpu_pod,
                nodes: vec![overcommitted_gpu_node],
                expected: vec![pass()],
            },
            FilterCase {
                name: "a pod requesting nothing fits a node whose cpu is over-committed",
                pod: requesting(0, 0),
                nodes: vec![with_usage(node("over"), 9000, 0, 1)],
                expected: vec![pass()],
            },
        ],
    );
    let mut ignoring = requesting(100, GI);
    ignoring.requests.set("example.com/foo", 5);
    let run1 = run(
        "ignored resource",
        "NodeResourcesFit",
        r#"{"ignoredResources":["example.com/foo"]}"#,
        &[node("n")],
        &ignoring,
    );
    assert_eq!(
        run1.verdicts,
        vec![pass()],
        "ignoredResources skips the check"
    );
    let run2 = run(
        "ignored group",
        "NodeResourcesFit",
        r#"{"ignoredResourceGroups":["example.com"]}"#,
        &[node("n")],
        &ignoring,
    );
    assert_eq!(
        run2.verdicts,
        vec![pass()],
        "ignoredResourceGroups skips the check"
    );
}

#[test]
fn node_resources_fit_scores_with_each_strategy() {
    // Nodes: 4000m / 8Gi. Pod: 1000m / 2Gi.
    let nodes = vec![
        node("empty"),
        with_usage(node("half"), 1000, 2 * GI, 1),
        with_usage(node("over"), 8000, 16 * GI, 2),
    ];
    let one_cpu = requesting(1000, 2 * GI);
    let least = run("least", "NodeResourcesFit", "{}", &nodes, &one_cpu);
    // empty: (3000*100/4000 + 6Gi*100/8Gi)/2 = 75; half: 50; over: requested > capacity -> 0.
    assert_eq!(least.scores, vec![75, 50, 0]);
    let most = run(
        "most",
        "NodeResourcesFit",
        r#"{"scoringStrategy":{"type":"MostAllocated"}}"#,
        &nodes,
        &one_cpu,
    );
    assert_eq!(
        most.scores,
        vec![25, 50, 100],
        "requests above capacity are capped"
    );
    let ratio = run(
        "ratio",
        "NodeResourcesFit",
        r#"{"scoringStrategy":{"type":"RequestedToCapacityRatio","resources":[{"name":"cpu","weight":1}],
            "requestedToCapacityRatio":{"shape":[{"utilization":0,"score":0},{"utilization":100,"score":10}]}}}"#,
        &nodes,
        &one_cpu,
    );
    assert_eq!(ratio.scores, vec![25, 50, 100]);
    let weighted = run(
        "weights",
        "NodeResourcesFit",
        r#"{"scoringStrategy":{"type":"LeastAllocated","resources":[{"name":"cpu","weight":3},{"name":"memory","weight":1}]}}"#,
        &[with_usage(node("n"), 2000, 0, 1)],
        &one_cpu,
    );
    // cpu (4000-3000)*100/4000 = 25 (x3), memory 75 (x1): (75 + 75) / 4 = 37.
    assert_eq!(weighted.scores, vec![37]);

    // A pod without requests scores as if it asked for 100m cpu and 200Mi memory.
    let mut best_effort = pod("be");
    best_effort.non_zero_requests.milli_cpu = 100;
    best_effort.non_zero_requests.memory = 200 << 20;
    let defaults = run(
        "defaults",
        "NodeResourcesFit",
        "{}",
        &[node("n")],
        &best_effort,
    );
    let expected = ((4000 - 100) * 100 / 4000 + (8 * GI - (200 << 20)) * 100 / (8 * GI)) / 2;
    assert_eq!(defaults.scores, vec![expected]);
}

fn claim(name: &str, info: Option<wasched_sdk::ClaimInfo>) -> wasched_sdk::VolumeClaim {
    wasched_sdk::VolumeClaim {
        volume: "data".into(),
        claim_name: name.into(),
        claim: info,
    }
}

fn bound(pv_labels: &[(&str, &str)]) -> Option<wasched_sdk::ClaimInfo> {
    Some(wasched_sdk::ClaimInfo {
        volume_name: "pv-1".into(),
        storage_class_name: "standard".into(),
        storage_class: None,
        volume: Some(wasched_sdk::VolumeInfo {
            name: "pv-1".into(),
            labels: labels(pv_labels),
        }),
    })
}

fn with_claims(claims: Vec<wasched_sdk::VolumeClaim>) -> Pod {
    Pod {
        volume_claims: claims,
        ..pod("p")
    }
}

#[test]
fn volume_zone_keeps_pods_with_zonal_volumes_in_their_zones() {
    let reason = "node(s) had no available volume zone";
    let ga_zone = |z: &str| {
        with_labels(
            node(&format!("ga-{z}")),
            &[("topology.kubernetes.io/zone", z)],
        )
    };
    let beta_zone = |z: &str| {
        with_labels(
            node(&format!("beta-{z}")),
            &[("failure-domain.beta.kubernetes.io/zone", z)],
        )
    };
    check_filters(
        "VolumeZone",
        "{}",
        vec![
            FilterCase {
                name: "a GA zone label on the volume; unlabelled nodes pass",
                pod: with_claims(vec![claim(
                    "c",
                    bound(&[("topology.kubernetes.io/zone", "a")]),
                )]),
                nodes: vec![ga_zone("a"), ga_zone("b"), node("unlabelled")],
                expected: vec![pass(), unresolvable(reason), pass()],
            },
            FilterCase {
                name: "several zones separated by __",
                pod: with_claims(vec![claim(
                    "c",
                    bound(&[("topology.kubernetes.io/zone", "a__b")]),
                )]),
                nodes: vec![ga_zone("a"), ga_zone("b"), ga_zone("c")],
                expected: vec![pass(), pass(), unresolvable(reason)],
            },
            FilterCase {
                name: "a beta label on the volume is satisfied by the node's GA label",
                pod: with_claims(vec![claim(
                    "c",
                    bound(&[("failure-domain.beta.kubernetes.io/zone", "a")]),
                )]),
                nodes: vec![ga_zone("a"), beta_zone("a"), ga_zone("b")],
                expected: vec![pass(), pass(), unresolvable(reason)],
            },
            FilterCase {
                name: "a GA label on the volume is not satisfied by a beta-only node",
                pod: with_claims(vec![claim(
                    "c",
                    bound(&[("topology.kubernetes.io/zone", "a")]),
                )]),
                nodes: vec![beta_zone("a")],
                expected: vec![unresolvable(reason)],
            },
            FilterCase {
                name: "every label of the volume must hold (zone and region)",
                pod: with_claims(vec![claim(
                    "c",
                    bound(&[
                        ("topology.kubernetes.io/zone", "a"),
                        ("topology.kubernetes.io/region", "r1"),
                    ]),
                )]),
                nodes: vec![
                    with_labels(
                        node("ok"),
                        &[
                            ("topology.kubernetes.io/zone", "a"),
                            ("topology.kubernetes.io/region", "r1"),
                        ],
                    ),
                    with_labels(
                        node("bad"),
                        &[
                            ("topology.kubernetes.io/zone", "a"),
                            ("topology.kubernetes.io/region", "r2"),
                        ],
                    ),
                ],
                expected: vec![pass(), unresolvable(reason)],
            },
        ],
    );
}

#[test]
fn volume_zone_rejects_or_skips_before_filtering() {
    let nodes = vec![node("n")];
    let rejection =
        |case: &str, pod: Pod| match run(case, "VolumeZone", "{}", &nodes, &pod).plan.filter {
            FilterPlan::Reject(f) => {
                assert_eq!(f.code, Code::UnschedulableAndUnresolvable, "{case}");
                f.reasons
                    .iter()
                    .map(|r| r.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
            other => panic!("{case}: expected a rejection, got {other:?}"),
        };
    assert_eq!(
        rejection("missing claim", with_claims(vec![claim("data", None)])),
        "persistentvolumeclaim \"data\" not found"
    );
    let unbound = |mode: Option<&str>| {
        Some(wasched_sdk::ClaimInfo {
            volume_name: String::new(),
            storage_class_name: "fast".into(),
            storage_class: Some(wasched_sdk::StorageClassInfo {
                name: "fast".into(),
                volume_binding_mode: mode.map(String::from),
            }),
            volume: None,
        })
    };
    assert_eq!(
        rejection(
            "unbound, immediate",
            with_claims(vec![claim("c", unbound(Some("Immediate")))])
        ),
        "PersistentVolume had no name"
    );
    let missing_class = Some(wasched_sdk::ClaimInfo {
        volume_name: String::new(),
        storage_class_name: "fast".into(),
        storage_class: None,
        volume: None,
    });
    assert_eq!(
        rejection(
            "missing class",
            with_claims(vec![claim("c", missing_class)])
        ),
        "storageclass.storage.k8s.io \"fast\" not found"
    );
    let missing_pv = Some(wasched_sdk::ClaimInfo {
        volume_name: "pv-9".into(),
        storage_class_name: String::new(),
        storage_class: None,
        volume: None,
    });
    assert_eq!(
        rejection("missing volume", with_claims(vec![claim("c", missing_pv)])),
        "persistentvolume \"pv-9\" not found"
    );
    let waiting = run(
        "wait for first consumer",
        "VolumeZone",
        "{}",
        &nodes,
        &with_claims(vec![claim("c", unbound(Some("WaitForFirstConsumer")))]),
    );
    assert_eq!(
        waiting.plan.filter,
        FilterPlan::Skip,
        "unbound WaitForFirstConsumer claims are skipped"
    );
}
