//! Builders for pods and nodes, and a runner that puts one default plugin through the same cycle
//! as a WebAssembly component and natively, insisting both give the same answers.

use std::sync::Arc;

use wasched::config::{default_factory, DefaultPluginRuntime};
use wasched::runtime::defaults;
use wasched::runtime::wasm::Limits;
use wasched::runtime::PluginFactory;
use wasched_sdk::{
    Code, FilterPlan, FilterResults, Labels, NodeInfo, NodeSelectorRequirement, NodeSelectorTerm,
    Normalize, Pod, PodPlan, Resources, Taint, Toleration,
};

pub const GI: i64 = 1 << 30;

/// One cycle and what the service does after a placement: the pod's requests held on its node
/// (assumed; there is no binder here to confirm it).
pub fn schedule_and_assume(
    scheduler: &mut wasched::framework::Scheduler,
    pod: &Pod,
    explain: bool,
) -> wasched::framework::Outcome {
    let outcome = scheduler
        .schedule(pod, explain)
        .expect("the pod's scheduler name has a profile");
    if let Some(node) = &outcome.node {
        scheduler.assume(pod, node);
    }
    outcome
}

pub fn node(name: &str) -> NodeInfo {
    NodeInfo {
        name: name.into(),
        allocatable: Resources {
            milli_cpu: 4000,
            memory: 8 * GI,
            ephemeral_storage: 100 * GI,
            pods: 110,
            scalar: Vec::new(),
        },
        ..NodeInfo::default()
    }
}

pub fn with_labels(mut node: NodeInfo, labels: &[(&str, &str)]) -> NodeInfo {
    node.labels = labels.iter().copied().collect();
    node
}

pub fn with_taints(mut node: NodeInfo, taints: &[(&str, &str, &str)]) -> NodeInfo {
    node.taints = taints
        .iter()
        .map(|(key, value, effect)| Taint {
            key: key.to_string(),
            value: value.to_string(),
            effect: effect.to_string(),
        })
        .collect();
    node
}

pub fn pod(name: &str) -> Pod {
    Pod {
        namespace: "default".into(),
        name: name.into(),
        scheduler_name: "default-scheduler".into(),
        ..Pod::default()
    }
}

/// A pod requesting only cpu (scoring sees the same request).
pub fn cpu_pod(name: &str, milli_cpu: i64) -> Pod {
    let r = Resources {
        milli_cpu,
        ..Resources::default()
    };
    Pod {
        requests: r.clone(),
        non_zero_requests: r,
        ..pod(name)
    }
}

pub fn toleration(key: &str, operator: &str, value: &str, effect: &str) -> Toleration {
    Toleration {
        key: key.into(),
        operator: operator.into(),
        value: value.into(),
        effect: effect.into(),
        toleration_seconds: None,
    }
}

pub fn requirement(key: &str, operator: &str, values: &[&str]) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.into(),
        operator: operator.into(),
        values: values.iter().map(|v| v.to_string()).collect(),
    }
}

pub fn term(expressions: Vec<NodeSelectorRequirement>) -> NodeSelectorTerm {
    NodeSelectorTerm {
        match_expressions: expressions,
        match_fields: Vec::new(),
    }
}

pub fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().copied().collect()
}

/// What one plugin made of one pod over a list of nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub plan: PodPlan,
    /// Per node: `None` when it passes, else the failure's code and reasons. All passes when the
    /// plan was `Skip`; empty when it was `Reject`, or the plugin has no filter.
    pub verdicts: Vec<Option<(Code, Vec<String>)>>,
    /// Normalized scores per node; empty when the plugin has no score or no opinion.
    pub scores: Vec<i64>,
}

fn factory(name: &str, runtime: DefaultPluginRuntime) -> Arc<dyn PluginFactory> {
    let plugin = defaults::find(name).unwrap_or_else(|| panic!("{name} is a default plugin"));
    default_factory(plugin, runtime, Limits::default()).expect("default plugin loads")
}

fn run_with(
    name: &str,
    config: &str,
    runtime: DefaultPluginRuntime,
    nodes: &[NodeInfo],
    pod: &Pod,
) -> Run {
    let mut instance = factory(name, runtime)
        .instantiate(config)
        .expect("instantiates");
    let descriptor = instance.descriptor().clone();
    // Ids deliberately not starting at 0, to catch a plugin indexing by position.
    let ids: Vec<u32> = (0..nodes.len() as u32).map(|i| i * 3 + 7).collect();
    let entries: Vec<(u32, &NodeInfo)> = ids.iter().copied().zip(nodes).collect();
    instance.upsert_nodes(&entries).expect("upsert-nodes");
    let plan = instance.set_pod(pod).expect("set-pod");
    let as_verdict = |f: Option<&wasched_sdk::Failure>| {
        f.map(|f| (f.code, f.reasons.iter().map(|r| r.to_string()).collect()))
    };
    let mut filtered = || {
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
            .map(|i| as_verdict(results.failure(i)))
            .collect::<Vec<_>>()
    };
    let verdicts = match &plan.filter {
        _ if !descriptor.filter => Vec::new(),
        // Skip means every node passes, which is what the host makes of it.
        FilterPlan::Skip => vec![None; ids.len()],
        FilterPlan::Run | FilterPlan::OnlyNodes(_) => filtered(),
        FilterPlan::Reject(_) => Vec::new(),
        FilterPlan::FailingNodes {
            nodes: failing,
            results,
        } => {
            let planned: Vec<_> = ids
                .iter()
                .map(|id| {
                    let listed = failing.iter().position(|f| f == id);
                    as_verdict(listed.and_then(|k| results.failure(k)))
                })
                .collect();
            // The plan stands in for the filter: both must give every node the same verdict.
            assert_eq!(planned, filtered(), "{name}: failing-nodes plan vs filter");
            planned
        }
    };
    let mut scores = Vec::new();
    if descriptor.score && plan.score {
        instance.score(&ids, &mut scores).expect("score");
        match descriptor.normalize {
            Normalize::None => {}
            Normalize::Scale => wasched_sdk::helpers::default_normalize(&mut scores, false),
            Normalize::Reverse => wasched_sdk::helpers::default_normalize(&mut scores, true),
            Normalize::Custom => instance.normalize(&mut scores).expect("normalize"),
        }
    }
    Run {
        plan,
        verdicts,
        scores,
    }
}

/// Runs the default plugin `name` (with JSON `config`) natively and as a component and returns the
/// result after checking both agree exactly.
pub fn run(case: &str, name: &str, config: &str, nodes: &[NodeInfo], pod: &Pod) -> Run {
    let descriptor = |runtime| {
        let instance = factory(name, runtime)
            .instantiate(config)
            .expect("instantiates");
        instance.descriptor().clone()
    };
    assert_eq!(
        descriptor(DefaultPluginRuntime::Wasm),
        descriptor(DefaultPluginRuntime::Native),
        "{case}: the component's descriptor (reads-pod flags included) differs from the native one"
    );
    let wasm = run_with(name, config, DefaultPluginRuntime::Wasm, nodes, pod);
    let native = run_with(name, config, DefaultPluginRuntime::Native, nodes, pod);
    assert_eq!(
        wasm, native,
        "{case}: the component and the native build disagree"
    );
    wasm
}
