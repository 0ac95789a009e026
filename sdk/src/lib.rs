//! Write wasched placement plugins in Rust.
//!
//! A plugin is one struct implementing [`Plugin`] plus [`FilterPlugin`] and/or [`ScorePlugin`],
//! exported with [`export_plugin!`]. The same source builds two ways:
//!
//! - as a WebAssembly component (`cargo build --target wasm32-unknown-unknown`, then
//!   `wasched plugin encode`, or the host's build for the default plugins), loaded by the scheduler at
//!   run time;
//! - natively, linked into the host as an ordinary Rust crate.
//!
//! The SDK keeps the plugin's mirror of the cluster's nodes and answers the host's batched calls
//! (see `wit/plugin.wit`); a plugin only ever sees one pod and one node at a time.
//!
//! ```
//! use wasched_sdk::{Failure, FilterPlugin, NodeInfo, Plugin, Pod, Verdict};
//!
//! /// Keeps pods off nodes labelled `maintenance=true`.
//! pub struct Maintenance;
//!
//! impl Plugin for Maintenance {
//!     const NAME: &'static str = "Maintenance";
//!     fn new(_config: &str) -> Result<Self, String> {
//!         Ok(Maintenance)
//!     }
//! }
//!
//! impl FilterPlugin for Maintenance {
//!     fn filter(&self, _pod: &Pod, node: &NodeInfo) -> Verdict {
//!         match node.labels.get("maintenance") {
//!             Some("true") => Err(Failure::unresolvable("node(s) were under maintenance")),
//!             _ => Ok(()),
//!         }
//!     }
//! }
//!
//! wasched_sdk::export_plugin!(Maintenance: filter);
//! ```
//!
//! Core types: [`Pod`], [`NodeInfo`], [`Verdict`] / [`Failure`], [`PodPlan`] / [`FilterPlan`],
//! [`Normalize`]; the engine underneath is [`Driver`]. To test a plugin natively, see [`testing`].

#![deny(missing_docs)]

mod devices;
mod driver;
#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
pub mod guest;
pub mod helpers;
pub mod memcmp;
mod mirror;
pub mod node_selector;
pub mod pod_index;
pub mod size_classes;
#[cfg(not(target_arch = "wasm32"))]
pub mod testing;
mod types;
pub mod wire;

/// Plugins built as WebAssembly allocate small blocks from free lists ([`size_classes`]).
#[cfg(target_arch = "wasm32")]
#[global_allocator]
static ALLOCATOR: size_classes::SizeClasses<std::alloc::System> =
    size_classes::SizeClasses::new(std::alloc::System);

pub use devices::*;
pub use driver::Driver;
pub use mirror::{LabelColumnId, LabelTest, NodeSummary, Nodes, NO_TAINTS};
pub use types::*;

use std::sync::Arc;

