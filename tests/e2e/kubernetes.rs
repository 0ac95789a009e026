//! `wasched serve --kubernetes` against an API server nobody on this project wrote: kmock's
//! emulator, with the parts of a real API server a scheduler needs added in
//! `tests/kube/apiserver.py` (resourceVersions, watches that resume and answer 410 Gone, the
//! binding and status subresources).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use wasched::server::client::{Client, Connection};

/// A running emulator, killed when dropped.
struct ApiServer {
    child: Child,
    url: String,
}

impl ApiServer {
    fn start() -> ApiServer {
        let script = crate::support::repo_root().join("tests/kube/apiserver.py");
        let mut child = Command::new(env!("WASCHED_KUBE_PYTHON"))
            .arg(script)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the API server emulator");
        let url = first_line(&mut child, "listening on ");
        ApiServer { child, url }
    }

    fn client(&self) -> Client {
        Client::new(&Connection {
            server: self.url.clone(),
            token_file: None,
        })
        .unwrap()
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let body = body.map(|b| ("application/json", b.to_string().into_bytes()));
        let reply = self.client().request(method, path, body).unwrap();
        let value = serde_json::from_str(&reply.body).unwrap_or(Value::Null);
        (reply.status, value)
    }

    fn create(&self, object: &Value) {
        let path = match object["kind"].as_str().unwrap() {
            "Node" => "/api/v1/nodes".to_string(),
            "Pod" => format!(
                "/api/v1/namespaces/{}/pods",
                object["metadata"]["namespace"].as_str().unwrap()
            ),
            "PodDisruptionBudget" => format!(
                "/apis/policy/v1/namespaces/{}/poddisruptionbudgets",
                object["metadata"]["namespace"].as_str().unwrap()
            ),
            "PersistentVolume" => "/api/v1/persistentvolumes".to_string(),
            "PersistentVolumeClaim" => format!(
                "/api/v1/namespaces/{}/persistentvolumeclaims",
                object["metadata"]["namespace"].as_str().unwrap()
            ),
            "StorageClass" => "/apis/storage.k8s.io/v1/storageclasses".to_string(),
            "DeviceClass" => "/apis/resource.k8s.io/v1/deviceclasses".to_string(),
            "ResourceSlice" => "/apis/resource.k8s.io/v1/resourceslices".to_string(),
            "ResourceClaim" => format!(
                "/apis/resource.k8s.io/v1/namespaces/{}/resourceclaims",
                object["metadata"]["namespace"].as_str().unwrap()
            ),
            kind => panic!("no path for {kind}"),
        };
        let (status, reply) = self.call("POST", &path, Some(object.clone()));
        assert!(status < 300, "creating {object}: {status} {reply}");
    }

    fn pods(&self) -> BTreeMap<String, Value> {
        let (_, list) = self.call("GET", "/api/v1/pods", None);
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["metadata"]["name"].as_str().unwrap().to_string(),
                    p.clone(),
                )
            })
            .collect()
    }

    fn node_of(&self, pod: &str) -> Option<String> {
        self.pods()[pod]["spec"]["nodeName"]
            .as_str()
            .map(str::to_string)
    }

    fn all_bound(&self) -> bool {
        self.pods()
            .values()
            .all(|p| !p["spec"]["nodeName"].is_null())
    }

    /// The Events of namespace `default`.
    fn events(&self) -> Vec<Value> {
        let (_, list) = self.call(
            "GET",
            "/apis/events.k8s.io/v1/namespaces/default/events",
            None,
        );
        list["items"].as_array().cloned().unwrap_or_default()
    }

    fn counts(&self) -> Value {
        self.call("GET", "/_test/counts", None).1
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running `wasched serve --kubernetes`, killed when dropped.
struct Decider {
    child: Child,
    url: String,
    _dir: PathBuf,
}

impl Decider {
    fn start(api: &ApiServer, name: &str, extra: &[&str]) -> Decider {
        Decider::start_at(&api.url, name, extra)
    }

    /// A replica reaching the API server at `url` (the emulator, or a proxy in front of it).
    fn start_at(url: &str, name: &str, extra: &[&str]) -> Decider {
        let dir = std::env::temp_dir().join(format!("wasched-kube-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(&kubeconfig, kubeconfig_for(url)).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_wasched"))
            .args(["serve", "--kubernetes", "--listen", "127.0.0.1:0"])
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(extra)
            .env("WASCHED_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start wasched serve --kubernetes");
        let url = first_line(&mut child, "wasched listening on ");
        let decider = Decider {
            child,
            url,
            _dir: dir,
        };
        wait_for("the scheduler to be ready", || {
            decider.get("/readyz").0 == 200
        });
        decider
    }

    fn get(&self, path: &str) -> (u16, String) {
        self.request("GET", path, None)
    }

    fn request(&self, method: &str, path: &str, body: Option<(&str, Vec<u8>)>) -> (u16, String) {
        let client = Client::new(&Connection {
            server: self.url.clone(),
            token_file: None,
        })
        .unwrap();
        let reply = client.request(method, path, body).unwrap();
        (reply.status, reply.body)
    }

    /// The sha256 of the uploaded plugin `name`, if this replica has one.
    fn uploaded_sha256(&self, name: &str) -> Option<String> {
        let (_, body) = self.get("/admin/plugins");
        let list: Value = serde_json::from_str(&body).unwrap();
        list["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name && p["source"] == "uploaded")
            .map(|p| p["sha256"].as_str().unwrap().to_string())
    }

    fn config(&self) -> String {
        self.get("/admin/config").1
    }

    fn metric(&self, name: &str) -> u64 {
        let (_, text) = self.get("/metrics");
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /metrics"))
    }

    /// The sum of every series of `name`, whatever its labels.
    fn metric_total(&self, name: &str) -> u64 {
        let (_, text) = self.get("/metrics");
        text.lines()
            .filter(|l| l.starts_with(&format!("{name} ")) || l.starts_with(&format!("{name}{{")))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }
}

impl Decider {
    fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    fn leads(&self) -> bool {
        self.metric("leader_election_master_status{name=\"wasched\"}") == 1
    }
}

impl Drop for Decider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn first_line(child: &mut Child, prefix: &str) -> String {
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    line.trim()
        .strip_prefix(prefix)
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string()
}

fn kubeconfig_for(url: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: emulator\n  cluster:\n    server: {url}\n\
         contexts:\n- name: emulator\n  context:\n    cluster: emulator\n    user: test\n\
         current-context: emulator\nusers:\n- name: test\n  user:\n    token: test\n"
    )
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn node(name: &str, zone: &str, cpu: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
        "kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone}},
        "status": {"allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"}}})
}

