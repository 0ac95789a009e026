//! NodePorts: keeps a pod off nodes where a pod already placed uses one of the host ports it asks
//! for (kube-scheduler's `nodeports` plugin).
//!
//! Ports are `(host IP, protocol, port)` with an empty IP read as `0.0.0.0` and an empty protocol as
//! `TCP` (the host fills both in). A wanted port conflicts with a used one of the same protocol and
//! number when either IP is `0.0.0.0` or the two are equal; IPs compare as strings.
//!
//! The nodes that fail are exactly those holding a conflicting pod: the plugin files every placed
//! pod's ports by number as pods enter and leave its mirror, `prepare` looks up the numbers the pod
//! wants and lists the nodes in a `failing-nodes` plan, so the host never asks about each node,
//! and a pod without host ports skips the plugin.

#![warn(missing_docs)]

use std::collections::BTreeSet;

use wasched_sdk::helpers::FastMap;
use wasched_sdk::{
    ExistingPodParts, ExistingPodRef, Failure, FilterPlan, FilterPlugin, FilterResults, HostPort,
    NodeId, NodeInfo, Nodes, Plugin, Pod, PodId, PodParts, PodPlan, Verdict,
};

/// The name used in configs and messages.
pub const NAME: &str = "NodePorts";
/// kube-scheduler's reason (`ErrReason`).
pub const REASON: &str = "node(s) didn't have free ports for the requested pod ports";
/// The host IP that stands for every address.
pub const ANY_IP: &str = "0.0.0.0";

/// The plugin: the placed pods' ports by number, and the names of the nodes the current pod's
/// ports conflict on (for the per-node filter, which the host does not call when the plan lists
/// them).
#[derive(Default)]
pub struct NodePorts {
    used: FastMap<i32, Vec<(PodId, NodeId, HostPort)>>,
    conflicting: BTreeSet<String>,
}

/// Whether `wanted` cannot be bound where `used` is (kube-scheduler's `HostPortInfo.CheckConflict`).
pub fn conflicts(wanted: &HostPort, used: &HostPort) -> bool {
    wanted.port > 0
        && wanted.port == used.port
        && wanted.protocol == used.protocol
        && (wanted.host_ip == ANY_IP || used.host_ip == ANY_IP || wanted.host_ip == used.host_ip)
}

impl Plugin for NodePorts {
    const NAME: &'static str = NAME;
    const READS_POD: PodParts = PodParts::HOST_PORTS;
    const READS_EXISTING_PODS: ExistingPodParts = ExistingPodParts::HOST_PORTS;

    fn new(_config: &str) -> Result<Self, String> {
        Ok(Self::default())
    }

    fn prepare(&mut self, pod: &Pod, nodes: &Nodes) -> PodPlan {
        self.conflicting.clear();
        let plan = PodPlan {
            score: false,
            ..PodPlan::default()
        };
        if pod.host_ports.is_empty() {
            return PodPlan {
                filter: FilterPlan::Skip,
                ..plan
            };
        }
        let mut failing: Vec<NodeId> = pod
            .host_ports
            .iter()
            .filter_map(|wanted| Some((wanted, self.used.get(&wanted.port)?)))
            .flat_map(|(wanted, used)| {
                used.iter()
                    .filter(|(_, id, used)| conflicts(wanted, used) && nodes.contains(*id))
                    .map(|&(_, id, _)| id)
            })
            .collect();
        failing.sort_unstable();
        failing.dedup();
        self.conflicting = failing
            .iter()
            .filter_map(|&id| nodes.get(id).map(|node| node.name.clone()))
            .collect();
        let filter = if failing.is_empty() {
            FilterPlan::Skip
        } else {
            FilterPlan::FailingNodes {
                results: FilterResults {
                    verdicts: vec![1; failing.len()],
                    failures: vec![Failure::unschedulable(REASON)],
                },
                nodes: failing,
            }
        };
        PodPlan { filter, ..plan }
    }

    fn pod_added(&mut self, id: PodId, pod: ExistingPodRef<'_>, _node: &NodeInfo) {
        for port in pod.host_ports {
            let used = self.used.entry(port.port).or_default();
            used.push((id, pod.node, port.clone()));
        }
    }

    fn pod_removed(&mut self, id: PodId, pod: ExistingPodRef<'_>, _node: &NodeInfo) {
        for port in pod.host_ports {
            if let Some(used) = self.used.get_mut(&port.port) {
                used.retain(|&(pod, _, _)| pod != id);
                if used.is_empty() {
                    self.used.remove(&port.port);
                }
            }
        }
    }
}

impl FilterPlugin for NodePorts {
    fn filter(&self, _pod: &Pod, node: &NodeInfo) -> Verdict {
        if self.conflicting.contains(&node.name) {
            return Err(Failure::unschedulable(REASON));
        }
        Ok(())
    }
}

wasched_sdk::export_plugin!(NodePorts: filter);

