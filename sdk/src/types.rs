//! The data plugins see: plain Rust mirrors of the records in `wit/plugin.wit`.

use std::borrow::Cow;

use crate::mirror::Nodes;
use crate::{ClaimAllocation, DevicePool, PodClaim};

/// A node as the host and a plugin's mirror name it: small and dense, assigned by the host,
/// reused after the node is removed. Batch calls pass these; [`Nodes`] looks them up.
pub type NodeId = u32;

/// An existing pod as the host and a plugin's mirror name it (like [`NodeId`], reused after the pod
/// leaves).
pub type PodId = u32;

/// A sorted set of `key=value` pairs (labels, annotations, a node selector).
///
/// Filters look labels up for every node of every cycle, so all keys and values live in one
/// buffer with a compact index beside it: a lookup touches two allocations instead of chasing a
/// pointer per string, and small sets are scanned comparing lengths before bytes.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Labels {
    text: String,
    /// Per pair, sorted by key: key start, key end (= value start), value end, in `text`.
    spans: Vec<[u32; 3]>,
}

/// Above this many pairs, lookups bisect instead of scanning.
const LABELS_SCAN_LIMIT: usize = 12;

impl Labels {
    /// Builds a label set; later duplicates of a key replace earlier ones.
    pub fn new(pairs: impl IntoIterator<Item = (String, String)>) -> Self {
        Labels::build(pairs.into_iter().collect())
    }

    /// Builds a label set from borrowed pairs, as [`Labels::new`] does from owned ones, copying
    /// each key and value once, into the set's buffer.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Labels::build(pairs.into_iter().collect())
    }

    /// A set from the buffer and spans it keeps. `in_order` says the keys are sorted with none
    /// twice; otherwise they are sorted, the last of a key kept, as [`Labels::from_pairs`] does.
    pub(crate) fn from_spans(text: String, spans: Vec<[u32; 3]>, in_order: bool) -> Self {
        let labels = Labels { text, spans };
        if in_order {
            labels
        } else {
            Labels::from_pairs(labels.iter())
        }
    }

    fn build<S: AsRef<str>>(mut pairs: Vec<(S, S)>) -> Self {
        // A stable sort keeps insertion order among equal keys, so the last one wins below.
        pairs.sort_by(|a, b| a.0.as_ref().cmp(b.0.as_ref()));
        pairs.dedup_by(|later, kept| {
            let duplicate = later.0.as_ref() == kept.0.as_ref();
            if duplicate {
                std::mem::swap(later, kept);
            }
            duplicate
        });
        let mut labels = Labels {
            text: String::with_capacity(
                pairs
                    .iter()
                    .map(|(k, v)| k.as_ref().len() + v.as_ref().len())
                    .sum(),
            ),
            spans: Vec::with_capacity(pairs.len()),
        };
        for (key, value) in &pairs {
            let start = labels.text.len() as u32;
            labels.text.push_str(key.as_ref());
            let middle = labels.text.len() as u32;
            labels.text.push_str(value.as_ref());
            labels.spans.push([start, middle, labels.text.len() as u32]);
        }
        labels
    }

    fn key_at(&self, span: &[u32; 3]) -> &str {
        &self.text[span[0] as usize..span[1] as usize]
    }

    fn value_at(&self, span: &[u32; 3]) -> &str {
        &self.text[span[1] as usize..span[2] as usize]
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&str> {
        if self.spans.len() <= LABELS_SCAN_LIMIT {
            return self
                .spans
                .iter()
                .find(|s| (s[1] - s[0]) as usize == key.len() && self.key_at(s) == key)
                .map(|s| self.value_at(s));
        }
        self.spans
            .binary_search_by(|s| self.key_at(s).cmp(key))
            .ok()
            .map(|i| self.value_at(&self.spans[i]))
    }

    /// True when `key` is present (with any value).
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The pairs, sorted by key.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &str)> + '_ {
        self.spans
            .iter()
            .map(|s| (self.key_at(s), self.value_at(s)))
    }

    /// Number of pairs.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// True when there is no pair.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The pairs as owned strings, sorted by key.
    pub fn to_vec(&self) -> Vec<(String, String)> {
        self.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
}

impl std::fmt::Debug for Labels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for Labels {
    fn from_iter<T: IntoIterator<Item = (K, V)>>(iter: T) -> Self {
        Labels::new(iter.into_iter().map(|(k, v)| (k.into(), v.into())))
    }
}

/// The standard resource names, as they appear in Kubernetes objects.
pub mod resource {
    /// CPU, in millicores in [`Resources::milli_cpu`].
    pub const CPU: &str = "cpu";
    /// Memory, in bytes.
    pub const MEMORY: &str = "memory";
    /// Local ephemeral storage, in bytes.
    pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
    /// Pod slots.
    pub const PODS: &str = "pods";
}

/// Amounts of resources in Kubernetes' canonical units.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Resources {
    /// CPU in millicores.
    pub milli_cpu: i64,
    /// Memory in bytes.
    pub memory: i64,
    /// Ephemeral storage in bytes.
    pub ephemeral_storage: i64,
    /// Pod slots (a node's allocatable `pods`).
    pub pods: i64,
    /// Every other resource by name, sorted by name.
    pub scalar: Vec<(String, i64)>,
}

impl Resources {
    /// The amount of a resource by its Kubernetes name (0 when absent).
    pub fn get(&self, name: &str) -> i64 {
        match name {
            resource::CPU => self.milli_cpu,
            resource::MEMORY => self.memory,
            resource::EPHEMERAL_STORAGE => self.ephemeral_storage,
            resource::PODS => self.pods,
            _ => self.scalar(name).unwrap_or(0),
        }
    }

    /// The amount of a scalar (extended) resource, or `None` when it is not listed.
    pub fn scalar(&self, name: &str) -> Option<i64> {
        self.scalar
            .binary_search_by(|(k, _)| k.as_str().cmp(name))
            .ok()
            .map(|i| self.scalar[i].1)
    }

    /// Sets the amount of a resource by its Kubernetes name.
    pub fn set(&mut self, name: &str, value: i64) {
        match name {
            resource::CPU => self.milli_cpu = value,
            resource::MEMORY => self.memory = value,
            resource::EPHEMERAL_STORAGE => self.ephemeral_storage = value,
            resource::PODS => self.pods = value,
            _ => match self.scalar.binary_search_by(|(k, _)| k.as_str().cmp(name)) {
                Ok(i) => self.scalar[i].1 = value,
                Err(i) => self.scalar.insert(i, (name.to_string(), value)),
            },
        }
    }

    /// Adds `other` to `self`, resource by resource.
    pub fn add(&mut self, other: &Resources) {
        self.combine(other, |a, b| a.saturating_add(b));
    }

    /// Subtracts `other` from `self`, resource by resource.
    pub fn subtract(&mut self, other: &Resources) {
        self.combine(other, |a, b| a.saturating_sub(b));
    }

    /// Sets each resource to the larger of the two.
    pub fn max_with(&mut self, other: &Resources) {
        self.combine(other, i64::max);
    }

    fn combine(&mut self, other: &Resources, op: impl Fn(i64, i64) -> i64) {
        self.milli_cpu = op(self.milli_cpu, other.milli_cpu);
        self.memory = op(self.memory, other.memory);
        self.ephemeral_storage = op(self.ephemeral_storage, other.ephemeral_storage);
        self.pods = op(self.pods, other.pods);
        for (name, value) in &other.scalar {
            let current = self.scalar(name).unwrap_or(0);
            self.set(name, op(current, *value));
        }
    }

    /// True when every amount is zero (scalar resources listed with 0 count as zero).
    pub fn is_zero(&self) -> bool {
        self.milli_cpu == 0
            && self.memory == 0
            && self.ephemeral_storage == 0
            && self.pods == 0
            && self.scalar.iter().all(|(_, v)| *v == 0)
    }
}

/// A node taint (`spec.taints[]`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Taint {
    /// The taint key.
    pub key: String,
    /// The taint value; may be empty.
    pub value: String,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

/// Taint effects, spelled as in Kubernetes.
pub mod effect {
    /// New pods that do not tolerate the taint are not placed on the node.
    pub const NO_SCHEDULE: &str = "NoSchedule";
    /// The node is avoided, not ruled out (TaintToleration scores it lower).
    pub const PREFER_NO_SCHEDULE: &str = "PreferNoSchedule";
    /// Like `NoSchedule` for placement (running pods are also evicted, which is not the scheduler's part).
    pub const NO_EXECUTE: &str = "NoExecute";
}

/// A pod toleration (`spec.tolerations[]`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Toleration {
    /// The taint key it tolerates; empty with `Exists` tolerates every taint.
    pub key: String,
    /// `Equal`, `Exists`, or empty (`Equal`).
    pub operator: String,
    /// The value compared under `Equal`.
    pub value: String,
    /// Empty matches every effect.
    pub effect: String,
    /// How long a `NoExecute` taint is tolerated; placement ignores it.
    pub toleration_seconds: Option<i64>,
}

