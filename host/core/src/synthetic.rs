//! Synthetic clusters for benchmarks and tests: nodes spread over three zones with instance-type
//! and disk labels, some tainted (NoSchedule and PreferNoSchedule) and a few cordoned; pods mixing
//! cpu/memory requests, tolerations, node selectors, required and preferred node affinity, and
//! zonal PersistentVolumeClaims. The same seed gives the same cluster and the same pods.

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::storage::v1::StorageClass;
use serde::Serialize;
use wasched_sdk as sdk;
use wasched_sdk::{Labels, Resources};

use crate::events::Object;
use crate::k8s::devices::{Claim, Slice};
use crate::util::Rng;

/// What the pods and nodes of a run exercise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// Requests only: no taints, affinity or volumes.
    Basic,
    /// Node selectors, required and preferred node affinity.
    NodeAffinity,
    /// NoSchedule/PreferNoSchedule taints (and cordoned nodes), pods with tolerations.
    Taints,
    /// Pods with zonal PersistentVolumes.
    VolumeZones,
    /// All of the above, and some pods of each pod-aware kind: StatefulSet-like replicas with
    /// required anti-affinity on the hostname, Deployment replicas spread over zones (by their
    /// own constraint or by the cluster defaults), pods preferring the zone of a StatefulSet, and
    /// pods with a host port.
    Mixed,
    /// Mixed, with a placed pod deleted every 10 cycles and a node replaced every 100.
    Churn,
    /// As many running pods as nodes, in StatefulSet-like groups of 20 whose replicas keep off
    /// each other's hosts (required anti-affinity on the hostname); new pods join those groups or
    /// start new ones.
    PodAntiAffinity,
    /// As many running pods as nodes, caches of 50 groups; each new pod requires a cache of its
    /// group in its zone or prefers hosts running one, and prefers hosts without its own group.
    PodAffinity,
    /// As many running pods as nodes, in 100 Deployments whose ReplicaSets the cluster knows;
    /// each new pod joins one and either spreads itself (zones with `maxSkew: 1`, required, and
    /// hosts, preferred) or is spread by the cluster default constraints its ReplicaSet selects
    /// it for.
    TopologySpread,
    /// Every node full: four running pods of priorities 0 to 3 each take a quarter of it. Each
    /// new pod (priority 1000) fits nowhere until preemption evicts one; DefaultPreemption is on.
    Preemption,
    /// Pods whose claims wait for their first consumer: most ask for a local volume (one
    /// static PersistentVolume pinned to each node, 100 or 200 GiB; requests of 20 to 160 GiB),
    /// some for a volume provisioned in zone a or b, a few for both. Volumes are reserved as pods
    /// are placed, so later pods find fewer.
    VolumeBinding,
    /// Basic's nodes and pods, scheduled through the service (their events applied, their
    /// bindings written back) while [`GATED_PODS`] pods held by scheduling gates wait beside
    /// them: kube-scheduler's SchedulingWhileGated. The bench also runs the same pods without
    /// the gated ones, so the two rates show what the gated pods cost.
    Gated,
    /// Basic's pods, each with one or two claims bound to CSI volumes of `ebs.csi.aws.com`, on
    /// nodes whose CSINode lets that driver attach 1 to 4 volumes: NodeVolumeLimits counts each
    /// node's attachments and turns pods away from the full ones (kube-scheduler's
    /// SchedulingCSIPVs, with limits that bite).
    VolumeLimits,
    /// Dynamic Resource Allocation after kube-scheduler's SchedulingWithResourceClaimTemplate:
    /// every node publishes [`DEVICES_PER_NODE`] GPUs in a ResourceSlice of its own, a
    /// DeviceClass selects them by driver in CEL, and each pod has a claim of its own (as the
    /// template's claims kube's controller makes) asking for one GPU; DynamicResources allocates
    /// it and the cache holds it, so nodes fill up.
    Dra,
    /// Basic's nodes; the pods come in gangs of 4 to 16 (a PodGroup each, `minMember` its
    /// size), scheduled through the service with scheduler-plugins' Coscheduling in the profile:
    /// every member waits at Permit until its gang's last one is reserved.
    Gangs,
    /// Every scenario above.
    All,
}

/// How many gated pods wait beside the measured ones in [`Scenario::Gated`], as in
/// kube-scheduler's SchedulingWhileGated workload.
pub const GATED_PODS: usize = 10_000;

impl Scenario {
    /// Every scenario but [`Scenario::All`].
    pub const EACH: [Scenario; 15] = [
        Scenario::Basic,
        Scenario::NodeAffinity,
        Scenario::Taints,
        Scenario::VolumeZones,
        Scenario::Mixed,
        Scenario::Churn,
        Scenario::PodAntiAffinity,
        Scenario::PodAffinity,
        Scenario::TopologySpread,
        Scenario::Preemption,
        Scenario::VolumeBinding,
        Scenario::Gated,
        Scenario::VolumeLimits,
        Scenario::Dra,
        Scenario::Gangs,
    ];

