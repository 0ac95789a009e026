//! The optional interfaces a component may export beside the `plugin` world (`batched`,
//! `encoded`, `stages`, `reserve`, `details`): their names, how they are found and type-checked when an
//! instance starts, and what the host asks of them once.

use super::*;

/// The interface through which a component takes held-back mirror updates with the next pod.
pub const BATCHED_INTERFACE: &str = "wasched:plugin/batched@0.2.1";

pub(super) type BatchedSetPod = TypedFunc<(wit::MirrorChanges, wit::Pod), (wit::PodPlan,)>;

/// The interface through which a component takes its pods and held-back updates as bytes.
pub const ENCODED_INTERFACE: &str = "wasched:plugin/encoded@0.2.1";

/// The functions of [`ENCODED_INTERFACE`], type-checked when the instance starts.
#[derive(Clone, Copy)]
pub(super) struct EncodedExports {
    pub(super) apply: Func,
    pub(super) apply_and_set_pod: Func,
    pub(super) upsert_nodes: Func,
}

impl EncodedExports {
    pub(super) fn apply(&self) -> TypedFunc<(&[u8],), ()> {
        // SAFETY: `encoded_exports` checked this type when the instance started.
        unsafe { TypedFunc::new_unchecked(self.apply) }
    }

    pub(super) fn apply_and_set_pod(&self) -> TypedFunc<(&[u8],), (wit::PodPlan,)> {
        // SAFETY: as in `apply`.
        unsafe { TypedFunc::new_unchecked(self.apply_and_set_pod) }
    }

    pub(super) fn upsert_nodes(&self) -> TypedFunc<(&[u8],), ()> {
        // SAFETY: as in `apply`.
        unsafe { TypedFunc::new_unchecked(self.upsert_nodes) }
    }
}

/// The functions of [`ENCODED_INTERFACE`] of `instance`, if it exports it.
pub(super) fn encoded_exports(
    store: &mut Store<StoreState>,
    instance: &Instance,
) -> wasmtime::Result<Option<EncodedExports>> {
    let Some([apply, apply_and_set_pod, upsert_nodes]) = interface_funcs(
        store,
        instance,
        ENCODED_INTERFACE,
        ["apply", "apply-and-set-pod", "upsert-nodes"],
    )?
    else {
        return Ok(None);
    };
    apply.typed::<(&[u8],), ()>(&*store)?;
    apply_and_set_pod.typed::<(&[u8],), (wit::PodPlan,)>(&*store)?;
    upsert_nodes.typed::<(&[u8],), ()>(&*store)?;
    Ok(Some(EncodedExports {
        apply,
        apply_and_set_pod,
        upsert_nodes,
    }))
}

/// The functions `names` of `interface`, if `instance` exports the interface (an error if it
/// lacks one of them).
pub(super) fn interface_funcs<const N: usize>(
    store: &mut Store<StoreState>,
    instance: &Instance,
    interface: &str,
    names: [&str; N],
) -> wasmtime::Result<Option<[Func; N]>> {
    let Some(interface) = instance.get_export_index(&mut *store, None, interface) else {
        return Ok(None);
    };
    let mut funcs = Vec::with_capacity(N);
    for name in names {
        let func = instance
            .get_export_index(&mut *store, Some(&interface), name)
            .and_then(|index| instance.get_func(&mut *store, index))
            .ok_or_else(|| wasmtime::Error::msg(format!("it lacks the function {name}")))?;
        funcs.push(func);
    }
    Ok(funcs.try_into().ok())
}

/// The interface through which a component takes part in PreEnqueue, Permit and Unreserve.
pub const STAGES_INTERFACE: &str = "wasched:plugin/stages@0.2.1";

