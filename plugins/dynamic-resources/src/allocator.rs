//! kube's structured allocator (`dynamic-resource-allocation/structured`, the stable channel):
//! an exhaustive search, claim by claim and request by request, trying each eligible device in
//! pool order and backtracking, that stops at the first full solution.

use wasched_sdk::{
    AllocationMode, AttributeValue, ClaimAllocation, Device, DevicePool, DeviceResult,
};

/// kube's `AllocationResultsMaxSize`: the most devices one claim can be allocated.
pub const MAX_DEVICES_PER_CLAIM: usize = 32;

/// A claim to allocate, as PreFilter prepared it.
#[derive(Debug, Clone)]
pub struct ClaimPlan {
    /// The claim's name.
    pub name: String,
    /// `namespace/name`, as kube's messages name it.
    pub display: String,
    /// Its requests, in order.
    pub requests: Vec<RequestPlan>,
    /// Its `matchAttribute` constraints.
    pub constraints: Vec<ConstraintPlan>,
}

impl ClaimPlan {
    /// Whether a search for `self` goes as one for `other` on any node: the same requests and
    /// constraints, whatever the claims' names (which only name results and errors).
    pub fn same_search(&self, other: &ClaimPlan) -> bool {
        self.requests == other.requests && self.constraints == other.constraints
    }
}

/// A request: one alternative, or a `firstAvailable` list of them tried in order.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestPlan {
    /// The request's name.
    pub name: String,
    /// Its alternatives (one for an `exactly` request).
    pub alternatives: Vec<Alternative>,
}

/// What one alternative of a request asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Alternative {
    /// The sub-request's name, for a `firstAvailable` one.
    pub sub_name: Option<String>,
    /// How many devices.
    pub mode: AllocationMode,
    /// `adminAccess`.
    pub admin_access: bool,
    /// Which selectors a device must match (the matcher's key).
    pub selectors: u32,
}

/// A `matchAttribute` constraint of a claim.
#[derive(Debug, Clone, PartialEq)]
pub struct ConstraintPlan {
    /// The requests it binds (`request` or `request/sub`); empty for all.
    pub requests: Vec<String>,
    /// The fully qualified attribute.
    pub attribute: String,
}

/// Whether a device matches a set of selectors; an error ends the allocation (kube's
/// `statusError`).
pub trait Matcher {
    /// Whether device `device_index` of the node's pool `pool_index` matches selector set
    /// `selectors` of claim `claim`.
    fn matches(
        &mut self,
        selectors: u32,
        claim: &ClaimPlan,
        pool_index: usize,
        device_index: usize,
    ) -> Result<bool, String>;
}

/// Allocates every claim of `claims` from `pools` (the node's): the devices per claim, none when
/// there is no solution, an error when a claim cannot be allocated anywhere (kube's errors).
pub fn allocate<M: Matcher + ?Sized>(
    pools: &[DevicePool],
    claims: &[ClaimPlan],
    matcher: &mut M,
) -> Result<Option<Vec<ClaimAllocation>>, String> {
    let mut scratch = Scratch::default();
    let Some(search) = search(pools, claims, matcher, &mut scratch)? else {
        return Ok(None);
    };
    Ok(Some(
        claims
            .iter()
            .zip(search.results.iter())
            .map(|(claim, taken)| ClaimAllocation {
                claim: claim.name.clone(),
                devices: taken
                    .iter()
                    .map(|&(step, device)| search.result(step, device))
                    .collect(),
            })
            .collect(),
    ))
}

/// Whether [`allocate`] finds a solution, without writing it out: what a filter asks of each
/// node (the names each device result carries cost four strings a device). `scratch` is the
/// search's working space, kept by the caller from one node to the next.
pub fn allocates<M: Matcher + ?Sized>(
    pools: &[DevicePool],
    claims: &[ClaimPlan],
    matcher: &mut M,
    scratch: &mut Scratch,
) -> Result<bool, String> {
    Ok(search(pools, claims, matcher, scratch)?.is_some())
}

