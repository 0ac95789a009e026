//! NodeVolumeLimits: a node takes no more volumes of a CSI driver than its CSINode says the
//! driver can attach there (`spec.drivers[].allocatable.count`). Volumes of the in-tree plugins
//! migrated to CSI (GCE PD, AWS EBS, Azure Disk, Cinder, Portworx) count under their driver, as
//! do claims still to be provisioned, under their class's provisioner.

#![warn(missing_docs)]

use std::sync::Arc;

use wasched_sdk::helpers::{FastMap, Interner};

use wasched_sdk::{
    ExistingPodParts, ExistingPodRef, Failure, FilterPlan, FilterPlugin, FilterResults, NodeId,
    NodeInfo, Nodes, Plugin, Pod, PodId, PodParts, PodPlan, PodVolume, Verdict, CSI_PLUGIN,
};

/// The name used in configs and messages.
pub const NAME: &str = "NodeVolumeLimits";
/// kube-scheduler's reason for a node whose driver would attach too many volumes.
pub const REASON: &str = "node(s) exceed max volume count";

/// The in-tree plugins whose volumes CSI migration hands to a CSI driver, with the driver
/// (csi-translation-lib's names; migration is on for each wherever the node has a CSINode).
const MIGRATED: [(&str, &str); 5] = [
    ("kubernetes.io/gce-pd", "pd.csi.storage.gke.io"),
    ("kubernetes.io/aws-ebs", "ebs.csi.aws.com"),
    ("kubernetes.io/azure-disk", "disk.csi.azure.com"),
    ("kubernetes.io/cinder", "cinder.csi.openstack.org"),
    ("kubernetes.io/portworx-volume", "pxd.portworx.com"),
];

fn migrated_driver(plugin: &str) -> Option<&'static str> {
    MIGRATED.iter().find(|(p, _)| *p == plugin).map(|(_, d)| *d)
}

/// Writes the handle csi-translation-lib gives a migrated disk: EBS volume ids lose their
/// `aws://zone/` prefix, GCE disks become a zonal resource path; the others keep theirs.
fn push_migrated_handle(out: &mut String, plugin: &str, handle: &str) {
    match plugin {
        "kubernetes.io/aws-ebs" if handle.starts_with("aws://") => {
            out.push_str(handle.rsplit('/').next().unwrap_or(handle));
        }
        "kubernetes.io/gce-pd" => {
            out.push_str("projects/UNSPECIFIED/zones/UNSPECIFIED/disks/");
            out.push_str(handle);
        }
        _ => out.push_str(handle),
    }
}

/// What `volume` of a pod in `namespace` attaches (kube-scheduler's `filterAttachableVolumes`
/// on a node with a CSINode, the only nodes it limits): a bound claim its volume's CSI driver
/// and handle (a migrated in-tree volume's driver); a claim without an existing volume its
/// class's provisioner, under a handle of its own; an inline migrated disk its driver. None
/// for anything else, and for a claim that does not exist.
///
/// The attachment is written into `unique` as `driver/handle`, which makes two pods' uses of one
/// volume one attachment; the driver it counts under is returned. The caller's buffer is reused,
/// as every placed pod's volumes pass here.
fn attachment<'v>(namespace: &str, volume: &'v PodVolume, unique: &mut String) -> Option<&'v str> {
    unique.clear();
    let source_attachment = |unique: &mut String| {
        if volume.plugin == CSI_PLUGIN {
            if volume.driver.is_empty() || volume.handle.is_empty() {
                return None;
            }
            unique.push_str(&volume.driver);
            unique.push('/');
            unique.push_str(&volume.handle);
            return Some(volume.driver.as_str());
        }
        let driver = migrated_driver(&volume.plugin)?;
        unique.push_str(driver);
        unique.push('/');
        push_migrated_handle(unique, &volume.plugin, &volume.handle);
        Some(driver)
    };
    if volume.claim_name.is_empty() {
        return source_attachment(unique);
    }
    if !volume.claim_found {
        return None;
    }
    if volume.bound {
        return source_attachment(unique);
    }
    if volume.provisioner.is_empty() {
        return None;
    }
    // kube-scheduler names an unprovisioned claim's volume with a random prefix no real handle
    // has; a NUL byte does the same.
    let driver = migrated_driver(&volume.provisioner).unwrap_or(&volume.provisioner);
    unique.push_str(driver);
    unique.push_str("/\0");
    unique.push_str(namespace);
    unique.push('/');
    unique.push_str(&volume.claim_name);
    Some(driver)
}

