//! The default plugins' Kubernetes semantics: each plugin's table (`cases()` in its crate, run
//! natively by `cargo test -p` there) through its WebAssembly build and natively here.
//! `support::run` fails a row when the two builds disagree on any verdict, reason, plan or score,
//! and both must answer as the row says.

use wasched::runtime::defaults::DEFAULT_PLUGINS;

use crate::support::*;

#[test]
fn every_default_plugin_answers_its_table_as_a_component_and_natively() {
    for plugin in DEFAULT_PLUGINS {
        let cases = (plugin.cases)();
        assert!(!cases.is_empty(), "{} has a table", plugin.name);
        for case in cases {
            let answers = run(plugin.name, &case);
            case.assert_answered(plugin.name, &answers);
        }
    }
}
