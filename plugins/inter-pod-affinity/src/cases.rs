//! kube-scheduler's `filtering_test.go` (`TestRequiredAffinitySingleNode`,
//! `TestRequiredAffinityMultipleNodes`) and `scoring_test.go` (`TestPreferredAffinity`,
//! `TestPreferredAffinityWithHardPodAffinitySymmetricWeight`) as tables, with rows for namespace
//! selectors, the first pod of a self-affine group and kube-scheduler's floating-point
//! normalization: run natively by this crate's tests and through the WebAssembly build by the
//! host's (`tests/e2e/plugins.rs`), which insists both builds agree.

use wasched_sdk::testing::{fail, labels, node, pass, pod, with_labels, Case, Expected};
use wasched_sdk::{
    Code, LabelSelector, LabelSelectorRequirement, NodeInfo, Pod, PodAffinityTerm,
    WeightedPodAffinityTerm,
};

use crate::{AFFINITY_REASON, ANTI_AFFINITY_REASON, EXISTING_ANTI_AFFINITY_REASON};

type Expression<'a> = (&'a str, &'a str, &'a [&'a str]);

fn selector(expressions: &[Expression]) -> LabelSelector {
    LabelSelector {
        match_labels: Default::default(),
        match_expressions: expressions
            .iter()
            .map(|(key, operator, values)| LabelSelectorRequirement {
                key: key.to_string(),
                operator: operator.to_string(),
                values: values.iter().map(|v| v.to_string()).collect(),
            })
            .collect(),
    }
}

/// A term in the owner's namespace.
fn term(expressions: &[Expression], topology_key: &str) -> PodAffinityTerm {
    PodAffinityTerm {
        label_selector: Some(selector(expressions)),
        namespaces: Vec::new(),
        namespace_selector: None,
        topology_key: topology_key.into(),
    }
}

fn weighted(weight: i32, term: PodAffinityTerm) -> WeightedPodAffinityTerm {
    WeightedPodAffinityTerm { weight, term }
}

fn labelled(name: &str, pairs: &[(&str, &str)]) -> Pod {
    Pod {
        labels: labels(pairs),
        ..pod(name)
    }
}

fn requiring(
    mut pod: Pod,
    affinity: Vec<PodAffinityTerm>,
    anti_affinity: Vec<PodAffinityTerm>,
) -> Pod {
    pod.pod_affinity.required_affinity = affinity;
    pod.pod_affinity.required_anti_affinity = anti_affinity;
    pod
}

fn preferring(
    mut pod: Pod,
    affinity: Vec<WeightedPodAffinityTerm>,
    anti_affinity: Vec<WeightedPodAffinityTerm>,
) -> Pod {
    pod.pod_affinity.preferred_affinity = affinity;
    pod.pod_affinity.preferred_anti_affinity = anti_affinity;
    pod
}

fn in_namespace(mut pod: Pod, namespace: &str) -> Pod {
    pod.namespace = namespace.into();
    pod
}

fn affinity() -> Expected {
    fail(Code::UnschedulableAndUnresolvable, &[AFFINITY_REASON])
}

fn anti() -> Expected {
    fail(Code::Unschedulable, &[ANTI_AFFINITY_REASON])
}

fn existing_anti() -> Expected {
    fail(Code::Unschedulable, &[EXISTING_ANTI_AFFINITY_REASON])
}

fn machine(name: &str, pairs: &[(&str, &str)]) -> NodeInfo {
    with_labels(node(name), pairs)
}

/// Every row: the filter tables, then the score tables.
pub fn cases() -> Vec<Case> {
    let mut cases = required_single_node();
    cases.extend(required_multiple_nodes());
    cases.extend(namespace_selectors());
    cases.extend(preferred());
    cases
}

fn required_single_node() -> Vec<Case> {
    let security_scan = &[("service", "securityscan")];
    let s1 = &[("security", "S1")];
    let node1 = || vec![machine("machine1", &[("region", "r1"), ("zone", "z11")])];
    let scan_in =
        |values: &'static [&'static str], key: &str| term(&[("service", "In", values)], key);
    let running = |pod: Pod| vec![(0, pod)];
    let row = |name, incoming: Pod, existing: Vec<(usize, Pod)>, verdict: Expected| {
        Case::filter(name, incoming, node1(), vec![verdict]).with_existing(existing)
    };
    let scan_pod = || labelled("existing", security_scan);
    vec![
        row(
            "A pod that has no required pod affinity scheduling rules can schedule onto a node with no existing pods",
            pod("incoming"),
            Vec::new(),
            pass(),
        )
        .with_plan(wasched_sdk::FilterPlan::Skip),
        row(
            "satisfies with requiredDuringSchedulingIgnoredDuringExecution in PodAffinity using In operator that matches the existing pod",
            requiring(labelled("incoming", s1), vec![scan_in(&["securityscan", "value2"], "region")], vec![]),
            running(scan_pod()),
            pass(),
        ),
        row(
            "satisfies the pod with requiredDuringSchedulingIgnoredDuringExecution in PodAffinity using not in operator in labelSelector that matches the existing pod",
            requiring(labelled("incoming", s1), vec![term(&[("service", "NotIn", &["securityscan3", "value3"])], "region")], vec![]),
            running(scan_pod()),
            pass(),
        ),
        row(
            "Does not satisfy the PodAffinity with labelSelector because of diff Namespace",
            requiring(
                labelled("incoming", s1),
                vec![PodAffinityTerm {
                    namespaces: vec!["DiffNameSpace".into()],
                    ..scan_in(&["securityscan", "value2"], "region")
                }],
                vec![],
            ),
            running(in_namespace(scan_pod(), "ns")),
            affinity(),
        ),
        row(
            "Doesn't satisfy the PodAffinity because of unmatching labelSelector with the existing pod",
            requiring(labelled("incoming", security_scan), vec![scan_in(&["antivirusscan", "value2"], "region")], vec![]),
            running(scan_pod()),
            affinity(),
        ),
        row(
            "satisfies the PodAffinity with different label Operators in multiple RequiredDuringSchedulingIgnoredDuringExecution",
            requiring(
                labelled("incoming", s1),
                vec![
                    term(&[("service", "Exists", &[]), ("wrongkey", "DoesNotExist", &[])], "region"),
                    term(&[("service", "In", &["securityscan"]), ("service", "NotIn", &["WrongValue"])], "region"),
                ],
                vec![],
            ),
            running(scan_pod()),
            pass(),
        ),
        row(
            "The labelSelector requirements(items of matchExpressions) are ANDed, the pod cannot schedule onto the node because one of the matchExpression item don't match",
            requiring(
                labelled("incoming", s1),
                vec![
                    term(&[("service", "Exists", &[]), ("wrongkey", "DoesNotExist", &[])], "region"),
                    term(&[("service", "In", &["securityscan2"]), ("service", "NotIn", &["WrongValue"])], "region"),
                ],
                vec![],
            ),
            running(scan_pod()),
            affinity(),
        ),
        row(
            "satisfies the PodAffinity and PodAntiAffinity with the existing pod",
            requiring(
                labelled("incoming", s1),
                vec![scan_in(&["securityscan", "value2"], "region")],
                vec![scan_in(&["antivirusscan", "value2"], "node")],
            ),
            running(scan_pod()),
            pass(),
        ),
        row(
            "satisfies the PodAffinity and PodAntiAffinity and PodAntiAffinity symmetry with the existing pod",
            requiring(
                labelled("incoming", s1),
                vec![scan_in(&["securityscan", "value2"], "region")],
                vec![scan_in(&["antivirusscan", "value2"], "node")],
            ),
            running(requiring(scan_pod(), vec![], vec![scan_in(&["antivirusscan", "value2"], "node")])),
            pass(),
        ),
        row(
            "satisfies the PodAffinity but doesn't satisfy the PodAntiAffinity with the existing pod",
            requiring(
                labelled("incoming", s1),
                vec![scan_in(&["securityscan", "value2"], "region")],
                vec![scan_in(&["securityscan", "value2"], "zone")],
            ),
            running(scan_pod()),
            anti(),
        ),
        row(
            "satisfies the PodAffinity and PodAntiAffinity but doesn't satisfy PodAntiAffinity symmetry with the existing pod",
            requiring(
                labelled("incoming", security_scan),
                vec![scan_in(&["securityscan", "value2"], "region")],
                vec![scan_in(&["antivirusscan", "value2"], "node")],
            ),
            running(requiring(scan_pod(), vec![], vec![scan_in(&["securityscan", "value2"], "zone")])),
            existing_anti(),
        ),
        Case::filter(
            "pod matches its own Label in PodAffinity and that matches the existing pod Labels",
            requiring(
                labelled("incoming", security_scan),
                vec![term(&[("service", "NotIn", &["securityscan", "value2"])], "region")],
                vec![],
            ),
            // kube-scheduler's row puts the existing pod on a node outside the snapshot; here it
            // is on a node without the topology key, which counts nowhere either.
            vec![node1().remove(0), node("machine2")],
            vec![affinity(), affinity()],
        )
        .with_existing(vec![(1, scan_pod())]),
        row(
            "verify that PodAntiAffinity from existing pod is respected when pod has no AntiAffinity constraints. doesn't satisfy PodAntiAffinity symmetry with the existing pod",
            labelled("incoming", security_scan),
            running(requiring(scan_pod(), vec![], vec![scan_in(&["securityscan", "value2"], "zone")])),
            existing_anti(),
        ),
        row(
            "verify that PodAntiAffinity from existing pod is respected when pod has no AntiAffinity constraints. satisfy PodAntiAffinity symmetry with the existing pod",
            labelled("incoming", security_scan),
            running(requiring(
                scan_pod(),
                vec![],
                vec![term(&[("service", "NotIn", &["securityscan", "value2"])], "zone")],
            )),
            pass(),
        ),
        row(
            "satisfies the PodAntiAffinity with existing pod but doesn't satisfy PodAntiAffinity symmetry with incoming pod",
            requiring(
                labelled("incoming", security_scan),
                vec![],
                vec![term(&[("service", "Exists", &[])], "region"), term(&[("security", "Exists", &[])], "region")],
            ),
            running(requiring(
                labelled("existing", s1),
                vec![],
                vec![term(&[("security", "Exists", &[])], "zone")],
            )),
            anti(),
        ),
        row(
            "a nil label selector matches no pod, not even the pod itself",
            requiring(
                labelled("incoming", security_scan),
                vec![PodAffinityTerm {
                    label_selector: None,
                    ..term(&[], "region")
                }],
                vec![],
            ),
            Vec::new(),
            affinity(),
        ),
    ]
}

