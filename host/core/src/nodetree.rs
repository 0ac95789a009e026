//! The zone-aware node tree: nodes grouped by zone and listed zone by zone, round-robin, so that a
//! cycle that only looks at part of the cluster still sees every zone.
//!
//! Every listing starts from fresh cursors. kube-scheduler 1.18 kept its cursors between listings and,
//! with unbalanced zones, skipped one node while listing another twice (kubernetes issue 91601).

use wasched_sdk::Labels;

const ZONE: &str = "topology.kubernetes.io/zone";
const REGION: &str = "topology.kubernetes.io/region";
const BETA_ZONE: &str = "failure-domain.beta.kubernetes.io/zone";
const BETA_REGION: &str = "failure-domain.beta.kubernetes.io/region";

/// The zone a node belongs to: region and zone labels (GA first, then beta), or "" for none.
pub fn zone_key(labels: &Labels) -> String {
    let region = labels
        .get(REGION)
        .or_else(|| labels.get(BETA_REGION))
        .unwrap_or("");
    let zone = labels
        .get(ZONE)
        .or_else(|| labels.get(BETA_ZONE))
        .unwrap_or("");
    if region.is_empty() && zone.is_empty() {
        String::new()
    } else {
        format!("{region}:\x00:{zone}")
    }
}

/// Node ids grouped by zone, zones and nodes kept in the order they arrived.
#[derive(Debug, Default, Clone)]
pub struct NodeTree {
    zones: Vec<(String, Vec<u32>)>,
    len: usize,
}

impl NodeTree {
    /// Number of nodes in the tree.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the tree holds no node.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of zones with at least one node.
    pub fn zone_count(&self) -> usize {
        self.zones.len()
    }

    /// Adds a node to its zone; adding a node already in that zone does nothing.
    pub fn add(&mut self, id: u32, zone: &str) {
        match self.zones.iter_mut().find(|(z, _)| z == zone) {
            Some((_, ids)) => {
                if ids.contains(&id) {
                    return;
                }
                ids.push(id);
            }
            None => self.zones.push((zone.to_string(), vec![id])),
        }
        self.len += 1;
    }

    /// Removes a node from its zone; a zone left empty disappears. Returns false if it was absent.
    pub fn remove(&mut self, id: u32, zone: &str) -> bool {
        let Some(zone_index) = self.zones.iter().position(|(z, _)| z == zone) else {
            return false;
        };
        let ids = &mut self.zones[zone_index].1;
        let Some(position) = ids.iter().position(|&n| n == id) else {
            return false;
        };
        ids.remove(position);
        if ids.is_empty() {
            self.zones.remove(zone_index);
        }
        self.len -= 1;
        true
    }

    /// Moves a node whose zone changed.
    pub fn update(&mut self, id: u32, old_zone: &str, new_zone: &str) {
        if old_zone != new_zone {
            self.remove(id, old_zone);
            self.add(id, new_zone);
        }
    }

    /// Every node exactly once: the first node of each zone, then the second of each, and so on.
    pub fn list(&self) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.len);
        let deepest = self
            .zones
            .iter()
            .map(|(_, ids)| ids.len())
            .max()
            .unwrap_or(0);
        for index in 0..deepest {
            for (_, ids) in &self.zones {
                if let Some(&id) = ids.get(index) {
                    out.push(id);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn labels(zone: &str) -> Labels {
        [(ZONE, zone), (REGION, "r")].into_iter().collect()
    }

    #[test]
    fn zone_key_prefers_ga_labels_and_falls_back_to_beta() {
        assert_eq!(zone_key(&labels("a")), "r:\x00:a");
        let beta: Labels = [(BETA_ZONE, "b"), (BETA_REGION, "q")].into_iter().collect();
        assert_eq!(zone_key(&beta), "q:\x00:b");
        assert_eq!(zone_key(&Labels::default()), "");
    }

    #[test]
    fn kube_118_unbalanced_zones_list_every_node_once() {
        // Three nodes in one zone, then a fourth joins in another zone, then two listings.
        let mut tree = NodeTree::default();
        for id in 0..3 {
            tree.add(id, "zone-a");
        }
        assert_eq!(tree.list(), vec![0, 1, 2]);
        tree.add(3, "zone-b");
        assert_eq!(tree.list(), vec![0, 3, 1, 2]);
        assert_eq!(
            tree.list(),
            vec![0, 3, 1, 2],
            "a second listing is identical"
        );
    }

    #[test]
    fn removing_the_last_node_of_a_zone_removes_the_zone() {
        let mut tree = NodeTree::default();
        tree.add(1, "a");
        tree.add(2, "b");
        assert!(tree.remove(1, "a"));
        assert!(!tree.remove(1, "a"), "already gone");
        assert_eq!(tree.zone_count(), 1);
        assert_eq!(tree.list(), vec![2]);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Add(u32, u8),
        Remove(u32),
        Move(u32, u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u32..40, 0u8..4).prop_map(|(id, z)| Op::Add(id, z)),
            (0u32..40).prop_map(Op::Remove),
            (0u32..40, 0u8..4).prop_map(|(id, z)| Op::Move(id, z)),
        ]
    }

    proptest! {
        #[test]
        fn every_listing_holds_every_node_exactly_once(ops in proptest::collection::vec(op(), 1..200)) {
            let mut tree = NodeTree::default();
            // The model: which zone each present node is in.
            let mut model: std::collections::BTreeMap<u32, String> = Default::default();
            for op in ops {
                match op {
                    Op::Add(id, z) => {
                        if let std::collections::btree_map::Entry::Vacant(entry) = model.entry(id) {
                            // Skewed zones: zone 0 gets most nodes.
                            let zone = format!("zone-{}", if z < 2 { 0 } else { z });
                            tree.add(id, &zone);
                            entry.insert(zone);
                        }
                    }
                    Op::Remove(id) => {
                        if let Some(zone) = model.remove(&id) {
                            prop_assert!(tree.remove(id, &zone));
                        }
                    }
                    Op::Move(id, z) => {
                        if let Some(zone) = model.get_mut(&id) {
                            let new_zone = format!("zone-{z}");
                            tree.update(id, zone, &new_zone);
                            *zone = new_zone;
                        }
                    }
                }
                let mut listed = tree.list();
                prop_assert_eq!(listed.len(), model.len());
                listed.sort_unstable();
                let expected: Vec<u32> = model.keys().copied().collect();
                prop_assert_eq!(listed, expected);
            }
        }
    }
}
