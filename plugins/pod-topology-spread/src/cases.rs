//! kube-scheduler's `filtering_test.go` (`TestSingleConstraint`, `TestMultipleConstraints`) and
//! `scoring_test.go` (`TestPodTopologySpreadScore`) as tables, with rows for `matchLabelKeys`,
//! the empty-selector quirk and cluster default constraints: run natively by this crate's tests
//! and through the WebAssembly build by the host's (`tests/e2e/plugins.rs`), which insists both
//! builds agree.

use wasched_sdk::testing::{
    fail, labels, node, pass, pod, requirement, term, with_labels, with_taints, Case, Expected,
};
use wasched_sdk::{
    Code, FilterPlan, LabelSelector, LabelSelectorRequirement, NodeAffinity, NodeInfo, Pod,
    TopologySpreadConstraint,
};

use crate::args::{DO_NOT_SCHEDULE as HARD, HOSTNAME, SCHEDULE_ANYWAY as SOFT};
use crate::{CONSTRAINTS_REASON, MISSING_LABEL_REASON};

fn exists(key: &str) -> Option<LabelSelector> {
    Some(LabelSelector {
        match_labels: Default::default(),
        match_expressions: vec![LabelSelectorRequirement {
            key: key.into(),
            operator: "Exists".into(),
            values: Vec::new(),
        }],
    })
}

fn foo() -> Option<LabelSelector> {
    exists("foo")
}

fn bar() -> Option<LabelSelector> {
    exists("bar")
}

/// A pod with labels `keys`, each with the empty value (kube-scheduler's `Label("foo", "")`).
fn labelled(keys: &[&str]) -> Pod {
    let pairs: Vec<(&str, &str)> = keys.iter().map(|k| (*k, "")).collect();
    Pod {
        labels: labels(&pairs),
        ..pod("p")
    }
}

fn spread(
    mut pod: Pod,
    max_skew: i32,
    key: &str,
    action: &str,
    selector: Option<LabelSelector>,
) -> Pod {
    pod.topology_spread_constraints
        .push(TopologySpreadConstraint {
            max_skew,
            topology_key: key.into(),
            when_unsatisfiable: action.into(),
            label_selector: selector,
            ..TopologySpreadConstraint::default()
        });
    pod
}

/// The last constraint of `pod` changed by `change`.
fn with_last(mut pod: Pod, change: impl FnOnce(&mut TopologySpreadConstraint)) -> Pod {
    change(
        pod.topology_spread_constraints
            .last_mut()
            .expect("a constraint"),
    );
    pod
}

fn min_domains(pod: Pod, min: i32) -> Pod {
    with_last(pod, |c| c.min_domains = Some(min))
}

fn policies(pod: Pod, affinity: &str, taints: &str) -> Pod {
    with_last(pod, |c| {
        c.node_affinity_policy = affinity.into();
        c.node_taints_policy = taints.into();
    })
}

fn node_selector(mut pod: Pod, pairs: &[(&str, &str)]) -> Pod {
    pod.node_selector = labels(pairs);
    pod
}

fn node_affinity(mut pod: Pod, key: &str, operator: &str, values: &[&str]) -> Pod {
    pod.node_affinity = Some(NodeAffinity {
        required: Some(vec![term(vec![requirement(key, operator, values)])]),
        preferred: Vec::new(),
    });
    pod
}

fn machine(name: &str, pairs: &[(&str, &str)]) -> NodeInfo {
    with_labels(node(name), pairs)
}

/// kube-scheduler's usual four nodes: `node-a`, `node-b` in zone1 and `node-x`, `node-y` in
/// zone2, each with a `node` label naming it.
fn four() -> Vec<NodeInfo> {
    [
        ("node-a", "zone1"),
        ("node-b", "zone1"),
        ("node-x", "zone2"),
        ("node-y", "zone2"),
    ]
    .iter()
    .map(|(name, zone)| machine(name, &[("zone", zone), ("node", name)]))
    .collect()
}

