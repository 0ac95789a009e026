use super::*;
use proptest::prelude::*;
use wasched_core::runtime::defaults;

/// Default plugin `name` as a component and natively.
fn instances(name: &str) -> (ComponentInstance, Box<dyn PluginInstance>) {
    let plugin = defaults::find(name).expect("a default plugin");
    let factory = WasmRuntime::shared()
        .load(name, crate::embedded::component(plugin), Limits::default())
        .expect("loads");
    let wasm = factory.instance("{}").expect("instantiates");
    let native = (plugin.native)().instantiate("{}").expect("instantiates");
    (wasm, native)
}

/// Node `i` of four: its own hostname, zone `a` or `b`, 4 cpus.
fn node(i: u32) -> sdk::NodeInfo {
    let name = format!("n{i}");
    let zone = if i.is_multiple_of(2) { "a" } else { "b" };
    sdk::NodeInfo {
        labels: [
            ("kubernetes.io/hostname", name.as_str()),
            ("topology.kubernetes.io/zone", zone),
        ]
        .into_iter()
        .collect(),
        name,
        allocatable: sdk::Resources {
            milli_cpu: 4000,
            memory: 1 << 34,
            pods: 110,
            ..sdk::Resources::default()
        },
        ..sdk::NodeInfo::default()
    }
}

fn app(i: u8) -> sdk::Labels {
    [("app", format!("a{i}"))].into_iter().collect()
}

fn placed(node: u32, app_of: u8) -> sdk::ExistingPod {
    sdk::ExistingPod {
        node,
        namespace: "default".into(),
        labels: app(app_of),
        ..sdk::ExistingPod::default()
    }
}

fn selecting(i: u8) -> Option<sdk::LabelSelector> {
    Some(sdk::LabelSelector {
        match_labels: app(i),
        match_expressions: Vec::new(),
    })
}

fn term(i: u8, key: &str) -> sdk::PodAffinityTerm {
    sdk::PodAffinityTerm {
        label_selector: selecting(i),
        topology_key: key.into(),
        ..sdk::PodAffinityTerm::default()
    }
}

/// A pod of app `a<i>` that, by `kind`, keeps off nodes with `a<i+1>` pods, prefers zones
/// with `a<i+2>` pods, or spreads over zones with its own app.
fn pod(i: u8, kind: u8) -> sdk::Pod {
    let mut pod = sdk::Pod {
        namespace: "default".into(),
        name: format!("p{i}-{kind}"),
        labels: app(i),
        requests: sdk::Resources {
            milli_cpu: 500,
            ..sdk::Resources::default()
        },
        non_zero_requests: sdk::Resources {
            milli_cpu: 500,
            memory: 200 << 20,
            ..sdk::Resources::default()
        },
        ..sdk::Pod::default()
    };
    match kind {
        0 => pod
            .pod_affinity
            .required_anti_affinity
            .push(term((i + 1) % 3, "kubernetes.io/hostname")),
        1 => pod
            .pod_affinity
            .preferred_affinity
            .push(sdk::WeightedPodAffinityTerm {
                weight: 10,
                term: term((i + 2) % 3, "topology.kubernetes.io/zone"),
            }),
        _ => pod
            .topology_spread_constraints
            .push(sdk::TopologySpreadConstraint {
                max_skew: 1,
                topology_key: "topology.kubernetes.io/zone".into(),
                when_unsatisfiable: "DoNotSchedule".into(),
                label_selector: selecting(i),
                ..sdk::TopologySpreadConstraint::default()
            }),
    }
    pod
}

#[derive(Debug, Clone)]
enum Step {
    Place {
        pod: u32,
        node: u32,
        app: u8,
    },
    Remove {
        pod: u32,
    },
    Usage {
        node: u32,
        milli_cpu: i64,
    },
    /// Node `node` sent again, with a `PreferNoSchedule` taint or without.
    Taint {
        node: u32,
        tainted: bool,
    },
    Schedule {
        app: u8,
        kind: u8,
    },
    Filter,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0u32..6, 0u32..4, 0u8..3).prop_map(|(pod, node, app)| Step::Place { pod, node, app }),
        (0u32..6).prop_map(|pod| Step::Remove { pod }),
        (0u32..4, 0i64..4000).prop_map(|(node, milli_cpu)| Step::Usage { node, milli_cpu }),
        (0u32..4, any::<bool>()).prop_map(|(node, tainted)| Step::Taint { node, tainted }),
        (0u8..3, 0u8..3).prop_map(|(app, kind)| Step::Schedule { app, kind }),
        Just(Step::Filter),
    ]
}

