//! The batch filter finds each node's host through the mirror's label index and remembers what
//! each hostname value stands for, and it keeps its answers from one pod to the next. Checked
//! against the one-node filter, which reads the node's labels and keeps nothing, as volumes are
//! pinned to hosts already looked up, as the mirror numbers its labels again, and as nodes,
//! volumes and pods' claims change at random.

use wasched_sdk::{
    ClaimInfo, ClaimRef, Driver, Exported, FilterResults, LabelSelector, NodeId, NodeInfo,
    StorageClassInfo,
};

use crate::cases::{claiming, class, host, local, offered, term, volume, waiting};
use crate::VolumeBinding;

const LOCAL: &str = "kubernetes.io/no-provisioner";

/// A mirror with `nodes` (ids 0, 1, ...) and a pod whose one claim waits for a local volume.
fn driver(nodes: Vec<NodeInfo>) -> Driver<VolumeBinding> {
    let mut driver = Driver::<VolumeBinding>::new("{}").expect("no configuration");
    driver.upsert_nodes((0u32..).zip(nodes));
    driver
}

fn pin(driver: &mut Driver<VolumeBinding>, name: &str, on: &str) {
    let local_class = class("local", "WaitForFirstConsumer", LOCAL);
    driver.upsert_volumes(offered(&local_class, vec![local(name, 20, on)]));
}

/// Whether each of `ids` passes, by the batch filter; asserts the one-node filter agrees.
fn passing(driver: &mut Driver<VolumeBinding>, ids: &[NodeId]) -> Vec<bool> {
    let pod = claiming(vec![Some(waiting(
        10,
        class("local", "WaitForFirstConsumer", LOCAL),
    ))]);
    driver.set_pod(pod.clone());
    let mut out = FilterResults::default();
    driver.filter(ids, &mut out);
    let batched: Vec<bool> = out.verdicts.iter().map(|&v| v == 0).collect();
    let one_by_one: Vec<bool> = ids
        .iter()
        .map(|&id| {
            let node = driver.nodes().get(id).expect("node in the mirror");
            driver.plugin().filter_one(&pod, node).is_ok()
        })
        .collect();
    assert_eq!(batched, one_by_one, "batch and one-node filters disagree");
    batched
}

#[test]
fn a_host_given_a_volume_after_it_was_looked_up_passes() {
    let mut driver = driver(vec![host("a", "z1"), host("b", "z1")]);
    pin(&mut driver, "pv-a", "a");
    assert_eq!(passing(&mut driver, &[0, 1]), [true, false]);
    pin(&mut driver, "pv-b", "b");
    assert_eq!(passing(&mut driver, &[0, 1]), [true, true]);
}

#[test]
fn hosts_stay_right_when_the_mirror_numbers_its_labels_again() {
    let mut driver = driver(vec![host("a", "z1"), host("x", "z1")]);
    pin(&mut driver, "pv-a", "a");
    pin(&mut driver, "pv-b", "b");
    // Node 1 takes a new hostname again and again; each is looked up while it has no volume,
    // until the mirror drops the values gone and numbers the rest again.
    let mut relabels = 0;
    while driver.nodes().label_ids_epoch() == 0 {
        relabels += 1;
        assert!(relabels < 10_000, "the mirror never compacted its labels");
        driver.upsert_nodes([(1, host(&format!("x{relabels}"), "z1"))]);
        assert_eq!(passing(&mut driver, &[0, 1]), [true, false]);
    }
    // Every value id the new numbering gives out was looked up under the old one.
    for more in 0..relabels {
        driver.upsert_nodes([(1, host(&format!("y{more}"), "z1"))]);
        assert_eq!(passing(&mut driver, &[0, 1]), [true, false]);
        if more % 97 == 0 {
            driver.upsert_nodes([(1, host("b", "z1"))]);
            assert_eq!(passing(&mut driver, &[0, 1]), [true, true], "after {more}");
        }
    }
}

#[test]
fn a_hosts_volumes_come_and_go_one_by_one_and_an_emptied_class_is_dropped() {
    let mut driver = driver(vec![host("a", "z1"), host("b", "z1")]);
    pin(&mut driver, "pv-1", "a");
    pin(&mut driver, "pv-2", "a");
    // Sent again, as an update is: still two volumes on one host.
    pin(&mut driver, "pv-2", "a");
    assert_eq!(passing(&mut driver, &[0, 1]), [true, false]);
    driver.remove_volumes(["pv-1"]);
    assert_eq!(passing(&mut driver, &[0, 1]), [true, false]);
    driver.remove_volumes(["pv-2"]);
    assert_eq!(passing(&mut driver, &[0, 1]), [false, false]);
    assert!(
        driver.plugin().volumes.classes.is_empty(),
        "a class with no volume left is dropped"
    );
    pin(&mut driver, "pv-3", "b");
    assert_eq!(passing(&mut driver, &[0, 1]), [false, true]);
}

