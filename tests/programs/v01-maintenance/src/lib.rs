//! A plugin written against `wasched:plugin@0.1.0` (`wit/v0.1/plugin.wit`) with wit-bindgen
//! directly, as a plugin built before 0.2.0 was. It keeps a node mirror and uses every 0.1.0
//! export:
//!
//! - filter: nodes labelled `maintenance=true` fail (`node(s) were under maintenance`,
//!   unresolvable), and cordoned ones (`node(s) were cordoned`); when every node is cordoned the
//!   plan says so (`failing-nodes`) and `filter` is not called;
//! - score: 100 for nodes whose `pool` label equals the pod's `pool` label, plus the node's free
//!   pod slots (it reads usage), normalized by the host (`scale`).

#[cfg(target_arch = "wasm32")]
mod component {
    use std::cell::RefCell;
    use std::collections::HashMap;

    wit_bindgen::generate!({
        path: "../../../wit/v0.1",
        world: "plugin",
    });

    // The world's own `use` already brought descriptor, node-info, node-usage, pod, pod-plan and
    // filter-results into scope.
    use wasched::plugin::types::{
        Code, FailingNodes, Failure, FilterPlan, NormalizeKind, PodParts,
    };

    struct Node {
        labels: Vec<(String, String)>,
        unschedulable: bool,
        allocatable_pods: i64,
        pod_count: u32,
    }

    #[derive(Default)]
    struct State {
        nodes: HashMap<u32, Node>,
        pool: Option<String>,
    }

    thread_local! {
        static STATE: RefCell<State> = RefCell::new(State::default());
    }

    fn label<'a>(labels: &'a [(String, String)], key: &str) -> Option<&'a str> {
        labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    struct Maintenance;

    impl Guest for Maintenance {
        fn init(_config: String) -> Result<Descriptor, String> {
            Ok(Descriptor {
                name: "V01Maintenance".into(),
                version: "0.1.0".into(),
                filter: true,
                score: true,
                normalize: NormalizeKind::Scale,
                reads_usage: true,
                reads_pod: PodParts::LABELS,
            })
        }

        fn upsert_nodes(nodes: Vec<(u32, NodeInfo)>) {
            STATE.with_borrow_mut(|state| {
                for (id, node) in nodes {
                    state.nodes.insert(
                        id,
                        Node {
                            labels: node.labels,
                            unschedulable: node.unschedulable,
                            allocatable_pods: node.allocatable.pods,
                            pod_count: node.usage.pod_count,
                        },
                    );
                }
            });
        }

        fn remove_nodes(ids: Vec<u32>) {
            STATE.with_borrow_mut(|state| ids.iter().for_each(|id| drop(state.nodes.remove(id))));
        }

        fn update_usage(usage: Vec<(u32, NodeUsage)>) {
            STATE.with_borrow_mut(|state| {
                for (id, usage) in usage {
                    if let Some(node) = state.nodes.get_mut(&id) {
                        node.pod_count = usage.pod_count;
                    }
                }
            });
        }

        fn set_pod(pod: Pod) -> PodPlan {
            STATE.with_borrow_mut(|state| {
                state.pool = pod
                    .labels
                    .as_deref()
                    .and_then(|labels| label(labels, "pool"))
                    .map(String::from);
                // Cordoned nodes fail through the plan; the others are asked about in `filter`.
                let cordoned: Vec<u32> = state
                    .nodes
                    .iter()
                    .filter(|(_, node)| node.unschedulable)
                    .map(|(&id, _)| id)
                    .collect();
                let filter = if state.nodes.len() == cordoned.len() && !cordoned.is_empty() {
                    FilterPlan::FailingNodes(FailingNodes {
                        verdicts: vec![1; cordoned.len()],
                        nodes: cordoned,
                        failures: vec![Failure {
                            code: Code::UnschedulableAndUnresolvable,
                            reasons: vec!["node(s) were cordoned".into()],
                        }],
                    })
                } else {
                    FilterPlan::Run
                };
                PodPlan {
                    filter,
                    score: true,
                }
            })
        }

        fn filter(ids: Vec<u32>) -> FilterResults {
            STATE.with_borrow(|state| {
                let verdicts = ids
                    .iter()
                    .map(|id| {
                        let node = &state.nodes[id];
                        if node.unschedulable {
                            1
                        } else if label(&node.labels, "maintenance") == Some("true") {
                            2
                        } else {
                            0
                        }
                    })
                    .collect();
                let unresolvable = |reason: &str| Failure {
                    code: Code::UnschedulableAndUnresolvable,
                    reasons: vec![reason.into()],
                };
                FilterResults {
                    verdicts,
                    failures: vec![
                        unresolvable("node(s) were cordoned"),
                        unresolvable("node(s) were under maintenance"),
                    ],
                }
            })
        }

        fn score(ids: Vec<u32>) -> Vec<i64> {
            STATE.with_borrow(|state| {
                ids.iter()
                    .map(|id| {
                        let node = &state.nodes[id];
                        let same_pool = state.pool.is_some()
                            && label(&node.labels, "pool") == state.pool.as_deref();
                        let free = node.allocatable_pods - i64::from(node.pod_count);
                        i64::from(same_pool) * 100 + free.max(0)
                    })
                    .collect()
            })
        }

        fn normalize(scores: Vec<i64>) -> Vec<i64> {
            scores
        }
    }

    export!(Maintenance);
}