/// Small ids for attachments and drivers, so a node's counts are a few integers to compare.
#[derive(Default)]
struct Interned {
    attachments: FastMap<String, u32>,
    /// Per attachment id: how many placed pods use it, on any node.
    placed_uses: Vec<u32>,
    /// Attachment ids with placed uses.
    in_use: usize,
    /// Attachment ids given back by [`Interned::release_unused`], to be given out again.
    free: Vec<u32>,
    drivers: FastMap<String, u32>,
    driver_names: Vec<String>,
}

impl Interned {
    /// The ids of the attachment `unique` and of its `driver`, made if new.
    fn ids(&mut self, unique: &str, driver: &str) -> (u32, u32) {
        let id = match self.attachments.get(unique) {
            Some(&id) => id,
            None => {
                let id = self.free.pop().unwrap_or(self.placed_uses.len() as u32);
                if id as usize == self.placed_uses.len() {
                    self.placed_uses.push(0);
                }
                self.attachments.insert(unique.to_string(), id);
                id
            }
        };
        (id, self.driver_id(driver))
    }

    /// Counts a placed pod's use of `attachment` (`added`), or its end.
    fn placed(&mut self, attachment: u32, added: bool) {
        let uses = &mut self.placed_uses[attachment as usize];
        match added {
            true => {
                *uses += 1;
                self.in_use += usize::from(*uses == 1);
            }
            false => {
                *uses = uses.saturating_sub(1);
                self.in_use -= usize::from(*uses == 0);
            }
        }
    }

    /// Pods bring volumes of their own (the claim of a generic ephemeral volume is named after
    /// its pod), so attachments no placed pod uses are let go once they outnumber those in use:
    /// without this a long-running scheduler's table grows with every pod it ever saw. Called
    /// before a pod is prepared, so the ids of the pod being filtered stay as they are.
    fn release_unused(&mut self) {
        if self.attachments.len() <= 2 * self.in_use + 1024 {
            return;
        }
        let (uses, free) = (&self.placed_uses, &mut self.free);
        self.attachments.retain(|_, &mut id| {
            let kept = uses[id as usize] > 0;
            if !kept {
                free.push(id);
            }
            kept
        });
    }

    /// The id of the driver `name`, made if new.
    fn driver_id(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.drivers.get(name) {
            return id;
        }
        let id = self.drivers.len() as u32;
        self.drivers.insert(name.to_string(), id);
        self.driver_names.push(name.to_string());
        id
    }
}

/// A CSINode's `spec.drivers` as (driver id, `allocatable.count`), in order.
type Limits = Vec<(u32, Option<i32>)>;

/// Each node's CSINode limits by node id, as driver ids: nodes with equal CSINodes share one
/// list, so Filter compares integers in a list that stays in the cache rather than driver
/// names behind three pointers per node (`volume-limits` at 5,000 nodes: 17.6 µs a pod as
/// WebAssembly, 8.4 natively, before).
#[derive(Default)]
struct LimitSets {
    /// Per node id: its CSINode's limits; none without a CSINode.
    of_node: Vec<Option<Arc<Limits>>>,
    /// One shared copy of each distinct list, forgotten with the last node holding it.
    lists: Interner<Limits>,
}

impl LimitSets {
    fn set(&mut self, id: NodeId, list: Option<Limits>) {
        let id = id as usize;
        if self.of_node.len() <= id {
            self.of_node.resize(id + 1, None);
        }
        let list = list.map(|list| self.lists.intern(list));
        if let Some(old) = std::mem::replace(&mut self.of_node[id], list) {
            self.lists.release(old);
        }
    }

