//! `wasched simulate`: where would the pending pods of a cluster dump go, and why do the others
//! stay Pending?

use std::io::Write;

use serde::Serialize;

use std::sync::Arc;

use crate::binding::MemoryBackend;
use crate::clock::{Clock, FakeClock};
use crate::config::Config;
use crate::events::{EventPipeline, Object};
use crate::framework::{Decider, NodeReport, Preemption};
use crate::input::Cluster;
use crate::k8s;
use crate::service::{CycleResult, Sequencer, Service};

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
    /// Every examined node's verdict and scores is printed.
    pub explain: bool,
    /// How decisions are printed.
    pub output: Output,
    /// Seeds the tie-breaking between equally good nodes.
    pub seed: u64,
}

/// The decision for one pending pod: the core's cycle result.
pub type Decision = CycleResult;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonDecision<'a> {
    pod: &'a str,
    node: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'a str>,
    /// A PreEnqueue plugin keeps the pod out of the queue (its message says why): never tried.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    gated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    nodes: Option<&'a [NodeReport]>,
    /// Where preemption made room for the pod, and which pods it evicted there.
    #[serde(skip_serializing_if = "Option::is_none")]
    preemption: Option<&'a Preemption>,
    /// With `--explain`: every candidate node preemption found, with its victims there.
    #[serde(skip_serializing_if = "Option::is_none")]
    preemption_candidates: Option<&'a [Preemption]>,
    /// The devices allocated for the pod's ResourceClaims (DynamicResources).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    devices: Vec<AllocatedDevice<'a>>,
}

/// A device allocated for one request of one of a pod's claims.
#[derive(serde::Serialize)]
struct AllocatedDevice<'a> {
    claim: &'a str,
    request: &'a str,
    /// `driver/pool/device`.
    device: String,
}

fn allocated_devices(d: &Decision) -> Vec<AllocatedDevice<'_>> {
    d.outcome
        .claim_writes
        .iter()
        .flat_map(|write| {
            let devices = write.allocation.iter().flat_map(|a| &a.devices);
            devices.map(|device| AllocatedDevice {
                claim: &write.claim,
                request: &device.request,
                device: format!("{}/{}/{}", device.driver, device.pool, device.device),
            })
        })
        .collect()
}

/// Schedules every pending pod of `cluster` in queue order (higher `spec.priority` first, then
/// input order), placing each before the next is considered. The cluster goes through the same
/// event pipeline, queue and assume/bind path as the long-running scheduler, with a binder that
/// confirms every binding.
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
    simulate_to_end(config, cluster, options).map(|(decisions, _)| decisions)
}

/// [`simulate`], with the service as the simulation left it (its cache holds every placement).
///
/// # Errors
/// A configuration or plugin that cannot be loaded.
pub fn simulate_to_end(
    config: &Config,
    cluster: &Cluster,
    options: Options,
) -> anyhow::Result<(Vec<Decision>, Service)> {
    let copy = Cluster {
        nodes: cluster.nodes.clone(),
        pods: cluster.pods.clone(),
        json_pods: cluster.json_pods.clone(),
        volumes: cluster.volumes.clone(),
        claims: cluster.claims.clone(),
        classes: cluster.classes.clone(),
        namespaces: cluster.namespaces.clone(),
        selectors: cluster.selectors.clone(),
        disruption_budgets: cluster.disruption_budgets.clone(),
        csi: cluster.csi.clone(),
        devices: cluster.devices.clone(),
        groups: cluster.groups.clone(),
        ..Cluster::default()
    };
    simulate_owned(config, copy, options)
}

