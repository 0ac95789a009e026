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
    /// The owners of the members (`namespace/name`, sorted, comma-separated), set as the group
    /// leaves `Pending`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub occupied_by: String,
    /// When the first member was bound (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_start_time: Option<String>,
}

/// What the status of a PodGroup needs of one member pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberState {
    /// `status.phase` (`Pending`, `Running`, `Succeeded`, `Failed`, or empty).
    pub phase: String,
    /// Whether `spec.nodeName` is set.
    pub bound: bool,
    /// `metadata.ownerReferences[*].name`.
    pub owners: Vec<String>,
}

impl MemberState {
    fn scheduled(&self) -> bool {
        self.bound || matches!(self.phase.as_str(), "Running" | "Succeeded" | "Failed")
    }
}

/// The status coscheduling's PodGroup controller would write for a group of `min_member` whose
/// status is `previous` and whose members (pods with its label, done ones included) in
/// `namespace` are `members`; `now` (RFC 3339) stamps `scheduleStartTime`.
///
/// The controller's phases, stepped until none applies (the controller takes one step a
/// reconcile, and each write of its own triggers the next): `Pending` until `minMember` members
/// exist, then `PreScheduling`; `Scheduling` once one is bound (the step the plugin's PostBind
/// took in older releases); `Scheduled` once `minMember` are; `Running` once `minMember` run or
/// succeeded; `Failed` when one failed and `minMember` ran; `Finished` once `minMember` succeeded.
/// A group that loses members below `minMember` is `Pending` again; `Finished` and `Failed` are
/// final.
pub fn next_status(
    min_member: i32,
    previous: &PodGroupStatus,
    namespace: &str,
    members: &[MemberState],
    now: &str,
) -> PodGroupStatus {
    let mut status = previous.clone();
    if matches!(status.phase.as_str(), "Finished" | "Failed") {
        return status;
    }
    let count = |phase: &str| count_i32(members.iter().filter(|m| m.phase == phase).count());
    status.scheduled = count_i32(members.iter().filter(|m| m.scheduled()).count());
    status.running = count("Running");
    status.succeeded = count("Succeeded");
    status.failed = count("Failed");
    let enough = count_i32(members.len()) >= min_member && !members.is_empty();
    loop {
        let next = match status.phase.as_str() {
            "Finished" | "Failed" => break,
            "" => "Pending",
            "Pending" if enough => "PreScheduling",
            "Pending" => break,
            _ if !enough => "Pending",
            _ if status.succeeded >= min_member => "Finished",
            _ if status.failed != 0
                && status.failed + status.running + status.succeeded >= min_member =>
            {
                "Failed"
            }
            "PreScheduling" if status.scheduled > 0 => "Scheduling",
            "Scheduling" if status.scheduled >= min_member => "Scheduled",
            "Scheduled" if status.running + status.succeeded >= min_member => "Running",
            _ => break,
        };
        match next {
            "PreScheduling" => status.occupied_by = occupied_by(namespace, members),
            "Scheduling" => status.schedule_start_time = Some(now.to_string()),
            _ => {}
        }
        status.phase = next.to_string();
    }
    status
}

fn count_i32(count: usize) -> i32 {
    i32::try_from(count).unwrap_or(i32::MAX)
}

