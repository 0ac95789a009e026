//! Misbehaving plugins (built from `tests/programs/`) never take the scheduler down: each call
//! is bounded, the failure names the plugin and what it did, other plugins decide as before,
//! repeated failures quarantine the plugin until it is tried again, and memory stays bounded.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasched::clock::FakeClock;
use wasched::config::{Config, DefaultPluginRuntime};
use wasched::framework::{Decider, Outcome};
use wasched_sdk::{NodeInfo, Pod};

use crate::support::*;

fn hostile(name: &str) -> PathBuf {
    wasched_test_programs::component(&format!("wasched_hostile_{name}.wasm"))
}

/// TOML for a profile with one hostile plugin (as a filter or a score) beside NodeResourcesFit.
fn profile_toml(plugin: &str, file: &str, as_filter: bool, extra: &str) -> String {
    let (filters, scores) = if as_filter {
        (
            format!("[\"{plugin}\", \"NodeResourcesFit\"]"),
            "[{ plugin = \"NodeResourcesFit\" }]".to_string(),
        )
    } else {
        (
            "[\"NodeResourcesFit\"]".to_string(),
            format!("[{{ plugin = \"{plugin}\" }}, {{ plugin = \"NodeResourcesFit\" }}]"),
        )
    };
    format!(
        "[plugins.{plugin}]\ncomponent = {path:?}\n{extra}\n\n[[profiles]]\nfilters = {filters}\nscores = {scores}\n",
        path = hostile(file).to_str().unwrap()
    )
}

fn config(plugin: &str, file: &str, as_filter: bool, extra: &str) -> Config {
    let text = profile_toml(plugin, file, as_filter, extra);
    let mut config = Config::parse("sandbox.toml", Path::new("."), text).unwrap();
    config.default_plugins = DefaultPluginRuntime::Native;
    config
}

fn cluster(decider: &mut Decider) {
    for (name, cpu) in [("small", 1000), ("big", 8000)] {
        let mut n = node(name);
        n.allocatable.milli_cpu = cpu;
        decider.cache_mut().upsert_node(n);
    }
}

fn timed(decider: &mut Decider, pod: &Pod) -> Outcome {
    let start = Instant::now();
    let outcome = schedule_and_assume(decider, pod, false);
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "a cycle took {:?}",
        start.elapsed()
    );
    outcome
}

#[test]
fn each_hostile_plugin_fails_its_cycle_with_its_name_and_failure() {
    let cases = [
        (
            "Spin",
            "spin",
            true,
            "",
            "plugin Spin failed in filter: deadline exceeded",
        ),
        (
            "Hog",
            "hog",
            true,
            "memory_limit_mib = 16",
            "plugin Hog failed in filter: memory limit exceeded (forcing trap when growing memory",
        ),
        (
            "TrapSome",
            "trap_some",
            true,
            "",
            "plugin TrapSome failed in filter: wasm trap: wasm `unreachable`",
        ),
        (
            "BadScore",
            "bad_score",
            false,
            "",
            "plugin BadScore failed in score: returned 1000",
        ),
    ];
    for (plugin, file, as_filter, extra, expected) in cases {
        let profiles = config(plugin, file, as_filter, extra).profiles().unwrap();
        let mut decider = Decider::new(&profiles, 1).unwrap();
        cluster(&mut decider);
        let mut boom = node("boom");
        boom.labels = labels(&[("explode", "true")]);
        decider.cache_mut().upsert_node(boom);
        let outcome = timed(&mut decider, &cpu_pod("p", 500));
        assert!(outcome.error, "{plugin}: {outcome:?}");
        let message = outcome.message.unwrap_or_default();
        assert!(message.contains(expected), "{plugin}: {message}");
        let health = decider.plugin_health();
        let h = health.iter().find(|h| h.plugin == plugin).unwrap();
        assert_eq!((h.failures, h.consecutive_failures), (1, 1), "{plugin}");
    }
}

