//! Micro-benchmarks of the scheduling cycle's hot paths, so a regression shows up on its own:
//! starting a cycle (`set-pod`), one filter batch and one score batch per default plugin (as
//! WebAssembly and native), bringing a plugin's mirror up to date after a placement or a pulled
//! image, and listing the node tree.
//!
//! `cargo bench -p wasched --bench hot_paths` (add `-- filter_batch` to run one group).

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use wasched::cache::Cache;
use wasched::component::Limits;
use wasched::config::{default_factory, DefaultPluginRuntime};
use wasched::nodetree::NodeTree;
use wasched::runtime::defaults::{self, DEFAULT_FILTERS, DEFAULT_PLUGINS, DEFAULT_SCORES};
use wasched::runtime::{PluginFactory, PluginInstance};
use wasched::synthetic::{self, Scenario};
use wasched_sdk::{FilterPlan, FilterResults, NodeInfo, Pod};

const NODES: usize = 5_000;
/// What a cycle filters and scores at 5,000 nodes with kube-scheduler's adaptive percentage.
const BATCH: usize = 500;

fn factory(name: &str, runtime: DefaultPluginRuntime) -> Arc<dyn PluginFactory> {
    let plugin = defaults::find(name).expect("a default plugin");
    default_factory(plugin, runtime, Limits::default()).expect("loads")
}

