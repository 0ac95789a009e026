//! Gangs: the PodGroup of kubernetes-sigs/scheduler-plugins (`scheduling.x-k8s.io/v1alpha1`),
//! which the coscheduling plugin reads, and the label that makes a pod one of its members.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use wasched_sdk as sdk;

use super::FieldError;

/// The label naming a pod's PodGroup, in the pod's namespace.
pub const POD_GROUP_LABEL: &str = "scheduling.x-k8s.io/pod-group";

/// A PodGroup: `spec` as the scheduler reads it, `status` as it writes it back.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct PodGroup {
    /// Standard metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What the gang needs.
    #[serde(default)]
    pub spec: PodGroupSpec,
    /// Where the gang stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PodGroupStatus>,
}

/// `spec` of a PodGroup.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupSpec {
    /// The fewest pods that may run: none is bound before this many are assigned nodes.
    #[serde(default)]
    pub min_member: i32,
    /// What the cluster must have free for `minMember` pods before any is tried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_resources: Option<BTreeMap<String, Quantity>>,
    /// How long a member waits at Permit for the rest (the plugin's default when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_timeout_seconds: Option<i32>,
}

/// `status` of a PodGroup, as coscheduling's controller keeps it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupStatus {
    /// `Pending`, `PreScheduling`, `Scheduling`, `Scheduled`, `Running`, `Finished` or `Failed`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// Members bound to a node.
    #[serde(default)]
    pub scheduled: i32,
    /// Members running.
    #[serde(default)]
    pub running: i32,
    /// Members that succeeded.
    #[serde(default)]
    pub succeeded: i32,
    /// Members that failed.
    #[serde(default)]
    pub failed: i32,
}

impl k8s_openapi::Resource for PodGroup {
    const API_VERSION: &'static str = "scheduling.x-k8s.io/v1alpha1";
    const GROUP: &'static str = "scheduling.x-k8s.io";
    const KIND: &'static str = "PodGroup";
    const VERSION: &'static str = "v1alpha1";
    const URL_PATH_SEGMENT: &'static str = "podgroups";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::ListableResource for PodGroup {
    const LIST_KIND: &'static str = "PodGroupList";
}

impl k8s_openapi::Metadata for PodGroup {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// A PodGroup's spec as the cache keeps it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupSpec {
    /// `minMember` (0 when negative).
    pub min_member: u32,
    /// `minResources`, parsed.
    pub min_resources: Option<sdk::Resources>,
    /// `scheduleTimeoutSeconds` (none when unset or not positive).
    pub schedule_timeout_seconds: Option<u32>,
    /// `metadata.creationTimestamp` in milliseconds since the epoch, if set.
    pub created_millis: Option<i64>,
}

/// The spec of `group` as the cache keeps it.
///
/// # Errors
/// A `minResources` quantity that does not parse.
pub fn group_spec(group: &PodGroup) -> Result<GroupSpec, FieldError> {
    let min_resources = match &group.spec.min_resources {
        Some(list) => Some(super::resources(list, "spec.minResources")?),
        None => None,
    };
    Ok(GroupSpec {
        min_member: u32::try_from(group.spec.min_member).unwrap_or(0),
        min_resources,
        schedule_timeout_seconds: group
            .spec
            .schedule_timeout_seconds
            .and_then(|s| u32::try_from(s).ok())
            .filter(|s| *s > 0),
        created_millis: group
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_millisecond()),
    })
}

/// The name of the PodGroup `pod` belongs to (its label), if any.
pub fn group_of(pod: &sdk::Pod) -> Option<&str> {
    pod.labels
        .get(POD_GROUP_LABEL)
        .filter(|name| !name.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_group_reads_as_coscheduling_writes_it() {
        let group: PodGroup = serde_json::from_value(serde_json::json!({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "job", "namespace": "ml",
                         "creationTimestamp": "2026-01-02T03:04:05Z"},
            "spec": {"minMember": 8, "minResources": {"cpu": "3", "nvidia.com/gpu": "8"},
                     "scheduleTimeoutSeconds": 30}
        }))
        .unwrap();
        let spec = group_spec(&group).unwrap();
        assert_eq!(spec.min_member, 8);
        let min = spec.min_resources.unwrap();
        assert_eq!(min.milli_cpu, 3000);
        assert_eq!(min.get("nvidia.com/gpu"), 8);
        assert_eq!(spec.schedule_timeout_seconds, Some(30));
        assert_eq!(spec.created_millis, Some(1_767_323_045_000));

        let bad: PodGroup = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "bad"},
            "spec": {"minMember": -1, "minResources": {"cpu": "lots"}, "scheduleTimeoutSeconds": 0}
        }))
        .unwrap();
        let error = group_spec(&bad).unwrap_err().to_string();
        assert!(error.contains("spec.minResources"), "{error}");
    }
}
