//! `wasched simulate`: where would the pending pods of a cluster dump go, and why do the others
//! stay Pending?

use std::io::Write;

use serde::Serialize;

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;
use wasched_sdk as sdk;

use crate::cache::PodVolumes;
use crate::clock::{Clock, FakeClock};
use crate::config::Config;
use crate::events::{EventPipeline, Object};
use crate::framework::{NodeReport, Preemption, Scheduler};
use crate::input::Cluster;
use crate::k8s;
use crate::service::{bound_pod, Binder, CycleResult, Sequencer, Service};

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

/// The decision for one pending pod: the core's cycle result.
pub type Decision = CycleResult;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonDecision<'a> {
    pod: &'a str,
    node: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    nodes: Option<&'a [NodeReport]>,
    /// Where preemption made room for the pod, and which pods it evicted there.
    #[serde(skip_serializing_if = "Option::is_none")]
    preemption: Option<&'a Preemption>,
    /// With `--explain`: every candidate node preemption found, with its victims there.
    #[serde(skip_serializing_if = "Option::is_none")]
    preemption_candidates: Option<&'a [Preemption]>,
}

/// Confirms every binding at once by feeding the bound pod back as an update, as the API server
/// would.
pub(crate) struct ConfirmingBinder {
    pipeline: Arc<EventPipeline>,
    sequence: Arc<Sequencer>,
    pods: Arc<HashMap<String, core::Pod>>,
    /// Volumes by name and claims by `namespace/name`, as this binder last wrote them.
    volumes: HashMap<String, core::PersistentVolume>,
    claims: HashMap<String, core::PersistentVolumeClaim>,
}

impl ConfirmingBinder {
    /// A binder confirming bindings of `pods` (by `namespace/name`) through `pipeline`.
    pub(crate) fn new(
        pipeline: Arc<EventPipeline>,
        sequence: Arc<Sequencer>,
        pods: Arc<HashMap<String, core::Pod>>,
    ) -> Self {
        ConfirmingBinder {
            pipeline,
            sequence,
            pods,
            volumes: HashMap::new(),
            claims: HashMap::new(),
        }
    }

    /// This binder, binding claims to these volumes as the PV controller would.
    pub(crate) fn with_storage(
        mut self,
        volumes: &[core::PersistentVolume],
        claims: &[core::PersistentVolumeClaim],
    ) -> Self {
        self.volumes = volumes
            .iter()
            .map(|v| (v.metadata.name.clone().unwrap_or_default(), v.clone()))
            .collect();
        self.claims = claims
            .iter()
            .map(|c| (k8s::claim_key(c), c.clone()))
            .collect();
        self
    }
}

impl Binder for ConfirmingBinder {
    /// Binds each volume to its claim at once and marks each claim to provision with the node,
    /// and feeds them back as updates: nothing here provisions volumes, so those claims keep
    /// waiting, holding the node for the pods that share them.
    fn bind_volumes(
        &mut self,
        pod: &sdk::Pod,
        node: &str,
        volumes: &PodVolumes,
    ) -> Result<(), String> {
        let claim_key = |name: &str| format!("{}/{name}", pod.namespace);
        let mut updates = Vec::new();
        for (claim_name, volume_name) in &volumes.static_bindings {
            let claim = self
                .claims
                .get(&claim_key(claim_name))
                .ok_or_else(|| format!("persistentvolumeclaim \"{claim_name}\" not found"))?;
            let volume = self
                .volumes
                .get(volume_name)
                .ok_or_else(|| format!("persistentvolume \"{volume_name}\" not found"))?;
            let (volume, claim) = k8s::bound_volume_and_claim(volume, claim);
            updates.push((Some(volume), claim));
        }
        for claim_name in &volumes.provisions {
            let claim = self
                .claims
                .get(&claim_key(claim_name))
                .ok_or_else(|| format!("persistentvolumeclaim \"{claim_name}\" not found"))?;
            updates.push((None, k8s::claim_with_selected_node(claim, node)));
        }
        for (volume, claim) in updates {
            if let Some(volume) = volume {
                self.volumes.insert(
                    volume.metadata.name.clone().unwrap_or_default(),
                    volume.clone(),
                );
                self.pipeline
                    .submit(self.sequence.upsert(Object::Volume(Box::new(volume))));
            }
            self.claims.insert(k8s::claim_key(&claim), claim.clone());
            self.pipeline
                .submit(self.sequence.upsert(Object::Claim(Box::new(claim))));
        }
        Ok(())
    }

