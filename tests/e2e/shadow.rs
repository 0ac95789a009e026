//! Shadow policies in `wasched serve`: a candidate profile run beside the live one on the same
//! cycles, its findings, and its promotion.

use super::*;

/// A plugin that prefers zone `a` (NodeAffinity's `addedAffinity` under another name), defined
/// but used by no profile until the shadow lists it.
pub(crate) const ZONE_PLUGIN: &str = r#"
[plugins.ZonePreference]
default = "NodeAffinity"
[plugins.ZonePreference.config.addedAffinity]
preferredDuringSchedulingIgnoredDuringExecution = [
  { weight = 100, preference = { matchExpressions = [
    { key = "topology.kubernetes.io/zone", operator = "In", values = ["a"] } ] } },
]
"#;

/// kube-scheduler's default scores with ZonePreference added.
pub(crate) const ZONE_SHADOW: &str = r#"
scores = [
  { plugin = "TaintToleration", weight = 3 },
  { plugin = "NodeAffinity", weight = 2 },
  { plugin = "NodeResourcesFit", weight = 1 },
  { plugin = "PodTopologySpread", weight = 2 },
  { plugin = "InterPodAffinity", weight = 2 },
  { plugin = "NodeResourcesBalancedAllocation", weight = 1 },
  { plugin = "ImageLocality", weight = 1 },
  { plugin = "ZonePreference", weight = 3 },
]
"#;

/// A small node in zone `a` and a large one in zone `b`: kube's default scores send the first
/// pods to the large one, and later ones to either.
pub(super) fn zone_nodes() -> Vec<Value> {
    let node = |name: &str, zone: &str, cpu: &str, memory: &str| {
        json!({ "kind": "Node",
            "metadata": { "name": name, "labels": { "topology.kubernetes.io/zone": zone } },
            "status": { "allocatable": { "cpu": cpu, "memory": memory, "pods": "110" } } })
    };
    vec![
        node("node-a", "a", "4", "16Gi"),
        node("node-b", "b", "16", "64Gi"),
    ]
}

pub(super) fn zone_pod(name: &str) -> Value {
    json!({ "kind": "Pod", "metadata": { "name": name, "namespace": "default" },
        "spec": { "containers": [{ "name": "c",
            "resources": { "requests": { "cpu": "300m", "memory": "1Gi" } } }] } })
}

/// Starts a server with the zone plugin defined and the two nodes, and sets the shadow.
pub(super) fn shadowed_server(name: &str) -> Server {
    let dir = temp_dir(name);
    let config = dir.join("wasched.toml");
    std::fs::write(&config, ZONE_PLUGIN).unwrap();
    let server = Server::start(&dir, &["--config", config.to_str().unwrap()]);
    let admin = server.admin();
    let nodes = json!({ "kind": "List", "items": zone_nodes() });
    ok(send(&admin, "POST", "/v1/objects", nodes));
    ok(admin
        .request(
            "PUT",
            "/admin/shadow?profile=default-scheduler",
            Some(("application/toml", ZONE_SHADOW.into())),
        )
        .unwrap());
    server
}

/// Creates `names` and waits until every one is bound; returns each pod's node.
pub(super) fn create_and_bind(admin: &Client, names: &[String]) -> HashMap<String, String> {
    for name in names {
        let reply = send(admin, "POST", "/v1/namespaces/default/pods", zone_pod(name));
        assert_eq!(reply.status, 201, "{}", reply.body);
    }
    let mut nodes = HashMap::new();
    wait_until("every pod is bound", Duration::from_secs(30), || {
        nodes = pods(admin, "default")
            .iter()
            .filter_map(|p| Some((p["metadata"]["name"].as_str()?.to_string(), node_of(p)?)))
            .filter(|(name, _)| names.contains(name))
            .collect();
        nodes.len() == names.len()
    });
    nodes
}

fn report(client: &Client) -> Value {
    let reply = ok(client.request("GET", "/v1/status/shadow", None).unwrap());
    let shadows = reply["shadows"].as_array().unwrap();
    assert_eq!(shadows.len(), 1, "{reply}");
    shadows[0].clone()
}

