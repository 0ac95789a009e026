//! The cache's Dynamic Resource Allocation half: DeviceClasses, ResourceSlices grouped into pools,
//! ResourceClaims with their allocations (the cluster's, and those a reservation assumed until
//! the binding is seen), which device each allocation holds, and what a node and a pod carry of
//! them to the plugins that read devices.

use std::collections::{BTreeSet, HashMap};

use wasched_sdk as sdk;
use wasched_sdk::node_selector::parse_term;

use super::Cache;
use crate::k8s::devices::{Allocation, Claim, Slice};
use crate::result::ClaimWrite;

/// A device by driver, pool and name (kube's `DeviceID`).
pub type DeviceId = (String, String, String);

/// A claim by namespace and name.
type ClaimKey = (String, String);

/// What a claim's update changed, for the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimChange {
    /// The claim was not known before.
    pub created: bool,
    /// Devices it held are free now (it was deallocated).
    pub freed: bool,
}

/// DRA's objects and who holds which device.
#[derive(Debug, Default)]
pub struct DeviceStore {
    /// DeviceClasses by name: their CEL selectors.
    classes: HashMap<String, Vec<String>>,
    /// ResourceSlices by name.
    slices: HashMap<String, Slice>,
    /// ResourceClaims as the cluster has them.
    claims: HashMap<ClaimKey, Claim>,
    /// Allocations reservations assumed, by claim, until the cluster's claim carries one (or the
    /// reservation is given up).
    assumed: HashMap<ClaimKey, Assumed>,
    /// The claims a pod's reservation allocated or reserved, by pod key.
    by_pod: HashMap<String, Vec<ClaimKey>>,
    /// Devices held (without admin access) by an allocation, and the claim holding each.
    held: HashMap<DeviceId, ClaimKey>,
    /// The devices each claim holds (the inverse of `held`).
    held_by: HashMap<ClaimKey, Vec<DeviceId>>,
    /// Slice names by pool (driver, pool name).
    pool_slices: HashMap<(String, String), BTreeSet<String>>,
    /// Names of node-local slices, by node name.
    local_slices: HashMap<String, BTreeSet<String>>,
    /// Names of the slices with a node selector or for all nodes.
    shared_slices: BTreeSet<String>,
}

/// What a reservation assumed of a claim.
#[derive(Debug, Clone)]
struct Assumed {
    /// The allocation it made; none when the claim was allocated already.
    allocation: Option<Allocation>,
    /// The pod uid it adds to `reservedFor`.
    pod_uid: String,
}

impl DeviceStore {
    /// The allocation of claim `key`: the cluster's, else one a reservation assumed.
    fn allocation(&self, key: &ClaimKey) -> Option<&Allocation> {
        let claim = self.claims.get(key);
        claim
            .and_then(|c| c.allocation.as_ref())
            .or_else(|| self.assumed.get(key).and_then(|a| a.allocation.as_ref()))
    }

    /// Brings [`DeviceStore::held`] up to date with the allocations of the claims `keys`;
    /// returns the devices whose holder changed.
    fn recount(&mut self, keys: &[ClaimKey]) -> BTreeSet<DeviceId> {
        let mut changed = BTreeSet::new();
        for key in keys {
            for id in self.held_by.remove(key).unwrap_or_default() {
                if self.held.get(&id) == Some(key) {
                    self.held.remove(&id);
                    changed.insert(id);
                }
            }
            let Some(allocation) = self.allocation(key) else {
                continue;
            };
            let ids: Vec<DeviceId> = allocation
                .devices
                .iter()
                .filter(|d| !d.admin_access)
                .map(device_id)
                .collect();
            let mut taken = Vec::new();
            for id in ids {
                // A device two allocations name stays with the first; the cluster's claims
                // never do that, and a reservation takes only free devices.
                if !self.held.contains_key(&id) {
                    self.held.insert(id.clone(), key.clone());
                    changed.insert(id.clone());
                    taken.push(id);
                }
            }
            if !taken.is_empty() {
                self.held_by.insert(key.clone(), taken);
            }
        }
        changed
    }

