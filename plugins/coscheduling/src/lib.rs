//! Coscheduling: a gang's pods are bound all together or not at all, as the coscheduling plugin
//! of kubernetes-sigs/scheduler-plugins decides (`pkg/coscheduling`). A pod joins the PodGroup
//! its label `scheduling.x-k8s.io/pod-group` names; the host sends the group with the pod
//! ([`Pod::group`]): its spec and where its members stand.
//!
//! - QueueSort: priority, then the PodGroup's creation time (a pod without a group: when it was
//!   first queued), then the pod's name, so a gang's members leave the queue one after another.
//! - PreFilter: a member is unschedulable (and unresolvable, so no preemption is tried) while
//!   fewer than `minMember` pods of its group exist, or while the cluster's free resources (the
//!   group's own pods given back) cannot hold `minResources` and `minMember` pods.
//! - Permit: a member waits, reserved on its node, until `minMember` members are assigned;
//!   the last lets them all go. A wait lasts `scheduleTimeoutSeconds` (else
//!   `permitWaitingTimeSeconds`); when it runs out the pod is unreserved, and so is the rest of
//!   the gang (Unreserve rejects every waiting member).
//! - PostFilter: a member no node takes rejects the waiting members, unless the gang is
//!   (nearly) complete.

#![warn(missing_docs)]

use std::time::Duration;

use serde::Deserialize;
use wasched_sdk::{
    Failure, FilterPlan, FilterPlugin, Nodes, Permit, PermitAnswer, Plugin, Pod, PodGroup,
    PodParts, PodPlan, PostFilterAnswer, QueueKey, Rejection, Resources, Verdict,
};

/// The name used in configs and messages.
pub const NAME: &str = "Coscheduling";

/// coscheduling's default `permitWaitingTimeSeconds`.
pub const DEFAULT_WAIT_SECONDS: u64 = 60;

/// The plugin's arguments (coscheduling's `CoschedulingArgs`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Args {
    #[serde(default = "default_wait")]
    permit_waiting_time_seconds: i64,
    #[serde(default)]
    pod_group_backoff_seconds: i64,
}

fn default_wait() -> i64 {
    DEFAULT_WAIT_SECONDS as i64
}

/// The plugin: stateless, since the host sends each pod's group as it stands.
pub struct Coscheduling {
    wait: Duration,
}

impl Plugin for Coscheduling {
    const NAME: &'static str = NAME;
    const READS_POD: PodParts = PodParts::IDENTITY
        .union(PodParts::LABELS)
        .union(PodParts::GROUP);
    const READS_USAGE: bool = true;
    const READS_GROUPS: bool = true;
    const PERMIT: bool = true;
    const POST_FILTER: bool = true;
    const QUEUE_SORT: bool = true;
    const IDLE_WITHOUT: PodParts = PodParts::GROUP;

    fn new(config: &str) -> Result<Self, String> {
        let args: Args = serde_json::from_str(config).map_err(|e| e.to_string())?;
        if args.permit_waiting_time_seconds < 0 {
            return Err("permitWaitingTimeSeconds cannot be negative".into());
        }
        if args.pod_group_backoff_seconds < 0 {
            return Err("podGroupBackoffSeconds cannot be negative".into());
        }
        if args.pod_group_backoff_seconds > 0 {
            // It needs the time a group was last rejected, which the host does not send yet.
            return Err(
                "podGroupBackoffSeconds is not supported yet: leave it 0 (coscheduling's default)"
                    .into(),
            );
        }
        Ok(Coscheduling {
            wait: Duration::from_secs(args.permit_waiting_time_seconds as u64),
        })
    }

    fn prepare(&mut self, pod: &Pod, nodes: &Nodes) -> PodPlan {
        let filter = match pre_filter(pod, nodes) {
            Ok(()) => FilterPlan::Skip,
            Err(message) => FilterPlan::Reject(Failure::unresolvable(message)),
        };
        PodPlan {
            filter,
            score: false,
        }
    }

    fn permit(&mut self, pod: &Pod, _node: &str) -> PermitAnswer {
        let Some(group) = &pod.group else {
            return PermitAnswer::allow();
        };
        if !group.found {
            return PermitAnswer {
                permit: Permit::Reject("PodGroup not found".into()),
                allow: Vec::new(),
                reject: Vec::new(),
            };
        }
        if group.assigned + 1 >= group.min_member {
            // The quorum is there: the waiting members go with this one.
            return PermitAnswer {
                permit: Permit::Allow,
                allow: group.waiting.clone(),
                reject: Vec::new(),
            };
        }
        let timeout = group
            .schedule_timeout_seconds
            .map_or(self.wait, |s| Duration::from_secs(u64::from(s)));
        PermitAnswer {
            permit: Permit::Wait { timeout },
            allow: Vec::new(),
            reject: Vec::new(),
        }
    }

