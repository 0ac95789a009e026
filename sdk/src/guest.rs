//! Component glue (wasm32 only): the exports of the `staged-plugin` world (the `plugin` world,
//! `apply-and-set-pod`, the same with its input as bytes, and PreEnqueue/Permit/Unreserve), converting between the generated
//! WIT types (or the bytes) and the SDK's types and delegating to one [`Driver`] per component
//! instance.

use std::any::TypeId;
use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::ptr::NonNull;

use crate::types as sdk;
use crate::{Driver, Exported};

#[allow(missing_docs, clippy::all)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "staged-plugin",
        pub_export_macro: true,
        export_macro_name: "__export_plugin_world",
        default_bindings_module: "wasched_sdk::guest::bindings",
    });
}

use bindings::wasched::plugin::types as wit;

/// The instance's driver, with its type. A component instance is single-threaded, so plain
/// interior mutability is enough; the `Sync` claim below only holds because wasm32 has no threads
/// here. The type is kept beside the pointer rather than behind `dyn Any`, so finding the driver,
/// which every export does, compares with a constant instead of calling through a vtable (2.4% of
/// a `set-pod` made in turn with other instances, as a cycle makes it).
struct Slot(UnsafeCell<Option<(TypeId, NonNull<()>)>>);

unsafe impl Sync for Slot {}

static SLOT: Slot = Slot(UnsafeCell::new(None));

fn driver<P: Exported>() -> &'static mut Driver<P> {
    // SAFETY: single-threaded instance, and no export re-enters another while this borrow lives.
    let slot = unsafe { &*SLOT.0.get() };
    match slot {
        // SAFETY: the pointer came from a `Box<Driver<P>>` of this very type (checked by its
        // TypeId), which lives until the next `init` replaces it.
        Some((held, driver)) if *held == TypeId::of::<Driver<P>>() => unsafe {
            &mut *driver.cast::<Driver<P>>().as_ptr()
        },
        _ => panic!("the host calls init before any other export"),
    }
}

/// Makes `driver` the instance's driver, freeing the one an earlier `init` made.
fn install<P: Exported>(driver: Driver<P>) {
    let driver = NonNull::from(Box::leak(Box::new(driver))).cast::<()>();
    // SAFETY: as in `driver`; no borrow of the old driver outlives the export that took it.
    let slot = unsafe { &mut *SLOT.0.get() };
    if let Some((held, old)) = slot.replace((TypeId::of::<Driver<P>>(), driver)) {
        if held == TypeId::of::<Driver<P>>() {
            // SAFETY: made by `Box::leak` above for this type, and no longer in the slot.
            drop(unsafe { Box::from_raw(old.cast::<Driver<P>>().as_ptr()) });
        }
    }
}

/// The component exports for plugin type `P`.
pub struct Component<P>(PhantomData<P>);

impl<P: Exported> bindings::Guest for Component<P> {
    fn init(config: String) -> Result<wit::Descriptor, String> {
        install(Driver::<P>::new(&config)?);
        Ok(Driver::<P>::descriptor().into())
    }

    fn upsert_nodes(nodes: Vec<(u32, wit::NodeInfo)>) {
        driver::<P>().upsert_nodes(nodes.into_iter().map(|(id, node)| (id, node.into())));
    }

    fn remove_nodes(ids: Vec<u32>) {
        driver::<P>().remove_nodes(&ids);
    }

    fn update_usage(usage: Vec<(u32, wit::NodeUsage)>) {
        driver::<P>().update_usage(usage.into_iter().map(|(id, u)| (id, u.into())));
    }

    fn upsert_pods(pods: Vec<(u32, wit::ExistingPod)>) {
        driver::<P>().upsert_pods(pods.into_iter().map(|(id, pod)| (id, pod.into())));
    }

    fn remove_pods(ids: Vec<u32>) {
        driver::<P>().remove_pods(&ids);
    }

    fn upsert_namespaces(namespaces: Vec<wit::NamespaceInfo>) {
        driver::<P>().upsert_namespaces(namespaces.into_iter().map(|n| (n.name, labels(n.labels))));
    }

    fn remove_namespaces(names: Vec<String>) {
        driver::<P>().remove_namespaces(names.iter().map(String::as_str));
    }

    fn upsert_volumes(volumes: Vec<wit::VolumeInfo>) {
        driver::<P>().upsert_volumes(volumes.into_iter().map(Into::into));
    }