/// [`simulate_to_end`] on a cluster it may consume: each object is moved into its event and
/// applied a chunk at a time, so that a large dump is not held twice over by the time it is in
/// the cache (only the in-memory API server's copy of each pod is made).
///
/// # Errors
/// A configuration or plugin that cannot be loaded.
pub fn simulate_owned(
    config: &Config,
    mut cluster: Cluster,
    options: Options,
) -> anyhow::Result<(Vec<Decision>, Service)> {
    let profiles = config.profiles()?;
    let decider = Decider::new(&profiles, options.seed)?;
    let sequence = Arc::new(Sequencer::default());
    let pipeline = Arc::new(EventPipeline::default());
    let mut pods = std::mem::take(&mut cluster.pods);
    pods.retain(|p| !k8s::is_terminated(p));
    // Running pods first, then pending pods by priority (highest first), each class in input
    // order: sorted in place, as the two classes split into two new lists would hold every pod
    // twice for a moment.
    pods.sort_by_key(|p| match is_running(p) {
        true => (0, 0),
        false => (
            1,
            -i64::from(p.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)),
        ),
    });
    // The in-memory API server keeps every pod as JSON: a typed pod is several times larger, and
    // a dump's pods are written once (bound) or never.
    let backend = MemoryBackend::new(pipeline.clone(), sequence.clone(), [])
        .kept_compact()
        .with_compact_pods(&pods)
        .with_pods_json(cluster.json_pods.iter().cloned())
        .with_storage(&cluster.volumes, &cluster.claims)
        .with_resource_claims(&cluster.devices);
    // Time only moves when every ready pod was tried: then to the end of the earliest backoff,
    // so a pod an event sent back (a preemptor whose victims are gone) is tried again without
    // the simulation waiting for it.
    let clock = FakeClock::default();
    let mut service = Service::with_pipeline(
        decider,
        Some(Box::new(backend)),
        Arc::new(clock.clone()),
        pipeline.clone(),
    )
    .with_explain(options.explain)
    .without_resync();
    // Namespaces, storage, Services and controllers, and nodes first, then running pods, then
    // pending pods in priority order, so that the queue's arrival order is the input order.
    let running = std::mem::take(&mut cluster.json_pods);
    let objects = cluster
        .into_objects()
        .into_iter()
        .chain(
            running
                .into_iter()
                .map(|(_, json)| Object::Pod(Box::new(crate::input::json_pod(&json)))),
        )
        .chain(pods.into_iter().map(|p| Object::Pod(Box::new(p))));
    for (i, object) in objects.enumerate() {
        pipeline.submit(sequence.upsert(object));
        if (i + 1) % APPLY_CHUNK == 0 {
            service.apply_events();
        }
    }
    let decisions = schedule_until_settled(&mut service, &clock);
    Ok((decisions, service))
}

/// Whether a pod names its node (runs there).
fn is_running(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
}

/// Events submitted between two applications while a cluster is loaded: the pipeline never
/// holds more than this many objects.
const APPLY_CHUNK: usize = 4096;

/// Runs `service` until no pod is left to try, moving `clock` only to what a pod waits for: the
/// end of a preempting pod's backoff, or of a Permit wait.
fn schedule_until_settled(service: &mut Service, clock: &FakeClock) -> Vec<Decision> {
    let mut decisions = Vec::new();
    let mut permit_rounds = 0;
    loop {
        let tried = service.run_until_idle();
        // Only a preemption (whose victims' deletion sends its pod back) is worth waiting out a
        // backoff for; a pod that failed for another reason is tried once, as before, and never
        // in a loop (a plugin that always fails would otherwise be retried forever).
        let preempted = tried.iter().any(|d| d.outcome.preemption.is_some());
        decisions.extend(tried);
        // A pod waiting at Permit is let go by another pod or rejected when its wait runs out:
        // time moves to that moment when nothing else is left to do.
        let backoff = service.queue().next_backoff_ready().filter(|_| preempted);
        let permit = service.waiting().next_deadline();
        let Some(next) = backoff.into_iter().chain(permit).min() else {
            break;
        };
        clock.advance(next.saturating_sub(clock.now()));
        if backoff != Some(next) {
            // A gang that cannot complete is rejected when its wait runs out and tried again
            // after backoff, for ever: past the first time a wait ran out, the waits are ended
            // and nothing is tried again.
            permit_rounds += 1;
            if permit_rounds > MAX_PERMIT_ROUNDS {
                while let Some(deadline) = service.waiting().next_deadline() {
                    clock.advance(deadline.saturating_sub(clock.now()));
                    decisions.extend(service.release_expired());
                }
                break;
            }
        }
    }
    decisions
}

