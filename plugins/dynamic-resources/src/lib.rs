//! DynamicResources: kube-scheduler's plugin for Dynamic Resource Allocation
//! (`resource.k8s.io/v1`). A pod's ResourceClaims ask for devices of DeviceClasses, chosen by
//! CEL selectors over what drivers publish in ResourceSlices; the pod goes only where every
//! claim it names can be allocated (or, allocated already, reached), and Reserve hands the host
//! the devices to write into the claims before the binding.
//!
//! - PreEnqueue: every claim the pod names exists, is not being deleted and, made from a
//!   template, is the pod's.
//! - PreFilter: an allocated claim restricts the nodes to its allocation's node selector and
//!   must have room in `reservedFor`; an unallocated one needs every class its requests name.
//! - Filter: kube's structured allocator on the node's devices, the devices other claims hold
//!   excluded.
//! - Reserve: the allocation on the chosen node.

#![warn(missing_docs)]

pub mod allocator;
pub mod cel_env;
pub mod quantity;
pub mod semver;

use std::cell::RefCell;
use std::collections::HashMap;

use wasched_sdk::node_selector::{parse_term, Term};
use wasched_sdk::{
    AttributeValue, Device, DevicePool, DeviceRequest, Failure, FilterPlan, FilterPlugin,
    FilterResults, NodeId, NodeInfo, Nodes, Plugin, Pod, PodClaim, PodParts, PodPlan, Reservation,
    Verdict,
};

use allocator::{Alternative, ClaimPlan, ConstraintPlan, Matcher, RequestPlan};
use cel_env::{Environment, Selector};

/// The name used in configs and messages.
pub const NAME: &str = "DynamicResources";
/// kube-scheduler's reason for a node where the pod's claims cannot all be allocated.
pub const REASON_CANNOT_ALLOCATE: &str = "cannot allocate all claims";
/// kube-scheduler's reason for a node an allocated claim's devices cannot be reached from.
pub const REASON_NOT_AVAILABLE: &str = "resourceclaim not available on the node";
/// kube-scheduler's reason for an allocated claim reserved for as many pods as it can be.
pub const REASON_IN_USE: &str = "resourceclaim in use";
/// kube's `ResourceClaimReservedForMaxSize`.
pub const MAX_RESERVED_FOR: u32 = 256;

/// The plugin.
#[derive(Default)]
pub struct DynamicResources {
    env: Environment,
    /// Selectors compiled, by expression.
    selectors: HashMap<String, Selector>,
    /// Devices by what a selector can read of them (driver, attributes, capacity), each such
    /// content given a number once: devices alike in every node share their matches.
    device_ids: HashMap<MatchKey, u32>,
    /// Per node id, the numbers of its devices, pool by pool (none for a node without devices).
    node_devices: Vec<Vec<Vec<u32>>>,
    /// Selector sets by their expressions (class selectors, then the request's): their numbers.
    selector_sets: HashMap<SelectorSetKey, u32>,
    sets: Vec<SelectorSet>,
    /// Per selector set and device number, what matching gave (computed once): one byte each
    /// ([`MatchedByte`]), the errors beside them in `match_errors`. With eight devices a node, a
    /// 50,000-node cluster has 400,000 numbers, and a row of full `Matched` values (56 bytes
    /// each) missed the cache on every device a filter looked at.
    matched: RefCell<Vec<Vec<u8>>>,
    /// What matching gave for the (set, device number) pairs that failed with an error.
    match_errors: RefCell<HashMap<(u32, u32), Matched>>,
    /// Per device number, its content.
    devices: Vec<MatchKey>,
    /// How many device numbers `node_devices` holds, counted with repeats.
    held_numbers: usize,
    pod: PodState,
    /// The allocator's working space, kept from one examined node to the next.
    scratch: RefCell<allocator::Scratch>,
    /// What the allocator answered per node for the last pods' claims.
    answers: HeldAnswers,
}

/// A selector set's class and expressions.
type SelectorSetKey = (String, Vec<String>, Vec<String>);

struct SelectorSet {
    class: String,
    class_selectors: Vec<String>,
    request_selectors: Vec<String>,
}

/// What matching a device against a selector set gave.
#[derive(Clone, Debug)]
enum Matched {
    Yes,
    No,
    /// Selector `index` of the class (`class`) or of the request failed: compiling when
    /// `compile`, else at run time on the device.
    Error {
        class: bool,
        index: usize,
        compile: bool,
        message: String,
    },
}

