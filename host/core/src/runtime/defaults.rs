//! The default plugins: kube-scheduler's filter and score plugins, each a crate under `plugins/`
//! linked here natively. `wasched-wasm` embeds the same crates built as components and finds each
//! by [`DefaultPlugin::crate_name`].
//!
//! A new default plugin is its crate under `plugins/`, its dependency line in this crate's
//! `Cargo.toml`, and one line in [`DEFAULT_PLUGINS`] (plus its place in [`DEFAULT_FILTERS`],
//! [`DEFAULT_SCORES`] or [`DEFAULT_PRE_ENQUEUE`] if kube-scheduler enables it by default).

use wasched_sdk::testing::Case;

use super::native::NativeFactory;
use super::PluginFactory;
use crate::framework::IdleWhen;

/// One default plugin.
pub struct DefaultPlugin {
    /// kube-scheduler's name for it.
    pub name: &'static str,
    /// Its crate's name (`wasched_node_name`): the component built from that crate is embedded
    /// under it.
    pub crate_name: &'static str,
    /// The crate linked into the host.
    pub native: fn() -> Box<dyn PluginFactory>,
    /// It implements a filter.
    pub filter: bool,
    /// It implements a score.
    pub score: bool,
    /// Its table of cases (pods, nodes and the answers kube-scheduler gives), which its crate's
    /// tests run natively and the host's end-to-end tests run through the component.
    pub cases: fn() -> Vec<Case>,
    /// The pods it has no opinion on, as it declares them
    /// ([`crate::framework::PluginSpec::idle_when`]).
    pub idle_when: Option<IdleWhen>,
}

macro_rules! default_plugin {
    ($krate:ident :: $ty:ident) => {
        DefaultPlugin {
            name: <$krate::$ty as wasched_sdk::Plugin>::NAME,
            crate_name: stringify!($krate),
            native: || Box::new(NativeFactory::<$krate::$ty>::default()),
            filter: <$krate::$ty as wasched_sdk::Exported>::FILTER,
            score: <$krate::$ty as wasched_sdk::Exported>::SCORE,
            cases: $krate::cases,
            idle_when: IdleWhen::declared(
                <$krate::$ty as wasched_sdk::Plugin>::IDLE_WITHOUT,
                <$krate::$ty as wasched_sdk::Plugin>::READS_EXISTING_PODS,
            ),
        }
    };
}

/// Every default plugin, in kube-scheduler's filter order.
pub static DEFAULT_PLUGINS: &[DefaultPlugin] = &[
    default_plugin!(wasched_node_unschedulable::NodeUnschedulable),
    default_plugin!(wasched_node_name::NodeName),
    default_plugin!(wasched_taint_toleration::TaintToleration),
    default_plugin!(wasched_node_affinity::NodeAffinity),
    default_plugin!(wasched_node_ports::NodePorts),
    default_plugin!(wasched_node_resources_fit::NodeResourcesFit),
    default_plugin!(wasched_volume_restrictions::VolumeRestrictions),
    default_plugin!(wasched_node_volume_limits::NodeVolumeLimits),
    default_plugin!(wasched_volume_binding::VolumeBinding),
    default_plugin!(wasched_volume_zone::VolumeZone),
    default_plugin!(wasched_pod_topology_spread::PodTopologySpread),
    default_plugin!(wasched_inter_pod_affinity::InterPodAffinity),
    default_plugin!(wasched_dynamic_resources::DynamicResources),
    default_plugin!(wasched_balanced_allocation::BalancedAllocation),
    default_plugin!(wasched_image_locality::ImageLocality),
    default_plugin!(wasched_scheduling_gates::SchedulingGates),
    // Not in kube-scheduler's default profile: scheduler-plugins' gang scheduling, embedded so
    // that a profile can name it.
    default_plugin!(wasched_coscheduling::Coscheduling),
];

/// The default plugin named `name`.
pub fn find(name: &str) -> Option<&'static DefaultPlugin> {
    DEFAULT_PLUGINS.iter().find(|p| p.name == name)
}