#[test]
fn a_fresh_instance_takes_over_once_the_cause_is_gone() {
    let profiles = config("TrapSome", "trap_some", true, "")
        .profiles()
        .unwrap();
    let mut decider = Decider::new(&profiles, 1).unwrap();
    cluster(&mut decider);
    let mut boom = node("boom");
    boom.labels = labels(&[("explode", "true")]);
    decider.cache_mut().upsert_node(boom);
    assert!(timed(&mut decider, &cpu_pod("p", 500)).error);
    decider.cache_mut().remove_node("boom");
    let outcome = timed(&mut decider, &cpu_pod("p", 500));
    assert_eq!(outcome.node.as_deref(), Some("big"), "{outcome:?}");
    let health = decider.plugin_health();
    assert_eq!(
        health
            .iter()
            .find(|h| h.plugin == "TrapSome")
            .unwrap()
            .consecutive_failures,
        0
    );
}

#[test]
fn with_the_ignore_policy_the_other_plugins_decide_as_if_it_were_absent() {
    let reference = {
        let mut c = Config::parse("ref.toml", Path::new("."), "[[profiles]]\nfilters = [\"NodeResourcesFit\"]\nscores = [{ plugin = \"NodeResourcesFit\" }]\n".into()).unwrap();
        c.default_plugins = DefaultPluginRuntime::Native;
        let mut s = Decider::new(&c.profiles().unwrap(), 1).unwrap();
        cluster(&mut s);
        (0..4)
            .map(|i| schedule_and_assume(&mut s, &cpu_pod(&format!("p{i}"), 900), false).node)
            .collect::<Vec<_>>()
    };
    for (plugin, file, as_filter) in [("Spin", "spin", true), ("BadScore", "bad_score", false)] {
        let c = config(
            plugin,
            file,
            as_filter,
            "failure_policy = \"ignore\"\nquarantine_after = 0",
        );
        let mut s = Decider::new(&c.profiles().unwrap(), 1).unwrap();
        cluster(&mut s);
        let placed: Vec<Option<String>> = (0..4)
            .map(|i| {
                let o = timed(&mut s, &cpu_pod(&format!("p{i}"), 900));
                assert!(!o.error, "{plugin}: {o:?}");
                o.node
            })
            .collect();
        assert_eq!(placed, reference, "{plugin}");
        let health = s.plugin_health();
        assert_eq!(
            health.iter().find(|h| h.plugin == plugin).unwrap().failures,
            4,
            "{plugin} failed every cycle"
        );
    }
}

#[test]
fn repeated_failures_quarantine_the_plugin_until_it_is_tried_again() {
    let c = config(
        "TrapSome",
        "trap_some",
        true,
        "quarantine_after = 2\nquarantine_seconds = 30",
    );
    let clock = FakeClock::default();
    let mut s = Decider::with_clock(&c.profiles().unwrap(), 1, Arc::new(clock.clone())).unwrap();
    cluster(&mut s);
    let mut boom = node("boom");
    boom.labels = labels(&[("explode", "true")]);
    s.cache_mut().upsert_node(boom);
    // Two different pods: one pod failing a plugin again and again only fails its own cycles.
    for i in 0..2 {
        assert!(timed(&mut s, &cpu_pod(&format!("p{i}"), 500))
            .message
            .unwrap()
            .contains("failed in filter"));
    }
    s.cache_mut().remove_node("boom");
    let quarantined = timed(&mut s, &cpu_pod("p", 500));
    let message = quarantined.message.unwrap();
    assert!(
        message
            .contains("plugin TrapSome is quarantined for 30s more after 2 consecutive failures"),
        "{message}"
    );
    let h = s
        .plugin_health()
        .into_iter()
        .find(|h| h.plugin == "TrapSome")
        .unwrap();
    assert_eq!(h.quarantined_until, Some(Duration::from_secs(30)));
    assert_eq!(h.failures, 2, "a quarantined plugin is not called");
    clock.advance(Duration::from_secs(30));
    let recovered = timed(&mut s, &cpu_pod("p", 500));
    assert_eq!(recovered.node.as_deref(), Some("big"), "{recovered:?}");
}