    /// Files `slice` under its pool and the nodes it serves (`add`), or takes it out.
    fn index_slice(&mut self, name: &str, slice: &Slice, add: bool) {
        let pool = (slice.driver.clone(), slice.pool.clone());
        let names = match &slice.node_name {
            Some(node) => self.local_slices.entry(node.clone()).or_default(),
            None => &mut self.shared_slices,
        };
        if add {
            names.insert(name.to_string());
            self.pool_slices
                .entry(pool)
                .or_default()
                .insert(name.to_string());
        } else {
            names.remove(name);
            if let Some(names) = self.pool_slices.get_mut(&pool) {
                names.remove(name);
                if names.is_empty() {
                    self.pool_slices.remove(&pool);
                }
            }
        }
    }

    /// A pool's newest generation, its `resourceSliceCount` there, and how many of its slices
    /// of that generation are known.
    fn pool_state(&self, driver: &str, pool: &str) -> (i64, i64, usize) {
        let mut state = (i64::MIN, 0, 0);
        let key = (driver.to_string(), pool.to_string());
        for slice in self.pool_slices.get(&key).into_iter().flatten() {
            let slice = &self.slices[slice];
            if slice.generation > state.0 {
                state = (slice.generation, slice.slice_count, 0);
            }
            if slice.generation == state.0 {
                state.2 += 1;
            }
        }
        state
    }

    /// Whether the device is held by an allocation.
    pub fn is_held(&self, id: &DeviceId) -> bool {
        self.held.contains_key(id)
    }

    /// The devices held, each with the claim holding it (for checks and tests).
    pub fn holders(&self) -> impl Iterator<Item = (&DeviceId, &ClaimKey)> {
        self.held.iter()
    }

    /// The device pools `node` can use: per pool, the devices of the slices of its newest
    /// generation that serve the node, complete when every slice of that generation is known.
    fn pools_for(&self, node: &sdk::NodeInfo) -> Vec<sdk::DevicePool> {
        let local = self.local_slices.get(&node.name).into_iter().flatten();
        let mut names: Vec<&String> = local.chain(&self.shared_slices).collect();
        names.sort();
        let mut pools: Vec<sdk::DevicePool> = Vec::new();
        for slice in names.into_iter().map(|n| &self.slices[n]) {
            let (generation, count, seen) = self.pool_state(&slice.driver, &slice.pool);
            if slice.generation != generation || !serves(slice, node) {
                continue;
            }
            let index = match pools
                .iter()
                .position(|p| p.driver == slice.driver && p.name == slice.pool)
            {
                Some(index) => index,
                None => {
                    pools.push(sdk::DevicePool {
                        driver: slice.driver.clone(),
                        name: slice.pool.clone(),
                        complete: seen as i64 == count,
                        devices: Vec::new(),
                    });
                    pools.len() - 1
                }
            };
            let pool = &mut pools[index];
            pool.devices.extend(slice.devices.iter().map(|d| {
                let id = (slice.driver.clone(), slice.pool.clone(), d.name.clone());
                sdk::Device {
                    allocated: self.is_held(&id),
                    ..d.clone()
                }
            }));
        }
        pools
    }

    /// The nodes whose device pools a change to the slices of `driver`/`pool` can change: the
    /// node names of node-local slices, or `None` for every node.
    fn pool_nodes(&self, driver: &str, pool: &str) -> Option<BTreeSet<String>> {
        let mut nodes = BTreeSet::new();
        let key = (driver.to_string(), pool.to_string());
        for slice in self.pool_slices.get(&key).into_iter().flatten() {
            nodes.insert(self.slices[slice].node_name.clone()?);
        }
        Some(nodes)
    }

    /// The pod's claims with their ResourceClaims and DeviceClasses looked up.
    pub fn resolve(&self, pod: &mut sdk::Pod) {
        for entry in &mut pod.claims {
            let key = (pod.namespace.clone(), entry.claim_name.clone());
            let claim = (!entry.claim_name.is_empty())
                .then(|| self.claims.get(&key))
                .flatten();
            let Some(claim) = claim else {
                entry.found = false;
                continue;
            };
            entry.found = true;
            entry.deleting = claim.deleting;
            entry.owned_by_other =
                entry.from_template && claim.owner_uid.as_deref().is_some_and(|o| o != pod.uid);
            let assumed = self.assumed.get(&key);
            let mut reserved: Vec<&str> = claim.reserved_for.iter().map(String::as_str).collect();
            if let Some(a) = assumed.filter(|a| !reserved.contains(&a.pod_uid.as_str())) {
                reserved.push(&a.pod_uid);
            }
            entry.allocated = self.allocation(&key).map(|a| sdk::ClaimAllocated {
                node_selector: a.node_selector.clone(),
                reserved_for_pod: reserved.contains(&pod.uid.as_str()),
                reserved_count: reserved.len() as u32,
            });
            entry.requests = claim.requests.iter().map(|r| self.with_class(r)).collect();
            entry.constraints.clone_from(&claim.constraints);
        }
    }