/// One `matchExpressions` / `matchFields` entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct NodeSelectorRequirement {
    /// The label key (or, in `matchFields`, the field: only `metadata.name`).
    pub key: String,
    /// `In`, `NotIn`, `Exists`, `DoesNotExist`, `Gt` or `Lt`.
    pub operator: String,
    /// The values the operator compares with; empty for `Exists` and `DoesNotExist`.
    pub values: Vec<String>,
}

/// A node selector term: all its requirements must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct NodeSelectorTerm {
    /// Requirements on the node's labels.
    pub match_expressions: Vec<NodeSelectorRequirement>,
    /// Requirements on the node's fields (`metadata.name`).
    pub match_fields: Vec<NodeSelectorRequirement>,
}

/// A preferred scheduling term and its weight.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct PreferredSchedulingTerm {
    /// Added to the score of every node matching `preference` (1..=100).
    pub weight: i32,
    /// The term a node must match to get the weight.
    pub preference: NodeSelectorTerm,
}

/// `spec.affinity.nodeAffinity`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct NodeAffinity {
    /// `None` when the pod has no required node affinity; `Some(vec![])` matches no node.
    pub required: Option<Vec<NodeSelectorTerm>>,
    /// `preferredDuringSchedulingIgnoredDuringExecution`.
    pub preferred: Vec<PreferredSchedulingTerm>,
}

/// A StorageClass named by a claim.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct StorageClassInfo {
    /// The class name.
    pub name: String,
    /// `Immediate` or `WaitForFirstConsumer`; `None` means `Immediate`.
    pub volume_binding_mode: Option<String>,
    /// `provisioner`; empty when unset.
    pub provisioner: String,
    /// `allowedTopologies`, each `matchLabelExpressions` entry as an `In` requirement; empty
    /// allows every node.
    pub allowed_topologies: Vec<NodeSelectorTerm>,
}

/// The claim a PersistentVolume is reserved for or bound to (`spec.claimRef`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ClaimRef {
    /// The claim's namespace.
    pub namespace: String,
    /// The claim's name.
    pub name: String,
    /// Empty when the reference names no uid.
    pub uid: String,
}

/// A PersistentVolume: the one a claim is bound to, or one it could bind to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct VolumeInfo {
    /// The volume name.
    pub name: String,
    /// Its labels (the zone and region labels VolumeZone reads).
    pub labels: Labels,
    /// The class it belongs to (the beta annotation wins over `spec.storageClassName`).
    pub storage_class_name: String,
    /// `spec.capacity.storage` in bytes (0 when unset).
    pub capacity: i64,
    /// `spec.accessModes`.
    pub access_modes: Vec<String>,
    /// `spec.volumeMode`; `Filesystem` when unset.
    pub volume_mode: String,
    /// `spec.volumeAttributesClassName`.
    pub volume_attributes_class_name: Option<String>,
    /// `status.phase`; empty when unset.
    pub phase: String,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// `spec.claimRef`.
    pub claim_ref: Option<ClaimRef>,
    /// `spec.nodeAffinity.required.nodeSelectorTerms`; `None` when every node can use it.
    pub node_affinity: Option<Vec<NodeSelectorTerm>>,
}

/// A PersistentVolumeClaim with the objects it refers to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ClaimInfo {
    /// Empty when unbound.
    pub volume_name: String,
    /// The class from the beta annotation or `spec.storageClassName`; empty when neither is set.
    pub storage_class_name: String,
    /// The class, when it exists.
    pub storage_class: Option<StorageClassInfo>,
    /// The bound volume, when the claim is bound and the volume exists.
    pub volume: Option<VolumeInfo>,
    /// `metadata.uid`.
    pub uid: String,
    /// `status.phase`; empty when unset.
    pub phase: String,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// The annotation `pv.kubernetes.io/bind-completed` is set.
    pub bind_completed: bool,
    /// The annotation `volume.kubernetes.io/selected-node`.
    pub selected_node: Option<String>,
    /// `spec.resources.requests.storage` in bytes (0 when unset).
    pub requested_storage: i64,
    /// `spec.accessModes`.
    pub access_modes: Vec<String>,
    /// `spec.volumeMode`; `Filesystem` when unset.
    pub volume_mode: String,
    /// `spec.volumeAttributesClassName`.
    pub volume_attributes_class_name: Option<String>,
    /// `spec.selector`; `None` matches every volume.
    pub selector: Option<LabelSelector>,
}

impl ClaimInfo {
    /// Bound to a volume, and the binding completed (`volumeName` and `bind-completed`).
    pub fn is_fully_bound(&self) -> bool {
        !self.volume_name.is_empty() && self.bind_completed
    }

    /// Not fully bound, and left to the scheduler: no volume named yet and a class that waits for
    /// the first consumer.
    pub fn waits_for_first_consumer(&self) -> bool {
        !self.is_fully_bound()
            && self.volume_name.is_empty()
            && self
                .storage_class
                .as_ref()
                .is_some_and(|c| c.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer"))
    }
}

/// A pod volume backed by a claim.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct VolumeClaim {
    /// The pod volume's name.
    pub volume: String,
    /// The claim it names, in the pod's namespace (for a generic ephemeral volume, the claim
    /// made for it: `<pod name>-<volume name>`).
    pub claim_name: String,
    /// A generic ephemeral volume.
    pub ephemeral: bool,
    /// `None` when the claim does not exist in the pod's namespace.
    pub claim: Option<ClaimInfo>,
}

/// One `matchExpressions` entry of a label selector.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LabelSelectorRequirement {
    /// The label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    /// The values `In` and `NotIn` compare with.
    pub values: Vec<String>,
}

/// A label selector (`metav1.LabelSelector`): every pair of `match_labels` and every requirement
/// must hold; an empty selector matches every label set. See [`crate::helpers::selector_matches`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    /// `matchLabels`.
    pub match_labels: Labels,
    /// `matchExpressions`.
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// A pod (anti-)affinity term, with `matchLabelKeys` / `mismatchLabelKeys` already merged into its
/// label selector by the host.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct PodAffinityTerm {
    /// `None` matches no pod.
    pub label_selector: Option<LabelSelector>,
    /// With no namespace selector and no names: the namespace of the pod that has the term.
    pub namespaces: Vec<String>,
    /// `None`: only `namespaces`; an empty selector: every namespace.
    pub namespace_selector: Option<LabelSelector>,
    /// The node label whose values are the topology domains.
    pub topology_key: String,
}

/// A preferred pod (anti-)affinity term and its weight.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct WeightedPodAffinityTerm {
    /// 1..=100.
    pub weight: i32,
    /// The term.
    pub term: PodAffinityTerm,
}

/// `spec.affinity.podAffinity` and `spec.affinity.podAntiAffinity`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct PodAffinity {
    /// `podAffinity.requiredDuringSchedulingIgnoredDuringExecution`.
    pub required_affinity: Vec<PodAffinityTerm>,
    /// `podAffinity.preferredDuringSchedulingIgnoredDuringExecution`.
    pub preferred_affinity: Vec<WeightedPodAffinityTerm>,
    /// `podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution`.
    pub required_anti_affinity: Vec<PodAffinityTerm>,
    /// `podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution`.
    pub preferred_anti_affinity: Vec<WeightedPodAffinityTerm>,
}

impl PodAffinity {
    /// True when the pod has no pod affinity or anti-affinity term at all.
    pub fn is_empty(&self) -> bool {
        self.required_affinity.is_empty()
            && self.preferred_affinity.is_empty()
            && self.required_anti_affinity.is_empty()
            && self.preferred_anti_affinity.is_empty()
    }
}

/// A port a container wants on its node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPort {
    /// `hostIP`, `0.0.0.0` when unset.
    pub host_ip: String,
    /// `TCP`, `UDP` or `SCTP`, `TCP` when unset.
    pub protocol: String,
    /// `hostPort` (> 0).
    pub port: i32,
}

/// One of `spec.topologySpreadConstraints`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct TopologySpreadConstraint {
    /// `maxSkew`.
    pub max_skew: i32,
    /// `topologyKey`.
    pub topology_key: String,
    /// `DoNotSchedule` or `ScheduleAnyway`.
    pub when_unsatisfiable: String,
    /// `None` matches no pod.
    pub label_selector: Option<LabelSelector>,
    /// `minDomains`.
    pub min_domains: Option<i32>,
    /// `Honor` or `Ignore`; empty means `Honor`.
    pub node_affinity_policy: String,
    /// `Honor` or `Ignore`; empty means `Ignore`.
    pub node_taints_policy: String,
    /// `matchLabelKeys`.
    pub match_label_keys: Vec<String>,
}