/// A [`Matched`] as `matched` keeps it.
struct MatchedByte;

impl MatchedByte {
    const UNKNOWN: u8 = 0;
    const YES: u8 = 1;
    const NO: u8 = 2;
    /// In `match_errors`.
    const ERROR: u8 = 3;
}

/// What PreFilter worked out for the pod.
#[derive(Default)]
struct PodState {
    /// Claims to allocate.
    plans: Vec<ClaimPlan>,
    /// Per allocated claim with a node selector, its terms (ORed).
    reachable_from: Vec<Vec<Term>>,
}

impl DynamicResources {
    /// The number of the selector set of `request` (its class's selectors, then its own).
    fn selector_set(&mut self, request: &DeviceRequest) -> u32 {
        let key = (
            request.class_name.clone(),
            request.class_selectors.clone(),
            request.selectors.clone(),
        );
        for expression in request.class_selectors.iter().chain(&request.selectors) {
            self.selectors
                .entry(expression.clone())
                .or_insert_with(|| Selector::compile(expression));
        }
        if let Some(&id) = self.selector_sets.get(&key) {
            return id;
        }
        let id = self.sets.len() as u32;
        self.sets.push(SelectorSet {
            class: key.0.clone(),
            class_selectors: key.1.clone(),
            request_selectors: key.2.clone(),
        });
        self.matched.borrow_mut().push(Vec::new());
        self.selector_sets.insert(key, id);
        id
    }

    /// Devices no node publishes any more (its slices republished, or its node's id given to a
    /// new node: the host reuses the ids of removed nodes) are let go once they outnumber those
    /// held, and the rest renumbered: without this a scheduler in a cluster whose nodes come and
    /// go keeps every device it ever saw, and what it matched against each. Called before a pod
    /// is prepared, when nothing of the last pod's numbers is kept.
    fn release_unheld_devices(&mut self) {
        if self.devices.len() <= 2 * self.held_numbers + 1024 {
            return;
        }
        let mut renumbered = vec![u32::MAX; self.devices.len()];
        let mut devices = Vec::new();
        for pools in &mut self.node_devices {
            for number in pools.iter_mut().flatten() {
                let Some(new) = renumbered.get_mut(*number as usize) else {
                    continue;
                };
                if *new == u32::MAX {
                    *new = devices.len() as u32;
                    devices.push(std::mem::take(&mut self.devices[*number as usize]));
                }
                *number = *new;
            }
        }
        self.device_ids = (0u32..)
            .zip(&devices)
            .map(|(n, d)| (d.clone(), n))
            .collect();
        self.devices = devices;
        // Matches are by device number: worked out again as they are needed.
        for row in self.matched.get_mut() {
            row.clear();
        }
        self.match_errors.get_mut().clear();
    }

    /// Whether `numbers`, a node's device numbers, are still those of `pools`: device by
    /// device, the numbered key is the device's driver, attributes and capacity.
    fn numbers_stand(&self, numbers: &[Vec<u32>], pools: &[DevicePool]) -> bool {
        numbers.len() == pools.len()
            && numbers.iter().zip(pools).all(|(of_pool, pool)| {
                of_pool.len() == pool.devices.len()
                    && of_pool.iter().zip(&pool.devices).all(|(&number, device)| {
                        self.devices.get(number as usize).is_some_and(|key| {
                            key.0 == pool.driver
                                && key.1 == device.attributes
                                && key.2 == device.capacity
                        })
                    })
            })
    }

    /// The device numbers of `pools` (a node's), looked up by content.
    fn numbers_of(&self, pools: &[DevicePool]) -> Vec<Vec<u32>> {
        pools
            .iter()
            .map(|pool| {
                pool.devices
                    .iter()
                    .map(|d| {
                        let key = match_key(&pool.driver, d);
                        self.device_ids.get(&key).copied().unwrap_or(u32::MAX)
                    })
                    .collect()
            })
            .collect()
    }

    /// Whether the pod's claims can all be allocated from `node`'s devices (`numbers` being
    /// their numbers); an error is kube's `statusError`.
    fn allocates(&self, node: &NodeInfo, numbers: &[Vec<u32>]) -> Result<bool, String> {
        if self.pod.plans.is_empty() {
            return Ok(true);
        }
        let mut matcher = NodeMatcher {
            plugin: self,
            pools: &node.device_pools,
            numbers,
        };
        let mut scratch = self.scratch.borrow_mut();
        allocator::allocates(
            &node.device_pools,
            &self.pod.plans,
            &mut matcher,
            &mut scratch,
        )
    }