    /// The scenario's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Basic => "basic",
            Scenario::NodeAffinity => "node-affinity",
            Scenario::Taints => "taints",
            Scenario::VolumeZones => "volume-zones",
            Scenario::Mixed => "mixed",
            Scenario::Churn => "churn",
            Scenario::PodAntiAffinity => "pod-anti-affinity",
            Scenario::PodAffinity => "pod-affinity",
            Scenario::TopologySpread => "topology-spread",
            Scenario::Preemption => "preemption",
            Scenario::VolumeBinding => "volume-binding",
            Scenario::Gated => "gated",
            Scenario::VolumeLimits => "volume-limits",
            Scenario::Dra => "dra",
            Scenario::Gangs => "gangs",
            Scenario::All => "all",
        }
    }

    fn affinity(self) -> bool {
        matches!(
            self,
            Scenario::NodeAffinity | Scenario::Mixed | Scenario::Churn
        )
    }

    fn taints(self) -> bool {
        matches!(self, Scenario::Taints | Scenario::Mixed | Scenario::Churn)
    }

    fn pod_aware(self) -> bool {
        matches!(self, Scenario::Mixed | Scenario::Churn)
    }

    fn volumes(self) -> bool {
        matches!(
            self,
            Scenario::VolumeZones | Scenario::Mixed | Scenario::Churn
        )
    }
}

impl std::str::FromStr for Scenario {
    type Err = String;

    fn from_str(text: &str) -> Result<Scenario, String> {
        Scenario::EACH
            .into_iter()
            .chain([Scenario::All])
            .find(|s| s.name() == text)
            .ok_or_else(|| {
                let names: Vec<&str> = Scenario::EACH.iter().map(|s| s.name()).collect();
                format!(
                    "unknown scenario `{text}` (one of {}, all)",
                    names.join(", ")
                )
            })
    }
}

const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];
const INSTANCE_TYPES: [&str; 4] = ["m5.2xlarge", "m5.4xlarge", "c5.4xlarge", "r5.4xlarge"];

/// A generated cluster: nodes and the pods to schedule.
#[derive(Clone)]
pub struct Synthetic {
    /// The nodes.
    pub nodes: Vec<sdk::NodeInfo>,
    /// Pods running before the first is scheduled, with their node's name.
    pub running: Vec<(sdk::Pod, String)>,
    /// The pods to schedule, in order.
    pub pods: Vec<sdk::Pod>,
    /// PersistentVolumes.
    pub volumes: Vec<core::PersistentVolume>,
    /// PersistentVolumeClaims.
    pub claims: Vec<core::PersistentVolumeClaim>,
    /// StorageClasses.
    pub classes: Vec<StorageClass>,
    /// Services and controllers (the ReplicaSets of the topology-spread scenario).
    pub selectors: Vec<Object>,
    /// CSINodes, by node name.
    pub csi_nodes: Vec<(String, sdk::CsiNode)>,
    /// DeviceClasses by name, with their CEL selectors.
    pub device_classes: Vec<(String, Vec<String>)>,
    /// ResourceSlices by name.
    pub slices: Vec<(String, Slice)>,
    /// ResourceClaims by namespace and name.
    pub resource_claims: Vec<(String, String, Claim)>,
    /// Gangs: each PodGroup's name and `minMember` (its pods carry its label).
    pub groups: Vec<(String, u32)>,
}

impl Synthetic {
    /// Puts the storage objects and the nodes (not the pods) into a cache.
    pub fn load_into(&self, cache: &mut crate::cache::Cache) {
        for class in &self.classes {
            cache.upsert_class(class.clone());
        }
        for volume in &self.volumes {
            cache.upsert_volume(volume.clone());
        }
        for claim in &self.claims {
            cache.upsert_claim(claim.clone());
        }
        for selector in &self.selectors {
            cache.spread_selectors().upsert(selector);
        }
        for (name, csi_node) in &self.csi_nodes {
            cache.upsert_csi_node(name, csi_node.clone());
        }
        for (name, selectors) in &self.device_classes {
            cache.upsert_device_class(name, selectors.clone());
        }
        for (name, slice) in &self.slices {
            cache.upsert_resource_slice(name, slice.clone());
        }
        for (namespace, name, claim) in &self.resource_claims {
            cache.upsert_resource_claim(namespace, name, claim.clone());
        }
        for node in &self.nodes {
            cache.upsert_node(node.clone());
        }
        for (pod, node) in &self.running {
            cache.add_pod(pod, node);
        }
    }
}

fn resources(milli_cpu: i64, memory_gib: i64, pods: i64) -> Resources {
    Resources {
        milli_cpu,
        memory: memory_gib << 30,
        ephemeral_storage: 100 << 30,
        pods,
        scalar: Vec::new(),
    }
}

