//! The counts the plugin keeps as pods come and go, checked against counts made from scratch
//! after every step of random churn; and its answers against those of an instance that saw only
//! the final state.

use std::collections::HashMap;

use wasched_sdk::testing::{labels, pod, Walk};
use wasched_sdk::{
    Driver, ExistingPod, ExistingPodRef, LabelSelector, LabelSelectorRequirement, Labels, NodeId,
    NodeInfo, Nodes, Plugin, Pod, PodAffinityTerm, PodId, WeightedPodAffinityTerm,
};

use crate::state::Counts;
use crate::terms::OwnedTerm;
use crate::InterPodAffinity;

const NODES: u64 = 12;
const PODS: u64 = 40;
const KEYS: [&str; 3] = ["zone", "region", "kubernetes.io/hostname"];

fn random_node(walk: &mut Walk, id: NodeId) -> NodeInfo {
    let mut pairs = vec![("kubernetes.io/hostname".to_string(), format!("h{}", id % 9))];
    if walk.below(10) != 0 {
        pairs.push(("zone".into(), walk.pick(&["z1", "z2", "z3"]).into()));
    }
    if walk.below(3) != 0 {
        pairs.push(("region".into(), walk.pick(&["r1", "r2"]).into()));
    }
    NodeInfo {
        name: format!("node-{id}"),
        labels: Labels::new(pairs),
        ..NodeInfo::default()
    }
}

fn random_term(walk: &mut Walk) -> PodAffinityTerm {
    let requirement = match walk.below(3) {
        0 => ("app", "In", vec![walk.pick(&["a", "b", "c"]).to_string()]),
        1 => ("tier", "Exists", vec![]),
        _ => ("app", "NotIn", vec!["a".to_string()]),
    };
    PodAffinityTerm {
        label_selector: (walk.below(12) != 0).then(|| LabelSelector {
            match_labels: Labels::default(),
            match_expressions: vec![LabelSelectorRequirement {
                key: requirement.0.into(),
                operator: requirement.1.into(),
                values: requirement.2,
            }],
        }),
        namespaces: if walk.below(4) == 0 {
            vec!["n2".into()]
        } else {
            vec![]
        },
        namespace_selector: match walk.below(6) {
            0 => Some(LabelSelector::default()),
            1 => Some(LabelSelector {
                match_labels: labels(&[("team", "blue")]),
                match_expressions: Vec::new(),
            }),
            _ => None,
        },
        topology_key: walk.pick(&KEYS).into(),
    }
}

fn random_pod(walk: &mut Walk, name: &str) -> Pod {
    let mut pod = pod(name);
    pod.namespace = walk.pick(&["n1", "n2", "n3"]).into();
    let mut pairs = vec![("app", walk.pick(&["a", "b", "c"]))];
    if walk.below(2) == 0 {
        pairs.push(("tier", "web"));
    }
    pod.labels = labels(&pairs);
    let affinity = &mut pod.pod_affinity;
    for list in [
        &mut affinity.required_affinity,
        &mut affinity.required_anti_affinity,
    ] {
        for _ in 0..walk.below(4).saturating_sub(2) {
            list.push(random_term(walk));
        }
    }
    for list in [
        &mut affinity.preferred_affinity,
        &mut affinity.preferred_anti_affinity,
    ] {
        for _ in 0..walk.below(4).saturating_sub(2) {
            let term = random_term(walk);
            let weight = 1 + walk.below(100) as i32;
            list.push(WeightedPodAffinityTerm { weight, term });
        }
    }
    pod
}

fn node_labels<'a>(nodes: &'a Nodes, pod: ExistingPodRef<'_>, none: &'a Labels) -> &'a Labels {
    nodes.get(pod.node).map_or(none, |n| &n.labels)
}