    /// [`DynamicResources::allocates`] on node `id` of the mirror, through the numbers its upsert
    /// gave its devices (looked up by content for a node it has none for).
    fn allocates_at(&self, id: NodeId, node: &NodeInfo) -> Result<bool, String> {
        match self.node_devices.get(id as usize) {
            Some(numbers) if !numbers.is_empty() || node.device_pools.is_empty() => {
                self.allocates(node, numbers)
            }
            _ => self.allocates(node, &self.numbers_of(&node.device_pools)),
        }
    }

    fn verdict(&self, node: &NodeInfo, numbers: &[Vec<u32>]) -> Verdict {
        match self.allocates(node, numbers) {
            Err(e) => Err(Failure::error(e)),
            Ok(allocates) => self.verdict_of(allocates, node),
        }
    }

    /// The verdict on `node` once the allocator said whether the claims can be allocated there:
    /// the claims allocated already must be reachable from it.
    fn verdict_of(&self, allocates: bool, node: &NodeInfo) -> Verdict {
        if !allocates {
            return Err(Failure::unresolvable(REASON_CANNOT_ALLOCATE));
        }
        if self
            .pod
            .reachable_from
            .iter()
            .any(|terms| !terms.iter().any(|t| t.matches(node)))
        {
            return Err(Failure::unresolvable(REASON_NOT_AVAILABLE));
        }
        Ok(())
    }
}

/// The allocator's answers per node for pods whose claims search alike, kept from one pod to
/// the next: the pods of one Job or ReplicaSet ask for the same devices, each through a claim
/// of its own, and between two of them only the node that took the last one's devices changed.
/// An answer stands until its node is sent again (any allocation or freeing of its devices
/// sends it) or a pod's claims search otherwise. Errors are not kept: they name the claim.
#[derive(Default)]
struct HeldAnswers {
    /// The claims the answers are for; only what [`ClaimPlan::same_search`] compares counts.
    claims: Vec<ClaimPlan>,
    /// Per node id, [`HeldAnswers::UNKNOWN`], [`HeldAnswers::ALLOCATES`] or
    /// [`HeldAnswers::CANNOT`].
    by_node: Vec<u8>,
}

impl HeldAnswers {
    const UNKNOWN: u8 = 0;
    const ALLOCATES: u8 = 1;
    const CANNOT: u8 = 2;

    /// Keeps the answers if `claims` search as the held ones do, else forgets them all.
    fn hold_for(&mut self, claims: &[ClaimPlan]) {
        let alike = self.claims.len() == claims.len()
            && self
                .claims
                .iter()
                .zip(claims)
                .all(|(a, b)| a.same_search(b));
        if !alike {
            self.claims = claims.to_vec();
            self.by_node.fill(Self::UNKNOWN);
        }
    }

    fn forget(&mut self, id: NodeId) {
        if let Some(answer) = self.by_node.get_mut(id as usize) {
            *answer = Self::UNKNOWN;
        }
    }

    #[inline(always)]
    fn get(&self, id: NodeId) -> Option<bool> {
        match self.by_node.get(id as usize).copied() {
            Some(Self::ALLOCATES) => Some(true),
            Some(Self::CANNOT) => Some(false),
            _ => None,
        }
    }

    fn set(&mut self, id: NodeId, allocates: bool) {
        if self.by_node.len() <= id as usize {
            self.by_node.resize(id as usize + 1, Self::UNKNOWN);
        }
        self.by_node[id as usize] = if allocates {
            Self::ALLOCATES
        } else {
            Self::CANNOT
        };
    }
}

/// What a selector sees of a device (kube's CEL environment declares `device.driver`,
/// `device.attributes` and `device.capacity`): two devices alike in these match alike, whatever
/// their names, pools and allocations. A model of GPU is matched once, not once per GPU. kube
/// 1.34 adds `device.allowMultipleAllocations` behind the DRAConsumableCapacity gate; this
/// environment does not show it, and if it ever does it belongs in the key.
type MatchKey = (String, Vec<(String, AttributeValue)>, Vec<(String, String)>);

fn match_key(driver: &str, device: &Device) -> MatchKey {
    (
        driver.to_string(),
        device.attributes.clone(),
        device.capacity.clone(),
    )
}

