//! The two jobs of kube's resourceclaim controller that a scheduler sees, for the places where
//! wasched is the whole control plane (`serve` standalone, `replay`): a pod's claims made from
//! its ResourceClaimTemplates, and a pod's claims given back when it is deleted or done. In
//! Kubernetes mode kube-controller-manager does both and nothing here runs.

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::resource::v1 as resource;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;

use super::devices::FINALIZER;

/// The annotation kube's controller puts on a claim made from a template: the name of the pod's
/// `spec.resourceClaims` entry it was made for.
pub const POD_CLAIM_ANNOTATION: &str = "resource.kubernetes.io/pod-claim-name";

/// The longest base of a generated name: a hyphen and five random characters still fit in 63.
const MAX_GENERATE_BASE: usize = 57;

/// The characters of a generated name's random suffix (the API server's, without vowels and
/// look-alikes).
pub const NAME_SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// Five characters of [`NAME_SUFFIX_ALPHABET`] drawn from `rng`, as the API server ends a
/// `generateName`.
pub fn name_suffix(rng: &mut crate::util::Rng) -> String {
    (0..5)
        .map(|_| {
            char::from(NAME_SUFFIX_ALPHABET[rng.below(NAME_SUFFIX_ALPHABET.len() as u64) as usize])
        })
        .collect()
}

/// A pod given the claims its templates call for.
#[derive(Debug, Clone, PartialEq)]
pub struct FromTemplates {
    /// The pod with each new claim's name in `status.resourceClaimStatuses`.
    pub pod: core::Pod,
    /// The claims to create, owned by the pod.
    pub claims: Vec<resource::ResourceClaim>,
}

/// The claims `pod`'s template entries still need, as kube's controller makes them: named
/// `<pod>-<entry>-<suffix>` (the base shortened in proportion past 57 characters), with the
/// template's labels, annotations and spec, the pod as controlling owner and the entry's name in
/// [`POD_CLAIM_ANNOTATION`]. `template(name)` finds a template of the pod's namespace; an entry
/// whose template does not exist yet is left (the pod stays out of the queue until it does).
/// `taken(name)` says a claim name is in use; `suffix()` draws a random suffix.
///
/// `None` when nothing is to be done: the pod has no template entry without its claim, is done,
/// or is being deleted.
pub fn claims_from_templates(
    pod: &core::Pod,
    template: impl Fn(&str) -> Option<resource::ResourceClaimTemplate>,
    taken: impl Fn(&str) -> bool,
    mut suffix: impl FnMut() -> String,
) -> Option<FromTemplates> {
    if super::is_terminated(pod) || pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let entries = pod.spec.as_ref()?.resource_claims.as_ref()?;
    let recorded = |entry: &str| {
        pod.status
            .as_ref()
            .and_then(|s| s.resource_claim_statuses.as_ref())
            .is_some_and(|statuses| statuses.iter().any(|s| s.name == entry))
    };
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let mut made = FromTemplates {
        pod: pod.clone(),
        claims: Vec::new(),
    };
    for entry in entries {
        let Some(template_name) = entry.resource_claim_template_name.as_deref() else {
            continue;
        };
        if entry.resource_claim_name.is_some() || recorded(&entry.name) {
            continue;
        }
        let Some(template) = template(template_name) else {
            continue;
        };
        let base = generate_name(pod_name, &entry.name);
        let name = loop {
            let name = format!("{base}{}", suffix());
            let chosen = made
                .claims
                .iter()
                .any(|c| c.metadata.name.as_ref() == Some(&name));
            if !taken(&name) && !chosen {
                break name;
            }
        };
        made.claims
            .push(claim_for(pod, &entry.name, &template, &name));
        made.pod
            .status
            .get_or_insert_with(Default::default)
            .resource_claim_statuses
            .get_or_insert_with(Vec::new)
            .push(core::PodResourceClaimStatus {
                name: entry.name.clone(),
                resource_claim_name: Some(name),
            });
    }
    (!made.claims.is_empty()).then_some(made)
}

