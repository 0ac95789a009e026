//! The default plugins, each available as an embedded WebAssembly component (built from
//! `plugins/` by `build.rs`) and as the same crate linked natively.

use super::native::NativeFactory;
use super::PluginFactory;

/// One default plugin in both of its forms.
pub struct DefaultPlugin {
    /// kube-scheduler's name for it.
    pub name: &'static str,
    /// The component, built from the plugin's crate for `wasm32-unknown-unknown`.
    pub component: &'static [u8],
    /// The same crate, linked into the host.
    pub native: fn() -> Box<dyn PluginFactory>,
    /// It implements a filter.
    pub filter: bool,
    /// It implements a score.
    pub score: bool,
}

macro_rules! default_plugin {
    ($ty:ty, $file:literal) => {
        DefaultPlugin {
            name: <$ty as wasched_sdk::Plugin>::NAME,
            component: include_bytes!(concat!(env!("OUT_DIR"), "/", $file, ".component.wasm")),
            native: || Box::new(NativeFactory::<$ty>::default()),
            filter: <$ty as wasched_sdk::Exported>::FILTER,
            score: <$ty as wasched_sdk::Exported>::SCORE,
        }
    };
}

/// Every default plugin, in kube-scheduler's filter order.
pub static DEFAULT_PLUGINS: &[DefaultPlugin] = &[
    default_plugin!(
        wasched_node_unschedulable::NodeUnschedulable,
        "wasched_node_unschedulable"
    ),
    default_plugin!(wasched_node_name::NodeName, "wasched_node_name"),
    default_plugin!(
        wasched_taint_toleration::TaintToleration,
        "wasched_taint_toleration"
    ),
    default_plugin!(wasched_node_affinity::NodeAffinity, "wasched_node_affinity"),
    default_plugin!(
        wasched_node_resources_fit::NodeResourcesFit,
        "wasched_node_resources_fit"
    ),
    default_plugin!(wasched_volume_zone::VolumeZone, "wasched_volume_zone"),
    default_plugin!(
        wasched_balanced_allocation::BalancedAllocation,
        "wasched_balanced_allocation"
    ),
];

/// The default plugin named `name`.
pub fn find(name: &str) -> Option<&'static DefaultPlugin> {
    DEFAULT_PLUGINS.iter().find(|p| p.name == name)
}

/// kube-scheduler's default filter chain, restricted to the plugins wasched has.
pub const DEFAULT_FILTERS: &[&str] = &[
    "NodeUnschedulable",
    "NodeName",
    "TaintToleration",
    "NodeAffinity",
    "NodeResourcesFit",
    "VolumeZone",
];

/// kube-scheduler's default score plugins and weights, restricted to the plugins wasched has
/// (PodTopologySpread 2, InterPodAffinity 2 and ImageLocality 1 are not implemented yet).
pub const DEFAULT_SCORES: &[(&str, i64)] = &[
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodeResourcesFit", 1),
    ("NodeResourcesBalancedAllocation", 1),
];