/// Nodes named `node-<c>` for each `c` of `letters`, labelled `key: node-<c>` plus `extra`.
fn named(letters: &str, key: &str, extra: &[(&str, &str)]) -> Vec<NodeInfo> {
    letters
        .chars()
        .map(|c| {
            let name = format!("node-{c}");
            let mut pairs = vec![(key, name.as_str())];
            pairs.extend_from_slice(extra);
            machine(&name, &pairs)
        })
        .collect()
}

const TAINTED: &[(&str, &str, &str)] = &[("node.kubernetes.io/unschedulable", "", "NoSchedule")];

/// Pods on the nodes at the given positions, each with labels `keys` (empty values).
fn on(positions: &[usize], keys: &[&str]) -> Vec<(usize, Pod)> {
    positions.iter().map(|&p| (p, labelled(keys))).collect()
}

fn foo_on(positions: &[usize]) -> Vec<(usize, Pod)> {
    on(positions, &["foo"])
}

/// Verdicts spelled one letter per node: `S` passes, `U` fails the skew (Unschedulable), `R`
/// lacks the topology key (UnschedulableAndUnresolvable).
fn verdicts(spelled: &str) -> Vec<Expected> {
    spelled
        .chars()
        .map(|c| match c {
            'S' => pass(),
            'U' => fail(Code::Unschedulable, &[CONSTRAINTS_REASON]),
            'R' => fail(Code::UnschedulableAndUnresolvable, &[MISSING_LABEL_REASON]),
            other => panic!("unknown verdict {other}"),
        })
        .collect()
}

fn filter_row(
    name: &'static str,
    pod: Pod,
    nodes: Vec<NodeInfo>,
    existing: Vec<(usize, Pod)>,
    spelled: &str,
) -> Case {
    Case::filter(name, pod, nodes, verdicts(spelled)).with_existing(existing)
}

fn score_row(
    name: &'static str,
    pod: Pod,
    nodes: Vec<NodeInfo>,
    existing: Vec<(usize, Pod)>,
    scores: &[i64],
) -> Case {
    Case::score(name, pod, nodes, scores.to_vec()).with_existing(existing)
}

/// Every row: the filter tables, then the score tables.
pub fn cases() -> Vec<Case> {
    let mut cases = single_constraint();
    cases.extend(multiple_constraints());
    cases.extend(beyond_kube_filter_tests());
    cases.extend(scores());
    cases
}