/// A plugin: its name and how it is built from its configuration.
pub trait Plugin: Sized + 'static {
    /// The plugin's name, used in configs, messages and metrics (kube-scheduler's names for the
    /// default plugins, e.g. `TaintToleration`).
    const NAME: &'static str;

    /// True when the plugin reads [`NodeInfo::usage`]. When false the host does not send usage
    /// changes after every placement, which saves a call per cycle.
    const READS_USAGE: bool = false;

    /// The parts of the [`Pod`] the plugin reads; the others arrive empty. Every string and list
    /// of a part a WASM plugin does not need saves a call into it per pod: the default plugins
    /// declare one part each (`PodParts::TOLERATIONS`, `PodParts::REQUESTS`, ...), which made
    /// starting a cycle 2.7 times cheaper for them. The default, every part, is always correct.
    const READS_POD: PodParts = PodParts::ALL;

    /// The parts of the pods already on nodes the plugin reads through [`Nodes::pods_on`] and
    /// [`Nodes::pods`] (WIT 0.2). The default, none, keeps the mirror free of pods and spares the
    /// host a call per placement.
    const READS_EXISTING_PODS: ExistingPodParts = ExistingPodParts::NONE;

    /// True when the plugin reads namespaces' labels through [`Nodes::namespace_labels`] (for
    /// `namespaceSelector`s; WIT 0.2).
    const READS_NAMESPACES: bool = false;

    /// True when the plugin reads the cluster's PersistentVolumes through
    /// [`Nodes::class_volumes`] (WIT 0.2).
    const READS_VOLUMES: bool = false;

    /// True when the plugin reads [`NodeInfo::images`] (each node's `status.images`; WIT 0.2's
    /// `details` interface). The default, false, keeps image lists out of the mirror.
    const READS_NODE_IMAGES: bool = false;

    /// True when the plugin reads [`NodeInfo::csi_node`] (each node's CSINode; the `details`
    /// interface).
    const READS_CSI_NODES: bool = false;

    /// True when the plugin reads Dynamic Resource Allocation's objects: each node's
    /// [`NodeInfo::device_pools`], the pod's [`Pod::claims`] (in every call that gets the pod,
    /// PreEnqueue's too), and its [`Reservation::claims`] back from Reserve (kube-scheduler's
    /// DynamicResources). A component gets them through the `devices` interface.
    const READS_DEVICES: bool = false;

    /// True when the plugin uses [`Nodes::label_test`] in its batch methods: the mirror then keeps
    /// an index of every node's labels (about 4 bytes per node per label key, plus each distinct
    /// value once).
    const INDEXES_LABELS: bool = false;

    /// True when the plugin implements [`Plugin::pre_enqueue`]: the host calls it for every
    /// pending pod of the plugin's profile before the pod enters the scheduling queue.
    const PRE_ENQUEUE: bool = false;

    /// True when the plugin implements [`Plugin::permit`] and [`Plugin::unreserve`].
    const PERMIT: bool = false;

    /// True when the plugin implements [`Plugin::reserve`] (and, if it holds anything for a
    /// reservation, [`Plugin::unreserve`]).
    const RESERVE: bool = false;

    /// True when the plugin reads the gang a pod belongs to ([`Pod::group`]: the host adds
    /// [`PodParts::GROUP`] to [`Plugin::READS_POD`]): its Permit and Unreserve then get the
    /// pod with its group and may reject waiting pods ([`PermitAnswer::reject`],
    /// [`Plugin::unreserve_rejects`]). A component gets this through the `groups` interface
    /// (WIT 0.2.1).
    const READS_GROUPS: bool = false;

    /// True when the plugin implements [`Plugin::post_filter`] (needs [`Plugin::READS_GROUPS`]).
    const POST_FILTER: bool = false;

    /// True when the plugin implements [`Plugin::queue_sort`] (needs [`Plugin::READS_GROUPS`]):
    /// it orders the scheduling queue of its profile. A profile has at most one.
    const QUEUE_SORT: bool = false;

    /// True when what [`Plugin::prepare`] answers and works out depends on the pod alone, never
    /// on [`NodeInfo::usage`] (NodeResourcesFit's and NodeResourcesBalancedAllocation's: the
    /// pod's requests). After a placement the host then keeps the plan it has for a pod with the
    /// same parts instead of asking again, and a component gets the usage changes with its next
    /// filter or score call (the `usage-with-calls` interface, WIT 0.2.1): one call a cycle
    /// fewer. `sdk::testing` checks the promise on every case of the plugin's table. The
    /// default, false, promises nothing.
    const PLAN_IGNORES_USAGE: bool = false;

    /// The parts of the pod without which the plugin has no opinion on it: when every part named
    /// here is empty in a pod (and, if this names [`PodParts::POD_AFFINITY`] and the plugin reads
    /// placed pods' [`ExistingPodParts::POD_AFFINITY`], no placed pod has a pod (anti-)affinity
    /// term either), [`Plugin::prepare`] would answer [`FilterPlan::Skip`] with no score. The
    /// host then gives that answer itself, without a call, and brings the plugin's mirror up to
    /// date in batches rather than every cycle. `sdk::testing` checks the promise on every case
    /// of the plugin's table. The host takes the default plugins it embeds at their word; the
    /// default, [`PodParts::NONE`], promises nothing.
    const IDLE_WITHOUT: PodParts = PodParts::NONE;

    /// Builds the plugin from its configuration: the plugin's table in the scheduler's TOML, as JSON
    /// (`{}` when there is none). Called once per plugin instance.
    ///
    /// # Errors
    /// A message saying what is wrong with the configuration; the scheduler refuses to load the
    /// plugin and prints it.
    fn new(config: &str) -> Result<Self, String>;

    /// Called once per pod before any node is filtered or scored, with the plugin's node mirror
    /// already up to date: compute what depends only on the pod here (kube-scheduler's PreFilter
    /// and PreScore), and say in the plan what the cycle may spare. [`FilterPlan::Skip`] when no
    /// node of the mirror can fail the filter, or [`FilterPlan::FailingNodes`] naming the few that
    /// do, spares every filter call of the cycle. The default runs the filter and the score for
    /// every pod. Not called for a pod equal to the previous one in every part of
    /// [`Plugin::READS_POD`] (and the priority) while the mirror did not change: the plan stands,
    /// so it must depend on nothing else.
    fn prepare(&mut self, pod: &Pod, nodes: &Nodes) -> PodPlan {
        let _ = (pod, nodes);
        PodPlan::default()
    }

    /// PreEnqueue (kube-scheduler's extension point of that name, when [`Plugin::PRE_ENQUEUE`]):
    /// `None` lets `pod` into the scheduling queue; a failure keeps it out, its reasons being why
    /// it waits, until the pod changes (the host asks again at every change). The pod carries
    /// its identity, labels, annotations, priority and [`Pod::scheduling_gates`]; its other
    /// parts may be empty. Runs before any cycle, so the mirror may not be up to date.
    fn pre_enqueue(&mut self, pod: &Pod) -> Option<Failure> {
        let _ = pod;
        None
    }

    /// Permit (when [`Plugin::PERMIT`]): whether `pod`, reserved on the node named `node`, may be
    /// bound now, must wait, or is rejected; and which pods waiting at this plugin it lets go.
    /// The pod carries what [`Plugin::pre_enqueue`]'s does.
    fn permit(&mut self, pod: &Pod, node: &str) -> PermitAnswer {
        let _ = (pod, node);
        PermitAnswer::allow()
    }

    /// Reserve (when [`Plugin::RESERVE`]): what the plugin sets aside for `pod`, the pod of the
    /// cycle's [`Plugin::prepare`], on `node`, the node the cycle chose. Called only after a cycle
    /// that places the pod, and only when [`Plugin::prepare`] ran for it or for an equal pod (a
    /// plugin the host knows to be idle for the pod is not asked). A failure undoes the
    /// placement: an unschedulable code leaves the pod unschedulable with its reasons, an error
    /// fails the cycle.
    ///
    /// # Errors
    /// The failure that stops the pod being placed on `node`.
    fn reserve(&mut self, pod: &Pod, node: &NodeInfo) -> Result<Reservation, Failure> {
        let _ = (pod, node);
        Ok(Reservation::default())
    }

    /// Unreserve (when [`Plugin::PERMIT`] or [`Plugin::RESERVE`]): `pod`'s reservation on `node`
    /// was given up (a later Reserve plugin failed, Permit rejected it, its wait ran out, or its
    /// binding failed); forget whatever was counted for it.
    fn unreserve(&mut self, pod: &Pod, node: &str) {
        let _ = (pod, node);
    }

    /// Unreserve for a plugin that reads groups: what [`Plugin::unreserve`] does, and the
    /// waiting pods the plugin now rejects (coscheduling rejects the rest of the gang).
    fn unreserve_rejects(&mut self, pod: &Pod, node: &str) -> Vec<Rejection> {
        self.unreserve(pod, node);
        Vec::new()
    }

    /// PostFilter (when [`Plugin::POST_FILTER`]): `pod` (with its group) fitted no node, and
    /// preemption did not make room for it. The reasons join the pod's FitError; the rejected
    /// waiting pods are unreserved.
    fn post_filter(&mut self, pod: &Pod) -> PostFilterAnswer {
        let _ = pod;
        PostFilterAnswer::default()
    }

    /// QueueSort (when [`Plugin::QUEUE_SORT`]): where `pod` (with its group) goes in the
    /// scheduling queue among pods of its priority; `queued_millis` is when it was first queued
    /// (kube-scheduler's `InitialAttemptTimestamp`), in milliseconds since the epoch.
    fn queue_sort(&self, pod: &Pod, queued_millis: i64) -> QueueKey {
        QueueKey {
            timestamp_millis: queued_millis,
            name: pod.key(),
        }
    }

    /// Called when node `id` enters the mirror or is replaced there, with the node as the
    /// mirror now has it: a plugin that works something out per node once (rather than per pod)
    /// does it here.
    fn node_upserted(&mut self, id: NodeId, node: &NodeInfo) {
        let _ = (id, node);
    }

    /// Called when an existing pod enters the mirror, with its node as the mirror has it (an
    /// empty node when the mirror lacks it). Also called, after [`Plugin::pod_removed`] with the
    /// old node, for every pod of a node whose labels change: a plugin that keeps counts per
    /// topology domain (kube-scheduler's PreFilter state, kept up to date instead of rebuilt per
    /// pod) stays exact through adds, moves, relabels and removals.
    fn pod_added(&mut self, id: PodId, pod: ExistingPodRef<'_>, node: &NodeInfo) {
        let _ = (id, pod, node);
    }

    /// Called when an existing pod leaves the mirror (or its node is relabelled), with the node
    /// it was added under. Every [`Plugin::pod_added`] is matched by one call here with the same
    /// pod and node before the pod is added again or the node is removed.
    fn pod_removed(&mut self, id: PodId, pod: ExistingPodRef<'_>, node: &NodeInfo) {
        let _ = (id, pod, node);
    }

    /// Called when a PersistentVolume enters the mirror (when [`Plugin::READS_VOLUMES`]), after
    /// [`Plugin::volume_removed`] with its old version when it replaces one. The volume is the
    /// mirror's own: a plugin that indexes volumes keeps the `Arc`, not a copy (VolumeBinding
    /// keeps local volumes by the host they are pinned to, so a pod's cycle never walks them all).
    fn volume_added(&mut self, volume: &Arc<VolumeInfo>) {
        let _ = volume;
    }

    /// Called when a PersistentVolume leaves the mirror or is replaced, with the version that
    /// leaves. Every [`Plugin::volume_added`] is matched by one call here before the volume is
    /// added again.
    fn volume_removed(&mut self, volume: &VolumeInfo) {
        let _ = volume;
    }
}