    fn remove_volumes(names: Vec<String>) {
        driver::<P>().remove_volumes(names.iter().map(String::as_str));
    }

    fn set_pod(pod: wit::Pod) -> wit::PodPlan {
        driver::<P>().set_pod(pod.into()).into()
    }

    fn filter(nodes: Vec<u32>) -> wit::FilterResults {
        let mut results = sdk::FilterResults::default();
        results.verdicts.reserve(nodes.len());
        driver::<P>().filter(&nodes, &mut results);
        wit::FilterResults {
            verdicts: results.verdicts,
            failures: results.failures.into_iter().map(Into::into).collect(),
        }
    }

    fn score(nodes: Vec<u32>) -> Vec<i64> {
        let mut scores = Vec::with_capacity(nodes.len());
        driver::<P>().score_for_host(&nodes, &mut scores);
        scores
    }

    fn normalize(mut scores: Vec<i64>) -> Vec<i64> {
        driver::<P>().normalize(&mut scores);
        scores
    }
}

impl<P: Exported> bindings::exports::wasched::plugin::batched::Guest for Component<P> {
    fn apply_and_set_pod(changes: wit::MirrorChanges, pod: wit::Pod) -> wit::PodPlan {
        apply::<P>(crate::wire::MirrorChanges {
            removed_pods: changes.removed_pods,
            upserted_pods: changes
                .upserted_pods
                .into_iter()
                .map(|(id, pod)| (id, pod.into()))
                .collect(),
            usage: changes
                .usage
                .into_iter()
                .map(|(id, usage)| (id, usage.into()))
                .collect(),
        });
        <Self as bindings::Guest>::set_pod(pod)
    }
}

/// Applies mirror changes, from records or bytes, in the order `apply-and-set-pod` promises.
fn apply<P: Exported>(changes: crate::wire::MirrorChanges) {
    let driver = driver::<P>();
    driver.remove_pods(&changes.removed_pods);
    driver.upsert_pods(changes.upserted_pods);
    driver.update_usage(changes.usage);
}

/// `encoded.apply-and-set-pod` up to the plan, which the `encoded` and `plain-plans` exports return
/// in their own ways.
fn apply_and_set_encoded_pod<P: Exported>(input: &[u8]) -> sdk::PodPlan {
    let mut reader = crate::wire::Reader::new(input);
    let changes = decoded(reader.changes(reads_volumes::<P>()));
    let pod = decoded(reader.pod());
    decoded(reader.finish());
    apply::<P>(changes);
    driver::<P>().set_pod(pod)
}

/// Whether the host sends `P`'s placed pods with their volumes.
fn reads_volumes<P: Exported>() -> bool {
    P::READS_EXISTING_PODS.contains(sdk::ExistingPodParts::VOLUMES)
}

/// The host encodes what it sends with the same `wire` module, so bytes that do not decode are
/// a host bug: the call traps with the reason, and the host reports it as the plugin's failure.
fn decoded<T>(value: Result<T, crate::wire::WireError>) -> T {
    value.unwrap_or_else(|e| panic!("{e}"))
}

impl<P: Exported> bindings::exports::wasched::plugin::encoded::Guest for Component<P> {
    fn apply(changes: Vec<u8>) {
        let mut reader = crate::wire::Reader::new(&changes);
        let changes = decoded(reader.changes(reads_volumes::<P>()));
        decoded(reader.finish());
        apply::<P>(changes);
    }

    fn apply_and_set_pod(input: Vec<u8>) -> wit::PodPlan {
        apply_and_set_encoded_pod::<P>(&input).into()
    }

    fn upsert_nodes(nodes: Vec<u8>) {
        let mut reader = crate::wire::Reader::new(&nodes);
        let nodes = decoded(reader.nodes(crate::wire::NodeDetails {
            images: P::READS_NODE_IMAGES,
            csi_node: P::READS_CSI_NODES,
            devices: P::READS_DEVICES,
        }));
        decoded(reader.finish());
        driver::<P>().upsert_nodes(nodes);
    }
}

use bindings::exports::wasched::plugin::stages;

impl<P: Exported> stages::Guest for Component<P> {
    fn stages() -> stages::StageSet {
        let mut set = stages::StageSet::empty();
        if P::PRE_ENQUEUE {
            set = set | stages::StageSet::PRE_ENQUEUE;
        }
        if P::PERMIT {
            set = set | stages::StageSet::PERMIT;
        }
        set
    }