fn single_constraint() -> Vec<Case> {
    let zone_foo = || spread(labelled(&["foo"]), 1, "zone", HARD, foo());
    let node_foo = |skew| spread(labelled(&["foo"]), skew, "node", HARD, foo());
    let mut in_namespaces = foo_on(&[0, 0, 2, 3]);
    in_namespaces[0].1.namespace = "ns1".into();
    in_namespaces[1].1.namespace = "ns2".into();
    let mut typo = four();
    typo[1] = machine("node-b", &[("zon", "zone1"), ("node", "node-b")]);
    let mut terminating = foo_on(&[0, 1]);
    terminating[0].1.terminating = true;
    let three = || named("abc", "node", &[]);
    let foo_nodes = || {
        let mut nodes = named("abxy", "node", &[("foo", "")]);
        nodes[3] = machine("node-y", &[("node", "node-y")]);
        nodes
    };
    let tainted_y = || {
        let mut nodes = named("abxy", "node", &[("foo", "")]);
        nodes[3] = with_taints(machine("node-y", &[("node", "node-y")]), TAINTED);
        nodes
    };
    vec![
        filter_row("no existing pods", zone_foo(), four(), vec![], "SSSS"),
        filter_row(
            "no existing pods, incoming pod doesn't match itself",
            spread(labelled(&["foo"]), 1, "zone", HARD, bar()),
            four(),
            vec![],
            "SSSS",
        ),
        filter_row(
            "existing pods in a different namespace do not count",
            zone_foo(),
            four(),
            in_namespaces,
            "SSUU",
        ),
        filter_row(
            "existing pods do not match null selector",
            spread(labelled(&["foo"]), 1, "zone", HARD, None),
            four(),
            foo_on(&[2, 3]),
            "SSSS",
        ),
        filter_row(
            "pods spread across zones as 3/3, all nodes fit",
            zone_foo(),
            four(),
            foo_on(&[0, 0, 1, 3, 3, 3]),
            "SSSS",
        ),
        filter_row(
            "pods spread across zones as 1/2 due to absence of label 'zone' on node-b",
            zone_foo(),
            typo,
            foo_on(&[0, 1, 2, 3]),
            "SRUU",
        ),
        filter_row(
            "pod cannot be scheduled as all nodes don't have label 'rack'",
            spread(labelled(&["foo"]), 1, "rack", HARD, foo()),
            vec![
                machine("node-a", &[("zone", "zone1"), ("node", "node-a")]),
                machine("node-x", &[("zone", "zone2"), ("node", "node-x")]),
            ],
            vec![],
            "RR",
        ),
        filter_row(
            "pods spread across nodes as 2/1/0/3, only node-x fits",
            node_foo(1),
            four(),
            foo_on(&[0, 0, 1, 3, 3, 3]),
            "UUSU",
        ),
        filter_row(
            "pods spread across nodes as 2/1/0/3, maxSkew is 2, node-b and node-x fit",
            node_foo(2),
            four(),
            foo_on(&[0, 0, 1, 3, 3, 3]),
            "USSU",
        ),
        filter_row(
            "pods spread across nodes as 2/1/0/3, but pod doesn't match itself",
            spread(labelled(&["bar"]), 1, "node", HARD, foo()),
            four(),
            foo_on(&[0, 0, 1, 3, 3, 3]),
            "USSU",
        ),
        filter_row(
            "incoming pod has nodeAffinity, pods spread as 2/~1~/~0~/3, hence node-a fits",
            node_affinity(node_foo(1), "node", "In", &["node-a", "node-y"]),
            four(),
            foo_on(&[0, 0, 1, 3, 3, 3]),
            "SSSU",
        ),
        filter_row(
            "terminating Pods should be excluded",
            node_foo(1),
            named("ab", "node", &[]),
            terminating,
            "SU",
        ),
        filter_row(
            "incoming pod has nodeAffinity, pods spread as 0/~2~/0/1, hence node-a fits",
            node_affinity(zone_foo(), "node", "NotIn", &["node-b"]),
            four(),
            foo_on(&[1, 1, 3]),
            "SSUU",
        ),
        filter_row(
            "pods spread across nodes as 2/2/1, maxSkew is 2, and the number of domains < minDomains, then the third node fits",
            min_domains(node_foo(2), 4),
            three(),
            foo_on(&[0, 0, 1, 1, 2]),
            "UUS",
        ),
        filter_row(
            "pods spread across nodes as 2/2/1, maxSkew is 2, and the number of domains > minDomains, then the all nodes fit",
            min_domains(node_foo(2), 2),
            three(),
            foo_on(&[0, 0, 1, 1, 2]),
            "SSS",
        ),
        filter_row(
            "pods spread across zone as 2/1, maxSkew is 2 and the number of domains < minDomains, then the third and fourth nodes fit",
            min_domains(spread(labelled(&["foo"]), 2, "zone", HARD, foo()), 3),
            four(),
            foo_on(&[0, 1, 3]),
            "UUSS",
        ),
        filter_row(
            "pods spread across zone as 2/1, maxSkew is 2 and the number of domains > minDomains, then the all nodes fit",
            min_domains(spread(labelled(&["foo"]), 2, "zone", HARD, foo()), 1),
            four(),
            foo_on(&[0, 1, 3]),
            "SSSS",
        ),
        filter_row(
            "NodeAffinityPolicy honored with labelSelectors",
            node_selector(node_foo(1), &[("foo", "")]),
            foo_nodes(),
            foo_on(&[0, 1, 3]),
            "UUSS",
        ),
        filter_row(
            "NodeAffinityPolicy ignored with labelSelectors",
            policies(node_selector(node_foo(1), &[("foo", "")]), "Ignore", ""),
            foo_nodes(),
            foo_on(&[0, 1, 3]),
            "UUSU",
        ),
        filter_row(
            "NodeAffinityPolicy honored with nodeAffinity",
            node_affinity(node_foo(1), "foo", "In", &[""]),
            foo_nodes(),
            foo_on(&[0, 1, 3]),
            "UUSS",
        ),
        filter_row(
            "NodeAffinityPolicy ignored with nodeAffinity",
            policies(node_affinity(node_foo(1), "foo", "In", &[""]), "Ignore", ""),
            foo_nodes(),
            foo_on(&[0, 1, 3]),
            "UUSU",
        ),
        filter_row(
            "NodeTaintsPolicy honored",
            policies(node_foo(1), "", "Honor"),
            tainted_y(),
            foo_on(&[0, 1, 3]),
            "UUSS",
        ),
        filter_row(
            "NodeTaintsPolicy ignored",
            node_foo(1),
            tainted_y(),
            foo_on(&[0, 1, 3]),
            "UUSU",
        ),
    ]
}

