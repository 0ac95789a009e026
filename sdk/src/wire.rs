//! The byte encoding of the `encoded` interface of `wit/plugin.wit`: held-back mirror changes and
//! the next pod in one `list<u8>`.
//!
//! Lowering a WIT record costs the host a look-up per field and a call into the component's
//! allocator per string and list; a pod with affinity terms and a placed pod beside it are dozens
//! of such calls per plugin per cycle. As bytes they are one allocation and one copy, and the
//! guest decodes them straight into the SDK's types (a label set into one buffer, not a `String`
//! per key and value).
//!
//! The encoding follows the WIT types field by field, in declaration order:
//!
//! - `u8`, `u16`, `u32`, `s32`, `s64`: little-endian, 1, 2, 4, 4 and 8 bytes; `bool`: one byte, 0 or 1;
//! - `string`: its length in bytes as `u32`, then its UTF-8 bytes;
//! - `list<T>`: its length as `u32`, then each item; `tuple<A, B>`: `A` then `B`;
//! - `option<T>`: one byte, 0 for none, or 1 followed by `T`;
//! - a record: its fields in order.
//!
//! `changes` (the input of `apply`) is a `mirror-changes` record; the input of `upsert-nodes` is a
//! `list<tuple<node-id, node-info>>`. The input of
//! `apply-and-set-pod` is `changes` followed by the pod: its priority (`s32`), the parts present
//! (`pod-parts` as a `u16`, bit 0 = `identity`), then each present part in the order of the
//! bits, as the `pod` record holds it (`identity` as a `pod-identity`, `labels` as
//! `list<tuple<string, string>>`, ...). Nothing may follow.

use crate::types::*;

mod devices;

/// What `plain-plans.apply-and-plan` returns for a plan it does not give as a number: the host
/// then asks `last-plan` for it.
pub const PLAN_FOLLOWS: u32 = 4;

/// The number `plain-plans.apply-and-plan` returns for `plan`: bit 0 for a `skip` filter plan,
/// bit 1 for `score`; [`PLAN_FOLLOWS`] for any other filter plan.
pub fn plain_plan(plan: &PodPlan) -> u32 {
    let skip = match plan.filter {
        FilterPlan::Run => 0,
        FilterPlan::Skip => 1,
        _ => return PLAN_FOLLOWS,
    };
    skip | (u32::from(plan.score) << 1)
}

/// Added by `zero-scores.apply-and-plan` to a number whose plan scores, when every node would
/// score 0.
pub const SCORES_ZERO: u32 = 8;

/// The number `zero-scores.apply-and-plan` returns for `plan`: [`plain_plan`], plus
/// [`SCORES_ZERO`] when the plan scores and `scores_zero` says every node would score 0.
pub fn plain_plan_scoring(plan: &PodPlan, scores_zero: bool) -> u32 {
    let number = plain_plan(plan);
    if number != PLAN_FOLLOWS && plan.score && scores_zero {
        number | SCORES_ZERO
    } else {
        number
    }
}

/// The plan a number from `zero-scores.apply-and-plan` stands for (`None` for [`PLAN_FOLLOWS`]),
/// and whether every node scores 0.
///
/// # Errors
/// A number the interface does not define, or [`SCORES_ZERO`] on a plan that does not score.
pub fn plan_of_scoring_number(number: u32) -> Result<(Option<PodPlan>, bool), String> {
    let scores_zero = number & SCORES_ZERO != 0;
    let plan = plan_of_number(number & !SCORES_ZERO)?;
    if scores_zero && !plan.as_ref().is_some_and(|p| p.score) {
        return Err(format!(
            "returned plan number {number}, which says every node scores 0 for a plan that does \
             not score"
        ));
    }
    Ok((plan, scores_zero))
}

/// The plan a number from `plain-plans.apply-and-plan` stands for: `Ok(None)` for
/// [`PLAN_FOLLOWS`].
///
/// # Errors
/// A number the interface does not define.
pub fn plan_of_number(number: u32) -> Result<Option<PodPlan>, String> {
    let filter = match number {
        PLAN_FOLLOWS => return Ok(None),
        0 | 2 => FilterPlan::Run,
        1 | 3 => FilterPlan::Skip,
        other => {
            return Err(format!(
                "returned plan number {other}, which is none of 0-{PLAN_FOLLOWS}"
            ))
        }
    };
    Ok(Some(PodPlan {
        filter,
        score: number & 2 != 0,
    }))
}

/// Why bytes could not be decoded: the host and the component disagree on the encoding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireError(pub String);

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed encoded input: {}", self.0)
    }
}

impl std::error::Error for WireError {}

type Decoded<T> = Result<T, WireError>;

/// Appends encoded values to a byte buffer.
struct Writer<'a>(&'a mut Vec<u8>);