#[test]
fn hosts_long_gone_are_let_go_and_the_rest_still_found() {
    let mut driver = driver(vec![host("a", "z1"), host("b", "z1")]);
    // Local volumes of nodes that come and go, then node a's: it is numbered after them.
    let mut churned = 0;
    let mut churn = |driver: &mut Driver<VolumeBinding>, count: usize| {
        for _ in 0..count {
            let name = format!("pv-gone-{churned}");
            pin(driver, &name, &format!("gone-{churned}"));
            driver.remove_volumes([name.as_str()]);
            churned += 1;
        }
    };
    churn(&mut driver, 500);
    pin(&mut driver, "pv-a", "a");
    // The batch filter looks node a's host up under its first number.
    assert_eq!(passing(&mut driver, &[0, 1]), [true, false]);
    let epoch = driver.plugin().volumes.hosts_epoch;
    churn(&mut driver, 3_000);
    let volumes = &driver.plugin().volumes;
    assert!(volumes.hosts_epoch > epoch, "the hosts were numbered again");
    assert!(
        volumes.hosts.len() <= 2 + 1024 + 1,
        "{} hosts kept for 1 with a volume",
        volumes.hosts.len()
    );
    assert_eq!(passing(&mut driver, &[0, 1]), [true, false]);
    pin(&mut driver, "pv-b", "b");
    assert_eq!(passing(&mut driver, &[0, 1]), [true, true]);
}

#[test]
fn a_volume_found_for_one_node_is_still_free_for_the_next() {
    // One volume any node can use: the batch filter finds it for every node it examines, not
    // only for the first (what a node found is for that node alone).
    let mut driver = driver(vec![host("a", "z1"), host("b", "z1"), host("c", "z2")]);
    let local_class = class("local", "WaitForFirstConsumer", LOCAL);
    driver.upsert_volumes(offered(&local_class, vec![volume("pv-any", 20, None)]));
    assert_eq!(passing(&mut driver, &[0, 1, 2]), [true, true, true]);
}

/// A long-lived instance, its answers held from pod to pod, against the one-node filter, over
/// random steps: nodes relabelled, local volumes pinned, taken and released, volumes usable from
/// a zone coming and going, and pods whose claims search alike or not (sizes, classes, selected
/// nodes, selectors, volumes pre-bound to them).
#[test]
fn held_answers_filter_as_a_fresh_look_at_each_node_would() {
    for seed in [
        0x2545_f491_4f6c_dd1d_u64,
        0x9e37_79b9_7f4a_7c15,
        0xd1b5_4a32_d192_ed03,
    ] {
        filter_at_random_as_a_fresh_look_would(seed);
    }
}

/// The numbers the random steps are drawn from (a linear congruential generator).
struct Draws(u64);

impl Draws {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

const ZONES: [&str; 3] = ["z0", "z1", "z2"];

/// Twelve nodes, the volumes given to them so far, and a plugin instance that has seen it all.
struct RandomCluster {
    draws: Draws,
    driver: Driver<VolumeBinding>,
    nodes: Vec<NodeInfo>,
    /// How many volumes were made (`pv-1` ... `pv-N`), whatever became of them.
    volumes: u64,
    /// The volumes usable from a zone (pinned to no host) now in the mirror.
    zonal: Vec<String>,
}

impl RandomCluster {
    fn new(seed: u64) -> Self {
        let nodes: Vec<NodeInfo> = (0..12)
            .map(|i| host(&format!("h{i}"), ZONES[i % 3]))
            .collect();
        RandomCluster {
            draws: Draws(seed),
            driver: driver(nodes.clone()),
            nodes,
            volumes: 0,
            zonal: Vec::new(),
        }
    }

    fn below(&mut self, n: u64) -> u64 {
        self.draws.below(n)
    }

