//! `wasched diff`: the same pending pods scheduled under two configurations, and what changes:
//! which pods go to another node, which change between placed and Pending, whose FitError
//! changes, and the cluster's utilisation and fragmentation under each.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::config::Config;
use crate::input::Cluster;
use crate::simulate::{self, Decision, Options};

/// A kind of change `--fail-on` may turn into a failing exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Change {
    /// A pod placed under one configuration and Pending (or gated) under the other.
    ChangedPending,
    /// A pod placed under both, on different nodes.
    ChangedNode,
    /// A pod Pending under both, with a different message.
    ChangedMessage,
    /// More pods Pending under B than under A.
    MorePending,
    /// Any of the above.
    Any,
}

/// Where one pod ended under one configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct End {
    /// The node, when placed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Why not (the FitError, the gate, the wait).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl End {
    fn of(d: &Decision) -> End {
        End {
            node: d.outcome.node.clone(),
            message: match d.outcome.node {
                Some(_) => None,
                None => d.outcome.message.clone(),
            },
        }
    }

    fn text(&self) -> String {
        match (&self.node, &self.message) {
            (Some(node), _) => node.clone(),
            (None, Some(message)) => format!("Pending ({message})"),
            (None, None) => "Pending".to_string(),
        }
    }
}

/// One pod whose end differs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PodChange {
    /// `namespace/name`.
    pub pod: String,
    /// Its end under configuration A.
    pub a: End,
    /// Under configuration B.
    pub b: End,
}

/// How full the cluster ends for one resource.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// Requested over allocatable, over every node.
    pub allocated: f64,
    /// The share of the free amount that sits on nodes already partly used: free capacity
    /// split into pieces rather than left whole on empty nodes. For a replayed trace's GPUs:
    /// the share of free GPUs the trace's GPU workload cannot use (the FGD paper's measure).
    pub fragmented: Option<f64>,
}

/// One configuration's totals.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Totals {
    /// The configuration file (or `default`).
    pub config: String,
    /// Pending pods of the input placed.
    pub placed: usize,
    /// Pending pods of the input left Pending or gated.
    pub pending: usize,
    /// Nodes with no pod (not counted for a replayed trace).
    pub empty_nodes: Option<usize>,
    /// Per resource (`cpu`, `memory`, and every extended resource a node offers).
    pub resources: Vec<(String, Usage)>,
}

/// What `wasched diff` found.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlacementDiff {
    /// Configuration A's totals.
    pub a: Totals,
    /// Configuration B's.
    pub b: Totals,
    /// Pods placed under both, on different nodes.
    pub changed_node: Vec<PodChange>,
    /// Pods placed under one and not the other.
    pub changed_pending: Vec<PodChange>,
    /// Pods Pending under both with a different message.
    pub changed_message: Vec<PodChange>,
}

impl PlacementDiff {
    /// True when a change of kind `change` was found.
    pub fn has(&self, change: Change) -> bool {
        match change {
            Change::ChangedPending => !self.changed_pending.is_empty(),
            Change::ChangedNode => !self.changed_node.is_empty(),
            Change::ChangedMessage => !self.changed_message.is_empty(),
            Change::MorePending => self.b.pending > self.a.pending,
            Change::Any => {
                self.has(Change::ChangedPending)
                    || self.has(Change::ChangedNode)
                    || self.has(Change::ChangedMessage)
            }
        }
    }