/// One synthetic node; without `taints_on` it has no taints and is never cordoned.
fn synthetic_node(rng: &mut Rng, i: usize, taints_on: bool) -> sdk::NodeInfo {
    let zone = ZONES[i % ZONES.len()];
    let instance = INSTANCE_TYPES[rng.below(INSTANCE_TYPES.len() as u64) as usize];
    let disk = if rng.chance(0.6) { "ssd" } else { "hdd" };
    let mut taints = Vec::new();
    if rng.chance(0.15) {
        taints.push(sdk::Taint {
            key: "dedicated".into(),
            value: "gpu".into(),
            effect: "NoSchedule".into(),
        });
    }
    if rng.chance(0.1) {
        taints.push(sdk::Taint {
            key: "spot".into(),
            value: "true".into(),
            effect: "PreferNoSchedule".into(),
        });
    }
    let big = rng.chance(0.5);
    if !taints_on {
        taints.clear();
    }
    let cordoned = rng.chance(0.02) && taints_on;
    sdk::NodeInfo {
        name: format!("node-{i:05}"),
        labels: [
            ("kubernetes.io/hostname", format!("node-{i:05}")),
            ("topology.kubernetes.io/zone", zone.to_string()),
            ("topology.kubernetes.io/region", "region-1".to_string()),
            ("node.kubernetes.io/instance-type", instance.to_string()),
            ("disktype", disk.to_string()),
        ]
        .into_iter()
        .collect(),
        annotations: Labels::default(),
        taints,
        unschedulable: cordoned,
        allocatable: if big {
            resources(64_000, 256, 110)
        } else {
            resources(32_000, 128, 110)
        },
        usage: sdk::NodeUsage::default(),
        images: Vec::new(),
        csi_node: None,
        device_pools: Vec::new(),
    }
}

/// Generates the cluster of `scenario`: `nodes` nodes and `pods` pods. The same seed gives the
/// same cluster.
pub fn cluster(scenario: Scenario, nodes: usize, pods: usize, seed: u64) -> Synthetic {
    let mut rng = Rng::new(seed);
    let nodes: Vec<sdk::NodeInfo> = (0..nodes)
        .map(|i| synthetic_node(&mut rng, i, scenario.taints()))
        .collect();

    let class: StorageClass = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "zonal"}, "provisioner": "example.com/disk", "volumeBindingMode": "Immediate"
    }))
    .expect("valid StorageClass");
    let running = running_pods(scenario, &nodes, &mut rng);
    let mut volumes = Vec::new();
    let mut claims = Vec::new();
    let mut classes = vec![class];
    if scenario == Scenario::VolumeBinding {
        classes.extend(waiting_classes());
        volumes.extend(
            nodes
                .iter()
                .enumerate()
                .map(|(i, n)| local_volume(i, &n.name)),
        );
    }
    let mut csi_nodes = Vec::new();
    if scenario == Scenario::VolumeLimits {
        csi_nodes.extend(nodes.iter().map(|n| (n.name.clone(), csi_limits(&mut rng))));
    }
    let (device_classes, slices) = gpu_devices(scenario, &nodes);
    let mut resource_claims = Vec::new();
    let count = pods;
    let pods: Vec<sdk::Pod> = (0..pods)
        .map(|i| {
            let mut pod = requesting_pod(scenario, i, &mut rng);
            tolerate_and_select(scenario, &mut pod, &mut rng);
            if rng.chance(0.1) && scenario.volumes() {
                let (volume, claim) = zonal_volume(i, &mut pod, &mut rng);
                volumes.push(volume);
                claims.push(claim);
            }
            if scenario == Scenario::VolumeBinding {
                claims.extend(waiting_claims(i, &mut pod, &mut rng));
            }
            if scenario == Scenario::Dra {
                resource_claims.push(gpu_claim(&mut pod));
            }
            if scenario == Scenario::VolumeLimits {
                for j in 0..1 + rng.below(2) as usize {
                    let (volume, claim) = csi_volume(i, j, &mut pod);
                    volumes.push(volume);
                    claims.push(claim);
                }
            }
            pod_affinity(scenario, &mut pod, nodes.len(), &mut rng);
            if scenario == Scenario::TopologySpread {
                topology_spread(&mut pod, &mut rng);
            }
            if scenario.pod_aware() {
                some_pod_aware(&mut pod, count, &mut rng);
            }
            pod
        })
        .collect();
    let selectors = if scenario == Scenario::TopologySpread || scenario.pod_aware() {
        (0..SPREAD_GROUPS).map(replica_set).collect()
    } else {
        Vec::new()
    };
    let mut pods = pods;
    let groups = if scenario == Scenario::Gangs {
        into_gangs(&mut pods, &mut rng)
    } else {
        Vec::new()
    };
    Synthetic {
        nodes,
        running,
        pods,
        volumes,
        claims,
        classes,
        selectors,
        csi_nodes,
        device_classes,
        slices,
        resource_claims,
        groups,
    }
}