    /// One change of the nodes or volumes.
    fn change(&mut self, local_class: &StorageClassInfo) {
        match self.below(6) {
            // A node relabelled: another zone, or another hostname (one of the hosts).
            0 => {
                let i = self.below(self.nodes.len() as u64) as usize;
                let name = format!("h{}", self.below(14));
                self.nodes[i] = host(&name, ZONES[self.below(3) as usize]);
                self.driver
                    .upsert_nodes([(i as NodeId, self.nodes[i].clone())]);
            }
            // A local volume pinned to a host, maybe one no node has.
            1 | 2 => {
                self.volumes += 1;
                let mut pv = local(
                    &format!("pv-{}", self.volumes),
                    10 * (1 + self.below(3) as i64),
                    &format!("h{}", self.below(14)),
                );
                if self.below(2) == 0 {
                    pv.labels = [("tier".to_string(), "gold".to_string())]
                        .into_iter()
                        .collect();
                }
                self.driver.upsert_volumes(offered(local_class, vec![pv]));
            }
            // A volume taken by some claim (it leaves the host's offered volumes), or one
            // pre-bound to the claim `pvc-0` of the pods.
            3 => {
                let name = format!("pv-{}", 1 + self.below(self.volumes.max(1)));
                if let Some(mut pv) = self.driver.nodes().volume(&name).cloned() {
                    let claim = if self.below(3) == 0 { "pvc-0" } else { "other" };
                    pv.claim_ref = Some(ClaimRef {
                        namespace: "default".into(),
                        name: claim.into(),
                        uid: String::new(),
                    });
                    self.driver.upsert_volumes([pv]);
                }
            }
            // A volume removed.
            4 => {
                let name = format!("pv-{}", 1 + self.below(self.volumes.max(1)));
                self.driver.remove_volumes([name.as_str()]);
            }
            // A volume usable from a zone comes, or one goes: a few at a time, so that a zone's
            // nodes pass or fail by them.
            _ => match self.zonal.len() {
                0 | 1 if self.below(2) == 0 => {
                    self.volumes += 1;
                    let name = format!("pv-{}", self.volumes);
                    let zone = ZONES[self.below(3) as usize];
                    let pv = volume(
                        &name,
                        10 * (1 + self.below(3) as i64),
                        Some(term("topology.kubernetes.io/zone", &[zone])),
                    );
                    self.driver.upsert_volumes(offered(local_class, vec![pv]));
                    self.zonal.push(name);
                }
                0 => {}
                _ => {
                    let i = self.below(self.zonal.len() as u64) as usize;
                    let name = self.zonal.swap_remove(i);
                    self.driver.remove_volumes([name.as_str()]);
                }
            },
        }
    }

    /// One or two waiting claims of a size, one of `classes`, maybe a selected node and a
    /// selector.
    fn claims(&mut self, classes: &[StorageClassInfo]) -> Vec<Option<ClaimInfo>> {
        (0..1 + self.below(2))
            .map(|_| {
                let size = 10 * (1 + self.below(2) as i64);
                let mut claim = waiting(
                    size,
                    classes[self.below(classes.len() as u64) as usize].clone(),
                );
                if self.below(8) == 0 {
                    claim.selected_node = Some(format!("h{}", self.below(14)));
                }
                if self.below(4) == 0 {
                    claim.selector = Some(LabelSelector {
                        match_labels: [("tier".to_string(), "gold".to_string())]
                            .into_iter()
                            .collect(),
                        match_expressions: Vec::new(),
                    });
                }
                Some(claim)
            })
            .collect()
    }
}

fn filter_at_random_as_a_fresh_look_would(seed: u64) {
    let local_class = class("local", "WaitForFirstConsumer", LOCAL);
    // The provisioning class as two pods may see it, before and after it was made again with
    // other topologies.
    let fast_class = |zones: &[&str]| StorageClassInfo {
        allowed_topologies: vec![term("topology.kubernetes.io/zone", zones)],
        ..class("fast", "WaitForFirstConsumer", "csi.example.com")
    };
    let classes = [
        local_class.clone(),
        fast_class(&["z0", "z1"]),
        fast_class(&["z1", "z2"]),
    ];
    let mut cluster = RandomCluster::new(seed);
    let ids: Vec<NodeId> = (0..cluster.nodes.len() as NodeId).collect();
    let steps = 1_500;
    for step in 0..steps {
        for _ in 0..cluster.below(3) {
            cluster.change(&local_class);
        }
        let pod = claiming(cluster.claims(&classes));
        cluster.driver.set_pod(pod.clone());
        let mut out = FilterResults::default();
        cluster.driver.filter(&ids, &mut out);
        for (k, node) in cluster.nodes.iter().enumerate() {
            let fresh = cluster.driver.plugin().filter_one(&pod, node).err();
            assert_eq!(out.failure(k), fresh.as_ref(), "step {step}, node {k}");
        }
    }
    let held = &cluster.driver.plugin().held;
    assert!(
        held.used > 1_000,
        "answers were held for {} of {} node checks",
        held.used,
        steps * cluster.nodes.len()
    );
}
