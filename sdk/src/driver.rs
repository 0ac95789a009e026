//! The machinery between the host's calls and a plugin's per-node methods: the node mirror, the
//! current pod and the batch loops. The host drives it directly for a natively linked plugin, and the
//! component glue drives it inside WebAssembly, so both run exactly the same code.

use std::sync::Arc;

use crate::mirror::Nodes;
use crate::types::{
    Descriptor, ExistingPod, Failure, FilterResults, Labels, NodeId, NodeInfo, NodeUsage,
    Normalize, PermitAnswer, Pod, PodId, PodPlan, PostFilterAnswer, QueueKey, Rejection,
    Reservation, VolumeInfo,
};
use crate::Exported;

/// Holds one plugin instance, its mirror of the nodes and the pod of the current cycle.
pub struct Driver<P> {
    plugin: P,
    nodes: Nodes,
    pod: Pod,
}

impl<P: Exported> Driver<P> {
    /// Creates the plugin from its JSON configuration.
    ///
    /// # Errors
    /// The plugin's own message when it refuses the configuration.
    pub fn new(config: &str) -> Result<Self, String> {
        let plugin = P::new(config)?;
        Ok(Driver {
            plugin,
            nodes: Nodes::new(P::INDEXES_LABELS),
            pod: Pod::default(),
        })
    }

    /// What this plugin does, as the host is told: a plugin's own normalization
    /// ([`Normalize::Custom`]) is reported as [`Normalize::InScore`], since
    /// [`Driver::score_for_host`] runs it before returning (one call fewer per cycle).
    pub fn descriptor() -> Descriptor {
        Descriptor {
            name: P::NAME.to_string(),
            version: P::VERSION.to_string(),
            filter: P::FILTER,
            score: P::SCORE,
            normalize: match P::NORMALIZE {
                Normalize::Custom => Normalize::InScore,
                declared => declared,
            },
            reads_usage: P::READS_USAGE,
            // A plugin that reads groups reads each pod's, as a component declares it.
            reads_pod: if P::READS_GROUPS {
                P::READS_POD.union(crate::PodParts::GROUP)
            } else {
                P::READS_POD
            },
            reads_existing_pods: P::READS_EXISTING_PODS,
            reads_namespaces: P::READS_NAMESPACES,
            reads_volumes: P::READS_VOLUMES,
            reads_node_images: P::READS_NODE_IMAGES,
            reads_csi_nodes: P::READS_CSI_NODES,
            reads_devices: P::READS_DEVICES,
            pre_enqueue: P::PRE_ENQUEUE,
            permit: P::PERMIT,
            reserve: P::RESERVE,
            reads_groups: P::READS_GROUPS,
            post_filter: P::POST_FILTER,
            queue_sort: P::QUEUE_SORT,
            plan_ignores_usage: P::PLAN_IGNORES_USAGE,
        }
    }

    /// PreEnqueue: see [`crate::Plugin::pre_enqueue`].
    pub fn pre_enqueue(&mut self, pod: &Pod) -> Option<Failure> {
        self.plugin.pre_enqueue(pod)
    }

    /// Permit: see [`crate::Plugin::permit`].
    pub fn permit(&mut self, pod: &Pod, node: &str) -> PermitAnswer {
        self.plugin.permit(pod, node)
    }

    /// Reserve on the node `node` of the mirror: see [`crate::Plugin::reserve`].
    ///
    /// # Errors
    /// The plugin's failure, or an error when the node is not in the mirror.
    pub fn reserve(&mut self, node: NodeId) -> Result<Reservation, Failure> {
        let Some(info) = self.nodes.get(node) else {
            return Err(Failure::error(format!(
                "node {node} is not in the plugin's mirror"
            )));
        };
        self.plugin.reserve(&self.pod, info)
    }

    /// Unreserve: see [`crate::Plugin::unreserve`].
    pub fn unreserve(&mut self, pod: &Pod, node: &str) {
        self.plugin.unreserve(pod, node);
    }

    /// Unreserve for a plugin that reads groups: see [`crate::Plugin::unreserve_rejects`].
    pub fn unreserve_rejects(&mut self, pod: &Pod, node: &str) -> Vec<Rejection> {
        self.plugin.unreserve_rejects(pod, node)
    }

    /// PostFilter: see [`crate::Plugin::post_filter`].
    pub fn post_filter(&mut self, pod: &Pod) -> PostFilterAnswer {
        self.plugin.post_filter(pod)
    }

    /// QueueSort: see [`crate::Plugin::queue_sort`].
    pub fn queue_sort(&self, pod: &Pod, queued_millis: i64) -> QueueKey {
        self.plugin.queue_sort(pod, queued_millis)
    }

    /// The plugin itself.
    pub fn plugin(&self) -> &P {
        &self.plugin
    }

