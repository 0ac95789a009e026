//! PodGroup status in Kubernetes mode: what coscheduling's PodGroup controller writes (phase,
//! scheduled, running, succeeded and failed members), kept by the leader from its own watches,
//! so a cluster running wasched needs no second controller for `kubectl get podgroups` to show
//! where each gang stands. The watches feed [`GroupStatuses`] every pod and PodGroup they see
//! (done pods included, which the cache never holds); once a second, the leader patches the
//! `status` subresource of each group whose status changed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1 as core;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use wasched_core::events::{Object, ObjectKey};
use wasched_core::k8s::podgroup::{
    next_status, MemberState, PodGroup, PodGroupStatus, POD_GROUP_LABEL,
};

use super::bind::bounded;
use super::events::now_rfc3339;
use super::{RateLimiter, WatchStats};
use crate::engine::StartGate;
use crate::lenient::shortened;

/// How often the leader looks for statuses to write: changes within it are written once.
const WRITE_PERIOD: Duration = Duration::from_secs(1);

/// A namespace and a name.
type GroupKey = (String, String);

/// The PodGroups and their members as the watches last saw them.
#[derive(Default)]
pub struct GroupStatuses {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    groups: HashMap<GroupKey, Group>,
    /// The group each member pod (namespace, name) was last seen in, to leave it when relabelled
    /// or deleted.
    member_of: HashMap<GroupKey, String>,
    /// Groups whose status may be out of date.
    changed: BTreeSet<GroupKey>,
}

#[derive(Default)]
struct Group {
    /// `spec.minMember` of the PodGroup; None while no PodGroup of this name is seen.
    min_member: Option<i32>,
    /// The status as last seen or written.
    status: PodGroupStatus,
    /// Member pods by name.
    members: BTreeMap<String, MemberState>,
}

impl GroupStatuses {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes in a pod or PodGroup a watch saw (other kinds are ignored).
    pub fn observe(&self, object: &Object) {
        match object {
            Object::Pod(pod) => self.observe_pod(pod),
            Object::PodGroup(group) => {
                let key = (
                    group.metadata.namespace.clone().unwrap_or_default(),
                    group.metadata.name.clone().unwrap_or_default(),
                );
                let mut state = self.state();
                let entry = state.groups.entry(key.clone()).or_default();
                entry.min_member = Some(group.spec.min_member);
                entry.status = group.status.clone().unwrap_or_default();
                state.changed.insert(key);
            }
            _ => {}
        }
    }

    fn observe_pod(&self, pod: &core::Pod) {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let group = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(POD_GROUP_LABEL))
            .filter(|g| !g.is_empty());
        let mut state = self.state();
        let pod_key = (namespace.clone(), name.clone());
        if state.member_of.get(&pod_key) != group {
            state.leave(&pod_key);
        }
        let Some(group) = group else {
            return;
        };
        let member = MemberState {
            phase: pod
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default(),
            bound: pod.spec.as_ref().is_some_and(|s| s.node_name.is_some()),
            owners: (pod.metadata.owner_references.iter().flatten())
                .map(|owner| owner.name.clone())
                .collect(),
        };
        let group_key = (namespace, group.clone());
        state.member_of.insert(pod_key, group.clone());
        let entry = state.groups.entry(group_key.clone()).or_default();
        if entry.members.get(&name) != Some(&member) {
            entry.members.insert(name, member);
            state.changed.insert(group_key);
        }
    }

    /// Forgets a deleted pod or PodGroup.
    pub fn forget(&self, key: &ObjectKey) {
        let mut state = self.state();
        let object_key = (key.namespace.clone(), key.name.clone());
        match key.kind {
            wasched_core::events::Kind::Pod => state.leave(&object_key),
            wasched_core::events::Kind::PodGroup => {
                if let Some(group) = state.groups.get_mut(&object_key) {
                    group.min_member = None;
                    group.status = PodGroupStatus::default();
                }
            }
            _ => {}
        }
    }

    /// The statuses to write: each changed group that exists and whose status as coscheduling's
    /// controller would compute it differs from the one it has.
    pub fn to_write(&self, now: &str) -> Vec<(GroupKey, PodGroupStatus)> {
        let mut state = self.state();
        let changed = std::mem::take(&mut state.changed);
        let mut writes = Vec::new();
        for key in changed {
            let Some(group) = state.groups.get(&key) else {
                continue;
            };
            let Some(min_member) = group.min_member else {
                if group.members.is_empty() {
                    state.groups.remove(&key);
                }
                continue;
            };
            let members: Vec<MemberState> = group.members.values().cloned().collect();
            let status = next_status(min_member, &group.status, &key.0, &members, now);
            if status != group.status {
                writes.push((key, status));
            }
        }
        writes
    }

    /// `status` was written to the group at `key`: it is what the group has now (until its
    /// watch says otherwise).
    fn written(&self, key: &GroupKey, status: PodGroupStatus) {
        if let Some(group) = self.state().groups.get_mut(key) {
            group.status = status;
        }
    }

    /// The write to `key` failed: it is tried again next time.
    fn retry(&self, key: GroupKey) {
        self.state().changed.insert(key);
    }
}