/// A container of the pod.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Container {
    /// The container name.
    pub name: String,
    /// The image reference.
    pub image: String,
}

/// The pod being scheduled.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Pod {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`; may be empty outside a server.
    pub uid: String,
    /// `metadata.labels`.
    pub labels: Labels,
    /// `metadata.annotations`.
    pub annotations: Labels,
    /// `spec.schedulerName`: which profile schedules it.
    pub scheduler_name: String,
    /// `spec.priority` (0 when unset); always sent, whatever the plugin reads.
    pub priority: i32,
    /// `spec.nodeName` when set, else empty.
    pub node_name: String,
    /// `spec.nodeSelector`.
    pub node_selector: Labels,
    /// `spec.affinity.nodeAffinity`.
    pub node_affinity: Option<NodeAffinity>,
    /// `spec.tolerations`.
    pub tolerations: Vec<Toleration>,
    /// Effective request (containers, init containers, sidecars, overhead).
    pub requests: Resources,
    /// The same with missing cpu/memory container requests counted as 100m / 200Mi.
    pub non_zero_requests: Resources,
    /// The pod's volumes backed by claims, with the claims resolved.
    pub volume_claims: Vec<VolumeClaim>,
    /// `spec.containers` (names and images).
    pub containers: Vec<Container>,
    /// The images of `spec.initContainers`, then of `spec.containers`, as written in the pod
    /// (the `images` part, sent through the `details` interface of `wit/plugin.wit`).
    pub images: Vec<String>,
    /// `spec.volumes`, with their claims looked up (the `volumes` part, sent through the
    /// `details` interface).
    pub volumes: Vec<PodVolume>,
    /// `spec.resourceClaims`, with their ResourceClaims and DeviceClasses looked up (the
    /// `claims` part, sent through the `devices` interface).
    pub claims: Vec<PodClaim>,
    /// The gang it belongs to, looked up by the host (the `group` part, sent through the
    /// `groups` interface).
    pub group: Option<PodGroup>,
    /// `spec.affinity.podAffinity` and `podAntiAffinity`.
    pub pod_affinity: PodAffinity,
    /// The host ports of its containers and restartable init containers, sorted, each once.
    pub host_ports: Vec<HostPort>,
    /// `spec.topologySpreadConstraints`.
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
    /// The selector system default spread constraints use for this pod (see `wit/plugin.wit`).
    pub default_spread_selector: Option<LabelSelector>,
    /// `metadata.deletionTimestamp` is set. The host's own: never sent in a pod part, only as
    /// [`ExistingPod::terminating`].
    pub terminating: bool,
    /// The owner reference marked `controller: true`, if any. The host's own: it works out
    /// [`Pod::default_spread_selector`] from it, and never sends it.
    pub controller: Option<ControllerRef>,
    /// `spec.preemptionPolicy` is `Never`: the pod waits instead of evicting lower-priority pods.
    /// The host's own, like the three fields below (DefaultPreemption reads them).
    pub never_preempts: bool,
    /// `status.startTime` in milliseconds since the epoch: among victims of equal priority the
    /// one that started last is evicted first.
    pub start_time_millis: Option<i64>,
    /// `status.nominatedNodeName`: the node a preemption freed for this pod, empty when none.
    pub nominated_node_name: String,
    /// Terminating because a scheduler preempted it (a deletion timestamp and the condition
    /// `DisruptionTarget=True` with reason `PreemptionByScheduler`).
    pub terminating_by_preemption: bool,
    /// `spec.schedulingGates`, by name: while any is left, PreEnqueue (the SchedulingGates
    /// plugin) keeps the pod out of the scheduling queue. Sent only to PreEnqueue and Permit.
    pub scheduling_gates: Vec<String>,
    /// `spec.workloadRef` (Kubernetes 1.35's Workload API) as `WORKLOAD/POD-GROUP`, or
    /// `WORKLOAD/POD-GROUP/REPLICA-KEY` when it names a replica; empty when unset. The host's
    /// own: it joins the pod to that gang ([`Pod::group`]), as the label
    /// `scheduling.x-k8s.io/pod-group` does for a PodGroup.
    pub workload_ref: String,
}

/// What a Permit plugin decided for a reserved pod (kube-scheduler's Permit statuses).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Permit {
    /// The pod may be bound, as far as this plugin is concerned.
    Allow,
    /// The pod waits, still reserved, until this plugin lets it go or `timeout` passes (then it
    /// is rejected and unreserved).
    Wait {
        /// How long it may wait.
        timeout: std::time::Duration,
    },
    /// The pod is not to be bound: it is unreserved and tried again later, with this reason.
    Reject(String),
}

/// A Permit plugin's answer: its decision for the pod of the call, and the pods (by
/// `namespace/name`) waiting at this plugin that it now allows (as kube-scheduler's plugins
/// allow waiting pods through the framework handle).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermitAnswer {
    /// The decision for the pod of the call.
    pub permit: Permit,
    /// The waiting pods (`namespace/name`) this plugin now lets go.
    pub allow: Vec<String>,
    /// The waiting pods this plugin now rejects: each is unreserved and retried after backoff
    /// (kube-scheduler's `WaitingPod.Reject`). Only a plugin that reads groups
    /// ([`crate::Plugin::READS_GROUPS`]) can say this.
    pub reject: Vec<Rejection>,
}

impl PermitAnswer {
    /// Allow, releasing nobody.
    pub fn allow() -> Self {
        PermitAnswer {
            permit: Permit::Allow,
            allow: Vec::new(),
            reject: Vec::new(),
        }
    }
}

/// A waiting pod a plugin rejects, with the message its condition is to carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The waiting pod, `namespace/name`.
    pub pod: String,
    /// Why (kube-scheduler's rejection message, e.g. `optimistic rejection in PostFilter`).
    pub message: String,
}

/// A PostFilter plugin's answer for a pod no node could take (kube-scheduler's PostFilter
/// status when it does not make the pod schedulable): reasons to add to the pod's FitError
/// after the preemption's, and waiting pods to reject.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PostFilterAnswer {
    /// Reasons, joined with `, ` after the preemption's (kube-scheduler's PostFilter status).
    pub reasons: Vec<String>,
    /// Waiting pods to reject.
    pub reject: Vec<Rejection>,
}

/// Where a QueueSort plugin puts a pod in the scheduling queue: after priority (highest first,
/// as kube-scheduler's every QueueSort), earlier `timestamp_millis` first, then `name` in order.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QueueKey {
    /// Milliseconds since the epoch (coscheduling: its PodGroup's creation, else when the pod
    /// was first queued).
    pub timestamp_millis: i64,
    /// The tie-break (coscheduling: the pod's `namespace/name`).
    pub name: String,
}

/// The group (gang) a pod belongs to, as the host sees it when it sends the pod: its PodGroup
/// (`scheduling.x-k8s.io/v1alpha1`, named by the pod's label `scheduling.x-k8s.io/pod-group`) or
/// its Workload (`scheduling.k8s.io/v1alpha1`, named by `spec.workloadRef`), and where its
/// members stand. The `group` part of a pod ([`PodParts::GROUP`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct PodGroup {
    /// The group's `namespace/name`.
    pub full_name: String,
    /// The group's object exists.
    pub found: bool,
    /// `minMember` (a Workload's gang `minCount`).
    pub min_member: u32,
    /// `minResources`, when set.
    pub min_resources: Option<Resources>,
    /// `scheduleTimeoutSeconds`, when set.
    pub schedule_timeout_seconds: Option<u32>,
    /// The group object's creation, in milliseconds since the epoch.
    pub created_millis: i64,
    /// The group's pods that exist and are not done (Succeeded or Failed), this pod included:
    /// kube-scheduler's pod lister with coscheduling's label selector.
    pub members: u32,
    /// The group's pods assigned a node (bound, assumed or waiting at Permit), this pod not
    /// included (coscheduling's `CalculateAssignedPods`).
    pub assigned: u32,
    /// The summed requests of those assigned pods, and their number in `pods`: what the group
    /// itself holds of the cluster.
    pub assigned_requests: Resources,
    /// The group's pods waiting at Permit (`namespace/name`, sorted), this pod not included.
    pub waiting: Vec<String>,
}

/// The volumes chosen for a pod on one node (kube-scheduler's `PodVolumes`), which the host binds
/// before the pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodVolumes {
    /// Claims (by name, in the pod's namespace) to bind to an existing volume (by name), in the
    /// order they are to be bound.
    pub static_bindings: Vec<(String, String)>,
    /// Claims whose volume is to be provisioned for the node.
    pub provisions: Vec<String>,
}

impl PodVolumes {
    /// Nothing to bind: every claim of the pod is bound already.
    pub fn is_empty(&self) -> bool {
        self.static_bindings.is_empty() && self.provisions.is_empty()
    }
}