    /// Node `id`'s CSINode limits; none without a CSINode.
    fn of(&self, id: NodeId) -> Option<&Limits> {
        self.of_node.get(id as usize)?.as_deref()
    }

    /// The limit `limits` give `driver`: none for a driver they do not name, or a count they
    /// leave out (unlimited). The first entry for a driver counts.
    fn limit_in(limits: &Limits, driver: u32) -> Option<i32> {
        limits.iter().find(|&&(d, _)| d == driver)?.1
    }
}

/// The volumes attached on one node: how many pods use each (by attachment id, with its
/// driver), and how many distinct ones per driver. A node holds few, so lists beat maps.
#[derive(Default, Clone)]
struct Attached {
    users: Vec<(u32, u32, u32)>,
    per_driver: Vec<(u32, u32)>,
}

impl Attached {
    fn has(&self, attachment: u32) -> bool {
        self.users.iter().any(|&(a, _, _)| a == attachment)
    }

    fn count(&self, driver: u32) -> u32 {
        self.per_driver
            .iter()
            .find(|&&(d, _)| d == driver)
            .map_or(0, |&(_, n)| n)
    }

    /// Counts one more pod using `attachment` on the node; true when it is new there.
    fn add(&mut self, attachment: u32, driver: u32) -> bool {
        if let Some(user) = self.users.iter_mut().find(|u| u.0 == attachment) {
            user.2 += 1;
            return false;
        }
        self.users.push((attachment, driver, 1));
        match self.per_driver.iter_mut().find(|d| d.0 == driver) {
            Some(d) => d.1 += 1,
            None => self.per_driver.push((driver, 1)),
        }
        true
    }

    /// Counts one pod fewer using `attachment` on the node; true when none is left there.
    fn remove(&mut self, attachment: u32) -> bool {
        let Some(i) = self.users.iter().position(|u| u.0 == attachment) else {
            return false;
        };
        self.users[i].2 -= 1;
        if self.users[i].2 > 0 {
            return false;
        }
        let (_, driver, _) = self.users.swap_remove(i);
        if let Some(d) = self.per_driver.iter_mut().find(|d| d.0 == driver) {
            d.1 -= 1;
        }
        true
    }
}

/// The plugin: each node's attachments (by node id), kept up to date as pods come and go, and
/// the current pod's new ones.
#[derive(Default)]
pub struct NodeVolumeLimits {
    interned: Interned,
    /// Per node id.
    attached: Vec<Attached>,
    /// The ids of the nodes with attachments, by name, for [`FilterPlugin::filter`], which is
    /// given the node alone.
    ids_by_name: FastMap<String, NodeId>,
    /// The current pod's attachments, each once, with their drivers.
    pod_attachments: Vec<(u32, u32)>,
    /// The drivers of the pod's attachments, each once, with how many of them it has.
    pod_drivers: Vec<(u32, u32)>,
    /// Why every node fails the current pod: a claim of it that does not exist.
    missing_claim: Option<String>,
    /// Each node's CSINode limits, by node id.
    limits: LimitSets,
    /// The buffer [`attachment`] writes each attachment's name into.
    unique: String,
}

impl NodeVolumeLimits {
    fn count(&mut self, pod: ExistingPodRef<'_>, node: &NodeInfo, added: bool) {
        let id = pod.node as usize;
        let mut attaches = false;
        for volume in pod.volumes {
            let Some(driver) = attachment(pod.namespace, volume, &mut self.unique) else {
                continue;
            };
            attaches = true;
            if self.attached.len() <= id {
                self.attached.resize(id + 1, Attached::default());
            }
            let (attachment, driver) = self.interned.ids(&self.unique, driver);
            let counted = if added {
                self.attached[id].add(attachment, driver)
            } else {
                self.attached[id].remove(attachment)
            };
            if counted {
                self.interned.placed(attachment, added);
            }
        }
        // Only nodes with attachments are named here: most pods attach nothing, and a placement
        // then costs no node name copied and hashed.
        if !attaches {
            return;
        }
        if self.attached[id].users.is_empty() {
            self.ids_by_name.remove(node.name.as_str());
        } else if self.ids_by_name.get(node.name.as_str()) != Some(&pod.node) {
            self.ids_by_name.insert(node.name.clone(), pod.node);
        }
    }