    /// The report for people.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "A: {}", self.a.config);
        let _ = writeln!(out, "B: {}", self.b.config);
        let sections = [
            ("placed on another node", &self.changed_node),
            (
                "placed under one, Pending under the other",
                &self.changed_pending,
            ),
            (
                "Pending under both, for another reason",
                &self.changed_message,
            ),
        ];
        for (title, changes) in sections {
            let _ = writeln!(out, "\n{} {title}", changes.len());
            for c in changes {
                let _ = writeln!(out, "  {}", c.pod);
                let _ = writeln!(out, "    A: {}", c.a.text());
                let _ = writeln!(out, "    B: {}", c.b.text());
            }
        }
        let _ = writeln!(out, "\n{:<34} {:>10} {:>10}", "", "A", "B");
        let row = |out: &mut String, name: &str, a: String, b: String| {
            let _ = writeln!(out, "{name:<34} {a:>10} {b:>10}");
        };
        row(
            &mut out,
            "placed",
            self.a.placed.to_string(),
            self.b.placed.to_string(),
        );
        row(
            &mut out,
            "pending",
            self.a.pending.to_string(),
            self.b.pending.to_string(),
        );
        let count = |n: Option<usize>| n.map_or("-".to_string(), |n| n.to_string());
        let empty = (count(self.a.empty_nodes), count(self.b.empty_nodes));
        row(&mut out, "empty nodes", empty.0, empty.1);
        let percent = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.1}%", v * 100.0));
        for ((name, a), (_, b)) in self.a.resources.iter().zip(&self.b.resources) {
            let allocated = format!("{name} allocated");
            let (in_a, in_b) = (percent(Some(a.allocated)), percent(Some(b.allocated)));
            row(&mut out, &allocated, in_a, in_b);
            let fragmented = format!("{name} free, fragmented");
            row(
                &mut out,
                &fragmented,
                percent(a.fragmented),
                percent(b.fragmented),
            );
        }
        out
    }
}

/// Schedules `cluster`'s pending pods under `a` and under `b` (named `names`) and compares.
///
/// # Errors
/// A configuration or plugin that cannot be loaded.
pub fn diff(
    configs: [(&str, &Config); 2],
    cluster: &Cluster,
    seed: u64,
) -> anyhow::Result<PlacementDiff> {
    let options = Options {
        seed,
        ..Options::default()
    };
    let [(name_a, a), (name_b, b)] = configs;
    let (decisions_a, service_a) = simulate::simulate_to_end(a, cluster, options)?;
    let (decisions_b, service_b) = simulate::simulate_to_end(b, cluster, options)?;
    let (mut order, ends_a) = last_ends(&decisions_a);
    let (order_b, ends_b) = last_ends(&decisions_b);
    order.extend(order_b.into_iter().filter(|p| !ends_a.contains_key(p)));
    let a = totals(name_a, &ends_a, &service_a);
    let b = totals(name_b, &ends_b, &service_b);
    Ok(compare(a, b, &order, &ends_a, &ends_b))
}

/// The pods whose ends differ, by kind of change.
fn compare(
    a: Totals,
    b: Totals,
    order: &[&str],
    ends_a: &HashMap<&str, End>,
    ends_b: &HashMap<&str, End>,
) -> PlacementDiff {
    let mut diff = PlacementDiff {
        a,
        b,
        changed_node: Vec::new(),
        changed_pending: Vec::new(),
        changed_message: Vec::new(),
    };
    let pending = End {
        node: None,
        message: None,
    };
    for &pod in order {
        let a = ends_a.get(pod).unwrap_or(&pending);
        let b = ends_b.get(pod).unwrap_or(&pending);
        if a == b {
            continue;
        }
        let change = PodChange {
            pod: pod.to_string(),
            a: a.clone(),
            b: b.clone(),
        };
        match (&a.node, &b.node) {
            (Some(_), Some(_)) => diff.changed_node.push(change),
            (None, None) => diff.changed_message.push(change),
            _ => diff.changed_pending.push(change),
        }
    }
    diff
}

/// Compares two replays of one trace (`wasched replay --compare`'s runs): each pod row's first
/// node, or its last FitError when it was never placed, and the cluster at the trace's end.
pub fn diff_replays(a: &crate::replay::Run, b: &crate::replay::Run) -> PlacementDiff {
    let (ends_a, ends_b) = (replay_ends(a), replay_ends(b));
    let order: Vec<&str> = a.summary.pod_ends.iter().map(|e| e.pod.as_str()).collect();
    compare(replay_totals(a), replay_totals(b), &order, &ends_a, &ends_b)
}