/// Pods a plugin has no opinion on, by what it declares ([`crate::Plugin::IDLE_WITHOUT`]): the
/// host leaves the plugin out of such a pod's cycle, and `sdk::testing` checks the plugin's plan
/// agrees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdleWhen {
    /// The pod lacks every one of these parts.
    pub without: PodParts,
    /// ... and no placed pod has a pod (anti-)affinity term: the plugin reads placed pods'
    /// affinity and is idle without the pod's own.
    pub nor_placed_affinity: bool,
}

impl IdleWhen {
    /// What a plugin declaring `without` (its `IDLE_WITHOUT`) and reading `existing` of placed
    /// pods promises; `None` when it promises nothing.
    pub const fn declared(without: PodParts, existing: ExistingPodParts) -> Option<IdleWhen> {
        if without.bits() == PodParts::NONE.bits() {
            return None;
        }
        Some(IdleWhen {
            without,
            nor_placed_affinity: without.contains(PodParts::POD_AFFINITY)
                && existing.contains(ExistingPodParts::POD_AFFINITY),
        })
    }

    /// Whether the plugin has no opinion on `pod`, `placed_affinity` saying whether any placed
    /// pod has a pod (anti-)affinity term.
    pub fn holds(self, pod: &Pod, placed_affinity: bool) -> bool {
        pod.lacks_parts(self.without) && !(self.nor_placed_affinity && placed_affinity)
    }
}

/// What a Reserve plugin sets aside for a pod on the node chosen for it, for the host to write
/// before the binding (kube-scheduler's Reserve, with the PreBind work it implies).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reservation {
    /// Volumes to bind or provision.
    pub volumes: PodVolumes,
    /// Devices allocated for the pod's claims that had no allocation, to write into the claims
    /// before the binding.
    pub claims: Vec<ClaimAllocation>,
}

impl Pod {
    /// The parts of the pod PreEnqueue and Permit see (a component's `staged-pod`): identity,
    /// labels, annotations, priority and scheduling gates.
    pub fn staged(&self) -> Pod {
        Pod {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            labels: self.labels.clone(),
            annotations: self.annotations.clone(),
            priority: self.priority,
            scheduling_gates: self.scheduling_gates.clone(),
            ..Pod::default()
        }
    }
}

impl Pod {
    /// The pod the `groups` interface's calls carry: identity, labels, annotations and group.
    pub fn grouped(&self) -> Pod {
        self.with_parts(
            PodParts::IDENTITY | PodParts::LABELS | PodParts::ANNOTATIONS | PodParts::GROUP,
        )
    }

    /// The pod PreEnqueue sees: [`Pod::staged`], or for a plugin that reads devices its
    /// identity, labels, annotations and claims (the `devices` interface's `pre-enqueue`).
    pub fn pre_enqueued(&self, reads_devices: bool) -> Pod {
        if reads_devices {
            self.with_parts(
                PodParts::IDENTITY | PodParts::LABELS | PodParts::ANNOTATIONS | PodParts::CLAIMS,
            )
        } else {
            self.staged()
        }
    }
}

/// A pod's controlling owner (`metadata.ownerReferences[]` with `controller: true`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ControllerRef {
    /// `apiVersion`, e.g. `apps/v1`.
    pub api_version: String,
    /// `kind`, e.g. `ReplicaSet`.
    pub kind: String,
    /// `name`.
    pub name: String,
}

impl Pod {
    /// `namespace/name`: how the host names a pod in its cache, queue and messages.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// The one place that says which fields of [`Pod`] each [`PodParts`] part holds (and its bit and
/// its name in `wit/plugin.wit`): the part constants, [`Pod::with_parts`], [`Pod::same_parts`]
/// and [`PodParts::names`] are written from it. A new pod field is one line here, plus its place
/// in the WIT record and in the two conversions across the boundary.
macro_rules! pod_parts {
    ($($(#[$doc:meta])* $part:ident = $bit:literal, $wit:literal => [$($field:ident),+];)+) => {
        impl PodParts {
            $($(#[$doc])* pub const $part: PodParts = PodParts(1 << $bit);)+
            /// Every part.
            pub const ALL: PodParts = PodParts(0 $(| (1 << $bit))+);
            const NAMES: &'static [(PodParts, &'static str)] = &[$((PodParts::$part, $wit)),+];
        }

        impl Pod {
            /// A copy of the parts of this pod that `parts` names; the others are left empty. This
            /// is the pod a plugin sees, native or WASM, so a plugin that reads a part it did not
            /// declare fails the same way in both (and in the host's tests).
            pub fn with_parts(&self, parts: PodParts) -> Pod {
                let mut pod = Pod {
                    priority: self.priority,
                    ..Pod::default()
                };
                $(if parts.contains(PodParts::$part) {
                    $(pod.$field.clone_from(&self.$field);)+
                })+
                pod
            }

            /// Whether `other` is the same pod as far as `parts` (and the priority, always sent)
            /// go: a plugin that reads only `parts` cannot tell the two apart.
            pub fn same_parts(&self, other: &Pod, parts: PodParts) -> bool {
                self.priority == other.priority
                    $(&& (!parts.contains(PodParts::$part)
                        || (true $(&& self.$field == other.$field)+)))+
            }

            /// Whether every part `parts` names is empty in this pod (as [`Pod::default`] has
            /// it): see [`crate::Plugin::IDLE_WITHOUT`].
            pub fn lacks_parts(&self, parts: PodParts) -> bool {
                fn empty<T: Default + PartialEq>(value: &T) -> bool {
                    *value == T::default()
                }
                true $(&& (!parts.contains(PodParts::$part) || (true $(&& empty(&self.$field))+)))+
            }
        }
    };
}

pod_parts! {
    /// `namespace`, `name`, `uid` and `scheduler_name`.
    IDENTITY = 0, "identity" => [namespace, name, uid, scheduler_name];
    /// `labels`.
    LABELS = 1, "labels" => [labels];
    /// `annotations`.
    ANNOTATIONS = 2, "annotations" => [annotations];
    /// `node_name`.
    NODE_NAME = 3, "node-name" => [node_name];
    /// `node_selector` and `node_affinity`.
    NODE_SELECTION = 4, "node-selection" => [node_selector, node_affinity];
    /// `tolerations`.
    TOLERATIONS = 5, "tolerations" => [tolerations];
    /// `requests` and `non_zero_requests`.
    REQUESTS = 6, "requests" => [requests, non_zero_requests];
    /// `volume_claims`.
    VOLUME_CLAIMS = 7, "volume-claims" => [volume_claims];
    /// `containers`.
    CONTAINERS = 8, "containers" => [containers];
    /// `pod_affinity` (WIT 0.2).
    POD_AFFINITY = 9, "pod-affinity" => [pod_affinity];
    /// `host_ports` (WIT 0.2).
    HOST_PORTS = 10, "host-ports" => [host_ports];
    /// `topology_spread_constraints` and `default_spread_selector` (WIT 0.2).
    TOPOLOGY_SPREAD = 11, "topology-spread" => [topology_spread_constraints, default_spread_selector];
    /// `images`: not in the WIT `pod-parts` flags, so a component declares it through the
    /// `details` interface and gets it only in the `encoded` form, as bit 12.
    IMAGES = 12, "images" => [images];
    /// `volumes`: as [`PodParts::IMAGES`], bit 13.
    VOLUMES = 13, "volumes" => [volumes];
    /// `claims`: declared through the `devices` interface, sent only in the `encoded` form as
    /// bit 14.
    CLAIMS = 14, "claims" => [claims];
    /// `group`: declared through the `groups` interface (WIT 0.2.1), sent only in the `encoded`
    /// form as bit 15.
    GROUP = 15, "group" => [group];
}

/// The parts of a [`Pod`] a plugin reads (`reads-pod` in `wit/plugin.wit`). The host sends a WASM
/// plugin only these; the others arrive empty. Priority is always sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PodParts(u16);

impl PodParts {
    /// Nothing but the priority.
    pub const NONE: PodParts = PodParts(0);

    /// The parts the WIT `pod-parts` flags (and so a `pod` record) have: every part but
    /// [`PodParts::IMAGES`] and [`PodParts::VOLUMES`], which a component asks for through the
    /// `details` interface.
    pub const IN_RECORD: PodParts = PodParts(
        PodParts::ALL.0
            & !PodParts::IMAGES.0
            & !PodParts::VOLUMES.0
            & !PodParts::CLAIMS.0
            & !PodParts::GROUP.0,
    );

    /// Every part in `self` or `other` (usable in a `const`).
    pub const fn union(self, other: PodParts) -> PodParts {
        PodParts(self.0 | other.0)
    }

    /// True when every part of `other` is in `self`.
    pub const fn contains(self, other: PodParts) -> bool {
        self.0 & other.0 == other.0
    }

    /// The parts as bits, in the order `wit/plugin.wit` declares them (identity = bit 0).
    pub const fn bits(self) -> u16 {
        self.0
    }

    /// The parts' names as `wit/plugin.wit` spells them, in its order.
    pub fn names(self) -> Vec<&'static str> {
        PodParts::NAMES
            .iter()
            .filter(|(part, _)| self.contains(*part))
            .map(|&(_, name)| name)
            .collect()
    }

    /// Parts from bits in the order `wit/plugin.wit` declares them; bits past the last part are
    /// dropped.
    pub const fn from_bits(bits: u16) -> PodParts {
        PodParts(bits & PodParts::ALL.0)
    }
}

impl Default for PodParts {
    fn default() -> Self {
        PodParts::ALL
    }
}

impl std::ops::BitOr for PodParts {
    type Output = PodParts;
    fn bitor(self, other: PodParts) -> PodParts {
        self.union(other)
    }
}

/// What is in use on a node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct NodeUsage {
    /// The summed requests of the pods on the node.
    pub requested: Resources,
    /// The same, counting missing cpu/memory requests as 100m / 200Mi (as scoring does).
    pub non_zero_requested: Resources,
    /// Pods on the node.
    pub pod_count: u32,
}

/// A node as plugins see it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct NodeInfo {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.labels`.
    pub labels: Labels,
    /// `metadata.annotations`.
    pub annotations: Labels,
    /// `spec.taints`.
    pub taints: Vec<Taint>,
    /// `spec.unschedulable`: cordoned.
    pub unschedulable: bool,
    /// `status.allocatable` (its capacity when allocatable is not given).
    pub allocatable: Resources,
    /// What the pods placed on it request (only kept current for plugins that set `READS_USAGE`).
    pub usage: NodeUsage,
    /// `status.images`: the images the node holds (only sent to plugins that set
    /// [`crate::Plugin::READS_NODE_IMAGES`]; the `details` interface of `wit/plugin.wit`).
    pub images: Vec<NodeImage>,
    /// The node's CSINode (`storage.k8s.io/v1`), none when it has none (only sent to plugins
    /// that set [`crate::Plugin::READS_CSI_NODES`]).
    pub csi_node: Option<CsiNode>,
    /// The resource pools with devices the node can use (only sent to plugins that set
    /// [`crate::Plugin::READS_DEVICES`]).
    pub device_pools: Vec<DevicePool>,
}