    fn with_class(&self, request: &sdk::DeviceRequest) -> sdk::DeviceRequest {
        let class = self.classes.get(&request.class_name);
        sdk::DeviceRequest {
            class_found: class.is_some(),
            class_selectors: class.cloned().unwrap_or_default(),
            first_available: request
                .first_available
                .iter()
                .map(|r| self.with_class(r))
                .collect(),
            ..request.clone()
        }
    }

    /// The node selector of an allocation of `devices`: none when every device comes from slices
    /// for all nodes, the slice's selector when from one with a selector, else the node itself.
    /// A device is looked for in its pool's slices of the newest generation, the ones the
    /// allocator saw (every slice of the cluster was searched before, once per device of every
    /// reservation: 50,000 slices at 50,000 nodes).
    fn node_selector(
        &self,
        devices: &[sdk::DeviceResult],
        node: &str,
    ) -> Option<Vec<sdk::NodeSelectorTerm>> {
        let mut selector = None;
        for device in devices {
            let (generation, _, _) = self.pool_state(&device.driver, &device.pool);
            let key = (device.driver.clone(), device.pool.clone());
            let slice = self
                .pool_slices
                .get(&key)
                .into_iter()
                .flatten()
                .map(|name| &self.slices[name])
                .find(|s| {
                    s.generation == generation && s.devices.iter().any(|d| d.name == device.device)
                });
            match slice {
                Some(s) if s.all_nodes => {}
                Some(Slice {
                    node_selector: Some(terms),
                    ..
                }) => selector = Some(terms.clone()),
                _ => {
                    return Some(vec![sdk::NodeSelectorTerm {
                        match_expressions: Vec::new(),
                        match_fields: vec![sdk::NodeSelectorRequirement {
                            key: sdk::node_selector::NAME_FIELD.into(),
                            operator: "In".into(),
                            values: vec![node.to_string()],
                        }],
                    }])
                }
            }
        }
        selector
    }
}

fn device_id(device: &sdk::DeviceResult) -> DeviceId {
    (
        device.driver.clone(),
        device.pool.clone(),
        device.device.clone(),
    )
}

/// Whether `slice` serves `node` (node-local, selecting it, or for all nodes).
fn serves(slice: &Slice, node: &sdk::NodeInfo) -> bool {
    if let Some(name) = &slice.node_name {
        return *name == node.name;
    }
    if slice.all_nodes {
        return true;
    }
    slice.node_selector.as_ref().is_some_and(|terms| {
        terms
            .iter()
            .filter_map(|t| parse_term(t).ok())
            .any(|t| t.matches(node))
    })
}

/// Which nodes a change touches.
enum Touched {
    Nodes(BTreeSet<String>),
    All,
}

impl Cache {
    /// Adds or replaces a DeviceClass.
    pub fn upsert_device_class(&mut self, name: &str, selectors: Vec<String>) {
        self.devices.classes.insert(name.to_string(), selectors);
    }

    /// Removes a DeviceClass.
    pub fn remove_device_class(&mut self, name: &str) {
        self.devices.classes.remove(name);
    }

    /// Adds or replaces a ResourceSlice.
    pub fn upsert_resource_slice(&mut self, name: &str, slice: Slice) {
        if self.devices.slices.get(name) == Some(&slice) {
            return;
        }
        // The nodes that saw the pool before and those that see it after.
        let (driver, pool) = (slice.driver.clone(), slice.pool.clone());
        let mut touched = self.pool_touched(&driver, &pool);
        if let Some(old) = self.devices.slices.get(name) {
            let (old_driver, old_pool) = (old.driver.clone(), old.pool.clone());
            touched.join(self.pool_touched(&old_driver, &old_pool));
        }
        if let Some(old) = self.devices.slices.remove(name) {
            self.devices.index_slice(name, &old, false);
        }
        self.devices.index_slice(name, &slice, true);
        self.devices.slices.insert(name.to_string(), slice);
        touched.join(self.pool_touched(&driver, &pool));
        self.refresh_devices(touched);
    }

