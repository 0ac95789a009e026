//! SchedulingGates: a pod with `spec.schedulingGates` is kept out of the scheduling queue
//! (PreEnqueue) until the last gate is lifted, as kube-scheduler's plugin of that name does.

#![warn(missing_docs)]

use wasched_sdk::{Failure, Plugin, Pod, PodParts};

/// The name used in configs and messages.
pub const NAME: &str = "SchedulingGates";

/// kube-scheduler's message for a gated pod: the gates' names as Go prints a `[]string`.
pub fn waiting_for(gates: &[String]) -> String {
    format!("waiting for scheduling gates: [{}]", gates.join(" "))
}

/// The plugin; stateless.
pub struct SchedulingGates;

impl Plugin for SchedulingGates {
    const NAME: &'static str = NAME;
    // It reads nothing in the cycle: PreEnqueue gets the pod's gates whatever the plugin reads.
    const READS_POD: PodParts = PodParts::NONE;
    const PRE_ENQUEUE: bool = true;

    fn new(_config: &str) -> Result<Self, String> {
        Ok(SchedulingGates)
    }

    fn pre_enqueue(&mut self, pod: &Pod) -> Option<Failure> {
        (!pod.scheduling_gates.is_empty())
            .then(|| Failure::unresolvable(waiting_for(&pod.scheduling_gates)))
    }
}

wasched_sdk::export_plugin!(SchedulingGates);

/// kube-scheduler's behaviour as a table (its `scheduling_gates_test.go`): run natively by this
/// crate's tests and through the WebAssembly build by the host's (`tests/e2e/plugins.rs`).
#[cfg(not(target_arch = "wasm32"))]
pub fn cases() -> Vec<wasched_sdk::testing::Case> {
    use wasched_sdk::testing::{pass, pod, unresolvable, Case};

    let gated = |gates: &[&str]| Pod {
        scheduling_gates: gates.iter().map(|g| g.to_string()).collect(),
        ..pod("p")
    };
    vec![
        Case::pre_enqueue(
            "a pod without scheduling gates enters the queue",
            pod("p"),
            pass(),
        ),
        Case::pre_enqueue(
            "a pod with scheduling gates waits, named in order",
            gated(&["foo", "bar"]),
            unresolvable("waiting for scheduling gates: [foo bar]"),
        ),
        Case::pre_enqueue(
            "one gate left still gates the pod",
            gated(&["example.com/quota"]),
            unresolvable("waiting for scheduling gates: [example.com/quota]"),
        ),
    ]
}

#[cfg(test)]
mod tests {
    #[test]
    fn answers_as_kube_scheduler() {
        wasched_sdk::testing::check::<super::SchedulingGates>(&super::cases());
    }
}
