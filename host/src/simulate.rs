//! `wasched simulate`: where would the pending pods of a cluster dump go, and why do the others
//! stay Pending?

use std::io::Write;

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

use crate::config::Config;
use crate::framework::{NodeReport, Outcome, Scheduler};
use crate::input::Cluster;
use crate::k8s;

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Output {
    /// One JSON object per line and pod.
    #[default]
    Json,
    /// Aligned columns for people.
    Table,
}

/// Options of one simulation.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    pub explain: bool,
    pub output: Output,
    /// Seeds the tie-breaking between equally good nodes.
    pub seed: u64,
}

/// The decision for one pending pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// `namespace/name`.
    pub pod: String,
    pub node: Option<String>,
    pub message: Option<String>,
    pub nodes: Vec<NodeReport>,
}

#[derive(Serialize)]
struct JsonDecision<'a> {
    pod: &'a str,
    node: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    nodes: Option<Vec<JsonNode<'a>>>,
}

#[derive(Serialize)]
struct JsonNode<'a> {
    node: &'a str,
    feasible: bool,
    reasons: &'a [String],
    scores: Scores<'a>,
    total: i64,
}

/// Per-plugin scores as a JSON object, in the order the plugins ran.
struct Scores<'a>(&'a [(String, i64)]);

impl Serialize for Scores<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (plugin, score) in self.0 {
            map.serialize_entry(plugin, score)?;
        }
        map.end()
    }
}

/// Schedules every pending pod of `cluster` in queue order (higher `spec.priority` first, then
/// input order), placing each before the next is considered.
///
/// Pods with `spec.nodeName` (and not finished) are running on that node; finished pods
/// (`Succeeded`/`Failed`) hold nothing.
///
/// # Errors
/// A configuration or plugin that cannot be loaded.
pub fn simulate(
    config: &Config,
    cluster: &Cluster,
    options: Options,
) -> anyhow::Result<Vec<Decision>> {
    let profiles = config.profiles()?;
    let mut scheduler = Scheduler::new(&profiles, options.seed)?;
    for class in &cluster.classes {
        scheduler.cache.upsert_class(class.clone());
    }
    for volume in &cluster.volumes {
        scheduler.cache.upsert_volume(volume.clone());
    }
    for claim in &cluster.claims {
        scheduler.cache.upsert_claim(claim.clone());
    }
    for node in &cluster.nodes {
        scheduler.cache.upsert_node(k8s::node_info(node)?);
    }
    let mut pending = Vec::new();
    for pod in cluster.pods.iter().filter(|p| !k8s::is_terminated(p)) {
        let model = k8s::pod(pod)?;
        if model.node_name.is_empty() {
            pending.push(model);
        } else {
            let node = model.node_name.clone();
            scheduler.cache.place_pod(&model, &node);
        }
    }
    // A stable sort keeps input order among equal priorities.
    pending.sort_by_key(|p| std::cmp::Reverse(p.priority));

    let mut decisions = Vec::with_capacity(pending.len());
    for pod in &pending {
        let key = format!("{}/{}", pod.namespace, pod.name);
        let decision = match scheduler.schedule(pod, options.explain) {
            Some(Outcome { node, message, nodes, .. }) => Decision {
                pod: key,
                node,
                message,
                nodes,
            },
            None => Decision {
                pod: key,
                node: None,
                message: Some(format!(
                    "no profile for schedulerName {:?}; kube-scheduler would leave this pod to that scheduler",
                    pod.scheduler_name
                )),
                nodes: Vec::new(),
            },
        };
        decisions.push(decision);
    }
    Ok(decisions)
}

/// Prints decisions in the chosen format.
///
/// # Errors
/// Writing to `out` failed.
pub fn print(decisions: &[Decision], options: Options, out: &mut dyn Write) -> std::io::Result<()> {
    match options.output {
        Output::Json => {
            for d in decisions {
                let json = JsonDecision {
                    pod: &d.pod,
                    node: d.node.as_deref(),
                    message: d.message.as_deref(),
                    nodes: options.explain.then(|| {
                        d.nodes
                            .iter()
                            .map(|n| JsonNode {
                                node: &n.node,
                                feasible: n.feasible,
                                reasons: &n.reasons,
                                scores: Scores(&n.scores),
                                total: n.total,
                            })
                            .collect()
                    }),
                };
                serde_json::to_writer(&mut *out, &json)?;
                writeln!(out)?;
            }
        }
        Output::Table => {
            let pod_width = decisions
                .iter()
                .map(|d| d.pod.len())
                .max()
                .unwrap_or(3)
                .max(3);
            let node_width = decisions
                .iter()
                .map(|d| d.node.as_deref().unwrap_or("<none>").len())
                .max()
                .unwrap_or(4)
                .max(4);
            writeln!(out, "{:pod_width$}  {:node_width$}  MESSAGE", "POD", "NODE")?;
            for d in decisions {
                writeln!(
                    out,
                    "{:pod_width$}  {:node_width$}  {}",
                    d.pod,
                    d.node.as_deref().unwrap_or("<none>"),
                    d.message.as_deref().unwrap_or("")
                )?;
                if options.explain {
                    for n in &d.nodes {
                        if n.feasible {
                            let scores: Vec<String> =
                                n.scores.iter().map(|(p, s)| format!("{p}={s}")).collect();
                            writeln!(
                                out,
                                "    {:<24} total={:<5} {}",
                                n.node,
                                n.total,
                                scores.join(" ")
                            )?;
                        } else {
                            writeln!(
                                out,
                                "    {:<24} infeasible: {}",
                                n.node,
                                n.reasons.join("; ")
                            )?;
                        }
                    }
                }
            }
        }
    }
    Ok(())
}