/// What a node's CSINode says of the CSI drivers installed there.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CsiNode {
    /// `spec.drivers`, in order.
    pub drivers: Vec<CsiDriverLimit>,
}

/// One of a CSINode's `spec.drivers`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CsiDriverLimit {
    /// `name`: the CSI driver.
    pub name: String,
    /// `allocatable.count`: how many of its volumes the node can attach; none when unlimited.
    pub count: Option<i32>,
}

/// A volume of a pod, as kube-scheduler's VolumeRestrictions and NodeVolumeLimits read it: the
/// pod's own `spec.volumes[]` entry, and for a claim what the claim, its PersistentVolume and
/// its StorageClass say. Fields that do not apply are empty.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct PodVolume {
    /// The volume's name in the pod.
    pub name: String,
    /// `persistentVolumeClaim.claimName`, or the claim of a generic ephemeral volume
    /// (`<pod>-<volume>`); empty for an inline volume.
    pub claim_name: String,
    /// A generic ephemeral volume (`ephemeral`).
    pub ephemeral: bool,
    /// The claim exists (in the pod's namespace).
    pub claim_found: bool,
    /// The claim's `spec.accessModes`.
    pub access_modes: Vec<String>,
    /// The claim names a PersistentVolume that exists: `plugin`, `driver` and `handle` are then
    /// the volume's, and `provisioner` is not used.
    pub bound: bool,
    /// The volume's plugin: `kubernetes.io/csi` for a CSI volume, the in-tree plugin
    /// (`kubernetes.io/gce-pd`, `kubernetes.io/aws-ebs`, `kubernetes.io/azure-disk`,
    /// `kubernetes.io/cinder`, `kubernetes.io/portworx-volume`, `kubernetes.io/rbd`,
    /// `kubernetes.io/iscsi`) for those sources, empty for any other.
    pub plugin: String,
    /// The CSI driver (`csi.driver`), for `kubernetes.io/csi`.
    pub driver: String,
    /// What names the disk: the CSI `volumeHandle`, GCE `pdName`, AWS EBS / Cinder / Portworx
    /// `volumeID`, Azure `diskURI`, RBD `image`, iSCSI `iqn`.
    pub handle: String,
    /// RBD `monitors`.
    pub monitors: Vec<String>,
    /// RBD `pool`.
    pub pool: String,
    /// The source's `readOnly`.
    pub read_only: bool,
    /// For a claim not bound to an existing volume: its StorageClass's `provisioner` (empty when
    /// the claim has no class or the class does not exist).
    pub provisioner: String,
    /// For such a claim: the CSIDriver named like the provisioner has `storageCapacity: true`,
    /// so a node needs a CSIStorageCapacity with room for the claim.
    pub capacity_tracked: bool,
    /// For such a claim: the CSIStorageCapacity objects of its class (when `capacity_tracked`).
    pub capacities: Vec<StorageCapacity>,
}

/// A CSIStorageCapacity (`storage.k8s.io/v1`): room for volumes of one class on some nodes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct StorageCapacity {
    /// `nodeTopology`: the nodes it is for; none matches no node.
    pub node_topology: Option<LabelSelector>,
    /// The largest volume it can take, in bytes: `maximumVolumeSize`, else `capacity`; none when
    /// it states neither.
    pub limit: Option<i64>,
}

/// The plugin name kube-scheduler reads for a CSI volume.
pub const CSI_PLUGIN: &str = "kubernetes.io/csi";

impl NodeInfo {
    /// A copy as a plugin is sent it: with its images only when the plugin reads them.
    pub fn sent(&self, images: bool, csi_node: bool, devices: bool) -> NodeInfo {
        NodeInfo {
            name: self.name.clone(),
            labels: self.labels.clone(),
            annotations: self.annotations.clone(),
            taints: self.taints.clone(),
            unschedulable: self.unschedulable,
            allocatable: self.allocatable.clone(),
            usage: self.usage.clone(),
            images: if images {
                self.images.clone()
            } else {
                Vec::new()
            },
            csi_node: if csi_node {
                self.csi_node.clone()
            } else {
                None
            },
            device_pools: if devices {
                self.device_pools.clone()
            } else {
                Vec::new()
            },
        }
    }
}

/// An image a node holds (`status.images[]`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct NodeImage {
    /// `names`: the references the image is known by, as the container runtime reports them.
    pub names: Vec<String>,
    /// `sizeBytes`.
    pub size_bytes: i64,
}

/// Kubernetes' filter status codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Code {
    /// The node passes.
    Success,
    /// Preemption could help.
    Unschedulable,
    /// Nothing done to the node would help.
    UnschedulableAndUnresolvable,
    /// The plugin failed.
    Error,
}

/// Why a pod cannot go to a node, or anywhere.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Failure {
    /// How final the failure is.
    pub code: Code,
    /// Reasons as printed in "0/N nodes are available: ..." (aggregated by equal text).
    pub reasons: Vec<Cow<'static, str>>,
}

impl Failure {
    /// A failure that preemption could resolve, with one reason.
    pub fn unschedulable(reason: impl Into<Cow<'static, str>>) -> Self {
        Failure {
            code: Code::Unschedulable,
            reasons: vec![reason.into()],
        }
    }

    /// A failure nothing can resolve, with one reason.
    pub fn unresolvable(reason: impl Into<Cow<'static, str>>) -> Self {
        Failure {
            code: Code::UnschedulableAndUnresolvable,
            reasons: vec![reason.into()],
        }
    }

    /// The plugin itself failed.
    pub fn error(reason: impl Into<Cow<'static, str>>) -> Self {
        Failure {
            code: Code::Error,
            reasons: vec![reason.into()],
        }
    }
}

/// A filter verdict for one node: `Ok(())` when the node fits.
pub type Verdict = Result<(), Failure>;

/// What a plugin's filter makes of a pod before looking at nodes (kube-scheduler's PreFilter).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum FilterPlan {
    /// Call `filter` for this pod's candidate nodes.
    #[default]
    Run,
    /// Nothing to check: every node passes this plugin.
    Skip,
    /// Only the named nodes can pass.
    OnlyNodes(Vec<String>),
    /// No node can take the pod.
    Reject(Failure),
    /// Exactly `nodes` fail, each with its entry of `results.verdicts`; every other node passes
    /// and `filter` is not called.
    FailingNodes {
        /// The failing nodes' mirror ids.
        nodes: Vec<NodeId>,
        /// One verdict per id of `nodes`, in order.
        results: FilterResults,
    },
}