/// Fewest and most pods of a gang in [`Scenario::Gangs`].
pub const GANG_SIZES: std::ops::RangeInclusive<u32> = 4..=16;

/// Labels consecutive runs of `pods` as gangs of [`GANG_SIZES`] pods (the last may be smaller,
/// and its PodGroup asks for what it has); returns each gang's name and size.
fn into_gangs(pods: &mut [sdk::Pod], rng: &mut Rng) -> Vec<(String, u32)> {
    let mut groups = Vec::new();
    let mut rest = pods;
    while !rest.is_empty() {
        let span = u64::from(GANG_SIZES.end() - GANG_SIZES.start() + 1);
        let size = (*GANG_SIZES.start() as usize + rng.below(span) as usize).min(rest.len());
        let name = format!("gang-{:05}", groups.len());
        let (gang, after) = rest.split_at_mut(size);
        for pod in gang {
            pod.labels =
                sdk::Labels::from_pairs([(crate::k8s::podgroup::POD_GROUP_LABEL, name.as_str())]);
        }
        groups.push((name, size as u32));
        rest = after;
    }
    groups
}

/// The PodGroups of `cluster`'s gangs (namespace `bench`) as objects.
pub fn pod_group_objects(cluster: &Synthetic) -> Vec<Object> {
    cluster
        .groups
        .iter()
        .map(|(name, size)| {
            let group: crate::k8s::podgroup::PodGroup = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "bench"},
                "spec": {"minMember": size},
            }))
            .expect("valid PodGroup");
            Object::PodGroup(Box::new(group))
        })
        .collect()
}

/// GPUs each node publishes in [`Scenario::Dra`].
pub const DEVICES_PER_NODE: usize = 8;

const GPU_DRIVER: &str = "gpu.example.com";
const GPU_CLASS: &str = "gpu.example.com";

/// The DeviceClass and the nodes' ResourceSlices of [`Scenario::Dra`] (none for another).
#[allow(clippy::type_complexity)]
fn gpu_devices(
    scenario: Scenario,
    nodes: &[sdk::NodeInfo],
) -> (Vec<(String, Vec<String>)>, Vec<(String, Slice)>) {
    if scenario != Scenario::Dra {
        return (Vec::new(), Vec::new());
    }
    let class = (
        GPU_CLASS.to_string(),
        vec![format!("device.driver == '{GPU_DRIVER}'")],
    );
    (
        vec![class],
        nodes.iter().map(|n| gpu_slice(&n.name)).collect(),
    )
}

/// The ResourceSlice of node `node`: [`DEVICES_PER_NODE`] GPUs in a pool named after it.
fn gpu_slice(node: &str) -> (String, Slice) {
    let devices = (0..DEVICES_PER_NODE)
        .map(|i| sdk::Device {
            name: format!("gpu-{i}"),
            attributes: vec![
                ("model".into(), sdk::AttributeValue::String("a100".into())),
                ("index".into(), sdk::AttributeValue::Int(i as i64)),
            ],
            capacity: vec![("memory".into(), "40Gi".into())],
            allocated: false,
        })
        .collect();
    let slice = Slice {
        driver: GPU_DRIVER.into(),
        pool: node.to_string(),
        generation: 1,
        slice_count: 1,
        node_name: Some(node.to_string()),
        devices,
        ..Slice::default()
    };
    (format!("{node}-{GPU_DRIVER}"), slice)
}

/// A claim of `pod`'s own asking for one GPU (what kube's controller makes from a template),
/// named in the pod.
fn gpu_claim(pod: &mut sdk::Pod) -> (String, String, Claim) {
    let name = format!("{}-gpu", pod.name);
    pod.uid = format!("uid-{}", pod.name);
    pod.claims.push(sdk::PodClaim {
        name: "gpu".into(),
        claim_name: name.clone(),
        from_template: true,
        ..sdk::PodClaim::default()
    });
    let claim = Claim {
        uid: format!("claim-{}", pod.uid),
        owner_uid: Some(pod.uid.clone()),
        requests: vec![sdk::DeviceRequest {
            name: "gpu".into(),
            class_name: GPU_CLASS.into(),
            ..sdk::DeviceRequest::default()
        }],
        ..Claim::default()
    };
    (pod.namespace.clone(), name, claim)
}

/// The CSI driver of [`Scenario::VolumeLimits`].
const CSI_DRIVER: &str = "ebs.csi.aws.com";

/// A CSINode letting [`CSI_DRIVER`] attach 1 to 4 volumes.
fn csi_limits(rng: &mut Rng) -> sdk::CsiNode {
    sdk::CsiNode {
        drivers: vec![sdk::CsiDriverLimit {
            name: CSI_DRIVER.into(),
            count: Some(1 + rng.below(4) as i32),
        }],
    }
}

