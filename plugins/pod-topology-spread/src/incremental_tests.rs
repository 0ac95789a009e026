//! The counts the plugin keeps as pods come and go, checked after every step of random churn
//! against counts made from scratch (per selector and node, and per domain as kube-scheduler's
//! PreFilter counts them), and its answers against those of an instance that saw only the final
//! state.

use std::collections::HashMap;

use wasched_sdk::helpers::{tolerated_by_any, FastMap};
use wasched_sdk::node_selector::RequiredNodeAffinity;
use wasched_sdk::testing::{labels, pod, requirement, term, toleration, Walk};
use wasched_sdk::{
    Driver, ExistingPod, LabelSelector, LabelSelectorRequirement, Labels, NodeAffinity, NodeId,
    NodeInfo, Pod, PodId, PodPlan, Taint, TopologySpreadConstraint,
};

use crate::args::{Args, DO_NOT_SCHEDULE, HOSTNAME, SCHEDULE_ANYWAY};
use crate::constraints::constraints;
use crate::PodTopologySpread;

const NODES: u64 = 12;
const PODS: u64 = 40;
const KEYS: [&str; 3] = ["zone", "rack", HOSTNAME];
const CONFIGS: [&str; 2] = [
    "{}",
    r#"{"defaultingType": "List", "defaultConstraints": [
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
        {"maxSkew": 2, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}]}"#,
];

fn random_node(walk: &mut Walk, id: NodeId) -> NodeInfo {
    let mut pairs = vec![(HOSTNAME.to_string(), format!("h{}", id % 9))];
    if walk.below(8) != 0 {
        pairs.push(("zone".into(), walk.pick(&["z1", "z2", "z3"]).into()));
    }
    if walk.below(3) != 0 {
        pairs.push(("rack".into(), walk.pick(&["r1", "r2"]).into()));
    }
    if walk.below(3) == 0 {
        pairs.push(("disk".into(), "ssd".into()));
    }
    let taints = if walk.below(5) == 0 {
        vec![Taint {
            key: "dedicated".into(),
            value: "gpu".into(),
            effect: walk.pick(&["NoSchedule", "PreferNoSchedule"]).into(),
        }]
    } else {
        Vec::new()
    };
    NodeInfo {
        name: format!("node-{id}"),
        labels: Labels::new(pairs),
        taints,
        ..NodeInfo::default()
    }
}

fn random_selector(walk: &mut Walk) -> Option<LabelSelector> {
    let expression = |key: &str, operator: &str, values: Vec<String>| LabelSelectorRequirement {
        key: key.into(),
        operator: operator.into(),
        values,
    };
    match walk.below(8) {
        0 => None,
        1 => Some(LabelSelector::default()),
        2 => Some(LabelSelector {
            match_labels: Labels::default(),
            match_expressions: vec![expression("tier", "Exists", vec![])],
        }),
        3 => Some(LabelSelector {
            match_labels: Labels::default(),
            match_expressions: vec![expression("app", "NotIn", vec!["a".into()])],
        }),
        _ => Some(LabelSelector {
            match_labels: labels(&[("app", walk.pick(&["a", "b", "c"]))]),
            match_expressions: Vec::new(),
        }),
    }
}

fn random_pod(walk: &mut Walk, name: &str) -> Pod {
    let mut pod = pod(name);
    pod.namespace = walk.pick(&["n1", "n2"]).into();
    let mut pairs = vec![
        ("app", walk.pick(&["a", "b", "c"])),
        ("rev", walk.pick(&["1", "2"])),
    ];
    if walk.below(2) == 0 {
        pairs.push(("tier", "web"));
    }
    pod.labels = labels(&pairs);
    pod.terminating = walk.below(10) == 0;
    pod
}