fn multiple_constraints() -> Vec<Case> {
    let zone_and_node = |keys: &[&str], zone, node| {
        spread(
            spread(labelled(keys), 1, "zone", HARD, zone),
            1,
            "node",
            HARD,
            node,
        )
    };
    let same = || zone_and_node(&["foo"], foo(), foo());
    let different = || zone_and_node(&["foo", "bar"], foo(), bar());
    let mut no_node_label = four();
    no_node_label[2] = machine("node-x", &[("zone", "zone2")]);
    let inclusion_nodes = |b_has_foo: bool, y_has_foo: bool, y_tainted: bool| {
        let mut nodes: Vec<NodeInfo> = [
            ("node-a", "zone1"),
            ("node-b", "zone1"),
            ("node-x", "zone2"),
            ("node-y", "zone2"),
        ]
        .iter()
        .map(|(name, zone)| machine(name, &[("zone", zone), ("node", name), ("foo", "")]))
        .collect();
        if !b_has_foo {
            nodes[1] = machine("node-b", &[("zone", "zone1"), ("node", "node-b")]);
        }
        if !y_has_foo {
            nodes[3] = machine("node-y", &[("zone", "zone2"), ("node", "node-y")]);
        }
        if y_tainted {
            nodes[3] = with_taints(nodes[3].clone(), TAINTED);
        }
        nodes
    };
    let zone_policy = |pod: Pod, affinity, taints| {
        let mut pod = pod;
        pod.topology_spread_constraints[0].node_affinity_policy = String::from(affinity);
        pod.topology_spread_constraints[0].node_taints_policy = String::from(taints);
        pod
    };
    vec![
        filter_row(
            "two Constraints on zone and node, spreads = [3/3, 2/1/0/3]",
            same(),
            four(),
            foo_on(&[0, 0, 1, 3, 3, 3]),
            "UUSU",
        ),
        filter_row(
            "two Constraints on zone and node, spreads = [3/4, 2/1/0/4]",
            same(),
            four(),
            foo_on(&[0, 0, 1, 3, 3, 3, 3]),
            "UUUU",
        ),
        filter_row(
            "Constraints hold different labelSelectors, spreads = [1/0, 1/0/0/1]",
            different(),
            four(),
            [foo_on(&[0]), on(&[3], &["bar"])].concat(),
            "UUSU",
        ),
        filter_row(
            "Constraints hold different labelSelectors, spreads = [1/0, 0/0/1/1]",
            different(),
            four(),
            [foo_on(&[0]), on(&[2, 3], &["bar"])].concat(),
            "UUUU",
        ),
        filter_row(
            "Constraints hold different labelSelectors, spreads = [2/3, 1/0/0/1]",
            different(),
            four(),
            [
                foo_on(&[0]),
                on(&[0], &["foo", "bar"]),
                foo_on(&[3]),
                on(&[3], &["foo", "bar"]),
                foo_on(&[3]),
            ]
            .concat(),
            "USUU",
        ),
        filter_row(
            "Constraints hold different labelSelectors but pod doesn't match itself on 'zone' constraint",
            zone_and_node(&["bar"], foo(), bar()),
            four(),
            [foo_on(&[0]), on(&[2, 3], &["bar"])].concat(),
            "SSUU",
        ),
        filter_row(
            "two Constraints on zone and node, absence of label 'node' on node-x, spreads = [1/1, 1/0/0/1]",
            same(),
            no_node_label,
            foo_on(&[0, 3]),
            "USRU",
        ),
        filter_row(
            "two node inclusion Constraints, zone: honor/ignore, node: ignore/ignore",
            policies(node_selector(same(), &[("foo", "")]), "Ignore", ""),
            inclusion_nodes(true, false, false),
            foo_on(&[0, 1, 3]),
            "UUSU",
        ),
        filter_row(
            "two node inclusion Constraints, zone: honor/honor, node: honor/ignore",
            zone_policy(same(), "", "Honor"),
            inclusion_nodes(true, false, true),
            foo_on(&[0, 1, 3]),
            "UUSU",
        ),
        filter_row(
            "two node inclusion Constraints, zone: honor/ignore, node: honor/ignore",
            node_selector(same(), &[("foo", "")]),
            inclusion_nodes(false, true, true),
            foo_on(&[0, 1, 3]),
            "USSU",
        ),
        filter_row(
            "two node inclusion Constraints, zone: honor/honor, node: ignore/ignore",
            policies(
                zone_policy(node_selector(same(), &[("foo", "")]), "", "Honor"),
                "Ignore",
                "",
            ),
            inclusion_nodes(false, true, true),
            foo_on(&[0, 1, 3]),
            "UUSU",
        ),
        filter_row(
            "two Constraints on zone, spreads = [3/3, 2/1]",
            spread(spread(labelled(&["foo", "bar"]), 1, "zone", HARD, bar()), 1, "zone", HARD, foo()),
            four(),
            [
                on(&[0], &["foo", "bar"]),
                foo_on(&[0]),
                on(&[1], &["foo", "bar"]),
                foo_on(&[3]),
                on(&[3], &["foo", "bar"]),
                foo_on(&[3]),
            ]
            .concat(),
            "UUSS",
        ),
    ]
}

