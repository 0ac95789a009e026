//! What one scheduling cycle ended with: the one result type the service returns, the backends
//! carry out (`binding.rs`), `simulate` prints and the server records.

use crate::cache::PodVolumes;
use crate::framework::{Choice, NodeReport, Preemption};

/// The result of one scheduling cycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CycleResult {
    /// `namespace/name`.
    pub pod: String,
    /// The node the pod was reserved on, for its binding cycle.
    pub node: Option<String>,
    /// Why not.
    pub message: Option<String>,
    /// Every examined node, when the service explains its cycles.
    pub nodes: Vec<NodeReport>,
    /// The pod's scheduler name (its profile).
    pub scheduler_name: String,
    /// Scheduling attempts of the pod so far, this one included.
    pub attempts: u32,
    /// The cycle failed with an error (a plugin failed, a binding failed) rather than finding no
    /// node: kube-scheduler's `error` result.
    pub error: bool,
    /// No profile serves the pod's scheduler name: the pod is another scheduler's and was left
    /// alone.
    pub no_profile: bool,
    /// Why the node was chosen, when the pod was placed.
    pub choice: Option<Choice>,
    /// The node the pod was nominated to and the pods evicted there, when it fit nowhere and
    /// preemption made room.
    pub preemption: Option<Preemption>,
    /// When the service explains its cycles and preemption ran: every candidate node it found,
    /// with the victims it would evict there.
    pub preemption_candidates: Vec<Preemption>,
    /// Preemption found no room for a pod that had a `status.nominatedNodeName`: the
    /// nomination is cleared where the pod is recorded.
    pub clears_nomination: bool,
    /// With `node`: the claims bound to volumes and the claims to provision for it there
    /// (VolumeBinding), bound together with the pod.
    pub volumes: PodVolumes,
    /// The Permit plugins the pod waits at, reserved on its node but not yet bound: nothing is
    /// written for such a result. Its binding (or its rejection) comes as a later result.
    pub waiting_on: Vec<String>,
    /// A PreEnqueue plugin keeps the pod out of the queue (its message in `message`): no cycle
    /// ran, and none will until the pod changes.
    pub gated: Option<Gated>,
}

/// Why a pod is kept out of the queue, as far as what is written for it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gated {
    /// The pod has scheduling gates: its `PodScheduled=False` condition says `SchedulingGated`,
    /// as the API server writes it for such a pod.
    SchedulingGates,
    /// Another PreEnqueue plugin, named here: nothing is written, as kube-scheduler writes
    /// nothing for a pod its PreEnqueue plugins turn away.
    Plugin(String),
}

impl CycleResult {
    /// An attempt at `pod` that has found nothing yet.
    pub(crate) fn attempt(pod: String, scheduler_name: String, attempts: u32) -> CycleResult {
        CycleResult {
            pod,
            node: None,
            message: None,
            nodes: Vec::new(),
            scheduler_name,
            attempts,
            error: false,
            no_profile: false,
            choice: None,
            preemption: None,
            preemption_candidates: Vec::new(),
            clears_nomination: false,
            volumes: PodVolumes::default(),
            waiting_on: Vec::new(),
            gated: None,
        }
    }

    /// The pod's namespace.
    pub fn namespace(&self) -> &str {
        self.pod
            .split_once('/')
            .map_or("", |(namespace, _)| namespace)
    }
}