    /// Whether the node `id` can attach the pod's new volumes: [`Self::fits`] from the node's
    /// limits kept by id.
    fn fits_id(&self, id: NodeId) -> bool {
        let Some(limits) = self.limits.of(id) else {
            return true;
        };
        // Most nodes hold none of the pods' volumes: all of the pod's are then new there.
        let attached = self
            .attached
            .get(id as usize)
            .filter(|a| !a.users.is_empty());
        for &(driver, count) in &self.pod_drivers {
            let Some(limit) = LimitSets::limit_in(limits, driver) else {
                continue;
            };
            let fits = match attached {
                None => i64::from(count) <= i64::from(limit),
                Some(_) => self.within(attached, driver, limit),
            };
            if !fits {
                return false;
            }
        }
        true
    }

    /// Whether a node with `attached` volumes takes the pod's new ones of `driver` under `limit`.
    fn within(&self, attached: Option<&Attached>, driver: u32, limit: i32) -> bool {
        // A volume a pod on the node already uses is attached already.
        let new = self
            .pod_attachments
            .iter()
            .filter(|&&(a, d)| d == driver && !attached.is_some_and(|n| n.has(a)))
            .count() as i64;
        let current = attached.map_or(0, |n| n.count(driver));
        i64::from(current) + new <= i64::from(limit)
    }

    /// Whether `node` (its id `id`, if it has pods) can attach the pod's new volumes.
    fn fits(&self, node: &NodeInfo, id: Option<NodeId>) -> bool {
        // A node without a CSINode, or whose drivers state no count, has no limits.
        let Some(csi) = &node.csi_node else {
            return true;
        };
        let attached = id.and_then(|id| self.attached.get(id as usize));
        for &(driver, _) in &self.pod_drivers {
            let name = &self.interned.driver_names[driver as usize];
            let limit = csi
                .drivers
                .iter()
                .find(|d| d.name == *name)
                .and_then(|d| d.count);
            let Some(limit) = limit else { continue };
            if !self.within(attached, driver, limit) {
                return false;
            }
        }
        true
    }
}

impl Plugin for NodeVolumeLimits {
    const NAME: &'static str = NAME;
    const READS_POD: PodParts = PodParts::IDENTITY.union(PodParts::VOLUMES);
    const READS_EXISTING_PODS: ExistingPodParts =
        ExistingPodParts::LABELS.union(ExistingPodParts::VOLUMES);
    const READS_CSI_NODES: bool = true;
    const IDLE_WITHOUT: PodParts = PodParts::VOLUMES;

    fn new(_config: &str) -> Result<Self, String> {
        Ok(NodeVolumeLimits::default())
    }

    fn prepare(&mut self, pod: &Pod, _nodes: &Nodes) -> PodPlan {
        self.pod_attachments.clear();
        self.pod_drivers.clear();
        self.missing_claim = None;
        self.interned.release_unused();
        for volume in &pod.volumes {
            if !volume.claim_name.is_empty() && !volume.claim_found {
                // kube-scheduler's Filter looks the claim up on every node and fails them all.
                self.missing_claim = Some(format!(
                    "looking up PVC {}/{}: persistentvolumeclaim \"{}\" not found",
                    pod.namespace, volume.claim_name, volume.claim_name
                ));
                return PodPlan::default();
            }
            if let Some(driver) = attachment(&pod.namespace, volume, &mut self.unique) {
                let (attachment, driver) = self.interned.ids(&self.unique, driver);
                if self.pod_attachments.contains(&(attachment, driver)) {
                    continue;
                }
                self.pod_attachments.push((attachment, driver));
                match self.pod_drivers.iter_mut().find(|(d, _)| *d == driver) {
                    Some((_, count)) => *count += 1,
                    None => self.pod_drivers.push((driver, 1)),
                }
            }
        }
        PodPlan {
            filter: if self.pod_attachments.is_empty() {
                FilterPlan::Skip
            } else {
                FilterPlan::Run
            },
            score: false,
        }
    }