/// What a plugin makes of a pod; returned by [`crate::Plugin::prepare`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodPlan {
    /// What the host does about the filter for this pod.
    pub filter: FilterPlan,
    /// False when the plugin has no opinion on this pod: it contributes 0 to every node.
    pub score: bool,
}

impl Default for PodPlan {
    fn default() -> Self {
        PodPlan {
            filter: FilterPlan::Run,
            score: true,
        }
    }
}

/// How raw scores become 0..=100 once all feasible nodes are scored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Normalize {
    /// Scores are already 0..=100.
    #[default]
    None,
    /// `score * 100 / max` (all zeros stay zero).
    Scale,
    /// `100 - score * 100 / max` (all zeros become 100).
    Reverse,
    /// The plugin's own [`crate::ScorePlugin::normalize`].
    Custom,
    /// The plugin's scores are final when they come back from `score`: it normalizes them itself
    /// over every feasible node, which the host sends in one call. A plugin built with this SDK,
    /// as a component or natively, reports [`Normalize::Custom`] this way
    /// ([`crate::Driver::score_for_host`] runs [`crate::ScorePlugin::normalize`] before
    /// returning), which saves the `normalize` call of every cycle; a plugin written with the
    /// SDK declares `Custom`.
    InScore,
}

/// What a plugin instance does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Descriptor {
    /// [`crate::Plugin::NAME`].
    pub name: String,
    /// The crate version the component was built from.
    pub version: String,
    /// It exports a filter.
    pub filter: bool,
    /// It exports a score.
    pub score: bool,
    /// How its scores are normalized.
    pub normalize: Normalize,
    /// [`crate::Plugin::READS_USAGE`].
    pub reads_usage: bool,
    /// [`crate::Plugin::READS_POD`].
    pub reads_pod: PodParts,
    /// [`crate::Plugin::READS_EXISTING_PODS`].
    pub reads_existing_pods: ExistingPodParts,
    /// [`crate::Plugin::READS_NAMESPACES`].
    pub reads_namespaces: bool,
    /// [`crate::Plugin::READS_VOLUMES`].
    pub reads_volumes: bool,
    /// [`crate::Plugin::READS_NODE_IMAGES`] (for a component: it exports the `details`
    /// interface and says so).
    pub reads_node_images: bool,
    /// [`crate::Plugin::READS_CSI_NODES`] (as `reads_node_images`).
    pub reads_csi_nodes: bool,
    /// [`crate::Plugin::READS_DEVICES`] (for a component: it exports the `devices` interface
    /// and says so): nodes carry their device pools, pods their claims, and PreEnqueue and
    /// Reserve go through that interface.
    pub reads_devices: bool,
    /// [`crate::Plugin::PRE_ENQUEUE`]: it takes part in PreEnqueue (for a component: it exports
    /// the `stages` interface and says so).
    pub pre_enqueue: bool,
    /// [`crate::Plugin::PERMIT`]: it takes part in Permit and Unreserve (for a component: as
    /// with `pre_enqueue`).
    pub permit: bool,
    /// [`crate::Plugin::RESERVE`]: it takes part in Reserve (for a component: it exports the
    /// `reserve` interface and says so).
    pub reserve: bool,
    /// [`crate::Plugin::READS_GROUPS`] (for a component: it exports the `groups` interface and
    /// says so): Permit and Unreserve go through that interface, and may reject waiting pods.
    pub reads_groups: bool,
    /// [`crate::Plugin::POST_FILTER`]: it takes part in PostFilter (through `groups`).
    pub post_filter: bool,
    /// [`crate::Plugin::QUEUE_SORT`]: it orders the scheduling queue (through `groups`).
    pub queue_sort: bool,
    /// [`crate::Plugin::PLAN_IGNORES_USAGE`] (for a component: it exports the
    /// `usage-with-calls` interface and says so): usage changes leave its plans standing.
    pub plan_ignores_usage: bool,
}

/// A pod already on a node (bound, or assumed by this scheduler), as a plugin's mirror keeps it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ExistingPod {
    /// The node it is on.
    pub node: NodeId,
    /// `metadata.namespace` ([`ExistingPodParts::LABELS`]).
    pub namespace: String,
    /// `metadata.labels` ([`ExistingPodParts::LABELS`]).
    pub labels: Labels,
    /// `metadata.deletionTimestamp` is set ([`ExistingPodParts::LABELS`]).
    pub terminating: bool,
    /// Its pod (anti-)affinity ([`ExistingPodParts::POD_AFFINITY`]).
    pub pod_affinity: PodAffinity,
    /// Its host ports ([`ExistingPodParts::HOST_PORTS`]).
    pub host_ports: Vec<HostPort>,
    /// Its volumes, claims looked up when it was placed ([`ExistingPodParts::VOLUMES`]).
    pub volumes: Vec<PodVolume>,
}

impl ExistingPod {
    /// `pod` as an existing pod on `node`, every part filled in.
    pub fn of(pod: &Pod, node: NodeId) -> ExistingPod {
        ExistingPod {
            node,
            namespace: pod.namespace.clone(),
            labels: pod.labels.clone(),
            terminating: pod.terminating,
            pod_affinity: pod.pod_affinity.clone(),
            host_ports: pod.host_ports.clone(),
            volumes: pod.volumes.clone(),
        }
    }

    /// Whether this is what [`ExistingPod::of`] makes of `pod` (the node and the volumes aside:
    /// the host looks a placed pod's claims up, so it compares the volumes it resolved),
    /// compared without copying the pod.
    pub fn is_of(&self, pod: &Pod) -> bool {
        self.namespace == pod.namespace
            && self.labels == pod.labels
            && self.terminating == pod.terminating
            && self.pod_affinity == pod.pod_affinity
            && self.host_ports == pod.host_ports
    }

    /// A copy on `node` with only the parts `parts` names (what a plugin reading them is sent).
    pub fn with_parts(&self, node: NodeId, parts: ExistingPodParts) -> ExistingPod {
        let mut sent = ExistingPod {
            node,
            ..ExistingPod::default()
        };
        if parts.contains(ExistingPodParts::LABELS) {
            sent.namespace.clone_from(&self.namespace);
            sent.labels.clone_from(&self.labels);
            sent.terminating = self.terminating;
        }
        if parts.contains(ExistingPodParts::POD_AFFINITY) {
            sent.pod_affinity.clone_from(&self.pod_affinity);
        }
        if parts.contains(ExistingPodParts::HOST_PORTS) {
            sent.host_ports.clone_from(&self.host_ports);
        }
        if parts.contains(ExistingPodParts::VOLUMES) {
            sent.volumes.clone_from(&self.volumes);
        }
        sent
    }
}

/// An existing pod as a plugin reads it from its mirror ([`crate::Nodes::pod`]) and in
/// [`crate::Plugin::pod_added`] and [`crate::Plugin::pod_removed`]: the mirror keeps one copy of
/// the parts pods share (a Deployment's replicas differ only in their node), so a pod is lent out
/// as references into that copy. The parts the plugin does not read are empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExistingPodRef<'a> {
    /// The node it is on.
    pub node: NodeId,
    /// `metadata.namespace` ([`ExistingPodParts::LABELS`]).
    pub namespace: &'a str,
    /// `metadata.labels` ([`ExistingPodParts::LABELS`]).
    pub labels: &'a Labels,
    /// `metadata.deletionTimestamp` is set ([`ExistingPodParts::LABELS`]).
    pub terminating: bool,
    /// Its pod (anti-)affinity ([`ExistingPodParts::POD_AFFINITY`]).
    pub pod_affinity: &'a PodAffinity,
    /// Its host ports ([`ExistingPodParts::HOST_PORTS`]).
    pub host_ports: &'a [HostPort],
    /// Its volumes ([`ExistingPodParts::VOLUMES`]).
    pub volumes: &'a [PodVolume],
}

impl ExistingPodRef<'_> {
    /// An owned copy.
    pub fn to_existing_pod(&self) -> ExistingPod {
        ExistingPod {
            node: self.node,
            namespace: self.namespace.to_string(),
            labels: self.labels.clone(),
            terminating: self.terminating,
            pod_affinity: self.pod_affinity.clone(),
            host_ports: self.host_ports.to_vec(),
            volumes: self.volumes.to_vec(),
        }
    }
}

impl ExistingPod {
    /// The pod lent out as a plugin's mirror lends its pods.
    pub fn view(&self) -> ExistingPodRef<'_> {
        ExistingPodRef {
            node: self.node,
            namespace: &self.namespace,
            labels: &self.labels,
            terminating: self.terminating,
            pod_affinity: &self.pod_affinity,
            host_ports: &self.host_ports,
            volumes: &self.volumes,
        }
    }
}

/// The parts of existing pods a plugin keeps in its mirror (`reads-existing-pods` in
/// `wit/plugin.wit`, WIT 0.2). With none the host sends no pods at all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ExistingPodParts(u8);