/// Node `i`, with a `PreferNoSchedule` taint that no test pod tolerates when `tainted`.
fn tainted_node(i: u32, tainted: bool) -> sdk::NodeInfo {
    let mut node = node(i);
    if tainted {
        node.taints.push(sdk::Taint {
            key: "spot".into(),
            value: "true".into(),
            effect: "PreferNoSchedule".into(),
        });
    }
    node
}

/// What an instance answers to `step` (nothing for a mirror update).
fn answer(
    instance: &mut dyn PluginInstance,
    step: &Step,
) -> Option<(sdk::PodPlan, sdk::FilterResults, Vec<i64>)> {
    let ids = [0, 1, 2, 3];
    match *step {
        Step::Place { pod, node, app } => {
            instance.upsert_pods(&[(pod, placed(node, app))]).unwrap();
            None
        }
        Step::Remove { pod } => {
            instance.remove_pods(&[pod]).unwrap();
            None
        }
        Step::Usage { node, milli_cpu } => {
            let usage = sdk::NodeUsage {
                requested: sdk::Resources {
                    milli_cpu,
                    ..sdk::Resources::default()
                },
                non_zero_requested: sdk::Resources {
                    milli_cpu,
                    ..sdk::Resources::default()
                },
                pod_count: 1,
            };
            instance.update_usage(&[(node, &usage)]).unwrap();
            None
        }
        Step::Taint { node, tainted } => {
            instance
                .upsert_nodes(&[(node, &tainted_node(node, tainted))])
                .unwrap();
            None
        }
        Step::Schedule { app, kind } => {
            let plan = instance.set_pod(&pod(app, kind)).unwrap();
            let mut results = sdk::FilterResults::default();
            if matches!(plan.filter, sdk::FilterPlan::Run) && instance.descriptor().filter {
                instance.filter(&ids, &mut results).unwrap();
            }
            let mut scores = Vec::new();
            if plan.score && instance.descriptor().score {
                instance.score(&ids, &mut scores).unwrap();
            }
            Some((plan, results, scores))
        }
        // Updates held back must reach the mirror before a filter that follows them.
        Step::Filter => {
            let mut results = sdk::FilterResults::default();
            if instance.descriptor().filter {
                instance.filter(&ids, &mut results).unwrap();
            }
            Some((sdk::PodPlan::default(), results, Vec::new()))
        }
    }
}

/// How the host sends a component its pods and held-back updates.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Sending {
    /// As bytes, with the plan back as a number when it can be ([`PLAIN_PLANS_INTERFACE`]: what
    /// the SDK's components get).
    Encoded,
    /// As bytes, with every plan back as a record ([`ENCODED_INTERFACE`] alone).
    EncodedPlansAsRecords,
    /// As WIT records, through [`BATCHED_INTERFACE`].
    Batched,
    /// Each update at once, through the plain exports.
    Plain,
}

/// Default plugin `name` as a component sent its pods `sending`, and natively.
fn instances_sending(name: &str, sending: Sending) -> (ComponentInstance, Box<dyn PluginInstance>) {
    let (mut wasm, native) = instances(name);
    assert!(
        wasm.encoded.is_some() && wasm.batched.is_some() && wasm.plain_plans.is_some(),
        "the SDK exports {ENCODED_INTERFACE}, {BATCHED_INTERFACE} and {PLAIN_PLANS_INTERFACE}"
    );
    if sending != Sending::Encoded {
        wasm.plain_plans = None;
    }
    if !matches!(sending, Sending::Encoded | Sending::EncodedPlansAsRecords) {
        wasm.encoded = None;
    }
    if sending == Sending::Plain {
        wasm.batched = None;
    }
    let volumes = wasm
        .descriptor
        .reads_existing_pods
        .contains(sdk::ExistingPodParts::VOLUMES);
    wasm.held = Held::for_exports(wasm.encoded.is_some(), wasm.batched.is_some(), volumes);
    (wasm, native)
}

#[test]
fn held_back_updates_go_with_the_next_pod_in_one_call() {
    for sending in [
        Sending::Encoded,
        Sending::EncodedPlansAsRecords,
        Sending::Batched,
    ] {
        held_back_updates_go_with_the_next_pod_sent(sending);
    }
}