    /// Removes a ResourceSlice.
    pub fn remove_resource_slice(&mut self, name: &str) {
        if let Some(old) = self.devices.slices.get(name) {
            let touched = self.pool_touched(&old.driver.clone(), &old.pool.clone());
            if let Some(old) = self.devices.slices.remove(name) {
                self.devices.index_slice(name, &old, false);
            }
            self.refresh_devices(touched);
        }
    }

    /// Adds or replaces a ResourceClaim. A claim from the cluster that carries an allocation
    /// replaces what a reservation assumed of it.
    pub fn upsert_resource_claim(
        &mut self,
        namespace: &str,
        name: &str,
        claim: Claim,
    ) -> ClaimChange {
        let key = (namespace.to_string(), name.to_string());
        if claim.allocation.is_some() {
            if let Some(assumed) = self.devices.assumed.get(&key) {
                if claim.reserved_for.contains(&assumed.pod_uid) || assumed.allocation.is_some() {
                    self.devices.assumed.remove(&key);
                }
            }
        }
        let created = self.devices.claims.insert(key.clone(), claim).is_none();
        let freed = self.allocations_changed(&[key]);
        ClaimChange { created, freed }
    }

    /// Removes a ResourceClaim (and what was assumed of it); true when that freed devices.
    pub fn remove_resource_claim(&mut self, namespace: &str, name: &str) -> bool {
        let key = (namespace.to_string(), name.to_string());
        self.devices.claims.remove(&key);
        self.devices.assumed.remove(&key);
        self.allocations_changed(&[key])
    }

    /// Holds the devices allocated for `pod`'s claims on `node`, and its place in the
    /// `reservedFor` of every claim it uses (kube-scheduler's DynamicResources Reserve, with the
    /// claims' in-flight allocations): later cycles see the devices taken until the cluster's
    /// claims carry the allocation or [`Cache::unreserve_claims`] gives it up.
    pub fn reserve_claims(
        &mut self,
        pod: &sdk::Pod,
        node: &str,
        allocated: &[sdk::ClaimAllocation],
    ) -> Vec<ClaimWrite> {
        let mut held = Vec::new();
        let mut writes = Vec::new();
        for entry in &pod.claims {
            let key = (pod.namespace.clone(), entry.claim_name.clone());
            let Some(claim) = self.devices.claims.get(&key) else {
                continue;
            };
            if claim.reserved_for.contains(&pod.uid) {
                continue;
            }
            let allocation = allocated
                .iter()
                .find(|a| a.claim == entry.claim_name)
                .map(|a| Allocation {
                    node_selector: self.devices.node_selector(&a.devices, node),
                    devices: a.devices.clone(),
                });
            writes.push(ClaimWrite {
                claim: entry.claim_name.clone(),
                allocation: allocation.clone(),
                pod_uid: pod.uid.clone(),
            });
            self.devices.assumed.insert(
                key.clone(),
                Assumed {
                    allocation,
                    pod_uid: pod.uid.clone(),
                },
            );
            held.push(key);
        }
        if !held.is_empty() {
            self.allocations_changed(&held);
            self.devices.by_pod.insert(pod.key(), held);
        }
        writes
    }

    /// Gives up what [`Cache::reserve_claims`] held for pod `key`.
    pub fn unreserve_claims(&mut self, key: &str) {
        let Some(held) = self.devices.by_pod.remove(key) else {
            return;
        };
        for claim in &held {
            self.devices.assumed.remove(claim);
        }
        self.allocations_changed(&held);
    }

    /// The DRA store, for checks.
    pub fn device_store(&self) -> &DeviceStore {
        &self.devices
    }

    /// Fills in the pod's claims from the claims and classes known now, with what reservations
    /// assumed of them.
    pub fn resolve_device_claims(&self, pod: &mut sdk::Pod) {
        if !pod.claims.is_empty() {
            self.devices.resolve(pod);
        }
    }