fn required_multiple_nodes() -> Vec<Case> {
    let foo_bar = &[("foo", "bar")];
    let foo_in_bar = |key: &str| term(&[("foo", "In", &["bar"])], key);
    let regions = || {
        vec![
            machine("machine1", &[("region", "r1"), ("zone", "z11")]),
            machine("machine2", &[("region", "r1"), ("zone", "z12")]),
            machine("machine3", &[("region", "r2"), ("zone", "z21")]),
        ]
    };
    let hosts = || {
        vec![
            machine("n1", &[("kubernetes.io/hostname", "n1")]),
            machine("n2", &[("kubernetes.io/hostname", "n2")]),
            machine("n3", &[("kubernetes.io/hostname", "n3")]),
        ]
    };
    let kafka = |name| labelled(name, &[("app", "kafka")]);
    let spread_kafka = |pod| {
        requiring(
            pod,
            vec![],
            vec![term(&[("app", "In", &["kafka"])], "kubernetes.io/hostname")],
        )
    };
    vec![
        Case::filter(
            "A pod can be scheduled onto all the nodes that have the same topology key & label value with one of them has an existing pod that matches the affinity rules",
            requiring(labelled("incoming", &[]), vec![foo_in_bar("region")], vec![]),
            regions(),
            vec![pass(), pass(), affinity()],
        )
        .with_existing(vec![(0, labelled("existing", foo_bar))]),
        Case::filter(
            "the first pod of a group with affinity to itself goes to any node with the topology key",
            requiring(labelled("incoming", foo_bar), vec![foo_in_bar("zone")], vec![]),
            vec![
                machine("machine1", &[("zone", "z11")]),
                machine("machine2", &[("zone", "z12")]),
                machine("machine3", &[("region", "r2")]),
            ],
            vec![pass(), pass(), affinity()],
        ),
        Case::filter(
            "once one pod matches anywhere, the first-pod rule no longer applies",
            requiring(labelled("incoming", foo_bar), vec![foo_in_bar("zone")], vec![]),
            vec![
                machine("machine1", &[("zone", "z11")]),
                machine("machine2", &[("zone", "z12")]),
                machine("machine3", &[("zone", "z13")]),
            ],
            vec![pass(), affinity(), affinity()],
        )
        .with_existing(vec![(0, labelled("existing", foo_bar))]),
        Case::filter(
            "a pod matching only one of two required affinity terms counts for neither",
            requiring(
                labelled("incoming", &[]),
                vec![foo_in_bar("region"), term(&[("tier", "In", &["db"])], "region")],
                vec![],
            ),
            regions(),
            vec![affinity(), affinity(), affinity()],
        )
        .with_existing(vec![(0, labelled("existing", foo_bar))]),
        Case::filter(
            "anti-affinity replicas: the hosts that run one are left out",
            spread_kafka(kafka("incoming")),
            hosts(),
            vec![anti(), anti(), pass()],
        )
        .with_existing(vec![
            (0, spread_kafka(kafka("kafka-0"))),
            (1, spread_kafka(kafka("kafka-1"))),
        ])
        .with_plan(wasched_sdk::FilterPlan::FailingNodes {
            nodes: wasched_sdk::testing::node_ids(3)[..2].to_vec(),
            results: wasched_sdk::FilterResults {
                verdicts: vec![1, 1],
                failures: vec![wasched_sdk::Failure::unschedulable(ANTI_AFFINITY_REASON)],
            },
        }),
        Case::filter(
            "NodeA and nodeB have same topologyKey and label value. NodeA has an existing pod that matches the inter pod affinity rule. The pod can not be scheduled onto nodeA and nodeB but can be scheduled onto nodeC",
            requiring(labelled("incoming", &[]), vec![], vec![foo_in_bar("region")]),
            regions(),
            vec![anti(), anti(), pass()],
        )
        .with_existing(vec![(0, labelled("existing", foo_bar))]),
        Case::filter(
            "an existing pod's anti-affinity keeps the pod out of its whole region, not just its node",
            labelled("incoming", foo_bar),
            regions(),
            vec![existing_anti(), existing_anti(), pass()],
        )
        .with_existing(vec![(0, requiring(pod("existing"), vec![], vec![foo_in_bar("region")]))]),
        Case::filter(
            "affinity is checked before anti-affinity: a node failing both reports affinity",
            requiring(
                labelled("incoming", &[]),
                vec![term(&[("tier", "In", &["cache"])], "region")],
                vec![foo_in_bar("zone")],
            ),
            regions(),
            vec![pass(), pass(), affinity()],
        )
        .with_existing(vec![
            (0, labelled("cache", &[("tier", "cache")])),
            (2, labelled("existing", foo_bar)),
        ]),
        Case::filter(
            "a node without the anti-affinity term's topology key passes the term",
            requiring(labelled("incoming", &[]), vec![], vec![foo_in_bar("zone")]),
            vec![
                machine("machine1", &[("zone", "z11")]),
                machine("machine2", &[("region", "r1")]),
            ],
            vec![anti(), pass()],
        )
        .with_existing(vec![(0, labelled("a", foo_bar)), (1, labelled("b", foo_bar))]),
    ]
}