/// Rows kube-scheduler's filter tests lack: `matchLabelKeys`, the empty selector, cluster
/// default constraints and a plan.
fn beyond_kube_filter_tests() -> Vec<Case> {
    let revision = |rev: &str| Pod {
        labels: labels(&[("app", "web"), ("rev", rev)]),
        ..pod("p")
    };
    let by_revision = with_last(spread(revision("1"), 1, "node", HARD, exists("app")), |c| {
        c.match_label_keys = vec!["rev".into()]
    });
    let everything = spread(
        labelled(&["foo"]),
        1,
        "node",
        HARD,
        Some(LabelSelector::default()),
    );
    let web = |mut pod: Pod| {
        pod.default_spread_selector = Some(LabelSelector {
            match_labels: labels(&[("app", "web")]),
            match_expressions: Vec::new(),
        });
        pod
    };
    let web_pods = || vec![(0, revision("0")), (0, revision("0"))];
    let listed = r#"{"defaultingType": "List", "defaultConstraints": [
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]}"#;
    vec![
        filter_row(
            "matchLabelKeys: only the pods of the pod's own revision count",
            by_revision,
            named("abc", "node", &[]),
            vec![(0, revision("0")), (0, revision("0")), (1, revision("1"))],
            "SUS",
        ),
        filter_row(
            "a selector without requirements counts no pod (kube-scheduler's countPodsMatchSelector quirk)",
            everything,
            named("ab", "node", &[]),
            foo_on(&[0, 0, 0]),
            "SS",
        ),
        filter_row(
            "listed default constraints apply to a pod with a default selector",
            web(revision("1")),
            four(),
            web_pods(),
            "UUSS",
        )
        .with_config(listed),
        filter_row(
            "without a default selector the listed defaults do not apply",
            revision("1"),
            four(),
            web_pods(),
            "SSSS",
        )
        .with_config(listed)
        .with_plan(FilterPlan::Skip),
        filter_row(
            "the system defaults only score",
            web(revision("1")),
            four(),
            web_pods(),
            "SSSS",
        )
        .with_plan(FilterPlan::Skip),
    ]
}