fn pod(name: &str, cpu: &str, extra: Value) -> Value {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "main", "image": "busybox",
            "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}});
    if let (Some(spec), Some(extra)) = (pod["spec"].as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    pod
}

/// Where `wasched simulate` places `pods` on `nodes` (the same objects, from a file).
fn simulated(nodes: &[Value], pods: &[Value], dir: &Path) -> BTreeMap<String, Option<String>> {
    let file = dir.join("objects.json");
    let items: Vec<Value> = nodes.iter().chain(pods).cloned().collect();
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        &file,
        json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string(),
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_wasched"))
        .args(["simulate", "--output", "json"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let row: Value = serde_json::from_str(line).unwrap();
            let pod = row["pod"].as_str().unwrap();
            let name = pod.rsplit('/').next().unwrap().to_string();
            (name, row["node"].as_str().map(str::to_string))
        })
        .collect()
}

#[test]
fn pods_are_bound_where_simulate_places_them_and_other_schedulers_pods_are_left_alone() {
    let api = ApiServer::start();
    let nodes = vec![
        node("a1", "zone-a", "4"),
        node("a2", "zone-a", "2"),
        node("b1", "zone-b", "8"),
    ];
    for n in &nodes {
        api.create(n);
    }
    let decider = Decider::start(&api, "bind", &[]);
    // One at a time, so each placement is decided against the ones before it, as simulate does.
    let pods: Vec<Value> = (0..6)
        .map(|i| pod(&format!("web-{i}"), "1500m", json!({})))
        .collect();
    for p in &pods {
        api.create(p);
        let name = p["metadata"]["name"].as_str().unwrap();
        wait_for(name, || api.node_of(name).is_some());
    }
    let other = pod("batch", "100m", json!({"schedulerName": "someone-else"}));
    api.create(&other);

    let expected = simulated(
        &nodes,
        &pods,
        &std::env::temp_dir().join("wasched-kube-sim"),
    );
    for p in &pods {
        let name = p["metadata"]["name"].as_str().unwrap();
        assert_eq!(api.node_of(name), expected[name].clone(), "{name}");
    }
    std::thread::sleep(Duration::from_millis(500));
    let batch = &api.pods()["batch"];
    assert!(batch["spec"]["nodeName"].is_null(), "{batch}");
    assert!(batch["status"]["conditions"].is_null(), "{batch}");
    assert_eq!(api.counts()["POST pods/binding"], json!(6));
    assert_eq!(decider.metric_total("wasched_api_write_failures_total"), 0);
}

#[test]
fn an_unschedulable_pod_gets_the_fit_error_and_is_placed_when_a_node_arrives() {
    let api = ApiServer::start();
    api.create(&node("small", "zone-a", "2"));
    let _scheduler = Decider::start(&api, "fit", &[]);
    api.create(&pod("large", "6", json!({})));
    wait_for("the PodScheduled condition", || {
        !api.pods()["large"]["status"]["conditions"].is_null()
    });
    let condition = api.pods()["large"]["status"]["conditions"][0].clone();
    assert_eq!(condition["type"], "PodScheduled");
    assert_eq!(condition["status"], "False");
    assert_eq!(condition["reason"], "Unschedulable");
    assert_eq!(
        condition["message"],
        "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
    );

    // The node's arrival moves the pod back to the active queue at once, not after the
    // 5-minute flush of unschedulable pods.
    let added = Instant::now();
    api.create(&node("large-node", "zone-a", "8"));
    wait_for("the pod to be bound", || api.node_of("large").is_some());
    assert_eq!(api.node_of("large").as_deref(), Some("large-node"));
    assert!(
        added.elapsed() < Duration::from_secs(20),
        "{:?}",
        added.elapsed()
    );

    // The status page works in Kubernetes mode: its summaries come from the scheduler's cache.
    assert_eq!(_scheduler.get("/").0, 200);
    let (status, body) = _scheduler.get("/v1/status/nodes");
    assert_eq!(status, 200, "{body}");
    let nodes: Value = serde_json::from_str(&body).unwrap();
    let requested = |name: &str| {
        nodes["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {nodes}"))["requested"]["cpu"]
            .clone()
    };
    assert_eq!(requested("large-node"), 6000);
    assert_eq!(requested("small"), 0);
    // The placement is recorded once the binding call returned, which may be after the watch
    // showed the pod bound.
    let placement = || {
        let (_, body) = _scheduler.get("/v1/status/pods/default/large");
        serde_json::from_str::<Value>(&body).unwrap()
    };
    wait_for("the placement to be recorded", || {
        !placement()["placement"].is_null()
    });
    let large = placement();
    assert_eq!(large["node"], "large-node", "{large}");
    assert_eq!(large["placement"]["node"], "large-node", "{large}");
    assert_eq!(large["placement"]["choice"]["feasibleNodes"], 1, "{large}");
}

#[test]
fn a_critical_pod_evicts_the_victim_no_disruption_budget_guards_through_the_api() {
    let api = ApiServer::start();
    api.create(&node("guarded-node", "zone-a", "2"));
    api.create(&node("free-node", "zone-a", "2"));
    // Preemption is on in the default profile: no configuration.
    let _scheduler = Decider::start(&api, "preempt", &[]);
    // The budget arrives through the PodDisruptionBudget watch, before the pods it guards are
    // even bound; evicting "guarded" would break it, so the other node is the one to take.
    api.create(
        &json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "guard", "namespace": "default"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
        "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1,
            "expectedPods": 1}}),
    );
    let labelled = |name: &str, app: &str, priority: i32| {
        let mut batch = pod(name, "1500m", json!({ "priority": priority }));
        batch["metadata"]["labels"] = json!({ "app": app });
        batch
    };
    // Without the budget, "guarded" (lower priority) would be the cheaper victim.
    api.create(&labelled("guarded", "guarded", 0));
    wait_for("guarded to be bound", || api.node_of("guarded").is_some());
    api.create(&labelled("free", "free", 5));
    wait_for("free to be bound", || api.node_of("free").is_some());
    let guarded_node = api.node_of("guarded").unwrap();
    let free_node = api.node_of("free").unwrap();
    assert_ne!(guarded_node, free_node, "each batch pod fills a node");
    api.create(&pod("critical", "1", json!({"priority": 1000})));
    wait_for("critical to be bound", || api.node_of("critical").is_some());
    assert_eq!(api.node_of("critical"), Some(free_node));
    let pods = api.pods();
    assert!(
        !pods.contains_key("free") && pods.contains_key("guarded"),
        "only the unguarded victim was deleted: {:?}",
        pods.keys().collect::<Vec<_>>()
    );
}

#[test]
fn dropped_watches_and_410_gone_lose_nothing_and_bind_nothing_twice() {
    let api = ApiServer::start();
    api.create(&node("n1", "zone-a", "64"));
    api.create(&node("n2", "zone-b", "64"));
    api.create(&node("doomed", "zone-b", "64"));
    let decider = Decider::start(&api, "relist", &[]);
    for i in 0..5 {
        api.create(&pod(&format!("before-{i}"), "1", json!({})));
    }
    wait_for("the first pods", || api.all_bound());

    // Watches cut mid-stream: they resume from the last resourceVersion seen.
    api.call("POST", "/_test/drop-watches", Some(json!({})));
    for i in 0..5 {
        api.create(&pod(&format!("during-{i}"), "1", json!({})));
    }
    // A partition: no list or watch gets through while a node is deleted and the API server
    // forgets its events. Resuming then gets 410 Gone and the watcher lists again; the node is
    // missing from the new list and must leave the cache.
    api.call("POST", "/_test/block-watches", Some(json!({})));
    api.call("DELETE", "/api/v1/nodes/doomed", None);
    api.call("POST", "/_test/compact", Some(json!({})));
    api.call("POST", "/_test/unblock-watches", Some(json!({})));
    wait_for("the deleted node to be repaired", || {
        decider.metric("wasched_kube_repaired_total") >= 1
    });
    for i in 0..5 {
        api.create(&pod(&format!("after-{i}"), "1", json!({})));
    }
    wait_for("every pod", || api.all_bound());
    let pods = api.pods();
    assert_eq!(pods.len(), 15);
    for (name, pod) in &pods {
        if name.starts_with("after-") {
            assert_ne!(
                pod["spec"]["nodeName"], "doomed",
                "{name} went to a deleted node"
            );
        }
    }
    // One binding per pod: none repeated, none refused as already bound.
    assert_eq!(api.counts()["POST pods/binding"], json!(15));
    assert!(decider.metric("wasched_kube_lists_total") > 5);
    assert_eq!(decider.metric("wasched_kube_repaired_total"), 1);
}