    fn pre_enqueue(pod: stages::StagedPod) -> Option<wit::Failure> {
        driver::<P>().pre_enqueue(&staged_pod(pod)).map(Into::into)
    }

    fn permit(pod: stages::StagedPod, node: String) -> stages::PermitAnswer {
        let answer = driver::<P>().permit(&staged_pod(pod), &node);
        stages::PermitAnswer {
            decision: wit_decision(answer.permit),
            allow: answer.allow,
        }
    }

    fn unreserve(pod: stages::StagedPod, node: String) {
        driver::<P>().unreserve(&staged_pod(pod), &node);
    }
}

use bindings::exports::wasched::plugin::groups;

fn decoded_pod(pod: &[u8]) -> sdk::Pod {
    let mut reader = crate::wire::Reader::new(pod);
    let pod = decoded(reader.pod());
    decoded(reader.finish());
    pod
}

fn wit_rejections(rejections: Vec<sdk::Rejection>) -> Vec<groups::Rejection> {
    rejections
        .into_iter()
        .map(|r| groups::Rejection {
            pod: r.pod,
            message: r.message,
        })
        .collect()
}

impl<P: Exported> groups::Guest for Component<P> {
    fn stages() -> groups::GroupStages {
        let mut set = groups::GroupStages::empty();
        if P::READS_GROUPS {
            set = set | groups::GroupStages::READS;
        }
        if P::POST_FILTER {
            set = set | groups::GroupStages::POST_FILTER;
        }
        if P::QUEUE_SORT {
            set = set | groups::GroupStages::QUEUE_SORT;
        }
        set
    }

    fn permit(pod: Vec<u8>, node: String) -> groups::GroupPermitAnswer {
        let answer = driver::<P>().permit(&decoded_pod(&pod), &node);
        groups::GroupPermitAnswer {
            decision: wit_decision(answer.permit),
            allow: answer.allow,
            reject: wit_rejections(answer.reject),
        }
    }

    fn unreserve(pod: Vec<u8>, node: String) -> Vec<groups::Rejection> {
        wit_rejections(driver::<P>().unreserve_rejects(&decoded_pod(&pod), &node))
    }

    fn post_filter(pod: Vec<u8>) -> groups::PostFilterAnswer {
        let answer = driver::<P>().post_filter(&decoded_pod(&pod));
        groups::PostFilterAnswer {
            reasons: answer.reasons,
            reject: wit_rejections(answer.reject),
        }
    }

    fn queue_sort(pod: Vec<u8>, queued_millis: i64) -> groups::QueueKey {
        let key = driver::<P>().queue_sort(&decoded_pod(&pod), queued_millis);
        groups::QueueKey {
            timestamp_millis: key.timestamp_millis,
            name: key.name,
        }
    }
}

fn wit_decision(permit: sdk::Permit) -> stages::PermitDecision {
    match permit {
        sdk::Permit::Allow => stages::PermitDecision::Allow,
        sdk::Permit::Wait { timeout } => {
            stages::PermitDecision::Wait(timeout.as_millis().min(u64::MAX as u128) as u64)
        }
        sdk::Permit::Reject(reason) => stages::PermitDecision::Reject(reason),
    }
}

use bindings::exports::wasched::plugin::details;

impl<P: Exported> details::Guest for Component<P> {
    fn reads() -> details::DetailParts {
        let mut parts = details::DetailParts::empty();
        if P::READS_NODE_IMAGES {
            parts = parts | details::DetailParts::NODE_IMAGES;
        }
        if P::READS_POD.contains(sdk::PodParts::IMAGES) {
            parts = parts | details::DetailParts::POD_IMAGES;
        }
        if P::READS_CSI_NODES {
            parts = parts | details::DetailParts::CSI_NODES;
        }
        if P::READS_POD.contains(sdk::PodParts::VOLUMES) {
            parts = parts | details::DetailParts::POD_VOLUMES;
        }
        if reads_volumes::<P>() {
            parts = parts | details::DetailParts::PLACED_POD_VOLUMES;
        }
        parts
    }
}

use bindings::exports::wasched::plugin::reserve;

impl<P: Exported> reserve::Guest for Component<P> {
    fn reserves() -> bool {
        P::RESERVE
    }