    /// Adds or replaces nodes in the mirror. The pods of a node whose labels (or name) change are
    /// removed from the plugin's view under the old node and added again under the new one.
    pub fn upsert_nodes(&mut self, nodes: impl IntoIterator<Item = (u32, NodeInfo)>) {
        let none = NodeInfo::default();
        for (id, node) in nodes {
            let relabelled: Vec<PodId> = match self.nodes.pods_on(id).next() {
                None => Vec::new(),
                Some(_) => {
                    let old = self.nodes.get(id).unwrap_or(&none);
                    if old.labels == node.labels && old.name == node.name {
                        Vec::new()
                    } else {
                        let pods: Vec<PodId> = self.nodes.pods_on(id).map(|(p, _)| p).collect();
                        for &pod in &pods {
                            if let Some(existing) = self.nodes.pod(pod) {
                                self.plugin.pod_removed(pod, existing, old);
                            }
                        }
                        pods
                    }
                }
            };
            self.nodes.upsert(id, node);
            if let Some(node) = self.nodes.get(id) {
                self.plugin.node_upserted(id, node);
            }
            for pod in relabelled {
                self.announce_added(pod);
            }
        }
    }

    /// Removes nodes from the mirror (with any pod the host left on them).
    pub fn remove_nodes(&mut self, ids: &[NodeId]) {
        for &id in ids {
            let left: Vec<PodId> = self.nodes.pods_on(id).map(|(p, _)| p).collect();
            for pod in left {
                self.remove_pod(pod);
            }
            self.nodes.remove(id);
        }
    }

    /// Replaces the usage of nodes in the mirror; unknown ids are ignored.
    pub fn update_usage(&mut self, usage: impl IntoIterator<Item = (u32, NodeUsage)>) {
        for (id, node_usage) in usage {
            self.nodes.update_usage(id, node_usage);
        }
    }

    /// Adds existing pods to the mirror or replaces them.
    pub fn upsert_pods(&mut self, pods: impl IntoIterator<Item = (PodId, ExistingPod)>) {
        for (id, pod) in pods {
            self.remove_pod(id);
            self.nodes.upsert_pod(id, pod);
            self.announce_added(id);
        }
    }

    /// Removes existing pods from the mirror; unknown ids are ignored.
    pub fn remove_pods(&mut self, ids: &[PodId]) {
        for &id in ids {
            self.remove_pod(id);
        }
    }

    fn remove_pod(&mut self, id: PodId) {
        if let Some(pod) = self.nodes.pod(id) {
            let none = NodeInfo::default();
            let node = self.nodes.get(pod.node).unwrap_or(&none);
            self.plugin.pod_removed(id, pod, node);
            self.nodes.remove_pod(id);
        }
    }

    fn announce_added(&mut self, id: PodId) {
        if let Some(pod) = self.nodes.pod(id) {
            let none = NodeInfo::default();
            let node = self.nodes.get(pod.node).unwrap_or(&none);
            self.plugin.pod_added(id, pod, node);
        }
    }

    /// Adds namespaces to the mirror or replaces their labels.
    pub fn upsert_namespaces(&mut self, namespaces: impl IntoIterator<Item = (String, Labels)>) {
        for (name, labels) in namespaces {
            self.nodes.upsert_namespace(name, labels);
        }
    }

    /// Adds volumes to the mirror or replaces them.
    pub fn upsert_volumes(&mut self, volumes: impl IntoIterator<Item = VolumeInfo>) {
        for volume in volumes {
            if let Some(old) = self.nodes.remove_volume(&volume.name) {
                self.plugin.volume_removed(&old);
            }
            let volume = Arc::new(volume);
            self.nodes.insert_volume(Arc::clone(&volume));
            self.plugin.volume_added(&volume);
        }
    }

    /// Removes volumes from the mirror.
    pub fn remove_volumes<'a>(&mut self, names: impl IntoIterator<Item = &'a str>) {
        for name in names {
            if let Some(old) = self.nodes.remove_volume(name) {
                self.plugin.volume_removed(&old);
            }
        }
    }

    /// Removes namespaces from the mirror.
    pub fn remove_namespaces<'a>(&mut self, names: impl IntoIterator<Item = &'a str>) {
        for name in names {
            self.nodes.remove_namespace(name);
        }
    }

    /// Starts a cycle for `pod`.
    pub fn set_pod(&mut self, pod: Pod) -> PodPlan {
        self.pod = pod;
        self.plugin.prepare(&self.pod, &self.nodes)
    }

    /// The pod of the current cycle.
    pub fn pod(&self) -> &Pod {
        &self.pod
    }

    /// The node mirror.
    pub fn nodes(&self) -> &Nodes {
        &self.nodes
    }

    /// Filters `ids` for the current pod, appending one verdict per id to `out`.
    pub fn filter(&mut self, ids: &[NodeId], out: &mut FilterResults) {
        self.plugin.filter_nodes(&self.pod, &self.nodes, ids, out);
    }

    /// Scores `ids` for the current pod, appending one raw score per id to `out`.
    pub fn score(&mut self, ids: &[NodeId], out: &mut Vec<i64>) {
        self.plugin.score_nodes(&self.pod, &self.nodes, ids, out);
    }

    /// The plugin's own normalization of the current cycle's scores.
    pub fn normalize(&self, scores: &mut [i64]) {
        self.plugin.normalize_scores(&self.pod, scores);
    }

    /// [`Driver::score`] as the host calls it: with [`Normalize::Custom`] (told to the host as
    /// [`Normalize::InScore`]), `ids` are every feasible node, and their scores are normalized
    /// before returning.
    pub fn score_for_host(&mut self, ids: &[NodeId], out: &mut Vec<i64>) {
        let before = out.len();
        self.score(ids, out);
        if P::NORMALIZE == Normalize::Custom {
            self.normalize(&mut out[before..]);
        }
    }
}