/// The functions of [`STAGES_INTERFACE`], type-checked when the instance starts.
#[derive(Clone, Copy)]
pub(super) struct StageExports {
    pub(super) stages: TypedFunc<(), (wit_stages::StageSet,)>,
    pub(super) pre_enqueue: TypedFunc<(wit_stages::StagedPod,), (Option<wit::Failure>,)>,
    pub(super) permit: TypedFunc<(wit_stages::StagedPod, String), (wit_stages::PermitAnswer,)>,
    pub(super) unreserve: TypedFunc<(wit_stages::StagedPod, String), ()>,
}

/// The functions of [`STAGES_INTERFACE`] of `instance`, if it exports it.
pub(super) fn stage_exports(
    store: &mut Store<StoreState>,
    instance: &Instance,
) -> wasmtime::Result<Option<StageExports>> {
    let Some([stages, pre_enqueue, permit, unreserve]) = interface_funcs(
        store,
        instance,
        STAGES_INTERFACE,
        ["stages", "pre-enqueue", "permit", "unreserve"],
    )?
    else {
        return Ok(None);
    };
    Ok(Some(StageExports {
        stages: stages.typed(&*store)?,
        pre_enqueue: pre_enqueue.typed(&*store)?,
        permit: permit.typed(&*store)?,
        unreserve: unreserve.typed(&*store)?,
    }))
}

/// The interface through which a component takes part in Reserve.
pub const RESERVE_INTERFACE: &str = "wasched:plugin/reserve@0.2.1";

/// `reserves` and `reserve` of [`RESERVE_INTERFACE`].
#[derive(Clone, Copy)]
pub(super) struct ReserveFunc {
    pub(super) reserves: TypedFunc<(), (bool,)>,
    pub(super) reserve: TypedFunc<(u32,), (Result<wit_reserve::Reservation, wit::Failure>,)>,
}

/// The functions of [`RESERVE_INTERFACE`] of `instance`, if it exports it.
pub(super) fn reserve_exports(
    store: &mut Store<StoreState>,
    instance: &Instance,
) -> wasmtime::Result<Option<ReserveFunc>> {
    let Some([reserves, reserve]) =
        interface_funcs(store, instance, RESERVE_INTERFACE, ["reserves", "reserve"])?
    else {
        return Ok(None);
    };
    Ok(Some(ReserveFunc {
        reserves: reserves.typed(&*store)?,
        reserve: reserve.typed(&*store)?,
    }))
}

/// Asks the component which stages it takes part in (once, after `init`, within its deadline)
/// and puts the answer into `descriptor`.
pub(super) fn declare_stages(
    store: &mut Store<StoreState>,
    stages: Option<&StageExports>,
    reserve: Option<&ReserveFunc>,
    descriptor: &mut sdk::Descriptor,
) -> wasmtime::Result<()> {
    if let Some(stages) = stages {
        let (set,) = stages.stages.call(&mut *store, ())?;
        descriptor.pre_enqueue = set.contains(wit_stages::StageSet::PRE_ENQUEUE);
        descriptor.permit = set.contains(wit_stages::StageSet::PERMIT);
    }
    if let Some(reserve) = reserve {
        (descriptor.reserve,) = reserve.reserves.call(&mut *store, ())?;
    }
    Ok(())
}

/// The interface through which a component asks for what the `types` records lack.
pub const DETAILS_INTERFACE: &str = "wasched:plugin/details@0.2.1";

/// `reads` of [`DETAILS_INTERFACE`].
pub(super) type DetailsFunc = TypedFunc<(), (wit_details::DetailParts,)>;

/// `reads` of [`DETAILS_INTERFACE`] of `instance`, if it exports it.
pub(super) fn details_export(
    store: &mut Store<StoreState>,
    instance: &Instance,
) -> wasmtime::Result<Option<DetailsFunc>> {
    let Some([reads]) = interface_funcs(store, instance, DETAILS_INTERFACE, ["reads"])? else {
        return Ok(None);
    };
    reads.typed(&*store).map(Some)
}

