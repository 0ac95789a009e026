//! Mirror updates held back for a component's next `set-pod`, in the form its exports take
//! (records for `batched`, bytes for `encoded`).

use super::*;

/// At most this many updates are held back: a plugin that is sent no pod for a long time (one
/// idle for the pods being scheduled) gets them in batches of this size.
pub(super) const MAX_HELD_CHANGES: usize = 512;

/// Mirror updates not yet sent, in the order `apply-and-set-pod` applies them: removals, then
/// upserts, then usage. An update that would have to go before one already held (a removal
/// after an upsert, a pod after usage) first sends what is held.
#[derive(Default)]
pub(super) struct HeldChanges {
    pub(super) removed_pods: Vec<u32>,
    pub(super) upserted_pods: Vec<(u32, wit::ExistingPod)>,
    pub(super) usage: Vec<(u32, wit::NodeUsage)>,
}

impl HeldChanges {
    pub(super) fn count(&self) -> usize {
        self.removed_pods.len() + self.upserted_pods.len() + self.usage.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.count() == 0
    }

    pub(super) fn remove_pod(&mut self, id: u32) {
        self.removed_pods.push(id);
    }

    pub(super) fn upsert_pod(&mut self, id: u32, pod: &sdk::ExistingPod) {
        self.upserted_pods.push((id, existing_pod(pod)));
    }

    pub(super) fn update_usage(&mut self, id: u32, usage: &sdk::NodeUsage) {
        self.usage.push((id, node_usage(usage)));
    }

    pub(super) fn has_upserts(&self) -> bool {
        !self.upserted_pods.is_empty()
    }

    pub(super) fn has_usage(&self) -> bool {
        !self.usage.is_empty()
    }

    /// What is held, emptying it.
    pub(super) fn take(&mut self) -> wit::MirrorChanges {
        wit::MirrorChanges {
            removed_pods: std::mem::take(&mut self.removed_pods),
            upserted_pods: std::mem::take(&mut self.upserted_pods),
            usage: std::mem::take(&mut self.usage),
        }
    }
}

/// `$call` with `$held` bound to whichever form a [`Held`] holds: both forms have the same
/// methods.
macro_rules! either_form {
    ($value:expr, $held:ident => $call:expr) => {
        match $value {
            Held::Records($held) => $call,
            Held::Bytes($held) => $call,
        }
    };
}

/// Mirror updates held back for the next pod, in the form the component takes them.
pub(super) enum Held {
    /// As WIT records, for [`BATCHED_INTERFACE`].
    Records(HeldChanges),
    /// As bytes, for [`ENCODED_INTERFACE`].
    Bytes(wire::HeldChanges),
}

impl Held {
    /// What a component with these exports is held back (none: it takes each update at once);
    /// `volumes`: the pods it is sent carry their volumes (only in bytes).
    pub(super) fn for_exports(encoded: bool, batched: bool, volumes: bool) -> Option<Held> {
        match (encoded, batched) {
            (true, _) => Some(Held::Bytes(wire::HeldChanges::new(volumes))),
            (false, true) => Some(Held::Records(HeldChanges::default())),
            (false, false) => None,
        }
    }

    pub(super) fn count(&self) -> usize {
        either_form!(self, held => held.count())
    }

    pub(super) fn has_upserts(&self) -> bool {
        either_form!(self, held => held.has_upserts())
    }

    pub(super) fn has_usage(&self) -> bool {
        either_form!(self, held => held.has_usage())
    }

    pub(super) fn remove_pod(&mut self, id: u32) {
        either_form!(self, held => held.remove_pod(id))
    }

    pub(super) fn upsert_pod(&mut self, id: u32, pod: &sdk::ExistingPod) {
        either_form!(self, held => held.upsert_pod(id, pod))
    }

    pub(super) fn update_usage(&mut self, id: u32, usage: &sdk::NodeUsage) {
        either_form!(self, held => held.update_usage(id, usage))
    }
}