/// A search's working space: a filter keeps one for all the nodes it examines, so that a node's
/// search allocates nothing it sizes by the claims (they are the pod's, the same on every node).
#[derive(Default)]
pub struct Scratch {
    all_devices: Vec<Vec<Vec<Option<Vec<DeviceRef>>>>>,
    allocating: Vec<(DeviceRef, usize)>,
    results: Vec<Vec<(Step, DeviceRef)>>,
    constraints: Vec<Vec<ConstraintState>>,
}

impl Scratch {
    /// Empties the space for a search of `claims`, made again where their shape differs from
    /// the last search's.
    ///
    /// It runs for every examined node with the same claims, so the lists are resized only when
    /// their length differs: as WebAssembly each resize was a call (`reset` was 3% of a `dra`
    /// run's samples, against 0.9% natively).
    fn reset(&mut self, claims: &[ClaimPlan]) {
        fit(&mut self.all_devices, claims.len(), Vec::new);
        for (alternatives, claim) in self.all_devices.iter_mut().zip(claims) {
            fit(alternatives, claim.requests.len(), Vec::new);
            for (devices, request) in alternatives.iter_mut().zip(&claim.requests) {
                devices.iter_mut().for_each(|all| *all = None);
                fit(devices, request.alternatives.len(), || None);
            }
        }
        self.allocating.clear();
        fit(&mut self.results, claims.len(), Vec::new);
        self.results.iter_mut().for_each(Vec::clear);
        fit(&mut self.constraints, claims.len(), Vec::new);
        for (states, claim) in self.constraints.iter_mut().zip(claims) {
            states
                .iter_mut()
                .for_each(|state| *state = ConstraintState::default());
            fit(states, claim.constraints.len(), ConstraintState::default);
        }
    }
}

/// Makes `list` `len` long, new items made by `make`, unless it is already.
#[inline(always)]
fn fit<T>(list: &mut Vec<T>, len: usize, make: impl FnMut() -> T) {
    if list.len() != len {
        list.resize_with(len, make);
    }
}

/// The search behind [`allocate`], done: `None` when there is no solution. Generic over the
/// matcher, which it asks about every device of the node: a call through `dyn` could not be
/// inlined, and as WebAssembly it is an indirect call checked against the table every time.
fn search<'a, M: Matcher + ?Sized>(
    pools: &'a [DevicePool],
    claims: &'a [ClaimPlan],
    matcher: &'a mut M,
    scratch: &'a mut Scratch,
) -> Result<Option<Search<'a, M>>, String> {
    scratch.reset(claims);
    let Scratch {
        all_devices,
        allocating,
        results,
        constraints,
    } = scratch;
    let mut search = Search {
        pools,
        claims,
        matcher,
        all_devices,
        allocating,
        results,
        constraints,
    };
    for (claim_index, claim) in claims.iter().enumerate() {
        let mut min_devices = 0;
        for (request_index, request) in claim.requests.iter().enumerate() {
            let mut fewest = usize::MAX;
            for (alternative_index, alternative) in request.alternatives.iter().enumerate() {
                let count = match alternative.mode {
                    AllocationMode::ExactCount(n) => n as usize,
                    AllocationMode::All => {
                        let all = search.all_matching(claim_index, request, alternative)?;
                        let n = all.len();
                        search.all_devices[claim_index][request_index][alternative_index] =
                            Some(all);
                        n
                    }
                };
                fewest = fewest.min(count);
            }
            min_devices += fewest;
        }
        if min_devices > MAX_DEVICES_PER_CLAIM {
            return Err(format!(
                "claim {}: number of requested devices {min_devices} exceeds the claim limit of {MAX_DEVICES_PER_CLAIM}",
                claim.display
            ));
        }
    }
    if !search.allocate_one(Step::default(), false)? {
        return Ok(None);
    }
    Ok(Some(search))
}

/// Where the search is: which device of which alternative of which request of which claim.
#[derive(Clone, Copy, Default)]
struct Step {
    claim: usize,
    request: usize,
    alternative: usize,
    device: usize,
}

#[derive(Default, Clone)]
struct ConstraintState {
    value: Option<AttributeValue>,
    devices: usize,
}

/// A device by pool and index in the node's pools.
type DeviceRef = (usize, usize);