/// How many times `simulate` lets time run to the end of a Permit wait and goes on scheduling.
const MAX_PERMIT_ROUNDS: u32 = 1;

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
                    node: d.outcome.node.as_deref(),
                    message: d.outcome.message.as_deref(),
                    gated: d.gated.is_some(),
                    nodes: options.explain.then_some(&d.outcome.nodes[..]),
                    preemption: d.outcome.preemption.as_deref(),
                    preemption_candidates: (options.explain
                        && !d.outcome.preemption_candidates.is_empty())
                    .then_some(&d.outcome.preemption_candidates[..]),
                    devices: allocated_devices(d),
                };
                serde_json::to_writer(&mut *out, &json)?;
                writeln!(out)?;
            }
            Ok(())
        }
        Output::Table => print_table(decisions, options.explain, out),
    }
}

/// The node column: the node, or why there is none.
fn node_column(d: &Decision) -> String {
    match (&d.outcome.node, &d.gated) {
        (Some(node), _) => node.clone(),
        (None, Some(_)) => "<gated>".to_string(),
        (None, None) => "<none>".to_string(),
    }
}

/// One line per pod (`POD NODE MESSAGE`), each followed, with `explain`, by every examined node
/// and every preemption candidate.
fn print_table(decisions: &[Decision], explain: bool, out: &mut dyn Write) -> std::io::Result<()> {
    let pod_width = decisions
        .iter()
        .map(|d| d.pod.len())
        .max()
        .unwrap_or(3)
        .max(3);
    let node_width = decisions
        .iter()
        .map(|d| node_column(d).len())
        .max()
        .unwrap_or(4)
        .max(4);
    writeln!(out, "{:pod_width$}  {:node_width$}  MESSAGE", "POD", "NODE")?;
    for d in decisions {
        let preempting = d.outcome.preemption.as_ref().map_or(String::new(), |p| {
            let victims: Vec<&str> = p.victims.iter().map(|v| v.pod.as_str()).collect();
            format!(
                " (nominated to {}, evicting {})",
                p.node,
                victims.join(", ")
            )
        });
        let devices = allocated_devices(d);
        let allocated = if devices.is_empty() {
            String::new()
        } else {
            let list: Vec<String> = devices
                .iter()
                .map(|a| format!("{}/{} -> {}", a.claim, a.request, a.device))
                .collect();
            format!("devices: {}", list.join(", "))
        };
        writeln!(
            out,
            "{:pod_width$}  {:node_width$}  {}{preempting}{allocated}",
            d.pod,
            node_column(d),
            d.outcome.message.as_deref().unwrap_or("")
        )?;
        if explain {
            print_explained(d, out)?;
        }
    }
    Ok(())
}

/// A pod's examined nodes (scores, or why infeasible) and preemption candidates, indented.
fn print_explained(d: &Decision, out: &mut dyn Write) -> std::io::Result<()> {
    for n in &d.outcome.nodes {
        if n.feasible {
            let scores: Vec<String> = n.scores.iter().map(|(p, s)| format!("{p}={s}")).collect();
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
    for c in &d.outcome.preemption_candidates {
        let victims: Vec<String> = c
            .victims
            .iter()
            .map(|v| format!("{} (priority {})", v.pod, v.priority))
            .collect();
        let budgets = match c.pdb_violations {
            0 => String::new(),
            1 => " breaking 1 PodDisruptionBudget".to_string(),
            n => format!(" breaking {n} PodDisruptionBudgets"),
        };
        writeln!(
            out,
            "    {:<24} preemption would evict {}{budgets}",
            c.node,
            victims.join(", ")
        )?;
    }
    Ok(())
}