/// kube-scheduler's default filter chain, restricted to the plugins wasched has.
pub const DEFAULT_FILTERS: &[&str] = &[
    wasched_node_unschedulable::NAME,
    wasched_node_name::NAME,
    wasched_taint_toleration::NAME,
    wasched_node_affinity::NAME,
    wasched_node_ports::NAME,
    wasched_node_resources_fit::NAME,
    wasched_volume_restrictions::NAME,
    wasched_node_volume_limits::NAME,
    wasched_volume_binding::NAME,
    wasched_volume_zone::NAME,
    wasched_pod_topology_spread::NAME,
    wasched_inter_pod_affinity::NAME,
    wasched_dynamic_resources::NAME,
];

/// kube-scheduler's default PreEnqueue plugins, restricted to the plugins wasched has.
pub const DEFAULT_PRE_ENQUEUE: &[&str] = &[
    wasched_scheduling_gates::NAME,
    wasched_dynamic_resources::NAME,
];

/// kube-scheduler's default score plugins and weights.
pub const DEFAULT_SCORES: &[(&str, i64)] = &[
    (wasched_taint_toleration::NAME, 3),
    (wasched_node_affinity::NAME, 2),
    (wasched_node_resources_fit::NAME, 1),
    (wasched_pod_topology_spread::NAME, 2),
    (wasched_inter_pod_affinity::NAME, 2),
    (wasched_balanced_allocation::NAME, 1),
    (wasched_image_locality::NAME, 1),
];

#[cfg(test)]
mod tests {
    use wasched_sdk::{
        ClaimInfo, Driver, Exported, FilterPlugin, FilterResults, NodeInfo, Pod, ScorePlugin,
        Verdict, VolumeClaim, VolumeInfo,
    };

    use crate::synthetic::{self, Scenario};
    use crate::util::Rng;

    /// The bench's mixed cluster, made harder: nodes with usage (some full), extended resources,
    /// beta zone labels and relabelled or removed nodes; pods asking for extended resources and
    /// with bound zonal volumes.
    fn cluster() -> (Vec<NodeInfo>, Vec<Pod>) {
        let mut rng = Rng::new(7);
        let cluster = synthetic::cluster(Scenario::Mixed, 400, 150, 7);
        let mut nodes = cluster.nodes;
        for node in nodes.iter_mut() {
            let cpu_used = node.allocatable.milli_cpu * rng.below(110) as i64 / 100;
            node.usage.requested.milli_cpu = cpu_used;
            node.usage.non_zero_requested.milli_cpu = cpu_used + 100;
            node.usage.requested.memory = node.allocatable.memory * rng.below(105) as i64 / 100;
            node.usage.non_zero_requested.memory = node.usage.requested.memory;
            node.usage.pod_count = rng.below(112) as u32;
            if rng.chance(0.2) {
                node.allocatable.set("example.com/gpu", rng.below(4) as i64);
                node.usage
                    .requested
                    .set("example.com/gpu", rng.below(3) as i64);
            }
            if rng.chance(0.2) {
                let zone = node.labels.get("topology.kubernetes.io/zone").unwrap_or("");
                let mut labels = node.labels.to_vec();
                labels.retain(|(k, _)| k != "topology.kubernetes.io/zone");
                labels.push((
                    "failure-domain.beta.kubernetes.io/zone".into(),
                    zone.to_string(),
                ));
                node.labels = labels.into_iter().collect();
            }
        }
        let mut pods = cluster.pods;
        for (i, pod) in pods.iter_mut().enumerate() {
            if rng.chance(0.2) {
                pod.requests.set("example.com/gpu", 1 + rng.below(2) as i64);
            }
            if rng.chance(0.1) {
                pod.requests.ephemeral_storage = 1 << 30;
            }
            if !pod.volume_claims.is_empty() || rng.chance(0.1) {
                let key = if rng.chance(0.5) {
                    "topology.kubernetes.io/zone"
                } else {
                    "failure-domain.beta.kubernetes.io/zone"
                };
                let zones = if rng.chance(0.5) {
                    "zone-a"
                } else {
                    "zone-b__zone-c"
                };
                pod.volume_claims = vec![VolumeClaim {
                    volume: "data".into(),
                    claim_name: format!("data-{i}"),
                    ephemeral: false,
                    claim: Some(ClaimInfo {
                        volume_name: format!("pv-{i}"),
                        bind_completed: true,
                        volume: Some(VolumeInfo {
                            name: format!("pv-{i}"),
                            labels: [(key, zones)].into_iter().collect(),
                            ..VolumeInfo::default()
                        }),
                        ..ClaimInfo::default()
                    }),
                }];
            }
        }
        (nodes, pods)
    }