fn runtimes() -> [(DefaultPluginRuntime, &'static str); 2] {
    [
        (DefaultPluginRuntime::Wasm, "wasm"),
        (DefaultPluginRuntime::Native, "native"),
    ]
}

/// An instance holding the mixed scenario's 5,000 nodes, started on a pod that makes it work.
fn loaded(
    name: &str,
    runtime: DefaultPluginRuntime,
    nodes: &[NodeInfo],
    pod: &Pod,
) -> Box<dyn PluginInstance> {
    let mut instance = factory(name, runtime).instantiate("{}").expect("instance");
    let entries: Vec<(u32, &NodeInfo)> = (0u32..).zip(nodes).collect();
    for batch in entries.chunks(512) {
        instance.upsert_nodes(batch).expect("upsert");
    }
    instance.set_pod(pod).expect("set-pod");
    instance
}

/// A pod every default plugin has work for: tolerations, a node selector, required and
/// preferred affinity, requests.
fn busy_pod(pods: &[Pod]) -> Pod {
    pods.iter()
        .find(|p| {
            !p.tolerations.is_empty()
                && p.node_affinity
                    .as_ref()
                    .is_some_and(|a| a.required.is_some() && !a.preferred.is_empty())
        })
        .or_else(|| pods.iter().find(|p| p.node_affinity.is_some()))
        .expect("the mixed scenario has pods with affinity")
        .clone()
}

fn filter_batch(c: &mut Criterion) {
    let cluster = synthetic::cluster(Scenario::Mixed, NODES, 500, 1);
    let pod = busy_pod(&cluster.pods);
    let ids: Vec<u32> = (0..BATCH as u32).map(|i| i * 7 % NODES as u32).collect();
    let mut group = c.benchmark_group("filter_batch");
    group.throughput(Throughput::Elements(BATCH as u64));
    for &name in DEFAULT_FILTERS {
        for (runtime, label) in runtimes() {
            let mut instance = loaded(name, runtime, &cluster.nodes, &pod);
            let plan = instance.set_pod(&pod).expect("set-pod");
            if !matches!(plan.filter, FilterPlan::Run) {
                continue;
            }
            let mut results = FilterResults::default();
            group.bench_function(BenchmarkId::new(name, label), |b| {
                b.iter(|| {
                    results.clear();
                    instance
                        .filter(black_box(&ids), &mut results)
                        .expect("filter");
                    black_box(results.verdicts.len())
                })
            });
        }
    }
    group.finish();
}

fn score_batch(c: &mut Criterion) {
    let cluster = synthetic::cluster(Scenario::Mixed, NODES, 500, 1);
    let pod = busy_pod(&cluster.pods);
    let ids: Vec<u32> = (0..BATCH as u32).map(|i| i * 7 % NODES as u32).collect();
    let mut group = c.benchmark_group("score_batch");
    group.throughput(Throughput::Elements(BATCH as u64));
    for &(name, _) in DEFAULT_SCORES {
        for (runtime, label) in runtimes() {
            let mut instance = loaded(name, runtime, &cluster.nodes, &pod);
            let mut scores = Vec::with_capacity(BATCH);
            group.bench_function(BenchmarkId::new(name, label), |b| {
                b.iter(|| {
                    scores.clear();
                    instance.score(black_box(&ids), &mut scores).expect("score");
                    black_box(scores.len())
                })
            });
        }
    }
    group.finish();
}

/// Starting a cycle: every plugin is handed the pod once (`set-pod`), seven times per pod with the
/// default profile, whatever the cluster's size.
fn set_pod(c: &mut Criterion) {
    let cluster = synthetic::cluster(Scenario::Mixed, NODES, 500, 1);
    let pod = busy_pod(&cluster.pods);
    let mut group = c.benchmark_group("set_pod");
    for name in DEFAULT_PLUGINS.iter().map(|plugin| plugin.name) {
        for (runtime, label) in runtimes() {
            let mut instance = loaded(name, runtime, &cluster.nodes, &pod);
            group.bench_function(BenchmarkId::new(name, label), |b| {
                b.iter(|| black_box(instance.set_pod(black_box(&pod)).expect("set-pod")))
            });
        }
    }
    group.finish();
}

/// The node the next placement goes to, round-robin from `next`, with its usage after it.
fn next_placement(nodes: &[NodeInfo], next: &mut usize) -> (u32, wasched_sdk::NodeUsage) {
    let id = *next % nodes.len();
    *next += 1;
    let mut usage = nodes[id].usage.clone();
    usage.pod_count += 1;
    (id as u32, usage)
}

/// A cycle's start as it follows a placement: the node the last pod went to has new usage, which a
/// component takes together with the pod (`apply-and-set-pod`); native takes it as its own call.
fn set_pod_after_placement(c: &mut Criterion) {
    let cluster = synthetic::cluster(Scenario::Mixed, NODES, 500, 1);
    let pod = busy_pod(&cluster.pods);
    let mut group = c.benchmark_group("set_pod_after_placement");
    for name in ["NodeResourcesFit", "NodeResourcesBalancedAllocation"] {
        for (runtime, label) in runtimes() {
            let mut instance = loaded(name, runtime, &cluster.nodes, &pod);
            let mut next = 0usize;
            group.bench_function(BenchmarkId::new(name, label), |b| {
                b.iter(|| {
                    let (id, usage) = next_placement(&cluster.nodes, &mut next);
                    instance
                        .update_usage(&[(id, &usage)])
                        .expect("update-usage");
                    black_box(instance.set_pod(black_box(&pod)).expect("set-pod"))
                })
            });
        }
    }
    group.finish();
}

/// Nodes that each hold `IMAGES_PER_NODE` of a pool of `IMAGE_POOL` images (two names each), as
/// kubelets report them, for ImageLocality.
fn nodes_with_images(nodes: &[NodeInfo]) -> Vec<NodeInfo> {
    (0..nodes.len())
        .map(|i| NodeInfo {
            images: (0..IMAGES_PER_NODE)
                .map(|k| pool_image((i * 7 + k * 13) % IMAGE_POOL))
                .collect(),
            ..nodes[i].clone()
        })
        .collect()
}

const IMAGES_PER_NODE: usize = 30;
const IMAGE_POOL: usize = 400;

fn pool_image(k: usize) -> wasched_sdk::NodeImage {
    wasched_sdk::NodeImage {
        names: vec![
            format!("registry.example.com/team-{}/app-{k}:v1", k % 20),
            format!(
                "registry.example.com/team-{}/app-{k}@sha256:{k:064x}",
                k % 20
            ),
        ],
        size_bytes: (50 + (k as i64 * 37) % 750) * 1024 * 1024,
    }
}

/// A cycle's start after a kubelet reported a pulled image: one node's image list changed since
/// the last pod, as happens all the time in a busy cluster, then the pod comes.
fn set_pod_after_image_pull(c: &mut Criterion) {
    let cluster = synthetic::cluster(Scenario::Mixed, NODES, 500, 1);
    let mut nodes = nodes_with_images(&cluster.nodes);
    let pod = Pod {
        images: vec![
            "registry.example.com/team-3/app-23:v1".into(),
            "registry.example.com/team-5/app-105:v1".into(),
        ],
        ..cluster.pods[0].clone()
    };
    let mut group = c.benchmark_group("set_pod_after_image_pull");
    for (runtime, label) in runtimes() {
        let mut instance = loaded("ImageLocality", runtime, &nodes, &pod);
        let mut next = 0usize;
        group.bench_function(BenchmarkId::new("ImageLocality", label), |b| {
            b.iter(|| {
                let id = next % NODES;
                next += 1;
                let pulled = pool_image((next * 11) % IMAGE_POOL);
                let images = &mut nodes[id].images;
                images.remove(0);
                images.push(pulled);
                instance
                    .upsert_nodes(&[(id as u32, &nodes[id])])
                    .expect("upsert");
                black_box(instance.set_pod(black_box(&pod)).expect("set-pod"))
            })
        });
    }
    group.finish();
}

/// The same calls as a cycle makes them: every default plugin in turn takes the pod after a
/// placement, so each call finds the others' memory in the caches, not its own. Throughput is per
/// call; compare with `set_pod_after_placement`, which calls one instance over and over.
/// `instances_of_NodeResourcesFit` makes as many calls in turn to instances of one plugin: they
/// share their compiled code but not their memory, so it separates what the instances' memories
/// cost from what the plugins' different code costs.
fn set_pod_in_turn(c: &mut Criterion) {
    let cluster = synthetic::cluster(Scenario::Mixed, NODES, 500, 1);
    let pod = busy_pod(&cluster.pods);
    let mut group = c.benchmark_group("set_pod_in_turn");
    for (runtime, label) in runtimes() {
        let mut instances: Vec<Box<dyn PluginInstance>> = DEFAULT_PLUGINS
            .iter()
            .map(|plugin| loaded(plugin.name, runtime, &cluster.nodes, &pod))
            .collect();
        let mut fits: Vec<Box<dyn PluginInstance>> = (0..instances.len())
            .map(|_| loaded("NodeResourcesFit", runtime, &cluster.nodes, &pod))
            .collect();
        group.throughput(Throughput::Elements(instances.len() as u64));
        let mut next = 0usize;
        group.bench_function(BenchmarkId::new("every_default_plugin", label), |b| {
            b.iter(|| {
                let (id, usage) = next_placement(&cluster.nodes, &mut next);
                for instance in instances.iter_mut() {
                    if instance.descriptor().reads_usage {
                        instance
                            .update_usage(&[(id, &usage)])
                            .expect("update-usage");
                    }
                    black_box(instance.set_pod(black_box(&pod)).expect("set-pod"));
                }
            })
        });
        let name = BenchmarkId::new("instances_of_NodeResourcesFit", label);
        group.bench_function(name, |b| {
            b.iter(|| {
                let (id, usage) = next_placement(&cluster.nodes, &mut next);
                for instance in fits.iter_mut() {
                    instance
                        .update_usage(&[(id, &usage)])
                        .expect("update-usage");
                    black_box(instance.set_pod(black_box(&pod)).expect("set-pod"));
                }
            })
        });
    }
    group.finish();
}

/// What every cycle after a placement pays: the cache records the pod (moved from the node it was
/// on, so two nodes change), and a plugin that reads usage is sent the changed nodes.
fn snapshot_update(c: &mut Criterion) {
    let cluster = synthetic::cluster(Scenario::Mixed, NODES, 500, 1);
    let mut group = c.benchmark_group("snapshot_update");
    for (runtime, label) in runtimes() {
        let mut cache = Cache::default();
        for node in &cluster.nodes {
            cache.upsert_node(node.clone());
        }
        cache.refresh_listing();
        let pod = cluster.pods[0].clone();
        let mut instance = loaded("NodeResourcesFit", runtime, &cluster.nodes, &pod);
        let mut next = 0usize;
        group.bench_function(BenchmarkId::new("place_and_sync_usage", label), |b| {
            b.iter(|| {
                let since = cache.generation();
                let node = &cluster.nodes[next % NODES].name;
                next += 1;
                cache.assume_pod(&pod, node);
                cache.refresh_listing();
                let delta = cache.delta_since(since);
                let usage: Vec<(u32, &wasched_sdk::NodeUsage)> = delta
                    .usage
                    .iter()
                    .filter_map(|&id| cache.node(id).map(|n| (id, &n.info.usage)))
                    .collect();
                instance.update_usage(&usage).expect("update-usage");
            })
        });
    }
    group.finish();
}

fn node_tree_listing(c: &mut Criterion) {
    let mut group = c.benchmark_group("node_tree_listing");
    for nodes in [5_000usize, 50_000] {
        let mut tree = NodeTree::default();
        for id in 0..nodes as u32 {
            tree.add(id, &format!("region-1:\u{0}:zone-{}", id % 4));
        }
        group.throughput(Throughput::Elements(nodes as u64));
        group.bench_function(BenchmarkId::from_parameter(nodes), |b| {
            b.iter(|| black_box(tree.list()))
        });
    }
    group.finish();
}

/// A whole cycle is covered by `wasched bench`; this keeps the groups short enough for a laptop.
fn config() -> Criterion {
    Criterion::default()
        .sample_size(30)
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2))
}

criterion_group! {
    name = hot_paths;
    config = config();
    targets = set_pod, set_pod_after_placement, set_pod_after_image_pull, set_pod_in_turn, filter_batch, score_batch, snapshot_update, node_tree_listing
}
criterion_main!(hot_paths);