fn rss_mb() -> f64 {
    let mb = wasched::bench::proc_status_mb("VmRSS");
    assert!(mb > 0.0, "VmRSS is readable");
    mb
}

#[test]
fn a_thousand_cycles_with_the_leaking_plugin_keep_memory_bounded() {
    let c = config(
        "Hog",
        "hog",
        true,
        "memory_limit_mib = 8\nfailure_policy = \"ignore\"\nquarantine_after = 0",
    );
    let mut s = Decider::new(&c.profiles().unwrap(), 1).unwrap();
    for i in 0..50 {
        let mut n: NodeInfo = node(&format!("n{i}"));
        n.allocatable.pods = 10_000;
        s.cache_mut().upsert_node(n);
    }
    let mut cycle = |i: usize| {
        let outcome = schedule_and_assume(&mut s, &cpu_pod(&format!("p{i}"), 1), false);
        assert!(
            outcome.node.is_some(),
            "placed despite the hog: {outcome:?}"
        );
        s.cache_mut().remove_pod(&format!("default/p{i}"));
    };
    for i in 0..50 {
        cycle(i);
    }
    let before = rss_mb();
    let start = Instant::now();
    for i in 50..1050 {
        cycle(i);
    }
    let grown = rss_mb() - before;
    assert!(grown < 64.0, "RSS grew by {grown:.1} MB over 1,000 cycles");
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "took {:?}",
        start.elapsed()
    );
    let h = s
        .plugin_health()
        .into_iter()
        .find(|h| h.plugin == "Hog")
        .unwrap();
    assert_eq!(
        h.failures, 1050,
        "the hog failed every cycle and was replaced every time"
    );
}