/// A plugin that rules nodes out for a pod.
pub trait FilterPlugin: Plugin {
    /// Whether `pod` may run on `node`. Called for nodes in an order the host chooses, possibly
    /// not for every node (the host stops once it has found enough feasible nodes). A failure's
    /// reasons are counted per node in the pod's "0/N nodes are available" message, so keep them
    /// short and identical for identical causes.
    fn filter(&self, pod: &Pod, node: &NodeInfo) -> Verdict;

    /// Filters a batch: appends one verdict per id of `ids` to `out`, in order. The default calls
    /// [`FilterPlugin::filter`] per node. Override it to share work between nodes, e.g. one verdict
    /// per distinct taint set, or to read the compact [`NodeSummary`] instead of the full node; it
    /// must give exactly the verdicts `filter` gives.
    fn filter_batch(&mut self, pod: &Pod, nodes: &Nodes, ids: &[NodeId], out: &mut FilterResults) {
        for &id in ids {
            out.push(match nodes.get(id) {
                Some(node) => self.filter(pod, node),
                None => Err(Nodes::unknown(id)),
            });
        }
    }
}

/// A plugin that ranks the nodes that passed every filter.
pub trait ScorePlugin: Plugin {
    /// How the host normalizes this plugin's raw scores into 0..=100.
    const NORMALIZE: Normalize = Normalize::None;

