//! The SDK's types as the WIT's and back, for the calls into a component.

use super::*;

pub(super) fn pairs(labels: &sdk::Labels) -> Vec<(String, String)> {
    labels.to_vec()
}

pub(super) fn resources(r: &sdk::Resources) -> wit::Resources {
    wit::Resources {
        milli_cpu: r.milli_cpu,
        memory: r.memory,
        ephemeral_storage: r.ephemeral_storage,
        pods: r.pods,
        scalar: r.scalar.clone(),
    }
}

pub(super) fn node_usage(u: &sdk::NodeUsage) -> wit::NodeUsage {
    wit::NodeUsage {
        requested: resources(&u.requested),
        non_zero_requested: resources(&u.non_zero_requested),
        pod_count: u.pod_count,
    }
}

pub(super) fn node_info(n: &sdk::NodeInfo) -> wit::NodeInfo {
    wit::NodeInfo {
        name: n.name.clone(),
        labels: pairs(&n.labels),
        annotations: pairs(&n.annotations),
        taints: n
            .taints
            .iter()
            .map(|t| wit::Taint {
                key: t.key.clone(),
                value: t.value.clone(),
                effect: t.effect.clone(),
            })
            .collect(),
        unschedulable: n.unschedulable,
        allocatable: resources(&n.allocatable),
        usage: node_usage(&n.usage),
    }
}

pub(super) fn term(t: &sdk::NodeSelectorTerm) -> wit::NodeSelectorTerm {
    let requirements = |list: &[sdk::NodeSelectorRequirement]| {
        list.iter()
            .map(|r| wit::NodeSelectorRequirement {
                key: r.key.clone(),
                operator: r.operator.clone(),
                values: r.values.clone(),
            })
            .collect()
    };
    wit::NodeSelectorTerm {
        match_expressions: requirements(&t.match_expressions),
        match_fields: requirements(&t.match_fields),
    }
}

pub(super) fn volume_info(pv: &sdk::VolumeInfo) -> wit::VolumeInfo {
    wit::VolumeInfo {
        name: pv.name.clone(),
        labels: pairs(&pv.labels),
        storage_class_name: pv.storage_class_name.clone(),
        capacity: pv.capacity,
        access_modes: pv.access_modes.clone(),
        volume_mode: pv.volume_mode.clone(),
        volume_attributes_class_name: pv.volume_attributes_class_name.clone(),
        phase: pv.phase.clone(),
        deleting: pv.deleting,
        claim_ref: pv.claim_ref.as_ref().map(|r| wit::ClaimRef {
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            uid: r.uid.clone(),
        }),
        node_affinity: pv
            .node_affinity
            .as_ref()
            .map(|terms| terms.iter().map(term).collect()),
    }
}

pub(crate) fn volume_claim(v: &sdk::VolumeClaim) -> wit::VolumeClaim {
    wit::VolumeClaim {
        volume: v.volume.clone(),
        claim_name: v.claim_name.clone(),
        ephemeral: v.ephemeral,
        claim: v.claim.as_ref().map(|c| wit::ClaimInfo {
            volume_name: c.volume_name.clone(),
            storage_class_name: c.storage_class_name.clone(),
            storage_class: c.storage_class.as_ref().map(|s| wit::StorageClassInfo {
                name: s.name.clone(),
                volume_binding_mode: s.volume_binding_mode.clone(),
                provisioner: s.provisioner.clone(),
                allowed_topologies: s.allowed_topologies.iter().map(term).collect(),
            }),
            volume: c.volume.as_ref().map(volume_info),
            uid: c.uid.clone(),
            phase: c.phase.clone(),
            deleting: c.deleting,
            bind_completed: c.bind_completed,
            selected_node: c.selected_node.clone(),
            requested_storage: c.requested_storage,
            access_modes: c.access_modes.clone(),
            volume_mode: c.volume_mode.clone(),
            volume_attributes_class_name: c.volume_attributes_class_name.clone(),
            selector: c.selector.as_ref().map(label_selector),
        }),
    }
}