/// Waits until the shadow has compared `cycles` cycles, and returns its report.
pub(super) fn compared(client: &Client, cycles: u64) -> Value {
    let mut last = Value::Null;
    wait_until(
        "the shadow compared every cycle",
        Duration::from_secs(30),
        || {
            last = report(client);
            last["compared"].as_u64() == Some(cycles)
        },
    );
    last
}

#[test]
fn a_shadow_counts_what_it_would_change_and_a_promote_makes_the_next_pods_follow_it() {
    let server = shadowed_server("shadow");
    let admin = server.admin();
    let list = ok(admin.request("GET", "/v1/pods", None).unwrap());
    let from = list["metadata"]["resourceVersion"].as_str().unwrap();
    let (events, stop_watch) = watch(&server.url, from);

    let first: Vec<String> = (0..12).map(|i| format!("before-{i:02}")).collect();
    let live = create_and_bind(&admin, &first);
    let found = compared(&admin, 12);

    // The recount: the shadow puts every pod in zone a (node-a has room for all), so a pod the
    // live profile put on node-a agrees and one it put on node-b does not, by a clear margin.
    wait_until(
        "the watch saw every binding",
        Duration::from_secs(10),
        || {
            events
                .lock()
                .unwrap()
                .iter()
                .filter(|e| e["type"] == "Scheduled")
                .count()
                >= 12
        },
    );
    stop_watch.store(true, Ordering::Relaxed);
    let bound_to = |node: &str| {
        let events = events.lock().unwrap();
        let scheduled = events.iter().filter(|e| e["type"] == "Scheduled");
        scheduled.filter(|e| e["node"] == node).count() as u64
    };
    let (on_a, on_b) = (bound_to("node-a"), bound_to("node-b"));
    assert_eq!(on_a + on_b, 12);
    assert!(on_b > 0, "kube's scores send some pods to the larger node");
    let counts = &found["counts"];
    let count = |outcome: &str| counts[outcome].as_u64().unwrap();
    assert_eq!(count("same"), on_a, "{found}");
    // A pod the live profile put on node-b only by breaking a tie with node-a is a `tie`.
    assert_eq!(count("different") + count("tie"), on_b, "{found}");
    for outcome in ["infeasible", "error"] {
        assert_eq!(counts[outcome].as_u64(), Some(0), "{outcome}: {found}");
    }
    assert_eq!(found["dropped"].as_u64(), Some(0));
    let metric_of = |outcome: &str| {
        metric(
            &admin,
            &format!("wasched_shadow_cycles_total{{profile=\"default-scheduler\",outcome=\"{outcome}\"}}"),
        )
    };
    assert_eq!(metric_of("different") as u64, count("different"));
    assert_eq!(metric_of("tie") as u64, count("tie"));
    assert_eq!(metric_of("same") as u64, on_a);

    // Every disagreeing pod is listed with both choices, each node scored by both policies.
    let latest = found["latest"].as_array().unwrap();
    assert_eq!(latest.len() as u64, on_b);
    for d in latest {
        let pod = d["pod"].as_str().unwrap().trim_start_matches("default/");
        assert_eq!(live[pod], "node-b", "{d}");
        assert_eq!(d["live"]["node"], "node-b");
        assert_eq!(d["shadow"]["node"], "node-a");
        let nodes = d["nodes"].as_array().unwrap();
        assert_eq!(nodes[0]["node"], "node-b");
        assert_eq!(nodes[1]["node"], "node-a");
        let zone_score = |breakdown: &Value| {
            breakdown["scores"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["plugin"] == "ZonePreference")
                .map(|s| s["score"].as_i64().unwrap())
        };
        assert_eq!(zone_score(&nodes[1]["shadow"]), Some(100), "{d}");
        assert_eq!(zone_score(&nodes[0]["shadow"]), Some(0), "{d}");
        assert_eq!(
            zone_score(&nodes[1]["live"]),
            None,
            "the live profile has no such plugin"
        );
        let live_b = nodes[0]["live"]["total"].as_i64().unwrap();
        let live_a = nodes[1]["live"]["total"].as_i64().unwrap();
        match d["verdict"].as_str().unwrap() {
            "different" => assert!(
                live_b > live_a,
                "the live profile scored its choice higher: {d}"
            ),
            "tie" => assert_eq!(live_b, live_a, "{d}"),
            other => panic!("{other}: {d}"),
        }
    }
    assert_eq!(found["live"]["scores"].as_array().unwrap().len(), 7);
    assert_eq!(found["shadow"]["scores"].as_array().unwrap().len(), 8);

    // Promote: the next pods follow the shadow's choice, with no failed cycle, and the former
    // live profile runs as the shadow.
    let reply = ok(admin
        .request("POST", "/admin/shadow/promote", None)
        .unwrap());
    assert_eq!(reply["promoted"], true);
    let (live_part, shadow_part) = profile_parts(&admin);
    assert!(live_part.contains("ZonePreference"), "{live_part}");
    assert!(!shadow_part.contains("ZonePreference"), "{shadow_part}");
    let next: Vec<String> = (0..6).map(|i| format!("after-{i:02}")).collect();
    let placed = create_and_bind(&admin, &next);
    assert!(placed.values().all(|n| n == "node-a"), "{placed:?}");
    let errors = admin.request("GET", "/metrics", None).unwrap().body;
    assert!(
        !errors.lines().any(|l| l
            .starts_with("scheduler_schedule_attempts_total{result=\"error\"")
            && !l.ends_with(" 0")),
        "no failed cycle: {errors}"
    );
    let after = compared(&admin, 6);
    assert_eq!(after["shadow"]["scores"].as_array().unwrap().len(), 7);
    let counts = &after["counts"];
    assert_eq!(
        counts["same"].as_u64().unwrap() + counts["different"].as_u64().unwrap(),
        6,
        "{after}"
    );

    // Rolling back is the same call.
    ok(admin
        .request("POST", "/admin/shadow/promote", None)
        .unwrap());
    let (live_part, shadow_part) = profile_parts(&admin);
    assert!(!live_part.contains("ZonePreference"), "{live_part}");
    assert!(shadow_part.contains("ZonePreference"), "{shadow_part}");
}