fn scores() -> Vec<Case> {
    let host = |skew| spread(labelled(&["foo"]), skew, HOSTNAME, SOFT, foo());
    let hosts = |letters| named(letters, HOSTNAME, &[]);
    let zoned = |with_hostname: bool| {
        [
            ("node-a", "zone1"),
            ("node-b", "zone1"),
            ("node-x", "zone2"),
            ("node-y", "zone2"),
        ]
        .iter()
        .map(|(name, zone)| {
            let mut pairs = vec![("zone", *zone)];
            if with_hostname {
                pairs.push((HOSTNAME, name));
            }
            machine(name, &pairs)
        })
        .collect::<Vec<_>>()
    };
    let four_three_two_one = || foo_on(&[0, 0, 0, 0, 1, 1, 1, 2, 2, 3]);
    let spread_4_2_1_3 = || foo_on(&[0, 0, 0, 0, 1, 1, 2, 3, 3, 3]);
    let mut missing_key = hosts("abxy");
    missing_key[1] = machine("node-b", &[("n", "node-b")]);
    let mut in_namespace = foo_on(&[0, 0, 1, 1]);
    in_namespace[0].1.namespace = "ns1".into();
    let mut terminating = foo_on(&[0, 1]);
    terminating[0].1.terminating = true;
    let zone_and_host = |zone_selector, host_selector| {
        spread(
            spread(labelled(&["foo", "bar"]), 1, "zone", SOFT, zone_selector),
            1,
            HOSTNAME,
            SOFT,
            host_selector,
        )
    };
    let node_key = |skew| spread(labelled(&["foo"]), skew, "node", SOFT, foo());
    let foo_abc = || {
        let mut nodes = named("abc", "node", &[("foo", "")]);
        nodes[2] = machine("node-c", &[("node", "node-c")]);
        nodes
    };
    let mut tainted_c = named("abc", "node", &[]);
    tainted_c[2] = with_taints(tainted_c[2].clone(), TAINTED);
    let mut by_service = labelled(&["foo"]);
    by_service.default_spread_selector = Some(LabelSelector {
        match_labels: labels(&[("foo", "")]),
        match_expressions: Vec::new(),
    });
    vec![
        score_row("one constraint on node, no existing pods", host(1), hosts("ab"), vec![], &[100, 100]),
        score_row(
            "one constraint on node, only one node is candidate",
            host(1),
            hosts("ab"),
            foo_on(&[0, 0, 1]),
            &[100],
        )
        .with_feasible(&[0]),
        score_row(
            "one constraint on node, all nodes have the same number of matching pods",
            host(1),
            hosts("ab"),
            foo_on(&[0, 1]),
            &[100, 100],
        ),
        score_row(
            "one constraint on node, all 4 nodes are candidates",
            host(1),
            hosts("abcd"),
            foo_on(&[0, 0, 1, 3, 3, 3]),
            &[20, 60, 100, 0],
        ),
        score_row(
            "one constraint on node, null selector",
            spread(labelled(&["foo"]), 1, HOSTNAME, SOFT, None),
            hosts("abcd"),
            foo_on(&[0, 0, 1, 3, 3, 3]),
            &[100, 100, 100, 100],
        ),
        score_row(
            "one constraint on node, all 4 nodes are candidates, maxSkew=2",
            host(2),
            hosts("abcd"),
            foo_on(&[0, 0, 1, 3, 3, 3]),
            &[33, 66, 100, 16],
        ),
        score_row(
            "one constraint on node, all 4 nodes are candidates, maxSkew=3",
            host(3),
            hosts("abcd"),
            four_three_two_one(),
            &[44, 66, 77, 100],
        ),
        score_row(
            "system defaulting, nodes don't have zone, pods match service",
            by_service,
            hosts("abcd"),
            four_three_two_one(),
            &[44, 66, 77, 100],
        ),
        score_row(
            "one constraint on node, 3 out of 4 nodes are candidates",
            host(1),
            hosts("abxy"),
            spread_4_2_1_3(),
            &[33, 83, 100],
        )
        .with_feasible(&[0, 1, 2]),
        score_row(
            "one constraint on node, 3 out of 4 nodes are candidates, one node doesn't match topology key",
            host(1),
            missing_key,
            spread_4_2_1_3(),
            &[16, 0, 100],
        )
        .with_feasible(&[0, 1, 2]),
        score_row(
            "one constraint on zone, 3 out of 4 nodes are candidates",
            spread(labelled(&["foo"]), 1, "zone", SOFT, foo()),
            zoned(true),
            spread_4_2_1_3(),
            &[75, 75, 100],
        )
        .with_feasible(&[0, 1, 2]),
        score_row(
            "two Constraints on zone and node, 2 out of 4 nodes are candidates",
            zone_and_host(foo(), foo()),
            zoned(true),
            foo_on(&[0, 0, 1, 2, 2, 3, 3, 3, 3]),
            &[100, 63],
        )
        .with_feasible(&[0, 2]),
        score_row(
            "two Constraints on zone, 2 out of 4 nodes are candidates",
            spread(
                spread(labelled(&["foo", "bar"]), 1, "zone", SOFT, foo()),
                1,
                "zone",
                SOFT,
                bar(),
            ),
            zoned(false),
            [
                on(&[0], &["foo", "bar"]),
                foo_on(&[0]),
                on(&[1], &["foo", "bar"]),
                foo_on(&[3]),
                on(&[3], &["foo", "bar"]),
                foo_on(&[3]),
            ]
            .concat(),
            &[85, 100],
        )
        .with_feasible(&[0, 2]),
        score_row(
            "two Constraints on zone and node, with different labelSelectors",
            zone_and_host(foo(), bar()),
            zoned(true),
            [foo_on(&[0]), on(&[1], &["foo", "bar"]), foo_on(&[3]), on(&[3], &["bar"])].concat(),
            &[60, 20, 100, 60],
        ),
        score_row(
            "two Constraints on zone and node, with different labelSelectors, some nodes have 0 pods",
            zone_and_host(foo(), bar()),
            zoned(true),
            [on(&[1], &["bar"]), foo_on(&[2]), on(&[3], &["foo", "bar"])].concat(),
            &[100, 60, 40, 0],
        ),
        score_row(
            "two Constraints on zone and node, with different labelSelectors, 3 out of 4 nodes are candidates",
            zone_and_host(foo(), bar()),
            zoned(true),
            [foo_on(&[0]), on(&[1], &["foo", "bar"]), foo_on(&[3]), on(&[3], &["bar"])].concat(),
            &[50, 25, 100],
        )
        .with_feasible(&[0, 1, 2]),
        score_row(
            "existing pods in a different namespace do not count",
            host(1),
            hosts("ab"),
            in_namespace,
            &[100, 33],
        ),
        score_row("terminating Pods should be excluded", host(1), hosts("ab"), terminating, &[100, 0]),
        score_row(
            "minDomains has no effect when ScheduleAnyway",
            min_domains(node_key(2), 10),
            named("abc", "node", &[]),
            foo_on(&[0, 0, 1, 1, 2]),
            &[75, 75, 100],
        ),
        score_row(
            "NodeAffinityPolicy honoed with labelSelectors",
            node_selector(node_key(1), &[("foo", "")]),
            foo_abc(),
            foo_on(&[0, 0, 1, 2]),
            &[0, 33, 100],
        ),
        score_row(
            "NodeAffinityPolicy ignored with labelSelectors",
            policies(node_selector(node_key(1), &[("foo", "")]), "Ignore", ""),
            foo_abc(),
            foo_on(&[0, 0, 1, 2]),
            &[66, 100, 100],
        ),
        score_row(
            "NodeAffinityPolicy honoed with nodeAffinity",
            node_affinity(node_key(1), "foo", "In", &[""]),
            foo_abc(),
            foo_on(&[0, 0, 1, 2]),
            &[0, 33, 100],
        ),
        score_row(
            "NodeAffinityPolicy ignored with nodeAffinity",
            policies(node_affinity(node_key(1), "foo", "In", &[""]), "Ignore", ""),
            foo_abc(),
            foo_on(&[0, 0, 1, 2]),
            &[66, 100, 100],
        ),
        score_row(
            "NodeTaintsPolicy honored",
            policies(node_key(1), "", "Honor"),
            tainted_c.clone(),
            foo_on(&[0, 0, 1, 2]),
            &[0, 33, 100],
        ),
        score_row(
            "NodeTaintsPolicy ignored",
            node_key(1),
            tainted_c,
            foo_on(&[0, 0, 1, 2]),
            &[66, 100, 100],
        ),
    ]
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_row_holds_natively() {
        wasched_sdk::testing::check::<crate::PodTopologySpread>(&super::cases());
    }
}
