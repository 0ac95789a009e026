//! Keeping a plugin instance's mirror in step with the cache: the nodes, placed pods, namespaces
//! and volumes that changed since the instance last looked, in batches.

use wasched_sdk as sdk;

use super::{PluginSpec, SYNC_BATCH};
use crate::cache::Cache;
use crate::runtime::{CallError, FailureKind, PluginInstance};

/// What of the cache a plugin's mirror holds beyond its nodes (from its descriptor).
#[derive(Debug, Clone, Copy)]
pub(super) struct Reads {
    pub(super) usage: bool,
    pub(super) existing_pods: sdk::ExistingPodParts,
    pub(super) namespaces: bool,
    pub(super) volumes: bool,
    /// The node details it is sent beside each node.
    pub(super) details: sdk::wire::NodeDetails,
}

impl Reads {
    pub(super) fn of(descriptor: &sdk::Descriptor) -> Reads {
        Reads {
            usage: descriptor.reads_usage,
            existing_pods: descriptor.reads_existing_pods,
            namespaces: descriptor.reads_namespaces,
            volumes: descriptor.reads_volumes,
            details: sdk::wire::NodeDetails::read_by(descriptor),
        }
    }
}

/// How far an instance's mirror follows the cache.
#[derive(Debug, Clone, Default)]
pub(super) struct Synced {
    /// The cache generation the mirror reflects; `None` while it is empty.
    pub(super) generation: Option<u64>,
    /// Per pod id, for a plugin that reads no labels: whether its mirror holds the pod. Such a
    /// plugin is not sent the pods that have none of the parts it reads (NodePorts reads host
    /// ports, which few pods have): that spares a call per placement, and since its mirror then
    /// does not change, its plan for the next pod of the same shape stands too.
    held: Vec<bool>,
}

impl Synced {
    pub(super) fn holds(&self, pod: u32) -> bool {
        self.held.get(pod as usize).copied().unwrap_or(false)
    }

    fn hold(&mut self, pod: u32, held: bool) {
        let slot = pod as usize;
        if slot >= self.held.len() {
            if !held {
                return;
            }
            self.held.resize(slot + 1, false);
        }
        self.held[slot] = held;
    }
}

/// Whether a plugin reading `parts` of placed pods needs `pod` in its mirror: one that reads
/// labels needs every pod; otherwise only a pod with something in a part it reads.
pub(super) fn worth_sending(pod: &sdk::ExistingPod, parts: sdk::ExistingPodParts) -> bool {
    use sdk::ExistingPodParts as Parts;
    parts.contains(Parts::LABELS)
        || (parts.contains(Parts::POD_AFFINITY) && !pod.pod_affinity.is_empty())
        || (parts.contains(Parts::HOST_PORTS) && !pod.host_ports.is_empty())
        || (parts.contains(Parts::VOLUMES) && !pod.volumes.is_empty())
}

/// Brings one instance's mirror from generation `synced` up to the cache's, making a fresh
/// instance (which gets every node) when there is none or the change log no longer reaches back.
pub(super) fn catch_up(
    spec: &PluginSpec,
    reads: Reads,
    instance: &mut Option<Box<dyn PluginInstance>>,
    synced: &mut Synced,
    cache: &Cache,
) -> Result<(), CallError> {
    let generation = cache.generation();
    let lagging = synced.generation.is_some_and(|s| s < cache.log_start());
    if instance.is_none() || lagging {
        *synced = Synced::default();
        let fresh = spec
            .instantiate()
            .map_err(|e| CallError::of_kind(FailureKind::Init, "init", e.0))?;
        *instance = Some(fresh);
    }
    let live = instance.as_mut().expect("made above");
    let result = send_changes(live.as_mut(), reads, synced, cache);
    match result {
        Ok(()) => synced.generation = Some(generation),
        Err(_) => {
            *instance = None;
            *synced = Synced::default();
        }
    }
    result
}

