//! The batch filter finds each node's host through the mirror's label index and remembers what
//! each hostname value stands for. Checked against the one-node filter, which reads the node's
//! labels, as volumes are pinned to hosts already looked up and as the mirror numbers its labels
//! again.

use wasched_sdk::{Driver, Exported, FilterResults, NodeId, NodeInfo};

use crate::cases::{claiming, class, host, local, offered, volume, waiting};
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