    fn reserve(node: u32) -> Result<reserve::Reservation, wit::Failure> {
        let reservation = driver::<P>().reserve(node).map_err(wit::Failure::from)?;
        Ok(wit_reservation(reservation.volumes))
    }
}

fn wit_reservation(volumes: sdk::PodVolumes) -> reserve::Reservation {
    reserve::Reservation {
        bind_volumes: volumes
            .static_bindings
            .into_iter()
            .map(|(claim, volume)| reserve::VolumeBinding { claim, volume })
            .collect(),
        provision_volumes: volumes.provisions,
    }
}

use bindings::exports::wasched::plugin::devices;

impl<P: Exported> devices::Guest for Component<P> {
    fn reads() -> bool {
        P::READS_DEVICES
    }

    fn pre_enqueue(pod: Vec<u8>) -> Option<wit::Failure> {
        driver::<P>()
            .pre_enqueue(&decoded_pod(&pod))
            .map(Into::into)
    }

    fn reserve(
        node: u32,
    ) -> Result<(reserve::Reservation, Vec<devices::ClaimAllocation>), wit::Failure> {
        let reservation = driver::<P>().reserve(node).map_err(wit::Failure::from)?;
        let claims = reservation
            .claims
            .into_iter()
            .map(|claim| devices::ClaimAllocation {
                claim: claim.claim,
                devices: claim
                    .devices
                    .into_iter()
                    .map(|d| devices::DeviceResult {
                        request: d.request,
                        driver: d.driver,
                        pool: d.pool,
                        device: d.device,
                        admin_access: d.admin_access,
                    })
                    .collect(),
            })
            .collect();
        Ok((wit_reservation(reservation.volumes), claims))
    }
}

fn staged_pod(pod: stages::StagedPod) -> sdk::Pod {
    sdk::Pod {
        namespace: pod.namespace,
        name: pod.name,
        uid: pod.uid,
        labels: labels(pod.labels),
        annotations: labels(pod.annotations),
        priority: pod.priority,
        scheduling_gates: pod.scheduling_gates,
        ..sdk::Pod::default()
    }
}

fn labels(pairs: Vec<(String, String)>) -> sdk::Labels {
    sdk::Labels::new(pairs)
}

impl From<wit::Resources> for sdk::Resources {
    fn from(r: wit::Resources) -> Self {
        sdk::Resources {
            milli_cpu: r.milli_cpu,
            memory: r.memory,
            ephemeral_storage: r.ephemeral_storage,
            pods: r.pods,
            scalar: r.scalar,
        }
    }
}

impl From<wit::Taint> for sdk::Taint {
    fn from(t: wit::Taint) -> Self {
        sdk::Taint {
            key: t.key,
            value: t.value,
            effect: t.effect,
        }
    }
}

impl From<wit::Toleration> for sdk::Toleration {
    fn from(t: wit::Toleration) -> Self {
        sdk::Toleration {
            key: t.key,
            operator: t.operator,
            value: t.value,
            effect: t.effect,
            toleration_seconds: t.toleration_seconds,
        }
    }
}

impl From<wit::NodeSelectorRequirement> for sdk::NodeSelectorRequirement {
    fn from(r: wit::NodeSelectorRequirement) -> Self {
        sdk::NodeSelectorRequirement {
            key: r.key,
            operator: r.operator,
            values: r.values,
        }
    }
}

impl From<wit::NodeSelectorTerm> for sdk::NodeSelectorTerm {
    fn from(t: wit::NodeSelectorTerm) -> Self {
        sdk::NodeSelectorTerm {
            match_expressions: t.match_expressions.into_iter().map(Into::into).collect(),
            match_fields: t.match_fields.into_iter().map(Into::into).collect(),
        }
    }
}

impl From<wit::NodeAffinity> for sdk::NodeAffinity {
    fn from(a: wit::NodeAffinity) -> Self {
        sdk::NodeAffinity {
            required: a
                .required
                .map(|terms| terms.into_iter().map(Into::into).collect()),
            preferred: a
                .preferred
                .into_iter()
                .map(|p| sdk::PreferredSchedulingTerm {
                    weight: p.weight,
                    preference: p.preference.into(),
                })
                .collect(),
        }
    }
}