pub(super) fn send_changes(
    instance: &mut dyn PluginInstance,
    reads: Reads,
    synced: &mut Synced,
    cache: &Cache,
) -> Result<(), CallError> {
    match synced.generation {
        None => send_everything(instance, reads, synced, cache),
        Some(since) if since < cache.generation() => {
            send_delta(instance, reads, synced, cache, since)
        }
        Some(_) => Ok(()),
    }
}

/// Fills an empty mirror: every node, then the pods, namespaces and volumes the plugin reads.
fn send_everything(
    instance: &mut dyn PluginInstance,
    reads: Reads,
    synced: &mut Synced,
    cache: &Cache,
) -> Result<(), CallError> {
    let parts = reads.existing_pods;
    let nodes: Vec<(u32, &sdk::NodeInfo)> =
        cache.nodes().map(|(id, entry)| (id, &entry.info)).collect();
    for batch in nodes.chunks(SYNC_BATCH) {
        instance.upsert_nodes(batch)?;
    }
    if !parts.is_empty() {
        // A batch at a time, so a plugin starting on a large cluster does not make the host hold
        // a copy of every placed pod at once.
        let mut pods = cache
            .existing_pods()
            .filter(|(_, _, pod)| worth_sending(pod, parts))
            .map(|(id, node, pod)| (id, pod.with_parts(node, parts)));
        let mut batch: Vec<(u32, sdk::ExistingPod)> = Vec::with_capacity(SYNC_BATCH);
        loop {
            batch.clear();
            batch.extend(pods.by_ref().take(SYNC_BATCH));
            if batch.is_empty() {
                break;
            }
            for &(id, _) in &batch {
                synced.hold(id, true);
            }
            instance.upsert_pods(&batch)?;
        }
    }
    if reads.namespaces {
        let namespaces: Vec<(&str, &sdk::Labels)> = cache.namespaces().collect();
        for batch in namespaces.chunks(SYNC_BATCH) {
            instance.upsert_namespaces(batch)?;
        }
    }
    if reads.volumes {
        let volumes: Vec<&sdk::VolumeInfo> = cache.all_volumes().collect();
        for batch in volumes.chunks(SYNC_BATCH) {
            instance.upsert_volumes(batch)?;
        }
    }
    Ok(())
}

/// The placed pods that changed since a mirror's generation, in the order they must be sent.
/// A mirror never holds a pod on a node it lacks: pods that left go first (`gone`); pods on nodes
/// the mirror already has (a pod that moved off a node being removed among them) go before the
/// nodes are removed (`early`); pods on nodes being added go after them (`late`), and are removed
/// first too, since where the mirror holds them may be a node being removed.
#[derive(Default)]
struct PodChanges {
    gone: Vec<u32>,
    early: Vec<(u32, sdk::ExistingPod)>,
    late: Vec<(u32, sdk::ExistingPod)>,
}

impl PodChanges {
    fn sort(
        delta: &crate::cache::Delta,
        parts: sdk::ExistingPodParts,
        synced: &mut Synced,
        cache: &Cache,
    ) -> PodChanges {
        let mut changes = PodChanges::default();
        if parts.is_empty() {
            return changes;
        }
        let arriving: std::collections::HashSet<u32> = delta.upserts.iter().copied().collect();
        let every_pod = parts.contains(sdk::ExistingPodParts::LABELS);
        for &id in &delta.pods {
            match cache.existing_pod(id) {
                Some((_, pod)) if !worth_sending(pod, parts) && synced.holds(id) => {
                    changes.gone.push(id);
                    synced.hold(id, false);
                }
                Some((_, pod)) if !worth_sending(pod, parts) => {}
                Some((node, pod)) if arriving.contains(&node) => {
                    changes.gone.push(id);
                    changes.late.push((id, pod.with_parts(node, parts)));
                    synced.hold(id, true);
                }
                Some((node, pod)) => {
                    changes.early.push((id, pod.with_parts(node, parts)));
                    synced.hold(id, true);
                }
                None if every_pod || synced.holds(id) => {
                    changes.gone.push(id);
                    synced.hold(id, false);
                }
                None => {}
            }
        }
        changes
    }
}