    fn node_upserted(&mut self, id: NodeId, node: &NodeInfo) {
        let list = node.csi_node.as_ref().map(|csi| {
            let interned = &mut self.interned;
            let list = csi.drivers.iter();
            list.map(|d| (interned.driver_id(&d.name), d.count))
                .collect()
        });
        self.limits.set(id, list);
    }

    fn pod_added(&mut self, _id: PodId, pod: ExistingPodRef<'_>, node: &NodeInfo) {
        self.count(pod, node, true);
    }

    fn pod_removed(&mut self, _id: PodId, pod: ExistingPodRef<'_>, node: &NodeInfo) {
        self.count(pod, node, false);
    }
}

impl FilterPlugin for NodeVolumeLimits {
    fn filter(&self, _pod: &Pod, node: &NodeInfo) -> Verdict {
        if let Some(missing) = &self.missing_claim {
            return Err(Failure::unresolvable(missing.clone()));
        }
        if self.fits(node, self.ids_by_name.get(&node.name).copied()) {
            Ok(())
        } else {
            Err(Failure::unschedulable(REASON))
        }
    }

    fn filter_batch(&mut self, pod: &Pod, nodes: &Nodes, ids: &[NodeId], out: &mut FilterResults) {
        if self.missing_claim.is_some() {
            for &id in ids {
                out.push(match nodes.get(id) {
                    Some(node) => self.filter(pod, node),
                    None => Err(Nodes::unknown(id)),
                });
            }
            return;
        }
        out.push_each(
            nodes,
            ids,
            |id| self.fits_id(id),
            || Failure::unschedulable(REASON),
        );
    }
}

wasched_sdk::export_plugin!(NodeVolumeLimits: filter);