/// Asks the component which details it reads (once, after `init`) and puts the answer into
/// `descriptor`. Details travel only in the encoded form, so a component that asks for any
/// without exporting [`ENCODED_INTERFACE`] is refused.
pub(super) fn declare_details(
    store: &mut Store<StoreState>,
    reads: &DetailsFunc,
    encoded: bool,
    descriptor: &mut sdk::Descriptor,
) -> wasmtime::Result<()> {
    let (parts,) = reads
        .call(&mut *store, ())
        .map_err(|e| e.context("trapped saying which details it reads"))?;
    if parts != wit_details::DetailParts::empty() && !encoded {
        return Err(wasmtime::Error::msg(format!(
            "reads details ({parts:?}) but does not export {ENCODED_INTERFACE}, the only way they are sent"
        )));
    }
    descriptor.reads_node_images = parts.contains(wit_details::DetailParts::NODE_IMAGES);
    descriptor.reads_csi_nodes = parts.contains(wit_details::DetailParts::CSI_NODES);
    if parts.contains(wit_details::DetailParts::POD_IMAGES) {
        descriptor.reads_pod = descriptor.reads_pod | sdk::PodParts::IMAGES;
    }
    if parts.contains(wit_details::DetailParts::POD_VOLUMES) {
        descriptor.reads_pod = descriptor.reads_pod | sdk::PodParts::VOLUMES;
    }
    if parts.contains(wit_details::DetailParts::PLACED_POD_VOLUMES) {
        descriptor.reads_existing_pods = descriptor
            .reads_existing_pods
            .union(sdk::ExistingPodParts::VOLUMES);
    }
    Ok(())
}

/// The interface through which a component reads Dynamic Resource Allocation's objects.
pub const DEVICES_INTERFACE: &str = "wasched:plugin/devices@0.2.1";

/// The functions of [`DEVICES_INTERFACE`], type-checked when the instance starts.
#[derive(Clone, Copy)]
pub(super) struct DevicesExports {
    pub(super) reads: TypedFunc<(), (bool,)>,
    pub(super) pre_enqueue: Func,
    pub(super) reserve: TypedFunc<(u32,), (DevicesReserved,)>,
}

/// What `reserve` of [`DEVICES_INTERFACE`] returns.
pub(super) type DevicesReserved =
    Result<(wit_reserve::Reservation, Vec<wit_devices::ClaimAllocation>), wit::Failure>;

impl DevicesExports {
    pub(super) fn pre_enqueue(&self) -> TypedFunc<(&[u8],), (Option<wit::Failure>,)> {
        // SAFETY: `devices_exports` checked this type when the instance started.
        unsafe { TypedFunc::new_unchecked(self.pre_enqueue) }
    }
}

/// The functions of [`DEVICES_INTERFACE`] of `instance`, if it exports it.
pub(super) fn devices_exports(
    store: &mut Store<StoreState>,
    instance: &Instance,
) -> wasmtime::Result<Option<DevicesExports>> {
    let Some([reads, pre_enqueue, reserve]) = interface_funcs(
        store,
        instance,
        DEVICES_INTERFACE,
        ["reads", "pre-enqueue", "reserve"],
    )?
    else {
        return Ok(None);
    };
    pre_enqueue.typed::<(&[u8],), (Option<wit::Failure>,)>(&*store)?;
    Ok(Some(DevicesExports {
        reads: reads.typed(&*store)?,
        pre_enqueue,
        reserve: reserve.typed(&*store)?,
    }))
}

/// Asks the component whether it reads devices (once, after `init`) and puts the answer into
/// `descriptor`. Devices and claims travel only in the encoded form, as details do.
pub(super) fn declare_devices(
    store: &mut Store<StoreState>,
    devices: &DevicesExports,
    encoded: bool,
    descriptor: &mut sdk::Descriptor,
) -> wasmtime::Result<()> {
    let (reads,) = devices
        .reads
        .call(&mut *store, ())
        .map_err(|e| e.context("trapped saying whether it reads devices"))?;
    if reads && !encoded {
        return Err(wasmtime::Error::msg(format!(
            "reads devices but does not export {ENCODED_INTERFACE}, the only way they are sent"
        )));
    }
    descriptor.reads_devices = reads;
    if reads {
        descriptor.reads_pod = descriptor.reads_pod | sdk::PodParts::CLAIMS;
    }
    Ok(())
}