impl From<wit::VolumeInfo> for sdk::VolumeInfo {
    fn from(pv: wit::VolumeInfo) -> Self {
        sdk::VolumeInfo {
            name: pv.name,
            labels: labels(pv.labels),
            storage_class_name: pv.storage_class_name,
            capacity: pv.capacity,
            access_modes: pv.access_modes,
            volume_mode: pv.volume_mode,
            volume_attributes_class_name: pv.volume_attributes_class_name,
            phase: pv.phase,
            deleting: pv.deleting,
            claim_ref: pv.claim_ref.map(|r| sdk::ClaimRef {
                namespace: r.namespace,
                name: r.name,
                uid: r.uid,
            }),
            node_affinity: pv
                .node_affinity
                .map(|terms| terms.into_iter().map(Into::into).collect()),
        }
    }
}

impl From<wit::VolumeClaim> for sdk::VolumeClaim {
    fn from(v: wit::VolumeClaim) -> Self {
        sdk::VolumeClaim {
            volume: v.volume,
            claim_name: v.claim_name,
            ephemeral: v.ephemeral,
            claim: v.claim.map(|c| sdk::ClaimInfo {
                volume_name: c.volume_name,
                storage_class_name: c.storage_class_name,
                storage_class: c.storage_class.map(|s| sdk::StorageClassInfo {
                    name: s.name,
                    volume_binding_mode: s.volume_binding_mode,
                    provisioner: s.provisioner,
                    allowed_topologies: s.allowed_topologies.into_iter().map(Into::into).collect(),
                }),
                volume: c.volume.map(Into::into),
                uid: c.uid,
                phase: c.phase,
                deleting: c.deleting,
                bind_completed: c.bind_completed,
                selected_node: c.selected_node,
                requested_storage: c.requested_storage,
                access_modes: c.access_modes,
                volume_mode: c.volume_mode,
                volume_attributes_class_name: c.volume_attributes_class_name,
                selector: c.selector.map(Into::into),
            }),
        }
    }
}

impl From<wit::LabelSelector> for sdk::LabelSelector {
    fn from(s: wit::LabelSelector) -> Self {
        sdk::LabelSelector {
            match_labels: labels(s.match_labels),
            match_expressions: s
                .match_expressions
                .into_iter()
                .map(|r| sdk::LabelSelectorRequirement {
                    key: r.key,
                    operator: r.operator,
                    values: r.values,
                })
                .collect(),
        }
    }
}

impl From<wit::PodAffinityTerm> for sdk::PodAffinityTerm {
    fn from(t: wit::PodAffinityTerm) -> Self {
        sdk::PodAffinityTerm {
            label_selector: t.label_selector.map(Into::into),
            namespaces: t.namespaces,
            namespace_selector: t.namespace_selector.map(Into::into),
            topology_key: t.topology_key,
        }
    }
}

fn weighted(terms: Vec<wit::WeightedPodAffinityTerm>) -> Vec<sdk::WeightedPodAffinityTerm> {
    terms
        .into_iter()
        .map(|w| sdk::WeightedPodAffinityTerm {
            weight: w.weight,
            term: w.term.into(),
        })
        .collect()
}

impl From<wit::PodAffinity> for sdk::PodAffinity {
    fn from(a: wit::PodAffinity) -> Self {
        sdk::PodAffinity {
            required_affinity: a.required_affinity.into_iter().map(Into::into).collect(),
            preferred_affinity: weighted(a.preferred_affinity),
            required_anti_affinity: a
                .required_anti_affinity
                .into_iter()
                .map(Into::into)
                .collect(),
            preferred_anti_affinity: weighted(a.preferred_anti_affinity),
        }
    }
}

impl From<wit::HostPort> for sdk::HostPort {
    fn from(p: wit::HostPort) -> Self {
        sdk::HostPort {
            host_ip: p.host_ip,
            protocol: p.protocol,
            port: p.port,
        }
    }
}

impl From<wit::TopologySpreadConstraint> for sdk::TopologySpreadConstraint {
    fn from(c: wit::TopologySpreadConstraint) -> Self {
        sdk::TopologySpreadConstraint {
            max_skew: c.max_skew,
            topology_key: c.topology_key,
            when_unsatisfiable: c.when_unsatisfiable,
            label_selector: c.label_selector.map(Into::into),
            min_domains: c.min_domains,
            node_affinity_policy: c.node_affinity_policy,
            node_taints_policy: c.node_taints_policy,
            match_label_keys: c.match_label_keys,
        }
    }
}