#[test]
fn refused_bindings_are_retried_with_backoff_without_waiting_for_the_assume_ttl() {
    let api = ApiServer::start();
    api.create(&node("n1", "zone-a", "8"));
    // The default assume TTL (30 s) is longer than this test waits for the binding: only the
    // refusal itself can queue the pod again.
    let decider = Decider::start(&api, "retry", &[]);
    api.call(
        "POST",
        "/_test/fail-bindings",
        Some(json!({"status": 500, "count": 2})),
    );
    let created = Instant::now();
    api.create(&pod("flaky", "1", json!({})));
    wait_for("the pod to be bound", || api.node_of("flaky").is_some());
    let took = created.elapsed();
    // Two refusals, each followed by the pod's backoff, then the binding that worked.
    assert_eq!(api.counts()["POST pods/binding"], json!(3));
    assert!(took >= Duration::from_secs(1), "no backoff: {took:?}");
    assert_eq!(
        decider.metric("wasched_api_write_failures_total{kind=\"binding\"}"),
        2
    );
}

#[test]
fn a_slow_binding_holds_up_only_its_own_pod() {
    let api = ApiServer::start();
    api.create(&node("n1", "zone-a", "64"));
    let _scheduler = Decider::start(&api, "slow", &[]);
    api.call(
        "POST",
        "/_test/slow-bindings",
        Some(json!({"seconds": 6, "count": 1})),
    );
    api.create(&pod("slow", "1", json!({})));
    wait_for("the slow binding to be sent", || {
        api.counts()["POST pods/binding"] == json!(1)
    });
    let created = Instant::now();
    for i in 0..10 {
        api.create(&pod(&format!("quick-{i}"), "1", json!({})));
    }
    wait_for("the quick pods", || {
        (0..10).all(|i| api.node_of(&format!("quick-{i}")).is_some())
    });
    let quick = created.elapsed();
    assert!(
        api.node_of("slow").is_none(),
        "the slow binding is still being answered"
    );
    assert!(quick < Duration::from_secs(4), "held up: {quick:?}");
    wait_for("the slow pod", || api.node_of("slow").is_some());
    assert_eq!(api.counts()["POST pods/binding"], json!(11));
}

#[test]
fn a_node_relabelled_many_times_ends_as_the_api_server_has_it() {
    let api = ApiServer::start();
    api.create(&node("flip", "zone-a", "64"));
    let _scheduler = Decider::start(&api, "flip", &[]);
    // The label changes faster than the scheduler applies them: every version must be applied in
    // resourceVersion order, so the cache ends with the last one however the events interleave.
    for i in 0..1000 {
        let disk = if i % 2 == 0 { "ssd" } else { "hdd" };
        let (status, reply) = api.call(
            "PATCH",
            "/api/v1/nodes/flip",
            Some(json!({"metadata": {"labels": {"disk": disk}}})),
        );
        assert!(status < 300, "{status} {reply}");
        if i % 100 == 0 {
            api.create(&pod(
                &format!("early-{i}"),
                "100m",
                json!({"nodeSelector": {"disk": disk}}),
            ));
        }
    }
    // The last version says hdd: an ssd pod cannot go there, an hdd pod can.
    api.create(&pod(
        "wants-ssd",
        "100m",
        json!({"nodeSelector": {"disk": "ssd"}}),
    ));
    api.create(&pod(
        "wants-hdd",
        "100m",
        json!({"nodeSelector": {"disk": "hdd"}}),
    ));
    wait_for("the hdd pod to be bound", || {
        api.node_of("wants-hdd").is_some()
    });
    wait_for("the ssd pod's condition", || {
        !api.pods()["wants-ssd"]["status"]["conditions"].is_null()
    });
    assert_eq!(
        api.pods()["wants-ssd"]["status"]["conditions"][0]["message"],
        "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    );
    assert!(api.node_of("wants-ssd").is_none());
}

/// Leader election timed for tests: a 2 s lease, noticed within 250 ms.
const FAST_LEASE: [&str; 6] = [
    "--leader-elect-lease-duration",
    "2s",
    "--leader-elect-renew-deadline",
    "1500ms",
    "--leader-elect-retry-period",
    "250ms",
];

#[test]
fn only_the_leader_binds_and_a_standby_takes_over_when_it_is_killed() {
    let api = ApiServer::start();
    api.create(&node("n1", "zone-a", "64"));
    let a = Decider::start(&api, "ha-a", &FAST_LEASE);
    let b = Decider::start(&api, "ha-b", &FAST_LEASE);
    wait_for("one leader", || {
        u8::from(a.leads()) + u8::from(b.leads()) == 1
    });
    for i in 0..5 {
        api.create(&pod(&format!("first-{i}"), "1", json!({})));
    }
    wait_for("the first pods", || api.all_bound());
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        api.counts()["POST pods/binding"],
        json!(5),
        "the standby bound nothing"
    );

    let (leader, standby) = if a.leads() { (a, b) } else { (b, a) };
    // A standby keeps its cache current as it watches (the node and the five pods at least),
    // rather than holding every object it saw until it leads.
    wait_for("the standby to apply what it watched", || {
        standby.metric("wasched_events_applied_total") >= 6
    });
    leader.kill9();
    let killed = Instant::now();
    for i in 0..5 {
        api.create(&pod(&format!("second-{i}"), "1", json!({})));
    }
    wait_for("the standby to lead", || standby.leads());
    let takeover = killed.elapsed();
    wait_for("the second pods", || api.all_bound());
    eprintln!("takeover after kill -9: {takeover:?} (lease 2s, retry 250ms)");
    // The Lease runs out 2 s after the last renewal; the standby notices within a retry period.
    assert!(
        takeover < Duration::from_millis(2_000 + 250 + 1_000),
        "{takeover:?}"
    );
    assert_eq!(
        api.counts()["POST pods/binding"],
        json!(10),
        "no pod bound twice or lost"
    );
}