fn random_incoming(walk: &mut Walk) -> Pod {
    let mut pod = random_pod(walk, "incoming");
    pod.terminating = false;
    for _ in 0..walk.below(4) {
        pod.topology_spread_constraints
            .push(TopologySpreadConstraint {
                max_skew: 1 + walk.below(2) as i32,
                topology_key: walk.pick(&KEYS).into(),
                when_unsatisfiable: walk.pick(&[DO_NOT_SCHEDULE, SCHEDULE_ANYWAY]).into(),
                label_selector: random_selector(walk),
                min_domains: (walk.below(4) == 0).then(|| 1 + walk.below(4) as i32),
                node_affinity_policy: walk.pick(&["", "Honor", "Ignore"]).into(),
                node_taints_policy: walk.pick(&["", "Honor", "Ignore"]).into(),
                match_label_keys: if walk.below(3) == 0 {
                    vec!["rev".into()]
                } else {
                    Vec::new()
                },
            });
    }
    if pod.topology_spread_constraints.is_empty() && walk.below(2) == 0 {
        pod.default_spread_selector = random_selector(walk);
    }
    match walk.below(4) {
        0 => pod.node_selector = labels(&[("disk", "ssd")]),
        1 => {
            pod.node_affinity = Some(NodeAffinity {
                required: Some(vec![term(vec![requirement("zone", "In", &["z1", "z2"])])]),
                preferred: Vec::new(),
            })
        }
        _ => {}
    }
    if walk.below(2) == 0 {
        pod.tolerations
            .push(toleration("dedicated", "Equal", "gpu", "NoSchedule"));
    }
    pod
}

/// Per tally: the matching pods per node and per node name, counted from the mirror.
fn assert_tallies_are_from_scratch(driver: &Driver<PodTopologySpread>, when: &str) {
    let (plugin, nodes) = (driver.plugin(), driver.nodes());
    for tally in plugin.tallies.iter() {
        let mut per_node: FastMap<NodeId, u32> = FastMap::default();
        let mut per_name: FastMap<String, u32> = FastMap::default();
        for (_, pod) in nodes.pods() {
            if !pod.terminating
                && pod.namespace == tally.namespace
                && tally.selector.matches(pod.labels)
            {
                *per_node.entry(pod.node).or_insert(0) += 1;
                let name = nodes.get(pod.node).map_or("", |n| n.name.as_str());
                *per_name.entry(name.to_string()).or_insert(0) += 1;
            }
        }
        let counted: FastMap<NodeId, u32> =
            tally.per_node.iter().map(|(&id, n, _)| (id, n)).collect();
        assert_eq!(counted, per_node, "{when}: {:?}", tally.selector);
        assert_eq!(tally.per_name, per_name, "{when}: {:?}", tally.selector);
    }
}

/// kube-scheduler's PreFilter counts, by brute force over every node and pod: per
/// `DoNotSchedule` constraint, the matching pods per domain of the eligible nodes.
fn prefilter_counts(driver: &Driver<PodTopologySpread>, pod: &Pod) -> Vec<HashMap<String, i64>> {
    let nodes = driver.nodes();
    let hard = constraints(pod, &driver.plugin().args, DO_NOT_SCHEDULE);
    let required = RequiredNodeAffinity::of(pod);
    hard.iter()
        .map(|c| {
            let mut counts = HashMap::new();
            for id in nodes.ids() {
                let node = nodes.get(id).expect("listed");
                let has_keys = hard
                    .iter()
                    .all(|k| node.labels.get(&k.topology_key).is_some());
                let tolerated = node
                    .taints
                    .iter()
                    .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
                    .all(|t| tolerated_by_any(&pod.tolerations, t));
                if !has_keys
                    || (c.honor_affinity && !required.matches(node))
                    || (c.honor_taints && !tolerated)
                    || c.selector.counts_nothing()
                {
                    continue;
                }
                let matching = nodes
                    .pods_on(id)
                    .filter(|(_, p)| {
                        !p.terminating
                            && p.namespace == pod.namespace
                            && c.selector.matches(p.labels)
                    })
                    .count() as i64;
                if matching > 0 {
                    let value = node.labels.get(&c.topology_key).expect("has the keys");
                    *counts.entry(value.to_string()).or_insert(0) += matching;
                }
            }
            counts
        })
        .collect()
}