/// kube-scheduler's `node_ports_test.go` (`TestNodePorts`) as a table, plus the sidecar and
/// several-pods rows: run natively by this crate's tests and through the WebAssembly build by the
/// host's (`tests/e2e/plugins.rs`), which insists both builds agree.
#[cfg(not(target_arch = "wasm32"))]
pub fn cases() -> Vec<wasched_sdk::testing::Case> {
    use wasched_sdk::testing::{fail, failing_plan, node, pass, pod, with_host_ports, Case};
    use wasched_sdk::Code;

    let ports = |name: &str, list: &[(&str, &str, i32)]| with_host_ports(pod(name), list);
    let conflict = || fail(Code::Unschedulable, &[REASON]);
    // One node holding `existing`, the incoming pod asking for `wanted`.
    let row = |name: &'static str,
               wanted: &[(&str, &str, i32)],
               existing: &[(&str, &str, i32)],
               fits: bool| {
        let case = Case::filter(
            name,
            ports("incoming", wanted),
            vec![node("n")],
            vec![if fits { pass() } else { conflict() }],
        )
        .with_existing(vec![(0, ports("existing", existing))]);
        if fits {
            case.with_plan(FilterPlan::Skip)
        } else {
            case.with_plan(failing_plan(1, &[0], Failure::unschedulable(REASON)))
        }
    };
    vec![
        Case::filter(
            "nothing running",
            pod("incoming"),
            vec![node("n")],
            vec![pass()],
        )
        .with_plan(FilterPlan::Skip),
        row(
            "other port",
            &[("127.0.0.1", "UDP", 8080)],
            &[("127.0.0.1", "UDP", 9090)],
            true,
        ),
        row(
            "same udp port",
            &[("127.0.0.1", "UDP", 8080)],
            &[("127.0.0.1", "UDP", 8080)],
            false,
        ),
        row(
            "same tcp port",
            &[("127.0.0.1", "TCP", 8080)],
            &[("127.0.0.1", "TCP", 8080)],
            false,
        ),
        row(
            "different host ip",
            &[("127.0.0.1", "TCP", 8080)],
            &[("127.0.0.2", "TCP", 8080)],
            true,
        ),
        row(
            "different protocol",
            &[("127.0.0.1", "UDP", 8080)],
            &[("127.0.0.1", "TCP", 8080)],
            true,
        ),
        row(
            "second udp port conflict",
            &[("127.0.0.1", "UDP", 8000), ("127.0.0.1", "UDP", 8080)],
            &[("127.0.0.1", "UDP", 8080)],
            false,
        ),
        row(
            "first tcp port conflict",
            &[("127.0.0.1", "TCP", 8001), ("127.0.0.1", "UDP", 8080)],
            &[("127.0.0.1", "TCP", 8001), ("127.0.0.1", "UDP", 8081)],
            false,
        ),
        row(
            "first tcp port conflict due to 0.0.0.0 hostIP",
            &[("0.0.0.0", "TCP", 8001)],
            &[("127.0.0.1", "TCP", 8001)],
            false,
        ),
        row(
            "TCP hostPort conflict due to 0.0.0.0 hostIP",
            &[("10.0.10.10", "TCP", 8001), ("0.0.0.0", "TCP", 8001)],
            &[("127.0.0.1", "TCP", 8001)],
            false,
        ),
        row(
            "second tcp port conflict to 0.0.0.0 hostIP",
            &[("127.0.0.1", "TCP", 8001)],
            &[("0.0.0.0", "TCP", 8001)],
            false,
        ),
        row(
            "second different protocol",
            &[("127.0.0.1", "UDP", 8001)],
            &[("0.0.0.0", "TCP", 8001)],
            true,
        ),
        row(
            "UDP hostPort conflict due to 0.0.0.0 hostIP",
            &[("127.0.0.1", "UDP", 8001)],
            &[("0.0.0.0", "TCP", 8001), ("0.0.0.0", "UDP", 8001)],
            false,
        ),
        row(
            "an empty IP and protocol mean 0.0.0.0 and TCP",
            &[("", "", 80)],
            &[("10.1.1.1", "TCP", 80)],
            false,
        ),
        row(
            "IPs compare as strings: :: is not a wildcard",
            &[("::", "TCP", 80)],
            &[("10.1.1.1", "TCP", 80)],
            true,
        ),
        row(
            "SCTP is a protocol of its own",
            &[("", "SCTP", 80)],
            &[("", "TCP", 80)],
            true,
        ),
        Case::filter(
            "only the nodes holding a conflicting pod fail, whatever else runs there",
            ports("incoming", &[("", "TCP", 443)]),
            vec![node("a"), node("b"), node("c")],
            vec![pass(), conflict(), pass()],
        )
        .with_existing(vec![
            (0, ports("no-ports", &[])),
            (1, ports("web", &[("", "TCP", 443)])),
            (1, ports("web-twin", &[("", "TCP", 443)])),
            (2, ports("other", &[("", "TCP", 8443)])),
        ])
        .with_plan(failing_plan(3, &[1], Failure::unschedulable(REASON))),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_as_kube_scheduler() {
        wasched_sdk::testing::check::<NodePorts>(&cases());
    }

    #[test]
    fn ports_follow_pods_that_leave_and_move() {
        use wasched_sdk::testing::{node, pod, with_host_ports};
        use wasched_sdk::{Driver, ExistingPod};
        let mut driver = Driver::<NodePorts>::new("").unwrap();
        driver.upsert_nodes((0..3).map(|id| (id, node(&format!("n{id}")))));
        let web = |name: &str| with_host_ports(pod(name), &[("", "TCP", 80)]);
        let failing = |driver: &mut Driver<NodePorts>| match driver.set_pod(web("new")).filter {
            FilterPlan::FailingNodes { nodes, .. } => nodes,
            _ => Vec::new(),
        };
        driver.upsert_pods([
            (1, ExistingPod::of(&web("a"), 0)),
            (2, ExistingPod::of(&web("b"), 1)),
            (
                3,
                ExistingPod::of(&with_host_ports(pod("c"), &[("", "UDP", 80)]), 2),
            ),
        ]);
        assert_eq!(failing(&mut driver), [0, 1]);
        driver.remove_pods(&[1]);
        assert_eq!(failing(&mut driver), [1]);
        driver.upsert_pods([(2, ExistingPod::of(&web("b"), 2))]);
        assert_eq!(failing(&mut driver), [2], "b moved from n1 to n2");
        driver.remove_nodes(&[2]);
        assert_eq!(
            failing(&mut driver),
            Vec::<NodeId>::new(),
            "n2 and its pods are gone"
        );
    }
}
