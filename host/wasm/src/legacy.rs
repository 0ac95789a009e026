//! Components built against `wasched:plugin@0.1.0` (`wit/v0.1/plugin.wit`).
//!
//! 0.2.0 kept every 0.1.0 type but `pod`, `pod-parts`, `descriptor`, `normalize-kind` and the
//! volume claim records (which VolumeBinding extended), and the component model
//! checks a value's type by its shape (field, case and flag names), not by the name of the WIT
//! package that declared it. So a 0.1.0 component is called through typed functions over the 0.2.0
//! types, with only the changed types written out here in their 0.1.0 shape: the host has one
//! set of conversions, and an old component is sent exactly what it was sent before.

use wasmtime::component::{
    flags, ComponentNamedList, ComponentType, Func, Instance, Lift, Lower, TypedFunc,
};
use wasmtime::Store;

use wasched_sdk as sdk;

use crate::component::{wit, StoreState};

// `pod-parts` of 0.1.0.
flags! {
    PodPartsV01 {
        #[component(name = "identity")]
        const IDENTITY;
        #[component(name = "labels")]
        const LABELS;
        #[component(name = "annotations")]
        const ANNOTATIONS;
        #[component(name = "node-name")]
        const NODE_NAME;
        #[component(name = "node-selection")]
        const NODE_SELECTION;
        #[component(name = "tolerations")]
        const TOLERATIONS;
        #[component(name = "requests")]
        const REQUESTS;
        #[component(name = "volume-claims")]
        const VOLUME_CLAIMS;
        #[component(name = "containers")]
        const CONTAINERS;
    }
}

/// `normalize-kind` of 0.1.0: without `in-score`.
#[derive(ComponentType, Lift, Clone, Copy)]
#[component(enum)]
#[repr(u8)]
pub enum NormalizeKindV01 {
    #[component(name = "none")]
    None,
    #[component(name = "scale")]
    Scale,
    #[component(name = "reverse")]
    Reverse,
    #[component(name = "custom")]
    Custom,
}

impl From<NormalizeKindV01> for sdk::Normalize {
    fn from(kind: NormalizeKindV01) -> Self {
        match kind {
            NormalizeKindV01::None => sdk::Normalize::None,
            NormalizeKindV01::Scale => sdk::Normalize::Scale,
            NormalizeKindV01::Reverse => sdk::Normalize::Reverse,
            NormalizeKindV01::Custom => sdk::Normalize::Custom,
        }
    }
}

/// `descriptor` of 0.1.0: no existing pods, no namespaces.
#[derive(ComponentType, Lift)]
#[component(record)]
pub struct DescriptorV01 {
    name: String,
    version: String,
    filter: bool,
    score: bool,
    normalize: NormalizeKindV01,
    #[component(name = "reads-usage")]
    reads_usage: bool,
    #[component(name = "reads-pod")]
    reads_pod: PodPartsV01,
}

impl From<DescriptorV01> for sdk::Descriptor {
    fn from(d: DescriptorV01) -> Self {
        sdk::Descriptor {
            name: d.name,
            version: d.version,
            filter: d.filter,
            score: d.score,
            normalize: d.normalize.into(),
            reads_usage: d.reads_usage,
            // 0.1.0's nine parts are 0.2.0's first nine, in the same order.
            reads_pod: sdk::PodParts::from_bits(d.reads_pod.as_array()[0] as u16),
            reads_existing_pods: sdk::ExistingPodParts::NONE,
            reads_namespaces: false,
            reads_volumes: false,
            pre_enqueue: false,
            permit: false,
            reserve: false,
            reads_node_images: false,
            reads_csi_nodes: false,
            reads_devices: false,
            reads_groups: false,
            post_filter: false,
            queue_sort: false,
            plan_ignores_usage: false,
        }
    }
}

/// `pod` of 0.1.0: the 0.2.0 pod without the parts 0.2.0 added.
#[derive(ComponentType, Lower)]
#[component(record)]
pub struct PodV01 {
    priority: i32,
    identity: Option<wit::PodIdentity>,
    labels: Option<Vec<(String, String)>>,
    annotations: Option<Vec<(String, String)>>,
    #[component(name = "node-name")]
    node_name: Option<String>,
    #[component(name = "node-selection")]
    node_selection: Option<wit::NodeSelection>,
    tolerations: Option<Vec<wit::Toleration>>,
    requests: Option<wit::PodRequests>,
    #[component(name = "volume-claims")]
    volume_claims: Option<Vec<VolumeClaimV01>>,
    containers: Option<Vec<wit::Container>>,
}

