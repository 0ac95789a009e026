//! The gangs the service knows: each PodGroup's spec, and the pods (pending or placed, not
//! done) that name it, so that a pod's [`sdk::PodGroup`] is filled in without listing pods.

use std::collections::{BTreeSet, HashMap};

use wasched_sdk as sdk;

use crate::k8s::podgroup::{group_name, spec_name, GroupSpec};

/// The PodGroups and their members.
#[derive(Debug, Default)]
pub struct Gangs {
    /// Specs by `namespace/name`.
    specs: HashMap<String, GroupSpec>,
    /// When each group was first seen, in milliseconds since the epoch: its creation time when
    /// the object carries none (a file given to `simulate`).
    first_seen: HashMap<String, i64>,
    /// Member pod keys by group.
    members: HashMap<String, BTreeSet<String>>,
    /// Each member's group and requests.
    member_of: HashMap<String, (String, sdk::Resources)>,
}

/// Where a pod's group stands, apart from what only the service knows (who waits at Permit).
pub struct GroupView<'a> {
    /// The group's `namespace/name`.
    pub full_name: String,
    /// Its spec, if the PodGroup exists.
    pub spec: Option<&'a GroupSpec>,
    /// When it was created (or first seen), in milliseconds since the epoch.
    pub created_millis: i64,
    /// Its members, the pod included when it is one.
    pub members: Option<&'a BTreeSet<String>>,
}

impl Gangs {
    /// Adds or replaces the PodGroup `full_name`, seen at `now_millis`.
    pub fn upsert_group(&mut self, full_name: &str, spec: GroupSpec, now_millis: i64) {
        self.first_seen
            .entry(full_name.to_string())
            .or_insert(now_millis);
        self.specs.insert(full_name.to_string(), spec);
    }

    /// Removes the PodGroup `full_name`; its pods stay members of a group that is not found.
    pub fn remove_group(&mut self, full_name: &str) {
        self.specs.remove(full_name);
        self.first_seen.remove(full_name);
    }

    /// The groups of the Workload `namespace/name`, by the names their specs are kept under.
    pub fn workload_groups(&self, namespace: &str, name: &str) -> Vec<String> {
        let prefix = format!("{namespace}/{name}/");
        self.specs
            .keys()
            .filter(|k| k.starts_with(&prefix))
            .cloned()
            .collect()
    }

    /// The groups with members whose specs are kept under `spec_name` (a Workload's pod group
    /// and each of its replicas).
    pub fn sharing_spec(&self, spec: &str) -> Vec<String> {
        self.members
            .keys()
            .filter(|k| spec_name(k) == spec)
            .cloned()
            .collect()
    }

    /// Records `pod` (pending or placed, not done) as a member of the group its label names, or
    /// of none.
    pub fn upsert_member(&mut self, pod: &sdk::Pod) {
        let key = pod.key();
        let group = group_name(pod);
        let before = self.member_of.get(&key).map(|(g, _)| g.clone());
        if before != group {
            self.remove_member(&key);
        }
        if let Some(group) = group {
            self.members
                .entry(group.clone())
                .or_default()
                .insert(key.clone());
            self.member_of.insert(key, (group, pod.requests.clone()));
        }
    }

    /// Whether any pod is a member of any group (most clusters have none).
    pub fn has_members(&self) -> bool {
        !self.member_of.is_empty()
    }

    /// Forgets pod `key` (deleted or done).
    pub fn remove_member(&mut self, key: &str) {
        let Some((group, _)) = self.member_of.remove(key) else {
            return;
        };
        if let Some(members) = self.members.get_mut(&group) {
            members.remove(key);
            if members.is_empty() {
                self.members.remove(&group);
            }
        }
    }

    /// The group of `pod`, if its label names one.
    pub fn view(&self, pod: &sdk::Pod) -> Option<GroupView<'_>> {
        let full_name = group_name(pod)?;
        let spec = self.specs.get(spec_name(&full_name));
        let created_millis = spec
            .and_then(|s| s.created_millis)
            .or_else(|| self.first_seen.get(&full_name).copied())
            .unwrap_or_default();
        Some(GroupView {
            spec,
            created_millis,
            members: self.members.get(&full_name),
            full_name,
        })
    }

    /// The requests of member `key`, as recorded.
    pub fn requests(&self, key: &str) -> Option<&sdk::Resources> {
        self.member_of.get(key).map(|(_, r)| r)
    }

    /// The group `key` is a member of.
    pub fn group_of_member(&self, key: &str) -> Option<&str> {
        self.member_of.get(key).map(|(g, _)| g.as_str())
    }

    /// Every group with its spec (if found) and members, by name.
    pub fn groups(&self) -> impl Iterator<Item = (&str, Option<&GroupSpec>, usize)> + '_ {
        let names: BTreeSet<&str> = self
            .specs
            .keys()
            .chain(self.members.keys())
            .map(String::as_str)
            .collect();
        names.into_iter().map(|name| {
            (
                name,
                self.specs.get(spec_name(name)),
                self.members.get(name).map_or(0, BTreeSet::len),
            )
        })
    }

    /// The members of group `full_name`.
    pub fn members(&self, full_name: &str) -> impl Iterator<Item = &str> + '_ {
        self.members
            .get(full_name)
            .into_iter()
            .flatten()
            .map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::podgroup::POD_GROUP_LABEL;

    fn member(name: &str, group: &str) -> sdk::Pod {
        let mut pod = sdk::Pod {
            namespace: "ml".into(),
            name: name.into(),
            ..sdk::Pod::default()
        };
        if !group.is_empty() {
            pod.labels = sdk::Labels::from_pairs([(POD_GROUP_LABEL, group)]);
        }
        pod
    }

    #[test]
    fn members_follow_their_label_and_leave_when_forgotten() {
        let mut gangs = Gangs::default();
        gangs.upsert_group(
            "ml/a",
            GroupSpec {
                min_member: 2,
                ..GroupSpec::default()
            },
            77,
        );
        gangs.upsert_member(&member("p1", "a"));
        gangs.upsert_member(&member("p2", "a"));
        gangs.upsert_member(&member("p3", "b"));
        let view = gangs.view(&member("p1", "a")).unwrap();
        assert_eq!(view.full_name, "ml/a");
        assert_eq!(view.spec.unwrap().min_member, 2);
        assert_eq!(view.created_millis, 77);
        assert_eq!(view.members.unwrap().len(), 2);
        // Relabelled: it moves to the other group.
        gangs.upsert_member(&member("p2", "b"));
        assert_eq!(gangs.members("ml/a").collect::<Vec<_>>(), ["ml/p1"]);
        assert_eq!(gangs.members("ml/b").count(), 2);
        // Label removed, then forgotten: nothing is left behind.
        gangs.upsert_member(&member("p2", ""));
        gangs.remove_member("ml/p3");
        gangs.remove_member("ml/p1");
        assert!(gangs.view(&member("x", "b")).unwrap().members.is_none());
        assert!(gangs.view(&member("x", "")).is_none());
        let groups: Vec<_> = gangs
            .groups()
            .map(|(n, s, m)| (n, s.is_some(), m))
            .collect();
        assert_eq!(groups, [("ml/a", true, 0)]);
    }
}
