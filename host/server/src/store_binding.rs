//! The binding cycle's writes in the embedded store (`serve`): the store plays the API server
//! and the PV controller, and the status writer records each batch of results in one
//! transaction, so one fsync covers many pods.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::resource::v1::ResourceClaim;

use wasched_core::binding::{self, Backend, Carried};
use wasched_core::events::{Action, Event, EventPipeline, Kind, Object, ObjectKey};
use wasched_core::framework::Victim;
use wasched_core::k8s;
use wasched_core::service::{BindingFailures, CycleResult};

use crate::engine::{
    unix_millis, watch_event, EngineMetrics, ResultSink, ATTEMPTS_ANNOTATION, CHOICE_ANNOTATION,
};
use crate::store::{ObjectTxn, Store, StoreError};
use crate::watch::WatchLog;

/// Records results in the embedded store, many pods per transaction.
pub struct StoreSink {
    /// Where bindings and conditions are written.
    pub store: Store,
    /// Where the written pods go back to the scheduler as updates.
    pub pipeline: Arc<EventPipeline>,
    /// Where written (or failed) bindings are reported, which starts (or undoes) their
    /// assumptions.
    pub bindings: BindingFailures,
}

impl ResultSink for StoreSink {
    fn record(
        &mut self,
        batch: Vec<CycleResult>,
        watch: &Arc<WatchLog>,
        metrics: &Arc<EngineMetrics>,
    ) {
        let count = batch.len();
        let written = self.store.transaction(|txn| {
            let mut backend = StoreBackend {
                txn,
                feedback: Vec::new(),
                pod_version: 0,
            };
            let carried: Vec<(Carried, u64)> = batch
                .iter()
                .map(|result| {
                    backend.pod_version = 0;
                    let carried = binding::carry_out(&mut backend, result);
                    (carried, backend.pod_version)
                })
                .collect();
            (carried, backend.feedback)
        });
        let (carried, feedback) = match written {
            Ok(written) => written,
            Err(e) => {
                // The placements are undone and the pods scheduled again.
                tracing::error!("recording {count} scheduling results failed: {e}");
                for result in batch.iter().filter(|r| r.outcome.node.is_some()) {
                    self.bindings.report(result.pod.clone(), e.to_string());
                }
                return;
            }
        };
        // What an API server's watch would deliver: the bound volumes and claims before the
        // pods that use them, the victims' deletions (which bring the preemptors back), the
        // bindings' confirmations.
        for event in feedback {
            self.pipeline.submit(event);
        }
        let mut events = Vec::with_capacity(count);
        for (result, (carried, version)) in batch.into_iter().zip(carried) {
            self.bindings.record(&result.pod, &carried);
            if carried.applied() {
                events.push(watch_event(result, version));
            }
        }
        metrics.status_write_batches.fetch_add(1, Ordering::Relaxed);
        metrics
            .status_writes
            .fetch_add(events.len() as u64, Ordering::Relaxed);
        metrics
            .results_discarded
            .fetch_add((count - events.len()) as u64, Ordering::Relaxed);
        watch.publish(events);
    }
}

/// The writes of one transaction, and the events they send back to the scheduler.
struct StoreBackend<'a, 't> {
    txn: &'a mut ObjectTxn<'t>,
    /// Events for the scheduler's pipeline, in the order of the writes.
    feedback: Vec<Event>,
    /// The version of the current result's pod write.
    pod_version: u64,
}

impl StoreBackend<'_, '_> {
    fn put(&mut self, mut object: Object, feed_back: bool) -> Result<u64, String> {
        let version = self.txn.put(&mut object).map_err(failed)?;
        if feed_back {
            self.feedback
                .push(Event::with_version(Action::Upsert, object, version));
        }
        Ok(version)
    }

    fn stored_claim(
        &self,
        result: &CycleResult,
        name: &str,
    ) -> Result<Option<ResourceClaim>, String> {
        let key = ObjectKey {
            kind: Kind::ResourceClaim,
            namespace: result.namespace().to_string(),
            name: name.to_string(),
        };
        match self.txn.get(&key).map_err(failed)? {
            Some(Object::ResourceClaim(claim)) => Ok(Some(*claim)),
            _ => Ok(None),
        }
    }

    fn stored_pod(&self, key: &str) -> Result<Option<core::Pod>, String> {
        match self.txn.get(&pod_key(key)).map_err(failed)? {
            Some(Object::Pod(pod)) => Ok(Some(*pod)),
            _ => Ok(None),
        }
    }
}

fn failed(e: StoreError) -> String {
    e.to_string()
}

impl Backend for StoreBackend<'_, '_> {
    fn bind_volumes(&mut self, result: &CycleResult, node: &str) -> Result<(), String> {
        for object in bound_volumes_and_claims(self.txn, result, node)? {
            self.put(object, true)?;
        }
        Ok(())
    }

    /// The claims' allocations go into the same transaction as the binding: a crash leaves both
    /// or neither.
    fn bind_claims(&mut self, result: &CycleResult) -> Result<(), String> {
        let pod_name = result.pod.split_once('/').map_or("", |(_, name)| name);
        for write in &result.outcome.claim_writes {
            let claim = self.stored_claim(result, &write.claim)?.ok_or_else(|| {
                format!(
                    "resourceclaims.resource.k8s.io \"{}\" not found",
                    write.claim
                )
            })?;
            let claim = k8s::devices::reserved_claim(&claim, write, pod_name);
            self.put(Object::ResourceClaim(Box::new(claim)), true)?;
        }
        Ok(())
    }