#[test]
fn a_pod_retried_many_times_gets_one_failed_scheduling_event_then_a_scheduled_one() {
    let api = ApiServer::start();
    api.create(&node("small", "zone-a", "1"));
    let decider = Decider::start(&api, "events", &[]);
    let failed_attempts = || {
        decider.metric(
            "scheduler_schedule_attempts_total{result=\"unschedulable\",profile=\"default-scheduler\"}",
        )
    };
    api.create(&pod("patient", "6", json!({})));
    wait_for("the first attempt", || {
        !api.pods()["patient"]["status"]["conditions"].is_null()
    });
    // The node grows, still too small: each change moves the pod back to the queue (after its
    // backoff) for a new attempt that fails with the same text.
    let mut millis = 1000;
    wait_for("three attempts", || {
        millis += 10;
        let (status, _) = api.call(
            "PATCH",
            "/api/v1/nodes/small",
            Some(json!({"status": {"allocatable": {"cpu": format!("{millis}m")}}})),
        );
        assert_eq!(status, 200);
        std::thread::sleep(Duration::from_millis(250));
        failed_attempts() >= 3
    });
    let attempts = failed_attempts();
    // As kube-scheduler: the condition is written once, not again with the same text.
    assert_eq!(api.counts()["PATCH pods/status"], json!(1));
    api.create(&node("big", "zone-b", "8"));
    wait_for("the pod to be bound", || api.node_of("patient").is_some());
    let events = || api.events();
    wait_for("the Scheduled event", || {
        events().iter().any(|e| e["reason"] == "Scheduled")
    });
    let events = events();
    let failed: Vec<&Value> = events
        .iter()
        .filter(|e| e["reason"] == "FailedScheduling")
        .collect();
    assert_eq!(
        failed.len(),
        1,
        "one Event for {attempts} attempts: {failed:#?}"
    );
    assert_eq!(
        failed[0]["note"],
        "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
    );
    assert_eq!(failed[0]["type"], "Warning");
    assert_eq!(failed[0]["regarding"]["name"], "patient");
    assert_eq!(failed[0]["reportingController"], "wasched");
    let scheduled: Vec<&Value> = events
        .iter()
        .filter(|e| e["reason"] == "Scheduled")
        .collect();
    assert_eq!(scheduled.len(), 1);
    assert_eq!(
        scheduled[0]["note"],
        "Successfully assigned default/patient to big"
    );
    assert_eq!(
        api.counts()["POST events"],
        json!(2),
        "no Event created per attempt"
    );
}

const POOL_CONFIG: &str = "[[profiles]]\nscheduler_name = \"default-scheduler\"\n\
scores = [{ plugin = \"PoolPreference\", weight = 100 }, { plugin = \"NodeResourcesFit\", weight = 1 }]\n";

/// A component larger than one ConfigMap holds: the test fixture `file` grown to `size` bytes by
/// a custom section, which the component model lets any component carry.
fn oversized_component(file: &str, size: usize) -> Vec<u8> {
    fn leb128(mut value: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (value & 0x7f) as u8;
            value >>= 7;
            if value == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let mut bytes = std::fs::read(wasched_test_programs::component(file)).unwrap();
    let name = b"padding";
    let mut content = Vec::new();
    leb128(name.len(), &mut content);
    content.extend_from_slice(name);
    // Room for the section's header (1 + 5 bytes at most) comes off the padding.
    let padding = size - bytes.len() - content.len() - 6;
    content.extend((0..padding).map(|i| (i * 7919 % 251) as u8));
    bytes.push(0);
    leb128(content.len(), &mut bytes);
    bytes.extend_from_slice(&content);
    bytes
}

/// The chunk ConfigMaps holding uploaded components.
fn policy_chunks(api: &ApiServer) -> Vec<Value> {
    let (_, list) = api.call("GET", "/api/v1/namespaces/default/configmaps", None);
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["binaryData"]["component.part"].is_string())
        .cloned()
        .collect()
}

fn pool_node(name: &str, pool: &str) -> Value {
    let mut node = node(name, "zone-a", "64");
    node["metadata"]["labels"]["pool"] = pool.into();
    node
}

#[test]
fn a_plugin_and_configuration_loaded_through_one_replica_reach_every_replica_and_the_next_leader() {
    let api = ApiServer::start();
    api.create(&pool_node("blue-1", "blue"));
    api.create(&pool_node("green-1", "green"));
    let a = Decider::start(&api, "policy-a", &FAST_LEASE);
    let b = Decider::start(&api, "policy-b", &FAST_LEASE);
    wait_for("one leader", || {
        u8::from(a.leads()) + u8::from(b.leads()) == 1
    });
    let (leader, standby) = if a.leads() { (a, b) } else { (b, a) };

    // Made through the standby's admin API: five chunks, as no ConfigMap holds 2.6 MB.
    let component = oversized_component("wasched_fixture_pool_preference_green.wasm", 2_600_000);
    let sha256 = wasched::component::sha256_hex(&component);
    let (status, body) = standby.request(
        "PUT",
        &format!("/admin/plugins/PoolPreference?sha256={sha256}"),
        Some(("application/wasm", component.clone())),
    );
    assert_eq!(status, 201, "{body}");
    let (status, body) = standby.request(
        "PUT",
        "/admin/config",
        Some(("application/toml", POOL_CONFIG.into())),
    );
    assert_eq!(status, 200, "{body}");
    wait_for(
        "the leader to take in the plugin and the configuration",
        || {
            leader.uploaded_sha256("PoolPreference").as_deref() == Some(sha256.as_str())
                && leader.config() == POOL_CONFIG
        },
    );
    let chunks = policy_chunks(&api);
    assert_eq!(chunks.len(), component.len().div_ceil(512 * 1024));
    for chunk in &chunks {
        let encoded = chunk["binaryData"]["component.part"]
            .as_str()
            .unwrap()
            .len();
        assert!(
            encoded < 1 << 20,
            "a chunk of {encoded} bytes exceeds 1 MiB"
        );
        assert_eq!(chunk["immutable"], json!(true));
    }

    // The plugin prefers pool=green: without it, the default scores would spread the pods.
    for i in 0..6 {
        api.create(&pod(&format!("first-{i}"), "1", json!({})));
    }
    wait_for("the first pods", || api.all_bound());
    leader.kill9();
    for i in 0..6 {
        api.create(&pod(&format!("second-{i}"), "1", json!({})));
    }
    wait_for("the standby to lead", || standby.leads());
    wait_for("the second pods", || api.all_bound());
    for (name, pod) in api.pods() {
        assert_eq!(pod["spec"]["nodeName"], json!("green-1"), "{name}");
    }

    // A replica started now loads the policy from the cluster.
    let late = Decider::start(&api, "policy-c", &FAST_LEASE);
    assert_eq!(
        late.uploaded_sha256("PoolPreference").as_deref(),
        Some(sha256.as_str())
    );
    assert_eq!(late.config(), POOL_CONFIG);

    // Removed through that replica: the leader drops it, and its chunks are deleted.
    let plain = "[[profiles]]\nscheduler_name = \"default-scheduler\"\n";
    let (status, body) = late.request(
        "PUT",
        "/admin/config",
        Some(("application/toml", plain.into())),
    );
    assert_eq!(status, 200, "{body}");
    let (status, body) = late.request("DELETE", "/admin/plugins/PoolPreference", None);
    assert_eq!(status, 200, "{body}");
    wait_for("the leader to drop the plugin", || {
        standby.uploaded_sha256("PoolPreference").is_none() && standby.config() == plain
    });
    assert!(policy_chunks(&api).is_empty(), "unused chunks are deleted");
    assert!(standby.metric("wasched_policy_adopted_total") >= 2);
}