    /// The device pools for a node being upserted.
    pub(super) fn device_pools_for(&self, node: &sdk::NodeInfo) -> Vec<sdk::DevicePool> {
        if self.devices.slices.is_empty() {
            return Vec::new();
        }
        self.devices.pools_for(node)
    }

    fn pool_touched(&self, driver: &str, pool: &str) -> Touched {
        match self.devices.pool_nodes(driver, pool) {
            Some(nodes) => Touched::Nodes(nodes),
            None => Touched::All,
        }
    }

    /// Recounts who holds the devices of `claims` and re-sends the nodes whose pools changed;
    /// true when a device is free now that was held before.
    fn allocations_changed(&mut self, claims: &[ClaimKey]) -> bool {
        let changed = self.devices.recount(claims);
        if changed.is_empty() {
            return false;
        }
        let freed = changed.iter().any(|id| !self.devices.is_held(id));
        let mut touched = Touched::Nodes(BTreeSet::new());
        let pools: BTreeSet<(String, String)> =
            changed.into_iter().map(|(d, p, _)| (d, p)).collect();
        for (driver, pool) in pools {
            touched.join(self.pool_touched(&driver, &pool));
        }
        self.refresh_devices(touched);
        freed
    }

    /// Re-upserts the touched nodes so that their device pools are recomputed and, where they
    /// changed, sent again.
    fn refresh_devices(&mut self, touched: Touched) {
        let infos: Vec<sdk::NodeInfo> = match touched {
            Touched::All => self.nodes().map(|(_, e)| e.info.clone()).collect(),
            Touched::Nodes(names) => names
                .iter()
                .filter_map(|n| self.node_id(n))
                .filter_map(|id| self.node(id).map(|e| e.info.clone()))
                .collect(),
        };
        for info in infos {
            self.upsert_node(info);
        }
    }
}

impl Touched {
    fn join(&mut self, other: Touched) {
        match (&mut *self, other) {
            (Touched::All, _) => {}
            (_, Touched::All) => *self = Touched::All,
            (Touched::Nodes(mine), Touched::Nodes(theirs)) => mine.extend(theirs),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use proptest::prelude::*;
    use wasched_sdk as sdk;

    use super::*;
    use crate::k8s::devices::{Allocation, Claim, Slice};

    const NODES: usize = 2;
    const DEVICES: usize = 3;
    const CLAIMS: usize = 4;

    fn node(i: usize) -> sdk::NodeInfo {
        sdk::NodeInfo {
            name: format!("n{i}"),
            ..sdk::NodeInfo::default()
        }
    }

    fn slice(i: usize) -> Slice {
        Slice {
            driver: "gpu".into(),
            pool: format!("n{i}"),
            generation: 1,
            slice_count: 1,
            node_name: Some(format!("n{i}")),
            devices: (0..DEVICES)
                .map(|d| sdk::Device {
                    name: format!("g{d}"),
                    ..sdk::Device::default()
                })
                .collect(),
            ..Slice::default()
        }
    }

    fn pod(claim: usize) -> sdk::Pod {
        sdk::Pod {
            namespace: "ns".into(),
            name: format!("p{claim}"),
            uid: format!("uid-p{claim}"),
            claims: vec![sdk::PodClaim {
                name: "gpu".into(),
                claim_name: format!("c{claim}"),
                ..sdk::PodClaim::default()
            }],
            ..sdk::Pod::default()
        }
    }

    fn result(node: usize, device: usize) -> sdk::DeviceResult {
        sdk::DeviceResult {
            request: "gpu".into(),
            driver: "gpu".into(),
            pool: format!("n{node}"),
            device: format!("g{device}"),
            admin_access: false,
        }
    }

    /// What the cluster and the scheduler do to claims.
    #[derive(Clone, Debug)]
    enum Op {
        /// The pod of a claim is placed on a node, taking a device its node shows free.
        Reserve {
            claim: usize,
            node: usize,
            device: usize,
        },
        /// The pod's binding fails: its reservation is given up.
        Unreserve { claim: usize },
        /// PreBind's write comes back: the claim carries the allocation and the pod.
        Confirm { claim: usize },
        /// kube's controller deallocates the claim (its pod is gone).
        Deallocate { claim: usize },
        /// The claim is deleted.
        Delete { claim: usize },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..CLAIMS, 0..NODES, 0..DEVICES).prop_map(|(claim, node, device)| Op::Reserve {
                claim,
                node,
                device
            }),
            (0..CLAIMS).prop_map(|claim| Op::Unreserve { claim }),
            (0..CLAIMS).prop_map(|claim| Op::Confirm { claim }),
            (0..CLAIMS).prop_map(|claim| Op::Deallocate { claim }),
            (0..CLAIMS).prop_map(|claim| Op::Delete { claim }),
        ]
    }