    fn unreserve_rejects(&mut self, pod: &Pod, _node: &str) -> Vec<Rejection> {
        match &pod.group {
            Some(group) if group.found => rejections(group, "rejection in Unreserve"),
            _ => Vec::new(),
        }
    }

    fn post_filter(&mut self, pod: &Pod) -> PostFilterAnswer {
        let Some(group) = pod.group.as_ref().filter(|g| g.found) else {
            return PostFilterAnswer {
                reasons: vec!["can not find pod group".into()],
                reject: Vec::new(),
            };
        };
        // Enough members are assigned already: the gang stands without this one.
        if group.assigned >= group.min_member {
            return PostFilterAnswer::default();
        }
        // Within 10% of the quorum, later members may still complete it.
        let missing = f64::from(group.min_member - group.assigned);
        if missing / f64::from(group.min_member) <= 0.1 {
            return PostFilterAnswer::default();
        }
        PostFilterAnswer {
            reasons: vec![format!(
                "PodGroup {} gets rejected due to Pod {} is unschedulable even after PostFilter",
                group.full_name, pod.name
            )],
            reject: rejections(group, "optimistic rejection in PostFilter"),
        }
    }

    fn queue_sort(&self, pod: &Pod, queued_millis: i64) -> QueueKey {
        let timestamp_millis = match &pod.group {
            Some(group) if group.found => group.created_millis,
            _ => queued_millis,
        };
        QueueKey {
            timestamp_millis,
            name: pod.key(),
        }
    }
}

impl FilterPlugin for Coscheduling {
    fn filter(&self, _pod: &Pod, _node: &wasched_sdk::NodeInfo) -> Verdict {
        // Every decision is the PreFilter's: a pod it lets through passes every node.
        Ok(())
    }
}

wasched_sdk::export_plugin!(Coscheduling: filter);

/// coscheduling's PreFilter: why `pod` cannot be tried now, if it cannot.
fn pre_filter(pod: &Pod, nodes: &Nodes) -> Result<(), String> {
    let Some(group) = pod.group.as_ref().filter(|g| g.found) else {
        return Ok(());
    };
    if group.members < group.min_member {
        return Err(format!(
            "pre-filter pod {} cannot find enough sibling pods, current pods number: {}, minMember of group: {}",
            pod.name, group.members, group.min_member
        ));
    }
    let Some(min_resources) = &group.min_resources else {
        return Ok(());
    };
    let mut wanted = min_resources.clone();
    wanted.pods = i64::from(group.min_member);
    let gap = resource_gap(&wanted, nodes, group);
    if gap.is_empty() {
        Ok(())
    } else {
        Err(format!("resource gap: map[{}]", gap.join(" ")))
    }
}

/// What the cluster lacks of `wanted`: each resource the nodes' free amounts (the group's own
/// pods given back) do not cover, with the amount missing, as `name:amount` in name order.
fn resource_gap(wanted: &Resources, nodes: &Nodes, group: &PodGroup) -> Vec<String> {
    let mut free = group.assigned_requests.clone();
    for id in nodes.ids() {
        let Some(node) = nodes.get(id) else { continue };
        let mut left = node.allocatable.clone();
        left.subtract(&node.usage.requested);
        left.pods = node.allocatable.pods - i64::from(node.usage.pod_count);
        free.add(&left);
    }
    let mut gap: Vec<(String, String)> = Vec::new();
    let mut missing = |name: &str, want: i64, have: i64, text: fn(i64) -> String| {
        if want > have {
            gap.push((name.to_string(), text(want - have)));
        }
    };
    let plain = |v: i64| v.to_string();
    if wanted.milli_cpu > 0 {
        missing("cpu", wanted.milli_cpu, free.milli_cpu, milli_text);
    }
    if wanted.memory > 0 {
        missing("memory", wanted.memory, free.memory, plain);
    }
    if wanted.ephemeral_storage > 0 {
        missing(
            "ephemeral-storage",
            wanted.ephemeral_storage,
            free.ephemeral_storage,
            plain,
        );
    }
    missing("pods", wanted.pods, free.pods, plain);
    for (name, amount) in &wanted.scalar {
        missing(name, *amount, free.get(name), plain);
    }
    gap.sort();
    gap.into_iter().map(|(n, a)| format!("{n}:{a}")).collect()
}