/// kube-scheduler's `TestCSILimits` (`csi_test.go`) as a table, its rows reduced to what they
/// check: counts at, below and over a driver's limit, volumes shared with a pod on the node,
/// drivers without a limit, nodes without a CSINode, claims still to be provisioned (counted
/// under their class's provisioner), in-tree volumes migrated to CSI, and a missing claim. Run
/// natively by this crate's tests and through the WebAssembly build by the host's
/// (`tests/e2e/plugins.rs`), which insists both builds agree.
#[cfg(not(target_arch = "wasm32"))]
pub fn cases() -> Vec<wasched_sdk::testing::Case> {
    use wasched_sdk::testing::{fail, node, pass, pod, unresolvable, Case};
    use wasched_sdk::{Code, CsiDriverLimit, CsiNode};

    const EBS: &str = "ebs.csi.aws.com";
    const GCE: &str = "pd.csi.storage.gke.io";
    let limited = |name: &str, limits: &[(&str, Option<i32>)]| NodeInfo {
        csi_node: Some(CsiNode {
            drivers: limits
                .iter()
                .map(|(driver, count)| CsiDriverLimit {
                    name: driver.to_string(),
                    count: *count,
                })
                .collect(),
        }),
        ..node(name)
    };
    let csi_claim = |claim: &str, driver: &str, handle: &str| PodVolume {
        name: claim.into(),
        claim_name: claim.into(),
        claim_found: true,
        bound: true,
        plugin: CSI_PLUGIN.into(),
        driver: driver.into(),
        handle: handle.into(),
        ..PodVolume::default()
    };
    let unbound = |claim: &str, provisioner: &str| PodVolume {
        name: claim.into(),
        claim_name: claim.into(),
        claim_found: true,
        provisioner: provisioner.into(),
        ..PodVolume::default()
    };
    let inline = |plugin: &str, handle: &str| PodVolume {
        name: "inline".into(),
        plugin: plugin.into(),
        handle: handle.into(),
        ..PodVolume::default()
    };
    let mounting = |name: &str, volumes: Vec<PodVolume>| Pod {
        volumes,
        ..pod(name)
    };
    let two_ebs = || {
        mounting(
            "running",
            vec![csi_claim("a", EBS, "vol-a"), csi_claim("b", EBS, "vol-b")],
        )
    };
    let new_two = || {
        mounting(
            "p",
            vec![csi_claim("c", EBS, "vol-c"), csi_claim("d", EBS, "vol-d")],
        )
    };
    let exceeded = || fail(Code::Unschedulable, &[REASON]);
    vec![
        Case::filter(
            "fits at the limit (2 attached + 2 new <= 4)",
            new_two(),
            vec![limited("n", &[(EBS, Some(4))])],
            vec![pass()],
        )
        .with_existing(vec![(0, two_ebs())]),
        Case::filter(
            "exceeds the limit (2 attached + 2 new > 3); another node has room",
            new_two(),
            vec![
                limited("full", &[(EBS, Some(3))]),
                limited("empty", &[(EBS, Some(3))]),
            ],
            vec![exceeded(), pass()],
        )
        .with_existing(vec![(0, two_ebs())]),
        Case::filter(
            "a volume a pod on the node already uses is not attached again",
            mounting(
                "p",
                vec![csi_claim("a", EBS, "vol-a"), csi_claim("c", EBS, "vol-c")],
            ),
            vec![limited("n", &[(EBS, Some(3))])],
            vec![pass()],
        )
        .with_existing(vec![(0, two_ebs())]),
        Case::filter(
            "two pods sharing a volume attach it once",
            mounting("p", vec![csi_claim("c", EBS, "vol-c")]),
            vec![limited("n", &[(EBS, Some(3))])],
            vec![pass()],
        )
        .with_existing(vec![(0, two_ebs()), (0, two_ebs())]),
        Case::filter(
            "another driver's volumes do not count against this one",
            mounting("p", vec![csi_claim("c", GCE, "disk-c")]),
            vec![limited("n", &[(EBS, Some(2)), (GCE, Some(1))])],
            vec![pass()],
        )
        .with_existing(vec![(0, two_ebs())]),
        Case::filter(
            "a driver without a count, and a node without a CSINode, have no limit",
            new_two(),
            vec![limited("uncounted", &[(EBS, None)]), node("no-csinode")],
            vec![pass(), pass()],
        )
        .with_existing(vec![(0, two_ebs()), (1, two_ebs())]),
        Case::filter(
            "a claim to provision counts under its class's provisioner",
            mounting("p", vec![unbound("new", EBS)]),
            vec![limited("n", &[(EBS, Some(2))])],
            vec![exceeded()],
        )
        .with_existing(vec![(0, two_ebs())]),
        Case::filter(
            "an in-tree provisioner counts under the CSI driver it migrated to",
            mounting("p", vec![unbound("new", "kubernetes.io/aws-ebs")]),
            vec![limited("n", &[(EBS, Some(2))])],
            vec![exceeded()],
        )
        .with_existing(vec![(0, two_ebs())]),
        Case::filter(
            "a claim without a class is not counted",
            mounting("p", vec![unbound("new", "")]),
            vec![limited("n", &[(EBS, Some(2))])],
            vec![pass()],
        )
        .with_existing(vec![(0, two_ebs())])
        .with_plan(FilterPlan::Skip),
        Case::filter(
            "an inline EBS disk is the CSI volume of the same id (aws:// prefix dropped)",
            mounting(
                "p",
                vec![inline("kubernetes.io/aws-ebs", "aws://us-east-1a/vol-a")],
            ),
            vec![limited("n", &[(EBS, Some(2))])],
            vec![pass()],
        )
        .with_existing(vec![(0, two_ebs())]),
        Case::filter(
            "an inline GCE disk counts under the GCE PD driver",
            mounting("p", vec![inline("kubernetes.io/gce-pd", "disk-1")]),
            vec![limited("n", &[(GCE, Some(1))])],
            vec![exceeded()],
        )
        .with_existing(vec![(
            0,
            mounting("gce", vec![inline("kubernetes.io/gce-pd", "disk-0")]),
        )]),
        Case::filter(
            "a volume of a plugin CSI does not take over (iSCSI) is not counted",
            mounting(
                "p",
                vec![inline("kubernetes.io/iscsi", "iqn.2016-12.server:t1")],
            ),
            vec![limited("n", &[("iscsi", Some(0))])],
            vec![pass()],
        )
        .with_plan(FilterPlan::Skip),
        Case::filter(
            "a claim that does not exist fails every node",
            mounting(
                "p",
                vec![PodVolume {
                    name: "data".into(),
                    claim_name: "data".into(),
                    ..PodVolume::default()
                }],
            ),
            vec![limited("n", &[(EBS, Some(4))]), node("no-csinode")],
            vec![
                unresolvable(
                    "looking up PVC default/data: persistentvolumeclaim \"data\" not found",
                ),
                unresolvable(
                    "looking up PVC default/data: persistentvolumeclaim \"data\" not found",
                ),
            ],
        ),
        Case::filter(
            "a pod without volumes is not checked",
            pod("p"),
            vec![limited("n", &[(EBS, Some(0))])],
            vec![pass()],
        )
        .with_plan(FilterPlan::Skip),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasched_sdk::testing::{node, pod};
    use wasched_sdk::{CsiDriverLimit, CsiNode, Driver, ExistingPod};

    #[test]
    fn answers_as_kube_scheduler() {
        wasched_sdk::testing::check::<super::NodeVolumeLimits>(&super::cases());
    }

    const EBS: &str = "ebs.csi.aws.com";

    fn with_limit(name: &str, count: Option<i32>) -> NodeInfo {
        NodeInfo {
            csi_node: Some(CsiNode {
                drivers: vec![
                    CsiDriverLimit {
                        name: "other.csi.example.com".into(),
                        count: Some(0),
                    },
                    CsiDriverLimit {
                        name: EBS.into(),
                        count,
                    },
                ],
            }),
            ..node(name)
        }
    }

    /// The verdicts of node ids 0..count for a pod with `volumes` EBS volumes.
    fn fitting(driver: &mut Driver<NodeVolumeLimits>, volumes: usize, count: u32) -> Vec<bool> {
        let pod = Pod {
            volumes: (0..volumes)
                .map(|i| PodVolume {
                    name: format!("v{i}"),
                    claim_name: format!("c{i}"),
                    claim_found: true,
                    bound: true,
                    plugin: CSI_PLUGIN.into(),
                    driver: EBS.into(),
                    handle: format!("vol-{i}"),
                    ..PodVolume::default()
                })
                .collect(),
            ..pod("p")
        };
        driver.set_pod(pod);
        let ids: Vec<NodeId> = (0..count).collect();
        let mut out = FilterResults::default();
        driver.filter(&ids, &mut out);
        (0..ids.len()).map(|k| out.failure(k).is_none()).collect()
    }

    #[test]
    fn a_node_is_held_to_its_csinodes_latest_limits() {
        let mut driver = Driver::<NodeVolumeLimits>::new("{}").unwrap();
        driver.upsert_nodes([
            (0, with_limit("a", Some(1))),
            (1, with_limit("b", Some(1))),
            (2, node("no-csinode")),
        ]);
        assert_eq!(fitting(&mut driver, 2, 3), [false, false, true]);
        driver.upsert_nodes([(0, with_limit("a", Some(2))), (2, with_limit("c", Some(1)))]);
        assert_eq!(fitting(&mut driver, 2, 3), [true, false, false]);
        driver.upsert_nodes([(1, with_limit("b", None)), (2, node("c"))]);
        assert_eq!(
            fitting(&mut driver, 2, 3),
            [true, true, true],
            "unlimited, then no CSINode"
        );
    }

    #[test]
    fn volumes_of_pods_long_gone_are_let_go_and_shared_ones_still_count() {
        let mut driver = Driver::<NodeVolumeLimits>::new("{}").unwrap();
        driver.upsert_nodes([(0, with_limit("a", Some(2))), (1, with_limit("b", Some(2)))]);
        let using = |handles: &[String]| Pod {
            volumes: handles
                .iter()
                .map(|handle| PodVolume {
                    name: handle.clone(),
                    plugin: "kubernetes.io/aws-ebs".into(),
                    handle: handle.clone(),
                    ..PodVolume::default()
                })
                .collect(),
            ..pod("p")
        };
        // Node a holds "shared" for good; pods with volumes of their own come and go on b.
        driver.upsert_pods([(0, ExistingPod::of(&using(&["shared".into()]), 0))]);
        for i in 1..20_000u32 {
            let own = using(&[format!("vol-{i}")]);
            driver.set_pod(own.clone());
            driver.upsert_pods([(i, ExistingPod::of(&own, 1))]);
            driver.remove_pods(&[i]);
        }
        let interned = driver.plugin().interned.attachments.len();
        assert!(
            interned <= 2 + 1024 + 1,
            "{interned} attachments kept for 1 in use"
        );
        let fits = |driver: &mut Driver<NodeVolumeLimits>, handles: &[String]| {
            driver.set_pod(using(handles));
            let mut out = FilterResults::default();
            driver.filter(&[0, 1], &mut out);
            (0..2).map(|k| out.failure(k).is_none()).collect::<Vec<_>>()
        };
        let [shared, x, y] = ["shared", "x", "y"].map(String::from);
        assert_eq!(fits(&mut driver, &[x.clone(), y.clone()]), [false, true]);
        assert_eq!(
            fits(&mut driver, &[shared, x]),
            [true, true],
            "shared is attached to a"
        );
    }

    #[test]
    fn the_one_node_filter_sees_a_nodes_attachments_through_pods_that_attach_nothing() {
        let mut driver = Driver::<NodeVolumeLimits>::new("{}").unwrap();
        let node_a = with_limit("a", Some(1));
        driver.upsert_nodes([(0, node_a.clone())]);
        let holding = |handle: &str| Pod {
            volumes: vec![PodVolume {
                name: "v".into(),
                plugin: CSI_PLUGIN.into(),
                driver: EBS.into(),
                handle: handle.into(),
                ..PodVolume::default()
            }],
            ..pod("holder")
        };
        let one_node = |driver: &mut Driver<NodeVolumeLimits>| {
            driver.set_pod(holding("vol-new"));
            driver.plugin().filter(driver.pod(), &node_a).is_ok()
        };
        driver.upsert_pods([(0, ExistingPod::of(&holding("vol-held"), 0))]);
        driver.upsert_pods([(1, ExistingPod::of(&pod("plain"), 0))]);
        driver.remove_pods(&[1]);
        assert!(!one_node(&mut driver), "vol-held fills a's one slot");
        driver.remove_pods(&[0]);
        assert!(one_node(&mut driver));
        assert!(driver.plugin().ids_by_name.is_empty());
    }

    #[test]
    fn limits_that_keep_changing_do_not_grow_the_table_without_bound() {
        let mut driver = Driver::<NodeVolumeLimits>::new("{}").unwrap();
        for round in 0..500 {
            driver
                .upsert_nodes((0..4).map(|id| (id, with_limit("n", Some(round * 4 + id as i32)))));
        }
        let lists = driver.plugin().limits.lists.len();
        assert!(lists <= 2 * 4 + 64 + 1, "{lists} lists for 4 nodes");
        // The last round's limits still hold after every list let go: 1996..=1999.
        assert_eq!(fitting(&mut driver, 1997, 4), [false, true, true, true]);
    }
}