#[test]
fn simulate_survives_every_hostile_plugin_and_names_it() {
    let dir = std::env::temp_dir().join(format!("wasched-sandbox-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let demo = crate::support::repo_root().join("examples/clusters/demo.yaml");
    for (plugin, file, as_filter, extra) in [
        ("Spin", "spin", true, ""),
        ("Hog", "hog", true, "memory_limit_mib = 16"),
        ("BadScore", "bad_score", false, ""),
    ] {
        let config = dir.join(format!("{file}.toml"));
        std::fs::write(&config, profile_toml(plugin, file, as_filter, extra)).unwrap();
        let start = Instant::now();
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_wasched"))
            .args([
                "simulate",
                "--config",
                config.to_str().unwrap(),
                demo.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{plugin}: {:?}",
            start.elapsed()
        );
        assert!(
            output.status.success(),
            "{plugin}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let stdout = String::from_utf8(output.stdout).unwrap();
        let failed: Vec<&str> = stdout
            .lines()
            .filter(|l| l.contains(&format!("plugin {plugin} ")))
            .collect();
        assert!(!failed.is_empty(), "{plugin}: {stdout}");
        // Pods that no node fits for their own reasons are still explained by the healthy plugins,
        // or by the misbehaving plugin when it ran first; none is lost.
        assert_eq!(
            stdout.lines().count(),
            8,
            "{plugin}: every pending pod has a line: {stdout}"
        );
    }
}

#[test]
fn a_component_importing_a_forbidden_interface_is_refused_at_load_with_the_import_named() {
    let load = |interface: &str| {
        let text = format!("(component (import \"{interface}\" (instance)))");
        let component = wat::parse_str(&text).unwrap();
        wasched::component::WasmRuntime::shared()
            .load("Greedy", &component, wasched::component::Limits::default())
            .err()
            .expect("refused")
            .0
    };
    for interface in [
        "wasi:filesystem/types@0.2.0",
        "wasi:filesystem/preopens@0.2.0",
        "wasi:sockets/tcp@0.2.0",
        "wasi:http/outgoing-handler@0.2.0",
    ] {
        let error = load(interface);
        assert!(error.starts_with("plugin Greedy: imports "), "{error}");
        assert!(error.contains(interface), "{interface} is named: {error}");
    }
    // stdout is allowed: that component is refused only for not being a plugin.
    let error = load("wasi:cli/stdout@0.2.0");
    assert!(
        error.contains("does not implement the wasched:plugin/plugin world"),
        "{error}"
    );
}

/// The flood plugin prints 400 lines per node it filters; it is built for wasm32-wasip2 (so it
/// really imports WASI stdout/stderr) when that target is installed.
#[cfg(wasched_flood_plugin)]
#[test]
fn a_plugin_flooding_its_output_is_rate_limited_and_keeps_working() {
    let c = config("Flood", "flood", true, "");
    let mut s = Decider::new(&c.profiles().unwrap(), 1).unwrap();
    cluster(&mut s);
    let start = Instant::now();
    for i in 0..20 {
        let outcome = schedule_and_assume(&mut s, &cpu_pod(&format!("p{i}"), 100), false);
        assert!(!outcome.error, "{outcome:?}");
        assert!(outcome.node.is_some());
    }
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "took {:?}",
        start.elapsed()
    );
    let h = s
        .plugin_health()
        .into_iter()
        .find(|h| h.plugin == "Flood")
        .unwrap();
    assert_eq!(h.failures, 0, "printing is not a failure");
}

#[test]
fn a_hot_swap_keeps_the_instance_and_health_of_an_unchanged_plugin_only() {
    let c = config(
        "TrapSome",
        "trap_some",
        true,
        "quarantine_after = 1\nquarantine_seconds = 30",
    );
    let clock = FakeClock::default();
    let clock_arc: Arc<FakeClock> = Arc::new(clock.clone());
    let mut s = Decider::with_clock(&c.profiles().unwrap(), 1, clock_arc.clone()).unwrap();
    cluster(&mut s);
    let mut boom = node("boom");
    boom.labels = labels(&[("explode", "true")]);
    s.cache_mut().upsert_node(boom);
    timed(&mut s, &cpu_pod("p", 500));
    let health = |s: &Decider| {
        s.plugin_health()
            .into_iter()
            .find(|h| h.plugin == "TrapSome")
            .unwrap()
    };
    assert_eq!(health(&s).quarantined_until, Some(Duration::from_secs(30)));

    // The same plugin under a profile whose other parts changed: its instance carries on.
    let reweighted = profile_toml(
        "TrapSome",
        "trap_some",
        true,
        "quarantine_after = 1\nquarantine_seconds = 30",
    )
    .replace(
        "scores = [{ plugin = \"NodeResourcesFit\" }]",
        "scores = [{ plugin = \"NodeResourcesFit\", weight = 3 }]",
    );
    let mut same = Config::parse("sandbox.toml", Path::new("."), reweighted).unwrap();
    same.default_plugins = DefaultPluginRuntime::Native;
    let profiles =
        Decider::build_profiles(&same.profiles().unwrap(), 1, clock_arc.clone()).unwrap();
    drop(s.swap_profiles(profiles));
    assert_eq!(
        health(&s).quarantined_until,
        Some(Duration::from_secs(30)),
        "an unchanged plugin keeps its instance and health across a swap"
    );

    // A changed failure policy is a new plugin: a fresh instance with clean health.
    let changed = config(
        "TrapSome",
        "trap_some",
        true,
        "quarantine_after = 1\nquarantine_seconds = 60",
    );
    let profiles = Decider::build_profiles(&changed.profiles().unwrap(), 1, clock_arc).unwrap();
    drop(s.swap_profiles(profiles));
    let fresh = health(&s);
    assert_eq!((fresh.failures, fresh.quarantined_until), (0, None));
    s.cache_mut().remove_node("boom");
    let placed = timed(&mut s, &cpu_pod("q", 500));
    assert_eq!(placed.node.as_deref(), Some("big"), "{placed:?}");
}
