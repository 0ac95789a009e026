//! The SDK's builders for pods and nodes (`wasched_sdk::testing`), and a runner that puts one
//! default plugin through the same cycle as a WebAssembly component and natively, insisting both
//! give the same answers.

use std::sync::Arc;

use wasched::component::Limits;
use wasched::config::{default_factory, DefaultPluginRuntime};
use wasched::runtime::defaults;
use wasched::runtime::PluginFactory;
use wasched_sdk::{FilterResults, NodeInfo, Normalize, Pod};

pub use wasched_sdk::testing::*;

/// The repository's root, where `examples/` and `tests/fixtures/` are.
pub fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One cycle and what the service does after a placement: the pod's requests held on its node
/// (assumed; there is no binder here to confirm it).
pub fn schedule_and_assume(
    decider: &mut wasched::framework::Decider,
    pod: &Pod,
    explain: bool,
) -> wasched::framework::Outcome {
    let outcome = decider
        .schedule(pod, explain)
        .expect("the pod's scheduler name has a profile");
    if let Some(node) = &outcome.node {
        decider.assume(pod, node);
    }
    outcome
}

fn factory(name: &str, runtime: DefaultPluginRuntime) -> Arc<dyn PluginFactory> {
    let plugin = defaults::find(name).unwrap_or_else(|| panic!("{name} is a default plugin"));
    default_factory(plugin, runtime, Limits::default()).expect("default plugin loads")
}

fn run_with(name: &str, runtime: DefaultPluginRuntime, case: &Case) -> Answers {
    let (config, nodes, pod) = (&case.config, &case.nodes, &case.pod);
    let mut instance = factory(name, runtime)
        .instantiate(config)
        .expect("instantiates");
    let descriptor = instance.descriptor().clone();
    let ids = node_ids(nodes.len());
    let entries: Vec<(u32, &NodeInfo)> = ids.iter().copied().zip(nodes).collect();
    instance.upsert_nodes(&entries).expect("upsert-nodes");
    if descriptor.reads_namespaces {
        let namespaces: Vec<(&str, &wasched_sdk::Labels)> = case
            .namespaces
            .iter()
            .map(|(name, labels)| (name.as_str(), labels))
            .collect();
        instance
            .upsert_namespaces(&namespaces)
            .expect("upsert-namespaces");
    }
    if descriptor.reads_volumes {
        let volumes: Vec<&wasched_sdk::VolumeInfo> = case.volumes.iter().collect();
        instance.upsert_volumes(&volumes).expect("upsert-volumes");
    }
    let parts = descriptor.reads_existing_pods;
    if !parts.is_empty() {
        instance
            .upsert_pods(&case.existing_pods(parts))
            .expect("upsert-pods");
    }
    let pre_enqueue = match descriptor.pre_enqueue {
        true => verdict_of(instance.pre_enqueue(pod).expect("pre-enqueue").as_ref()),
        false => pass(),
    };
    let plan = instance.set_pod(pod).expect("set-pod");
    let filtered = || {
        let mut results = FilterResults::default();
        // Two batches, as the host's growing chunks would send them.
        let split = ids.len() / 2;
        instance
            .filter(&ids[..split], &mut results)
            .expect("filter");
        instance
            .filter(&ids[split..], &mut results)
            .expect("filter");
        (0..ids.len())
            .map(|i| verdict_of(results.failure(i)))
            .collect::<Vec<_>>()
    };
    let verdicts = if descriptor.filter {
        verdicts_under_plan(&plan.filter, &ids, filtered, name)
    } else {
        Vec::new()
    };
    let mut scores = Vec::new();
    if descriptor.score && plan.score {
        instance
            .score(&case.scored_ids(), &mut scores)
            .expect("score");
        match descriptor.normalize {
            Normalize::None | Normalize::InScore => {}
            Normalize::Scale => wasched_sdk::helpers::default_normalize(&mut scores, false),
            Normalize::Reverse => wasched_sdk::helpers::default_normalize(&mut scores, true),
            Normalize::Custom => instance.normalize(&mut scores).expect("normalize"),
        }
    }
    let reserved = match &case.reserve_on {
        Some((position, _)) => match instance.reserve(ids[*position]).expect("reserve") {
            Ok(reservation) => reservation.claims,
            Err(failure) => panic!("{name}: {}: reserve failed: {failure:?}", case.name),
        },
        None => Vec::new(),
    };
    let instance = std::cell::RefCell::new(instance);
    let stages = case.stages.answered(
        || instance.borrow_mut().permit(pod, "node").expect("permit"),
        || {
            let mut instance = instance.borrow_mut();
            instance.unreserve_rejects(pod, "node").expect("unreserve")
        },
        || instance.borrow_mut().post_filter(pod).expect("post-filter"),
        |queued| {
            let mut instance = instance.borrow_mut();
            instance.queue_sort(pod, queued).expect("queue-sort")
        },
    );
    Answers {
        plan,
        verdicts,
        scores,
        pre_enqueue,
        reserved,
        stages,
    }
}

/// Runs row `case` of the default plugin `name` natively and as a component and returns the result
/// after checking both agree exactly.
pub fn run(name: &str, case: &Case) -> Answers {
    let descriptor = |runtime| {
        let instance = factory(name, runtime)
            .instantiate(&case.config)
            .expect("instantiates");
        instance.descriptor().clone()
    };
    assert_eq!(
        descriptor(DefaultPluginRuntime::Wasm),
        descriptor(DefaultPluginRuntime::Native),
        "{}: the component's descriptor (reads-pod flags included) differs from the native one",
        case.name
    );
    let wasm = run_with(name, DefaultPluginRuntime::Wasm, case);
    let native = run_with(name, DefaultPluginRuntime::Native, case);
    assert_eq!(
        wasm, native,
        "{}: the component and the native build disagree",
        case.name
    );
    wasm
}