    /// The raw score of `node` for `pod`. After normalization scores must lie in 0..=100; anything
    /// else fails the plugin for that cycle.
    fn score(&self, pod: &Pod, node: &NodeInfo) -> i64;

    /// Scores a batch: appends one raw score per id of `ids` to `out`, in order. The default calls
    /// [`ScorePlugin::score`] per node; an override must give exactly the same scores. With
    /// [`Normalize::Custom`] the batch is every feasible node of the cycle, in one call, so scores
    /// may weigh a node against the whole feasible set (kube-scheduler's PreScore); otherwise the
    /// host may split the feasible nodes between threads.
    fn score_batch(&mut self, pod: &Pod, nodes: &Nodes, ids: &[NodeId], out: &mut Vec<i64>) {
        out.extend(ids.iter().map(|&id| match nodes.get(id) {
            Some(node) => self.score(pod, node),
            // An impossible score makes the host report the plugin's failure instead of guessing.
            None => i64::MIN,
        }));
    }

    /// Normalizes the scores of all feasible nodes in place; only called when
    /// [`ScorePlugin::NORMALIZE`] is [`Normalize::Custom`].
    fn normalize(&self, pod: &Pod, scores: &mut [i64]) {
        let _ = (pod, scores);
    }

    /// Asked right after [`Plugin::prepare`] planned to score: true when
    /// [`ScorePlugin::score_batch`] would give 0 for every node of `nodes` as they are now. The
    /// host then scores the pod's nodes 0 without calling the component, unless it sends the
    /// plugin anything but filter calls first. The default says false.
    fn scores_zero(&self, nodes: &Nodes) -> bool {
        let _ = nodes;
        false
    }
}