impl Writer<'_> {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }

    fn bool(&mut self, v: bool) {
        self.0.push(v as u8);
    }

    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    fn i32(&mut self, v: i32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    fn len(&mut self, n: usize) {
        let n = u32::try_from(n).expect("a list or string of more than 4 GiB");
        self.u32(n);
    }

    fn str(&mut self, s: &str) {
        self.len(s.len());
        self.0.extend_from_slice(s.as_bytes());
    }

    fn strs(&mut self, list: &[String]) {
        self.len(list.len());
        for s in list {
            self.str(s);
        }
    }

    fn option<T>(&mut self, v: Option<&T>, put: impl FnOnce(&mut Self, &T)) {
        match v {
            None => self.u8(0),
            Some(v) => {
                self.u8(1);
                put(self, v);
            }
        }
    }

    fn opt_str(&mut self, v: Option<&String>) {
        self.option(v, |w, s| w.str(s));
    }

    fn list<T>(&mut self, items: &[T], mut put: impl FnMut(&mut Self, &T)) {
        self.len(items.len());
        for item in items {
            put(self, item);
        }
    }

    fn labels(&mut self, labels: &Labels) {
        self.len(labels.len());
        for (key, value) in labels.iter() {
            self.str(key);
            self.str(value);
        }
    }

    fn resources(&mut self, r: &Resources) {
        self.i64(r.milli_cpu);
        self.i64(r.memory);
        self.i64(r.ephemeral_storage);
        self.i64(r.pods);
        self.list(&r.scalar, |w, (name, amount)| {
            w.str(name);
            w.i64(*amount);
        });
    }

    fn usage(&mut self, u: &NodeUsage) {
        self.resources(&u.requested);
        self.resources(&u.non_zero_requested);
        self.u32(u.pod_count);
    }

    fn node(&mut self, n: &NodeInfo) {
        self.str(&n.name);
        self.labels(&n.labels);
        self.labels(&n.annotations);
        self.list(&n.taints, |w, t| {
            w.str(&t.key);
            w.str(&t.value);
            w.str(&t.effect);
        });
        self.bool(n.unschedulable);
        self.resources(&n.allocatable);
        self.usage(&n.usage);
    }

    fn requirements(&mut self, list: &[NodeSelectorRequirement]) {
        self.list(list, |w, r| {
            w.str(&r.key);
            w.str(&r.operator);
            w.strs(&r.values);
        });
    }

    fn term(&mut self, t: &NodeSelectorTerm) {
        self.requirements(&t.match_expressions);
        self.requirements(&t.match_fields);
    }

    fn terms(&mut self, terms: &[NodeSelectorTerm]) {
        self.list(terms, Self::term);
    }

    fn label_selector(&mut self, s: &LabelSelector) {
        self.labels(&s.match_labels);
        self.list(&s.match_expressions, |w, r| {
            w.str(&r.key);
            w.str(&r.operator);
            w.strs(&r.values);
        });
    }

    fn affinity_term(&mut self, t: &PodAffinityTerm) {
        self.option(t.label_selector.as_ref(), Self::label_selector);
        self.strs(&t.namespaces);
        self.option(t.namespace_selector.as_ref(), Self::label_selector);
        self.str(&t.topology_key);
    }

    fn weighted_terms(&mut self, terms: &[WeightedPodAffinityTerm]) {
        self.list(terms, |w, t| {
            w.i32(t.weight);
            w.affinity_term(&t.term);
        });
    }

    fn pod_affinity(&mut self, a: &PodAffinity) {
        self.list(&a.required_affinity, Self::affinity_term);
        self.weighted_terms(&a.preferred_affinity);
        self.list(&a.required_anti_affinity, Self::affinity_term);
        self.weighted_terms(&a.preferred_anti_affinity);
    }

    fn host_ports(&mut self, ports: &[HostPort]) {
        self.list(ports, |w, p| {
            w.str(&p.host_ip);
            w.str(&p.protocol);
            w.i32(p.port);
        });
    }

    fn existing_pod(&mut self, p: &ExistingPod) {
        self.u32(p.node);
        self.str(&p.namespace);
        self.labels(&p.labels);
        self.bool(p.terminating);
        self.pod_affinity(&p.pod_affinity);
        self.host_ports(&p.host_ports);
    }

    fn volume(&mut self, pv: &VolumeInfo) {
        self.str(&pv.name);
        self.labels(&pv.labels);
        self.str(&pv.storage_class_name);
        self.i64(pv.capacity);
        self.strs(&pv.access_modes);
        self.str(&pv.volume_mode);
        self.opt_str(pv.volume_attributes_class_name.as_ref());
        self.str(&pv.phase);
        self.bool(pv.deleting);
        self.option(pv.claim_ref.as_ref(), |w, r| {
            w.str(&r.namespace);
            w.str(&r.name);
            w.str(&r.uid);
        });
        self.option(pv.node_affinity.as_ref(), |w, terms| w.terms(terms));
    }

    fn claim(&mut self, c: &ClaimInfo) {
        self.str(&c.volume_name);
        self.str(&c.storage_class_name);
        self.option(c.storage_class.as_ref(), |w, s| {
            w.str(&s.name);
            w.opt_str(s.volume_binding_mode.as_ref());
            w.str(&s.provisioner);
            w.terms(&s.allowed_topologies);
        });
        self.option(c.volume.as_ref(), Self::volume);
        self.str(&c.uid);
        self.str(&c.phase);
        self.bool(c.deleting);
        self.bool(c.bind_completed);
        self.opt_str(c.selected_node.as_ref());
        self.i64(c.requested_storage);
        self.strs(&c.access_modes);
        self.str(&c.volume_mode);
        self.opt_str(c.volume_attributes_class_name.as_ref());
        self.option(c.selector.as_ref(), Self::label_selector);
    }

    fn node_affinity(&mut self, a: &NodeAffinity) {
        self.option(a.required.as_ref(), |w, terms| w.terms(terms));
        self.list(&a.preferred, |w, p| {
            w.i32(p.weight);
            w.term(&p.preference);
        });
    }

    fn toleration(&mut self, t: &Toleration) {
        self.str(&t.key);
        self.str(&t.operator);
        self.str(&t.value);
        self.str(&t.effect);
        self.option(t.toleration_seconds.as_ref(), |w, s| w.i64(*s));
    }

    fn volume_claim(&mut self, v: &VolumeClaim) {
        self.str(&v.volume);
        self.str(&v.claim_name);
        self.bool(v.ephemeral);
        self.option(v.claim.as_ref(), Self::claim);
    }

    fn spread_constraint(&mut self, c: &TopologySpreadConstraint) {
        self.i32(c.max_skew);
        self.str(&c.topology_key);
        self.str(&c.when_unsatisfiable);
        self.option(c.label_selector.as_ref(), Self::label_selector);
        self.option(c.min_domains.as_ref(), |w, m| w.i32(*m));
        self.str(&c.node_affinity_policy);
        self.str(&c.node_taints_policy);
        self.strs(&c.match_label_keys);
    }

    fn pod(&mut self, p: &Pod, parts: PodParts) {
        self.i32(p.priority);
        self.0.extend_from_slice(&parts.bits().to_le_bytes());
        let part = |wanted| parts.contains(wanted);
        if part(PodParts::IDENTITY) {
            self.str(&p.namespace);
            self.str(&p.name);
            self.str(&p.uid);
            self.str(&p.scheduler_name);
        }
        if part(PodParts::LABELS) {
            self.labels(&p.labels);
        }
        if part(PodParts::ANNOTATIONS) {
            self.labels(&p.annotations);
        }
        if part(PodParts::NODE_NAME) {
            self.str(&p.node_name);
        }
        if part(PodParts::NODE_SELECTION) {
            self.labels(&p.node_selector);
            self.option(p.node_affinity.as_ref(), Self::node_affinity);
        }
        if part(PodParts::TOLERATIONS) {
            self.list(&p.tolerations, Self::toleration);
        }
        if part(PodParts::REQUESTS) {
            self.resources(&p.requests);
            self.resources(&p.non_zero_requests);
        }
        if part(PodParts::VOLUME_CLAIMS) {
            self.list(&p.volume_claims, Self::volume_claim);
        }
        if part(PodParts::CONTAINERS) {
            self.list(&p.containers, |w, c| {
                w.str(&c.name);
                w.str(&c.image);
            });
        }
        if part(PodParts::POD_AFFINITY) {
            self.pod_affinity(&p.pod_affinity);
        }
        if part(PodParts::HOST_PORTS) {
            self.host_ports(&p.host_ports);
        }
        if part(PodParts::TOPOLOGY_SPREAD) {
            self.list(&p.topology_spread_constraints, Self::spread_constraint);
            self.option(p.default_spread_selector.as_ref(), Self::label_selector);
        }
        if part(PodParts::IMAGES) {
            self.strs(&p.images);
        }
        if part(PodParts::VOLUMES) {
            self.list(&p.volumes, Self::pod_volume);
        }
        if part(PodParts::CLAIMS) {
            self.list(&p.claims, Self::pod_claim);
        }
        if part(PodParts::GROUP) {
            self.option(p.group.as_ref(), Self::pod_group);
        }
    }

    fn pod_group(&mut self, g: &PodGroup) {
        self.str(&g.full_name);
        self.bool(g.found);
        self.u32(g.min_member);
        self.option(g.min_resources.as_ref(), Self::resources);
        self.option(g.schedule_timeout_seconds.as_ref(), |w, t| w.u32(*t));
        self.i64(g.created_millis);
        self.u32(g.members);
        self.u32(g.assigned);
        self.resources(&g.assigned_requests);
        self.strs(&g.waiting);
    }

    fn pod_volume(&mut self, v: &PodVolume) {
        self.str(&v.name);
        self.str(&v.claim_name);
        self.bool(v.ephemeral);
        self.bool(v.claim_found);
        self.strs(&v.access_modes);
        self.bool(v.bound);
        self.str(&v.plugin);
        self.str(&v.driver);
        self.str(&v.handle);
        self.strs(&v.monitors);
        self.str(&v.pool);
        self.bool(v.read_only);
        self.str(&v.provisioner);
        self.bool(v.capacity_tracked);
        self.list(&v.capacities, |w, c| {
            w.option(c.node_topology.as_ref(), Self::label_selector);
            w.option(c.limit.as_ref(), |w, l| w.i64(*l));
        });
    }

    fn csi_node(&mut self, csi: &CsiNode) {
        self.list(&csi.drivers, |w, d| {
            w.str(&d.name);
            w.option(d.count.as_ref(), |w, c| w.i32(*c));
        });
    }

    fn images(&mut self, images: &[NodeImage]) {
        self.list(images, |w, image| {
            w.strs(&image.names);
            w.i64(image.size_bytes);
        });
    }
}