impl From<wit::ExistingPod> for sdk::ExistingPod {
    fn from(p: wit::ExistingPod) -> Self {
        sdk::ExistingPod {
            node: p.node,
            namespace: p.namespace,
            labels: labels(p.labels),
            terminating: p.terminating,
            pod_affinity: p.pod_affinity.into(),
            host_ports: p.host_ports.into_iter().map(Into::into).collect(),
            volumes: Vec::new(),
        }
    }
}

impl From<wit::Pod> for sdk::Pod {
    fn from(p: wit::Pod) -> Self {
        let mut pod = sdk::Pod {
            priority: p.priority,
            labels: p.labels.map(labels).unwrap_or_default(),
            annotations: p.annotations.map(labels).unwrap_or_default(),
            tolerations: p
                .tolerations
                .map(|list| list.into_iter().map(Into::into).collect())
                .unwrap_or_default(),
            volume_claims: p
                .volume_claims
                .map(|list| list.into_iter().map(Into::into).collect())
                .unwrap_or_default(),
            containers: p
                .containers
                .map(|list| {
                    list.into_iter()
                        .map(|c| sdk::Container {
                            name: c.name,
                            image: c.image,
                        })
                        .collect()
                })
                .unwrap_or_default(),
            ..sdk::Pod::default()
        };
        if let Some(identity) = p.identity {
            pod.namespace = identity.namespace;
            pod.name = identity.name;
            pod.uid = identity.uid;
            pod.scheduler_name = identity.scheduler_name;
        }
        if let Some(node_name) = p.node_name {
            pod.node_name = node_name;
        }
        if let Some(selection) = p.node_selection {
            pod.node_selector = labels(selection.node_selector);
            pod.node_affinity = selection.node_affinity.map(Into::into);
        }
        if let Some(requests) = p.requests {
            pod.requests = requests.requests.into();
            pod.non_zero_requests = requests.non_zero_requests.into();
        }
        if let Some(affinity) = p.pod_affinity {
            pod.pod_affinity = affinity.into();
        }
        if let Some(ports) = p.host_ports {
            pod.host_ports = ports.into_iter().map(Into::into).collect();
        }
        if let Some(spread) = p.topology_spread {
            pod.topology_spread_constraints =
                spread.constraints.into_iter().map(Into::into).collect();
            pod.default_spread_selector = spread.default_selector.map(Into::into);
        }
        pod
    }
}

impl From<wit::NodeUsage> for sdk::NodeUsage {
    fn from(u: wit::NodeUsage) -> Self {
        sdk::NodeUsage {
            requested: u.requested.into(),
            non_zero_requested: u.non_zero_requested.into(),
            pod_count: u.pod_count,
        }
    }
}

impl From<wit::NodeInfo> for sdk::NodeInfo {
    fn from(n: wit::NodeInfo) -> Self {
        sdk::NodeInfo {
            name: n.name,
            labels: labels(n.labels),
            annotations: labels(n.annotations),
            taints: n.taints.into_iter().map(Into::into).collect(),
            unschedulable: n.unschedulable,
            allocatable: n.allocatable.into(),
            usage: n.usage.into(),
            images: Vec::new(),
            csi_node: None,
            device_pools: Vec::new(),
        }
    }
}

impl From<sdk::Code> for wit::Code {
    fn from(c: sdk::Code) -> Self {
        match c {
            sdk::Code::Success => wit::Code::Success,
            sdk::Code::Unschedulable => wit::Code::Unschedulable,
            sdk::Code::UnschedulableAndUnresolvable => wit::Code::UnschedulableAndUnresolvable,
            sdk::Code::Error => wit::Code::Error,
        }
    }
}

impl From<sdk::Failure> for wit::Failure {
    fn from(f: sdk::Failure) -> Self {
        wit::Failure {
            code: f.code.into(),
            reasons: f.reasons.into_iter().map(|r| r.into_owned()).collect(),
        }
    }
}

impl From<sdk::PodPlan> for wit::PodPlan {
    fn from(p: sdk::PodPlan) -> Self {
        wit::PodPlan {
            filter: match p.filter {
                sdk::FilterPlan::Run => wit::FilterPlan::Run,
                sdk::FilterPlan::Skip => wit::FilterPlan::Skip,
                sdk::FilterPlan::OnlyNodes(names) => wit::FilterPlan::OnlyNodes(names),
                sdk::FilterPlan::Reject(f) => wit::FilterPlan::Reject(f.into()),
                sdk::FilterPlan::FailingNodes { nodes, results } => {
                    wit::FilterPlan::FailingNodes(wit::FailingNodes {
                        nodes,
                        verdicts: results.verdicts,
                        failures: results.failures.into_iter().map(Into::into).collect(),
                    })
                }
            },
            score: p.score,
        }
    }
}