/// Claim `j` of pod `i`, bound to a CSI volume of its own.
fn csi_volume(
    i: usize,
    j: usize,
    pod: &mut sdk::Pod,
) -> (core::PersistentVolume, core::PersistentVolumeClaim) {
    let (pv, pvc) = (format!("csi-pv-{i}-{j}"), format!("csi-data-{i}-{j}"));
    let volume = serde_json::from_value(serde_json::json!({
        "metadata": {"name": pv},
        "spec": {
            "storageClassName": "csi",
            "csi": {"driver": CSI_DRIVER, "volumeHandle": format!("vol-{i}-{j}")}
        },
        "status": {"phase": "Bound"}
    }))
    .expect("valid PersistentVolume");
    let claim = bound_claim(&pvc, &pv, "csi");
    claim_volume(pod, &format!("data-{j}"), &pvc);
    (volume, claim)
}

/// A claim in the bench namespace fully bound to `volume`.
fn bound_claim(name: &str, volume: &str, class: &str) -> core::PersistentVolumeClaim {
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": name,
            "namespace": "bench",
            "annotations": {"pv.kubernetes.io/bind-completed": "yes"}
        },
        "spec": {"storageClassName": class, "volumeName": volume},
        "status": {"phase": "Bound"}
    }))
    .expect("valid PersistentVolumeClaim")
}

/// Gives `pod` the volume `volume` of the claim `claim`, as `k8s::pod` reads a pod's
/// `persistentVolumeClaim` volume: in `volume_claims` and in `volumes`.
fn claim_volume(pod: &mut sdk::Pod, volume: &str, claim: &str) {
    pod.volume_claims.push(sdk::VolumeClaim {
        volume: volume.into(),
        claim_name: claim.into(),
        ephemeral: false,
        claim: None,
    });
    pod.volumes.push(sdk::PodVolume {
        name: volume.into(),
        claim_name: claim.into(),
        ..sdk::PodVolume::default()
    });
}

/// Pod `i` of `scenario` with its requests (preemptors ask for much more).
fn requesting_pod(scenario: Scenario, i: usize, rng: &mut Rng) -> sdk::Pod {
    let cpu = 100 * (1 + rng.below(20) as i64);
    let memory = (128 << 20) * (1 + rng.below(32) as i64);
    let mut requests = Resources {
        milli_cpu: cpu,
        memory,
        ..Resources::default()
    };
    let mut priority = 0;
    if scenario == Scenario::Preemption {
        priority = PREEMPTOR_PRIORITY;
        requests = Resources {
            milli_cpu: 6_000,
            memory: 1 << 30,
            ..Resources::default()
        };
    }
    sdk::Pod {
        namespace: "bench".into(),
        name: format!("pod-{i:06}"),
        scheduler_name: crate::DEFAULT_SCHEDULER_NAME.into(),
        priority,
        non_zero_requests: requests.clone(),
        requests,
        ..sdk::Pod::default()
    }
}

/// Some tolerations of the dedicated nodes' taint, node selectors and node affinity, as the
/// scenario has them. The random draws happen for every scenario, so that the pods' other parts
/// are the same across scenarios for the same seed.
fn tolerate_and_select(scenario: Scenario, pod: &mut sdk::Pod, rng: &mut Rng) {
    if rng.chance(0.2) && scenario.taints() {
        pod.tolerations.push(sdk::Toleration {
            key: "dedicated".into(),
            operator: "Equal".into(),
            value: "gpu".into(),
            effect: "NoSchedule".into(),
            toleration_seconds: None,
        });
    }
    if rng.chance(0.3) && scenario.affinity() {
        pod.node_selector = [("disktype", "ssd")].into_iter().collect();
    }
    let mut affinity = sdk::NodeAffinity::default();
    if rng.chance(0.2) {
        affinity.required = Some(vec![sdk::NodeSelectorTerm {
            match_expressions: vec![sdk::NodeSelectorRequirement {
                key: "topology.kubernetes.io/zone".into(),
                operator: "In".into(),
                values: vec!["zone-a".into(), "zone-b".into()],
            }],
            match_fields: Vec::new(),
        }]);
    }
    if rng.chance(0.3) {
        let instance = INSTANCE_TYPES[rng.below(INSTANCE_TYPES.len() as u64) as usize];
        affinity.preferred.push(sdk::PreferredSchedulingTerm {
            weight: 50,
            preference: sdk::NodeSelectorTerm {
                match_expressions: vec![sdk::NodeSelectorRequirement {
                    key: "node.kubernetes.io/instance-type".into(),
                    operator: "In".into(),
                    values: vec![instance.into()],
                }],
                match_fields: Vec::new(),
            },
        });
    }
    if scenario.affinity() && (affinity.required.is_some() || !affinity.preferred.is_empty()) {
        pod.node_affinity = Some(affinity);
    }
}