/// What an instance answers for `pod`: its plan and its normalized scores over every node.
fn answers(driver: &mut Driver<PodTopologySpread>, pod: &Pod) -> (PodPlan, Vec<i64>) {
    let plan = driver.set_pod(pod.clone());
    let ids: Vec<NodeId> = driver.nodes().ids().collect();
    let mut scores = Vec::new();
    if plan.score {
        driver.score(&ids, &mut scores);
        driver.normalize(&mut scores);
    }
    (plan, scores)
}

/// A new instance given only the mirror's present state.
fn from_scratch(driver: &Driver<PodTopologySpread>, config: &str) -> Driver<PodTopologySpread> {
    let nodes = driver.nodes();
    let mut fresh = Driver::<PodTopologySpread>::new(config).unwrap();
    fresh.upsert_nodes(nodes.ids().map(|id| (id, nodes.get(id).unwrap().clone())));
    let pods: Vec<(PodId, ExistingPod)> = nodes
        .pods()
        .map(|(id, p)| (id, p.to_existing_pod()))
        .collect();
    fresh.upsert_pods(pods);
    fresh
}

#[test]
fn counts_kept_through_churn_equal_counts_from_scratch() {
    for seed in 0..12 {
        let config = CONFIGS[seed as usize % CONFIGS.len()];
        let mut walk = Walk(seed);
        let mut driver = Driver::<PodTopologySpread>::new(config).unwrap();
        let mut checked = 0;
        for step in 0..1_500 {
            let when = format!("seed {seed}, step {step}");
            match walk.below(10) {
                0 | 1 => {
                    let id = walk.below(NODES) as NodeId;
                    driver.upsert_nodes([(id, random_node(&mut walk, id))]);
                }
                2 => {
                    let id = walk.below(NODES) as NodeId;
                    if walk.below(2) == 0 {
                        let on: Vec<PodId> = driver.nodes().pods_on(id).map(|(p, _)| p).collect();
                        driver.remove_pods(&on);
                    }
                    driver.remove_nodes(&[id]);
                }
                3..=5 => {
                    // An assumed or newly watched pod, or one that moved.
                    let present: Vec<NodeId> = driver.nodes().ids().collect();
                    if !present.is_empty() {
                        let node = present[walk.below(present.len() as u64) as usize];
                        let id = walk.below(PODS) as PodId;
                        let placed = random_pod(&mut walk, &format!("p{id}"));
                        driver.upsert_pods([(id, ExistingPod::of(&placed, node))]);
                    }
                }
                6 => {
                    let id = walk.below(PODS) as PodId;
                    driver.remove_pods(&[id]);
                }
                _ => {
                    let incoming = random_incoming(&mut walk);
                    let kept = answers(&mut driver, &incoming);
                    let expected = prefilter_counts(&driver, &incoming);
                    let plugin = driver.plugin();
                    let prepared: Vec<HashMap<String, i64>> = plugin.domains[..plugin.filter.len()]
                        .iter()
                        .map(|d| d.current())
                        .collect();
                    assert_eq!(
                        prepared, expected,
                        "{when}: PreFilter counts for {incoming:?}"
                    );
                    let fresh = answers(&mut from_scratch(&driver, config), &incoming);
                    assert_eq!(kept, fresh, "{when}: answers for {incoming:?}");
                    let plugin = driver.plugin();
                    for (key, eligibility) in plugin.eligibility.current(driver.nodes()) {
                        if let Some(difference) =
                            eligibility.differs_from_computed(key, driver.nodes())
                        {
                            panic!("{when}: eligible nodes of {key:?}: {difference}");
                        }
                    }
                    checked += 1;
                }
            }
            assert_tallies_are_from_scratch(&driver, &when);
        }
        assert!(checked > 200, "seed {seed}: the walk asked few questions");
        assert!(
            driver.plugin().tallies.iter().count() > 3,
            "seed {seed}: the walk made few tallies"
        );
    }
}