fn held_back_updates_go_with_the_next_pod_sent(sending: Sending) {
    let (mut wasm, _) = instances_sending("InterPodAffinity", sending);
    let nodes: Vec<sdk::NodeInfo> = (0..4).map(node).collect();
    let entries: Vec<(u32, &sdk::NodeInfo)> = (0u32..).zip(&nodes).collect();
    wasm.upsert_nodes(&entries).unwrap();
    let keeps_off_a1 = pod(0, 0);

    let before = wasm.calls;
    wasm.upsert_pods(&[(7, placed(1, 1))]).unwrap();
    assert_eq!(wasm.calls, before, "the pod is held back");
    let plan = wasm.set_pod(&keeps_off_a1).unwrap();
    // A plan listing nodes is not a number: `last-plan` gives it.
    let plan_calls = if sending == Sending::Encoded { 2 } else { 1 };
    assert_eq!(
        wasm.calls,
        before + plan_calls,
        "the held pod and the next in one call, then last-plan for a plan listing nodes \
         ({sending:?})"
    );
    assert_eq!(
        !wasm.input.is_empty(),
        sending != Sending::Batched,
        "only the encoded interface is sent bytes"
    );
    match plan.filter {
        sdk::FilterPlan::FailingNodes { nodes, .. } => assert_eq!(nodes, vec![1]),
        other => panic!("the a1 pod on n1 was not in the mirror: {other:?}"),
    }
    let before = wasm.calls;
    let again = wasm.set_pod(&keeps_off_a1).unwrap();
    assert_eq!(
        wasm.calls,
        before + 1,
        "after a plan that was not a number, the next comes as a record in one call ({sending:?})"
    );
    assert!(matches!(again.filter, sdk::FilterPlan::FailingNodes { .. }));

    let before = wasm.calls;
    wasm.remove_pods(&[7]).unwrap();
    assert_eq!(wasm.calls, before, "the removal is held back");
    let mut scores = Vec::new();
    wasm.score(&[0, 1, 2, 3], &mut scores).unwrap();
    assert_eq!(wasm.calls, before + 2, "remove-pods, then score");
    let plan = wasm.set_pod(&keeps_off_a1).unwrap();
    assert_eq!(wasm.calls, before + 3, "nothing held: one set-pod");
    assert_eq!(
        plan.filter,
        sdk::FilterPlan::Skip,
        "the pod left the mirror"
    );
    assert!(
        !wasm.plans_follow,
        "after a skip, the next pod goes through apply-and-plan again"
    );
}

#[test]
fn usage_after_a_placement_goes_with_the_next_filter_or_score_of_a_plugin_whose_plans_ignore_it() {
    for name in ["NodeResourcesFit", "NodeResourcesBalancedAllocation"] {
        let (wasm, native) = instances(name);
        assert!(wasm.descriptor.plan_ignores_usage, "{name} says so");
        assert!(
            native.descriptor().plan_ignores_usage,
            "{name}, natively too"
        );
        assert!(
            wasm.usage_with_calls.is_some(),
            "{USAGE_WITH_CALLS_INTERFACE}"
        );
    }
    let (mut wasm, _) = instances("NodeResourcesFit");
    let nodes: Vec<sdk::NodeInfo> = (0..2).map(node).collect();
    let entries: Vec<(u32, &sdk::NodeInfo)> = (0u32..).zip(&nodes).collect();
    wasm.upsert_nodes(&entries).unwrap();
    let pod = sdk::Pod {
        requests: sdk::Resources {
            milli_cpu: 1000,
            ..sdk::Resources::default()
        },
        ..sdk::Pod::default()
    };
    wasm.set_pod(&pod).unwrap();
    let full = sdk::NodeUsage {
        requested: sdk::Resources {
            milli_cpu: 3500,
            ..sdk::Resources::default()
        },
        pod_count: 1,
        ..sdk::NodeUsage::default()
    };
    let before = wasm.calls;
    wasm.update_usage(&[(0, &full)]).unwrap();
    assert_eq!(wasm.calls, before, "the usage is held back");
    let mut results = sdk::FilterResults::default();
    wasm.filter(&[0, 1], &mut results).unwrap();
    assert_eq!(wasm.calls, before + 1, "one call: the usage, then filter");
    let reasons = |k: usize| results.failure(k).map(|f| f.reasons.clone());
    assert_eq!(
        reasons(0),
        Some(vec!["Insufficient cpu".into()]),
        "n0 is full"
    );
    assert_eq!(reasons(1), None);

    wasm.update_usage(&[(1, &full)]).unwrap();
    let mut scores = Vec::new();
    wasm.score(&[0, 1], &mut scores).unwrap();
    assert_eq!(wasm.calls, before + 2, "one call: the usage, then score");
    let (_, mut native) = instances("NodeResourcesFit");
    native.upsert_nodes(&entries).unwrap();
    native.update_usage(&[(0, &full), (1, &full)]).unwrap();
    native.set_pod(&pod).unwrap();
    let mut expected = Vec::new();
    native.score(&[0, 1], &mut expected).unwrap();
    assert_eq!(scores, expected, "both nodes scored with their new usage");
}