/// A CPU amount in millicores as a quantity (`2`, `500m`).
fn milli_text(milli: i64) -> String {
    if milli % 1000 == 0 {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }
}

/// The waiting members of `group` to reject, each with `message`.
fn rejections(group: &PodGroup, message: &str) -> Vec<Rejection> {
    group
        .waiting
        .iter()
        .map(|pod| Rejection {
            pod: pod.clone(),
            message: message.to_string(),
        })
        .collect()
}

/// coscheduling's behaviour as a table (its `coscheduling_test.go` and `core_test.go`): run
/// natively by this crate's tests and through the WebAssembly build by the host's.
#[cfg(not(target_arch = "wasm32"))]
pub fn cases() -> Vec<wasched_sdk::testing::Case> {
    use wasched_sdk::testing::{node, pass, pod, with_usage, Case, Stages};

    let rejected_at_pre_filter = |name, pod, nodes, message: &'static str| {
        Case::filter(name, pod, nodes, Vec::new())
            .with_plan(FilterPlan::Reject(Failure::unresolvable(message)))
    };

    let group = |min: u32, members: u32, assigned: u32| PodGroup {
        full_name: "ns/pg1".into(),
        found: true,
        min_member: min,
        created_millis: 1_000,
        members,
        assigned,
        ..PodGroup::default()
    };
    let member = |name: &str, group: PodGroup| Pod {
        namespace: "ns".into(),
        labels: wasched_sdk::Labels::from_pairs([("scheduling.x-k8s.io/pod-group", "pg1")]),
        group: Some(group),
        ..pod(name)
    };
    let waiting = |mut g: PodGroup, names: &[&str]| {
        g.waiting = names.iter().map(|n| format!("ns/{n}")).collect();
        g
    };
    let with_min_resources = |mut g: PodGroup, milli_cpu: i64| {
        g.min_resources = Some(Resources {
            milli_cpu,
            ..Resources::default()
        });
        g
    };
    let cpu_node = |name: &str, used_milli: i64, pods: u32| {
        let mut n = node(name);
        n.allocatable.milli_cpu = 4000;
        n.allocatable.pods = 110;
        with_usage(n, used_milli, 0, pods)
    };
    let rejected = |names: &[&str], message: &str| {
        names
            .iter()
            .map(|n| Rejection {
                pod: format!("ns/{n}"),
                message: message.into(),
            })
            .collect::<Vec<_>>()
    };
    let no_group = Pod {
        namespace: "ns".into(),
        ..pod("p")
    };
    let nodes = || vec![cpu_node("node", 0, 0)];
    vec![
        // PreFilter (core_test.go's TestPreFilter).
        Case::filter("a pod without a group passes", no_group.clone(), nodes(), vec![pass()]),
        Case::filter(
            "a group whose PodGroup does not exist lets the pod through",
            member(
                "p",
                PodGroup {
                    found: false,
                    ..group(0, 1, 0)
                },
            ),
            nodes(),
            vec![pass()],
        )
        .with_plan(FilterPlan::Skip),
        rejected_at_pre_filter(
            "fewer pods than minMember: unresolvable",
            member("p", group(2, 1, 0)),
            nodes(),
            "pre-filter pod p cannot find enough sibling pods, current pods number: 1, minMember of group: 2",
        ),
        Case::filter(
            "enough pods and no minResources",
            member("p", group(2, 2, 0)),
            nodes(),
            vec![pass()],
        ),
        rejected_at_pre_filter(
            "minResources the cluster lacks: the gap is named",
            member("p", with_min_resources(group(3, 3, 0), 10_000)),
            vec![cpu_node("n1", 1000, 1), cpu_node("n2", 2500, 2)],
            "resource gap: map[cpu:5500m]",
        ),
        Case::filter(
            "the group's own pods count as free for its minResources",
            member(
                "p",
                with_min_resources(
                    PodGroup {
                        assigned_requests: Resources {
                            milli_cpu: 3000,
                            pods: 1,
                            ..Resources::default()
                        },
                        ..group(3, 3, 1)
                    },
                    7_000,
                ),
            ),
            vec![cpu_node("n1", 1000, 1), cpu_node("n2", 2000, 1)],
            vec![pass(), pass()],
        ),
        // Permit (TestPermit).
        Case::stages(
            "a pod without a group is allowed",
            no_group.clone(),
            Stages {
                permit: Some(PermitAnswer::allow()),
                ..Stages::default()
            },
        ),
        Case::stages(
            "quorum not reached: the pod waits for its group's timeout",
            member(
                "p",
                PodGroup {
                    schedule_timeout_seconds: Some(10),
                    ..group(2, 2, 0)
                },
            ),
            Stages {
                permit: Some(PermitAnswer {
                    permit: Permit::Wait {
                        timeout: Duration::from_secs(10),
                    },
                    allow: Vec::new(),
                    reject: Vec::new(),
                }),
                ..Stages::default()
            },
        ),
        Case::stages(
            "quorum not reached without a group timeout: permitWaitingTimeSeconds",
            member("p", group(3, 3, 1)),
            Stages {
                permit: Some(PermitAnswer {
                    permit: Permit::Wait {
                        timeout: Duration::from_secs(30),
                    },
                    allow: Vec::new(),
                    reject: Vec::new(),
                }),
                ..Stages::default()
            },
        )
        .with_config(r#"{"permitWaitingTimeSeconds": 30}"#),
        Case::stages(
            "the last member reaches the quorum and lets the waiting ones go",
            member("p3", waiting(group(3, 3, 2), &["p1", "p2"])),
            Stages {
                permit: Some(PermitAnswer {
                    permit: Permit::Allow,
                    allow: vec!["ns/p1".into(), "ns/p2".into()],
                    reject: Vec::new(),
                }),
                ..Stages::default()
            },
        ),
        Case::stages(
            "a group whose PodGroup is gone is rejected at Permit",
            member(
                "p",
                PodGroup {
                    found: false,
                    ..group(0, 1, 0)
                },
            ),
            Stages {
                permit: Some(PermitAnswer {
                    permit: Permit::Reject("PodGroup not found".into()),
                    allow: Vec::new(),
                    reject: Vec::new(),
                }),
                ..Stages::default()
            },
        ),
        // PostFilter (TestPostFilter).
        Case::stages(
            "PostFilter: a pod without a group",
            no_group.clone(),
            Stages {
                post_filter: Some(PostFilterAnswer {
                    reasons: vec!["can not find pod group".into()],
                    reject: Vec::new(),
                }),
                ..Stages::default()
            },
        ),
        Case::stages(
            "PostFilter: enough pods assigned, nobody is rejected",
            member("p", group(1, 2, 1)),
            Stages {
                post_filter: Some(PostFilterAnswer::default()),
                ..Stages::default()
            },
        ),
        Case::stages(
            "PostFilter: the gang is rejected, its waiting members with it",
            member("p", waiting(group(2, 2, 1), &["p1"])),
            Stages {
                post_filter: Some(PostFilterAnswer {
                    reasons: vec![
                        "PodGroup ns/pg1 gets rejected due to Pod p is unschedulable even after PostFilter"
                            .into(),
                    ],
                    reject: rejected(&["p1"], "optimistic rejection in PostFilter"),
                }),
                ..Stages::default()
            },
        ),
        Case::stages(
            "PostFilter: within 10% of the quorum, later members may complete it",
            member("p", waiting(group(10, 12, 9), &["p1"])),
            Stages {
                post_filter: Some(PostFilterAnswer::default()),
                ..Stages::default()
            },
        ),
        // Unreserve: the rest of the gang goes too.
        Case::stages(
            "Unreserve rejects the waiting members",
            member("p", waiting(group(3, 3, 2), &["p1", "p2"])),
            Stages {
                unreserve: Some(rejected(&["p1", "p2"], "rejection in Unreserve")),
                ..Stages::default()
            },
        ),
        // QueueSort (TestLess): the PodGroup's creation, else the first queueing, then the name.
        Case::stages(
            "a member sorts by its PodGroup's creation",
            member("p1", group(2, 2, 0)),
            Stages {
                queued_millis: 5_000,
                queue_key: Some(QueueKey {
                    timestamp_millis: 1_000,
                    name: "ns/p1".into(),
                }),
                ..Stages::default()
            },
        ),
        Case::stages(
            "a pod without a group sorts by when it was first queued",
            no_group,
            Stages {
                queued_millis: 5_000,
                queue_key: Some(QueueKey {
                    timestamp_millis: 5_000,
                    name: "ns/p".into(),
                }),
                ..Stages::default()
            },
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_as_coscheduling() {
        wasched_sdk::testing::check::<Coscheduling>(&cases());
    }

    #[test]
    fn arguments_are_checked() {
        assert!(Coscheduling::new("{}").is_ok());
        let refused = |config: &str| Coscheduling::new(config).err().unwrap_or_default();
        assert!(refused(r#"{"permitWaitingTimeSeconds": -1}"#).contains("negative"));
        assert!(refused(r#"{"podGroupBackoffSeconds": 5}"#).contains("not supported"));
        assert!(refused(r#"{"permitWaitingTime": 5}"#).contains("unknown field"));
    }
}