/// Matches devices of one node against selector sets, through the plugin's cache.
struct NodeMatcher<'a> {
    plugin: &'a DynamicResources,
    pools: &'a [DevicePool],
    numbers: &'a [Vec<u32>],
}

impl Matcher for NodeMatcher<'_> {
    /// The answer the cache holds, inlined into the search's loops over the node's devices;
    /// anything else (a first look, an error) in [`NodeMatcher::look_up`]. As WebAssembly,
    /// LLVM left a plain `#[inline]` a call per device.
    #[inline(always)]
    fn matches(
        &mut self,
        set: u32,
        claim: &ClaimPlan,
        pool_index: usize,
        device_index: usize,
    ) -> Result<bool, String> {
        let number = self.numbers[pool_index][device_index];
        let cached = self
            .plugin
            .matched
            .borrow()
            .get(set as usize)
            .and_then(|m| m.get(number as usize).copied());
        match cached {
            Some(MatchedByte::YES) => Ok(true),
            Some(MatchedByte::NO) => Ok(false),
            _ => self.look_up(set, claim, pool_index, device_index, number),
        }
    }
}

impl NodeMatcher<'_> {
    /// [`Matcher::matches`] for a device the cache has no yes or no for: its error, or a first
    /// evaluation, kept in the cache.
    #[inline(never)]
    fn look_up(
        &mut self,
        set: u32,
        claim: &ClaimPlan,
        pool_index: usize,
        device_index: usize,
        number: u32,
    ) -> Result<bool, String> {
        let pool = &self.pools[pool_index];
        let device = &pool.devices[device_index];
        let cached = self
            .plugin
            .matched
            .borrow()
            .get(set as usize)
            .and_then(|m| m.get(number as usize).copied())
            .unwrap_or(MatchedByte::UNKNOWN);
        let matched = match cached {
            MatchedByte::YES => Matched::Yes,
            MatchedByte::NO => Matched::No,
            MatchedByte::ERROR => self.plugin.match_errors.borrow()[&(set, number)].clone(),
            _ => {
                let m = self.plugin.evaluate(set, &pool.driver, device);
                if number != u32::MAX {
                    let byte = match &m {
                        Matched::Yes => MatchedByte::YES,
                        Matched::No => MatchedByte::NO,
                        Matched::Error { .. } => {
                            let mut errors = self.plugin.match_errors.borrow_mut();
                            errors.insert((set, number), m.clone());
                            MatchedByte::ERROR
                        }
                    };
                    let mut all = self.plugin.matched.borrow_mut();
                    let of_set = &mut all[set as usize];
                    if of_set.len() <= number as usize {
                        of_set.resize(number as usize + 1, MatchedByte::UNKNOWN);
                    }
                    of_set[number as usize] = byte;
                }
                m
            }
        };
        let set = &self.plugin.sets[set as usize];
        match matched {
            Matched::Yes => Ok(true),
            Matched::No => Ok(false),
            Matched::Error {
                class,
                index,
                compile,
                message,
            } => {
                let whose = if class {
                    format!("class {}", set.class)
                } else {
                    format!("claim {}", claim.display)
                };
                Err(if compile {
                    format!("{whose}: selector #{index}: CEL compile error: {message}")
                } else {
                    format!(
                        "{whose}: selector #{index} on device {}/{}/{}: CEL runtime error: {message}",
                        pool.driver, pool.name, device.name
                    )
                })
            }
        }
    }
}

impl DynamicResources {
    /// Matches `device` against selector set `set`: the class's selectors, then the request's.
    fn evaluate(&self, set: u32, driver: &str, device: &Device) -> Matched {
        let set = &self.sets[set as usize];
        let class = set.class_selectors.iter().map(|e| (true, e));
        let request = set.request_selectors.iter().map(|e| (false, e));
        let (mut class_index, mut request_index) = (0, 0);
        for (of_class, expression) in class.chain(request) {
            let index = if of_class {
                class_index += 1;
                class_index - 1
            } else {
                request_index += 1;
                request_index - 1
            };
            let selector = &self.selectors[expression];
            let error = |compile, message: String| Matched::Error {
                class: of_class,
                index,
                compile,
                message,
            };
            if let Some(message) = selector.compile_error() {
                return error(true, message.to_string());
            }
            match self.env.matches(selector, driver, device) {
                Ok(true) => {}
                Ok(false) => return Matched::No,
                Err(message) => return error(false, message),
            }
        }
        Matched::Yes
    }
}