/// A zonal volume, bound to a claim of pod `i`, in a random zone.
fn zonal_volume(
    i: usize,
    pod: &mut sdk::Pod,
    rng: &mut Rng,
) -> (core::PersistentVolume, core::PersistentVolumeClaim) {
    let zone = ZONES[rng.below(ZONES.len() as u64) as usize];
    let (pv, pvc) = (format!("pv-{i}"), format!("data-{i}"));
    let volume = serde_json::from_value(serde_json::json!({
        "metadata": {"name": pv, "labels": {"topology.kubernetes.io/zone": zone}},
        "spec": {"storageClassName": "zonal"}
    }))
    .expect("valid PersistentVolume");
    let claim = bound_claim(&pvc, &pv, "zonal");
    claim_volume(pod, "data", &pvc);
    (volume, claim)
}

/// The volume-binding scenario's claims of pod `i`, waiting for their first consumer: a local
/// volume in 60% of pods, a provisioned one in 30%, both in 10%.
fn waiting_claims(i: usize, pod: &mut sdk::Pod, rng: &mut Rng) -> Vec<core::PersistentVolumeClaim> {
    let (local, provisioned) = match rng.below(10) {
        0..=5 => (true, false),
        6..=8 => (false, true),
        _ => (true, true),
    };
    let mut claims = Vec::new();
    if local {
        let size = 20 * (1 + rng.below(8) as i64);
        claims.push(waiting_claim(&format!("local-{i}"), "local", size));
        claim_volume(pod, &format!("local-{i}"), &format!("local-{i}"));
    }
    if provisioned {
        claims.push(waiting_claim(&format!("fast-{i}"), "fast", 10));
        claim_volume(pod, &format!("fast-{i}"), &format!("fast-{i}"));
    }
    claims
}

/// The classes of the volume-binding scenario: local volumes made by an administrator, and a
/// provisioner serving zones a and b; both bind when the first pod using a claim is placed.
fn waiting_classes() -> Vec<StorageClass> {
    [
        serde_json::json!({
            "metadata": {"name": "local"},
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "WaitForFirstConsumer"
        }),
        serde_json::json!({
            "metadata": {"name": "fast"},
            "provisioner": "csi.example.com",
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowedTopologies": [{"matchLabelExpressions": [
                {"key": "topology.kubernetes.io/zone", "values": ["zone-a", "zone-b"]}
            ]}]
        }),
    ]
    .into_iter()
    .map(|class| serde_json::from_value(class).expect("valid StorageClass"))
    .collect()
}

/// The local volume of node `node` (the `i`th): 100 or 200 GiB, usable from that node only.
fn local_volume(i: usize, node: &str) -> core::PersistentVolume {
    let size = if i.is_multiple_of(2) {
        "100Gi"
    } else {
        "200Gi"
    };
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("local-pv-{i:05}")},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "local",
            "local": {"path": "/mnt/disks/ssd0"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
            ]}]}}
        },
        "status": {"phase": "Available"}
    }))
    .expect("valid PersistentVolume")
}

/// An unbound claim for `size_gib` GiB of `class`.
fn waiting_claim(name: &str, class: &str, size_gib: i64) -> core::PersistentVolumeClaim {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "bench", "uid": format!("uid-{name}")},
        "spec": {
            "storageClassName": class,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": format!("{size_gib}Gi")}}
        },
        "status": {"phase": "Pending"}
    }))
    .expect("valid PersistentVolumeClaim")
}

/// Deployments of the topology-spread scenario.
const SPREAD_GROUPS: usize = 100;

fn replica_set(group: usize) -> Object {
    Object::from_json(
        crate::events::Kind::ReplicaSet,
        serde_json::json!({
            "metadata": {"name": format!("web-{group}"), "namespace": "bench"},
            "spec": {"selector": {"matchLabels": {"app": format!("web-{group}")}}},
        }),
    )
    .expect("a valid ReplicaSet")
}

/// Makes `pod` a replica of Deployment `group` (its label and its ReplicaSet).
fn replica_of(pod: &mut sdk::Pod, group: usize) {
    app(pod, format!("web-{group}"));
    pod.controller = Some(sdk::ControllerRef {
        api_version: "apps/v1".into(),
        kind: "ReplicaSet".into(),
        name: format!("web-{group}"),
    });
}

/// A pod to schedule in the topology-spread scenario: half spread themselves, half are spread by
/// the cluster defaults.
fn topology_spread(pod: &mut sdk::Pod, rng: &mut Rng) {
    let group = rng.below(SPREAD_GROUPS as u64) as usize;
    replica_of(pod, group);
    if rng.chance(0.5) {
        let selector = sdk::LabelSelector {
            match_labels: [("app".to_string(), format!("web-{group}"))]
                .into_iter()
                .collect(),
            match_expressions: Vec::new(),
        };
        for (key, when) in [(ZONE, "DoNotSchedule"), (HOSTNAME, "ScheduleAnyway")] {
            pod.topology_spread_constraints
                .push(sdk::TopologySpreadConstraint {
                    max_skew: 1,
                    topology_key: key.into(),
                    when_unsatisfiable: when.into(),
                    label_selector: Some(selector.clone()),
                    ..sdk::TopologySpreadConstraint::default()
                });
        }
    }
}