/// The interface through which a component reads gangs (0.2.1).
pub const GROUPS_INTERFACE: &str = "wasched:plugin/groups@0.2.1";

/// The functions of [`GROUPS_INTERFACE`], type-checked when the instance starts. Each takes the
/// pod encoded, so its typed form is made per call from the checked `Func`.
#[derive(Clone, Copy)]
pub(super) struct GroupsExports {
    pub(super) stages: TypedFunc<(), (wit_groups::GroupStages,)>,
    permit: Func,
    unreserve: Func,
    post_filter: Func,
    queue_sort: Func,
}

impl GroupsExports {
    pub(super) fn permit<'a>(
        &self,
    ) -> TypedFunc<(&'a [u8], String), (wit_groups::GroupPermitAnswer,)> {
        // SAFETY: `groups_exports` checked this type when the instance started.
        unsafe { TypedFunc::new_unchecked(self.permit) }
    }
    pub(super) fn unreserve<'a>(
        &self,
    ) -> TypedFunc<(&'a [u8], String), (Vec<wit_groups::Rejection>,)> {
        // SAFETY: as `permit`.
        unsafe { TypedFunc::new_unchecked(self.unreserve) }
    }
    pub(super) fn post_filter<'a>(
        &self,
    ) -> TypedFunc<(&'a [u8],), (wit_groups::PostFilterAnswer,)> {
        // SAFETY: as `permit`.
        unsafe { TypedFunc::new_unchecked(self.post_filter) }
    }
    pub(super) fn queue_sort<'a>(&self) -> TypedFunc<(&'a [u8], i64), (wit_groups::QueueKey,)> {
        // SAFETY: as `permit`.
        unsafe { TypedFunc::new_unchecked(self.queue_sort) }
    }
}

/// The functions of [`GROUPS_INTERFACE`] of `instance`, if it exports it.
pub(super) fn groups_exports(
    store: &mut Store<StoreState>,
    instance: &Instance,
) -> wasmtime::Result<Option<GroupsExports>> {
    let Some([stages, permit, unreserve, post_filter, queue_sort]) = interface_funcs(
        store,
        instance,
        GROUPS_INTERFACE,
        ["stages", "permit", "unreserve", "post-filter", "queue-sort"],
    )?
    else {
        return Ok(None);
    };
    permit.typed::<(&[u8], String), (wit_groups::GroupPermitAnswer,)>(&*store)?;
    unreserve.typed::<(&[u8], String), (Vec<wit_groups::Rejection>,)>(&*store)?;
    post_filter.typed::<(&[u8],), (wit_groups::PostFilterAnswer,)>(&*store)?;
    queue_sort.typed::<(&[u8], i64), (wit_groups::QueueKey,)>(&*store)?;
    Ok(Some(GroupsExports {
        stages: stages.typed(&*store)?,
        permit,
        unreserve,
        post_filter,
        queue_sort,
    }))
}

/// Asks the component which gang stages it takes part in (once, after `init`) and puts the
/// answer into `descriptor`. Groups travel only in the encoded form, as details do; Permit and
/// Unreserve come through [`GROUPS_INTERFACE`] once it reads groups.
pub(super) fn declare_groups(
    store: &mut Store<StoreState>,
    groups: &GroupsExports,
    encoded: bool,
    descriptor: &mut sdk::Descriptor,
) -> wasmtime::Result<()> {
    let (set,) = groups
        .stages
        .call(&mut *store, ())
        .map_err(|e| e.context("trapped saying which gang stages it takes part in"))?;
    let reads = set.contains(wit_groups::GroupStages::READS);
    if set != wit_groups::GroupStages::empty() && !(reads && encoded) {
        return Err(wasmtime::Error::msg(format!(
            "takes part in gang stages ({set:?}) without reading groups through {ENCODED_INTERFACE}, the only way they are sent"
        )));
    }
    descriptor.reads_groups = reads;
    if reads {
        descriptor.reads_pod = descriptor.reads_pod | sdk::PodParts::GROUP;
    }
    descriptor.post_filter = set.contains(wit_groups::GroupStages::POST_FILTER);
    descriptor.queue_sort = set.contains(wit_groups::GroupStages::QUEUE_SORT);
    Ok(())
}