/// The WIT pod with the parts of `p` in `parts`: each part left out spares the guest an allocator
/// call per string and list in it.
pub(super) fn wit_pod(p: &sdk::Pod, parts: sdk::PodParts) -> wit::Pod {
    let part = |wanted: sdk::PodParts| parts.contains(wanted);
    wit::Pod {
        priority: p.priority,
        identity: part(sdk::PodParts::IDENTITY).then(|| wit::PodIdentity {
            namespace: p.namespace.clone(),
            name: p.name.clone(),
            uid: p.uid.clone(),
            scheduler_name: p.scheduler_name.clone(),
        }),
        labels: part(sdk::PodParts::LABELS).then(|| pairs(&p.labels)),
        annotations: part(sdk::PodParts::ANNOTATIONS).then(|| pairs(&p.annotations)),
        node_name: part(sdk::PodParts::NODE_NAME).then(|| p.node_name.clone()),
        node_selection: part(sdk::PodParts::NODE_SELECTION).then(|| node_selection(p)),
        tolerations: part(sdk::PodParts::TOLERATIONS).then(|| tolerations(&p.tolerations)),
        requests: part(sdk::PodParts::REQUESTS).then(|| wit::PodRequests {
            requests: resources(&p.requests),
            non_zero_requests: resources(&p.non_zero_requests),
        }),
        volume_claims: part(sdk::PodParts::VOLUME_CLAIMS)
            .then(|| p.volume_claims.iter().map(volume_claim).collect()),
        containers: part(sdk::PodParts::CONTAINERS).then(|| {
            p.containers
                .iter()
                .map(|c| wit::Container {
                    name: c.name.clone(),
                    image: c.image.clone(),
                })
                .collect()
        }),
        pod_affinity: part(sdk::PodParts::POD_AFFINITY).then(|| pod_affinity(&p.pod_affinity)),
        host_ports: part(sdk::PodParts::HOST_PORTS).then(|| host_ports(&p.host_ports)),
        topology_spread: part(sdk::PodParts::TOPOLOGY_SPREAD).then(|| topology_spread(p)),
    }
}

fn node_selection(p: &sdk::Pod) -> wit::NodeSelection {
    wit::NodeSelection {
        node_selector: pairs(&p.node_selector),
        node_affinity: p.node_affinity.as_ref().map(|a| wit::NodeAffinity {
            required: a
                .required
                .as_ref()
                .map(|terms| terms.iter().map(term).collect()),
            preferred: a
                .preferred
                .iter()
                .map(|p| wit::PreferredSchedulingTerm {
                    weight: p.weight,
                    preference: term(&p.preference),
                })
                .collect(),
        }),
    }
}

fn tolerations(tolerations: &[sdk::Toleration]) -> Vec<wit::Toleration> {
    tolerations
        .iter()
        .map(|t| wit::Toleration {
            key: t.key.clone(),
            operator: t.operator.clone(),
            value: t.value.clone(),
            effect: t.effect.clone(),
            toleration_seconds: t.toleration_seconds,
        })
        .collect()
}

fn topology_spread(p: &sdk::Pod) -> wit::TopologySpread {
    wit::TopologySpread {
        constraints: p
            .topology_spread_constraints
            .iter()
            .map(|c| wit::TopologySpreadConstraint {
                max_skew: c.max_skew,
                topology_key: c.topology_key.clone(),
                when_unsatisfiable: c.when_unsatisfiable.clone(),
                label_selector: c.label_selector.as_ref().map(label_selector),
                min_domains: c.min_domains,
                node_affinity_policy: c.node_affinity_policy.clone(),
                node_taints_policy: c.node_taints_policy.clone(),
                match_label_keys: c.match_label_keys.clone(),
            })
            .collect(),
        default_selector: p.default_spread_selector.as_ref().map(label_selector),
    }
}