/// Mirror changes held back by the host, already encoded: removals, upserts and usage updates
/// each in their own section, joined in that order by [`HeldChanges::write`].
#[derive(Default)]
pub struct HeldChanges {
    /// Each upserted pod is followed by its volumes (a plugin that reads them).
    volumes: bool,
    removed: Vec<u8>,
    removed_count: u32,
    upserted: Vec<u8>,
    upserted_count: u32,
    usage: Vec<u8>,
    usage_count: u32,
}

impl HeldChanges {
    /// Nothing held yet; upserted pods carry their volumes when `volumes` (the plugin reads
    /// [`ExistingPodParts::VOLUMES`]).
    pub fn new(volumes: bool) -> Self {
        HeldChanges {
            volumes,
            ..HeldChanges::default()
        }
    }

    /// Holds the removal of pod `id`.
    pub fn remove_pod(&mut self, id: PodId) {
        Writer(&mut self.removed).u32(id);
        self.removed_count += 1;
    }

    /// Holds the upsert of pod `id`.
    pub fn upsert_pod(&mut self, id: PodId, pod: &ExistingPod) {
        let mut w = Writer(&mut self.upserted);
        w.u32(id);
        w.existing_pod(pod);
        if self.volumes {
            w.list(&pod.volumes, |w, v| w.pod_volume(v));
        }
        self.upserted_count += 1;
    }

    /// Holds the usage of node `id`.
    pub fn update_usage(&mut self, id: NodeId, usage: &NodeUsage) {
        let mut w = Writer(&mut self.usage);
        w.u32(id);
        w.usage(usage);
        self.usage_count += 1;
    }

    /// Number of changes held.
    pub fn count(&self) -> usize {
        (self.removed_count + self.upserted_count + self.usage_count) as usize
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.count() == 0
    }

    /// True when a pod upsert is held.
    pub fn has_upserts(&self) -> bool {
        self.upserted_count > 0
    }

    /// True when a usage update is held.
    pub fn has_usage(&self) -> bool {
        self.usage_count > 0
    }

    /// Appends what is held to `out` as a `mirror-changes` record, and empties it.
    pub fn write(&mut self, out: &mut Vec<u8>) {
        for (count, section) in [
            (&mut self.removed_count, &mut self.removed),
            (&mut self.upserted_count, &mut self.upserted),
            (&mut self.usage_count, &mut self.usage),
        ] {
            Writer(out).u32(*count);
            out.extend_from_slice(section);
            *count = 0;
            section.clear();
        }
    }
}

/// Appends the parts of `pod` in `parts` to `out`, after the changes of an `apply-and-set-pod`
/// input.
pub fn write_pod(out: &mut Vec<u8>, pod: &Pod, parts: PodParts) {
    Writer(out).pod(pod, parts);
}

/// What follows each encoded `node-info` for a plugin that reads it (the `details` interface):
/// its images, then its CSINode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeDetails {
    /// `node-images`.
    pub images: bool,
    /// `csi-nodes`.
    pub csi_node: bool,
    /// The device pools (the `devices` interface), after the CSINode.
    pub devices: bool,
}

impl NodeDetails {
    /// The details a plugin with `descriptor` reads.
    pub fn read_by(descriptor: &Descriptor) -> NodeDetails {
        NodeDetails {
            images: descriptor.reads_node_images,
            csi_node: descriptor.reads_csi_nodes,
            devices: descriptor.reads_devices,
        }
    }

    /// Every detail in `self` or in `other`.
    pub fn union(self, other: NodeDetails) -> NodeDetails {
        NodeDetails {
            images: self.images || other.images,
            csi_node: self.csi_node || other.csi_node,
            devices: self.devices || other.devices,
        }
    }

    /// Whether some detail is in both `self` and `other`.
    pub fn meets(self, other: NodeDetails) -> bool {
        (self.images && other.images)
            || (self.csi_node && other.csi_node)
            || (self.devices && other.devices)
    }

    /// No detail at all.
    pub fn is_empty(self) -> bool {
        self == NodeDetails::default()
    }
}

/// Appends `nodes` to `out` as the input of `upsert-nodes`: a `list<tuple<node-id, node-info>>`,
/// each node followed by the `details` the plugin reads.
pub fn write_nodes(out: &mut Vec<u8>, nodes: &[(NodeId, &NodeInfo)], details: NodeDetails) {
    let mut w = Writer(out);
    w.len(nodes.len());
    for (id, node) in nodes {
        w.u32(*id);
        w.node(node);
        if details.images {
            w.images(&node.images);
        }
        if details.csi_node {
            w.option(node.csi_node.as_ref(), |w, c| w.csi_node(c));
        }
        if details.devices {
            w.device_pools(&node.device_pools);
        }
    }
}

/// Decoded `mirror-changes`, to apply in this order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MirrorChanges {
    /// Pods to remove.
    pub removed_pods: Vec<PodId>,
    /// Pods to add or replace.
    pub upserted_pods: Vec<(PodId, ExistingPod)>,
    /// Node usage to replace.
    pub usage: Vec<(NodeId, NodeUsage)>,
}

