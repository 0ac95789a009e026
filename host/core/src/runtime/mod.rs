//! What the framework needs of a plugin runtime, and the native one.
//!
//! Every plugin sits behind [`PluginInstance`], the host's view of the batched plugin contract in
//! `wit/plugin.wit`, and is made by a [`PluginFactory`]: a native constructor
//! ([`native::NativeFactory`]) here, or a compiled, pre-instantiated WebAssembly component
//! (`wasched_wasm::component::ComponentFactory`). The default plugins ([`defaults`]) ship in both
//! forms.

pub mod defaults;
pub mod native;

use wasched_sdk::{
    Descriptor, ExistingPod, Failure, FilterResults, Labels, NodeInfo, NodeUsage, Pod, PodPlan,
    VolumeInfo,
};

/// How a call into a plugin failed, for the counts operators read (`plugin list`, `/metrics`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The guest trapped (a panic, `unreachable`, an out-of-bounds access).
    Trap,
    /// The call ran past its deadline.
    Deadline,
    /// The instance hit its memory (or table) limit.
    Memory,
    /// The call returned, but its answer was not valid (wrong length, a verdict past its
    /// failures, a score out of range, a malformed plan).
    InvalidResult,
    /// A fresh instance could not be made.
    Init,
}

impl FailureKind {
    /// Every kind, in the order metrics list them.
    pub const ALL: [FailureKind; 5] = [
        FailureKind::Trap,
        FailureKind::Deadline,
        FailureKind::Memory,
        FailureKind::InvalidResult,
        FailureKind::Init,
    ];

    /// The label value in `/metrics` and the key in `/admin/plugins`.
    pub fn name(self) -> &'static str {
        match self {
            FailureKind::Trap => "trap",
            FailureKind::Deadline => "deadline",
            FailureKind::Memory => "memory",
            FailureKind::InvalidResult => "invalid_result",
            FailureKind::Init => "init",
        }
    }
}

/// A failed call into a plugin instance.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{call}: {message}")]
pub struct CallError {
    /// The export that failed (`filter`, `score`, ...).
    pub call: &'static str,
    /// What went wrong: the trap, the deadline, or what was invalid about the result.
    pub message: String,
    /// What kind of failure it was.
    pub kind: FailureKind,
}

impl CallError {
    /// A call whose answer was not valid.
    pub fn new(call: &'static str, message: impl Into<String>) -> Self {
        Self::of_kind(FailureKind::InvalidResult, call, message)
    }

    /// A call that failed in the way `kind` says.
    pub fn of_kind(kind: FailureKind, call: &'static str, message: impl Into<String>) -> Self {
        CallError {
            call,
            message: message.into(),
            kind,
        }
    }
}

/// A plugin that could not be loaded or instantiated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LoadError(pub String);

/// One instance of a plugin with its own node mirror: the host side of `wit/plugin.wit`.
///
/// Calls mirror the WIT exports; see there for when each is made. Any error leaves the instance
/// unusable: the framework drops it and makes a fresh one.
pub trait PluginInstance: Send {
    /// What the plugin does (from its `init`).
    fn descriptor(&self) -> &Descriptor;
    /// Adds or replaces nodes in the instance's mirror.
    fn upsert_nodes(&mut self, nodes: &[(u32, &NodeInfo)]) -> Result<(), CallError>;
    /// Removes nodes from the mirror.
    fn remove_nodes(&mut self, ids: &[u32]) -> Result<(), CallError>;
    /// Replaces nodes' usage in the mirror.
    fn update_usage(&mut self, usage: &[(u32, &NodeUsage)]) -> Result<(), CallError>;
    /// Adds or replaces existing pods in the mirror (only for a plugin that reads them).
    fn upsert_pods(&mut self, pods: &[(u32, ExistingPod)]) -> Result<(), CallError>;
    /// Removes existing pods from the mirror.
    fn remove_pods(&mut self, ids: &[u32]) -> Result<(), CallError>;
    /// Adds namespaces or replaces their labels (only for a plugin that reads them).
    fn upsert_namespaces(&mut self, namespaces: &[(&str, &Labels)]) -> Result<(), CallError>;
    /// Removes namespaces from the mirror.
    fn remove_namespaces(&mut self, names: &[&str]) -> Result<(), CallError>;
    /// Adds or replaces PersistentVolumes in the mirror (only for a plugin that reads them).
    fn upsert_volumes(&mut self, volumes: &[&VolumeInfo]) -> Result<(), CallError>;
    /// Removes PersistentVolumes from the mirror.
    fn remove_volumes(&mut self, names: &[&str]) -> Result<(), CallError>;
    /// Starts a cycle for `pod`.
    fn set_pod(&mut self, pod: &Pod) -> Result<PodPlan, CallError>;
    /// Filters `ids`, appending exactly one verdict per id to `out`.
    fn filter(&mut self, ids: &[u32], out: &mut FilterResults) -> Result<(), CallError>;
    /// Scores `ids`, appending exactly one raw score per id to `out`.
    fn score(&mut self, ids: &[u32], out: &mut Vec<i64>) -> Result<(), CallError>;
    /// The plugin's own normalization, in place.
    fn normalize(&mut self, scores: &mut Vec<i64>) -> Result<(), CallError>;