/// A pod as the `stages` interface sends it.
pub(super) fn staged_pod(pod: &sdk::Pod) -> wit_stages::StagedPod {
    wit_stages::StagedPod {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        uid: pod.uid.clone(),
        labels: pairs(&pod.labels),
        annotations: pairs(&pod.annotations),
        priority: pod.priority,
        scheduling_gates: pod.scheduling_gates.clone(),
    }
}

/// Longest wait a Permit plugin may ask for: kube-scheduler caps it at 15 minutes too.
pub(super) const MAX_PERMIT_WAIT: Duration = Duration::from_secs(15 * 60);

/// `apply-and-set-pod` of `instance`, if it exports [`BATCHED_INTERFACE`].
pub(super) fn batched_export(
    store: &mut Store<StoreState>,
    instance: &Instance,
) -> wasmtime::Result<Option<BatchedSetPod>> {
    let Some([func]) = interface_funcs(store, instance, BATCHED_INTERFACE, ["apply-and-set-pod"])?
    else {
        return Ok(None);
    };
    func.typed(&*store).map(Some)
}

/// The interface through which a component whose plans depend on the pod alone takes usage
/// changes with its next filter or score call.
pub const USAGE_WITH_CALLS_INTERFACE: &str = "wasched:plugin/usage-with-calls@0.2.1";

/// A call of [`USAGE_WITH_CALLS_INTERFACE`]: the encoded changes and the node ids, then what the
/// plain call answers.
pub(super) type WithUsage<'a, Answer> = TypedFunc<(&'a [u8], &'a [u32]), (Answer,)>;

/// The calls of [`USAGE_WITH_CALLS_INTERFACE`], type-checked when the instance starts.
#[derive(Clone, Copy)]
pub(super) struct UsageWithCallsExports {
    pub(super) plans_ignore_usage: TypedFunc<(), (bool,)>,
    pub(super) apply_and_filter: Func,
    pub(super) apply_and_score: Func,
}

impl UsageWithCallsExports {
    pub(super) fn apply_and_filter<'a>(&self) -> WithUsage<'a, wit::FilterResults> {
        // SAFETY: `usage_with_calls_exports` checked this type when the instance started.
        unsafe { TypedFunc::new_unchecked(self.apply_and_filter) }
    }

    pub(super) fn apply_and_score<'a>(&self) -> WithUsage<'a, Vec<i64>> {
        // SAFETY: as in `apply_and_filter`.
        unsafe { TypedFunc::new_unchecked(self.apply_and_score) }
    }
}

/// The functions of [`USAGE_WITH_CALLS_INTERFACE`] of `instance`, if it exports it.
pub(super) fn usage_with_calls_exports(
    store: &mut Store<StoreState>,
    instance: &Instance,
) -> wasmtime::Result<Option<UsageWithCallsExports>> {
    let Some([plans_ignore_usage, apply_and_filter, apply_and_score]) = interface_funcs(
        store,
        instance,
        USAGE_WITH_CALLS_INTERFACE,
        ["plans-ignore-usage", "apply-and-filter", "apply-and-score"],
    )?
    else {
        return Ok(None);
    };
    apply_and_filter.typed::<(&[u8], &[u32]), (wit::FilterResults,)>(&*store)?;
    apply_and_score.typed::<(&[u8], &[u32]), (Vec<i64>,)>(&*store)?;
    Ok(Some(UsageWithCallsExports {
        plans_ignore_usage: plans_ignore_usage.typed(&*store)?,
        apply_and_filter,
        apply_and_score,
    }))
}