/// Reads encoded values from a byte slice.
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader of `bytes` from their start.
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { rest: bytes }
    }

    /// Fails unless every byte was read.
    pub fn finish(self) -> Decoded<()> {
        match self.rest.len() {
            0 => Ok(()),
            n => Err(WireError(format!("{n} bytes left over"))),
        }
    }

    // The readers of numbers, lengths and strings run for every field a guest decodes: inlined,
    // with their errors built out of line, as a component they stop being a call each.
    #[inline(always)]
    fn take(&mut self, n: usize) -> Decoded<&'a [u8]> {
        if self.rest.len() < n {
            return Err(Self::short(n, self.rest.len()));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    #[cold]
    fn short(wanted: usize, left: usize) -> WireError {
        WireError(format!("{wanted} bytes wanted, {left} left"))
    }

    #[cold]
    fn overrun(n: usize, left: usize) -> WireError {
        WireError(format!("a length of {n} with {left} bytes left"))
    }

    #[inline(always)]
    fn array<const N: usize>(&mut self) -> Decoded<[u8; N]> {
        let bytes = self.take(N)?;
        Ok(bytes.try_into().expect("take returns N bytes"))
    }

    fn u8(&mut self) -> Decoded<u8> {
        Ok(self.array::<1>()?[0])
    }

    fn bool(&mut self) -> Decoded<bool> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(WireError(format!("bool {other}"))),
        }
    }

    #[inline(always)]
    fn u32(&mut self) -> Decoded<u32> {
        self.array().map(u32::from_le_bytes)
    }

    fn i32(&mut self) -> Decoded<i32> {
        self.array().map(i32::from_le_bytes)
    }

    fn i64(&mut self) -> Decoded<i64> {
        self.array().map(i64::from_le_bytes)
    }

    /// A list's length, refused when even one byte per item would overrun the input (so garbage
    /// cannot make the decoder reserve gigabytes).
    #[inline(always)]
    fn len(&mut self) -> Decoded<usize> {
        let n = self.u32()? as usize;
        if n > self.rest.len() {
            return Err(Self::overrun(n, self.rest.len()));
        }
        Ok(n)
    }

    #[inline(always)]
    fn str(&mut self) -> Decoded<&'a str> {
        let n = self.len()?;
        let bytes = self.take(n)?;
        // Names and labels are ASCII: checked in a word-at-a-time loop here instead of a call
        // to the general UTF-8 check.
        if bytes.is_ascii() {
            // SAFETY: ASCII bytes are valid UTF-8.
            return Ok(unsafe { std::str::from_utf8_unchecked(bytes) });
        }
        Self::utf8(bytes)
    }

    fn utf8(bytes: &[u8]) -> Decoded<&str> {
        std::str::from_utf8(bytes).map_err(|e| WireError(format!("string: {e}")))
    }

    fn string(&mut self) -> Decoded<String> {
        self.str().map(str::to_string)
    }

    fn strings(&mut self) -> Decoded<Vec<String>> {
        self.list(Self::string)
    }

    fn option<T>(&mut self, get: impl FnOnce(&mut Self) -> Decoded<T>) -> Decoded<Option<T>> {
        match self.u8()? {
            0 => Ok(None),
            1 => get(self).map(Some),
            other => Err(WireError(format!("option tag {other}"))),
        }
    }

    fn opt_string(&mut self) -> Decoded<Option<String>> {
        self.option(Self::string)
    }

    fn list<T>(&mut self, mut get: impl FnMut(&mut Self) -> Decoded<T>) -> Decoded<Vec<T>> {
        let n = self.len()?;
        let mut items = Vec::with_capacity(n);
        for _ in 0..n {
            items.push(get(self)?);
        }
        Ok(items)
    }

    /// A label set, copied straight into its buffer: the host writes sets in key order, so
    /// they need no sort (one arriving out of order is sorted as [`Labels::from_pairs`] does).
    fn labels(&mut self) -> Decoded<Labels> {
        let n = self.len()?;
        // The lengths first, so the buffer is allocated once and at its size.
        let mut text_len = 0usize;
        let mut scan = Reader { rest: self.rest };
        for _ in 0..2 * n {
            let len = scan.len()?;
            scan.take(len)?;
            text_len += len;
        }
        let mut text = String::with_capacity(text_len);
        let mut spans: Vec<[u32; 3]> = Vec::with_capacity(n);
        let mut in_order = true;
        for _ in 0..n {
            let key = self.str()?;
            let value = self.str()?;
            if let Some(&[start, middle, _]) = spans.last() {
                in_order &= text[start as usize..middle as usize] < *key;
            }
            let start = text.len() as u32;
            text.push_str(key);
            let middle = text.len() as u32;
            text.push_str(value);
            spans.push([start, middle, text.len() as u32]);
        }
        Ok(Labels::from_spans(text, spans, in_order))
    }

    fn resources(&mut self) -> Decoded<Resources> {
        Ok(Resources {
            milli_cpu: self.i64()?,
            memory: self.i64()?,
            ephemeral_storage: self.i64()?,
            pods: self.i64()?,
            scalar: self.list(|r| Ok((r.string()?, r.i64()?)))?,
        })
    }

    fn usage(&mut self) -> Decoded<NodeUsage> {
        Ok(NodeUsage {
            requested: self.resources()?,
            non_zero_requested: self.resources()?,
            pod_count: self.u32()?,
        })
    }

    /// A `list<tuple<node-id, node-info>>`, as [`write_nodes`] wrote it with `details`.
    pub fn nodes(&mut self, details: NodeDetails) -> Decoded<Vec<(NodeId, NodeInfo)>> {
        self.list(|r| {
            let id = r.u32()?;
            let node = NodeInfo {
                name: r.string()?,
                labels: r.labels()?,
                annotations: r.labels()?,
                taints: r.list(|r| {
                    Ok(Taint {
                        key: r.string()?,
                        value: r.string()?,
                        effect: r.string()?,
                    })
                })?,
                unschedulable: r.bool()?,
                allocatable: r.resources()?,
                usage: r.usage()?,
                images: if details.images {
                    r.images()?
                } else {
                    Vec::new()
                },
                csi_node: if details.csi_node {
                    r.option(Self::csi_node)?
                } else {
                    None
                },
                device_pools: if details.devices {
                    r.device_pools()?
                } else {
                    Vec::new()
                },
            };
            Ok((id, node))
        })
    }

    fn requirements(&mut self) -> Decoded<Vec<NodeSelectorRequirement>> {
        self.list(|r| {
            Ok(NodeSelectorRequirement {
                key: r.string()?,
                operator: r.string()?,
                values: r.strings()?,
            })
        })
    }

    fn term(&mut self) -> Decoded<NodeSelectorTerm> {
        Ok(NodeSelectorTerm {
            match_expressions: self.requirements()?,
            match_fields: self.requirements()?,
        })
    }

    fn terms(&mut self) -> Decoded<Vec<NodeSelectorTerm>> {
        self.list(Self::term)
    }

    fn label_selector(&mut self) -> Decoded<LabelSelector> {
        Ok(LabelSelector {
            match_labels: self.labels()?,
            match_expressions: self.list(|r| {
                Ok(LabelSelectorRequirement {
                    key: r.string()?,
                    operator: r.string()?,
                    values: r.strings()?,
                })
            })?,
        })
    }

    fn affinity_term(&mut self) -> Decoded<PodAffinityTerm> {
        Ok(PodAffinityTerm {
            label_selector: self.option(Self::label_selector)?,
            namespaces: self.strings()?,
            namespace_selector: self.option(Self::label_selector)?,
            topology_key: self.string()?,
        })
    }

    fn weighted_terms(&mut self) -> Decoded<Vec<WeightedPodAffinityTerm>> {
        self.list(|r| {
            Ok(WeightedPodAffinityTerm {
                weight: r.i32()?,
                term: r.affinity_term()?,
            })
        })
    }

    fn pod_affinity(&mut self) -> Decoded<PodAffinity> {
        Ok(PodAffinity {
            required_affinity: self.list(Self::affinity_term)?,
            preferred_affinity: self.weighted_terms()?,
            required_anti_affinity: self.list(Self::affinity_term)?,
            preferred_anti_affinity: self.weighted_terms()?,
        })
    }

    fn host_ports(&mut self) -> Decoded<Vec<HostPort>> {
        self.list(|r| {
            Ok(HostPort {
                host_ip: r.string()?,
                protocol: r.string()?,
                port: r.i32()?,
            })
        })
    }

    fn existing_pod(&mut self) -> Decoded<ExistingPod> {
        Ok(ExistingPod {
            node: self.u32()?,
            namespace: self.string()?,
            labels: self.labels()?,
            terminating: self.bool()?,
            pod_affinity: self.pod_affinity()?,
            host_ports: self.host_ports()?,
            volumes: Vec::new(),
        })
    }

    fn volume(&mut self) -> Decoded<VolumeInfo> {
        Ok(VolumeInfo {
            name: self.string()?,
            labels: self.labels()?,
            storage_class_name: self.string()?,
            capacity: self.i64()?,
            access_modes: self.strings()?,
            volume_mode: self.string()?,
            volume_attributes_class_name: self.opt_string()?,
            phase: self.string()?,
            deleting: self.bool()?,
            claim_ref: self.option(|r| {
                Ok(ClaimRef {
                    namespace: r.string()?,
                    name: r.string()?,
                    uid: r.string()?,
                })
            })?,
            node_affinity: self.option(Self::terms)?,
        })
    }

    fn claim(&mut self) -> Decoded<ClaimInfo> {
        Ok(ClaimInfo {
            volume_name: self.string()?,
            storage_class_name: self.string()?,
            storage_class: self.option(|r| {
                Ok(StorageClassInfo {
                    name: r.string()?,
                    volume_binding_mode: r.opt_string()?,
                    provisioner: r.string()?,
                    allowed_topologies: r.terms()?,
                })
            })?,
            volume: self.option(Self::volume)?,
            uid: self.string()?,
            phase: self.string()?,
            deleting: self.bool()?,
            bind_completed: self.bool()?,
            selected_node: self.opt_string()?,
            requested_storage: self.i64()?,
            access_modes: self.strings()?,
            volume_mode: self.string()?,
            volume_attributes_class_name: self.opt_string()?,
            selector: self.option(Self::label_selector)?,
        })
    }

    fn node_affinity(&mut self) -> Decoded<NodeAffinity> {
        Ok(NodeAffinity {
            required: self.option(Self::terms)?,
            preferred: self.list(|r| {
                Ok(PreferredSchedulingTerm {
                    weight: r.i32()?,
                    preference: r.term()?,
                })
            })?,
        })
    }

    fn toleration(&mut self) -> Decoded<Toleration> {
        Ok(Toleration {
            key: self.string()?,
            operator: self.string()?,
            value: self.string()?,
            effect: self.string()?,
            toleration_seconds: self.option(Self::i64)?,
        })
    }

    fn volume_claim(&mut self) -> Decoded<VolumeClaim> {
        Ok(VolumeClaim {
            volume: self.string()?,
            claim_name: self.string()?,
            ephemeral: self.bool()?,
            claim: self.option(Self::claim)?,
        })
    }

    fn spread_constraint(&mut self) -> Decoded<TopologySpreadConstraint> {
        Ok(TopologySpreadConstraint {
            max_skew: self.i32()?,
            topology_key: self.string()?,
            when_unsatisfiable: self.string()?,
            label_selector: self.option(Self::label_selector)?,
            min_domains: self.option(Self::i32)?,
            node_affinity_policy: self.string()?,
            node_taints_policy: self.string()?,
            match_label_keys: self.strings()?,
        })
    }

    /// A `mirror-changes` record, each upserted pod followed by its volumes when `volumes`.
    pub fn changes(&mut self, volumes: bool) -> Decoded<MirrorChanges> {
        Ok(MirrorChanges {
            removed_pods: self.list(Self::u32)?,
            upserted_pods: self.list(|r| {
                let id = r.u32()?;
                let mut pod = r.existing_pod()?;
                if volumes {
                    pod.volumes = r.list(Self::pod_volume)?;
                }
                Ok((id, pod))
            })?,
            usage: self.list(|r| Ok((r.u32()?, r.usage()?)))?,
        })
    }

    /// A pod as [`write_pod`] wrote it: the parts it lacks are left empty, as
    /// [`Pod::with_parts`] leaves them.
    pub fn pod(&mut self) -> Decoded<Pod> {
        let mut pod = Pod {
            priority: self.i32()?,
            ..Pod::default()
        };
        let bits = u16::from_le_bytes(self.array()?);
        let parts = PodParts::from_bits(bits);
        if parts.bits() != bits {
            return Err(WireError(format!("unknown pod parts {bits:#x}")));
        }
        let part = |wanted| parts.contains(wanted);
        if part(PodParts::IDENTITY) {
            pod.namespace = self.string()?;
            pod.name = self.string()?;
            pod.uid = self.string()?;
            pod.scheduler_name = self.string()?;
        }
        if part(PodParts::LABELS) {
            pod.labels = self.labels()?;
        }
        if part(PodParts::ANNOTATIONS) {
            pod.annotations = self.labels()?;
        }
        if part(PodParts::NODE_NAME) {
            pod.node_name = self.string()?;
        }
        if part(PodParts::NODE_SELECTION) {
            pod.node_selector = self.labels()?;
            pod.node_affinity = self.option(Self::node_affinity)?;
        }
        if part(PodParts::TOLERATIONS) {
            pod.tolerations = self.list(Self::toleration)?;
        }
        if part(PodParts::REQUESTS) {
            pod.requests = self.resources()?;
            pod.non_zero_requests = self.resources()?;
        }
        if part(PodParts::VOLUME_CLAIMS) {
            pod.volume_claims = self.list(Self::volume_claim)?;
        }
        if part(PodParts::CONTAINERS) {
            pod.containers = self.list(|r| {
                Ok(Container {
                    name: r.string()?,
                    image: r.string()?,
                })
            })?;
        }
        if part(PodParts::POD_AFFINITY) {
            pod.pod_affinity = self.pod_affinity()?;
        }
        if part(PodParts::HOST_PORTS) {
            pod.host_ports = self.host_ports()?;
        }
        if part(PodParts::TOPOLOGY_SPREAD) {
            pod.topology_spread_constraints = self.list(Self::spread_constraint)?;
            pod.default_spread_selector = self.option(Self::label_selector)?;
        }
        if part(PodParts::IMAGES) {
            pod.images = self.strings()?;
        }
        if part(PodParts::VOLUMES) {
            pod.volumes = self.list(Self::pod_volume)?;
        }
        if part(PodParts::CLAIMS) {
            pod.claims = self.list(Self::pod_claim)?;
        }
        if part(PodParts::GROUP) {
            pod.group = self.option(Self::pod_group)?;
        }
        Ok(pod)
    }

    fn pod_group(&mut self) -> Decoded<PodGroup> {
        Ok(PodGroup {
            full_name: self.string()?,
            found: self.bool()?,
            min_member: self.u32()?,
            min_resources: self.option(Self::resources)?,
            schedule_timeout_seconds: self.option(Self::u32)?,
            created_millis: self.i64()?,
            members: self.u32()?,
            assigned: self.u32()?,
            assigned_requests: self.resources()?,
            waiting: self.strings()?,
        })
    }

    fn pod_volume(&mut self) -> Decoded<PodVolume> {
        Ok(PodVolume {
            name: self.string()?,
            claim_name: self.string()?,
            ephemeral: self.bool()?,
            claim_found: self.bool()?,
            access_modes: self.strings()?,
            bound: self.bool()?,
            plugin: self.string()?,
            driver: self.string()?,
            handle: self.string()?,
            monitors: self.strings()?,
            pool: self.string()?,
            read_only: self.bool()?,
            provisioner: self.string()?,
            capacity_tracked: self.bool()?,
            capacities: self.list(|r| {
                Ok(StorageCapacity {
                    node_topology: r.option(Self::label_selector)?,
                    limit: r.option(Self::i64)?,
                })
            })?,
        })
    }

    fn csi_node(&mut self) -> Decoded<CsiNode> {
        Ok(CsiNode {
            drivers: self.list(|r| {
                Ok(CsiDriverLimit {
                    name: r.string()?,
                    count: r.option(Self::i32)?,
                })
            })?,
        })
    }

    fn images(&mut self) -> Decoded<Vec<NodeImage>> {
        self.list(|r| {
            Ok(NodeImage {
                names: r.strings()?,
                size_bytes: r.i64()?,
            })
        })
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn run_and_skip_plans_travel_as_numbers_and_the_rest_follow() {
        let failure = Failure::unschedulable("no");
        for filter in [
            FilterPlan::Run,
            FilterPlan::Skip,
            FilterPlan::OnlyNodes(vec!["n1".into()]),
            FilterPlan::Reject(failure.clone()),
            FilterPlan::FailingNodes {
                nodes: vec![3],
                results: FilterResults::default(),
            },
        ] {
            for score in [false, true] {
                let plan = PodPlan {
                    filter: filter.clone(),
                    score,
                };
                let number = plain_plan(&plan);
                let simple = matches!(filter, FilterPlan::Run | FilterPlan::Skip);
                assert_eq!(number == PLAN_FOLLOWS, !simple, "{plan:?}");
                let back = plan_of_number(number).expect("a defined number");
                assert_eq!(back, simple.then(|| plan.clone()), "{plan:?}");
            }
        }
        assert!(plan_of_number(PLAN_FOLLOWS + 1).is_err());
        assert!(plan_of_number(u32::MAX).is_err());
    }

    #[test]
    fn zero_scores_travel_only_with_plans_that_score() {
        for filter in [FilterPlan::Run, FilterPlan::Skip] {
            for score in [false, true] {
                for scores_zero in [false, true] {
                    let plan = PodPlan {
                        filter: filter.clone(),
                        score,
                    };
                    let number = plain_plan_scoring(&plan, scores_zero);
                    let back = plan_of_scoring_number(number).expect("a defined number");
                    assert_eq!(back, (Some(plan.clone()), score && scores_zero), "{plan:?}");
                }
            }
        }
        let follows = PodPlan {
            filter: FilterPlan::OnlyNodes(vec!["n1".into()]),
            score: true,
        };
        assert_eq!(plain_plan_scoring(&follows, true), PLAN_FOLLOWS);
        for refused in [SCORES_ZERO, SCORES_ZERO | 1, SCORES_ZERO | PLAN_FOLLOWS, 16] {
            assert!(plan_of_scoring_number(refused).is_err(), "{refused}");
        }
    }
    use super::*;
    use crate::{AttributeValue, Device, DevicePool};

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        Labels::from_pairs(pairs.iter().copied())
    }

    fn selector(app: &str) -> LabelSelector {
        LabelSelector {
            match_labels: labels(&[("app", app), ("tier", "web")]),
            match_expressions: vec![LabelSelectorRequirement {
                key: "track".into(),
                operator: "NotIn".into(),
                values: vec!["canary".into(), "dev".into()],
            }],
        }
    }

    fn term(n: u8) -> NodeSelectorTerm {
        let requirement = |key: &str| NodeSelectorRequirement {
            key: key.into(),
            operator: "In".into(),
            values: vec![format!("v{n}"), "ü".into()],
        };
        NodeSelectorTerm {
            match_expressions: vec![requirement("zone"), requirement("disk")],
            match_fields: vec![requirement("metadata.name")],
        }
    }

    fn affinity(n: i32) -> PodAffinity {
        let term = |key: &str| PodAffinityTerm {
            label_selector: Some(selector(key)),
            namespaces: vec!["a".into(), format!("ns{n}")],
            namespace_selector: Some(LabelSelector::default()),
            topology_key: key.into(),
        };
        PodAffinity {
            required_affinity: vec![term("zone"), term("rack")],
            preferred_affinity: vec![WeightedPodAffinityTerm {
                weight: n,
                term: term("region"),
            }],
            required_anti_affinity: vec![PodAffinityTerm {
                label_selector: None,
                namespace_selector: None,
                ..term("host")
            }],
            preferred_anti_affinity: vec![WeightedPodAffinityTerm {
                weight: -n,
                term: term("host"),
            }],
        }
    }

    fn resources(n: i64) -> Resources {
        Resources {
            milli_cpu: n,
            memory: n << 30,
            ephemeral_storage: -n,
            pods: i64::MAX - n,
            scalar: vec![("example.com/a".into(), n), ("nvidia.com/gpu".into(), 2)],
        }
    }

    fn volume() -> VolumeInfo {
        VolumeInfo {
            name: "pv-1".into(),
            labels: labels(&[("zone", "a")]),
            storage_class_name: "fast".into(),
            capacity: 1 << 40,
            access_modes: vec!["ReadWriteOnce".into()],
            volume_mode: "Block".into(),
            volume_attributes_class_name: Some("gold".into()),
            phase: "Available".into(),
            deleting: true,
            claim_ref: Some(ClaimRef {
                namespace: "ns".into(),
                name: "data".into(),
                uid: "u-9".into(),
            }),
            node_affinity: Some(vec![term(4)]),
        }
    }

    /// A pod with something other than the default in every field a part carries.
    fn full_pod() -> Pod {
        Pod {
            namespace: "ns".into(),
            name: "web-0".into(),
            uid: "u-1".into(),
            scheduler_name: "default-scheduler".into(),
            priority: -7,
            labels: labels(&[("app", "web"), ("tier", "front")]),
            annotations: labels(&[("note", "")]),
            node_name: "n3".into(),
            node_selector: labels(&[("disk", "ssd")]),
            node_affinity: Some(NodeAffinity {
                required: Some(vec![term(1), NodeSelectorTerm::default()]),
                preferred: vec![PreferredSchedulingTerm {
                    weight: 5,
                    preference: term(2),
                }],
            }),
            tolerations: vec![
                Toleration {
                    key: "k".into(),
                    operator: "Equal".into(),
                    value: "v".into(),
                    effect: "NoExecute".into(),
                    toleration_seconds: Some(-30),
                },
                Toleration::default(),
            ],
            requests: resources(500),
            non_zero_requests: resources(600),
            volume_claims: vec![
                VolumeClaim {
                    volume: "data".into(),
                    claim_name: "web-0-data".into(),
                    ephemeral: true,
                    claim: Some(ClaimInfo {
                        volume_name: "pv-1".into(),
                        storage_class_name: "fast".into(),
                        storage_class: Some(StorageClassInfo {
                            name: "fast".into(),
                            volume_binding_mode: Some("WaitForFirstConsumer".into()),
                            provisioner: "csi.example.com".into(),
                            allowed_topologies: vec![term(3)],
                        }),
                        volume: Some(volume()),
                        uid: "c-1".into(),
                        phase: "Bound".into(),
                        deleting: true,
                        bind_completed: true,
                        selected_node: Some("n1".into()),
                        requested_storage: 1 << 30,
                        access_modes: vec!["ReadWriteOncePod".into()],
                        volume_mode: "Filesystem".into(),
                        volume_attributes_class_name: Some("silver".into()),
                        selector: Some(selector("db")),
                    }),
                },
                VolumeClaim::default(),
            ],
            containers: vec![Container {
                name: "main".into(),
                image: "nginx:1".into(),
            }],
            pod_affinity: affinity(9),
            host_ports: vec![HostPort {
                host_ip: "10.0.0.1".into(),
                protocol: "UDP".into(),
                port: 53,
            }],
            topology_spread_constraints: vec![TopologySpreadConstraint {
                max_skew: 2,
                topology_key: "zone".into(),
                when_unsatisfiable: "ScheduleAnyway".into(),
                label_selector: Some(selector("web")),
                min_domains: Some(3),
                node_affinity_policy: "Ignore".into(),
                node_taints_policy: "Honor".into(),
                match_label_keys: vec!["pod-template-hash".into()],
            }],
            default_spread_selector: Some(selector("svc")),
            images: vec!["busybox".into(), "nginx:1".into()],
            volumes: vec![pod_volume("disk"), PodVolume::default()],
            group: Some(PodGroup {
                full_name: "ns/job".into(),
                found: true,
                min_member: 8,
                min_resources: Some(resources(3)),
                schedule_timeout_seconds: Some(30),
                created_millis: 1_700_000_000_000,
                members: 7,
                assigned: 5,
                assigned_requests: resources(9),
                waiting: vec!["ns/job-1".into(), "ns/job-2".into()],
            }),
            terminating: true,
            nominated_node_name: "n9".into(),
            ..Pod::default()
        }
    }

    /// A volume with something other than the default in every field.
    fn pod_volume(name: &str) -> PodVolume {
        PodVolume {
            name: name.into(),
            claim_name: "data-0".into(),
            ephemeral: true,
            claim_found: true,
            access_modes: vec!["ReadWriteOncePod".into()],
            bound: true,
            plugin: "kubernetes.io/rbd".into(),
            driver: "rbd.csi.ceph.com".into(),
            handle: "image-1".into(),
            monitors: vec!["10.0.0.1:6789".into(), "10.0.0.2:6789".into()],
            pool: "kube".into(),
            read_only: true,
            provisioner: "csi.example.com".into(),
            capacity_tracked: true,
            capacities: vec![
                StorageCapacity {
                    node_topology: Some(selector("zone-a")),
                    limit: Some(10 << 30),
                },
                StorageCapacity::default(),
            ],
        }
    }

    fn changes() -> MirrorChanges {
        MirrorChanges {
            removed_pods: vec![4, 0, u32::MAX],
            upserted_pods: vec![
                (
                    2,
                    ExistingPod {
                        node: 7,
                        namespace: "ns".into(),
                        labels: labels(&[("app", "db")]),
                        terminating: true,
                        pod_affinity: affinity(3),
                        host_ports: vec![HostPort::default()],
                        volumes: vec![pod_volume("data")],
                    },
                ),
                (3, ExistingPod::default()),
            ],
            usage: vec![(
                1,
                NodeUsage {
                    requested: resources(1),
                    non_zero_requested: resources(2),
                    pod_count: 3,
                },
            )],
        }
    }

    fn encode(changes: &MirrorChanges, pod: &Pod, parts: PodParts) -> Vec<u8> {
        let mut held = HeldChanges::new(true);
        for &id in &changes.removed_pods {
            held.remove_pod(id);
        }
        for (id, pod) in &changes.upserted_pods {
            held.upsert_pod(*id, pod);
        }
        for (id, usage) in &changes.usage {
            held.update_usage(*id, usage);
        }
        assert_eq!(held.count(), 6);
        let mut out = Vec::new();
        held.write(&mut out);
        assert!(held.is_empty(), "writing empties what is held");
        write_pod(&mut out, pod, parts);
        out
    }

    fn decode(bytes: &[u8]) -> Decoded<(MirrorChanges, Pod)> {
        let mut reader = Reader::new(bytes);
        let decoded = (reader.changes(true)?, reader.pod()?);
        reader.finish()?;
        Ok(decoded)
    }

    #[test]
    fn changes_and_every_choice_of_parts_decode_to_what_was_encoded() {
        let pod = full_pod();
        for bits in 0..=PodParts::ALL.bits() {
            let parts = PodParts::from_bits(bits);
            let bytes = encode(&changes(), &pod, parts);
            let (changes, decoded) = decode(&bytes).unwrap();
            assert_eq!(changes, self::changes());
            assert_eq!(decoded, pod.with_parts(parts), "parts {bits:#x}");
        }
    }

    #[test]
    fn nodes_decode_to_what_was_encoded() {
        let node = NodeInfo {
            name: "n1".into(),
            labels: labels(&[("zone", "a"), ("kubernetes.io/hostname", "n1")]),
            annotations: labels(&[("note", "x")]),
            taints: vec![
                Taint {
                    key: "gpu".into(),
                    value: "true".into(),
                    effect: "NoSchedule".into(),
                },
                Taint::default(),
            ],
            unschedulable: true,
            allocatable: resources(4000),
            usage: NodeUsage {
                requested: resources(5),
                non_zero_requested: resources(6),
                pod_count: 7,
            },
            images: vec![NodeImage {
                names: vec!["registry.example/app:v1".into(), "app@sha256:ab".into()],
                size_bytes: 123_456_789,
            }],
            csi_node: Some(CsiNode {
                drivers: vec![
                    CsiDriverLimit {
                        name: "ebs.csi.aws.com".into(),
                        count: Some(25),
                    },
                    CsiDriverLimit::default(),
                ],
            }),
            device_pools: vec![DevicePool {
                driver: "gpu.example.com".into(),
                name: "n1".into(),
                complete: true,
                devices: vec![
                    Device {
                        name: "gpu-0".into(),
                        attributes: vec![
                            ("model".into(), AttributeValue::String("a100".into())),
                            ("index".into(), AttributeValue::Int(-3)),
                            ("x/mig".into(), AttributeValue::Bool(true)),
                            (
                                "driverVersion".into(),
                                AttributeValue::Version("1.2.3".into()),
                            ),
                        ],
                        capacity: vec![("memory".into(), "40Gi".into())],
                        allocated: true,
                    },
                    Device::default(),
                ],
            }],
        };
        let empty = NodeInfo::default();
        for (images, csi_node) in [(true, true), (true, false), (false, true), (false, false)] {
            let devices = images;
            let details = NodeDetails {
                images,
                csi_node,
                devices,
            };
            let mut out = Vec::new();
            write_nodes(&mut out, &[(3, &node), (0, &empty)], details);
            let mut reader = Reader::new(&out);
            let sent = node.sent(images, csi_node, devices);
            assert_eq!(
                reader.nodes(details).unwrap(),
                vec![(3, sent), (0, empty.clone())]
            );
            reader.finish().unwrap();
            for end in 0..out.len() {
                assert!(
                    Reader::new(&out[..end]).nodes(details).is_err(),
                    "cut at {end}"
                );
            }
        }
    }

    #[test]
    fn a_held_change_list_can_be_written_again_after_it_was_emptied() {
        let mut held = HeldChanges::default();
        held.remove_pod(1);
        held.write(&mut Vec::new());
        held.update_usage(5, &NodeUsage::default());
        assert!(held.has_usage() && !held.has_upserts());
        let mut out = Vec::new();
        held.write(&mut out);
        let changes = Reader::new(&out).changes(false).unwrap();
        assert_eq!(changes.removed_pods, Vec::<u32>::new());
        assert_eq!(changes.usage, vec![(5, NodeUsage::default())]);
    }

    #[test]
    fn pods_carry_their_volumes_only_to_a_plugin_that_reads_them() {
        let mut held = HeldChanges::new(false);
        for (id, pod) in &changes().upserted_pods {
            held.upsert_pod(*id, pod);
        }
        let mut out = Vec::new();
        held.write(&mut out);
        let mut reader = Reader::new(&out);
        let decoded = reader.changes(false).unwrap();
        reader.finish().unwrap();
        for ((_, sent), (_, got)) in changes().upserted_pods.iter().zip(&decoded.upserted_pods) {
            assert!(!sent.volumes.is_empty() || got.volumes.is_empty());
            assert!(got.volumes.is_empty(), "no volumes without the part");
            assert_eq!(got.namespace, sent.namespace);
        }
    }

    #[test]
    fn every_truncation_and_trailing_byte_is_refused() {
        let bytes = encode(&changes(), &full_pod(), PodParts::ALL);
        for end in 0..bytes.len() {
            assert!(decode(&bytes[..end]).is_err(), "cut at {end}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(
            decode(&longer).unwrap_err(),
            WireError("1 bytes left over".into())
        );
    }

    #[test]
    fn garbage_is_refused_without_reserving_its_lengths() {
        let mut huge = Vec::new();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(Reader::new(&huge).changes(true).is_err());

        let mut bad_utf8 = Vec::new();
        Writer(&mut bad_utf8).u32(2);
        bad_utf8.extend_from_slice(&[0xff, 0xfe]);
        assert!(Reader::new(&bad_utf8)
            .str()
            .unwrap_err()
            .0
            .contains("string"));

        assert_eq!(
            Reader::new(&[2]).bool().unwrap_err(),
            WireError("bool 2".into())
        );
        assert_eq!(
            Reader::new(&[9]).option(Reader::u8).unwrap_err(),
            WireError("option tag 9".into())
        );

        let mut unknown_part = Vec::new();
        Writer(&mut unknown_part).i32(0);
        unknown_part.extend_from_slice(&(1u16 << 15).to_le_bytes());
        assert!(Reader::new(&unknown_part).pod().is_err());
    }

    #[test]
    fn labels_decode_to_the_set_their_pairs_make_in_any_order_and_any_script() {
        let decode = |pairs: &[(&str, &str)]| {
            let mut bytes = Vec::new();
            let mut w = Writer(&mut bytes);
            w.len(pairs.len());
            for (key, value) in pairs {
                w.str(key);
                w.str(value);
            }
            let mut r = Reader::new(&bytes);
            let labels = r.labels().expect("decodes");
            r.finish().expect("all read");
            labels
        };
        for pairs in [
            &[][..],
            &[("app", "web"), ("tier", "front")],
            &[("zone", "zürich-1"), ("ключ", "значение")],
            &[("b", "1"), ("a", "2"), ("b", "3"), ("c", "")],
            &[("a", "1"), ("a", "2")],
        ] {
            let decoded = decode(pairs);
            assert_eq!(
                decoded,
                Labels::from_pairs(pairs.iter().copied()),
                "{pairs:?}"
            );
            let sorted: Vec<_> = decoded.iter().map(|(k, _)| k).collect();
            assert!(sorted.windows(2).all(|w| w[0] < w[1]), "{sorted:?}");
        }
    }

    #[test]
    fn labels_from_borrowed_pairs_sort_and_keep_the_last_duplicate() {
        let built = Labels::from_pairs([("b", "1"), ("a", "2"), ("b", "3"), ("c", "")]);
        let pairs: Vec<(&str, &str)> = built.iter().collect();
        assert_eq!(pairs, vec![("a", "2"), ("b", "3"), ("c", "")]);
        assert_eq!(
            built,
            Labels::new([
                ("b".to_string(), "1".to_string()),
                ("a".to_string(), "2".to_string()),
                ("b".to_string(), "3".to_string()),
                ("c".to_string(), String::new()),
            ])
        );
    }
}