#[test]
fn a_pod_with_a_waiting_claim_is_bound_once_the_pv_controller_bound_the_volume_it_chose() {
    let api = ApiServer::start();
    for name in ["n1", "n2"] {
        let mut n = node(name, "a", "4");
        n["metadata"]["labels"]["kubernetes.io/hostname"] = json!(name);
        api.create(&n);
    }
    api.create(&json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "local-storage"},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer"
    }));
    api.create(&json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": "local-n2"},
        "spec": {
            "capacity": {"storage": "100Gi"}, "accessModes": ["ReadWriteOnce"],
            "storageClassName": "local-storage", "local": {"path": "/mnt/disks/ssd0"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n2"]}
            ]}]}}
        },
        "status": {"phase": "Available"}
    }));
    api.create(&json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": "default"},
        "spec": {
            "accessModes": ["ReadWriteOnce"], "storageClassName": "local-storage",
            "resources": {"requests": {"storage": "50Gi"}}
        },
        "status": {"phase": "Pending"}
    }));
    api.create(&pod(
        "db",
        "1",
        json!({"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}),
    ));
    let _scheduler = Decider::start(&api, "volume-binding", &[]);
    let claim_uid = api
        .call(
            "GET",
            "/api/v1/namespaces/default/persistentvolumeclaims/data",
            None,
        )
        .1["metadata"]["uid"]
        .clone();

    // PreBind: the scheduler reserves the volume of n2 for the claim, and waits.
    wait_for("the volume is reserved for the claim", || {
        let pv = api
            .call("GET", "/api/v1/persistentvolumes/local-n2", None)
            .1;
        pv["spec"]["claimRef"]["name"] == "data" && pv["spec"]["claimRef"]["uid"] == claim_uid
    });
    let pv = api
        .call("GET", "/api/v1/persistentvolumes/local-n2", None)
        .1;
    assert_eq!(
        pv["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"], "yes",
        "{pv}"
    );
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(api.node_of("db"), None, "not bound before its volume is");

    // The PV controller completes the binding; the pod follows on the volume's node.
    let (_, mut claim) = api.call(
        "GET",
        "/api/v1/namespaces/default/persistentvolumeclaims/data",
        None,
    );
    claim["spec"]["volumeName"] = json!("local-n2");
    claim["metadata"]["annotations"] = json!({"pv.kubernetes.io/bind-completed": "yes"});
    let (status, reply) = api.call(
        "PUT",
        "/api/v1/namespaces/default/persistentvolumeclaims/data",
        Some(claim),
    );
    assert!(status < 300, "{status} {reply}");
    wait_for("the pod is bound", || api.node_of("db").is_some());
    assert_eq!(api.node_of("db").as_deref(), Some("n2"));
}

impl Decider {
    /// Whether the replica says it leads; false when it does not answer (it stopped).
    fn leads_now(&self) -> bool {
        let Ok(client) = Client::new(&Connection {
            server: self.url.clone(),
            token_file: None,
        }) else {
            return false;
        };
        client.request("GET", "/metrics", None).is_ok_and(|reply| {
            reply
                .body
                .lines()
                .any(|l| l == "leader_election_master_status{name=\"wasched\"} 1")
        })
    }
}

/// A TCP proxy in front of the API server for one replica. [`Proxy::hang`] makes it stop
/// forwarding in both directions, on open connections and new ones alike, as a proxy stopped
/// with SIGSTOP does: requests neither answer nor fail.
struct Proxy {
    url: String,
    hung: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Proxy {
    fn start(target: &str) -> Proxy {
        use std::io::{Read, Write};
        use std::net::{Shutdown, TcpListener, TcpStream};
        use std::sync::atomic::{AtomicBool, Ordering};
        let target = target.trim_start_matches("http://").to_string();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let hung = std::sync::Arc::new(AtomicBool::new(false));
        let hold = hung.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { break };
                let Ok(server) = TcpStream::connect(&target) else {
                    continue;
                };
                let pairs = [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ];
                for (mut from, mut to) in pairs {
                    let hold = hold.clone();
                    std::thread::spawn(move || {
                        let wait = || {
                            while hold.load(Ordering::Relaxed) {
                                std::thread::sleep(Duration::from_millis(20));
                            }
                        };
                        let mut buffer = [0u8; 16 * 1024];
                        loop {
                            wait();
                            let n = match from.read(&mut buffer) {
                                Ok(0) | Err(_) => break,
                                Ok(n) => n,
                            };
                            // Bytes read just as the proxy hung are held until it resumes.
                            wait();
                            if to.write_all(&buffer[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(Shutdown::Write);
                    });
                }
            }
        });
        Proxy { url, hung }
    }

    fn hang(&self) {
        self.hung.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

#[test]
fn a_leader_whose_api_server_hangs_stops_leading_before_a_standby_takes_over() {
    let api = ApiServer::start();
    api.create(&node("n1", "zone-a", "64"));
    let proxy = Proxy::start(&api.url);
    let timing = [
        "--leader-elect-lease-duration",
        "4s",
        "--leader-elect-renew-deadline",
        "3s",
        "--leader-elect-retry-period",
        "1s",
    ];
    let a = Decider::start_at(&proxy.url, "hang-a", &timing);
    wait_for("the replica behind the proxy to lead", || a.leads_now());
    let b = Decider::start(&api, "hang-b", &timing);
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!b.leads_now(), "b stands by while a renews");

    proxy.hang();
    let hung = Instant::now();
    let mut b_leads_after = None;
    while hung.elapsed() < Duration::from_secs(10) {
        let (a_leads, b_leads) = (a.leads_now(), b.leads_now());
        assert!(
            !(a_leads && b_leads),
            "two leaders {:?} after the API server hung",
            hung.elapsed()
        );
        if b_leads && b_leads_after.is_none() {
            b_leads_after = Some(hung.elapsed());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let taken = b_leads_after.expect("the standby took over");
    eprintln!("standby leads {taken:?} after the leader's API server hung (lease 4s, renew 3s)");
    assert!(!a.leads_now(), "the hung leader stopped");
    api.create(&pod("after-the-hang", "1", json!({})));
    wait_for("the new leader to bind", || {
        api.node_of("after-the-hang").is_some()
    });
}

/// The policy index ConfigMap as anyone allowed to edit ConfigMaps could write it.
fn policy_index(plugins: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "wasched-policy", "namespace": "default"},
        "data": {"policy.json": json!({"plugins": plugins}).to_string()}})
}

#[test]
fn a_policy_index_that_lies_is_refused_and_every_replica_stays_up_and_schedules() {
    let api = ApiServer::start();
    api.create(&node("n1", "zone-a", "8"));
    let sha256 = "ab".repeat(32);
    // Written before any replica starts: a component of 64 GiB.
    let (status, body) = api.call(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some(policy_index(
            json!([{"name": "Huge", "sha256": sha256, "size": 68_719_476_736u64,
            "version": "1", "uploaded_at": 0, "chunks": 131_072}]),
        )),
    );
    assert!(status < 300, "{status} {body}");
    let decider = Decider::start(&api, "bad-index", &FAST_LEASE);
    assert!(decider.metric("wasched_policy_adopt_failures_total") >= 1);
    api.create(&pod("first", "1", json!({})));
    wait_for("a pod to be bound", || api.node_of("first").is_some());

    // Rewritten while it runs: a path as a name and as a digest.
    let failures = decider.metric("wasched_policy_adopt_failures_total");
    let (status, body) = api.call(
        "PATCH",
        "/api/v1/namespaces/default/configmaps/wasched-policy",
        Some(json!({"data": policy_index(json!([
            {"name": "../../etc/passwd", "sha256": "../../../x", "size": 3, "version": "1",
             "uploaded_at": 0, "chunks": 1}]))["data"]})),
    );
    assert!(status < 300, "{status} {body}");
    wait_for("the change to be refused", || {
        decider.metric("wasched_policy_adopt_failures_total") > failures
    });
    let (_, plugins) = decider.get("/admin/plugins");
    assert!(!plugins.contains("passwd"), "{plugins}");
    let (_, maps) = api.call("GET", "/api/v1/namespaces/default/configmaps", None);
    assert_eq!(maps["items"].as_array().unwrap().len(), 1, "{maps}");

    // A replica started now (every restart of the old ones too) comes up and schedules.
    drop(decider);
    let restarted = Decider::start(&api, "bad-index-again", &FAST_LEASE);
    assert!(restarted.metric("wasched_policy_adopt_failures_total") >= 1);
    api.create(&pod("second", "1", json!({})));
    wait_for("a pod to be bound after the restart", || {
        api.node_of("second").is_some()
    });
}

#[test]
fn a_fit_error_longer_than_an_event_holds_is_cut_in_the_event_and_kept_whole_in_the_condition() {
    let api = ApiServer::start();
    for i in 0..40 {
        let mut tainted = node(&format!("tainted-{i:02}"), "zone-a", "8");
        tainted["spec"] = json!({"taints": [{
            "key": format!("example.com/dedicated-to-a-team-with-a-long-name-{i:02}"),
            "value": format!("reserved-for-team-{i:02}-{}", "x".repeat(30)),
            "effect": "NoSchedule"}]});
        api.create(&tainted);
    }
    let decider = Decider::start(&api, "long-events", &[]);
    api.create(&pod("unwelcome", "1", json!({})));
    let failed_event = || {
        api.events()
            .into_iter()
            .find(|e| e["reason"] == "FailedScheduling")
    };
    wait_for("the FailedScheduling event", || failed_event().is_some());
    let note = failed_event().unwrap()["note"]
        .as_str()
        .unwrap()
        .to_string();
    let condition = api.pods()["unwelcome"]["status"]["conditions"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(condition.len() > 5_000, "{} bytes", condition.len());
    assert!(note.len() <= 1024, "{} bytes", note.len());
    assert!(note.ends_with(" ..."), "{note}");
    assert!(condition.starts_with(&note[..note.len() - 4]));
    assert_eq!(decider.metric_total("wasched_api_write_failures_total"), 0);
}

#[test]
fn a_pod_that_cannot_be_read_is_told_why_and_the_others_are_scheduled() {
    let api = ApiServer::start();
    api.create(&node("n1", "zone-a", "8"));
    // In the first list: one pod whose containers are not a list, one whose request is no
    // quantity.
    let mut shapeless = pod("shapeless", "1", json!({}));
    shapeless["spec"]["containers"] = json!("not a list");
    api.create(&shapeless);
    api.create(&pod("lots", "lots", json!({})));
    api.create(&pod("fine-0", "1", json!({})));
    let decider = Decider::start(&api, "unreadable", &[]);
    wait_for("the readable pod to be bound", || {
        api.node_of("fine-0").is_some()
    });
    let condition = |name: &str| api.pods()[name]["status"]["conditions"][0].clone();
    wait_for("both unreadable pods to be told", || {
        !condition("shapeless").is_null() && !condition("lots").is_null()
    });
    for (name, field) in [
        ("shapeless", "spec.containers: invalid type"),
        ("lots", "lots"),
    ] {
        let told = condition(name);
        assert_eq!(told["type"], "PodScheduled", "{name}: {told}");
        assert_eq!(told["status"], "False", "{name}: {told}");
        assert_eq!(told["reason"], "SchedulerError", "{name}: {told}");
        let message = told["message"].as_str().unwrap();
        assert!(
            message.starts_with("the pod cannot be read: ") && message.contains(field),
            "{name}: {message}"
        );
        assert!(api.node_of(name).is_none(), "{name}");
    }
    // Events are recorded in the background, after the condition.
    let told_by_event = |name: &str| {
        api.events()
            .iter()
            .any(|e| e["reason"] == "FailedScheduling" && e["regarding"]["name"] == name)
    };
    wait_for("both FailedScheduling events", || {
        told_by_event("shapeless") && told_by_event("lots")
    });
    let events = api.events();
    for name in ["shapeless", "lots"] {
        assert!(
            events
                .iter()
                .any(|e| e["reason"] == "FailedScheduling" && e["regarding"]["name"] == name),
            "{name}: {events:?}"
        );
    }
    api.create(&pod("fine-1", "1", json!({})));
    wait_for("a later pod to be bound", || {
        api.node_of("fine-1").is_some()
    });
    assert_eq!(decider.get("/readyz").0, 200);
}

#[test]
fn a_binding_the_api_server_never_answers_is_given_up_after_the_request_timeout_and_sent_again() {
    let api = ApiServer::start();
    api.create(&node("n1", "zone-a", "64"));
    let decider = Decider::start(&api, "hung-binding", &[]);
    // The first binding is answered in an hour: as good as never.
    api.call(
        "POST",
        "/_test/slow-bindings",
        Some(json!({"seconds": 3600, "count": 1})),
    );
    api.create(&pod("stuck", "1", json!({})));
    let created = Instant::now();
    wait_for("the binding to be given up and sent again", || {
        api.counts()["POST pods/binding"] == json!(2)
    });
    let given_up = created.elapsed();
    let timeout = wasched::server::kubernetes::REQUEST_TIMEOUT;
    assert!(
        given_up >= timeout && given_up < timeout + Duration::from_secs(5),
        "{given_up:?}"
    );
    wait_for("the pod to be bound", || api.node_of("stuck").is_some());
    assert_eq!(
        decider.metric("wasched_api_write_failures_total{kind=\"binding\"}"),
        1
    );
}

/// One write the scheduler made to the API server, in the words `tests/backends/two-cycles.txt`
/// uses for every backend; `None` for writes the other backends have no counterpart of (Events,
/// the Lease, a victim's `DisruptionTarget` mark, a condition that changes no nomination).
fn described_write(write: &Value) -> Option<String> {
    let path = write["path"].as_str()?;
    let body = &write["body"];
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (write["method"].as_str()?, segments.as_slice()) {
        ("PUT", [.., "persistentvolumeclaims", name]) => Some(format!(
            "claim {:?} volumeName={:?} selectedNode={:?}",
            Some(*name),
            body["spec"]["volumeName"].as_str(),
            body["metadata"]["annotations"]["volume.kubernetes.io/selected-node"].as_str(),
        )),
        ("POST", [.., "pods", name, "binding"]) => Some(format!(
            "pod {:?} node={:?} nominated=None",
            Some(*name),
            body["target"]["name"].as_str(),
        )),
        ("DELETE", [.., "pods", name]) => Some(format!("delete Pod {name:?}")),
        ("PATCH", [.., "pods", name, "status"]) => {
            let nominated = body["status"]["nominatedNodeName"].as_str()?;
            Some(format!(
                "pod {:?} node=None nominated={:?}",
                Some(*name),
                Some(nominated)
            ))
        }
        _ => None,
    }
}

#[test]
fn the_api_server_backend_makes_the_writes_the_memory_and_store_backends_make_in_the_same_order() {
    let api = ApiServer::start();
    api.create(&node("node-a", "a", "2"));
    api.create(&json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "wffc"},
        "provisioner": "example.com/disk",
        "volumeBindingMode": "WaitForFirstConsumer"
    }));
    api.create(&json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": "default"},
        "spec": {
            "accessModes": ["ReadWriteOnce"], "storageClassName": "wffc",
            "resources": {"requests": {"storage": "1Gi"}}
        },
        "status": {"phase": "Pending"}
    }));
    api.create(&pod(
        "low",
        "1500m",
        json!({"nodeName": "node-a", "priority": -10}),
    ));
    api.create(&pod(
        "app",
        "500m",
        json!({"priority": 0, "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}),
    ));
    let test_agent = api.call("GET", "/_test/writes", None).1[0]["userAgent"].clone();
    let _scheduler = Decider::start(&api, "backends", &[]);
    let claim_path = "/api/v1/namespaces/default/persistentvolumeclaims/data";

    // The provisioner and the PV controller, played by the test: the claim marked with its node
    // is bound to a new volume.
    wait_for("PreBind marks the claim with its node", || {
        api.call("GET", claim_path, None).1["metadata"]["annotations"]
            ["volume.kubernetes.io/selected-node"]
            == "node-a"
    });
    api.create(&json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": "pv-data"},
        "spec": {
            "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "storageClassName": "wffc",
            "claimRef": {"namespace": "default", "name": "data"}
        },
        "status": {"phase": "Bound"}
    }));
    let (_, mut claim) = api.call("GET", claim_path, None);
    claim["spec"]["volumeName"] = json!("pv-data");
    claim["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] = json!("yes");
    let (status, reply) = api.call("PUT", claim_path, Some(claim));
    assert!(status < 300, "{status} {reply}");
    wait_for("the pod is bound", || api.node_of("app").is_some());

    api.create(&pod("high", "1500m", json!({"priority": 0})));
    wait_for("the victim is evicted", || !api.pods().contains_key("low"));

    let expected: Vec<&str> = include_str!("../backends/two-cycles.txt").lines().collect();
    let mut written = Vec::new();
    wait_for("the preemptor's nomination is written", || {
        let writes = api.call("GET", "/_test/writes", None).1;
        written = writes
            .as_array()
            .unwrap()
            .iter()
            .filter(|w| w["userAgent"] != test_agent)
            .filter_map(described_write)
            .collect();
        written.len() >= expected.len()
    });
    assert_eq!(written[..expected.len()], expected[..], "{written:#?}");
}