fn assert_counts_are_from_scratch(driver: &Driver<InterPodAffinity>, when: &str) {
    let (plugin, nodes) = (driver.plugin(), driver.nodes());
    let none = Labels::default();
    for tally in plugin.tallies.iter() {
        let mut expected = vec![Counts::default(); tally.terms.len()];
        for (_, pod) in nodes.pods() {
            if tally
                .terms
                .iter()
                .all(|t| t.matches(pod.namespace, pod.labels))
            {
                let labels = node_labels(nodes, pod, &none);
                for (term, counts) in tally.terms.iter().zip(&mut expected) {
                    if let Some(value) = labels.get(&term.topology_key) {
                        counts.add(value, true);
                    }
                }
            }
        }
        assert_eq!(tally.counts, expected, "{when}: tally of {:?}", tally.terms);
    }
    let mut anti: HashMap<OwnedTerm, (u32, Counts)> = HashMap::new();
    for (_, pod) in nodes.pods() {
        for term in &pod.pod_affinity.required_anti_affinity {
            let term = OwnedTerm::of(term, pod.namespace);
            let value = node_labels(nodes, pod, &none)
                .get(&term.topology_key)
                .map(String::from);
            let entry = anti.entry(term).or_default();
            entry.0 += 1;
            if let Some(value) = value {
                entry.1.add(&value, true);
            }
        }
    }
    let kept: HashMap<OwnedTerm, (u32, Counts)> = plugin
        .existing_anti_affinity
        .iter()
        .map(|(term, group)| (term.clone(), (group.pods, group.counts.clone())))
        .collect();
    assert_eq!(kept, anti, "{when}: placed pods' anti-affinity groups");
}

/// What an instance answers for `pod`: its plan and its normalized scores over every node.
fn answers(driver: &mut Driver<InterPodAffinity>, pod: &Pod) -> (wasched_sdk::PodPlan, Vec<i64>) {
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
fn from_scratch(driver: &Driver<InterPodAffinity>) -> Driver<InterPodAffinity> {
    let nodes = driver.nodes();
    let mut fresh = Driver::<InterPodAffinity>::new("{}").unwrap();
    fresh.upsert_namespaces(nodes.namespaces().map(|(n, l)| (n.to_string(), l.clone())));
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
        let mut walk = Walk(seed);
        let mut driver = Driver::<InterPodAffinity>::new("{}").unwrap();
        for step in 0..1_500 {
            let when = format!("seed {seed}, step {step}");
            match walk.below(12) {
                0 | 1 => {
                    let id = walk.below(NODES) as NodeId;
                    driver.upsert_nodes([(id, random_node(&mut walk, id))]);
                }
                2 => {
                    let id = walk.below(NODES) as NodeId;
                    // The host removes a node's pods first; now and then it does not, to check
                    // the mirror does.
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
                7 => {
                    let name = walk.pick(&["n1", "n2", "n3"]);
                    if walk.below(3) == 0 {
                        driver.remove_namespaces([name]);
                    } else {
                        let team = walk.pick(&["blue", "red"]);
                        driver.upsert_namespaces([(name.to_string(), labels(&[("team", team)]))]);
                    }
                }
                _ => {
                    let incoming = random_pod(&mut walk, "incoming");
                    let kept = answers(&mut driver, &incoming);
                    let fresh = answers(&mut from_scratch(&driver), &incoming);
                    assert_eq!(kept, fresh, "{when}: answers for {incoming:?}");
                }
            }
            assert_counts_are_from_scratch(&driver, &when);
        }
        assert!(
            driver.plugin().tallies.iter().count() > 5,
            "seed {seed}: the walk asked few questions"
        );
    }
}

#[test]
fn the_least_recently_used_tallies_are_dropped_beyond_capacity() {
    let mut driver = Driver::<InterPodAffinity>::new("{}").unwrap();
    driver.upsert_nodes([(0, random_node(&mut Walk(1), 0))]);
    for i in 0..crate::state::TALLY_CAPACITY + 100 {
        let mut incoming = pod("incoming");
        let selector = LabelSelector {
            match_labels: labels(&[("app", &format!("app-{i}"))]),
            match_expressions: Vec::new(),
        };
        incoming
            .pod_affinity
            .required_anti_affinity
            .push(PodAffinityTerm {
                label_selector: Some(selector),
                topology_key: "zone".into(),
                ..PodAffinityTerm::default()
            });
        driver.set_pod(incoming);
    }
    assert_eq!(
        driver.plugin().tallies.iter().count(),
        crate::state::TALLY_CAPACITY
    );
    let _ = <InterPodAffinity as Plugin>::NAME;
}