    fn per_node_verdict<P: FilterPlugin>(plugin: &P, pod: &Pod, node: &NodeInfo) -> Verdict {
        plugin.filter(pod, node)
    }

    /// Loads the cluster into a driver (with a few replacements and removals, so ids have gaps
    /// and the mirror's indexes see changes) and returns it with the ids of the live nodes.
    fn loaded<P: Exported>(nodes: &[NodeInfo]) -> (Driver<P>, Vec<(u32, NodeInfo)>) {
        let mut driver = Driver::<P>::new("{}").expect("default config");
        let mut live: Vec<(u32, NodeInfo)> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (i as u32 * 2 + 1, n.clone()))
            .collect();
        driver.upsert_nodes(live.iter().cloned());
        // Swap two nodes' contents and drop every tenth node.
        let (a, b) = (live[3].1.clone(), live[10].1.clone());
        live[3].1 = b;
        live[10].1 = a;
        driver.upsert_nodes([live[3].clone(), live[10].clone()]);
        let removed: Vec<u32> = live.iter().step_by(10).map(|(id, _)| *id).collect();
        driver.remove_nodes(&removed);
        live.retain(|(id, _)| !removed.contains(id));
        (driver, live)
    }

    fn filters_agree<P: Exported + FilterPlugin>() {
        let (nodes, pods) = cluster();
        let (mut driver, live) = loaded::<P>(&nodes);
        let ids: Vec<u32> = live.iter().map(|(id, _)| *id).collect();
        let mut rejections = 0;
        for pod in &pods {
            driver.set_pod(pod.clone());
            let mut results = FilterResults::default();
            let (first, rest) = ids.split_at(ids.len() / 3);
            driver.filter(first, &mut results);
            driver.filter(rest, &mut results);
            for (position, (_, node)) in live.iter().enumerate() {
                let expected = per_node_verdict(driver.plugin(), driver.pod(), node).err();
                rejections += usize::from(expected.is_some());
                assert_eq!(
                    results.failure(position),
                    expected.as_ref(),
                    "{}: pod {} on node {}",
                    P::NAME,
                    pod.name,
                    node.name
                );
            }
        }
        assert!(
            rejections > 0,
            "{}: the cluster exercises rejections",
            P::NAME
        );
    }

    fn scores_agree<P: Exported + ScorePlugin>() {
        let (nodes, pods) = cluster();
        let (mut driver, live) = loaded::<P>(&nodes);
        let ids: Vec<u32> = live.iter().map(|(id, _)| *id).collect();
        let mut distinct = std::collections::BTreeSet::new();
        for pod in &pods {
            driver.set_pod(pod.clone());
            let mut scores = Vec::new();
            driver.score(&ids, &mut scores);
            for ((_, node), score) in live.iter().zip(&scores) {
                let expected = driver.plugin().score(driver.pod(), node);
                distinct.insert(expected);
                assert_eq!(
                    *score,
                    expected,
                    "{}: pod {} on {}",
                    P::NAME,
                    pod.name,
                    node.name
                );
            }
        }
        assert!(distinct.len() > 1, "{}: the scores vary", P::NAME);
    }

    #[test]
    fn batch_filters_give_exactly_the_per_node_verdicts() {
        filters_agree::<wasched_node_unschedulable::NodeUnschedulable>();
        filters_agree::<wasched_taint_toleration::TaintToleration>();
        filters_agree::<wasched_node_affinity::NodeAffinity>();
        filters_agree::<wasched_node_resources_fit::NodeResourcesFit>();
        filters_agree::<wasched_volume_zone::VolumeZone>();
    }

    #[test]
    fn batch_scores_give_exactly_the_per_node_scores() {
        scores_agree::<wasched_taint_toleration::TaintToleration>();
        scores_agree::<wasched_node_affinity::NodeAffinity>();
        scores_agree::<wasched_node_resources_fit::NodeResourcesFit>();
        scores_agree::<wasched_balanced_allocation::BalancedAllocation>();
    }
}
