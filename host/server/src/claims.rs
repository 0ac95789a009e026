//! kube's resourceclaim controller in the embedded store: in standalone `serve` nothing else
//! makes a pod's claims from its ResourceClaimTemplates or gives them back when the pod is gone,
//! so the store does it in the same transaction as the write that calls for it. A crash leaves
//! a pod with its claims or neither, and never a claim reserved for a pod that no longer exists.

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::resource::v1 as resource;

use wasched_core::events::{Action, Event, Kind, Object, ObjectKey};
use wasched_core::k8s::resourceclaims::{self, Released};
use wasched_core::util::Rng;

use crate::store::{ObjectTxn, StoreError};

fn claim_key(namespace: &str, name: &str) -> ObjectKey {
    ObjectKey {
        kind: Kind::ResourceClaim,
        namespace: namespace.to_string(),
        name: name.to_string(),
    }
}

fn stored_claim(
    txn: &ObjectTxn<'_>,
    namespace: &str,
    name: &str,
) -> Option<resource::ResourceClaim> {
    match txn.get(&claim_key(namespace, name)).ok()? {
        Some(Object::ResourceClaim(claim)) => Some(*claim),
        _ => None,
    }
}

/// What the controller writes after `written` (an object just written): claims for the
/// template entries of a pod (or of each pod waiting for a template), and the claims of a pod
/// done given back. Returns the events of those writes, in order.
///
/// # Errors
/// A store failure: the whole transaction is dropped.
pub fn follow_write(
    txn: &mut ObjectTxn<'_>,
    written: &Object,
    rng: &mut Rng,
) -> Result<Vec<Event>, StoreError> {
    let mut events = Vec::new();
    match written {
        Object::Pod(pod) if wasched_core::k8s::is_terminated(pod) => {
            release(txn, pod, &mut events)?;
        }
        Object::Pod(pod) => make_claims(txn, pod, rng, &mut events)?,
        Object::ResourceClaimTemplate(template) => {
            let namespace = template.metadata.namespace.as_deref().unwrap_or("default");
            let name = template.metadata.name.as_deref().unwrap_or_default();
            for object in txn.list(Kind::Pod, namespace)? {
                if let Object::Pod(pod) = object {
                    if resourceclaims::awaits_template(&pod, name) {
                        make_claims(txn, &pod, rng, &mut events)?;
                    }
                }
            }
        }
        _ => {}
    }
    Ok(events)
}

/// What the controller writes after `deleted` (a pod's deletion): its claims given back.
///
/// # Errors
/// A store failure: the whole transaction is dropped.
pub fn follow_deletion(
    txn: &mut ObjectTxn<'_>,
    deleted: &Object,
) -> Result<Vec<Event>, StoreError> {
    let mut events = Vec::new();
    if let Object::Pod(pod) = deleted {
        release(txn, pod, &mut events)?;
    }
    Ok(events)
}

fn make_claims(
    txn: &mut ObjectTxn<'_>,
    pod: &core::Pod,
    rng: &mut Rng,
    events: &mut Vec<Event>,
) -> Result<(), StoreError> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let template = |name: &str| match txn.get(&ObjectKey {
        kind: Kind::ResourceClaimTemplate,
        namespace: namespace.to_string(),
        name: name.to_string(),
    }) {
        Ok(Some(Object::ResourceClaimTemplate(template))) => Some(*template),
        _ => None,
    };
    let taken = |name: &str| !matches!(txn.get(&claim_key(namespace, name)), Ok(None));
    let Some(made) = resourceclaims::claims_from_templates(pod, template, taken, || {
        resourceclaims::name_suffix(rng)
    }) else {
        return Ok(());
    };
    let objects = made
        .claims
        .into_iter()
        .map(|c| Object::ResourceClaim(Box::new(c)))
        .chain([Object::Pod(Box::new(made.pod))]);
    for mut object in objects {
        let version = txn.put(&mut object)?;
        events.push(Event::with_version(Action::Upsert, object, version));
    }
    Ok(())
}

fn release(
    txn: &mut ObjectTxn<'_>,
    pod: &core::Pod,
    events: &mut Vec<Event>,
) -> Result<(), StoreError> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let released = resourceclaims::released_claims(pod, |name| stored_claim(txn, namespace, name));
    for change in released {
        match change {
            Released::Updated(claim) => {
                let mut object = Object::ResourceClaim(Box::new(claim));
                let version = txn.put(&mut object)?;
                events.push(Event::with_version(Action::Upsert, object, version));
            }
            Released::Deleted(claim) => {
                let key = claim_key(
                    namespace,
                    claim.metadata.name.as_deref().unwrap_or_default(),
                );
                if let Some((version, object)) = txn.delete(&key)? {
                    events.push(Event::with_version(Action::Delete, object, version));
                }
            }
        }
    }
    Ok(())
}