/// The controller's `occupiedBy`: the first member's owners as `namespace/name`, sorted.
fn occupied_by(namespace: &str, members: &[MemberState]) -> String {
    let Some(first) = members.first() else {
        return String::new();
    };
    let mut owners: Vec<String> = first
        .owners
        .iter()
        .map(|owner| format!("{namespace}/{owner}"))
        .collect();
    owners.sort();
    owners.join(",")
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

/// The `namespace/NAME` of the PodGroup a placed pod's label names, if any (preemption's view
/// of running gangs).
pub fn placed_group_name(pod: &sdk::ExistingPod) -> Option<String> {
    let name = pod
        .labels
        .get(POD_GROUP_LABEL)
        .filter(|name| !name.is_empty())?;
    Some(format!("{}/{name}", pod.namespace))
}

/// Whether `pod` is a member of a gang: its `spec.workloadRef`, or its PodGroup label.
pub fn is_grouped(pod: &sdk::Pod) -> bool {
    !pod.workload_ref.is_empty() || group_of(pod).is_some()
}

/// The full name of the gang `pod` belongs to, if any: `namespace/WORKLOAD/POD-GROUP[/REPLICA]`
/// for a pod with a `spec.workloadRef` (Kubernetes 1.35's Workload API, which wins), else
/// `namespace/NAME` of the PodGroup its label names.
pub fn group_name(pod: &sdk::Pod) -> Option<String> {
    if !pod.workload_ref.is_empty() {
        return Some(format!("{}/{}", pod.namespace, pod.workload_ref));
    }
    group_of(pod).map(|name| format!("{}/{name}", pod.namespace))
}

/// The name a gang's spec is kept under: a Workload's replicated pod group shares the spec of
/// its pod group (`namespace/WORKLOAD/POD-GROUP`); every other gang is its own.
pub fn spec_name(full_name: &str) -> &str {
    match full_name.match_indices('/').nth(2) {
        Some((at, _)) => &full_name[..at],
        None => full_name,
    }
}

/// How long a member of a Workload's gang waits at Permit for the rest: kube-scheduler 1.35's
/// GangScheduling has no setting for it and waits five minutes.
pub const WORKLOAD_GANG_TIMEOUT_SECONDS: u32 = 300;

/// The gangs of a Workload (`scheduling.k8s.io/v1alpha1`, Kubernetes 1.35) by the name their
/// spec is kept under: each pod group with a `gang` policy needs `minCount` members; a `basic`
/// one is a group of one (its pods are scheduled one by one, as without the Workload).
pub fn workload_gangs(
    workload: &k8s_openapi::api::scheduling::v1alpha1::Workload,
) -> Vec<(String, GroupSpec)> {
    let meta = &workload.metadata;
    let namespace = meta.namespace.as_deref().unwrap_or("default");
    let name = meta.name.as_deref().unwrap_or_default();
    let created_millis = meta
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_millisecond());
    workload
        .spec
        .pod_groups
        .iter()
        .map(|group| {
            let min_member = group
                .policy
                .gang
                .as_ref()
                .map_or(1, |gang| u32::try_from(gang.min_count).unwrap_or(0).max(1));
            let spec = GroupSpec {
                min_member,
                min_resources: None,
                schedule_timeout_seconds: Some(WORKLOAD_GANG_TIMEOUT_SECONDS),
                created_millis,
            };
            (format!("{namespace}/{name}/{}", group.name), spec)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(count: usize, phase: &str, bound: bool) -> Vec<MemberState> {
        (0..count)
            .map(|_| MemberState {
                phase: phase.into(),
                bound,
                owners: vec!["job-b".into(), "job-a".into()],
            })
            .collect()
    }

    /// scheduler-plugins' controller test (`Test_Run`), one row each: minMember, members and
    /// their phase, the previous phase, the phase written. "Pending to PreScheduling" is
    /// HEAD's controller (an older one went straight to Scheduling); "created too long" is left
    /// out (the 48-hour rule stops the controller for groups whose pods may be collected).
    #[test]
    fn the_phase_follows_coscheduling_s_controller() {
        let rows = [
            ("group running", 2, 2, "Running", "Scheduling", "Running"),
            (
                "more than minMember running",
                2,
                4,
                "Running",
                "Scheduling",
                "Running",
            ),
            ("group failed", 2, 2, "Failed", "Scheduling", "Failed"),
            (
                "group finished",
                2,
                2,
                "Succeeded",
                "Scheduling",
                "Finished",
            ),
            (
                "pending to prescheduling",
                2,
                2,
                "Pending",
                "Pending",
                "PreScheduling",
            ),
            (
                "pending to finished",
                2,
                2,
                "Succeeded",
                "Pending",
                "Finished",
            ),
            ("keeps pending", 3, 2, "Running", "Pending", "Pending"),
            (
                "fewer pods than minMember",
                3,
                2,
                "Pending",
                "Pending",
                "Pending",
            ),
            ("running to pending", 4, 2, "Pending", "Running", "Pending"),
            ("new group", 2, 0, "Pending", "", "Pending"),
            ("finished stays", 2, 0, "Pending", "Finished", "Finished"),
        ];
        for (name, min, count, pod_phase, previous, expected) in rows {
            let previous = PodGroupStatus {
                phase: previous.into(),
                ..Default::default()
            };
            let members = members(count, pod_phase, false);
            let status = next_status(min, &previous, "ml", &members, "now");
            assert_eq!(status.phase, expected, "{name}");
        }
    }

    #[test]
    fn binding_moves_a_group_through_scheduling_to_scheduled_and_counts_members() {
        let pending = PodGroupStatus {
            phase: "PreScheduling".into(),
            ..Default::default()
        };
        let mut group = members(3, "Pending", false);
        let status = next_status(3, &pending, "ml", &group, "t0");
        assert_eq!(
            (status.phase.as_str(), status.scheduled),
            ("PreScheduling", 0)
        );
        assert_eq!(status.schedule_start_time, None);

        group[0].bound = true;
        let status = next_status(3, &status, "ml", &group, "t1");
        assert_eq!((status.phase.as_str(), status.scheduled), ("Scheduling", 1));
        assert_eq!(status.schedule_start_time.as_deref(), Some("t1"));

        group[1].bound = true;
        group[2].bound = true;
        group[2].phase = "Running".into();
        let status = next_status(3, &status, "ml", &group, "t2");
        assert_eq!(status.phase, "Scheduled");
        assert_eq!((status.scheduled, status.running), (3, 1));
        assert_eq!(status.schedule_start_time.as_deref(), Some("t1"), "kept");
    }

    /// The controller's `TestFillGroupStatusOccupied`.
    #[test]
    fn leaving_pending_names_the_owners_of_the_members() {
        let status = next_status(
            2,
            &PodGroupStatus::default(),
            "default",
            &members(2, "Pending", false),
            "t",
        );
        assert_eq!(status.phase, "PreScheduling");
        assert_eq!(status.occupied_by, "default/job-a,default/job-b");
    }

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