/// Asks the component whether its plans ignore usage (once, after `init`) and puts the answer
/// into `descriptor`. The held changes it then gets with its calls are bytes, so only a
/// component exporting [`ENCODED_INTERFACE`] may say yes.
pub(super) fn declare_usage_with_calls(
    store: &mut Store<StoreState>,
    exports: &UsageWithCallsExports,
    encoded: bool,
    descriptor: &mut sdk::Descriptor,
) -> wasmtime::Result<()> {
    let (ignores,) = exports
        .plans_ignore_usage
        .call(&mut *store, ())
        .map_err(|e| e.context("trapped saying whether its plans ignore usage"))?;
    if ignores && !encoded {
        return Err(wasmtime::Error::msg(format!(
            "says its plans ignore usage without {ENCODED_INTERFACE}, through which usage would come"
        )));
    }
    descriptor.plan_ignores_usage = ignores;
    Ok(())
}

/// The interface through which a component answers `set-pod` with a number for the common plans.
pub const PLAIN_PLANS_INTERFACE: &str = "wasched:plugin/plain-plans@0.2.1";

/// The interface whose `apply-and-plan` also tells when every node scores 0.
pub const ZERO_SCORES_INTERFACE: &str = "wasched:plugin/zero-scores@0.2.1";

/// The functions of [`PLAIN_PLANS_INTERFACE`], and `apply-and-plan` of
/// [`ZERO_SCORES_INTERFACE`] when the component has it, type-checked when the instance starts.
#[derive(Clone, Copy)]
pub(super) struct PlainPlansExports {
    pub(super) apply_and_plan: Func,
    pub(super) last_plan: TypedFunc<(), (wit::PodPlan,)>,
    pub(super) apply_and_plan_scoring: Option<Func>,
}

impl PlainPlansExports {
    /// The `apply-and-plan` to call, and whether its numbers tell zero scores: the one of
    /// [`ZERO_SCORES_INTERFACE`] when the component has it.
    pub(super) fn apply_and_plan(&self) -> (TypedFunc<(&[u8],), (u32,)>, bool) {
        let (func, scoring) = match self.apply_and_plan_scoring {
            Some(func) => (func, true),
            None => (self.apply_and_plan, false),
        };
        // SAFETY: `plain_plans_exports` checked both functions' type when the instance started.
        (unsafe { TypedFunc::new_unchecked(func) }, scoring)
    }
}

/// The functions of [`PLAIN_PLANS_INTERFACE`] (and [`ZERO_SCORES_INTERFACE`]) of `instance`, if
/// it exports them.
pub(super) fn plain_plans_exports(
    store: &mut Store<StoreState>,
    instance: &Instance,
) -> wasmtime::Result<Option<PlainPlansExports>> {
    let Some([apply_and_plan, last_plan]) = interface_funcs(
        store,
        instance,
        PLAIN_PLANS_INTERFACE,
        ["apply-and-plan", "last-plan"],
    )?
    else {
        return Ok(None);
    };
    apply_and_plan.typed::<(&[u8],), (u32,)>(&*store)?;
    let in_zero_scores = |e: wasmtime::Error| e.context(format!("in {ZERO_SCORES_INTERFACE}"));
    let apply_and_plan_scoring =
        match interface_funcs(store, instance, ZERO_SCORES_INTERFACE, ["apply-and-plan"])
            .map_err(in_zero_scores)?
        {
            Some([scoring]) => {
                scoring
                    .typed::<(&[u8],), (u32,)>(&*store)
                    .map_err(in_zero_scores)?;
                Some(scoring)
            }
            None => None,
        };
    Ok(Some(PlainPlansExports {
        apply_and_plan,
        last_plan: last_plan.typed(&*store)?,
        apply_and_plan_scoring,
    }))
}