struct Search<'a, M: Matcher + ?Sized> {
    pools: &'a [DevicePool],
    claims: &'a [ClaimPlan],
    matcher: &'a mut M,
    /// Per claim, request and alternative, the devices an `All` alternative takes.
    all_devices: &'a mut Vec<Vec<Vec<Option<Vec<DeviceRef>>>>>,
    /// Devices taken in this attempt, with the claim taking each.
    allocating: &'a mut Vec<(DeviceRef, usize)>,
    /// Per claim, the devices taken so far and the step that took each.
    results: &'a mut Vec<Vec<(Step, DeviceRef)>>,
    constraints: &'a mut Vec<Vec<ConstraintState>>,
}

impl<M: Matcher + ?Sized> Search<'_, M> {
    fn device(&self, (pool, index): DeviceRef) -> (&DevicePool, &Device) {
        let pool = &self.pools[pool];
        (pool, &pool.devices[index])
    }

    fn id(&self, device: DeviceRef) -> String {
        let (pool, d) = self.device(device);
        format!("{}/{}/{}", pool.driver, pool.name, d.name)
    }

    /// The devices an `All` alternative takes: every matching device of the node's pools, none
    /// of which may be incomplete.
    fn all_matching(
        &mut self,
        claim_index: usize,
        request: &RequestPlan,
        alternative: &Alternative,
    ) -> Result<Vec<DeviceRef>, String> {
        let claims = self.claims;
        let claim = &claims[claim_index];
        let name = full_name(request, alternative);
        let mut all = Vec::new();
        let pools = self.pools;
        for (p, pool) in pools.iter().enumerate() {
            if !pool.complete {
                return Err(format!(
                    "claim {}, request {name}: asks for all devices, but resource pool {}/{} is currently being updated",
                    claim.display, pool.driver, pool.name
                ));
            }
            for d in 0..pool.devices.len() {
                if self.matcher.matches(alternative.selectors, claim, p, d)? {
                    all.push((p, d));
                }
            }
        }
        Ok(all)
    }

    #[inline(always)]
    fn in_use(&self, device: DeviceRef, claim: usize, admin_access: bool) -> bool {
        if admin_access {
            self.allocating
                .iter()
                .any(|&(d, c)| d == device && c == claim)
        } else {
            self.device(device).1.allocated || self.allocating.iter().any(|&(d, _)| d == device)
        }
    }

    /// Whether the alternative could take `needed` devices at all: that many are free, in a
    /// complete pool and match its selectors (a selector that fails counts as a match here, so
    /// that the search meets the failure where kube's does). It stops counting at `needed`.
    fn has_usable(&mut self, claim_index: usize, alternative: &Alternative, needed: usize) -> bool {
        let (claims, pools) = (self.claims, self.pools);
        let mut usable = 0;
        for (p, pool) in pools.iter().enumerate().filter(|(_, pool)| pool.complete) {
            for d in 0..pool.devices.len() {
                if !self.in_use((p, d), claim_index, alternative.admin_access)
                    && self
                        .matcher
                        .matches(alternative.selectors, &claims[claim_index], p, d)
                        .unwrap_or(true)
                {
                    usable += 1;
                    if usable >= needed {
                        return true;
                    }
                }
            }
        }
        false
    }

    fn allocate_one(&mut self, step: Step, in_alternative: bool) -> Result<bool, String> {
        let claims = self.claims;
        let Some(claim) = claims.get(step.claim) else {
            return Ok(true);
        };
        let Some(request) = claim.requests.get(step.request) else {
            return self.allocate_one(
                Step {
                    claim: step.claim + 1,
                    ..Step::default()
                },
                false,
            );
        };
        if !in_alternative {
            return self.allocate_first_available(step, request.alternatives.len());
        }
        let alternative = &request.alternatives[step.alternative];
        let all = self.all_devices[step.claim][step.request][step.alternative].clone();
        let needed = match (&alternative.mode, &all) {
            (AllocationMode::All, Some(all)) if all.is_empty() => return Ok(false),
            (AllocationMode::All, Some(all)) => all.len(),
            (AllocationMode::ExactCount(n), _) => *n as usize,
            (AllocationMode::All, None) => return Ok(false),
        };
        if step.device >= needed {
            return self.allocate_one(
                Step {
                    request: step.request + 1,
                    alternative: 0,
                    device: 0,
                    ..step
                },
                false,
            );
        }
        if self.results[step.claim].len() + needed - step.device > MAX_DEVICES_PER_CLAIM {
            return Ok(false);
        }
        let next = Step {
            device: step.device + 1,
            ..step
        };
        if let Some(all) = all {
            return self.take_and_go_on(step, all[step.device], next);
        }
        // Without this the search below would try every order of the free devices before
        // finding that there are too few (8! orders for a node with 8 of 9 GPUs free), on every
        // node, for every attempt of a pod that cannot fit anywhere. Only branches without a
        // solution are cut, so the devices chosen are kube's.
        if step.device == 0 && !self.has_usable(step.claim, alternative, needed) {
            return Ok(false);
        }
        let pools = self.pools;
        for (p, pool) in pools.iter().enumerate() {
            if !pool.complete {
                continue;
            }
            for d in 0..pool.devices.len() {
                let device = (p, d);
                if self.in_use(device, step.claim, alternative.admin_access)
                    || !self.matcher.matches(alternative.selectors, claim, p, d)?
                    || !self.take(step, device, false)?
                {
                    continue;
                }
                if self.allocate_one(next, true)? {
                    return Ok(true);
                }
                self.give_back(step, device);
            }
        }
        Ok(false)
    }

    /// Tries the alternatives of the request at `step` in order (kube's `firstAvailable`): the
    /// first with which everything after it can be allocated is chosen.
    fn allocate_first_available(
        &mut self,
        step: Step,
        alternatives: usize,
    ) -> Result<bool, String> {
        for alternative in 0..alternatives {
            let step = Step {
                alternative,
                device: 0,
                ..step
            };
            if self.allocate_one(step, true)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// An `All` request's next device: it must be free and fit the constraints, or there is no
    /// solution with what was taken before.
    fn take_and_go_on(
        &mut self,
        step: Step,
        device: DeviceRef,
        next: Step,
    ) -> Result<bool, String> {
        if !self.take(step, device, true)? {
            return Ok(false);
        }
        if self.allocate_one(next, true)? {
            return Ok(true);
        }
        self.give_back(step, device);
        Ok(false)
    }

    /// Takes `device` for the alternative at `step` if it is free and the claim's constraints
    /// allow it; `must` (an `All` request) makes a violated constraint an error.
    fn take(&mut self, step: Step, device: DeviceRef, must: bool) -> Result<bool, String> {
        let (claims, pools) = (self.claims, self.pools);
        let claim = &claims[step.claim];
        let request = &claim.requests[step.request];
        let alternative = &request.alternatives[step.alternative];
        if self.in_use(device, step.claim, alternative.admin_access) {
            return Ok(false);
        }
        let pool = &pools[device.0];
        let d = &pool.devices[device.1];
        let mut added = Vec::new();
        for (i, constraint) in claim.constraints.iter().enumerate() {
            if !binds(constraint, request, alternative) {
                continue;
            }
            let state = &self.constraints[step.claim][i];
            let Some(value) = lookup(&pool.driver, d, &constraint.attribute) else {
                return self.violated(step, device, must, &added);
            };
            if state.devices > 0 && state.value.as_ref() != Some(value) {
                return self.violated(step, device, must, &added);
            }
            let state = &mut self.constraints[step.claim][i];
            state.value = Some(value.clone());
            state.devices += 1;
            added.push(i);
        }
        self.results[step.claim].push((step, device));
        self.allocating.push((device, step.claim));
        Ok(true)
    }

    fn violated(
        &mut self,
        step: Step,
        device: DeviceRef,
        must: bool,
        added: &[usize],
    ) -> Result<bool, String> {
        for &i in added {
            self.constraints[step.claim][i].devices -= 1;
        }
        if must {
            let claim = &self.claims[step.claim];
            let request = &claim.requests[step.request];
            return Err(format!(
                "claim {}, request {}: cannot add device {} because a claim constraint would not be satisfied",
                claim.display,
                full_name(request, &request.alternatives[step.alternative]),
                self.id(device)
            ));
        }
        Ok(false)
    }

    fn give_back(&mut self, step: Step, device: DeviceRef) {
        let claim = &self.claims[step.claim];
        let request = &claim.requests[step.request];
        let alternative = &request.alternatives[step.alternative];
        for (i, constraint) in claim.constraints.iter().enumerate() {
            if binds(constraint, request, alternative) {
                self.constraints[step.claim][i].devices -= 1;
            }
        }
        self.results[step.claim].pop();
        if let Some(at) = self.allocating.iter().rposition(|&(d, _)| d == device) {
            self.allocating.remove(at);
        }
    }
}

/// `request` or `request/sub`.
impl<M: Matcher + ?Sized> Search<'_, M> {
    /// The result of device `device`, taken at `step`.
    fn result(&self, step: Step, device: DeviceRef) -> DeviceResult {
        let request = &self.claims[step.claim].requests[step.request];
        let alternative = &request.alternatives[step.alternative];
        let pool = &self.pools[device.0];
        DeviceResult {
            request: full_name(request, alternative),
            driver: pool.driver.clone(),
            pool: pool.name.clone(),
            device: pool.devices[device.1].name.clone(),
            admin_access: alternative.admin_access,
        }
    }
}