    fn bind(&mut self, pod: &sdk::Pod, node: &str) -> Result<(), String> {
        let key = pod.key();
        let original = self.pods.get(&key).ok_or("unknown pod")?;
        let bound = bound_pod(original, node);
        self.pipeline
            .submit(self.sequence.upsert(Object::Pod(Box::new(bound))));
        Ok(())
    }

    /// Deletes the victims at once (nothing here has a grace period) and records the node on the
    /// pod as `status.nominatedNodeName`, as the API server would show them.
    fn preempt(&mut self, pod: &sdk::Pod, preemption: &Preemption) -> Result<(), String> {
        let original = self.pods.get(&pod.key()).ok_or("unknown pod")?;
        for victim in preemption.victims.iter().filter(|v| !v.terminating) {
            let Some(evicted) = self.pods.get(&victim.pod) else {
                return Err(format!("unknown victim {}", victim.pod));
            };
            self.pipeline
                .submit(self.sequence.delete(Object::Pod(Box::new(evicted.clone()))));
        }
        let mut nominated = original.clone();
        nominated
            .status
            .get_or_insert_with(Default::default)
            .nominated_node_name = Some(preemption.node.clone());
        self.pipeline
            .submit(self.sequence.upsert(Object::Pod(Box::new(nominated))));
        Ok(())
    }
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
    let profiles = config.profiles()?;
    let scheduler = Scheduler::new(&profiles, options.seed)?;
    let sequence = Arc::new(Sequencer::default());
    let pods: HashMap<String, core::Pod> = cluster
        .pods
        .iter()
        .map(|p| (k8s::pod_key(p), p.clone()))
        .collect();
    let pipeline = Arc::new(EventPipeline::default());
    let binder = ConfirmingBinder::new(pipeline.clone(), sequence.clone(), Arc::new(pods))
        .with_storage(&cluster.volumes, &cluster.claims);
    // Time only moves when every ready pod was tried: then to the end of the earliest backoff,
    // so a pod an event sent back (a preemptor whose victims are gone) is tried again without
    // the simulation waiting for it.
    let clock = FakeClock::default();
    let mut service =
        Service::with_pipeline(scheduler, binder, Arc::new(clock.clone()), pipeline.clone())
            .with_explain(options.explain);
    // Namespaces, storage, Services and controllers, and nodes first, then running pods, then
    // pending pods in priority order, so that the queue's arrival order is the input order.
    let mut objects: Vec<Object> = Cluster {
        nodes: cluster.nodes.clone(),
        volumes: cluster.volumes.clone(),
        claims: cluster.claims.clone(),
        classes: cluster.classes.clone(),
        namespaces: cluster.namespaces.clone(),
        selectors: cluster.selectors.clone(),
        disruption_budgets: cluster.disruption_budgets.clone(),
        ..Cluster::default()
    }
    .into_objects();
    let live = cluster.pods.iter().filter(|p| !k8s::is_terminated(p));
    let (running, mut pending): (Vec<&core::Pod>, Vec<&core::Pod>) = live.partition(|p| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty())
    });
    pending
        .sort_by_key(|p| std::cmp::Reverse(p.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)));
    objects.extend(
        running
            .into_iter()
            .chain(pending)
            .map(|p| Object::Pod(Box::new(p.clone()))),
    );
    for object in objects {
        pipeline.submit(sequence.upsert(object));
    }
    let mut decisions = Vec::new();
    loop {
        let tried = service.run_until_idle();
        // Only a preemption (whose victims' deletion sends its pod back) is worth waiting out a
        // backoff for; a pod that failed for another reason is tried once, as before, and never
        // in a loop (a plugin that always fails would otherwise be retried forever).
        let preempted = tried.iter().any(|d| d.preemption.is_some());
        decisions.extend(tried);
        let Some(ready) = service.queue().next_backoff_ready().filter(|_| preempted) else {
            break;
        };
        clock.advance(ready.saturating_sub(clock.now()));
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
                    nodes: options.explain.then_some(&d.nodes[..]),
                    preemption: d.preemption.as_ref(),
                    preemption_candidates: (options.explain && !d.preemption_candidates.is_empty())
                        .then_some(&d.preemption_candidates[..]),
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
                let preempting = d.preemption.as_ref().map_or(String::new(), |p| {
                    let victims: Vec<&str> = p.victims.iter().map(|v| v.pod.as_str()).collect();
                    format!(
                        " (nominated to {}, evicting {})",
                        p.node,
                        victims.join(", ")
                    )
                });
                writeln!(
                    out,
                    "{:pod_width$}  {:node_width$}  {}{preempting}",
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
                    for c in &d.preemption_candidates {
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
                }
            }
        }
    }
    Ok(())
}
