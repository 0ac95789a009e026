//! The default plugins' Kubernetes semantics: each plugin's table (`cases()` in its crate, run
//! natively by `cargo test -p` there) through its WebAssembly build and natively here.
//! `support::run` fails a row when the two builds disagree on any verdict, reason, plan or score,
//! and both must answer as the row says.

use wasched_sdk::testing::Case;

use crate::support::*;

fn tables() -> Vec<(&'static str, Vec<Case>)> {
    vec![
        (wasched_node_name::NAME, wasched_node_name::cases()),
        (
            wasched_node_unschedulable::NAME,
            wasched_node_unschedulable::cases(),
        ),
        (
            wasched_taint_toleration::NAME,
            wasched_taint_toleration::cases(),
        ),
        (wasched_node_affinity::NAME, wasched_node_affinity::cases()),
        (
            wasched_node_resources_fit::NAME,
            wasched_node_resources_fit::cases(),
        ),
        (
            wasched_balanced_allocation::NAME,
            wasched_balanced_allocation::cases(),
        ),
        (wasched_volume_zone::NAME, wasched_volume_zone::cases()),
    ]
}

#[test]
fn every_default_plugin_answers_its_table_as_a_component_and_natively() {
    let tables = tables();
    let mut names: Vec<&str> = tables.iter().map(|(name, _)| *name).collect();
    names.sort_unstable();
    let mut defaults: Vec<&str> = wasched::runtime::defaults::DEFAULT_PLUGINS
        .iter()
        .map(|p| p.name)
        .collect();
    defaults.sort_unstable();
    assert_eq!(names, defaults, "every default plugin has a table here");
    for (plugin, cases) in tables {
        assert!(!cases.is_empty(), "{plugin} has a table");
        for case in cases {
            let answers = run(case.name, plugin, &case.config, &case.nodes, &case.pod);
            case.assert_answered(plugin, &answers);
        }
    }
}