#[test]
fn a_gated_pod_keeps_its_scheduling_gated_condition_while_others_bind_and_binds_once_ungated() {
    let api = ApiServer::start();
    // Room for all 101 pods (1Gi each, 16Gi a node).
    for i in 0..8 {
        api.create(&node(&format!("n{i}"), "zone-a", "64"));
    }
    let gates = json!({"schedulingGates": [{"name": "example.com/quota"}]});
    api.create(&pod("gated", "100m", gates));
    for i in 0..100 {
        api.create(&pod(&format!("free-{i}"), "100m", json!({})));
    }
    // Without leader election: the emulator is one Python process, and with 200 writes queued
    // (a binding and an Event per pod) it answers a Lease renewal later than the renew deadline.
    let decider = Decider::start(&api, "gates", &["--leader-elect", "false"]);
    // Polled gently: the emulator is one Python process, and listing 101 pods every 50 ms
    // starves the scheduler's Lease renewals.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let bound = api
            .pods()
            .iter()
            .filter(|(name, p)| name.starts_with("free-") && !p["spec"]["nodeName"].is_null())
            .count();
        if bound == 100 {
            break;
        }
        assert!(Instant::now() < deadline, "{bound} of 100 pods bound");
        std::thread::sleep(Duration::from_millis(500));
    }
    wait_for("the SchedulingGated condition", || {
        !api.pods()["gated"]["status"]["conditions"].is_null()
    });
    let gated = api.pods()["gated"].clone();
    assert!(gated["spec"]["nodeName"].is_null(), "{gated}");
    let conditions = gated["status"]["conditions"].as_array().unwrap();
    assert_eq!(conditions.len(), 1, "{gated}");
    assert_eq!(conditions[0]["type"], "PodScheduled");
    assert_eq!(conditions[0]["status"], "False");
    assert_eq!(conditions[0]["reason"], "SchedulingGated");
    assert_eq!(
        conditions[0]["message"],
        "Scheduling is blocked due to non-empty scheduling gates"
    );
    // Written once, no Event about it, never counted as an attempt.
    let condition_writes = || {
        api.call("GET", "/_test/writes", None)
            .1
            .as_array()
            .unwrap()
            .iter()
            .filter(|w| {
                w["path"]
                    .as_str()
                    .is_some_and(|p| p.ends_with("/pods/gated/status"))
            })
            .count()
    };
    assert_eq!(condition_writes(), 1);
    assert!(
        !api.events()
            .iter()
            .any(|e| e["regarding"]["name"] == "gated"),
        "{:?}",
        api.events()
    );
    let (_, metrics) = decider.get("/metrics");
    assert!(
        metrics.contains("scheduler_pending_pods{queue=\"gated\"} 1"),
        "{metrics}"
    );

    // The quota controller lifts the gate: the pod is bound at once, not after a backoff.
    let mut ungated = api.pods()["gated"].clone();
    ungated["spec"]
        .as_object_mut()
        .unwrap()
        .remove("schedulingGates");
    let (status, reply) = api.call(
        "PUT",
        "/api/v1/namespaces/default/pods/gated",
        Some(ungated),
    );
    assert!(status < 300, "{status} {reply}");
    let lifted = Instant::now();
    wait_for("the ungated pod to be bound", || {
        api.node_of("gated").is_some()
    });
    assert!(
        lifted.elapsed() < Duration::from_secs(1),
        "{:?}",
        lifted.elapsed()
    );
    assert_eq!(condition_writes(), 1);
}