impl From<sdk::Descriptor> for wit::Descriptor {
    fn from(d: sdk::Descriptor) -> Self {
        wit::Descriptor {
            name: d.name,
            version: d.version,
            filter: d.filter,
            score: d.score,
            normalize: match d.normalize {
                sdk::Normalize::None => wit::NormalizeKind::None,
                sdk::Normalize::Scale => wit::NormalizeKind::Scale,
                sdk::Normalize::Reverse => wit::NormalizeKind::Reverse,
                sdk::Normalize::Custom => wit::NormalizeKind::Custom,
                sdk::Normalize::InScore => wit::NormalizeKind::InScore,
            },
            reads_usage: d.reads_usage,
            // The canonical ABI numbers flags in the order the WIT declares them, as `PodParts` does.
            // Parts past the WIT flags are declared through the `details` interface instead.
            reads_pod: wit::PodParts::from_bits_retain(
                d.reads_pod.bits() & sdk::PodParts::IN_RECORD.bits(),
            ),
            reads_existing_pods: wit::ExistingPodParts::from_bits_retain(
                d.reads_existing_pods.bits() & sdk::ExistingPodParts::IN_RECORD.bits(),
            ),
            reads_namespaces: d.reads_namespaces,
            reads_volumes: d.reads_volumes,
        }
    }
}

use bindings::exports::wasched::plugin::usage_with_calls;

impl<P: Exported> usage_with_calls::Guest for Component<P> {
    fn plans_ignore_usage() -> bool {
        P::PLAN_IGNORES_USAGE
    }

    fn apply_and_filter(changes: Vec<u8>, nodes: Vec<u32>) -> wit::FilterResults {
        <Self as bindings::exports::wasched::plugin::encoded::Guest>::apply(changes);
        <Self as bindings::Guest>::filter(nodes)
    }

    fn apply_and_score(changes: Vec<u8>, nodes: Vec<u32>) -> Vec<i64> {
        <Self as bindings::exports::wasched::plugin::encoded::Guest>::apply(changes);
        <Self as bindings::Guest>::score(nodes)
    }
}

use bindings::exports::wasched::plugin::plain_plans;

/// The plan `last-plan` gives: the last one `apply-and-plan` could not give as a number.
struct HeldPlan(UnsafeCell<Option<sdk::PodPlan>>);

// SAFETY: as for `Slot`: wasm32 has no threads here.
unsafe impl Sync for HeldPlan {}

static HELD_PLAN: HeldPlan = HeldPlan(UnsafeCell::new(None));

/// `apply-and-plan` of `plain-plans`, or of `zero-scores` when `tell_zero_scores`.
fn apply_and_plan<P: Exported>(input: &[u8], tell_zero_scores: bool) -> u32 {
    let plan = apply_and_set_encoded_pod::<P>(input);
    let driver = driver::<P>();
    let scores_zero = tell_zero_scores && plan.score && driver.plugin().scores_zero(driver.nodes());
    let number = crate::wire::plain_plan_scoring(&plan, scores_zero);
    if number == crate::wire::PLAN_FOLLOWS {
        // SAFETY: single-threaded instance, and no other borrow of the held plan lives.
        unsafe { *HELD_PLAN.0.get() = Some(plan) };
    }
    number
}

impl<P: Exported> plain_plans::Guest for Component<P> {
    fn apply_and_plan(input: Vec<u8>) -> u32 {
        apply_and_plan::<P>(&input, false)
    }

    fn last_plan() -> wit::PodPlan {
        // SAFETY: as in `apply_and_plan`.
        let held = unsafe { (*HELD_PLAN.0.get()).take() };
        held.expect(
            "the host asks for the last plan only after apply-and-plan returned PLAN_FOLLOWS",
        )
        .into()
    }
}

use bindings::exports::wasched::plugin::zero_scores;

impl<P: Exported> zero_scores::Guest for Component<P> {
    fn apply_and_plan(input: Vec<u8>) -> u32 {
        apply_and_plan::<P>(&input, true)
    }
}