/// Gives a pod of the mixed scenarios one pod-aware trait, or none (about 30% of the pods have
/// one): required anti-affinity within a StatefulSet-like group (10%), a Deployment's replica
/// (10%), preferred affinity to a group's zone (5%), or a host port (5%).
fn some_pod_aware(pod: &mut sdk::Pod, pods: usize, rng: &mut Rng) {
    let groups = pods.div_ceil(ANTI_AFFINITY_GROUP).max(1) as u64;
    let draw = rng.below(20);
    if draw < 2 {
        let group = format!("db-{}", rng.below(groups));
        pod.pod_affinity
            .required_anti_affinity
            .push(app_term(group.clone(), HOSTNAME));
        app(pod, group);
    } else if draw < 4 {
        topology_spread(pod, rng);
    } else if draw < 5 {
        pod.pod_affinity
            .preferred_affinity
            .push(sdk::WeightedPodAffinityTerm {
                weight: 50,
                term: app_term(format!("db-{}", rng.below(groups)), ZONE),
            });
    } else if draw < 6 {
        pod.host_ports.push(sdk::HostPort {
            host_ip: "0.0.0.0".into(),
            protocol: "TCP".into(),
            port: 9100,
        });
    }
}

/// Replicas per group of the pod-anti-affinity scenario; pods per cache group of pod-affinity.
const ANTI_AFFINITY_GROUP: usize = 20;
const CACHE_GROUPS: usize = 50;

fn app(pod: &mut sdk::Pod, value: String) {
    pod.labels = [("app".to_string(), value)].into_iter().collect();
}

fn app_term(value: String, topology_key: &str) -> sdk::PodAffinityTerm {
    sdk::PodAffinityTerm {
        label_selector: Some(sdk::LabelSelector {
            match_labels: [("app".to_string(), value)].into_iter().collect(),
            match_expressions: Vec::new(),
        }),
        namespaces: Vec::new(),
        namespace_selector: None,
        topology_key: topology_key.into(),
    }
}

const HOSTNAME: &str = "kubernetes.io/hostname";
const ZONE: &str = "topology.kubernetes.io/zone";

/// The pods running before a scenario starts: one per node for the pod-affinity and
/// topology-spread scenarios, none for the others.
fn running_pods(
    scenario: Scenario,
    nodes: &[sdk::NodeInfo],
    rng: &mut Rng,
) -> Vec<(sdk::Pod, String)> {
    if scenario == Scenario::Preemption {
        return filling_pods(nodes);
    }
    if !matches!(
        scenario,
        Scenario::PodAntiAffinity | Scenario::PodAffinity | Scenario::TopologySpread
    ) {
        return Vec::new();
    }
    let requests = Resources {
        milli_cpu: 100,
        memory: 128 << 20,
        ..Resources::default()
    };
    (0..nodes.len())
        .map(|i| {
            let mut pod = sdk::Pod {
                namespace: "bench".into(),
                name: format!("running-{i:06}"),
                scheduler_name: crate::DEFAULT_SCHEDULER_NAME.into(),
                requests: requests.clone(),
                non_zero_requests: requests.clone(),
                ..sdk::Pod::default()
            };
            let node = if scenario == Scenario::TopologySpread {
                replica_of(&mut pod, i % SPREAD_GROUPS);
                rng.below(nodes.len() as u64) as usize
            } else if scenario == Scenario::PodAntiAffinity {
                // Groups fill hosts in turn, so no two replicas of a group share one.
                let group = format!("db-{}", i / ANTI_AFFINITY_GROUP);
                app(&mut pod, group.clone());
                pod.pod_affinity
                    .required_anti_affinity
                    .push(app_term(group, HOSTNAME));
                i
            } else {
                app(&mut pod, format!("cache-{}", i % CACHE_GROUPS));
                rng.below(nodes.len() as u64) as usize
            };
            (pod, nodes[node].name.clone())
        })
        .collect()
}

/// The priority of the pods the preemption scenario schedules.
const PREEMPTOR_PRIORITY: i32 = 1000;