#[test]
fn scores_of_zero_everywhere_are_given_without_a_call_until_something_is_sent() {
    let (mut wasm, mut native) = instances_sending("TaintToleration", Sending::Encoded);
    assert!(
        wasm.plain_plans
            .is_some_and(|p| p.apply_and_plan_scoring.is_some()),
        "the SDK exports {ZERO_SCORES_INTERFACE}"
    );
    let nodes: Vec<sdk::NodeInfo> = (0..4).map(|i| tainted_node(i, false)).collect();
    let entries: Vec<(u32, &sdk::NodeInfo)> = (0u32..).zip(&nodes).collect();
    wasm.upsert_nodes(&entries).unwrap();
    native.upsert_nodes(&entries).unwrap();
    let ids = [0, 1, 2, 3];
    let pod = pod(0, 0);
    let native_scores = |native: &mut Box<dyn PluginInstance>| {
        native.set_pod(&pod).unwrap();
        let mut scores = Vec::new();
        native.score(&ids, &mut scores).unwrap();
        scores
    };

    // No node has a taint the pod does not tolerate: the plan says so, and filter calls keep it.
    assert!(wasm.set_pod(&pod).unwrap().score);
    wasm.filter(&ids, &mut sdk::FilterResults::default())
        .unwrap();
    let before = wasm.calls;
    let mut scores = vec![7];
    wasm.score(&ids, &mut scores).unwrap();
    assert_eq!(wasm.calls, before, "scored without a call");
    assert_eq!(scores, [7, 0, 0, 0, 0], "appended, as a call's scores are");
    assert_eq!(scores[1..], native_scores(&mut native)[..]);

    // A node tainted after the plan and before the scores: the component is asked.
    wasm.set_pod(&pod).unwrap();
    let tainted = tainted_node(2, true);
    wasm.upsert_nodes(&[(2, &tainted)]).unwrap();
    native.upsert_nodes(&[(2, &tainted)]).unwrap();
    let before = wasm.calls;
    let mut scores = Vec::new();
    wasm.score(&ids, &mut scores).unwrap();
    assert_eq!(wasm.calls, before + 1, "the score call is made");
    assert_eq!(scores, native_scores(&mut native));
    assert_ne!(scores[2], 0, "the tainted node counts its taint");

    // The next pod's plan sees the taint, and no longer says every node scores 0.
    wasm.set_pod(&pod).unwrap();
    let before = wasm.calls;
    let mut scores = Vec::new();
    wasm.score(&ids, &mut scores).unwrap();
    assert_eq!(wasm.calls, before + 1);
    assert_eq!(scores, native_scores(&mut native));
}