impl From<wit::Pod> for PodV01 {
    fn from(p: wit::Pod) -> Self {
        PodV01 {
            priority: p.priority,
            identity: p.identity,
            labels: p.labels,
            annotations: p.annotations,
            node_name: p.node_name,
            node_selection: p.node_selection,
            tolerations: p.tolerations,
            requests: p.requests,
            // 0.1.0 never saw generic ephemeral volumes.
            volume_claims: p.volume_claims.map(|claims| {
                claims
                    .into_iter()
                    .filter(|v| !v.ephemeral)
                    .map(Into::into)
                    .collect()
            }),
            containers: p.containers,
        }
    }
}

/// `volume-claim` of 0.1.0: no ephemeral volumes, and of a claim only what VolumeZone reads.
#[derive(ComponentType, Lower)]
#[component(record)]
pub struct VolumeClaimV01 {
    volume: String,
    #[component(name = "claim-name")]
    claim_name: String,
    claim: Option<ClaimInfoV01>,
}

/// `claim-info` of 0.1.0.
#[derive(ComponentType, Lower)]
#[component(record)]
pub struct ClaimInfoV01 {
    #[component(name = "volume-name")]
    volume_name: String,
    #[component(name = "storage-class-name")]
    storage_class_name: String,
    #[component(name = "storage-class")]
    storage_class: Option<StorageClassInfoV01>,
    volume: Option<VolumeInfoV01>,
}

/// `storage-class-info` of 0.1.0.
#[derive(ComponentType, Lower)]
#[component(record)]
pub struct StorageClassInfoV01 {
    name: String,
    #[component(name = "volume-binding-mode")]
    volume_binding_mode: Option<String>,
}

/// `volume-info` of 0.1.0.
#[derive(ComponentType, Lower)]
#[component(record)]
pub struct VolumeInfoV01 {
    name: String,
    labels: Vec<(String, String)>,
}

impl From<wit::VolumeClaim> for VolumeClaimV01 {
    fn from(v: wit::VolumeClaim) -> Self {
        VolumeClaimV01 {
            volume: v.volume,
            claim_name: v.claim_name,
            claim: v.claim.map(|c| ClaimInfoV01 {
                volume_name: c.volume_name,
                storage_class_name: c.storage_class_name,
                storage_class: c.storage_class.map(|s| StorageClassInfoV01 {
                    name: s.name,
                    volume_binding_mode: s.volume_binding_mode,
                }),
                volume: c.volume.map(|pv| VolumeInfoV01 {
                    name: pv.name,
                    labels: pv.labels,
                }),
            }),
        }
    }
}

/// The functions 0.1.0's `plugin` world exports.
pub const EXPORTS: [&str; 8] = [
    "init",
    "upsert-nodes",
    "remove-nodes",
    "update-usage",
    "set-pod",
    "filter",
    "score",
    "normalize",
];

/// The exports of an instance of a 0.1.0 component. Each was type-checked against 0.2.0's types
/// when the instance was made ([`ExportsV01::new`]); the calls then skip the check.
pub struct ExportsV01 {
    upsert_nodes: Func,
    remove_nodes: Func,
    update_usage: Func,
    set_pod: Func,
    filter: Func,
    score: Func,
    normalize: Func,
}

/// What `init` of 0.1.0 returns.
type InitResult = (Result<DescriptorV01, String>,);

/// The export `name` of `instance`, checked to take `P` and return `R`.
fn checked<P, R>(
    store: &mut Store<StoreState>,
    instance: &Instance,
    name: &str,
) -> wasmtime::Result<Func>
where
    P: ComponentNamedList + Lower,
    R: ComponentNamedList + Lift,
{
    let func = instance
        .get_func(&mut *store, name)
        .ok_or_else(|| wasmtime::Error::msg(format!("no export named {name}")))?;
    func.typed::<P, R>(&*store)
        .map_err(|e| e.context(format!("export {name}")))?;
    Ok(func)
}