pub(super) fn label_selector(s: &sdk::LabelSelector) -> wit::LabelSelector {
    wit::LabelSelector {
        match_labels: pairs(&s.match_labels),
        match_expressions: s
            .match_expressions
            .iter()
            .map(|r| wit::LabelSelectorRequirement {
                key: r.key.clone(),
                operator: r.operator.clone(),
                values: r.values.clone(),
            })
            .collect(),
    }
}

pub(super) fn affinity_term(t: &sdk::PodAffinityTerm) -> wit::PodAffinityTerm {
    wit::PodAffinityTerm {
        label_selector: t.label_selector.as_ref().map(label_selector),
        namespaces: t.namespaces.clone(),
        namespace_selector: t.namespace_selector.as_ref().map(label_selector),
        topology_key: t.topology_key.clone(),
    }
}

pub(super) fn pod_affinity(a: &sdk::PodAffinity) -> wit::PodAffinity {
    let weighted = |terms: &[sdk::WeightedPodAffinityTerm]| {
        terms
            .iter()
            .map(|w| wit::WeightedPodAffinityTerm {
                weight: w.weight,
                term: affinity_term(&w.term),
            })
            .collect()
    };
    wit::PodAffinity {
        required_affinity: a.required_affinity.iter().map(affinity_term).collect(),
        preferred_affinity: weighted(&a.preferred_affinity),
        required_anti_affinity: a.required_anti_affinity.iter().map(affinity_term).collect(),
        preferred_anti_affinity: weighted(&a.preferred_anti_affinity),
    }
}

pub(super) fn host_ports(ports: &[sdk::HostPort]) -> Vec<wit::HostPort> {
    ports
        .iter()
        .map(|p| wit::HostPort {
            host_ip: p.host_ip.clone(),
            protocol: p.protocol.clone(),
            port: p.port,
        })
        .collect()
}

pub(super) fn existing_pod(p: &sdk::ExistingPod) -> wit::ExistingPod {
    wit::ExistingPod {
        node: p.node,
        namespace: p.namespace.clone(),
        labels: pairs(&p.labels),
        terminating: p.terminating,
        pod_affinity: pod_affinity(&p.pod_affinity),
        host_ports: host_ports(&p.host_ports),
    }
}

pub(super) fn code(c: wit::Code) -> sdk::Code {
    match c {
        wit::Code::Success => sdk::Code::Success,
        wit::Code::Unschedulable => sdk::Code::Unschedulable,
        wit::Code::UnschedulableAndUnresolvable => sdk::Code::UnschedulableAndUnresolvable,
        wit::Code::Error => sdk::Code::Error,
    }
}

/// How many items of `pod` a plugin reading `parts` is sent, for its deadline.
pub(super) fn pod_items(pod: &sdk::Pod, parts: sdk::PodParts) -> usize {
    let terms = |terms: &[sdk::NodeSelectorTerm]| -> usize {
        terms
            .iter()
            .flat_map(|t| t.match_expressions.iter().chain(&t.match_fields))
            .map(|r| 1 + r.values.len())
            .sum()
    };
    let affinity = pod.node_affinity.as_ref().map_or(0, |a| {
        a.required.as_deref().map_or(0, terms)
            + a.preferred
                .iter()
                .map(|p| terms(std::slice::from_ref(&p.preference)))
                .sum::<usize>()
    });
    [
        (sdk::PodParts::LABELS, pod.labels.len()),
        (sdk::PodParts::ANNOTATIONS, pod.annotations.len()),
        (
            sdk::PodParts::NODE_SELECTION,
            pod.node_selector.len() + affinity,
        ),
        (sdk::PodParts::TOLERATIONS, pod.tolerations.len()),
        (sdk::PodParts::VOLUME_CLAIMS, pod.volume_claims.len()),
        (sdk::PodParts::CONTAINERS, pod.containers.len()),
        (
            sdk::PodParts::POD_AFFINITY,
            affinity_items(&pod.pod_affinity),
        ),
        (sdk::PodParts::HOST_PORTS, pod.host_ports.len()),
        (
            sdk::PodParts::TOPOLOGY_SPREAD,
            pod.topology_spread_constraints
                .iter()
                .map(|c| 1 + c.label_selector.as_ref().map_or(0, selector_items))
                .sum::<usize>()
                + pod
                    .default_spread_selector
                    .as_ref()
                    .map_or(0, selector_items),
        ),
    ]
    .iter()
    .filter(|(part, _)| parts.contains(*part))
    .map(|&(_, items)| items)
    .sum()
}