#[test]
fn a_component_without_the_batched_interface_gets_each_update_at_once() {
    let (mut wasm, _) = instances_sending("InterPodAffinity", Sending::Plain);
    let nodes: Vec<sdk::NodeInfo> = (0..4).map(node).collect();
    let entries: Vec<(u32, &sdk::NodeInfo)> = (0u32..).zip(&nodes).collect();
    wasm.upsert_nodes(&entries).unwrap();
    let before = wasm.calls;
    wasm.upsert_pods(&[(7, placed(1, 1))]).unwrap();
    assert_eq!(wasm.calls, before + 1);
    let plan = wasm.set_pod(&pod(0, 0)).unwrap();
    assert_eq!(wasm.calls, before + 2);
    assert!(matches!(plan.filter, sdk::FilterPlan::FailingNodes { .. }));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Whatever the order of placements, removals, usage updates and questions, a component
    /// taking held-back updates with its pods, as bytes or as records, answers as the native
    /// build given each at once.
    #[test]
    fn held_back_updates_give_the_answers_of_updates_sent_at_once(
        steps in proptest::collection::vec(step(), 1..40)
    ) {
        for (name, sending) in [
            "InterPodAffinity",
            "PodTopologySpread",
            "NodeResourcesFit",
            "TaintToleration",
        ]
            .into_iter()
            .flat_map(|name| {
                [
                    Sending::Encoded,
                    Sending::EncodedPlansAsRecords,
                    Sending::Batched,
                    Sending::Plain,
                ]
                .map(|s| (name, s))
            })
        {
            let (mut wasm, mut native) = instances_sending(name, sending);
            let nodes: Vec<sdk::NodeInfo> = (0..4).map(node).collect();
            let entries: Vec<(u32, &sdk::NodeInfo)> = (0u32..).zip(&nodes).collect();
            wasm.upsert_nodes(&entries).unwrap();
            native.upsert_nodes(&entries).unwrap();
            let reads_pods = !wasm.descriptor().reads_existing_pods.is_empty();
            for step in &steps {
                if matches!(step, Step::Place { .. } | Step::Remove { .. }) && !reads_pods {
                    continue;
                }
                let from_wasm = answer(&mut wasm, step);
                let from_native = answer(native.as_mut(), step);
                prop_assert_eq!(
                    from_wasm, from_native, "{} sent {:?} at {:?}", name, sending, step
                );
            }
        }
    }
}

#[test]
fn set_pod_deadline_items_count_only_the_parts_a_plugin_reads() {
    let requirement = |key: &str| sdk::NodeSelectorRequirement {
        key: key.into(),
        operator: "In".into(),
        values: vec!["a".into(), "b".into(), "c".into()],
    };
    let pod = sdk::Pod {
        labels: [("app", "web"), ("tier", "front")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        tolerations: vec![sdk::Toleration::default()],
        node_affinity: Some(sdk::NodeAffinity {
            required: Some(vec![sdk::NodeSelectorTerm {
                match_expressions: vec![requirement("zone"), requirement("disk")],
                match_fields: Vec::new(),
            }]),
            preferred: Vec::new(),
        }),
        ..sdk::Pod::default()
    };
    assert_eq!(
        pod_items(&pod, sdk::PodParts::NODE_SELECTION),
        8,
        "2 x (1 + 3)"
    );
    assert_eq!(
        pod_items(&pod, sdk::PodParts::LABELS | sdk::PodParts::NODE_SELECTION),
        10
    );
    assert_eq!(pod_items(&pod, sdk::PodParts::ALL), 11);
    assert_eq!(pod_items(&pod, sdk::PodParts::NONE), 0);
}

#[test]
fn set_pod_sends_only_the_declared_parts() {
    let labels = sdk::Labels::new([("k".to_string(), "v".to_string())]);
    let pod = sdk::Pod {
        name: "p".into(),
        priority: 3,
        labels: labels.clone(),
        annotations: labels.clone(),
        node_selector: labels,
        tolerations: vec![sdk::Toleration::default()],
        ..sdk::Pod::default()
    };
    let sent = wit_pod(&pod, sdk::PodParts::TOLERATIONS | sdk::PodParts::LABELS);
    assert_eq!(sent.priority, 3);
    assert_eq!(sent.labels, Some(vec![("k".into(), "v".into())]));
    assert_eq!(sent.tolerations.as_ref().map(Vec::len), Some(1));
    assert!(sent.identity.is_none());
    assert!(sent.annotations.is_none());
    assert!(sent.node_name.is_none() && sent.node_selection.is_none());
    assert!(sent.requests.is_none() && sent.volume_claims.is_none());
    assert!(sent.containers.is_none());

    let everything = wit_pod(&pod, sdk::PodParts::ALL);
    assert_eq!(everything.identity.map(|i| i.name), Some("p".to_string()));
    assert_eq!(everything.containers.map(|c| c.len()), Some(0));
    assert_eq!(
        everything.node_selection.map(|p| p.node_selector.len()),
        Some(1)
    );
}

#[test]
fn the_world_version_is_told_by_the_exports() {
    assert_eq!(
        world_version(["init", "upsert-pods", "wasched:plugin/groups@0.2.1"].into_iter()),
        CURRENT_WORLD
    );
    assert_eq!(
        world_version(["init", "upsert-pods", "wasched:plugin/stages@0.2.0"].into_iter()),
        V020_WORLD
    );
    assert_eq!(world_version(["init", "filter"].into_iter()), V01_WORLD);
}