/// The configuration's live profile and its shadow, as text.
fn profile_parts(admin: &Client) -> (String, String) {
    let config = admin.request("GET", "/admin/config", None).unwrap().body;
    let profiles = config.split_once("[[profiles]]").expect(&config).1;
    let (live, shadow) = profiles.split_once("[profiles.shadow]").expect(&config);
    (live.to_string(), shadow.to_string())
}

#[test]
fn shadow_changes_that_cannot_apply_are_refused_and_change_nothing() {
    let server = shadowed_server("shadow-refused");
    let admin = server.admin();
    let before = admin.request("GET", "/admin/config", None).unwrap().body;
    let refused = [
        (
            "PUT",
            "/admin/shadow?profile=batch",
            ZONE_SHADOW,
            404,
            "no profile has scheduler_name \"batch\"",
        ),
        (
            "PUT",
            "/admin/shadow",
            "scores = [{ plugin = \"Nope\" }]",
            400,
            "Nope",
        ),
        (
            "PUT",
            "/admin/shadow",
            "scheduler_name = \"x\"",
            400,
            "has no scheduler_name",
        ),
        (
            "POST",
            "/admin/shadow/promote?profile=batch",
            "",
            404,
            "no profile",
        ),
        (
            "PUT",
            "/admin/shadow",
            "scores = [",
            400,
            "not a TOML table",
        ),
    ];
    for (method, path, body, status, says) in refused {
        let reply = admin
            .request(method, path, Some(("application/toml", body.into())))
            .unwrap();
        assert_eq!(reply.status, status, "{method} {path}: {}", reply.body);
        let message = reply.json().unwrap()["message"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(message.contains(says), "{method} {path}: {message}");
    }
    assert_eq!(
        admin.request("GET", "/admin/config", None).unwrap().body,
        before
    );
    let anonymous = server
        .anonymous()
        .request("POST", "/admin/shadow/promote", None)
        .unwrap();
    assert_eq!(anonymous.status, 401);
    ok(admin.request("DELETE", "/admin/shadow", None).unwrap());
    wait_until("the shadow stopped", Duration::from_secs(10), || {
        let reply = ok(admin.request("GET", "/v1/status/shadow", None).unwrap());
        reply["shadows"] == json!([]) && reply["configured"] == json!([])
    });
    let reply = admin.request("DELETE", "/admin/shadow", None).unwrap();
    assert_eq!(reply.status, 404, "{}", reply.body);
}