/// Why the pod cannot be queued (kube's `foreachPodResourceClaim` errors): a claim it names is
/// missing, being deleted, or made for another pod.
fn claims_missing(pod: &Pod) -> Option<String> {
    let key = format!("{}/{}", pod.namespace, pod.name);
    for claim in &pod.claims {
        if claim.claim_name.is_empty() {
            return Some(if claim.from_template {
                format!("pod \"{key}\": ResourceClaim not created yet")
            } else {
                format!("pod \"{key}\": claim {} has no ResourceClaim", claim.name)
            });
        }
        if !claim.found {
            return Some(format!(
                "resourceclaim.resource.k8s.io \"{}\" not found",
                claim.claim_name
            ));
        }
        if claim.deleting {
            return Some(format!(
                "resourceclaim \"{}\" is being deleted",
                claim.claim_name
            ));
        }
        if claim.owned_by_other {
            return Some(format!(
                "ResourceClaim {}/{} was not created for pod {key} (pod is not owner)",
                pod.namespace, claim.claim_name
            ));
        }
    }
    None
}

impl Plugin for DynamicResources {
    const NAME: &'static str = NAME;
    const READS_POD: PodParts = PodParts::IDENTITY.union(PodParts::CLAIMS);
    const READS_DEVICES: bool = true;
    const IDLE_WITHOUT: PodParts = PodParts::CLAIMS;
    const PRE_ENQUEUE: bool = true;
    const RESERVE: bool = true;

    fn new(_config: &str) -> Result<Self, String> {
        Ok(DynamicResources::default())
    }

    fn node_upserted(&mut self, id: NodeId, node: &NodeInfo) {
        // Sent again for an allocation its numbers would not show.
        self.answers.forget(id);
        // A node is sent again whenever one of its devices is allocated or freed; its devices'
        // numbers stand as long as what a selector reads of them is unchanged, which a
        // comparison tells without building (and hashing) each device's key again.
        if self
            .node_devices
            .get(id as usize)
            .is_some_and(|numbers| self.numbers_stand(numbers, &node.device_pools))
        {
            return;
        }
        if let Some(old) = self.node_devices.get_mut(id as usize) {
            self.held_numbers -= old.iter().map(Vec::len).sum::<usize>();
            old.clear();
        }
        if node.device_pools.is_empty() {
            return;
        }
        let mut numbers = Vec::with_capacity(node.device_pools.len());
        for pool in &node.device_pools {
            let mut of_pool = Vec::with_capacity(pool.devices.len());
            for device in &pool.devices {
                let key = match_key(&pool.driver, device);
                let next = self.devices.len() as u32;
                let number = *self.device_ids.entry(key.clone()).or_insert(next);
                if number == next {
                    self.devices.push(key);
                }
                of_pool.push(number);
            }
            numbers.push(of_pool);
        }
        self.held_numbers += numbers.iter().map(Vec::len).sum::<usize>();
        if self.node_devices.len() <= id as usize {
            self.node_devices.resize_with(id as usize + 1, Vec::new);
        }
        self.node_devices[id as usize] = numbers;
    }

    fn pre_enqueue(&mut self, pod: &Pod) -> Option<Failure> {
        claims_missing(pod).map(Failure::unresolvable)
    }

    fn prepare(&mut self, pod: &Pod, _nodes: &Nodes) -> PodPlan {
        self.pod = PodState::default();
        self.release_unheld_devices();
        let plan = |filter| PodPlan {
            filter,
            score: false,
        };
        if pod.claims.is_empty() {
            return plan(FilterPlan::Skip);
        }
        if let Some(missing) = claims_missing(pod) {
            return plan(FilterPlan::Reject(Failure::unresolvable(missing)));
        }
        let mut state = PodState::default();
        for claim in &pod.claims {
            match &claim.allocated {
                Some(allocated) => {
                    if !allocated.reserved_for_pod && allocated.reserved_count >= MAX_RESERVED_FOR {
                        return plan(FilterPlan::Reject(Failure::unresolvable(REASON_IN_USE)));
                    }
                    if let Some(terms) = &allocated.node_selector {
                        state
                            .reachable_from
                            .push(terms.iter().filter_map(|t| parse_term(t).ok()).collect());
                    }
                }
                None => match self.claim_plan(pod, claim) {
                    Ok(claim_plan) => state.plans.push(claim_plan),
                    Err(failure) => return plan(FilterPlan::Reject(failure)),
                },
            }
        }
        if !state.plans.is_empty() {
            self.answers.hold_for(&state.plans);
        }
        self.pod = state;
        plan(FilterPlan::Run)
    }