/// Four pods per node, each a quarter of its cpu and memory, of priorities 0 to 3, started one
/// second apart.
fn filling_pods(nodes: &[sdk::NodeInfo]) -> Vec<(sdk::Pod, String)> {
    nodes
        .iter()
        .enumerate()
        .flat_map(|(i, node)| {
            let quarter = Resources {
                milli_cpu: node.allocatable.milli_cpu / 4,
                memory: node.allocatable.memory / 4,
                ..Resources::default()
            };
            (0..4).map(move |k| {
                let pod = sdk::Pod {
                    namespace: "bench".into(),
                    name: format!("batch-{i:06}-{k}"),
                    scheduler_name: crate::DEFAULT_SCHEDULER_NAME.into(),
                    priority: k,
                    start_time_millis: Some(1_700_000_000_000 + (i * 4 + k as usize) as i64 * 1000),
                    requests: quarter.clone(),
                    non_zero_requests: quarter.clone(),
                    ..sdk::Pod::default()
                };
                (pod, node.name.clone())
            })
        })
        .collect()
}

/// The pod (anti-)affinity of a pod to schedule in the pod-affinity scenarios.
fn pod_affinity(scenario: Scenario, pod: &mut sdk::Pod, nodes: usize, rng: &mut Rng) {
    let affinity = &mut pod.pod_affinity;
    match scenario {
        Scenario::PodAntiAffinity => {
            // Half join a running group (whose hosts they must avoid), half start new groups.
            let groups = nodes.div_ceil(ANTI_AFFINITY_GROUP).max(1) as u64;
            let group = format!("db-{}", rng.below(2 * groups));
            affinity
                .required_anti_affinity
                .push(app_term(group.clone(), HOSTNAME));
            app(pod, group);
        }
        Scenario::PodAffinity => {
            let group = rng.below(CACHE_GROUPS as u64);
            let cache = format!("cache-{group}");
            if rng.chance(0.5) {
                affinity.required_affinity.push(app_term(cache, ZONE));
            } else {
                affinity
                    .preferred_affinity
                    .push(sdk::WeightedPodAffinityTerm {
                        weight: 100,
                        term: app_term(cache, HOSTNAME),
                    });
            }
            let own = format!("web-{group}");
            if rng.chance(0.3) {
                affinity
                    .preferred_anti_affinity
                    .push(sdk::WeightedPodAffinityTerm {
                        weight: 50,
                        term: app_term(own.clone(), HOSTNAME),
                    });
            }
            app(pod, own);
        }
        _ => {}
    }
}

/// A pod of [`Scenario::Gated`] (requests only, as Basic's) as the Kubernetes object the service
/// reads from its events.
pub fn pod_object(pod: &sdk::Pod) -> core::Pod {
    let requests = &pod.requests;
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": format!("uid-{}", pod.name),
                     "labels": pod.labels.iter().collect::<std::collections::BTreeMap<_, _>>()},
        "spec": {
            "schedulerName": pod.scheduler_name,
            "priority": pod.priority,
            "containers": [{
                "name": "main",
                "image": "registry.example/app:1",
                "resources": {"requests": {
                    "cpu": format!("{}m", requests.milli_cpu),
                    "memory": requests.memory.to_string(),
                }},
            }],
        },
    }))
    .expect("valid Pod")
}

/// `count` pods held by a scheduling gate (`example.com/quota`, as a queueing controller such
/// as Kueue sets it), which the service keeps out of its queue.
pub fn gated_pod_objects(count: usize) -> Vec<core::Pod> {
    (0..count)
        .map(|i| {
            let mut pod = pod_object(&sdk::Pod {
                namespace: "bench".into(),
                name: format!("gated-{i:06}"),
                scheduler_name: crate::DEFAULT_SCHEDULER_NAME.into(),
                requests: Resources {
                    milli_cpu: 100,
                    memory: 128 << 20,
                    ..Resources::default()
                },
                ..sdk::Pod::default()
            });
            let spec = pod.spec.as_mut().expect("pod_object sets a spec");
            spec.scheduling_gates = Some(vec![core::PodSchedulingGate {
                name: "example.com/quota".into(),
            }]);
            pod
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenarios_read_back_from_their_names() {
        for scenario in Scenario::EACH.into_iter().chain([Scenario::All]) {
            assert_eq!(scenario.name().parse(), Ok(scenario));
        }
        let refused = "mixd".parse::<Scenario>().unwrap_err();
        assert!(
            refused.contains("`mixd`") && refused.contains("node-affinity"),
            "{refused}"
        );
    }

    #[test]
    fn the_same_seed_gives_the_same_cluster() {
        let names = |c: &Synthetic| -> Vec<String> {
            c.nodes
                .iter()
                .map(|n| n.name.clone())
                .chain(c.pods.iter().map(|p| format!("{:?}", p)))
                .collect()
        };
        let a = cluster(Scenario::Mixed, 50, 80, 3);
        assert_eq!(names(&a), names(&cluster(Scenario::Mixed, 50, 80, 3)));
        assert_ne!(names(&a), names(&cluster(Scenario::Mixed, 50, 80, 4)));
        assert_eq!((a.nodes.len(), a.pods.len()), (50, 80));
    }
}