fn namespace_selectors() -> Vec<Case> {
    let foo_bar = &[("foo", "bar")];
    let nodes = || {
        vec![
            machine("machine1", &[("region", "r1")]),
            machine("machine2", &[("region", "r2")]),
        ]
    };
    let team_term = |selector: LabelSelector| PodAffinityTerm {
        namespace_selector: Some(selector),
        ..term(&[("foo", "In", &["bar"])], "region")
    };
    let namespaces: &[(&str, &[(&str, &str)])] =
        &[("team-a", &[("team", "a")]), ("team-b", &[("team", "b")])];
    vec![
        Case::filter(
            "a namespaceSelector finds the matching pod in another namespace",
            requiring(labelled("incoming", &[]), vec![team_term(selector(&[("team", "In", &["a"])]))], vec![]),
            nodes(),
            vec![affinity(), pass()],
        )
        .with_namespaces(namespaces)
        .with_existing(vec![
            (0, in_namespace(labelled("b", foo_bar), "team-b")),
            (1, in_namespace(labelled("a", foo_bar), "team-a")),
        ]),
        Case::filter(
            "an empty namespaceSelector selects every namespace",
            requiring(labelled("incoming", &[]), vec![team_term(selector(&[]))], vec![]),
            nodes(),
            vec![pass(), affinity()],
        )
        .with_namespaces(namespaces)
        .with_existing(vec![(0, in_namespace(labelled("b", foo_bar), "team-b"))]),
        Case::filter(
            "an existing pod's anti-affinity namespaceSelector is matched against the incoming pod's namespace labels",
            in_namespace(labelled("incoming", foo_bar), "team-a"),
            nodes(),
            vec![existing_anti(), pass()],
        )
        .with_namespaces(namespaces)
        .with_existing(vec![(
            0,
            in_namespace(
                requiring(pod("guard"), vec![], vec![team_term(selector(&[("team", "In", &["a"])]))]),
                "team-b",
            ),
        )]),
        Case::filter(
            "... and a pod in a namespace it does not select is not kept out",
            in_namespace(labelled("incoming", foo_bar), "team-b"),
            nodes(),
            vec![pass(), pass()],
        )
        .with_namespaces(namespaces)
        .with_existing(vec![(
            0,
            in_namespace(
                requiring(pod("guard"), vec![], vec![team_term(selector(&[("team", "In", &["a"])]))]),
                "team-c",
            ),
        )])
        .with_plan(wasched_sdk::FilterPlan::Skip),
    ]
}