    fn reserve(&mut self, _pod: &Pod, node: &NodeInfo) -> Result<Reservation, Failure> {
        if self.pod.plans.is_empty() {
            return Ok(Reservation::default());
        }
        let numbers = self.numbers_of(&node.device_pools);
        let mut matcher = NodeMatcher {
            plugin: self,
            pools: &node.device_pools,
            numbers: &numbers,
        };
        match allocator::allocate(&node.device_pools, &self.pod.plans, &mut matcher) {
            Ok(Some(claims)) => Ok(Reservation {
                claims,
                ..Reservation::default()
            }),
            Ok(None) => Err(Failure::unresolvable(REASON_CANNOT_ALLOCATE)),
            Err(e) => Err(Failure::error(e)),
        }
    }
}

impl DynamicResources {
    /// The allocation plan of an unallocated claim, or PreFilter's failure: a request without a
    /// class is an error, one naming a class that does not exist keeps the pod unschedulable.
    fn claim_plan(&mut self, pod: &Pod, claim: &PodClaim) -> Result<ClaimPlan, Failure> {
        let mut requests = Vec::with_capacity(claim.requests.len());
        for request in &claim.requests {
            let sub_requests: Vec<(&DeviceRequest, Option<String>)> =
                if request.first_available.is_empty() {
                    vec![(request, None)]
                } else {
                    request
                        .first_available
                        .iter()
                        .map(|sub| (sub, Some(sub.name.clone())))
                        .collect()
                };
            let mut alternatives = Vec::with_capacity(sub_requests.len());
            for (alternative, sub_name) in sub_requests {
                let name = match &sub_name {
                    Some(sub) => format!("{}/{sub}", request.name),
                    None => request.name.clone(),
                };
                if alternative.class_name.is_empty() {
                    return Err(Failure::error(format!(
                        "request {name}: unsupported request type"
                    )));
                }
                if !alternative.class_found {
                    return Err(Failure::unresolvable(format!(
                        "request {name}: device class {} does not exist",
                        alternative.class_name
                    )));
                }
                alternatives.push(Alternative {
                    sub_name,
                    mode: alternative.mode,
                    admin_access: alternative.admin_access,
                    selectors: self.selector_set(alternative),
                });
            }
            requests.push(RequestPlan {
                name: request.name.clone(),
                alternatives,
            });
        }
        Ok(ClaimPlan {
            name: claim.claim_name.clone(),
            display: format!("{}/{}", pod.namespace, claim.claim_name),
            requests,
            constraints: claim
                .constraints
                .iter()
                .filter(|c| !c.match_attribute.is_empty())
                .map(|c| ConstraintPlan {
                    requests: c.requests.clone(),
                    attribute: c.match_attribute.clone(),
                })
                .collect(),
        })
    }
}

impl FilterPlugin for DynamicResources {
    fn filter(&self, _pod: &Pod, node: &NodeInfo) -> Verdict {
        let numbers = self.numbers_of(&node.device_pools);
        self.verdict(node, &numbers)
    }

    fn filter_batch(&mut self, _pod: &Pod, nodes: &Nodes, ids: &[NodeId], out: &mut FilterResults) {
        // The answers are the mirror's nodes': `filter` may be shown another node, so only the
        // batch, which reads the mirror, keeps them.
        let held = !self.pod.plans.is_empty();
        for &id in ids {
            let Some(node) = nodes.get(id) else {
                out.push(Err(Nodes::unknown(id)));
                continue;
            };
            let known = if held { self.answers.get(id) } else { None };
            let allocates = match known {
                Some(allocates) => allocates,
                None => match self.allocates_at(id, node) {
                    Ok(allocates) => {
                        if held {
                            self.answers.set(id, allocates);
                        }
                        allocates
                    }
                    Err(e) => {
                        out.push(Err(Failure::error(e)));
                        continue;
                    }
                },
            };
            out.push(self.verdict_of(allocates, node));
        }
    }
}

wasched_sdk::export_plugin!(DynamicResources: filter);

#[cfg(not(target_arch = "wasm32"))]
mod cases;
#[cfg(not(target_arch = "wasm32"))]
pub use cases::cases;