/// Sends what changed since generation `since`, in the order [`PodChanges`] explains.
fn send_delta(
    instance: &mut dyn PluginInstance,
    reads: Reads,
    synced: &mut Synced,
    cache: &Cache,
    since: u64,
) -> Result<(), CallError> {
    let delta = cache.delta_since(since);
    let pods = PodChanges::sort(&delta, reads.existing_pods, synced, cache);
    for batch in pods.gone.chunks(SYNC_BATCH) {
        instance.remove_pods(batch)?;
    }
    for batch in pods.early.chunks(SYNC_BATCH) {
        instance.upsert_pods(batch)?;
    }
    if !delta.removals.is_empty() {
        instance.remove_nodes(&delta.removals)?;
    }
    // A node whose changes are all in details the plugin is not sent is left as its mirror
    // has it, and so are the plans worked out from it.
    let details_read = delta
        .details
        .iter()
        .filter(|(_, changed)| reads.details.meets(*changed))
        .map(|&(id, _)| id);
    let upserts: Vec<u32> = delta.upserts.iter().copied().chain(details_read).collect();
    if !upserts.is_empty() {
        let nodes: Vec<(u32, &sdk::NodeInfo)> = upserts
            .iter()
            .filter_map(|&id| cache.node(id).map(|n| (id, &n.info)))
            .collect();
        for batch in nodes.chunks(SYNC_BATCH) {
            instance.upsert_nodes(batch)?;
        }
    }
    if !delta.usage.is_empty() && reads.usage {
        let usage: Vec<(u32, &sdk::NodeUsage)> = delta
            .usage
            .iter()
            .filter_map(|&id| cache.node(id).map(|n| (id, &n.info.usage)))
            .collect();
        for batch in usage.chunks(SYNC_BATCH) {
            instance.update_usage(batch)?;
        }
    }
    for batch in pods.late.chunks(SYNC_BATCH) {
        instance.upsert_pods(batch)?;
    }
    if reads.namespaces && !delta.namespaces.is_empty() {
        send_namespace_changes(instance, &delta.namespaces, cache)?;
    }
    if reads.volumes && !delta.volumes.is_empty() {
        send_volume_changes(instance, &delta.volumes, cache)?;
    }
    Ok(())
}

fn send_namespace_changes(
    instance: &mut dyn PluginInstance,
    changed: &[u32],
    cache: &Cache,
) -> Result<(), CallError> {
    let (mut upserts, mut removals) = (Vec::new(), Vec::new());
    for &id in changed {
        match cache.namespace(id) {
            Some((name, Some(labels))) => upserts.push((name, labels)),
            Some((name, None)) => removals.push(name),
            None => {}
        }
    }
    if !removals.is_empty() {
        instance.remove_namespaces(&removals)?;
    }
    for batch in upserts.chunks(SYNC_BATCH) {
        instance.upsert_namespaces(batch)?;
    }
    Ok(())
}

fn send_volume_changes(
    instance: &mut dyn PluginInstance,
    changed: &[u32],
    cache: &Cache,
) -> Result<(), CallError> {
    let (mut upserts, mut removals) = (Vec::new(), Vec::new());
    for &id in changed {
        match cache.volume_entry(id) {
            Some((_, Some(volume))) => upserts.push(volume),
            Some((name, None)) => removals.push(name),
            None => {}
        }
    }
    if !removals.is_empty() {
        instance.remove_volumes(&removals)?;
    }
    for batch in upserts.chunks(SYNC_BATCH) {
        instance.upsert_volumes(batch)?;
    }
    Ok(())
}