    /// PreEnqueue, for a plugin whose descriptor sets `pre_enqueue`: `None` lets `pod` into the
    /// scheduling queue; a failure keeps it out until it changes.
    fn pre_enqueue(&mut self, pod: &Pod) -> Result<Option<Failure>, CallError> {
        let _ = pod;
        Ok(None)
    }

    /// Permit, for a plugin whose descriptor sets `permit`: whether `pod`, reserved on `node`,
    /// may go on to be bound now, must wait, or is rejected; and which pods waiting at this
    /// plugin it lets go.
    fn permit(&mut self, pod: &Pod, node: &str) -> Result<PermitAnswer, CallError> {
        let _ = (pod, node);
        Ok(PermitAnswer::allow())
    }

    /// Reserve, for a plugin whose descriptor sets `reserve`: what it sets aside for the pod of
    /// the last [`PluginInstance::set_pod`] on the node `node` (an id of the mirror), or the
    /// failure that stops the pod being placed there.
    fn reserve(&mut self, node: u32) -> Result<Result<Reservation, Failure>, CallError> {
        let _ = node;
        Ok(Ok(Reservation::default()))
    }

    /// Unreserve, for a plugin whose descriptor sets `permit` or `reserve`: `pod`'s reservation
    /// on `node` was undone (a later Reserve plugin failed, Permit rejected it, its wait ran out,
    /// or its binding failed); whatever the plugin counted for it is to be forgotten.
    fn unreserve(&mut self, pod: &Pod, node: &str) -> Result<(), CallError> {
        let _ = (pod, node);
        Ok(())
    }

    /// Unreserve, as the framework calls it: for a plugin whose descriptor sets `reads_groups`,
    /// with `pod`'s group, returning the waiting pods the plugin now rejects; for any other,
    /// [`PluginInstance::unreserve`].
    fn unreserve_rejects(&mut self, pod: &Pod, node: &str) -> Result<Vec<Rejection>, CallError> {
        self.unreserve(pod, node).map(|()| Vec::new())
    }

    /// PostFilter, for a plugin whose descriptor sets `post_filter`: `pod` (with its group) fits
    /// no node and preemption found no room.
    fn post_filter(&mut self, pod: &Pod) -> Result<PostFilterAnswer, CallError> {
        let _ = pod;
        Ok(PostFilterAnswer::default())
    }

    /// QueueSort, for a plugin whose descriptor sets `queue_sort`: where `pod` (with its group),
    /// first queued at `queued_millis`, goes among pods of its priority.
    fn queue_sort(&mut self, pod: &Pod, queued_millis: i64) -> Result<QueueKey, CallError> {
        Ok(QueueKey {
            timestamp_millis: queued_millis,
            name: pod.key(),
        })
    }
}

pub use wasched_sdk::{Permit, PermitAnswer, PostFilterAnswer, QueueKey, Rejection, Reservation};

/// Makes instances of one plugin.
pub trait PluginFactory: Send + Sync {
    /// A fresh instance configured with `config` (JSON), with an empty node mirror.
    ///
    /// # Errors
    /// The plugin refused its configuration, or could not be instantiated.
    fn instantiate(&self, config: &str) -> Result<Box<dyn PluginInstance>, LoadError>;

    /// `wasm` or `native`, for messages and `bench`.
    fn kind(&self) -> &'static str;

    /// What makes two factories interchangeable (the same code under the same limits): instances
    /// of factories with equal identities behave the same, so a hot swap can keep them.
    fn identity(&self) -> String;
}

/// Checks that a batch result has one entry per node asked about.
pub fn check_len(call: &'static str, got: usize, want: usize) -> Result<(), CallError> {
    if got == want {
        Ok(())
    } else {
        Err(CallError::new(
            call,
            format!("returned {got} results for {want} nodes"),
        ))
    }
}