fn full_name(request: &RequestPlan, alternative: &Alternative) -> String {
    match &alternative.sub_name {
        Some(sub) => format!("{}/{sub}", request.name),
        None => request.name.clone(),
    }
}

/// Whether `constraint` applies to devices of this request alternative.
fn binds(constraint: &ConstraintPlan, request: &RequestPlan, alternative: &Alternative) -> bool {
    constraint.requests.is_empty()
        || constraint.requests.contains(&request.name)
        || constraint
            .requests
            .contains(&full_name(request, alternative))
}

/// The value of the fully qualified `attribute` of `device`: by that name, or by its bare name
/// when its domain is the driver's.
fn lookup<'d>(driver: &str, device: &'d Device, attribute: &str) -> Option<&'d AttributeValue> {
    let by_name = |name: &str| {
        device
            .attributes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
    };
    by_name(attribute).or_else(|| {
        let (domain, id) = attribute.split_once('/')?;
        (domain == driver).then(|| by_name(id)).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Matches every device, counting how often it was asked.
    struct Counting(usize);

    impl Matcher for Counting {
        fn matches(&mut self, _: u32, _: &ClaimPlan, _: usize, _: usize) -> Result<bool, String> {
            self.0 += 1;
            Ok(true)
        }
    }

    fn gpus(free: usize, allocated: usize) -> DevicePool {
        DevicePool {
            driver: "gpu.example.com".into(),
            name: "n1".into(),
            complete: true,
            devices: (0..free + allocated)
                .map(|i| Device {
                    name: format!("gpu-{i}"),
                    allocated: i < allocated,
                    ..Device::default()
                })
                .collect(),
        }
    }

    fn claim(count: u32) -> ClaimPlan {
        ClaimPlan {
            name: "c".into(),
            display: "ns/c".into(),
            requests: vec![RequestPlan {
                name: "gpus".into(),
                alternatives: vec![Alternative {
                    sub_name: None,
                    mode: AllocationMode::ExactCount(count),
                    admin_access: false,
                    selectors: 0,
                }],
            }],
            constraints: Vec::new(),
        }
    }

    #[test]
    fn too_few_free_devices_fail_without_trying_every_order_of_them() {
        let pools = [gpus(8, 1)];
        let mut matcher = Counting(0);
        let result = allocate(&pools, &[claim(9)], &mut matcher).unwrap();
        assert_eq!(result, None, "8 free GPUs cannot hold 9");
        assert!(
            matcher.0 <= 2 * 9,
            "{} selector checks for 9 devices: the search tried orders of the free ones",
            matcher.0
        );

        let mut matcher = Counting(0);
        let result = allocate(&pools, &[claim(8)], &mut matcher).unwrap();
        let devices: Vec<String> = result.unwrap()[0]
            .devices
            .iter()
            .map(|d| d.device.clone())
            .collect();
        assert_eq!(
            devices,
            (1..=8).map(|i| format!("gpu-{i}")).collect::<Vec<_>>()
        );
    }
}