pub(super) fn selector_items(s: &sdk::LabelSelector) -> usize {
    s.match_labels.len()
        + s.match_expressions
            .iter()
            .map(|r| 1 + r.values.len())
            .sum::<usize>()
}

pub(super) fn affinity_items(a: &sdk::PodAffinity) -> usize {
    let term = |t: &sdk::PodAffinityTerm| {
        1 + t.namespaces.len()
            + t.label_selector.as_ref().map_or(0, selector_items)
            + t.namespace_selector.as_ref().map_or(0, selector_items)
    };
    a.required_affinity
        .iter()
        .chain(&a.required_anti_affinity)
        .map(term)
        .chain(
            a.preferred_affinity
                .iter()
                .chain(&a.preferred_anti_affinity)
                .map(|w| term(&w.term)),
        )
        .sum()
}

pub(super) fn failure(f: wit::Failure) -> sdk::Failure {
    sdk::Failure {
        code: code(f.code),
        reasons: f.reasons.into_iter().map(Into::into).collect(),
    }
}

pub(super) fn pod_plan(p: wit::PodPlan) -> sdk::PodPlan {
    sdk::PodPlan {
        filter: match p.filter {
            wit::FilterPlan::Run => sdk::FilterPlan::Run,
            wit::FilterPlan::Skip => sdk::FilterPlan::Skip,
            wit::FilterPlan::OnlyNodes(names) => sdk::FilterPlan::OnlyNodes(names),
            wit::FilterPlan::Reject(f) => sdk::FilterPlan::Reject(failure(f)),
            wit::FilterPlan::FailingNodes(failing) => sdk::FilterPlan::FailingNodes {
                nodes: failing.nodes,
                results: sdk::FilterResults {
                    verdicts: failing.verdicts,
                    failures: failing.failures.into_iter().map(failure).collect(),
                },
            },
        },
        score: p.score,
    }
}

pub(super) fn normalize_kind(kind: wit::NormalizeKind) -> sdk::Normalize {
    match kind {
        wit::NormalizeKind::None => sdk::Normalize::None,
        wit::NormalizeKind::Scale => sdk::Normalize::Scale,
        wit::NormalizeKind::Reverse => sdk::Normalize::Reverse,
        wit::NormalizeKind::Custom => sdk::Normalize::Custom,
        wit::NormalizeKind::InScore => sdk::Normalize::InScore,
    }
}

impl From<wit::Descriptor> for sdk::Descriptor {
    fn from(d: wit::Descriptor) -> Self {
        sdk::Descriptor {
            name: d.name,
            version: d.version,
            filter: d.filter,
            score: d.score,
            normalize: normalize_kind(d.normalize),
            reads_usage: d.reads_usage,
            // The canonical ABI numbers flags in the order the WIT declares them, as `PodParts` does.
            reads_pod: sdk::PodParts::from_bits(d.reads_pod.as_array()[0] as u16),
            reads_existing_pods: sdk::ExistingPodParts::from_bits(
                d.reads_existing_pods.as_array()[0] as u8,
            ),
            reads_namespaces: d.reads_namespaces,
            reads_volumes: d.reads_volumes,
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
