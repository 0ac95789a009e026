//! What one scheduling cycle ended with: the one result type the service returns, the backends
//! carry out (`binding.rs`), `simulate` prints and the server records.

use crate::cache::PodVolumes;
use crate::framework::{Choice, NodeReport, Preemption};
use wasched_sdk as sdk;

/// The result of one scheduling cycle, as the service returns it: which pod, and what its cycle
/// and what followed (Reserve, Permit, the binding cycle) made of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CycleResult {
    /// `namespace/name`.
    pub pod: String,
    /// The pod's scheduler name (its profile).
    pub scheduler_name: String,
    /// Scheduling attempts of the pod so far, this one included.
    pub attempts: u32,
    /// No profile serves the pod's scheduler name: the pod is another scheduler's and was left
    /// alone.
    pub no_profile: bool,
    /// The Permit plugins the pod waits at, reserved on its node but not yet bound: nothing is
    /// written for such a result. Its binding (or its rejection) comes as a later result.
    pub waiting_on: Vec<String>,
    /// A PreEnqueue plugin keeps the pod out of the queue (its message in `outcome.message`): no
    /// cycle ran, and none will until the pod changes.
    pub gated: Option<Gated>,
    /// What the cycle decided, as the service left it: `node` is the node the pod was reserved
    /// on for its binding cycle, cleared when Permit or the binding undid that; `error` also
    /// covers a binding that failed.
    pub outcome: Outcome,
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
            scheduler_name,
            attempts,
            no_profile: false,
            waiting_on: Vec::new(),
            gated: None,
            outcome: Outcome::default(),
        }
    }

    /// The pod's namespace.
    pub fn namespace(&self) -> &str {
        self.pod
            .split_once('/')
            .map_or("", |(namespace, _)| namespace)
    }
}

/// The result of one cycle.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The chosen node.
    pub node: Option<String>,
    /// Why the pod was not placed: the FitError message, or the plugin error.
    pub message: Option<String>,
    /// True when a plugin failed, as opposed to no node fitting.
    pub error: bool,
    /// Filled only when the cycle was asked to explain itself.
    pub nodes: Vec<NodeReport>,
    /// Why the chosen node won, when a node was chosen.
    pub choice: Option<Box<Choice>>,
    /// When the pod fits nowhere and preemption found room for it: the node it is nominated to
    /// and the pods to evict there.
    pub preemption: Option<Box<Preemption>>,
    /// Filled only when the cycle was asked to explain itself and preemption ran: every
    /// candidate node the search found, with the victims it would evict there, in search order.
    pub preemption_candidates: Vec<Preemption>,
    /// Preemption looked for room and found none: the pod's `status.nominatedNodeName` is to be
    /// cleared (set only when it had one).
    pub clears_nomination: bool,
    /// The message ends with PostFilter reasons (preemption's), which later PostFilter reasons
    /// follow after a comma, as kube-scheduler joins them.
    pub post_filter_reasons: bool,
    /// When a node was chosen and the profile binds volumes: the volumes VolumeBinding chose for
    /// the pod there, to reserve and bind with it.
    pub volumes: PodVolumes,
    /// When a node was chosen: the devices DynamicResources allocated there for the pod's
    /// claims that had none, to write into the claims before the binding.
    pub claims: Vec<sdk::ClaimAllocation>,
    /// When a node was chosen and the pod uses ResourceClaims: what DynamicResources' PreBind
    /// writes into each claim not yet reserved for the pod (filled by Reserve).
    pub claim_writes: Vec<ClaimWrite>,
}

/// DynamicResources' PreBind for one claim: the allocation to write into its status (none when
/// it had one already), and the pod to add to its `reservedFor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimWrite {
    /// The ResourceClaim's name, in the pod's namespace.
    pub claim: String,
    /// The allocation chosen for it, when it had none.
    pub allocation: Option<crate::k8s::devices::Allocation>,
    /// The pod's uid, for `reservedFor`.
    pub pod_uid: String,
}

impl Outcome {
    pub(crate) fn unschedulable(message: String, nodes: Vec<NodeReport>) -> Outcome {
        Outcome {
            message: Some(message),
            nodes,
            ..Outcome::default()
        }
    }

    pub(crate) fn error(message: String) -> Outcome {
        Outcome {
            message: Some(message),
            error: true,
            ..Outcome::default()
        }
    }
}