#[test]
fn the_least_recently_used_tallies_are_dropped_beyond_capacity() {
    let mut driver = Driver::<PodTopologySpread>::new("{}").unwrap();
    driver.upsert_nodes([(0, random_node(&mut Walk(1), 0))]);
    for i in 0..crate::counts::TALLY_CAPACITY + 100 {
        let mut incoming = pod("incoming");
        incoming
            .topology_spread_constraints
            .push(TopologySpreadConstraint {
                max_skew: 1,
                topology_key: "zone".into(),
                when_unsatisfiable: DO_NOT_SCHEDULE.into(),
                label_selector: Some(LabelSelector {
                    match_labels: labels(&[("app", &format!("app-{i}"))]),
                    match_expressions: Vec::new(),
                }),
                ..TopologySpreadConstraint::default()
            });
        driver.set_pod(incoming);
    }
    assert_eq!(
        driver.plugin().tallies.iter().count(),
        crate::counts::TALLY_CAPACITY
    );
    let _ = Args::parse("{}");
}

#[test]
fn eligible_nodes_are_worked_out_again_only_when_nodes_change() {
    let mut walk = Walk(3);
    let mut driver = Driver::<PodTopologySpread>::new("{}").unwrap();
    driver.upsert_nodes((0..NODES as NodeId).map(|id| (id, random_node(&mut walk, id))));
    let spread = |driver: &mut Driver<PodTopologySpread>, k: u64| {
        let mut questions = Walk(k);
        let mut incoming = random_pod(&mut questions, "incoming");
        incoming.terminating = false;
        incoming.topology_spread_constraints = vec![TopologySpreadConstraint {
            max_skew: 1,
            topology_key: "zone".into(),
            when_unsatisfiable: DO_NOT_SCHEDULE.into(),
            label_selector: random_selector(&mut questions),
            ..TopologySpreadConstraint::default()
        }];
        driver.set_pod(incoming);
    };
    for k in 0..50 {
        spread(&mut driver, k);
        let placed = random_pod(&mut walk, &format!("p{k}"));
        driver.upsert_pods([(k as PodId, ExistingPod::of(&placed, (k % NODES) as NodeId))]);
    }
    assert_eq!(
        driver.plugin().eligibility.computed,
        1,
        "pods come and go, nodes stay"
    );
    driver.upsert_nodes([(0, random_node(&mut walk, 0))]);
    spread(&mut driver, 99);
    let eligibility = &driver.plugin().eligibility;
    assert_eq!(
        (eligibility.computed, eligibility.caught_up),
        (1, 1),
        "a node changed: it alone is read again"
    );

    // With nodeAffinityPolicy Honor, the node selector decides which nodes count; preferred
    // node affinity does not, so pods that differ only there share one entry.
    for rack in ["r1", "r2", "r3"] {
        let mut incoming = random_pod(&mut Walk(5), "incoming");
        incoming.terminating = false;
        incoming.node_selector = labels(&[("disk", "ssd")]);
        incoming.node_affinity = Some(NodeAffinity {
            required: None,
            preferred: vec![wasched_sdk::PreferredSchedulingTerm {
                weight: 10,
                preference: term(vec![requirement("rack", "In", &[rack])]),
            }],
        });
        incoming.topology_spread_constraints = vec![TopologySpreadConstraint {
            max_skew: 1,
            topology_key: "zone".into(),
            when_unsatisfiable: DO_NOT_SCHEDULE.into(),
            label_selector: random_selector(&mut Walk(5)),
            ..TopologySpreadConstraint::default()
        }];
        driver.set_pod(incoming);
    }
    assert_eq!(
        driver.plugin().eligibility.computed,
        2,
        "one more for the node selector, none for each preference"
    );
}
