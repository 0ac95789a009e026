//! The machinery between the host's calls and a plugin's per-node methods: the node mirror, the
//! current pod and the batch loops. The host drives it directly for a natively linked plugin, and the
//! component glue drives it inside WebAssembly, so both run exactly the same code.

use crate::types::{Descriptor, Failure, FilterResults, NodeInfo, NodeUsage, Pod, PodPlan};
use crate::Exported;

/// Holds one plugin instance, its mirror of the nodes and the pod of the current cycle.
pub struct Driver<P> {
    plugin: P,
    nodes: Vec<Option<NodeInfo>>,
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
            nodes: Vec::new(),
            pod: Pod::default(),
        })
    }

    /// What this plugin does.
    pub fn descriptor() -> Descriptor {
        Descriptor {
            name: P::NAME.to_string(),
            version: P::VERSION.to_string(),
            filter: P::FILTER,
            score: P::SCORE,
            normalize: P::NORMALIZE,
            reads_usage: P::READS_USAGE,
        }
    }

    /// The plugin itself.
    pub fn plugin(&self) -> &P {
        &self.plugin
    }

    /// Adds or replaces nodes in the mirror.
    pub fn upsert_nodes(&mut self, nodes: impl IntoIterator<Item = (u32, NodeInfo)>) {
        for (id, node) in nodes {
            let slot = id as usize;
            if slot >= self.nodes.len() {
                self.nodes.resize_with(slot + 1, || None);
            }
            self.nodes[slot] = Some(node);
        }
    }

    /// Removes nodes from the mirror.
    pub fn remove_nodes(&mut self, ids: &[u32]) {
        for &id in ids {
            if let Some(slot) = self.nodes.get_mut(id as usize) {
                *slot = None;
            }
        }
    }

    /// Replaces the usage of nodes in the mirror; unknown ids are ignored.
    pub fn update_usage(&mut self, usage: impl IntoIterator<Item = (u32, NodeUsage)>) {
        for (id, node_usage) in usage {
            if let Some(Some(node)) = self.nodes.get_mut(id as usize) {
                node.usage = node_usage;
            }
        }
    }

    /// Starts a cycle for `pod`.
    pub fn set_pod(&mut self, pod: Pod) -> PodPlan {
        self.pod = pod;
        self.plugin.prepare(&self.pod)
    }

    /// The pod of the current cycle.
    pub fn pod(&self) -> &Pod {
        &self.pod
    }

    /// Filters `ids` for the current pod, appending one verdict per id to `out`.
    pub fn filter(&self, ids: &[u32], out: &mut FilterResults) {
        for &id in ids {
            let verdict = match self.node(id) {
                Some(node) => self.plugin.filter_node(&self.pod, node),
                None => Err(unknown_node(id)),
            };
            out.push(verdict);
        }
    }

    /// Scores `ids` for the current pod, appending one raw score per id to `out`.
    pub fn score(&self, ids: &[u32], out: &mut Vec<i64>) {
        out.extend(ids.iter().map(|&id| match self.node(id) {
            Some(node) => self.plugin.score_node(&self.pod, node),
            // An impossible score makes the host report the plugin's failure instead of guessing.
            None => i64::MIN,
        }));
    }

    /// The plugin's own normalization of the current cycle's scores.
    pub fn normalize(&self, scores: &mut [i64]) {
        self.plugin.normalize_scores(&self.pod, scores);
    }

    fn node(&self, id: u32) -> Option<&NodeInfo> {
        self.nodes.get(id as usize).and_then(Option::as_ref)
    }
}

fn unknown_node(id: u32) -> Failure {
    Failure::error(format!("node id {id} is not in the plugin's mirror"))
}