impl State {
    /// The pod at `pod_key` is no longer a member of the group it was in.
    fn leave(&mut self, pod_key: &GroupKey) {
        let Some(group) = self.member_of.remove(pod_key) else {
            return;
        };
        let group_key = (pod_key.0.clone(), group);
        if let Some(entry) = self.groups.get_mut(&group_key) {
            entry.members.remove(&pod_key.1);
            self.changed.insert(group_key);
        }
    }
}

/// The leader's loop: every [`WRITE_PERIOD`], once `leading` is open (every kind listed and,
/// with leader election, this replica leads), patches the status of each PodGroup whose status
/// changed, at the client's rate. A refused write is tried again the next period; a group
/// deleted meanwhile is let go.
pub async fn write_statuses(
    client: Client,
    groups: Arc<GroupStatuses>,
    leading: Arc<StartGate>,
    rate: Arc<RateLimiter>,
    stats: Arc<WatchStats>,
) {
    loop {
        tokio::time::sleep(WRITE_PERIOD).await;
        if !leading.is_open() {
            continue;
        }
        for (key, status) in groups.to_write(&now_rfc3339()) {
            let (namespace, name) = &key;
            let api: Api<PodGroup> = Api::namespaced(client.clone(), namespace);
            let patch = Patch::Merge(serde_json::json!({ "status": status }));
            rate.acquire().await;
            match bounded(api.patch_status(name, &PatchParams::default(), &patch)).await {
                Ok(_) => {
                    stats.group_status_writes.fetch_add(1, Ordering::Relaxed);
                    groups.written(&key, status);
                }
                Err(kube::Error::Api(answer)) if answer.code == 404 => {}
                Err(e) => {
                    stats.group_status_failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(podgroup = %format!("{namespace}/{name}"), "writing the PodGroup's status: {}", shortened(&e.to_string()));
                    groups.retry(key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, group: Option<&str>, node: Option<&str>, phase: &str) -> Object {
        let labels = group.map(|g| [(POD_GROUP_LABEL.to_string(), g.to_string())].into());
        Object::Pod(Box::new(core::Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ml".into()),
                labels,
                ..Default::default()
            },
            spec: Some(core::PodSpec {
                node_name: node.map(str::to_string),
                ..Default::default()
            }),
            status: Some(core::PodStatus {
                phase: Some(phase.into()),
                ..Default::default()
            }),
        }))
    }

    fn group(min_member: i32, phase: &str) -> Object {
        let group: PodGroup = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "job", "namespace": "ml"},
            "spec": {"minMember": min_member},
            "status": {"phase": phase}
        }))
        .unwrap();
        Object::PodGroup(Box::new(group))
    }

    fn phases(writes: &[(GroupKey, PodGroupStatus)]) -> Vec<(String, i32)> {
        writes
            .iter()
            .map(|(_, s)| (s.phase.clone(), s.scheduled))
            .collect()
    }

    #[test]
    fn members_come_and_go_with_their_label_and_only_changes_are_written() {
        let groups = GroupStatuses::default();
        groups.observe(&pod("a", Some("job"), None, "Pending"));
        assert!(groups.to_write("t").is_empty(), "no PodGroup yet");
        groups.observe(&group(2, ""));
        assert_eq!(phases(&groups.to_write("t")), [("Pending".into(), 0)]);
        // The write's echo through the watch.
        groups.observe(&group(2, "Pending"));
        assert!(groups.to_write("t").is_empty(), "nothing changed");

        groups.observe(&pod("b", Some("job"), None, "Pending"));
        let writes = groups.to_write("t");
        assert_eq!(phases(&writes), [("PreScheduling".into(), 0)]);
        groups.written(&writes[0].0, writes[0].1.clone());

        groups.observe(&pod("a", Some("job"), Some("n1"), "Pending"));
        groups.observe(&pod("b", Some("job"), Some("n2"), "Running"));
        assert_eq!(phases(&groups.to_write("t")), [("Scheduled".into(), 2)]);

        // Relabelled out of the group, then deleted: the group is short of minMember again.
        groups.observe(&pod("b", Some("other"), Some("n2"), "Running"));
        groups.forget(&ObjectKey {
            kind: wasched_core::events::Kind::Pod,
            namespace: "ml".into(),
            name: "b".into(),
        });
        let writes = groups.to_write("t");
        assert_eq!(phases(&writes), [("Pending".into(), 1)]);
    }
}