/// `<pod>-<entry>-`, both parts shortened in proportion when that is longer than 57 characters,
/// as kube's controller does (the API server would cut only the end, losing the entry's name).
fn generate_name(pod: &str, entry: &str) -> String {
    let base = format!("{pod}-{entry}-");
    if base.len() <= MAX_GENERATE_BASE {
        return base;
    }
    let keep = |part: &str| {
        let end = part.len() * MAX_GENERATE_BASE / base.len();
        let mut end = end.min(part.len());
        while !part.is_char_boundary(end) {
            end -= 1;
        }
        part[..end].to_string()
    };
    // kube's shortened form has no trailing hyphen.
    format!("{}-{}", keep(pod), keep(entry))
}

fn claim_for(
    pod: &core::Pod,
    entry: &str,
    template: &resource::ResourceClaimTemplate,
    name: &str,
) -> resource::ResourceClaim {
    let template_meta = template.spec.metadata.clone().unwrap_or_default();
    let mut annotations = template_meta.annotations.unwrap_or_default();
    annotations.insert(POD_CLAIM_ANNOTATION.to_string(), entry.to_string());
    resource::ResourceClaim {
        metadata: meta::ObjectMeta {
            name: Some(name.to_string()),
            namespace: pod.metadata.namespace.clone(),
            annotations: Some(annotations),
            labels: template_meta.labels,
            owner_references: Some(vec![meta::OwnerReference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: pod.metadata.name.clone().unwrap_or_default(),
                uid: pod.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        spec: template.spec.spec.clone(),
        status: None,
    }
}

/// What happens to one claim of a pod that is deleted or done.
#[derive(Debug, Clone, PartialEq)]
pub enum Released {
    /// The claim without the pod in `reservedFor`, and deallocated (its finalizer removed) when no
    /// pod is left in it.
    Updated(resource::ResourceClaim),
    /// The claim was made for the pod from a template: it goes with the pod.
    Deleted(resource::ResourceClaim),
}

/// What kube's controller does to `pod`'s claims once the pod is deleted or done: each claim
/// reserved for it loses it from `reservedFor`, a claim with no pod left is deallocated (so its
/// devices are free for others, and a later user allocates it afresh), and a claim made for the
/// pod from a template is deleted. `claim(name)` finds a claim of the pod's namespace.
pub fn released_claims(
    pod: &core::Pod,
    claim: impl Fn(&str) -> Option<resource::ResourceClaim>,
) -> Vec<Released> {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let mut released = Vec::new();
    for entry in super::devices::pod_claims(pod) {
        if entry.claim_name.is_empty() {
            continue;
        }
        let Some(mut found) = claim(&entry.claim_name) else {
            continue;
        };
        if owned_by(&found, uid) {
            released.push(Released::Deleted(found));
            continue;
        }
        let Some(status) = found.status.as_mut() else {
            continue;
        };
        let Some(reserved) = status.reserved_for.as_mut() else {
            continue;
        };
        let before = reserved.len();
        reserved.retain(|r| {
            r.resource != "pods" || !(r.uid == uid || uid.is_empty() && r.name == pod_name)
        });
        if reserved.len() == before {
            continue;
        }
        if reserved.is_empty() {
            status.reserved_for = None;
            if found
                .metadata
                .finalizers
                .iter()
                .flatten()
                .any(|f| f == FINALIZER)
            {
                status.allocation = None;
                if let Some(finalizers) = found.metadata.finalizers.as_mut() {
                    finalizers.retain(|f| f != FINALIZER);
                }
            }
        }
        released.push(Released::Updated(found));
    }
    released
}

/// The claim was made for the pod with `uid` from one of its templates.
fn owned_by(claim: &resource::ResourceClaim, uid: &str) -> bool {
    !uid.is_empty()
        && claim
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(POD_CLAIM_ANNOTATION))
        && claim
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "Pod" && o.uid == uid && o.controller == Some(true))
}

/// Whether `pod` names `template` in one of its entries and has no claim for that entry yet.
pub fn awaits_template(pod: &core::Pod, template: &str) -> bool {
    let Some(entries) = pod.spec.as_ref().and_then(|s| s.resource_claims.as_ref()) else {
        return false;
    };
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_ref());
    entries.iter().any(|entry| {
        entry.resource_claim_name.is_none()
            && entry.resource_claim_template_name.as_deref() == Some(template)
            && !statuses.into_iter().flatten().any(|s| s.name == entry.name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> core::Pod {
        serde_json::from_value(value).expect("a pod")
    }

    fn template() -> resource::ResourceClaimTemplate {
        serde_json::from_value(json!({
            "metadata": {"name": "one-gpu", "namespace": "ml"},
            "spec": {
                "metadata": {"labels": {"team": "ml"}, "annotations": {"note": "kept"}},
                "spec": {"devices": {"requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}
                ]}}
            }
        }))
        .expect("a template")
    }

    fn trainer() -> core::Pod {
        pod(json!({
            "metadata": {"name": "trainer", "namespace": "ml", "uid": "u-1"},
            "spec": {"containers": [], "resourceClaims": [
                {"name": "gpu", "resourceClaimTemplateName": "one-gpu"},
                {"name": "shared", "resourceClaimName": "shared"},
                {"name": "later", "resourceClaimTemplateName": "not-yet"}
            ]}
        }))
    }

    #[test]
    fn a_template_entry_gets_its_claim_owned_by_the_pod() {
        let suffixes = std::cell::RefCell::new(vec!["abcde".to_string(), "fghjk".to_string()]);
        let made = claims_from_templates(
            &trainer(),
            |name| (name == "one-gpu").then(template),
            |name| name == "trainer-gpu-fghjk",
            || suffixes.borrow_mut().pop().expect("a suffix"),
        )
        .expect("one claim to make");
        assert_eq!(made.claims.len(), 1, "only the template that exists");
        let claim = &made.claims[0];
        assert_eq!(
            claim.metadata.name.as_deref(),
            Some("trainer-gpu-abcde"),
            "a taken name is drawn again"
        );
        assert_eq!(claim.metadata.namespace.as_deref(), Some("ml"));
        let owner = &claim.metadata.owner_references.as_ref().expect("an owner")[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("Pod", "u-1"));
        assert_eq!(owner.controller, Some(true));
        let annotations = claim.metadata.annotations.as_ref().expect("annotations");
        assert_eq!(annotations[POD_CLAIM_ANNOTATION], "gpu");
        assert_eq!(annotations["note"], "kept");
        assert_eq!(
            claim.metadata.labels.as_ref().expect("labels")["team"],
            "ml"
        );
        assert_eq!(claim.spec, template().spec.spec);
        let statuses = made
            .pod
            .status
            .as_ref()
            .and_then(|s| s.resource_claim_statuses.clone())
            .expect("statuses");
        assert_eq!(statuses.len(), 1);
        assert_eq!(statuses[0].name, "gpu");
        assert_eq!(
            statuses[0].resource_claim_name.as_deref(),
            Some("trainer-gpu-abcde")
        );
        assert!(
            !awaits_template(&made.pod, "one-gpu") && awaits_template(&made.pod, "not-yet"),
            "the made entry is recorded, the missing template's is not"
        );
        assert_eq!(
            claims_from_templates(
                &made.pod,
                |name| (name == "one-gpu").then(template),
                |_| false,
                || "x".into()
            ),
            None,
            "nothing twice"
        );
    }

    #[test]
    fn done_or_deleted_pods_get_no_claims() {
        let mut done = trainer();
        done.status = Some(core::PodStatus {
            phase: Some("Succeeded".into()),
            ..Default::default()
        });
        assert_eq!(
            claims_from_templates(&done, |_| Some(template()), |_| false, || "x".into()),
            None
        );
        let mut deleting = trainer();
        deleting.metadata.deletion_timestamp = Some(meta::Time(Default::default()));
        assert_eq!(
            claims_from_templates(&deleting, |_| Some(template()), |_| false, || "x".into()),
            None
        );
    }

    #[test]
    fn long_names_are_shortened_in_proportion() {
        let pod_name = "p".repeat(60);
        let base = generate_name(&pod_name, "accelerator");
        assert_eq!(base, format!("{}-accelera", "p".repeat(46)));
        assert_eq!(generate_name("a", "b"), "a-b-");
    }

    fn claim(value: serde_json::Value) -> resource::ResourceClaim {
        serde_json::from_value(value).expect("a claim")
    }

    fn allocated(
        name: &str,
        reserved: serde_json::Value,
        owner: Option<&str>,
    ) -> resource::ResourceClaim {
        let mut metadata = json!({"name": name, "namespace": "ml", "finalizers": [FINALIZER]});
        if let Some(uid) = owner {
            metadata["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Pod", "name": "trainer", "uid": uid, "controller": true}]);
            metadata["annotations"] = json!({POD_CLAIM_ANNOTATION: "gpu"});
        }
        claim(json!({
            "metadata": metadata,
            "spec": {"devices": {"requests": []}},
            "status": {
                "allocation": {"devices": {"results": [
                    {"request": "gpu", "driver": "gpu.example.com", "pool": "n1", "device": "gpu-0"}
                ]}},
                "reservedFor": reserved
            }
        }))
    }

    #[test]
    fn a_gone_pod_gives_its_claims_back() {
        let mut pod = trainer();
        pod.status = Some(core::PodStatus {
            resource_claim_statuses: Some(vec![core::PodResourceClaimStatus {
                name: "gpu".into(),
                resource_claim_name: Some("trainer-gpu-abcde".into()),
            }]),
            ..Default::default()
        });
        let me = json!({"resource": "pods", "name": "trainer", "uid": "u-1"});
        let other = json!({"resource": "pods", "name": "other", "uid": "u-2"});
        let claims = [
            allocated("trainer-gpu-abcde", json!([me]), Some("u-1")),
            allocated("shared", json!([me, other]), None),
        ];
        let find = |name: &str| {
            claims
                .iter()
                .find(|c| c.metadata.name.as_deref() == Some(name))
                .cloned()
        };
        let released = released_claims(&pod, find);
        assert_eq!(released.len(), 2);
        assert_eq!(
            released[0],
            Released::Deleted(claims[0].clone()),
            "made for the pod"
        );
        let Released::Updated(shared) = &released[1] else {
            panic!("the shared claim is updated: {:?}", released[1]);
        };
        let status = shared.status.as_ref().expect("status");
        assert_eq!(
            status.reserved_for.as_ref().map(Vec::len),
            Some(1),
            "the other pod stays"
        );
        assert!(status.allocation.is_some(), "still in use: still allocated");

        let last = [allocated("shared", json!([me]), None)];
        let released = released_claims(&pod, |name| {
            last.iter()
                .find(|c| c.metadata.name.as_deref() == Some(name))
                .cloned()
        });
        let [Released::Updated(shared)] = released.as_slice() else {
            panic!("one update: {released:?}");
        };
        let status = shared.status.as_ref().expect("status");
        assert_eq!(status.reserved_for, None);
        assert_eq!(status.allocation, None, "deallocated once unused");
        assert!(
            !shared
                .metadata
                .finalizers
                .iter()
                .flatten()
                .any(|f| f == FINALIZER),
            "the finalizer goes with the allocation"
        );

        let unrelated = [allocated("shared", json!([other]), None)];
        assert!(
            released_claims(&pod, |_| Some(unrelated[0].clone())).is_empty(),
            "a claim not reserved for the pod is left alone"
        );
    }
}