/// Each pod row's end in a replay, by pod name.
fn replay_ends(run: &crate::replay::Run) -> HashMap<&str, End> {
    let rows = run.summary.pod_ends.iter();
    rows.map(|e| {
        let end = End {
            node: e.node.clone(),
            message: e.message.clone(),
        };
        (e.pod.as_str(), end)
    })
    .collect()
}

/// A replay's totals: placed and never placed, and the trace's samples averaged (a trace ends
/// with its pods deleted, so its last sample says little).
fn replay_totals(run: &crate::replay::Run) -> Totals {
    let summary = &run.summary;
    let samples = &summary.series;
    let mean = |f: &dyn Fn(&crate::replay::Sample) -> Option<f64>| {
        let values: Vec<f64> = samples.iter().filter_map(f).collect();
        (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
    };
    let at = |f: fn(&crate::replay::Sample) -> f64| mean(&|s| Some(f(s))).unwrap_or(0.0);
    let gpu_fragmented = mean(&|s| (s.gpu_free > 0.0).then(|| s.gpu_fragmentation / s.gpu_free));
    Totals {
        config: run
            .config
            .as_ref()
            .map_or_else(|| run.label.clone(), |p| p.display().to_string()),
        placed: summary.placed,
        pending: summary.never_placed,
        empty_nodes: None,
        resources: vec![
            (
                "cpu".into(),
                Usage {
                    allocated: at(|s| s.cpu),
                    fragmented: None,
                },
            ),
            (
                "memory".into(),
                Usage {
                    allocated: at(|s| s.memory),
                    fragmented: None,
                },
            ),
            (
                "gpu".into(),
                Usage {
                    allocated: at(|s| s.gpu),
                    fragmented: gpu_fragmented,
                },
            ),
        ],
    }
}

/// Each pod's last decision, and the pods in the order they were first decided.
fn last_ends(decisions: &[Decision]) -> (Vec<&str>, HashMap<&str, End>) {
    let mut order = Vec::new();
    let mut ends = HashMap::new();
    for d in decisions {
        if ends.insert(d.pod.as_str(), End::of(d)).is_none() {
            order.push(d.pod.as_str());
        }
    }
    (order, ends)
}

fn totals(config: &str, ends: &HashMap<&str, End>, service: &crate::service::Service) -> Totals {
    let placed = ends.values().filter(|e| e.node.is_some()).count();
    let cache = service.decider().cache();
    let nodes: Vec<&wasched_sdk::NodeInfo> = cache.nodes().map(|(_, n)| &n.info).collect();
    let mut names = vec!["cpu".to_string(), "memory".to_string()];
    for node in &nodes {
        for (name, _) in &node.allocatable.scalar {
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
    }
    let amount = |r: &wasched_sdk::Resources, name: &str| match name {
        "cpu" => r.milli_cpu,
        "memory" => r.memory,
        _ => r
            .scalar
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, v)| *v),
    };
    let resources = names
        .into_iter()
        .map(|name| {
            let (mut allocatable, mut requested, mut free, mut free_on_used) = (0i64, 0, 0, 0);
            for node in &nodes {
                let have = amount(&node.allocatable, &name);
                let used = amount(&node.usage.requested, &name).min(have);
                allocatable += have;
                requested += used;
                free += have - used;
                if node.usage.pod_count > 0 {
                    free_on_used += have - used;
                }
            }
            let share = |part: i64, whole: i64| match whole {
                0 => 0.0,
                w => part as f64 / w as f64,
            };
            let usage = Usage {
                allocated: share(requested, allocatable),
                fragmented: Some(share(free_on_used, free)),
            };
            (name, usage)
        })
        .collect();
    Totals {
        config: config.to_string(),
        placed,
        pending: ends.len() - placed,
        empty_nodes: Some(nodes.iter().filter(|n| n.usage.pod_count == 0).count()),
        resources,
    }
}