#[test]
fn a_claim_is_allocated_before_the_binding_and_given_back_when_the_binding_is_refused() {
    let api = ApiServer::start();
    api.create(&node("n1", "a", "8"));
    api.create(&node("n2", "a", "8"));
    api.create(&json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": "gpu.example.com"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]}
    }));
    api.create(&json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": "n2-gpus"},
        "spec": {"driver": "gpu.example.com", "nodeName": "n2",
            "pool": {"name": "n2", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0", "attributes": {"model": {"string": "a100"}}}]}
    }));
    api.create(&json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "gpu", "namespace": "default"},
        "spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}
        ]}}
    }));
    api.call(
        "POST",
        "/_test/fail-bindings",
        Some(json!({"status": 500, "count": 1})),
    );
    let decider = Decider::start(&api, "dra", &[]);
    api.create(&pod(
        "trainer",
        "1",
        json!({"resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu"}]}),
    ));
    wait_for("the pod to be bound", || api.node_of("trainer").is_some());
    assert_eq!(
        api.node_of("trainer").as_deref(),
        Some("n2"),
        "only n2 has a GPU"
    );

    let (_, claim) = api.call(
        "GET",
        "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/gpu",
        None,
    );
    let pod_uid = api.pods()["trainer"]["metadata"]["uid"].clone();
    let allocation = &claim["status"]["allocation"];
    assert_eq!(
        allocation["devices"]["results"],
        json!([{"request": "gpu", "driver": "gpu.example.com", "pool": "n2", "device": "gpu-0"}]),
        "{claim}"
    );
    assert_eq!(
        allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"],
        json!(["n2"])
    );
    assert_eq!(
        claim["status"]["reservedFor"],
        json!([{"resource": "pods", "name": "trainer", "uid": pod_uid}])
    );
    assert_eq!(
        claim["metadata"]["finalizers"],
        json!(["resource.kubernetes.io/delete-protection"])
    );

    // In order: the claim written, the refused binding, the claim given back, then written
    // again before the binding that worked.
    let (_, writes) = api.call("GET", "/_test/writes", None);
    let steps: Vec<String> = writes
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| {
            let path = w["path"].as_str().unwrap();
            if path.ends_with("/pods/trainer/binding") {
                Some("bind".to_string())
            } else if path.ends_with("/resourceclaims/gpu/status") {
                let allocated = !w["body"]["status"]["allocation"].is_null();
                Some(if allocated { "allocate" } else { "give back" }.to_string())
            } else {
                None
            }
        })
        .collect();
    assert_eq!(steps, ["allocate", "bind", "give back", "allocate", "bind"]);
    assert_eq!(
        decider.metric("wasched_api_write_failures_total{kind=\"binding\"}"),
        1
    );
}