impl ExistingPodParts {
    /// No existing pods.
    pub const NONE: ExistingPodParts = ExistingPodParts(0);
    /// Namespace, labels and whether the pod is terminating.
    pub const LABELS: ExistingPodParts = ExistingPodParts(1);
    /// Pod (anti-)affinity terms.
    pub const POD_AFFINITY: ExistingPodParts = ExistingPodParts(2);
    /// Host ports.
    pub const HOST_PORTS: ExistingPodParts = ExistingPodParts(4);
    /// Volumes: not in the WIT `existing-pod-parts` flags, so a component asks for them through
    /// the `details` interface and gets them only in the `encoded` form.
    pub const VOLUMES: ExistingPodParts = ExistingPodParts(8);
    /// Every part.
    pub const ALL: ExistingPodParts = ExistingPodParts(15);
    /// The parts the WIT flags (and so an `existing-pod` record) have.
    pub const IN_RECORD: ExistingPodParts = ExistingPodParts(7);
    const NAMES: [(ExistingPodParts, &'static str); 4] = [
        (ExistingPodParts::LABELS, "labels"),
        (ExistingPodParts::POD_AFFINITY, "pod-affinity"),
        (ExistingPodParts::HOST_PORTS, "host-ports"),
        (ExistingPodParts::VOLUMES, "volumes"),
    ];

    /// Every part in `self` or `other` (usable in a `const`).
    pub const fn union(self, other: ExistingPodParts) -> ExistingPodParts {
        ExistingPodParts(self.0 | other.0)
    }

    /// True when every part of `other` is in `self`.
    pub const fn contains(self, other: ExistingPodParts) -> bool {
        self.0 & other.0 == other.0
    }

    /// True when no part is read.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The parts as bits, in the order `wit/plugin.wit` declares them.
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// Parts from bits in the order `wit/plugin.wit` declares them; unknown bits are dropped.
    pub const fn from_bits(bits: u8) -> ExistingPodParts {
        ExistingPodParts(bits & ExistingPodParts::ALL.0)
    }

    /// The parts' names as `wit/plugin.wit` spells them.
    pub fn names(self) -> Vec<&'static str> {
        ExistingPodParts::NAMES
            .iter()
            .filter(|(part, _)| self.contains(*part))
            .map(|&(_, name)| name)
            .collect()
    }
}

impl std::ops::BitOr for ExistingPodParts {
    type Output = ExistingPodParts;
    fn bitor(self, other: ExistingPodParts) -> ExistingPodParts {
        self.union(other)
    }
}

/// Verdicts for a batch of nodes, with distinct failures stored once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FilterResults {
    /// Per node: 0 = passes, otherwise 1 + index into `failures`.
    pub verdicts: Vec<u32>,
    /// The distinct failures the verdicts point at.
    pub failures: Vec<Failure>,
}

impl FilterResults {
    /// Empties the results, keeping their allocations.
    pub fn clear(&mut self) {
        self.verdicts.clear();
        self.failures.clear();
    }

    /// Appends the verdict for the next node, storing its failure once.
    pub fn push(&mut self, verdict: Verdict) {
        let verdict = match verdict {
            Ok(()) => 0,
            Err(failure) => self.intern(failure),
        };
        self.verdicts.push(verdict);
    }

    /// Stores `failure` once and returns the verdict that refers to it, for a batch method that
    /// pushes the same verdict for many nodes onto [`FilterResults::verdicts`].
    pub fn intern(&mut self, failure: Failure) -> u32 {
        Self::intern_into(&mut self.failures, failure)
    }

    /// [`FilterResults::intern`] into `failures` alone, for a batch method that appends its
    /// verdicts in one `extend` of [`FilterResults::verdicts`] while interning: as WebAssembly a
    /// `push` per node loaded and stored the vector's length and checked its capacity.
    pub fn intern_into(failures: &mut Vec<Failure>, failure: Failure) -> u32 {
        let index = match failures.iter().position(|f| *f == failure) {
            Some(i) => i,
            None => {
                failures.push(failure);
                failures.len() - 1
            }
        };
        index as u32 + 1
    }

    /// Appends one verdict per id of `ids`: a pass where `passes(id)`, else `failure()` (made and
    /// stored once per call); an id the mirror lacks gets [`Nodes::unknown`]. For batch filters
    /// whose only failure is one fixed reason.
    pub fn push_each(
        &mut self,
        nodes: &Nodes,
        ids: &[NodeId],
        mut passes: impl FnMut(NodeId) -> bool,
        failure: impl Fn() -> Failure,
    ) {
        // The failure is stored before the loop and taken back out if no node failed, so the loop
        // is a plain map with nothing to call (NodeUnschedulable's filter: 3.5 -> 3.0 µs per pod as
        // WASM, 1.4 -> 0.8 natively, `taints` at 5,000 nodes).
        const UNKNOWN: u32 = u32::MAX;
        let stored = self.failures.len();
        let rejected = self.intern(failure());
        let start = self.verdicts.len();
        let (mut failed, mut unknown) = (false, false);
        self.verdicts.extend(ids.iter().map(|&id| {
            if !nodes.contains(id) {
                unknown = true;
                UNKNOWN
            } else if passes(id) {
                0
            } else {
                failed = true;
                rejected
            }
        }));
        if !failed && self.failures.len() > stored {
            self.failures.pop();
        }
        if unknown {
            for (k, &id) in ids.iter().enumerate() {
                if self.verdicts[start + k] == UNKNOWN {
                    self.verdicts[start + k] = self.intern(Nodes::unknown(id));
                }
            }
        }
    }

    /// Checks that the results answer `nodes` nodes and that every verdict is 0 or points into
    /// `failures`: what the host checks of results that crossed a boundary it does not trust.
    ///
    /// # Errors
    /// The first problem, as a sentence for the plugin's error.
    pub fn check(&self, nodes: usize) -> Result<(), String> {
        if self.verdicts.len() != nodes {
            return Err(format!(
                "returned {} verdicts for {nodes} nodes",
                self.verdicts.len()
            ));
        }
        let table_len = self.failures.len() as u32;
        // A maximum, not a search for the first bad verdict: it vectorizes, and the error is rare.
        let highest = self.verdicts.iter().copied().max().unwrap_or(0);
        if highest > table_len {
            return Err(format!(
                "verdict {highest} points past its {table_len} failures"
            ));
        }
        Ok(())
    }

    /// Moves `failures` to the end of this table and returns the offset that re-bases a verdict
    /// pointing into `failures` onto this table (see [`FilterResults::rebase`]).
    pub fn adopt_failures(&mut self, failures: impl IntoIterator<Item = Failure>) -> u32 {
        let base = self.failures.len() as u32;
        self.failures.extend(failures);
        base
    }

    /// A verdict of a table adopted at `base`, as a verdict of this one.
    #[inline]
    pub fn rebase(verdict: u32, base: u32) -> u32 {
        if verdict == 0 {
            0
        } else {
            verdict + base
        }
    }

    /// Appends another batch's results after these, re-basing its verdicts onto this table.
    pub fn append(&mut self, other: FilterResults) {
        if self.verdicts.is_empty() && self.failures.is_empty() {
            *self = other;
            return;
        }
        let base = self.adopt_failures(other.failures);
        self.verdicts
            .extend(other.verdicts.iter().map(|&v| Self::rebase(v, base)));
    }