fn preferred() -> Vec<Case> {
    let s1 = &[("security", "S1")];
    let s2 = &[("security", "S2")];
    let s1_term = |key: &str| term(&[("security", "In", &["S1"])], key);
    let nodes = || {
        vec![
            machine("machine1", &[("region", "China")]),
            machine("machine2", &[("region", "India")]),
            machine("machine3", &[("az", "az1")]),
        ]
    };
    let china_twice = || {
        vec![
            machine("machine1", &[("region", "China")]),
            machine("machine2", &[("region", "India")]),
            machine("machine3", &[("region", "China")]),
        ]
    };
    let hosts = || {
        vec![
            machine("n1", &[("kubernetes.io/hostname", "n1")]),
            machine("n2", &[("kubernetes.io/hostname", "n2")]),
            machine("n3", &[("kubernetes.io/hostname", "n3")]),
        ]
    };
    vec![
        Case::score(
            "no placed pod matches: no opinion, every node gets 0",
            preferring(labelled("incoming", s1), vec![weighted(5, s1_term("region"))], vec![]),
            nodes(),
            vec![],
        )
        .with_existing(vec![(1, labelled("p", s2))]),
        Case::score(
            "Affinity: pod that matches topology key & pods in nodes will get high score comparing to others which doesn't match either pods in nodes or in topology key",
            preferring(labelled("incoming", s1), vec![weighted(5, s1_term("region"))], vec![]),
            nodes(),
            vec![100, 0, 0],
        )
        .with_existing(vec![(0, labelled("p1", s1)), (1, labelled("p2", s2))]),
        Case::score(
            "All the nodes that have the same topology key & label value with one of them has an existing pod that match the affinity rules, have the same score",
            preferring(labelled("incoming", s1), vec![weighted(5, s1_term("region"))], vec![]),
            china_twice(),
            vec![100, 0, 100],
        )
        .with_existing(vec![(0, labelled("p1", s1))]),
        Case::score(
            "Anti Affinity: pod that does not match existing pods in node will get high score",
            preferring(labelled("incoming", s1), vec![], vec![weighted(5, s1_term("region"))]),
            china_twice(),
            vec![0, 100, 0],
        )
        .with_existing(vec![(0, labelled("p1", s1)), (1, labelled("p2", s2))]),
        Case::score(
            "Affinity and Anti Affinity: weights add up per topology key and value",
            preferring(
                labelled("incoming", s1),
                vec![weighted(8, s1_term("region"))],
                vec![weighted(5, term(&[("security", "In", &["S2"])], "region"))],
            ),
            china_twice(),
            vec![100, 0, 100],
        )
        .with_existing(vec![(0, labelled("p1", s1)), (1, labelled("p2", s2)), (1, labelled("p3", s1))]),
        Case::score(
            "Hard Pod Affinity symmetry: existing pods' required affinity scores the incoming pod's domains at hardPodAffinityWeight",
            labelled("incoming", s1),
            china_twice(),
            vec![100, 0, 100],
        )
        .with_existing(vec![(0, requiring(pod("p1"), vec![s1_term("region")], vec![]))]),
        Case::score(
            "Hard Pod Affinity symmetry is off at hardPodAffinityWeight 0: no opinion",
            labelled("incoming", s1),
            china_twice(),
            vec![],
        )
        .with_config(r#"{"hardPodAffinityWeight": 0}"#)
        .with_existing(vec![(0, requiring(pod("p1"), vec![s1_term("region")], vec![]))]),
        Case::score(
            "Soft Pod Anti Affinity symmetry: existing pods' preferred anti-affinity lowers their domains",
            labelled("incoming", s1),
            china_twice(),
            vec![100, 0, 100],
        )
        .with_existing(vec![(1, preferring(pod("p2"), vec![], vec![weighted(10, s1_term("region"))]))]),
        Case::score(
            "ignorePreferredTermsOfExistingPods: a pod without preferred terms is not scored",
            labelled("incoming", s1),
            china_twice(),
            vec![],
        )
        .with_config(r#"{"ignorePreferredTermsOfExistingPods": true}"#)
        .with_existing(vec![(1, preferring(pod("p2"), vec![], vec![weighted(10, s1_term("region"))]))]),
        Case::score(
            "ignorePreferredTermsOfExistingPods: with its own preferred terms, existing pods' terms still count",
            preferring(labelled("incoming", s1), vec![weighted(5, s1_term("region"))], vec![]),
            china_twice(),
            vec![100, 0, 100],
        )
        .with_config(r#"{"ignorePreferredTermsOfExistingPods": true}"#)
        .with_existing(vec![
            (0, labelled("p1", s1)),
            (1, preferring(pod("p2"), vec![], vec![weighted(10, s1_term("region"))])),
        ]),
        Case::score(
            "normalization is kube-scheduler's floating point: 100 * (29 / 100) truncates to 28",
            preferring(
                labelled("incoming", &[]),
                vec![
                    weighted(29, term(&[("app", "In", &["a"])], "kubernetes.io/hostname")),
                    weighted(100, term(&[("app", "In", &["b"])], "kubernetes.io/hostname")),
                ],
                vec![],
            ),
            hosts(),
            vec![28, 100, 0],
        )
        .with_existing(vec![(0, labelled("a", &[("app", "a")])), (1, labelled("b", &[("app", "b")]))]),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::InterPodAffinity;

    #[test]
    fn kube_scheduler_tables() {
        wasched_sdk::testing::check::<InterPodAffinity>(&cases());
    }

    #[test]
    fn configurations_out_of_range_or_unknown_are_refused() {
        let refused = |config: &str| match <InterPodAffinity as wasched_sdk::Plugin>::new(config) {
            Ok(_) => panic!("{config} was accepted"),
            Err(e) => e,
        };
        assert_eq!(
            refused(r#"{"hardPodAffinityWeight": 101}"#),
            "hardPodAffinityWeight: Invalid value: 101: not in valid range [0-100]"
        );
        assert!(refused(r#"{"hardPodAffinityWeigth": 1}"#).contains("unknown field"));
    }
}