    /// The devices each node shows allocated.
    fn shown(cache: &Cache) -> BTreeSet<(String, String)> {
        let mut shown = BTreeSet::new();
        for (_, entry) in cache.nodes() {
            for pool in &entry.info.device_pools {
                for device in pool.devices.iter().filter(|d| d.allocated) {
                    shown.insert((pool.name.clone(), device.name.clone()));
                }
            }
        }
        shown
    }

    proptest! {
        /// Whatever order reservations, failed bindings, confirmations, deallocations and
        /// deletions come in, no device is held by two claims, and what the nodes show equals a
        /// recount of the allocations, the cluster's and the assumed ones.
        #[test]
        fn no_device_is_held_twice_and_the_nodes_show_a_recount(
            ops in proptest::collection::vec(op(), 1..40)
        ) {
            let mut cache = Cache::default();
            for i in 0..NODES {
                cache.upsert_resource_slice(&format!("s{i}"), slice(i));
                cache.upsert_node(node(i));
            }
            for c in 0..CLAIMS {
                cache.upsert_resource_claim("ns", &format!("c{c}"), Claim::default());
            }
            // The model: the cluster's claims, and what each reservation assumed.
            let mut cluster: BTreeMap<usize, Option<Claim>> =
                (0..CLAIMS).map(|c| (c, Some(Claim::default()))).collect();
            let mut assumed: BTreeMap<usize, Vec<ClaimWrite>> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Reserve { claim, node, device } => {
                        let free = !shown(&cache)
                            .contains(&(format!("n{node}"), format!("g{device}")));
                        let Some(Some(stored)) = cluster.get(&claim) else { continue };
                        if !free || stored.allocation.is_some() || assumed.contains_key(&claim) {
                            continue;
                        }
                        let allocated = vec![sdk::ClaimAllocation {
                            claim: format!("c{claim}"),
                            devices: vec![result(node, device)],
                        }];
                        let writes =
                            cache.reserve_claims(&pod(claim), &format!("n{node}"), &allocated);
                        prop_assert_eq!(writes.len(), 1);
                        assumed.insert(claim, writes);
                    }
                    Op::Unreserve { claim } => {
                        cache.unreserve_claims(&pod(claim).key());
                        assumed.remove(&claim);
                    }
                    Op::Confirm { claim } => {
                        let (Some(writes), Some(Some(stored))) =
                            (assumed.remove(&claim), cluster.get(&claim).cloned())
                        else {
                            continue;
                        };
                        let write = &writes[0];
                        let confirmed = Claim {
                            allocation: write.allocation.clone(),
                            reserved_for: vec![write.pod_uid.clone()],
                            ..stored
                        };
                        cache.upsert_resource_claim("ns", &format!("c{claim}"), confirmed.clone());
                        cache.unreserve_claims(&pod(claim).key());
                        cluster.insert(claim, Some(confirmed));
                    }
                    Op::Deallocate { claim } => {
                        if cluster.get(&claim).is_some_and(Option::is_some) {
                            cache.upsert_resource_claim("ns", &format!("c{claim}"), Claim::default());
                            cluster.insert(claim, Some(Claim::default()));
                        }
                    }
                    Op::Delete { claim } => {
                        cache.remove_resource_claim("ns", &format!("c{claim}"));
                        cluster.insert(claim, None);
                    }
                }
                let mut recount: BTreeMap<(String, String), usize> = BTreeMap::new();
                let allocations = cluster
                    .iter()
                    .filter_map(|(c, claim)| {
                        let from_cluster =
                            claim.as_ref().and_then(|c| c.allocation.clone());
                        let from_reservation = assumed
                            .get(c)
                            .and_then(|w| w[0].allocation.clone())
                            .filter(|_| claim.is_some());
                        from_cluster.or(from_reservation)
                    })
                    .collect::<Vec<Allocation>>();
                for allocation in &allocations {
                    for d in &allocation.devices {
                        *recount.entry((d.pool.clone(), d.device.clone())).or_default() += 1;
                    }
                }
                prop_assert!(recount.values().all(|&n| n == 1), "held twice: {recount:?}");
                let recounted: BTreeSet<(String, String)> = recount.into_keys().collect();
                prop_assert_eq!(shown(&cache), recounted.clone());
                let held: BTreeSet<(String, String)> = cache
                    .device_store()
                    .holders()
                    .map(|((_, pool, device), _)| (pool.clone(), device.clone()))
                    .collect();
                prop_assert_eq!(held, recounted);
            }
        }
    }

    #[test]
    fn an_allocation_is_for_the_nodes_its_devices_newest_slices_serve() {
        let mut cache = Cache::default();
        cache.upsert_node(node(0));
        let zone = |z: &str| {
            vec![sdk::NodeSelectorTerm {
                match_expressions: vec![sdk::NodeSelectorRequirement {
                    key: "zone".into(),
                    operator: "In".into(),
                    values: vec![z.into()],
                }],
                match_fields: Vec::new(),
            }]
        };
        let shared = |pool: &str, generation, node_selector, all_nodes| Slice {
            driver: "net".into(),
            pool: pool.into(),
            generation,
            slice_count: 1,
            node_name: None,
            node_selector,
            all_nodes,
            devices: vec![sdk::Device {
                name: "d0".into(),
                ..sdk::Device::default()
            }],
        };
        // Many slices of other pools, and two generations of pool "fabric".
        for i in 0..50 {
            let other = shared(&format!("other-{i}"), 1, Some(zone("x")), false);
            cache.upsert_resource_slice(&format!("other-{i}"), other);
        }
        cache.upsert_resource_slice("fabric-1", shared("fabric", 1, Some(zone("a")), false));
        cache.upsert_resource_slice("fabric-2", shared("fabric", 2, Some(zone("b")), false));
        cache.upsert_resource_slice("everywhere", shared("everywhere", 1, None, true));
        let device = |pool: &str| sdk::DeviceResult {
            request: "gpu".into(),
            driver: "net".into(),
            pool: pool.into(),
            device: "d0".into(),
            admin_access: false,
        };
        let selector_for = |cache: &mut Cache, claim: usize, pool: &str| {
            cache.upsert_resource_claim("ns", &format!("c{claim}"), Claim::default());
            let allocated = [sdk::ClaimAllocation {
                claim: format!("c{claim}"),
                devices: vec![device(pool)],
            }];
            let writes = cache.reserve_claims(&pod(claim), "n0", &allocated);
            writes[0].allocation.as_ref().unwrap().node_selector.clone()
        };
        assert_eq!(selector_for(&mut cache, 0, "fabric"), Some(zone("b")));
        assert_eq!(selector_for(&mut cache, 1, "everywhere"), None);
        let local = selector_for(&mut cache, 2, "nowhere");
        assert_eq!(
            local.unwrap()[0].match_fields[0].values,
            ["n0"],
            "a device of no known slice is the node's own"
        );
    }

    #[test]
    fn an_incomplete_pool_and_a_newer_generation_are_what_a_node_shows() {
        let mut cache = Cache::default();
        cache.upsert_node(node(0));
        let mut first = slice(0);
        first.slice_count = 2;
        cache.upsert_resource_slice("a", first.clone());
        let pools = |cache: &Cache| cache.node(0).unwrap().info.device_pools.clone();
        assert!(!pools(&cache)[0].complete, "one of two slices");
        let mut second = first.clone();
        second.devices = vec![sdk::Device {
            name: "g9".into(),
            ..sdk::Device::default()
        }];
        cache.upsert_resource_slice("b", second);
        assert!(pools(&cache)[0].complete);
        assert_eq!(pools(&cache)[0].devices.len(), DEVICES + 1);
        let newer = Slice {
            generation: 2,
            slice_count: 1,
            ..first
        };
        cache.upsert_resource_slice("a", newer);
        let shown = pools(&cache);
        assert!(shown[0].complete, "generation 2 has its one slice");
        assert_eq!(
            shown[0].devices.len(),
            DEVICES,
            "the older slice is not used"
        );
    }
}