    /// The failure for the node at `position`, or `None` when it passed.
    pub fn failure(&self, position: usize) -> Option<&Failure> {
        match self.verdicts[position] {
            0 => None,
            n => self.failures.get(n as usize - 1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_look_up_by_scan_and_by_bisection() {
        for n in [0usize, 3, LABELS_SCAN_LIMIT, LABELS_SCAN_LIMIT + 5] {
            let labels: Labels = (0..n)
                .rev()
                .map(|i| (format!("key-{i:02}"), format!("v{i}")))
                .collect();
            assert_eq!(labels.len(), n);
            for i in 0..n {
                assert_eq!(
                    labels.get(&format!("key-{i:02}")),
                    Some(format!("v{i}").as_str()),
                    "{n} pairs"
                );
            }
            assert_eq!(labels.get("key-99"), None);
            assert_eq!(labels.get("key"), None);
            let keys: Vec<&str> = labels.iter().map(|(k, _)| k).collect();
            let mut sorted = keys.clone();
            sorted.sort_unstable();
            assert_eq!(keys, sorted, "iteration is sorted by key");
        }
    }

    #[test]
    fn a_later_duplicate_key_wins_and_empty_values_are_kept() {
        let labels: Labels = [("a", "1"), ("b", ""), ("a", "2")].into_iter().collect();
        assert_eq!(labels.get("a"), Some("2"));
        assert_eq!(labels.get("b"), Some(""));
        assert_eq!(labels.len(), 2);
    }

    /// A pod with something in every part.
    fn full_pod() -> Pod {
        let pairs = |k: &str| Labels::new([(k.to_string(), "v".to_string())]);
        let mut requests = Resources {
            milli_cpu: 500,
            ..Resources::default()
        };
        requests.set("nvidia.com/gpu", 1);
        Pod {
            namespace: "ns".into(),
            name: "p".into(),
            uid: "u".into(),
            scheduler_name: "s".into(),
            priority: 7,
            labels: pairs("label"),
            annotations: pairs("annotation"),
            node_name: "n".into(),
            node_selector: pairs("selector"),
            node_affinity: Some(NodeAffinity::default()),
            tolerations: vec![Toleration::default()],
            requests: requests.clone(),
            non_zero_requests: requests,
            volume_claims: vec![VolumeClaim::default()],
            containers: vec![Container::default()],
            pod_affinity: PodAffinity {
                required_affinity: vec![PodAffinityTerm::default()],
                ..PodAffinity::default()
            },
            host_ports: vec![HostPort::default()],
            topology_spread_constraints: vec![TopologySpreadConstraint::default()],
            default_spread_selector: Some(LabelSelector::default()),
            images: vec!["app:1".into()],
            volumes: vec![PodVolume::default()],
            claims: vec![PodClaim {
                name: "gpu".into(),
                claim_name: "pod-gpu".into(),
                from_template: true,
                found: true,
                allocated: Some(crate::ClaimAllocated {
                    node_selector: Some(vec![NodeSelectorTerm::default()]),
                    reserved_for_pod: true,
                    reserved_count: 3,
                }),
                requests: vec![crate::DeviceRequest {
                    name: "r".into(),
                    class_name: "c".into(),
                    class_found: true,
                    class_selectors: vec!["device.driver == 'x'".into()],
                    selectors: vec!["true".into()],
                    mode: crate::AllocationMode::All,
                    admin_access: true,
                    first_available: vec![crate::DeviceRequest::default()],
                }],
                constraints: vec![crate::DeviceConstraint {
                    requests: vec!["r".into()],
                    match_attribute: "x/root".into(),
                }],
                ..PodClaim::default()
            }],
            group: Some(PodGroup {
                full_name: "ns/job".into(),
                found: true,
                min_member: 4,
                ..PodGroup::default()
            }),
            // The host's own: in no part, so no plugin's copy of the pod carries them.
            terminating: false,
            controller: None,
            never_preempts: false,
            start_time_millis: None,
            nominated_node_name: String::new(),
            terminating_by_preemption: false,
            // Sent to PreEnqueue and Permit only, never in a `set-pod` part.
            scheduling_gates: Vec::new(),
            workload_ref: String::new(),
        }
    }

    /// Which parts of `pod` hold anything, in `PodParts` bit order.
    fn parts_present(pod: &Pod) -> u16 {
        let present = [
            !pod.namespace.is_empty()
                || !pod.name.is_empty()
                || !pod.uid.is_empty()
                || !pod.scheduler_name.is_empty(),
            !pod.labels.is_empty(),
            !pod.annotations.is_empty(),
            !pod.node_name.is_empty(),
            !pod.node_selector.is_empty() || pod.node_affinity.is_some(),
            !pod.tolerations.is_empty(),
            !pod.requests.is_zero() || !pod.non_zero_requests.is_zero(),
            !pod.volume_claims.is_empty(),
            !pod.containers.is_empty(),
            !pod.pod_affinity.is_empty(),
            !pod.host_ports.is_empty(),
            !pod.topology_spread_constraints.is_empty() || pod.default_spread_selector.is_some(),
            !pod.images.is_empty(),
            !pod.volumes.is_empty(),
            !pod.claims.is_empty(),
            pod.group.is_some(),
        ];
        present
            .iter()
            .enumerate()
            .fold(0, |bits, (i, &p)| bits | (u16::from(p) << i))
    }

    #[test]
    fn a_pod_with_parts_keeps_exactly_those_parts_and_the_priority() {
        let full = full_pod();
        assert_eq!(parts_present(&full), PodParts::ALL.bits());
        assert_eq!(full.with_parts(PodParts::ALL), full);
        for bit in 0..16 {
            let part = PodParts::from_bits(1 << bit);
            let only = full.with_parts(part);
            assert_eq!(parts_present(&only), part.bits(), "part bit {bit}");
            assert_eq!(only.priority, 7);
        }
        let two = full.with_parts(PodParts::LABELS | PodParts::REQUESTS);
        assert_eq!(two.labels, full.labels);
        assert_eq!(two.non_zero_requests, full.non_zero_requests);
        assert!(two.annotations.is_empty() && two.tolerations.is_empty());
        assert_eq!(
            full.with_parts(PodParts::NONE),
            Pod {
                priority: 7,
                ..Pod::default()
            }
        );
        assert_eq!(
            (PodParts::REQUESTS | PodParts::LABELS).names(),
            ["labels", "requests"]
        );
        assert_eq!(PodParts::ALL.names().len(), 16);
        assert!(PodParts::NONE.names().is_empty());
    }

    #[test]
    fn pods_differing_in_one_part_are_the_same_only_to_plugins_that_do_not_read_it() {
        let full = full_pod();
        assert!(full.same_parts(&full.clone(), PodParts::ALL));
        for bit in 0..16 {
            let part = PodParts::from_bits(1 << bit);
            let without = full.with_parts(PodParts::from_bits(PodParts::ALL.bits() & !part.bits()));
            assert!(!full.same_parts(&without, part), "part bit {bit}");
            assert!(!full.same_parts(&without, PodParts::ALL), "part bit {bit}");
            let others = PodParts::from_bits(PodParts::ALL.bits() & !part.bits());
            assert!(full.same_parts(&without, others), "part bit {bit}");
        }
        let other_priority = Pod {
            priority: full.priority + 1,
            ..full.clone()
        };
        assert!(!full.same_parts(&other_priority, PodParts::NONE));
    }

    #[test]
    fn appended_batches_point_at_their_own_failures_in_the_joined_table() {
        let mut first = FilterResults::default();
        first.push(Ok(()));
        first.push(Err(Failure::unresolvable("tainted")));
        let mut second = FilterResults::default();
        second.push(Err(Failure::unresolvable("cordoned")));
        second.push(Ok(()));
        second.push(Err(Failure::unresolvable("tainted")));
        let mut joined = FilterResults::default();
        joined.append(first.clone());
        assert_eq!(
            joined, first,
            "appending to nothing takes the batch as it is"
        );
        joined.append(second);
        let reasons: Vec<Option<&str>> = (0..5)
            .map(|k| joined.failure(k).map(|f| f.reasons[0].as_ref()))
            .collect();
        assert_eq!(
            reasons,
            [
                None,
                Some("tainted"),
                Some("cordoned"),
                None,
                Some("tainted")
            ]
        );
        assert_eq!(joined.check(5), Ok(()));
    }

    #[test]
    fn results_that_do_not_answer_every_node_or_point_past_their_failures_are_refused() {
        let mut results = FilterResults::default();
        results.push(Err(Failure::unresolvable("x")));
        assert_eq!(results.check(1), Ok(()));
        assert_eq!(
            results.check(2).unwrap_err(),
            "returned 1 verdicts for 2 nodes"
        );
        results.verdicts[0] = 2;
        assert_eq!(
            results.check(1).unwrap_err(),
            "verdict 2 points past its 1 failures"
        );
    }

    #[test]
    fn push_each_stores_its_failure_only_when_a_node_fails_and_names_unknown_ids() {
        let mut nodes = Nodes::new(false);
        for id in [1, 2, 3] {
            let node = NodeInfo {
                name: format!("n{id}"),
                ..NodeInfo::default()
            };
            nodes.upsert(id, node);
        }
        let failure = || Failure::unresolvable("odd");

        let mut all_pass = FilterResults::default();
        all_pass.push_each(&nodes, &[1, 2, 3], |_| true, failure);
        assert_eq!(all_pass.verdicts, [0, 0, 0]);
        assert!(
            all_pass.failures.is_empty(),
            "no node failed: nothing stored"
        );

        let mut mixed = FilterResults::default();
        mixed.push_each(&nodes, &[1, 7, 2, 3], |id| id % 2 == 0, failure);
        assert_eq!(mixed.failure(0), Some(&failure()));
        assert_eq!(mixed.failure(1), Some(&Nodes::unknown(7)));
        assert_eq!(mixed.failure(2), None);
        assert_eq!(mixed.failure(3), Some(&failure()));
        assert_eq!(mixed.failures.len(), 2);

        // A second batch into the same results reuses the stored failure and keeps it when
        // every node of that batch passes.
        mixed.push_each(&nodes, &[2], |_| true, failure);
        mixed.push_each(&nodes, &[1], |_| false, failure);
        assert_eq!(mixed.failures.len(), 2);
        assert_eq!(mixed.failure(4), None);
        assert_eq!(mixed.failure(5), Some(&failure()));
    }
}