impl ExportsV01 {
    /// Looks up and type-checks every export of 0.1.0's `plugin` world in `instance`, and calls
    /// `init` with `config`.
    pub fn new(
        store: &mut Store<StoreState>,
        instance: &Instance,
        config: &str,
    ) -> wasmtime::Result<(ExportsV01, Result<sdk::Descriptor, String>)> {
        let exports = ExportsV01 {
            upsert_nodes: checked::<(&[(u32, wit::NodeInfo)],), ()>(
                store,
                instance,
                "upsert-nodes",
            )?,
            remove_nodes: checked::<(&[u32],), ()>(store, instance, "remove-nodes")?,
            update_usage: checked::<(&[(u32, wit::NodeUsage)],), ()>(
                store,
                instance,
                "update-usage",
            )?,
            set_pod: checked::<(PodV01,), (wit::PodPlan,)>(store, instance, "set-pod")?,
            filter: checked::<(&[u32],), (wit::FilterResults,)>(store, instance, "filter")?,
            score: checked::<(&[u32],), (Vec<i64>,)>(store, instance, "score")?,
            normalize: checked::<(&[i64],), (Vec<i64>,)>(store, instance, "normalize")?,
        };
        let init = checked::<(&str,), InitResult>(store, instance, "init")?;
        // SAFETY (here and in every call below): each function was type-checked against exactly
        // these parameter and result types by `checked` above.
        let init = unsafe { TypedFunc::<(&str,), InitResult>::new_unchecked(init) };
        let (descriptor,) = init.call(&mut *store, (config,))?;
        Ok((exports, descriptor.map(Into::into)))
    }

    pub fn upsert_nodes(
        &self,
        store: &mut Store<StoreState>,
        nodes: &[(u32, wit::NodeInfo)],
    ) -> wasmtime::Result<()> {
        let f = unsafe {
            TypedFunc::<(&[(u32, wit::NodeInfo)],), ()>::new_unchecked(self.upsert_nodes)
        };
        f.call(store, (nodes,))
    }

    pub fn remove_nodes(&self, store: &mut Store<StoreState>, ids: &[u32]) -> wasmtime::Result<()> {
        let f = unsafe { TypedFunc::<(&[u32],), ()>::new_unchecked(self.remove_nodes) };
        f.call(store, (ids,))
    }

    pub fn update_usage(
        &self,
        store: &mut Store<StoreState>,
        usage: &[(u32, wit::NodeUsage)],
    ) -> wasmtime::Result<()> {
        let f = unsafe {
            TypedFunc::<(&[(u32, wit::NodeUsage)],), ()>::new_unchecked(self.update_usage)
        };
        f.call(store, (usage,))
    }

    pub fn set_pod(
        &self,
        store: &mut Store<StoreState>,
        pod: wit::Pod,
    ) -> wasmtime::Result<wit::PodPlan> {
        let f = unsafe { TypedFunc::<(PodV01,), (wit::PodPlan,)>::new_unchecked(self.set_pod) };
        f.call(store, (pod.into(),)).map(|(plan,)| plan)
    }

    pub fn filter(
        &self,
        store: &mut Store<StoreState>,
        ids: &[u32],
    ) -> wasmtime::Result<wit::FilterResults> {
        let f =
            unsafe { TypedFunc::<(&[u32],), (wit::FilterResults,)>::new_unchecked(self.filter) };
        f.call(store, (ids,)).map(|(results,)| results)
    }

    pub fn score(&self, store: &mut Store<StoreState>, ids: &[u32]) -> wasmtime::Result<Vec<i64>> {
        let f = unsafe { TypedFunc::<(&[u32],), (Vec<i64>,)>::new_unchecked(self.score) };
        f.call(store, (ids,)).map(|(scores,)| scores)
    }

    pub fn normalize(
        &self,
        store: &mut Store<StoreState>,
        scores: &[i64],
    ) -> wasmtime::Result<Vec<i64>> {
        let f = unsafe { TypedFunc::<(&[i64],), (Vec<i64>,)>::new_unchecked(self.normalize) };
        f.call(store, (scores,)).map(|(scores,)| scores)
    }
}
