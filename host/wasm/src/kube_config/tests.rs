//! kube-scheduler's own defaulting and merge examples (`default_plugins_test.go`,
//! `framework_test.go`'s MultiPoint cases), resolved through the TOML they convert to.

use std::path::Path;

use super::*;
use crate::config::{Config, ProfileChain, WeightedScore};

fn converted(yaml: &str) -> Converted {
    to_toml(yaml).unwrap_or_else(|e| panic!("{}: {yaml}", e.message))
}

fn chains(yaml: &str) -> Vec<ProfileChain> {
    let toml = converted(yaml).toml;
    Config::parse("k.toml", Path::new("."), toml.clone())
        .unwrap_or_else(|e| panic!("{e}\n{toml}"))
        .chains()
}

fn scores(pairs: &[(&str, i64)]) -> Vec<WeightedScore> {
    pairs
        .iter()
        .map(|(plugin, weight)| WeightedScore {
            plugin: plugin.to_string(),
            weight: *weight,
        })
        .collect()
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

const HEADER: &str =
    "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n";

fn yaml(body: &str) -> String {
    format!("{HEADER}{body}")
}

#[test]
fn an_empty_configuration_is_kube_schedulers_default_profile() {
    let chains = chains(HEADER);
    let default = Config::parse("d.toml", Path::new("."), String::new())
        .unwrap()
        .chains();
    assert_eq!(chains, default);
    assert_eq!(chains[0].scheduler_name, "default-scheduler");
    assert_eq!(
        chains[0].pre_enqueue,
        names(&["SchedulingGates", "DynamicResources"])
    );
    let warnings = converted(HEADER).warnings;
    assert!(warnings.is_empty(), "{warnings:?}");
}

#[test]
fn a_disabled_default_score_is_dropped_and_args_reach_the_plugin() {
    let text = yaml(
        "profiles:
- schedulerName: bin-packing
  plugins:
    score:
      disabled:
      - name: NodeResourcesBalancedAllocation
  pluginConfig:
  - name: NodeResourcesFit
    args:
      apiVersion: kubescheduler.config.k8s.io/v1
      kind: NodeResourcesFitArgs
      scoringStrategy:
        type: MostAllocated
        resources:
        - name: nvidia.com/gpu
          weight: 5
",
    );
    let chain = &chains(&text)[0];
    assert_eq!(chain.scheduler_name, "bin-packing");
    assert_eq!(
        chain.scores,
        scores(&[
            ("TaintToleration", 3),
            ("NodeAffinity", 2),
            ("NodeResourcesFit", 1),
            ("PodTopologySpread", 2),
            ("InterPodAffinity", 2),
            ("ImageLocality", 1),
        ])
    );
    let toml = converted(&text).toml;
    let table: toml::Table = toml.parse().unwrap();
    let args = &table["profiles"][0]["plugin_config"]["NodeResourcesFit"];
    let strategy = &args["scoringStrategy"];
    assert_eq!(strategy["type"].as_str(), Some("MostAllocated"));
    assert_eq!(strategy["resources"][0]["weight"].as_integer(), Some(5));
    assert!(args.get("kind").is_none());
}

#[test]
fn a_re_enabled_multi_point_default_keeps_its_place_with_its_new_weight() {
    let text = yaml(
        "profiles:
- plugins:
    multiPoint:
      enabled:
      - name: TaintToleration
        weight: 10
",
    );
    assert_eq!(
        chains(&text)[0].scores,
        scores(&[
            ("TaintToleration", 10),
            ("NodeAffinity", 2),
            ("NodeResourcesFit", 1),
            ("PodTopologySpread", 2),
            ("InterPodAffinity", 2),
            ("NodeResourcesBalancedAllocation", 1),
            ("ImageLocality", 1),
        ])
    );
}

#[test]
fn a_plugin_enabled_at_its_own_point_overrides_multi_point_and_goes_first() {
    // kube-scheduler's "Override MultiPoint plugins with specific extension point": the
    // overriding plugins first, in their own order, then multiPoint's, then the point's others.
    let text = yaml(
        "profiles:
- plugins:
    score:
      enabled:
      - name: InterPodAffinity
        weight: 7
      - name: NodeAffinity
        weight: 4
",
    );
    assert_eq!(
        chains(&text)[0].scores,
        scores(&[
            ("InterPodAffinity", 7),
            ("NodeAffinity", 4),
            ("TaintToleration", 3),
            ("NodeResourcesFit", 1),
            ("PodTopologySpread", 2),
            ("NodeResourcesBalancedAllocation", 1),
            ("ImageLocality", 1),
        ])
    );
}

#[test]
fn star_disables_every_default_of_a_point_and_zero_weights_count_as_one() {
    let text = yaml(
        "profiles:
- plugins:
    score:
      disabled:
      - name: '*'
      enabled:
      - name: NodeResourcesFit
    filter:
      disabled:
      - name: NodePorts
      - name: InterPodAffinity
    preEnqueue:
      disabled:
      - name: SchedulingGates
",
    );
    let chain = &chains(&text)[0];
    assert_eq!(chain.scores, scores(&[("NodeResourcesFit", 1)]));
    assert_eq!(
        chain.filters,
        names(&[
            "NodeUnschedulable",
            "NodeName",
            "TaintToleration",
            "NodeAffinity",
            "NodeResourcesFit",
            "VolumeRestrictions",
            "NodeVolumeLimits",
            "VolumeBinding",
            "VolumeZone",
            "PodTopologySpread",
            "DynamicResources",
        ])
    );
    assert_eq!(chain.pre_enqueue, names(&["DynamicResources"]));
}

#[test]
fn multi_point_star_drops_every_default_and_keeps_what_is_listed() {
    let text = yaml(
        "profiles:
- plugins:
    multiPoint:
      disabled:
      - name: '*'
      enabled:
      - name: PrioritySort
      - name: DefaultBinder
      - name: NodeResourcesFit
        weight: 2
",
    );
    let chain = &chains(&text)[0];
    assert_eq!(chain.filters, names(&["NodeResourcesFit"]));
    assert_eq!(chain.scores, scores(&[("NodeResourcesFit", 2)]));
    assert!(chain.pre_enqueue.is_empty());
    let table: toml::Table = converted(&text).toml.parse().unwrap();
    assert_eq!(
        table["profiles"][0]["preemption"]["enabled"].as_bool(),
        Some(false),
        "DefaultPreemption went with the defaults"
    );
}

#[test]
fn percentages_preemption_args_and_profiles_carry_over() {
    let text = yaml(
        "percentageOfNodesToScore: 30
profiles:
- schedulerName: a
- schedulerName: b
  percentageOfNodesToScore: 70
  pluginConfig:
  - name: DefaultPreemption
    args:
      minCandidateNodesPercentage: 20
      minCandidateNodesAbsolute: 50
",
    );
    let chains = chains(&text);
    assert_eq!(chains[0].percentage_of_nodes_to_score, Some(30));
    assert_eq!(chains[1].percentage_of_nodes_to_score, Some(70));
    let table: toml::Table = converted(&text).toml.parse().unwrap();
    let preemption = &table["profiles"][1]["preemption"];
    assert_eq!(
        preemption["min_candidate_nodes_percentage"].as_integer(),
        Some(20)
    );
    assert_eq!(
        preemption["min_candidate_nodes_absolute"].as_integer(),
        Some(50)
    );
}

#[test]
fn an_out_of_tree_component_is_named_with_its_args() {
    let text = yaml(
        "profiles:
- plugins:
    filter:
      enabled:
      - name: GpuModel
    score:
      enabled:
      - name: GpuModel
        weight: 5
  pluginConfig:
  - name: GpuModel
    args:
      component: plugins/gpu_model.wasm
      sha256: 0123
      config:
        annotation: example.com/gpu-model
      failurePolicy: ignore
",
    );
    let table: toml::Table = converted(&text).toml.parse().unwrap();
    let plugin = &table["plugins"]["GpuModel"];
    assert_eq!(plugin["component"].as_str(), Some("plugins/gpu_model.wasm"));
    assert_eq!(plugin["failure_policy"].as_str(), Some("ignore"));
    let profile = &table["profiles"][0];
    assert_eq!(
        profile["plugin_config"]["GpuModel"]["annotation"].as_str(),
        Some("example.com/gpu-model")
    );
    let filters = profile["filters"].as_array().unwrap();
    assert_eq!(filters.last().unwrap().as_str(), Some("GpuModel"));
    let scores = profile["scores"].as_array().unwrap();
    assert_eq!(scores.last().unwrap()["weight"].as_integer(), Some(5));
}

#[test]
fn what_wasched_cannot_honour_is_refused_by_field() {
    for (body, expected) in [
        (
            "extenders:\n- urlPrefix: http://x\n",
            "extenders: scheduler extenders are not supported",
        ),
        (
            "percentageOfNodeToScore: 10\n",
            "unknown field `percentageOfNodeToScore`",
        ),
        (
            "podMaxBackoffSeconds: 30\n",
            "podMaxBackoffSeconds: only kube-scheduler's default (10)",
        ),
        (
            "profiles:\n- plugins:\n    queueSort:\n      enabled:\n      - name: Coscheduling\n",
            "profiles[0].plugins.queueSort.enabled: \"Coscheduling\" is not supported",
        ),
        (
            "profiles:\n- schedulerName: a\n- schedulerName: a\n",
            "profiles[1].schedulerName: \"a\" names two profiles",
        ),
        (
            "profiles:\n- schedulerName: a\n  plugins:\n    filter:\n      enabled:\n      - name: GpuModel\n  pluginConfig:\n  - name: GpuModel\n    args: {component: a.wasm}\n- schedulerName: b\n  plugins:\n    filter:\n      enabled:\n      - name: GpuModel\n  pluginConfig:\n  - name: GpuModel\n    args: {component: b.wasm}\n",
            "profiles \"a\" and \"b\" name GpuModel as different components",
        ),
    ] {
        let error = to_toml(&yaml(body)).expect_err(body);
        assert!(
            error.message.contains(expected),
            "{body}: {}",
            error.message
        );
    }
    let error = to_toml(&HEADER.replace("/v1", "/v1beta3")).unwrap_err();
    assert!(error
        .message
        .starts_with("apiVersion: \"kubescheduler.config.k8s.io/v1beta3\""));
}

#[test]
fn only_a_kube_scheduler_configuration_is_taken_for_one() {
    assert!(is_kube_scheduler_configuration(HEADER));
    assert!(is_kube_scheduler_configuration(
        "{\"apiVersion\": \"kubescheduler.config.k8s.io/v1\", \"kind\": \"KubeSchedulerConfiguration\"}"
    ));
    assert!(!is_kube_scheduler_configuration(
        "# not a KubeSchedulerConfiguration\n[[profiles]]\nscheduler_name = \"x\"\n"
    ));
    assert!(!is_kube_scheduler_configuration(""));
}

#[test]
fn client_connection_and_leader_election_are_read_as_start_settings() {
    let text = yaml(
        "clientConnection:
  kubeconfig: /etc/kubernetes/scheduler.conf
  qps: 200
  burst: 400
  contentType: application/vnd.kubernetes.protobuf
leaderElection:
  leaderElect: true
  leaseDuration: 1m30s
  renewDeadline: 45s
  retryPeriod: 2500ms
  resourceLock: leases
  resourceName: kube-scheduler
  resourceNamespace: kube-system
",
    );
    let settings = start_settings(&text).unwrap();
    assert_eq!(
        settings,
        StartSettings {
            kubeconfig: Some("/etc/kubernetes/scheduler.conf".into()),
            qps: Some(200.0),
            burst: Some(400),
            leader_elect: Some(true),
            lease_duration: Some(Duration::from_secs(90)),
            renew_deadline: Some(Duration::from_secs(45)),
            retry_period: Some(Duration::from_millis(2500)),
            resource_name: Some("kube-scheduler".into()),
            resource_namespace: Some("kube-system".into()),
        }
    );
    let warnings = converted(&text).warnings;
    assert!(
        warnings.iter().any(|w| w.contains("contentType")),
        "the protobuf content type is not spoken: {warnings:?}"
    );
    assert_eq!(start_settings(HEADER).unwrap(), StartSettings::default());
}

#[test]
fn start_settings_wasched_cannot_honour_are_refused_by_field() {
    for (body, field) in [
        ("clientConnection:\n  qps: 0\n", "clientConnection.qps"),
        ("clientConnection:\n  qps: -5\n", "clientConnection.qps"),
        ("clientConnection:\n  burst: 0\n", "clientConnection.burst"),
        ("clientConnection:\n  qps: fast\n", "qps"),
        (
            "leaderElection:\n  resourceLock: endpointsleases\n",
            "leaderElection.resourceLock",
        ),
        (
            "leaderElection:\n  leaseDuration: 15\n",
            "leaderElection.leaseDuration",
        ),
        (
            "leaderElection:\n  retryPeriod: 2 s\n",
            "leaderElection.retryPeriod",
        ),
        ("leaderElection:\n  leaderElects: true\n", "leaderElects"),
    ] {
        let refused = start_settings(&yaml(body)).expect_err(body);
        assert!(
            refused.message.contains(field),
            "{body}: {}",
            refused.message
        );
    }
}

#[test]
fn go_durations_add_their_parts() {
    for (text, want) in [
        ("15s", Duration::from_secs(15)),
        ("1m0s", Duration::from_secs(60)),
        ("1h2m3s", Duration::from_secs(3723)),
        ("1.5s", Duration::from_millis(1500)),
        ("250ms", Duration::from_millis(250)),
        ("10us", Duration::from_micros(10)),
    ] {
        assert_eq!(go_duration(text), Ok(want), "{text}");
    }
    for bad in ["", "15", "s", "1d", "1m-3s"] {
        assert!(go_duration(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn each_profile_keeps_its_own_args_of_a_default_plugin() {
    let text = yaml(
        "profiles:
- schedulerName: default-scheduler
- schedulerName: bin-packing
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
- schedulerName: spreading
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: LeastAllocated
        resources: [{name: cpu, weight: 2}, {name: memory, weight: 1}]
  - name: InterPodAffinity
    args: {hardPodAffinityWeight: 5}
  - name: NodeAffinity
    args:
      addedAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
          nodeSelectorTerms:
          - matchExpressions: [{key: pool, operator: In, values: [spread]}]
",
    );
    let toml = converted(&text).toml;
    let mut config = Config::parse("k.toml", Path::new("."), toml.clone())
        .unwrap_or_else(|e| panic!("{e}\n{toml}"));
    config.default_plugins = crate::config::DefaultPluginRuntime::Native;
    let profiles = config.profiles().unwrap();
    let config_of = |profile: usize, plugin: &str| {
        let spec = profiles[profile]
            .filters
            .iter()
            .chain(profiles[profile].scores.iter().map(|(spec, _)| spec))
            .find(|spec| spec.name == plugin)
            .unwrap_or_else(|| panic!("{plugin} in profile {profile}"));
        serde_json::from_str::<Value>(&spec.config).unwrap()
    };
    let strategy = |profile| config_of(profile, "NodeResourcesFit")["scoringStrategy"].clone();
    assert_eq!(
        strategy(0),
        Value::Null,
        "the default profile has kube's defaults"
    );
    assert_eq!(strategy(1)["type"], "MostAllocated");
    assert_eq!(strategy(2)["type"], "LeastAllocated");
    assert_eq!(strategy(2)["resources"][0]["weight"], 2);
    assert_eq!(config_of(2, "InterPodAffinity")["hardPodAffinityWeight"], 5);
    assert_eq!(config_of(1, "InterPodAffinity"), serde_json::json!({}));
    let added = &config_of(2, "NodeAffinity")["addedAffinity"];
    let terms = &added["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
    assert_eq!(terms[0]["matchExpressions"][0]["values"][0], "spread");
    assert_eq!(config_of(0, "NodeAffinity"), serde_json::json!({}));
}

#[test]
fn an_out_of_tree_multi_point_plugin_is_listed_where_it_may_take_part() {
    let text = yaml(
        "profiles:
- plugins:
    multiPoint:
      enabled:
      - name: GpuModel
        weight: 5
    permit:
      disabled:
      - name: GpuModel
  pluginConfig:
  - name: GpuModel
    args:
      component: plugins/gpu_model.wasm
",
    );
    let table: toml::Table = converted(&text).toml.parse().unwrap();
    let profile = &table["profiles"][0];
    let names = |key: &str| -> Vec<String> {
        let list = profile[key].as_array().unwrap();
        list.iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names("where_implemented"), ["GpuModel"]);
    assert_eq!(
        names("filters").last().map(String::as_str),
        Some("GpuModel")
    );
    assert!(names("pre_enqueue").contains(&"GpuModel".to_string()));
    assert!(names("permit").is_empty(), "disabled at permit");
    let scores = profile["scores"].as_array().unwrap();
    let gpu = scores
        .iter()
        .find(|s| s["plugin"].as_str() == Some("GpuModel"));
    assert_eq!(gpu.unwrap()["weight"].as_integer(), Some(5));
}