/// What [`export_plugin!`] implements for a plugin type: the extension points it exports.
#[doc(hidden)]
pub trait Exported: Plugin {
    const FILTER: bool;
    const SCORE: bool;
    const NORMALIZE: Normalize;
    const VERSION: &'static str;
    fn filter_nodes(&mut self, pod: &Pod, nodes: &Nodes, ids: &[NodeId], out: &mut FilterResults);
    fn score_nodes(&mut self, pod: &Pod, nodes: &Nodes, ids: &[NodeId], out: &mut Vec<i64>);
    fn normalize_scores(&self, pod: &Pod, scores: &mut [i64]);
    /// [`FilterPlugin::filter`] for one node (a pass when the plugin does not filter).
    fn filter_one(&self, pod: &Pod, node: &NodeInfo) -> Verdict;
    /// [`ScorePlugin::score`] for one node (0 when the plugin does not score).
    fn score_one(&self, pod: &Pod, node: &NodeInfo) -> i64;
    /// [`ScorePlugin::scores_zero`] (false when the plugin does not score).
    fn scores_zero(&self, nodes: &Nodes) -> bool;
}

/// Exports a plugin type: `export_plugin!(MyPlugin: filter)`, `export_plugin!(MyPlugin: score)` or
/// `export_plugin!(MyPlugin: filter, score)`; `export_plugin!(MyPlugin)` for a plugin that
/// neither filters nor scores (one that takes part in PreEnqueue or Permit only).
///
/// On `wasm32` targets this also emits the component's exports, so the crate (with
/// `crate-type = ["cdylib", "rlib"]`) becomes a plugin component; on other targets the host can
/// link the type natively through [`Driver`].
#[macro_export]
macro_rules! export_plugin {
    ($ty:ty : filter, score) => {
        $crate::__export_plugin!($ty, true, true);
    };
    ($ty:ty : score, filter) => {
        $crate::__export_plugin!($ty, true, true);
    };
    ($ty:ty : filter) => {
        $crate::__export_plugin!($ty, true, false);
    };
    ($ty:ty : score) => {
        $crate::__export_plugin!($ty, false, true);
    };
    ($ty:ty) => {
        $crate::__export_plugin!($ty, false, false);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __export_plugin {
    ($ty:ty, $filter:tt, $score:tt) => {
        impl $crate::Exported for $ty {
            const FILTER: bool = $filter;
            const SCORE: bool = $score;
            const NORMALIZE: $crate::Normalize = $crate::__if!($score, <$ty as $crate::ScorePlugin>::NORMALIZE, $crate::Normalize::None);
            const VERSION: &'static str = env!("CARGO_PKG_VERSION");
            fn filter_nodes(&mut self, pod: &$crate::Pod, nodes: &$crate::Nodes, ids: &[$crate::NodeId], out: &mut $crate::FilterResults) {
                $crate::__if!($filter, <$ty as $crate::FilterPlugin>::filter_batch(self, pod, nodes, ids, out), { let _ = (pod, nodes); out.verdicts.extend(ids.iter().map(|_| 0)) })
            }
            fn score_nodes(&mut self, pod: &$crate::Pod, nodes: &$crate::Nodes, ids: &[$crate::NodeId], out: &mut Vec<i64>) {
                $crate::__if!($score, <$ty as $crate::ScorePlugin>::score_batch(self, pod, nodes, ids, out), { let _ = (pod, nodes); out.extend(ids.iter().map(|_| 0i64)) })
            }
            fn normalize_scores(&self, pod: &$crate::Pod, scores: &mut [i64]) {
                $crate::__if!($score, <$ty as $crate::ScorePlugin>::normalize(self, pod, scores), { let _ = (pod, scores); })
            }
            fn filter_one(&self, pod: &$crate::Pod, node: &$crate::NodeInfo) -> $crate::Verdict {
                $crate::__if!($filter, <$ty as $crate::FilterPlugin>::filter(self, pod, node), { let _ = (pod, node); Ok(()) })
            }
            fn score_one(&self, pod: &$crate::Pod, node: &$crate::NodeInfo) -> i64 {
                $crate::__if!($score, <$ty as $crate::ScorePlugin>::score(self, pod, node), { let _ = (pod, node); 0 })
            }
            fn scores_zero(&self, nodes: &$crate::Nodes) -> bool {
                $crate::__if!($score, <$ty as $crate::ScorePlugin>::scores_zero(self, nodes), { let _ = nodes; false })
            }
        }

        #[cfg(target_arch = "wasm32")]
        #[doc(hidden)]
        mod __wasched_component {
            use super::*;
            type WaschedComponent = $crate::guest::Component<$ty>;
            $crate::guest::bindings::__export_plugin_world!(WaschedComponent with_types_in $crate::guest::bindings);
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __if {
    (true, $then:expr, $else:expr) => {
        $then
    };
    (false, $then:expr, $else:expr) => {
        $else
    };
}