fn gang_pod(name: &str, group: &str) -> Value {
    let mut pod = pod(name, "3", json!({}));
    pod["metadata"]["labels"] = json!({"scheduling.x-k8s.io/pod-group": group});
    pod
}

impl ApiServer {
    /// Serves PodGroups from now on, as a cluster where scheduler-plugins' CRD was installed.
    fn install_pod_groups(&self) {
        let crd = json!({"resource": "scheduling.x-k8s.io/v1alpha1/podgroups", "kind": "PodGroup",
            "namespaced": true, "subresources": ["status"]});
        let (status, reply) = self.call("POST", "/_test/install", Some(crd));
        assert_eq!(status, 200, "{reply}");
    }

    fn pod_group(&self, name: &str) -> Value {
        let path =
            format!("/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/podgroups/{name}");
        self.call("GET", &path, None).1
    }

    fn bindings(&self) -> u64 {
        self.counts()["POST pods/binding"].as_u64().unwrap_or(0)
    }
}

/// Two replicas, a gang of three of which two fit: the leader holds two members at Permit and
/// binds none; killed, the standby takes over and holds them again, still binding none; a third
/// node lets the whole gang be bound together. The leader keeps the PodGroup's status as
/// coscheduling's controller would (PreScheduling, then Scheduled with 3 scheduled).
#[test]
fn a_gang_waiting_at_permit_through_a_failover_is_bound_whole_or_not_at_all() {
    let api = ApiServer::start();
    api.install_pod_groups();
    api.create(&node("n1", "zone-a", "4"));
    api.create(&node("n2", "zone-a", "4"));
    let config = crate::support::repo_root().join("examples/configs/gangs.toml");
    let config = config.to_str().unwrap();
    let mut extra = FAST_LEASE.to_vec();
    extra.extend(["--config", config]);
    let a = Decider::start(&api, "gang-a", &extra);
    let b = Decider::start(&api, "gang-b", &extra);
    wait_for("one leader", || {
        u8::from(a.leads()) + u8::from(b.leads()) == 1
    });
    let group = json!({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "default"},
        "spec": {"minMember": 3, "scheduleTimeoutSeconds": 30}});
    let path = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/podgroups";
    let (status, reply) = api.call("POST", path, Some(group));
    assert!(status < 300, "{reply}");
    wait_for("the leader to write the new group's status", || {
        api.pod_group("train")["status"]["phase"] == "Pending"
    });
    for i in 0..3 {
        api.create(&gang_pod(&format!("worker-{i}"), "train"));
    }
    let (leader, standby) = if a.leads() { (a, b) } else { (b, a) };
    wait_for("two members to wait at Permit", || {
        leader.metric_total("wasched_permit_waits_total") >= 2
    });
    wait_for("the status PreScheduling", || {
        api.pod_group("train")["status"]["phase"] == "PreScheduling"
    });
    assert_eq!(api.bindings(), 0, "no member bound while the gang is short");

    leader.kill9();
    wait_for("the standby to lead", || standby.leads());
    wait_for("the new leader to hold two members at Permit", || {
        standby.metric_total("wasched_permit_waits_total") >= 2
    });
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        api.bindings(),
        0,
        "no member bound alone after the failover"
    );

    api.create(&node("n3", "zone-a", "4"));
    wait_for("the gang to be bound", || api.all_bound());
    assert_eq!(api.bindings(), 3, "each member bound once");
    let nodes: std::collections::BTreeSet<String> = (0..3)
        .filter_map(|i| api.node_of(&format!("worker-{i}")))
        .collect();
    assert_eq!(nodes.len(), 3, "one member a node: {nodes:?}");
    wait_for("the status Scheduled", || {
        let status = &api.pod_group("train")["status"];
        status["phase"] == "Scheduled" && status["scheduled"] == 3
    });
    assert!(standby.metric("wasched_podgroup_status_writes_total") >= 1);
}

#[test]
fn a_shadow_set_through_a_standby_runs_on_the_leader_only_and_its_promote_reaches_every_replica() {
    use crate::server::shadow::{ZONE_PLUGIN, ZONE_SHADOW};
    let api = ApiServer::start();
    api.create(&node("node-a", "a", "4"));
    api.create(&node("node-b", "b", "16"));
    let a = Decider::start(&api, "shadow-a", &FAST_LEASE);
    let b = Decider::start(&api, "shadow-b", &FAST_LEASE);
    wait_for("one leader", || {
        u8::from(a.leads()) + u8::from(b.leads()) == 1
    });
    let (leader, standby) = if a.leads() { (a, b) } else { (b, a) };
    let toml = |text: &str| Some(("application/toml", text.as_bytes().to_vec()));
    let (status, body) = standby.request("PUT", "/admin/config", toml(ZONE_PLUGIN));
    assert_eq!(status, 200, "{body}");
    let (status, body) = standby.request("PUT", "/admin/shadow", toml(ZONE_SHADOW));
    assert_eq!(status, 200, "{body}");
    wait_for("the leader to take in the shadow", || {
        leader.config().contains("[profiles.shadow]")
    });

    let shadows = |replica: &Decider| -> Value {
        let (status, body) = replica.get("/v1/status/shadow");
        assert_eq!(status, 200, "{body}");
        serde_json::from_str(&body).unwrap()
    };
    for i in 0..8 {
        api.create(&pod(&format!("first-{i}"), "300m", json!({})));
    }
    wait_for("the first pods", || api.all_bound());
    wait_for("the leader's shadow to compare every cycle", || {
        shadows(&leader)["shadows"][0]["compared"] == json!(8)
    });
    let on_b = api
        .pods()
        .values()
        .filter(|p| p["spec"]["nodeName"] == json!("node-b"))
        .count() as u64;
    let report = shadows(&leader);
    let counts = &report["shadows"][0]["counts"];
    let disagreed = counts["different"].as_u64().unwrap() + counts["tie"].as_u64().unwrap();
    assert_eq!(disagreed, on_b, "{report}");
    let idle = shadows(&standby);
    assert_eq!(
        idle["shadows"],
        json!([]),
        "a standby runs no shadow: {idle}"
    );
    assert_eq!(idle["configured"], json!(["default-scheduler"]));

    // Promoted through the standby: the leader's next pods follow the shadow's choice.
    let (status, body) = standby.request("POST", "/admin/shadow/promote", None);
    assert_eq!(status, 200, "{body}");
    wait_for("the leader to take in the promotion", || {
        let config = leader.config();
        let live = config.split_once("[[profiles]]").map_or("", |(_, p)| p);
        live.split_once("[profiles.shadow]")
            .is_some_and(|(live, _)| live.contains("ZonePreference"))
    });
    for i in 0..4 {
        api.create(&pod(&format!("second-{i}"), "300m", json!({})));
    }
    wait_for("the second pods", || api.all_bound());
    for (name, pod) in api.pods() {
        if name.contains("second-") {
            assert_eq!(pod["spec"]["nodeName"], json!("node-a"), "{name}");
        }
    }
}