    fn unbind_claims(&mut self, result: &CycleResult) -> Result<(), String> {
        for write in &result.outcome.claim_writes {
            if let Some(claim) = self.stored_claim(result, &write.claim)? {
                let claim = k8s::devices::unreserved_claim(&claim, write);
                self.put(Object::ResourceClaim(Box::new(claim)), true)?;
            }
        }
        Ok(())
    }

    fn bind(&mut self, result: &CycleResult, node: &str) -> Result<(), String> {
        let name = result.pod.split_once('/').map_or("", |(_, name)| name);
        let Some(mut pod) = self.stored_pod(&result.pod)? else {
            return Err(format!("pods \"{name}\" not found"));
        };
        let spec = pod.spec.get_or_insert_with(Default::default);
        if let Some(bound) = spec.node_name.as_deref().filter(|n| !n.is_empty()) {
            return Err(format!(
                "Operation cannot be fulfilled on pods/binding \"{name}\": pod {name} is already assigned to node \"{bound}\""
            ));
        }
        spec.node_name = Some(node.to_string());
        let scheduled = core::PodCondition {
            type_: "PodScheduled".into(),
            status: "True".into(),
            ..Default::default()
        };
        binding::set_pod_scheduled(&mut pod, scheduled).nominated_node_name = None;
        let annotations = annotate(&mut pod, result);
        if let Some(choice) = &result.outcome.choice {
            let mut kept = serde_json::to_value(choice).expect("a choice serializes");
            kept["timeMillis"] = unix_millis().into();
            annotations.insert(CHOICE_ANNOTATION.into(), kept.to_string());
        }
        self.pod_version = self.put(Object::Pod(Box::new(pod)), true)?;
        Ok(())
    }

    fn evict(&mut self, _result: &CycleResult, victim: &Victim) -> Result<(), String> {
        if let Some((version, object)) = self.txn.delete(&pod_key(&victim.pod)).map_err(failed)? {
            let released = crate::claims::follow_deletion(self.txn, &object).map_err(failed)?;
            self.feedback
                .push(Event::with_version(Action::Delete, object, version));
            self.feedback.extend(released);
        }
        Ok(())
    }

    /// Only a change of nomination is fed back to the scheduler, as the queue takes no notice of
    /// a pod's own status.
    fn record_condition(&mut self, result: &CycleResult) -> Result<bool, String> {
        let Some(mut pod) = self.stored_pod(&result.pod)? else {
            return Ok(false);
        };
        let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        if bound.is_some_and(|n| !n.is_empty()) {
            return Ok(false);
        }
        let nominated = binding::pod_scheduled_false(&mut pod, result);
        annotate(&mut pod, result);
        self.pod_version = self.put(Object::Pod(Box::new(pod)), nominated)?;
        Ok(true)
    }
}

/// Sets the attempts annotation; returns the annotations for more.
fn annotate<'p>(
    pod: &'p mut core::Pod,
    result: &CycleResult,
) -> &'p mut std::collections::BTreeMap<String, String> {
    let annotations = pod
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    annotations.insert(ATTEMPTS_ANNOTATION.into(), result.attempts.to_string());
    annotations
}

/// The store key of the pod `namespace/name`.
fn pod_key(pod: &str) -> ObjectKey {
    let (namespace, name) = pod.split_once('/').unwrap_or(("", pod));
    ObjectKey {
        kind: Kind::Pod,
        namespace: namespace.to_string(),
        name: name.to_string(),
    }
}

/// The volumes and claims a placed pod's result binds, read from the store and changed as the
/// PV controller would leave them (the store plays the controller: nothing else binds here);
/// claims to provision get the node as `volume.kubernetes.io/selected-node`.
fn bound_volumes_and_claims(
    txn: &ObjectTxn<'_>,
    result: &CycleResult,
    node: &str,
) -> Result<Vec<Object>, String> {
    let namespace = result.namespace();
    let read = |key: &ObjectKey| txn.get(key).map_err(failed);
    let claim = |name: &str| match read(&ObjectKey {
        kind: Kind::PersistentVolumeClaim,
        namespace: namespace.to_string(),
        name: name.to_string(),
    })? {
        Some(Object::PersistentVolumeClaim(claim)) => Ok(claim),
        _ => Err(format!("persistentvolumeclaim \"{name}\" not found")),
    };
    let mut objects = Vec::new();
    for (claim_name, volume_name) in &result.outcome.volumes.static_bindings {
        let claim = claim(claim_name)?;
        let volume = match read(&ObjectKey {
            kind: Kind::PersistentVolume,
            namespace: String::new(),
            name: volume_name.clone(),
        })? {
            Some(Object::PersistentVolume(volume)) => volume,
            _ => return Err(format!("persistentvolume \"{volume_name}\" not found")),
        };
        let taken = volume
            .spec
            .as_ref()
            .and_then(|s| s.claim_ref.as_ref())
            .is_some_and(|r| {
                r.namespace.as_deref() != Some(namespace)
                    || r.name.as_deref() != Some(claim_name.as_str())
            });
        if taken {
            return Err(format!(
                "persistentvolume \"{volume_name}\" is bound to another claim"
            ));
        }
        let (volume, claim) = k8s::bound_volume_and_claim(&volume, &claim);
        objects.push(Object::PersistentVolume(Box::new(volume)));
        objects.push(Object::PersistentVolumeClaim(Box::new(claim)));
    }
    for claim_name in &result.outcome.volumes.provisions {
        let claim = claim(claim_name)?;
        objects.push(Object::PersistentVolumeClaim(Box::new(
            k8s::claim_with_selected_node(&claim, node),
        )));
    }
    Ok(objects)
}
