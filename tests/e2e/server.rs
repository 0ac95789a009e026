//! `wasched serve` as users run it: the real binary on a free loopback port, driven over HTTP.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use wasched::server::client::{Client, Connection, Reply};

const TOKEN: &str = "test-token-5f1c";

fn fixture(file: &str) -> PathBuf {
    wasched_test_programs::component(file)
}

fn pool_v1() -> PathBuf {
    fixture("wasched_fixture_pool_preference.wasm")
}

fn pool_v2() -> PathBuf {
    fixture("wasched_fixture_pool_preference_green.wasm")
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wasched-serve-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A running `wasched serve`, killed when dropped.
struct Server {
    child: Child,
    url: String,
    dir: PathBuf,
}

impl Server {
    fn start(dir: &Path, extra: &[&str]) -> Server {
        let token_file = dir.join("token");
        std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_wasched"))
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.join("data"))
            .arg("--token-file")
            .arg(&token_file)
            .args(extra)
            .env("WASCHED_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start wasched serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .trim()
            .strip_prefix("wasched listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        let server = Server {
            child,
            url,
            dir: dir.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while server
            .anonymous()
            .request("GET", "/readyz", None)
            .unwrap()
            .status
            != 200
        {
            assert!(Instant::now() < deadline, "server not ready in 60s");
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    fn client_with(&self, token_file: Option<PathBuf>) -> Client {
        Client::new(&Connection {
            server: self.url.clone(),
            token_file,
        })
        .unwrap()
    }

    fn admin(&self) -> Client {
        self.client_with(Some(self.dir.join("token")))
    }

    fn anonymous(&self) -> Client {
        self.client_with(None)
    }

    fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn send(client: &Client, method: &str, path: &str, body: Value) -> Reply {
    client
        .request(
            method,
            path,
            Some(("application/json", body.to_string().into_bytes())),
        )
        .unwrap()
}

fn ok(reply: Reply) -> Value {
    let status = reply.status;
    let body = reply.body.clone();
    reply
        .ok_json()
        .unwrap_or_else(|e| panic!("HTTP {status}: {e}: {body}"))
}

fn pool_node(name: &str, pool: &str) -> Value {
    json!({
        "kind": "Node",
        "metadata": { "name": name, "labels": { "pool": pool, "kubernetes.io/hostname": name } },
        "status": { "allocatable": { "cpu": "64", "memory": "256Gi", "pods": "1000" } }
    })
}

fn small_pod(name: &str) -> Value {
    json!({
        "kind": "Pod",
        "metadata": { "name": name },
        "spec": { "containers": [{ "name": "c", "resources": { "requests": { "cpu": "10m", "memory": "16Mi" } } }] }
    })
}

const POOL_CONFIG: &str = r#"
[[profiles]]
scheduler_name = "default-scheduler"
scores = [{ plugin = "PoolPreference", weight = 100 }, { plugin = "NodeResourcesFit", weight = 1 }]
"#;

fn upload(client: &Client, name: &str, file: &Path) -> Reply {
    client
        .request(
            "PUT",
            &format!("/admin/plugins/{name}"),
            Some(("application/wasm", std::fs::read(file).unwrap())),
        )
        .unwrap()
}

/// A `multipart/form-data` upload, as `curl -F name=... -F component=@file.wasm` sends it.
fn upload_form(client: &Client, fields: &[(&str, &[u8])]) -> Reply {
    let boundary = "wasched-test-boundary-7d2a";
    let mut body = Vec::new();
    for (name, value) in fields {
        body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        let filename = if *name == "component" {
            "; filename=\"plugin.wasm\""
        } else {
            ""
        };
        body.extend_from_slice(
            format!("Content-Disposition: form-data; name=\"{name}\"{filename}\r\n\r\n").as_bytes(),
        );
        body.extend_from_slice(value);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    let content_type = format!("multipart/form-data; boundary={boundary}");
    client
        .request("POST", "/admin/plugins", Some((&content_type, body)))
        .unwrap()
}

fn pods(client: &Client, namespace: &str) -> Vec<Value> {
    let list = ok(client
        .request("GET", &format!("/v1/namespaces/{namespace}/pods"), None)
        .unwrap());
    list["items"].as_array().unwrap().clone()
}

fn node_of(pod: &Value) -> Option<String> {
    pod["spec"]["nodeName"].as_str().map(str::to_string)
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn metric(client: &Client, series: &str) -> f64 {
    let text = client.request("GET", "/metrics", None).unwrap().body;
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
        .unwrap_or(0.0)
}

/// Reads the watch stream in the background, collecting events.
fn watch(url: &str, from: &str) -> (Arc<Mutex<Vec<Value>>>, Arc<AtomicBool>) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let (e, s) = (events.clone(), stop.clone());
    let url = format!("{url}/v1/watch?resourceVersion={from}");
    std::thread::spawn(move || {
        let response = ureq::get(&url).call().expect("watch");
        assert_eq!(response.status().as_u16(), 200);
        let reader = BufReader::new(response.into_body().into_reader());
        for line in reader.lines() {
            let Ok(line) = line else { break };
            if let Some(data) = line.strip_prefix("data: ") {
                e.lock().unwrap().push(serde_json::from_str(data).unwrap());
            }
            if s.load(Ordering::Relaxed) {
                break;
            }
        }
    });
    (events, stop)
}

#[test]
fn hot_swap_under_load_loses_no_pod_and_switches_placements_at_one_cycle_boundary() {
    let dir = temp_dir("swap");
    let server = Server::start(&dir, &[]);
    let admin = server.admin();
    assert_eq!(upload(&admin, "PoolPreference", &pool_v1()).status, 201);
    ok(admin
        .request(
            "PUT",
            "/admin/config",
            Some(("application/toml", POOL_CONFIG.into())),
        )
        .unwrap());
    let mut pool_of = HashMap::new();
    for i in 0..10 {
        let (name, pool) = (
            format!("node-{i}"),
            if i % 2 == 0 { "blue" } else { "green" },
        );
        ok(send(&admin, "POST", "/v1/nodes", pool_node(&name, pool)));
        pool_of.insert(name, pool);
    }
    let list = ok(admin.request("GET", "/v1/pods", None).unwrap());
    let (events, stop_watch) = watch(
        &server.url,
        list["metadata"]["resourceVersion"].as_str().unwrap(),
    );

    // One client creates pods without pause; the swap happens while it runs.
    const PODS: usize = 1200;
    let url = server.url.clone();
    let swapped_at = Arc::new(Mutex::new(None::<usize>));
    let created = Arc::new(Mutex::new(Vec::new()));
    let (swapped, made) = (swapped_at.clone(), created.clone());
    let creator = std::thread::spawn(move || {
        let client = Client::new(&Connection {
            server: url,
            token_file: None,
        })
        .unwrap();
        for i in 0..PODS {
            // Read before the request is sent: a pod counts as created after the swap only when
            // the upload had been answered before its creation began.
            let after_swap = swapped.lock().unwrap().is_some();
            let reply = send(
                &client,
                "POST",
                "/v1/namespaces/load/pods",
                small_pod(&format!("p{i:04}")),
            );
            assert_eq!(reply.status, 201, "create p{i}: {}", reply.body);
            made.lock()
                .unwrap()
                .push((format!("load/p{i:04}"), after_swap));
        }
    });
    wait_until("a third of the pods exist", Duration::from_secs(60), || {
        created.lock().unwrap().len() >= PODS / 3
    });
    let started = Instant::now();
    let reply = upload(&admin, "PoolPreference", &pool_v2());
    let swap_seconds = started.elapsed().as_secs_f64();
    assert_eq!(reply.status, 200, "{}", reply.body);
    *swapped_at.lock().unwrap() = Some(created.lock().unwrap().len());
    creator.join().unwrap();

    wait_until("every pod is bound", Duration::from_secs(60), || {
        pods(&admin, "load").iter().all(|p| node_of(p).is_some())
    });
    wait_until(
        "the watch saw every binding",
        Duration::from_secs(10),
        || events.lock().unwrap().len() >= PODS,
    );
    stop_watch.store(true, Ordering::Relaxed);

    let stored = pods(&admin, "load");
    assert_eq!(stored.len(), PODS, "no pod lost");
    let events = events.lock().unwrap().clone();
    let mut bindings: HashMap<String, usize> = HashMap::new();
    for e in &events {
        assert_eq!(e["type"], "Scheduled", "no failed cycle: {e}");
        *bindings
            .entry(e["pod"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    assert_eq!(bindings.len(), PODS, "every pod bound");
    assert!(bindings.values().all(|&n| n == 1), "no pod bound twice");
    // In cycle order (the order of the binding writes), pools go blue... then green..., once.
    let pools: Vec<&str> = events
        .iter()
        .map(|e| pool_of[e["node"].as_str().unwrap()])
        .collect();
    let switch = pools
        .iter()
        .position(|&p| p == "green")
        .expect("v2 placed pods");
    assert!(switch > 0, "v1 placed pods before the swap");
    assert!(
        pools[switch..].iter().all(|&p| p == "green"),
        "after the first v2 placement, every placement is v2's"
    );
    // Pods created after the upload was answered are all placed by v2.
    let stored_node: HashMap<String, String> = stored
        .iter()
        .map(|p| {
            (
                format!("load/{}", p["metadata"]["name"].as_str().unwrap()),
                node_of(p).unwrap(),
            )
        })
        .collect();
    let made = created.lock().unwrap().clone();
    let after: Vec<&(String, bool)> = made.iter().filter(|(_, after)| *after).collect();
    assert!(!after.is_empty());
    for (pod, _) in after {
        assert_eq!(
            pool_of[stored_node[pod].as_str()],
            "green",
            "{pod} was created after the swap"
        );
    }
    assert_eq!(
        metric(
            &admin,
            "scheduler_schedule_attempts_total{result=\"error\",profile=\"default-scheduler\"}"
        ),
        0.0
    );
    assert_eq!(
        metric(&admin, "wasched_hot_swaps_total"),
        2.0,
        "config apply + v2"
    );
    let pause = metric(&admin, "wasched_hot_swap_pause_seconds_sum");
    eprintln!(
        "hot swap under load: {PODS} pods, {} placed by v1 before the swap; upload-to-swap {swap_seconds:.3}s; scheduling paused {:.1}µs in total for 2 swaps; 0 failed cycles",
        switch,
        pause * 1e6
    );
}

#[test]
fn acknowledged_objects_plugins_and_config_survive_kill_9() {
    let dir = temp_dir("durable");
    let server = Server::start(&dir, &[]);
    let admin = server.admin();
    let component = std::fs::read(pool_v1()).unwrap();
    let sha256 = wasched::component::sha256_hex(&component);
    let form = upload_form(
        &admin,
        &[
            ("name", b"PoolPreference"),
            ("sha256", sha256.as_bytes()),
            ("component", &component),
        ],
    );
    assert_eq!(form.status, 201, "{}", form.body);
    ok(admin
        .request(
            "PUT",
            "/admin/config",
            Some(("application/toml", POOL_CONFIG.into())),
        )
        .unwrap());
    for i in 0..4 {
        ok(send(
            &admin,
            "POST",
            "/v1/nodes",
            pool_node(&format!("node-{i}"), if i < 2 { "blue" } else { "green" }),
        ));
    }
    for i in 0..50 {
        ok(send(
            &admin,
            "POST",
            "/v1/namespaces/d/pods",
            small_pod(&format!("early-{i}")),
        ));
    }
    wait_until("the early pods are bound", Duration::from_secs(30), || {
        pods(&admin, "d").iter().all(|p| node_of(p).is_some())
    });
    let bound_before: HashMap<String, String> = pods(&admin, "d")
        .iter()
        .map(|p| {
            (
                p["metadata"]["name"].as_str().unwrap().to_string(),
                node_of(p).unwrap(),
            )
        })
        .collect();
    // Acknowledged just before the kill: they may not have been scheduled yet.
    for i in 0..50 {
        ok(send(
            &admin,
            "POST",
            "/v1/namespaces/d/pods",
            small_pod(&format!("late-{i}")),
        ));
    }
    let plugins_before = ok(admin.request("GET", "/admin/plugins", None).unwrap());
    let last_version = ok(admin.request("GET", "/v1/pods", None).unwrap())["metadata"]
        ["resourceVersion"]
        .as_str()
        .unwrap()
        .parse::<u64>()
        .unwrap();
    server.kill9();

    let server = Server::start(&dir, &[]);
    let admin = server.admin();
    let config = admin.request("GET", "/admin/config", None).unwrap();
    assert_eq!(config.body, POOL_CONFIG, "the configuration came back");
    let gone = admin
        .request(
            "GET",
            &format!("/v1/watch?resourceVersion={}", last_version - 1),
            None,
        )
        .unwrap();
    assert_eq!(
        gone.status, 410,
        "history before the restart is gone: {}",
        gone.body
    );
    let plugins = ok(admin.request("GET", "/admin/plugins", None).unwrap());
    let uploaded = |list: &Value| {
        list["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "PoolPreference")
            .map(|p| (p["sha256"].clone(), p["usedBy"].clone()))
    };
    assert_eq!(uploaded(&plugins), uploaded(&plugins_before));
    assert!(uploaded(&plugins).is_some());
    let nodes = ok(admin.request("GET", "/v1/nodes", None).unwrap());
    assert_eq!(nodes["items"].as_array().unwrap().len(), 4);
    wait_until(
        "the late pods are bound after the restart",
        Duration::from_secs(30),
        || {
            let all = pods(&admin, "d");
            all.len() == 100 && all.iter().all(|p| node_of(p).is_some())
        },
    );
    for pod in pods(&admin, "d") {
        let name = pod["metadata"]["name"].as_str().unwrap();
        let node = node_of(&pod).unwrap();
        if let Some(before) = bound_before.get(name) {
            assert_eq!(&node, before, "{name} stayed where it was bound");
        }
        // The uploaded v1 (blue) plugin and its configuration were restored.
        assert!(
            node == "node-0" || node == "node-1",
            "{name} on {node}: placed by the restored plugin"
        );
    }
}

#[test]
fn bad_requests_get_a_clear_4xx_and_change_nothing() {
    let dir = temp_dir("bad");
    let config_file = dir.join("wasched.toml");
    std::fs::write(&config_file, "[runtime]\ndefault_plugins = \"wasm\"\n").unwrap();
    let config_arg = config_file.to_str().unwrap().to_string();
    let server = Server::start(
        &dir,
        &[
            "--config",
            &config_arg,
            "--max-request-bytes",
            "65536",
            "--max-component-bytes",
            "1048576",
        ],
    );
    let admin = server.admin();
    let anonymous = server.anonymous();
    ok(send(&admin, "POST", "/v1/nodes", pool_node("n1", "blue")));
    let state = |c: &Client| {
        (
            c.request("GET", "/v1/nodes", None).unwrap().body,
            c.request("GET", "/v1/pods", None).unwrap().body,
            admin
                .request("GET", "/admin/plugins", None)
                .unwrap()
                .json()
                .unwrap()["plugins"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| (p["name"].clone(), p["sha256"].clone()))
                .collect::<Vec<_>>(),
            admin.request("GET", "/admin/config", None).unwrap().body,
        )
    };
    let before = state(&admin);

    let wrong_token_file = dir.join("wrong");
    std::fs::write(&wrong_token_file, "nope").unwrap();
    let wrong = server.client_with(Some(wrong_token_file));
    let component = std::fs::read(pool_v1()).unwrap();
    let cases: Vec<(&str, Reply, u16, &str)> = vec![
        ("malformed JSON", anonymous.request("POST", "/v1/nodes", Some(("application/json", b"{\"kind\": ".to_vec()))).unwrap(), 400, "invalid JSON"),
        ("malformed YAML", anonymous.request("POST", "/v1/objects", Some(("application/yaml", b"kind: [\n".to_vec()))).unwrap(), 400, "invalid YAML"),
        ("unknown kind", anonymous.request("POST", "/v1/objects", Some(("application/yaml", b"kind: Deployment\nmetadata: {name: d}\n".to_vec()))).unwrap(), 400, "unsupported kind(s) Deployment"),
        ("kind for another endpoint", send(&anonymous, "POST", "/v1/nodes", small_pod("p")), 400, "a Pod was sent to the Node endpoint"),
        ("invalid field", send(&anonymous, "POST", "/v1/namespaces/x/pods", json!({"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]}})), 400, "spec.containers[0].resources.requests.cpu"),
        ("one bad object of many", anonymous.request("POST", "/v1/objects", Some(("application/yaml", b"kind: Node\nmetadata: {name: fresh}\n---\nkind: Pod\nmetadata: {}\n".to_vec()))).unwrap(), 400, "no `metadata.name`"),
        ("duplicate create", send(&anonymous, "POST", "/v1/nodes", pool_node("n1", "green")), 409, "Node n1 already exists"),
        ("oversized body", anonymous.request("POST", "/v1/objects", Some(("application/yaml", vec![b'#'; 70_000]))).unwrap(), 413, "too large"),
        ("missing token", anonymous.request("PUT", "/admin/plugins/P", Some(("application/wasm", component.clone()))).unwrap(), 401, "bearer token"),
        ("wrong token", wrong.request("PUT", "/admin/config", Some(("application/toml", b"".to_vec()))).unwrap(), 403, "wrong bearer token"),
        ("not a component", admin.request("PUT", "/admin/plugins/P", Some(("application/wasm", b"\0asm garbage".to_vec()))).unwrap(), 400, "not a valid WebAssembly component"),
        ("sha256 mismatch", admin.request("PUT", &format!("/admin/plugins/P?sha256={}", "0".repeat(64)), Some(("application/wasm", component.clone()))).unwrap(), 400, "sha256 mismatch"),
        ("oversized component", admin.request("PUT", "/admin/plugins/P", Some(("application/wasm", vec![0; 2 << 20]))).unwrap(), 413, "too large"),
        ("form without a component", upload_form(&admin, &[("name", b"P")]), 400, "missing form field `component`"),
        ("bad plugin name", admin.request("PUT", "/admin/plugins/9lives", Some(("application/wasm", component.clone()))).unwrap(), 400, "invalid plugin name"),
        ("invalid TOML", admin.request("PUT", "/admin/config", Some(("application/toml", b"[runtime]\ndefault_plugins = \"wasm\"\n[[profiles]]\nfilters = [\"Nope\"]\n".to_vec()))).unwrap(), 400, ":4: unknown plugin \"Nope\""),
        ("TOML syntax", admin.request("PUT", "/admin/config", Some(("application/toml", b"x = [\n".to_vec()))).unwrap(), 400, ":1: "),
        ("remove unknown plugin", admin.request("DELETE", "/admin/plugins/Nope", None).unwrap(), 404, "no uploaded plugin"),
        ("unknown endpoint", anonymous.request("GET", "/v2/things", None).unwrap(), 404, "no such endpoint"),
    ];
    for (case, reply, status, fragment) in cases {
        assert_eq!(reply.status, status, "{case}: {}", reply.body);
        let body: Value = serde_json::from_str(&reply.body)
            .unwrap_or_else(|_| panic!("{case}: not a Status: {}", reply.body));
        assert_eq!(body["kind"], "Status", "{case}");
        let message = body["message"].as_str().unwrap();
        assert!(
            message.contains(fragment),
            "{case}: {message:?} lacks {fragment:?}"
        );
    }
    // A client asking first (`Expect: 100-continue`, as curl does) is refused before it sends
    // anything: the answer is the 413, not `100 Continue`.
    {
        use std::io::{Read as _, Write as _};
        let address = server.url.trim_start_matches("http://").to_string();
        let mut stream = std::net::TcpStream::connect(&address).unwrap();
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        write!(
            stream,
            "POST /v1/objects HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/yaml\r\nContent-Length: 10000000\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
        assert!(answer.contains("10000000 bytes, at most 65536"), "{answer}");
    }
    assert_eq!(state(&admin), before, "nothing changed");
    assert_eq!(
        std::fs::read_to_string(&config_file).unwrap(),
        "[runtime]\ndefault_plugins = \"wasm\"\n",
        "the config file is untouched"
    );

    // A plugin in use cannot be removed; the refusal names the profile.
    assert_eq!(upload(&admin, "PoolPreference", &pool_v1()).status, 201);
    ok(admin
        .request(
            "PUT",
            "/admin/config",
            Some(("application/toml", POOL_CONFIG.into())),
        )
        .unwrap());
    assert_eq!(
        std::fs::read_to_string(&config_file).unwrap(),
        POOL_CONFIG,
        "PUT wrote the --config file"
    );
    let refused = admin
        .request("DELETE", "/admin/plugins/PoolPreference", None)
        .unwrap();
    assert_eq!(refused.status, 409);
    assert!(
        refused
            .body
            .contains("used by profile(s) default-scheduler"),
        "{}",
        refused.body
    );

    // SIGHUP reloads the file.
    std::fs::write(&config_file, "[runtime]\ndefault_plugins = \"native\"\n").unwrap();
    let status = Command::new("kill")
        .args(["-HUP", &server.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    wait_until("SIGHUP reloaded the file", Duration::from_secs(20), || {
        admin
            .request("GET", "/admin/config", None)
            .unwrap()
            .body
            .contains("native")
    });
    assert_eq!(
        admin
            .request("DELETE", "/admin/plugins/PoolPreference", None)
            .unwrap()
            .status,
        200,
        "no longer used"
    );
}

#[test]
fn a_plugin_answering_invalid_scores_shows_its_failures_and_quarantine_where_operators_look() {
    let dir = temp_dir("failures");
    let server = Server::start(&dir, &[]);
    let admin = server.admin();
    assert_eq!(
        upload(
            &admin,
            "BadScore",
            &fixture("wasched_hostile_bad_score.wasm")
        )
        .status,
        201
    );
    let config = "[plugins.BadScore]\nquarantine_after = 2\nquarantine_seconds = 600\n\
                  [[profiles]]\nscheduler_name = \"default-scheduler\"\n\
                  scores = [{ plugin = \"BadScore\" }]\n";
    ok(admin
        .request(
            "PUT",
            "/admin/config",
            Some(("application/toml", config.as_bytes().to_vec())),
        )
        .unwrap());
    for name in ["n1", "n2"] {
        ok(send(&admin, "POST", "/v1/objects", pool_node(name, "blue")));
    }
    for k in 0..3 {
        ok(send(
            &admin,
            "POST",
            "/v1/objects",
            small_pod(&format!("p{k}")),
        ));
    }
    let bad_score = || {
        let plugins = ok(admin.request("GET", "/admin/plugins", None).unwrap());
        plugins["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "BadScore")
            .cloned()
            .unwrap()
    };
    wait_until("BadScore is quarantined", Duration::from_secs(20), || {
        bad_score()["quarantineSecondsLeft"].as_u64().is_some()
    });
    let entry = bad_score();
    assert_eq!(entry["errors"], 2, "{entry}");
    assert_eq!(entry["failures"]["invalid_result"], 2, "{entry}");
    assert!(entry["quarantineSecondsLeft"].as_u64().unwrap() > 500);
    assert_eq!(
        metric(
            &admin,
            "wasched_plugin_failures_total{plugin=\"BadScore\",kind=\"invalid_result\"}"
        ),
        2.0
    );
    assert!(
        metric(
            &admin,
            "wasched_plugin_quarantine_seconds_left{plugin=\"BadScore\"}"
        ) > 500.0
    );
    let table = wasched(&["plugin", "list"], Some(&server));
    let row = table
        .lines()
        .find(|l| l.starts_with("BadScore"))
        .expect("listed");
    assert!(row.contains("s left"), "{table}");
}

#[test]
fn the_cluster_api_refuses_what_an_api_server_refuses_and_skips_kinds_it_does_not_keep() {
    let dir = temp_dir("hostile");
    let server = Server::start(&dir, &[]);
    let client = server.admin();
    let post = |body: Vec<u8>| {
        client
            .request("POST", "/v1/objects", Some(("application/yaml", body)))
            .unwrap()
    };
    let refused = [
        (
            b"kind: Node\nmetadata: {name: ../../etc/passwd}\n".to_vec(),
            "metadata.name: Invalid value",
        ),
        (
            b"kind: Pod\nmetadata: {name: p, namespace: x/y}\nspec: {containers: []}\n".to_vec(),
            "metadata.namespace: Invalid value",
        ),
        (
            format!("kind: Node\nmetadata: {{name: n}}\nx: {}", "[".repeat(100_000)).into_bytes(),
            "nested deeper than 256 levels",
        ),
        (
            b"kind: Node\nmetadata: {name: n}\nstatus: {allocatable: {memory: 100Ei}}\n".to_vec(),
            "status.allocatable.memory",
        ),
        (
            b"kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, resources: {requests: {cpu: '-1'}}}]}\n"
                .to_vec(),
            "must be greater than or equal to 0",
        ),
    ];
    for (body, expected) in refused {
        let reply = post(body);
        assert_eq!(reply.status, 400, "{}", reply.body);
        assert!(reply.body.contains(expected), "{expected}: {}", reply.body);
    }
    let manifests = b"kind: Deployment\nmetadata: {name: web}\n---\n\
                      kind: Node\nmetadata: {name: n1}\nstatus: {capacity: {cpu: '4', pods: '10'}}\n"
        .to_vec();
    let applied = ok(post(manifests));
    assert_eq!(applied["items"][0]["name"], "n1", "{applied}");
    assert_eq!(applied["skipped"]["Deployment"], 1, "{applied}");
    let nodes = ok(client.request("GET", "/v1/nodes", None).unwrap());
    let names: Vec<&str> = nodes["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["n1"], "nothing refused was written");
}

#[test]
fn refuses_a_non_loopback_admin_api_without_a_token() {
    let dir = temp_dir("exposed");
    let output = Command::new(env!("CARGO_BIN_EXE_wasched"))
        .args(["serve", "--listen", "0.0.0.0:0", "--data-dir"])
        .arg(dir.join("data"))
        .env_remove(wasched::server::auth::ADMIN_TOKEN_ENV)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("without an admin token"), "{stderr}");
}

#[test]
fn a_plugin_directory_confines_the_components_a_configuration_names() {
    let dir = temp_dir("plugin-dir");
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::copy(pool_v1(), plugins.join("pool.wasm")).unwrap();
    let server = Server::start(&dir, &["--plugin-dir", plugins.to_str().unwrap()]);
    let admin = server.admin();
    let config = |component: &Path| {
        format!(
            "[plugins.PoolPreference]\ncomponent = {:?}\n{POOL_CONFIG}",
            component.display().to_string()
        )
        .into_bytes()
    };
    let put = |text: Vec<u8>| {
        admin
            .request("PUT", "/admin/config", Some(("application/toml", text)))
            .unwrap()
    };
    for outside in [
        pool_v1(),
        PathBuf::from("/etc/passwd"),
        plugins.join("../token"),
    ] {
        let reply = put(config(&outside));
        assert_eq!(reply.status, 400, "{}: {}", outside.display(), reply.body);
        assert!(
            reply.body.contains("outside the plugin directory"),
            "{}",
            reply.body
        );
        assert!(!reply.body.contains(TOKEN), "no byte of the file is echoed");
    }
    let inside = put(config(&plugins.join("pool.wasm")));
    assert_eq!(inside.status, 200, "{}", inside.body);
}

/// "Why is my pod Pending?" asked of a running server: the pod's queue and attempts, and every
/// node's verdict from a dry-run cycle against the live cache, which must be what
/// `simulate --explain` says for the same objects, and must not count as an attempt.
#[test]
fn explain_says_why_a_pending_pod_waits_as_simulate_does_without_an_attempt() {
    let dir = temp_dir("explain");
    let server = Server::start(&dir, &[]);
    let admin = server.admin();
    let node = |name: &str, cpu: &str, taints: Value| {
        json!({
            "kind": "Node",
            "metadata": { "name": name, "labels": { "kubernetes.io/hostname": name } },
            "spec": { "taints": taints },
            "status": { "allocatable": { "cpu": cpu, "memory": "16Gi", "pods": "110" } }
        })
    };
    let pod = |name: &str, cpu: &str| {
        json!({
            "kind": "Pod",
            "metadata": { "name": name, "namespace": "default" },
            "spec": { "containers": [{ "name": "c", "resources": { "requests": { "cpu": cpu } } }] }
        })
    };
    let objects = vec![
        node("small", "1", json!([])),
        node("big", "4", json!([])),
        node(
            "gpu",
            "64",
            json!([{ "key": "gpu", "value": "true", "effect": "NoSchedule" }]),
        ),
        pod("huge", "8"),
        pod("tiny", "100m"),
    ];
    let list = json!({ "kind": "List", "items": objects });
    ok(send(&admin, "POST", "/v1/objects", list.clone()));
    let stored = |name: &str| stored_pod(&admin, name);
    wait_until_failed_and_bound(&admin, "huge", "tiny");
    let attempts = |pod: &Value| {
        pod["metadata"]["annotations"]["scheduling.wasched.io/attempts"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let before = attempts(&stored("huge"));

    let explain = |name: &str| {
        admin
            .request(
                "GET",
                &format!("/v1/namespaces/default/pods/{name}/explain"),
                None,
            )
            .unwrap()
    };
    let answer = ok(explain("huge"));
    assert_eq!(answer["pod"], "default/huge");
    assert_eq!(answer["node"], Value::Null);
    let message =
        "0/3 nodes are available: 1 node(s) had untolerated taint {gpu: true}, 2 Insufficient cpu. preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, 2 No preemption victims found for incoming pod.";
    assert_eq!(answer["message"], message, "{answer}");
    assert_eq!(answer["lastMessage"], message);
    assert_eq!(answer["attempts"].to_string(), before);
    assert!(
        ["unschedulable", "backoff"].contains(&answer["queue"].as_str().unwrap()),
        "{answer}"
    );
    let by_node = |nodes: &Value| {
        let mut nodes = nodes.as_array().unwrap().clone();
        nodes.sort_by_key(|n| n["node"].as_str().unwrap().to_string());
        nodes
    };
    let explained = by_node(&answer["nodes"]);
    assert_eq!(explained.len(), 3);
    assert_eq!(explained[0]["node"], "big");
    assert_eq!(explained[0]["reasons"], json!(["Insufficient cpu"]));
    assert_eq!(explained[0]["feasible"], false);

    // simulate --explain on the same objects (tiny bound where the server put it) agrees.
    let mut dump = objects_with_tiny_bound(&list, &node_of(&stored("tiny")).unwrap());
    let file = dir.join("cluster.json");
    std::fs::write(&file, std::mem::take(&mut dump).to_string()).unwrap();
    let simulated = wasched(
        &[
            "simulate",
            "--explain",
            "--output",
            "json",
            file.to_str().unwrap(),
        ],
        None,
    );
    let huge: Value = simulated
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .find(|d| d["pod"] == "default/huge")
        .expect("simulate decides for huge");
    assert_eq!(huge["message"], message);
    assert_eq!(by_node(&huge["nodes"]), explained);

    // Asking is not an attempt, and placed or unknown pods get a clear refusal.
    let again = ok(explain("huge"));
    assert_eq!(again["attempts"], answer["attempts"]);
    assert_eq!(attempts(&stored("huge")), before);
    let placed = explain("tiny");
    assert_eq!(placed.status, 409, "{}", placed.body);
    assert!(placed.body.contains("placed on node"), "{}", placed.body);
    let unknown = explain("nobody");
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    assert!(unknown.body.contains("not pending"), "{}", unknown.body);
}

#[test]
fn a_critical_pod_evicts_a_batch_pod_in_one_transaction_and_takes_its_node() {
    let dir = temp_dir("preempt");
    let config_file = dir.join("wasched.toml");
    std::fs::write(
        &config_file,
        "[[profiles]]\npreemption = { enabled = true }\n",
    )
    .unwrap();
    let config_arg = config_file.to_str().unwrap().to_string();
    let server = Server::start(&dir, &["--config", &config_arg]);
    let admin = server.admin();
    let node = two_cpu_node("only");
    let list = json!({ "kind": "List", "items": [node, prioritized_pod("batch", 0, "1500m")] });
    ok(send(&admin, "POST", "/v1/objects", list));
    wait_until("batch is bound", Duration::from_secs(30), || {
        node_of(&stored_pod(&admin, "batch")).is_some()
    });
    let (events, stop) = watch(&server.url, "0");
    let list = json!({ "kind": "List", "items": [prioritized_pod("critical", 1000, "1")] });
    ok(send(&admin, "POST", "/v1/objects", list));
    wait_until("critical is bound", Duration::from_secs(30), || {
        node_of(&stored_pod(&admin, "critical")).as_deref() == Some("only")
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let gone = admin
        .request("GET", "/v1/namespaces/default/pods/batch", None)
        .unwrap();
    assert_eq!(gone.status, 404, "the victim was deleted: {}", gone.body);
    let failed: Vec<Value> = events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e["pod"] == "default/critical" && e["type"] == "FailedScheduling")
        .cloned()
        .collect();
    assert_eq!(
        failed.first().map(|e| e["message"].clone()),
        Some(json!("0/1 nodes are available: 1 Insufficient cpu.")),
        "a preemption that found room adds nothing to the FitError: {failed:?}"
    );
    assert!(
        stored_pod(&admin, "critical")["status"]
            .get("nominatedNodeName")
            .is_none_or(|n| n.is_null()),
        "the nomination is cleared once the pod is bound"
    );
}

#[test]
fn kill_9_during_preemptions_leaves_each_one_whole_or_not_begun() {
    const NODES: usize = 200;
    const CRITICAL: usize = 150;
    let dir = temp_dir("preempt-kill9");
    let server = Server::start(&dir, &[]);
    let admin = server.admin();
    // Every node holds two 1-cpu batch pods; a 1500m critical pod needs both gone.
    let mut items: Vec<Value> = (0..NODES)
        .map(|i| two_cpu_node(&format!("node-{i:02}")))
        .collect();
    items.extend((0..2 * NODES).map(|i| prioritized_pod(&format!("batch-{i:02}"), 0, "1")));
    ok(send(
        &admin,
        "POST",
        "/v1/objects",
        json!({ "kind": "List", "items": items }),
    ));
    wait_until("every batch pod is bound", Duration::from_secs(60), || {
        pods(&admin, "default").iter().all(|p| node_of(p).is_some())
    });
    let critical: Vec<Value> = (0..CRITICAL)
        .map(|i| prioritized_pod(&format!("critical-{i:02}"), 1000, "1500m"))
        .collect();
    ok(send(
        &admin,
        "POST",
        "/v1/objects",
        json!({ "kind": "List", "items": critical }),
    ));
    // Killed as soon as the first evictions are stored (polled without a pause): the rest are
    // in flight.
    let deadline = Instant::now() + Duration::from_secs(60);
    while pods(&admin, "default").len() == 2 * NODES + CRITICAL {
        assert!(Instant::now() < deadline, "no eviction in 60 s");
    }
    server.kill9();

    // Back with a profile no pod asks for, so the stored state is read before anything moves.
    let paused = dir.join("paused.toml");
    std::fs::write(&paused, "[[profiles]]\nscheduler_name = \"paused\"\n").unwrap();
    let server = Server::start(&dir, &["--config", paused.to_str().unwrap()]);
    let stored = pods(&server.admin(), "default");
    let batch_on = |node: &str, pods: &[Value]| {
        pods.iter()
            .filter(|p| {
                p["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .starts_with("batch-")
                    && node_of(p).as_deref() == Some(node)
            })
            .count()
    };
    let claimed_by = |node: &str, pods: &[Value]| {
        pods.iter()
            .filter(|p| {
                p["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .starts_with("critical-")
                    && (node_of(p).as_deref() == Some(node)
                        || p["status"]["nominatedNodeName"].as_str() == Some(node))
            })
            .count()
    };
    let mut preempted = 0;
    for i in 0..NODES {
        let node = format!("node-{i:02}");
        match (batch_on(&node, &stored), claimed_by(&node, &stored)) {
            (2, 0) => {}
            (0, 1) => preempted += 1,
            (batch, claims) => panic!(
                "{node} is half-preempted after the kill: {batch} batch pods, {claims} critical pods nominated or bound"
            ),
        }
    }
    assert!(
        preempted >= 1,
        "the preemption seen before the kill was durable"
    );
    // How far the kill got, for whoever reads the test log (each run lands elsewhere).
    eprintln!("after kill -9: {preempted} of {CRITICAL} preemptions stored, each whole");
    drop(server);

    // Restarted as users run it: every critical pod gets a node, each by evicting both pods of
    // one node, and no batch pod is lost beyond those.
    let server = Server::start(&dir, &[]);
    let admin = server.admin();
    wait_until(
        "every critical pod is bound",
        Duration::from_secs(120),
        || {
            let all = pods(&admin, "default");
            (0..CRITICAL).all(|i| {
                all.iter().any(|p| {
                    p["metadata"]["name"] == format!("critical-{i:02}") && node_of(p).is_some()
                })
            })
        },
    );
    let settled = pods(&admin, "default");
    for i in 0..NODES {
        let node = format!("node-{i:02}");
        let shape = (batch_on(&node, &settled), claimed_by(&node, &settled));
        assert!(
            shape == (2, 0) || shape == (0, 1),
            "{node}: {shape:?} (batch pods, critical pods)"
        );
    }
    assert_eq!(settled.len(), 2 * NODES - 2 * CRITICAL + CRITICAL);
}

#[test]
fn a_nomination_preemption_can_no_longer_honour_is_cleared_and_frees_the_node() {
    let dir = temp_dir("nomination-cleared");
    let server = Server::start(&dir, &[]);
    let admin = server.admin();
    let node = two_cpu_node("only");
    // A pod nominated to the node earlier, whose room was since taken by a pod of its own
    // priority: nothing may be evicted for it any more.
    let mut stale = prioritized_pod("stale", 100, "1500m");
    stale["status"] = json!({ "nominatedNodeName": "only" });
    let taken = {
        let mut p = prioritized_pod("taken", 100, "1");
        p["spec"]["nodeName"] = json!("only");
        p
    };
    let list = json!({ "kind": "List", "items": [node, taken, stale] });
    ok(send(&admin, "POST", "/v1/objects", list));
    wait_until("stale fails", Duration::from_secs(30), || {
        stored_pod(&admin, "stale")["status"]["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["reason"] == "Unschedulable"))
    });
    let stale = stored_pod(&admin, "stale");
    let condition = stale["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "PodScheduled")
        .unwrap()
        .clone();
    assert_eq!(
        condition["message"],
        "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
    );
    assert!(
        stale["status"]
            .get("nominatedNodeName")
            .is_none_or(|n| n.is_null()),
        "the nomination is cleared: {stale}"
    );
    // A lower-priority pod that fits beside "taken" is no longer kept off by the nomination.
    let list = json!({ "kind": "List", "items": [prioritized_pod("small", 0, "500m")] });
    ok(send(&admin, "POST", "/v1/objects", list));
    wait_until("small is bound", Duration::from_secs(30), || {
        node_of(&stored_pod(&admin, "small")).as_deref() == Some("only")
    });
}

/// A pending pod of `default` with a priority and a cpu request.
fn prioritized_pod(name: &str, priority: i32, cpu: &str) -> Value {
    json!({
        "kind": "Pod",
        "metadata": { "name": name, "namespace": "default" },
        "spec": { "priority": priority, "containers": [{ "name": "c", "resources": { "requests": { "cpu": cpu } } }] }
    })
}

/// A node with 2 cpus (and room for 110 pods).
fn two_cpu_node(name: &str) -> Value {
    json!({
        "kind": "Node",
        "metadata": { "name": name },
        "status": { "allocatable": { "cpu": "2", "memory": "4Gi", "pods": "110" } }
    })
}

/// The pod `default/{name}` as the server stores it.
fn stored_pod(client: &Client, name: &str) -> Value {
    ok(client
        .request("GET", &format!("/v1/namespaces/default/pods/{name}"), None)
        .unwrap())
}

/// Waits until pod `failing` has failed an attempt (Unschedulable) and pod `bound` is bound.
fn wait_until_failed_and_bound(client: &Client, failing: &str, bound: &str) {
    wait_until(
        &format!("{failing} fails and {bound} is bound"),
        Duration::from_secs(30),
        || {
            let failed = stored_pod(client, failing)["status"]["conditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["reason"] == "Unschedulable"));
            failed && node_of(&stored_pod(client, bound)).is_some()
        },
    );
}

/// `list` with pod `tiny` bound to `node`, as a cluster dump taken from the server would have it.
fn objects_with_tiny_bound(list: &Value, node: &str) -> Value {
    let mut list = list.clone();
    for item in list["items"].as_array_mut().unwrap() {
        if item["metadata"]["name"] == "tiny" {
            item["spec"]["nodeName"] = json!(node);
        }
    }
    list
}

fn wasched(args: &[&str], server: Option<&Server>) -> String {
    let mut command = Command::new(env!("CARGO_BIN_EXE_wasched"));
    command
        .args(args)
        .env_remove(wasched::server::auth::ADMIN_TOKEN_ENV)
        .env_remove(wasched::server::client::TOKEN_ENV);
    if let Some(server) = server {
        command
            .env("WASCHED_SERVER", &server.url)
            .arg("--token-file")
            .arg(server.dir.join("token"));
    }
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "wasched {args:?} failed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The README's path: build the example plugin from source, load it into a running server, switch
/// the configuration to it, add a cluster, and read where the pods went.
#[test]
fn readme_flow_builds_loads_and_schedules_with_the_example_plugin() {
    let root = &crate::support::repo_root();
    let dir = temp_dir("readme");
    let component = dir.join("team_affinity.wasm");
    // Its own target directory: the one of this `cargo test` is locked while tests run.
    let build = Command::new(env!("CARGO_BIN_EXE_wasched"))
        .args(["plugin", "build"])
        .arg(root.join("examples/plugins/rust/team-affinity"))
        .arg("-o")
        .arg(&component)
        .env("CARGO_TARGET_DIR", root.join("target/plugin-build-test"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&build.stderr);
    assert!(build.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "CARGO_PROFILE_RELEASE_LTO=fat CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 \
             cargo build --release --target wasm32-unknown-unknown"
        ),
        "{stderr}"
    );

    let server = Server::start(&dir, &[]);
    let loaded = wasched(
        &[
            "plugin",
            "load",
            "TeamAffinity",
            component.to_str().unwrap(),
        ],
        Some(&server),
    );
    assert!(loaded.contains("plugin TeamAffinity loaded"), "{loaded}");
    let config = root.join("examples/configs/team-affinity.toml");
    wasched(
        &["config", "apply", config.to_str().unwrap()],
        Some(&server),
    );
    let cluster = root.join("examples/clusters/teams.yaml");
    let applied = wasched(&["apply", cluster.to_str().unwrap()], Some(&server));
    assert!(applied.contains("pod default/whale created"), "{applied}");

    let admin = server.admin();
    let node = |ns: &str, name: &str| {
        let pod = ok(admin
            .request("GET", &format!("/v1/namespaces/{ns}/pods/{name}"), None)
            .unwrap());
        (node_of(&pod), pod)
    };
    wait_until("five pods are placed", Duration::from_secs(30), || {
        [
            "payments/ledger",
            "payments/checkout",
            "search/indexer",
            "search/too-big-for-search",
            "default/cron",
        ]
        .iter()
        .all(|p| {
            node(p.split('/').next().unwrap(), p.split('/').nth(1).unwrap())
                .0
                .is_some()
        })
    });
    for name in ["ledger", "checkout"] {
        let placed = node("payments", name).0.unwrap();
        assert!(
            placed.starts_with("payments-"),
            "{name} on {placed}: its team's node"
        );
    }
    assert_eq!(
        node("search", "indexer").0.as_deref(),
        Some("search-1"),
        "team from the annotation"
    );
    assert_ne!(
        node("search", "too-big-for-search").0.as_deref(),
        Some("search-1"),
        "a preference, not a filter: no room on the team's node, so elsewhere"
    );
    wait_until("the whale failed once", Duration::from_secs(10), || {
        node("default", "whale").1["status"]["conditions"][0]["message"].is_string()
    });
    let (whale_node, whale) = node("default", "whale");
    assert_eq!(whale_node, None);
    assert_eq!(
        whale["status"]["conditions"][0]["message"],
        "0/4 nodes are available: 4 Insufficient cpu. preemption: 0/4 nodes are available: 4 No preemption victims found for incoming pod."
    );
    let table = wasched(&["get", "pods", "-n", "default"], Some(&server));
    assert!(
        table.contains("Unschedulable: 0/4 nodes are available: 4 Insufficient cpu."),
        "{table}"
    );
    let plugins = wasched(&["plugin", "list"], Some(&server));
    let line = plugins
        .lines()
        .find(|l| l.starts_with("TeamAffinity"))
        .unwrap();
    assert!(
        line.contains("uploaded") && line.contains("default-scheduler"),
        "{line}"
    );
}

#[path = "browser.rs"]
mod browser;
#[path = "shadow.rs"]
pub(crate) mod shadow;

/// A StorageClass for local disks: volumes made by an administrator, bound when the first pod
/// using a claim is placed.
fn local_storage_class() -> Value {
    json!({
        "kind": "StorageClass",
        "apiVersion": "storage.k8s.io/v1",
        "metadata": { "name": "local-storage" },
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer"
    })
}

/// A free local volume of 100Gi on `node`.
fn local_volume(name: &str, node: &str) -> Value {
    json!({
        "kind": "PersistentVolume",
        "metadata": { "name": name },
        "spec": {
            "capacity": { "storage": "100Gi" },
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "local-storage",
            "local": { "path": "/mnt/disks/ssd0" },
            "nodeAffinity": { "required": { "nodeSelectorTerms": [{ "matchExpressions": [
                { "key": "kubernetes.io/hostname", "operator": "In", "values": [node] }
            ] }] } }
        },
        "status": { "phase": "Available" }
    })
}

/// A pending claim of `default` for 50Gi of local storage.
fn local_claim(name: &str) -> Value {
    json!({
        "kind": "PersistentVolumeClaim",
        "metadata": { "name": name, "namespace": "default", "uid": format!("uid-{name}") },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "local-storage",
            "resources": { "requests": { "storage": "50Gi" } }
        },
        "status": { "phase": "Pending" }
    })
}

/// A pending pod of `default` using claim `claim`.
fn pod_with_claim(name: &str, claim: &str) -> Value {
    let mut pod = prioritized_pod(name, 0, "100m");
    pod["spec"]["volumes"] =
        json!([{ "name": "data", "persistentVolumeClaim": { "claimName": claim } }]);
    pod
}

/// A node labelled with its hostname, as the kubelet labels it.
fn host_node(name: &str) -> Value {
    let mut node = two_cpu_node(name);
    node["metadata"]["labels"] = json!({ "kubernetes.io/hostname": name });
    node
}

fn stored(client: &Client, path: &str) -> Value {
    ok(client.request("GET", path, None).unwrap())
}

fn stored_claim(client: &Client, name: &str) -> Value {
    stored(
        client,
        &format!("/v1/namespaces/default/persistentvolumeclaims/{name}"),
    )
}

fn stored_volume(client: &Client, name: &str) -> Value {
    stored(client, &format!("/v1/persistentvolumes/{name}"))
}

/// The PodScheduled condition's message of a stored pod, once it failed an attempt.
fn failure_message(pod: &Value) -> Option<String> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "PodScheduled" && c["reason"] == "Unschedulable")?["message"]
        .as_str()
        .map(str::to_string)
}

/// Asserts `claim` is bound to `volume` and `volume` to `claim`, as the PV controller leaves them.
fn assert_bound(client: &Client, claim: &str, volume: &str) {
    let pvc = stored_claim(client, claim);
    let pv = stored_volume(client, volume);
    assert_eq!(pvc["spec"]["volumeName"], volume, "{pvc}");
    assert_eq!(
        pvc["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"], "yes",
        "{pvc}"
    );
    assert_eq!(pvc["status"]["phase"], "Bound", "{pvc}");
    assert_eq!(pv["spec"]["claimRef"]["name"], claim, "{pv}");
    assert_eq!(pv["spec"]["claimRef"]["namespace"], "default", "{pv}");
    assert_eq!(pv["status"]["phase"], "Bound", "{pv}");
}

#[test]
fn two_pods_wanting_one_local_volume_one_waits_until_it_is_released() {
    let dir = temp_dir("one-local-volume");
    let server = Server::start(&dir, &[]);
    let admin = server.admin();
    let items = json!({ "kind": "List", "items": [
        host_node("n1"), host_node("n2"), local_storage_class(), local_volume("local-n1", "n1"),
        local_claim("data-a"), local_claim("data-b"),
        pod_with_claim("a", "data-a"), pod_with_claim("b", "data-b"),
    ] });
    ok(send(&admin, "POST", "/v1/objects", items));
    let mut placed = None;
    wait_until(
        "one pod is bound, the other failed",
        Duration::from_secs(30),
        || {
            let (a, b) = (stored_pod(&admin, "a"), stored_pod(&admin, "b"));
            placed = match (node_of(&a), node_of(&b)) {
                (Some(_), None) if failure_message(&b).is_some() => Some(("a", "b")),
                (None, Some(_)) if failure_message(&a).is_some() => Some(("b", "a")),
                _ => None,
            };
            placed.is_some()
        },
    );
    let (first, second) = placed.unwrap();
    assert_eq!(node_of(&stored_pod(&admin, first)).as_deref(), Some("n1"));
    assert_bound(&admin, &format!("data-{first}"), "local-n1");
    assert_eq!(
        failure_message(&stored_pod(&admin, second)).unwrap(),
        "0/2 nodes are available: 2 node(s) didn't find available persistent volumes to bind. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    );
    let unbound = stored_claim(&admin, &format!("data-{second}"));
    assert!(unbound["spec"]["volumeName"].is_null(), "{unbound}");

    // The first pod and its claim go; the local volume provisioner cleans the disk and makes
    // the volume anew, free.
    for path in [
        format!("/v1/namespaces/default/pods/{first}"),
        format!("/v1/namespaces/default/persistentvolumeclaims/data-{first}"),
    ] {
        ok(admin.request("DELETE", &path, None).unwrap());
    }
    let fresh = json!({ "kind": "List", "items": [local_volume("local-n1", "n1")] });
    ok(send(&admin, "POST", "/v1/objects", fresh));
    wait_until("the second pod is bound", Duration::from_secs(30), || {
        node_of(&stored_pod(&admin, second)).as_deref() == Some("n1")
    });
    assert_bound(&admin, &format!("data-{second}"), "local-n1");
}

#[test]
fn kill_9_after_pods_with_waiting_claims_were_bound_leaves_pods_claims_and_volumes_agreeing() {
    const NODES: usize = 100;
    let dir = temp_dir("volumes-kill9");
    let server = Server::start(&dir, &[]);
    let admin = server.admin();
    let mut items = vec![local_storage_class()];
    for i in 0..NODES {
        let node = format!("node-{i:02}");
        items.push(host_node(&node));
        items.push(local_volume(&format!("local-{i:02}"), &node));
        items.push(local_claim(&format!("data-{i:02}")));
        items.push(pod_with_claim(
            &format!("db-{i:02}"),
            &format!("data-{i:02}"),
        ));
    }
    ok(send(
        &admin,
        "POST",
        "/v1/objects",
        json!({ "kind": "List", "items": items }),
    ));
    kill_9_at_the_first_binding(server, &admin);

    // Each pod bound after the restart has its claim bound to the volume of its node, and each
    // pod not bound has its claim and no volume reserved for it.
    let check = |admin: &Client| -> usize {
        let volumes = ok(admin.request("GET", "/v1/persistentvolumes", None).unwrap());
        let volumes = volumes["items"].as_array().unwrap().clone();
        let mut bound = 0;
        for pod in pods(admin, "default") {
            let name = pod["metadata"]["name"].as_str().unwrap();
            let claim = format!("data-{}", &name[3..]);
            let pvc = stored_claim(admin, &claim);
            let holders: Vec<&Value> = volumes
                .iter()
                .filter(|v| v["spec"]["claimRef"]["name"] == claim.as_str())
                .collect();
            match node_of(&pod) {
                Some(node) => {
                    bound += 1;
                    let volume = format!("local-{}", &node[5..]);
                    assert_bound(admin, &claim, &volume);
                    assert_eq!(holders.len(), 1, "{claim} is held once: {holders:?}");
                }
                None => {
                    assert!(pvc["spec"]["volumeName"].is_null(), "{name} waits: {pvc}");
                    assert!(holders.is_empty(), "{name} waits: {holders:?}");
                }
            }
        }
        bound
    };
    let paused = dir.join("paused.toml");
    std::fs::write(&paused, "[[profiles]]\nscheduler_name = \"paused\"\n").unwrap();
    let server = Server::start(&dir, &["--config", paused.to_str().unwrap()]);
    let bound = check(&server.admin());
    assert!(bound >= 1, "the binding seen before the kill was durable");
    eprintln!("after kill -9: {bound} of {NODES} pods bound, each with its volume");
    drop(server);

    let server = Server::start(&dir, &[]);
    let admin = server.admin();
    wait_until("every pod is bound", Duration::from_secs(60), || {
        pods(&admin, "default").iter().all(|p| node_of(p).is_some())
    });
    assert_eq!(check(&admin), NODES);
}

/// Local volumes, claims and pods of `default`, one of each per node `node-NN`.
fn local_batch(nodes: usize) -> Value {
    let mut items = vec![local_storage_class()];
    for i in 0..nodes {
        let node = format!("node-{i:02}");
        items.push(host_node(&node));
        items.push(local_volume(&format!("local-{i:02}"), &node));
        items.push(local_claim(&format!("data-{i:02}")));
        items.push(pod_with_claim(
            &format!("db-{i:02}"),
            &format!("data-{i:02}"),
        ));
    }
    json!({ "kind": "List", "items": items })
}

/// Asserts every pod `db-NN` is bound with its claim `data-NN` on the volume of its node.
fn assert_pods_claims_and_volumes_agree(admin: &Client, nodes: usize) {
    for i in 0..nodes {
        let pod = stored_pod(admin, &format!("db-{i:02}"));
        let node = node_of(&pod).unwrap_or_else(|| panic!("db-{i:02} is bound: {pod}"));
        assert_bound(
            admin,
            &format!("data-{i:02}"),
            &format!("local-{}", &node[5..]),
        );
    }
}

/// Asserts a further claim finds no free volume: its pod waits, and no volume is held twice.
fn a_late_claim_finds_no_free_volume(admin: &Client) {
    ok(send(
        admin,
        "POST",
        "/v1/objects",
        json!({ "kind": "List", "items": [local_claim("late"), pod_with_claim("db-late", "late")] }),
    ));
    wait_until("db-late fails an attempt", Duration::from_secs(30), || {
        failure_message(&stored_pod(admin, "db-late")).is_some()
    });
    assert!(node_of(&stored_pod(admin, "db-late")).is_none());
    assert!(stored_claim(admin, "late")["spec"]["volumeName"].is_null());
}

#[test]
fn applying_the_same_manifests_again_keeps_every_binding_the_scheduler_made() {
    const NODES: usize = 3;
    let dir = temp_dir("reapply");
    let server = Server::start(&dir, &[]);
    let admin = server.admin();
    let batch = local_batch(NODES);
    ok(send(&admin, "POST", "/v1/objects", batch.clone()));
    wait_until("every pod is bound", Duration::from_secs(30), || {
        pods(&admin, "default").iter().all(|p| node_of(p).is_some())
    });
    assert_pods_claims_and_volumes_agree(&admin, NODES);

    // The same apply again: a user re-running it, or a client retrying a batch it sent.
    ok(send(&admin, "POST", "/v1/objects", batch));
    assert_pods_claims_and_volumes_agree(&admin, NODES);

    a_late_claim_finds_no_free_volume(&admin);
    assert_pods_claims_and_volumes_agree(&admin, NODES);

    // A replace that would move a bound claim, or a bound volume, is refused and says why.
    let mut moved = local_claim("data-00");
    moved["spec"]["volumeName"] = json!("local-01");
    let reply = send(
        &admin,
        "PUT",
        "/v1/namespaces/default/persistentvolumeclaims/data-00",
        moved,
    );
    assert_eq!(reply.status, 422, "{}", reply.body);
    assert!(
        reply
            .body
            .contains("spec.volumeName is immutable once the claim is bound"),
        "{}",
        reply.body
    );
    let mut taken = local_volume("local-00", "node-00");
    taken["spec"]["claimRef"] = json!({ "namespace": "default", "name": "late" });
    let reply = send(&admin, "PUT", "/v1/persistentvolumes/local-00", taken);
    assert_eq!(reply.status, 422, "{}", reply.body);
    assert!(
        reply.body.contains("spec.claimRef cannot be changed"),
        "{}",
        reply.body
    );
    assert_pods_claims_and_volumes_agree(&admin, NODES);
}

#[test]
fn a_batch_retried_after_kill_9_leaves_claims_volumes_and_pods_agreeing() {
    const NODES: usize = 10;
    let dir = temp_dir("retry-after-kill9");
    let server = Server::start(&dir, &[]);
    let admin = server.admin();
    let batch = local_batch(NODES);
    ok(send(&admin, "POST", "/v1/objects", batch.clone()));
    wait_until("every pod is bound", Duration::from_secs(30), || {
        pods(&admin, "default").iter().all(|p| node_of(p).is_some())
    });
    server.kill9();

    // The client never read the answer and sends the batch again to the restarted server.
    let server = Server::start(&dir, &[]);
    let admin = server.admin();
    ok(send(&admin, "POST", "/v1/objects", batch));
    assert_pods_claims_and_volumes_agree(&admin, NODES);
    a_late_claim_finds_no_free_volume(&admin);
    assert_pods_claims_and_volumes_agree(&admin, NODES);
}

const PODS_PATH: &str = "/v1/namespaces/default/pods";

const PACKER_CONFIG: &str = "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: packer
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
";

#[test]
fn a_kube_scheduler_configuration_is_put_kept_and_given_back_and_gated_pods_wait_in_serve() {
    let dir = temp_dir("kube-config");
    let server = Server::start(&dir, &[]);
    let admin = server.admin();
    ok(admin
        .request(
            "PUT",
            "/admin/config",
            Some(("application/yaml", PACKER_CONFIG.into())),
        )
        .unwrap());
    let config = admin.request("GET", "/admin/config", None).unwrap();
    assert_eq!(config.body, PACKER_CONFIG);
    ok(send(&admin, "POST", "/v1/nodes", pool_node("n1", "blue")));
    ok(send(&admin, "POST", "/v1/nodes", pool_node("n2", "blue")));
    let with = |name: &str, spec: Value| {
        let mut pod = small_pod(name);
        pod["spec"]["containers"][0]["resources"]["requests"] =
            json!({"cpu": "8", "memory": "32Gi"});
        pod["spec"]
            .as_object_mut()
            .unwrap()
            .extend(spec.as_object().unwrap().clone());
        pod
    };
    // The profile is the file's: MostAllocated packs the second pod beside the first (the
    // default, LeastAllocated, would spread them).
    ok(send(
        &admin,
        "POST",
        PODS_PATH,
        with("first", json!({"schedulerName": "packer"})),
    ));
    wait_until("the first pod bound", Duration::from_secs(10), || {
        node_of(&stored_pod(&admin, "first")).is_some()
    });
    ok(send(
        &admin,
        "POST",
        PODS_PATH,
        with("second", json!({"schedulerName": "packer"})),
    ));
    ok(send(
        &admin,
        "POST",
        PODS_PATH,
        with(
            "gated",
            json!({"schedulerName": "packer", "schedulingGates": [{"name": "example.com/quota"}]}),
        ),
    ));
    wait_until("the second pod bound", Duration::from_secs(10), || {
        node_of(&stored_pod(&admin, "second")).is_some()
    });
    assert_eq!(
        node_of(&stored_pod(&admin, "second")),
        node_of(&stored_pod(&admin, "first"))
    );
    wait_until("the gated pod's condition", Duration::from_secs(10), || {
        !stored_pod(&admin, "gated")["status"]["conditions"].is_null()
    });
    let gated = stored_pod(&admin, "gated");
    assert!(node_of(&gated).is_none(), "{gated}");
    assert_eq!(
        gated["status"]["conditions"][0]["reason"],
        "SchedulingGated"
    );
    let status = ok(admin
        .request("GET", "/v1/status/pods/default/gated", None)
        .unwrap());
    assert_eq!(status["queue"], "gated", "{status}");
    assert_eq!(
        status["message"], "waiting for scheduling gates: [example.com/quota]",
        "{status}"
    );
}

/// Kills `server` with SIGKILL as soon as a pod is seen bound (polled without a pause), so the
/// placements after it are in flight.
fn kill_9_at_the_first_binding(server: Server, admin: &Client) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !pods(admin, "default").iter().any(|p| node_of(p).is_some()) {
        assert!(Instant::now() < deadline, "no pod bound in 60 s");
    }
    server.kill9();
}

/// Every bound pod still running has its claim holding its device for it, and no device is in
/// two claims.
fn assert_devices_whole(client: &Client) -> usize {
    let claims = ok(client
        .request("GET", "/v1/namespaces/default/resourceclaims", None)
        .unwrap());
    let claims = claims["items"].as_array().unwrap().clone();
    let mut held = std::collections::BTreeMap::new();
    for claim in &claims {
        let name = claim["metadata"]["name"].as_str().unwrap();
        for result in claim["status"]["allocation"]["devices"]["results"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let device = format!("{}/{}", result["pool"], result["device"]);
            if let Some(other) = held.insert(device.clone(), name.to_string()) {
                panic!("{device} is allocated to {other} and to {name}");
            }
        }
    }
    let mut bound = 0;
    for pod in pods(client, "default") {
        let Some(node) = node_of(&pod) else { continue };
        if matches!(
            pod["status"]["phase"].as_str(),
            Some("Succeeded" | "Failed")
        ) {
            continue;
        }
        bound += 1;
        let name = pod["metadata"]["name"].as_str().unwrap();
        let claim_name = recorded_claims(&pod)
            .pop()
            .or_else(|| {
                pod["spec"]["resourceClaims"][0]["resourceClaimName"]
                    .as_str()
                    .map(str::to_string)
            })
            .unwrap();
        let claim = claims
            .iter()
            .find(|c| c["metadata"]["name"] == claim_name.as_str())
            .unwrap_or_else(|| panic!("{name}'s claim {claim_name} is missing"));
        let allocation = &claim["status"]["allocation"];
        assert_eq!(
            allocation["devices"]["results"][0]["pool"], node,
            "{name} is bound to {node} without its claim allocated there: {claim}"
        );
        assert_eq!(
            claim["status"]["reservedFor"][0]["uid"], pod["metadata"]["uid"],
            "{name}'s claim is not reserved for it: {claim}"
        );
    }
    bound
}

#[test]
fn kill_9_while_claims_are_allocated_leaves_no_device_twice_and_no_pod_bound_without_its_claim() {
    const NODES: usize = 60;
    const PODS: usize = 150;
    let dir = temp_dir("dra-kill9");
    let server = Server::start(&dir, &[]);
    let admin = server.admin();
    let mut items: Vec<Value> = vec![json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": "gpu.example.com"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]}
    })];
    for i in 0..NODES {
        let node = format!("node-{i:02}");
        items.push(two_cpu_node(&node));
        items.push(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": format!("{node}-gpus")},
            "spec": {"driver": "gpu.example.com", "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}]}
        }));
    }
    for i in 0..PODS {
        let name = format!("job-{i:03}");
        items.push(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": format!("{name}-gpu"), "namespace": "default"},
            "spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}
            ]}}
        }));
        let mut pod = prioritized_pod(&name, 0, "10m");
        pod["spec"]["resourceClaims"] =
            json!([{"name": "gpu", "resourceClaimName": format!("{name}-gpu")}]);
        items.push(pod);
    }
    ok(send(
        &admin,
        "POST",
        "/v1/objects",
        json!({ "kind": "List", "items": items }),
    ));
    kill_9_at_the_first_binding(server, &admin);

    let paused = dir.join("paused.toml");
    std::fs::write(&paused, "[[profiles]]\nscheduler_name = \"paused\"\n").unwrap();
    let server = Server::start(&dir, &["--config", paused.to_str().unwrap()]);
    let bound = assert_devices_whole(&server.admin());
    assert!(bound >= 1, "the binding seen before the kill was durable");
    eprintln!("after kill -9: {bound} of {PODS} pods stored bound, each with its claim");
    drop(server);

    // Restarted as users run it: every device goes to one pod, the rest wait.
    let server = Server::start(&dir, &[]);
    let admin = server.admin();
    wait_until("every device is allocated", Duration::from_secs(60), || {
        pods(&admin, "default")
            .iter()
            .filter(|p| node_of(p).is_some())
            .count()
            == 2 * NODES
    });
    assert_eq!(assert_devices_whole(&admin), 2 * NODES);
}

/// The claim names `pod` records in `status.resourceClaimStatuses`.
fn recorded_claims(pod: &Value) -> Vec<String> {
    pod["status"]["resourceClaimStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["resourceClaimName"].as_str().map(str::to_string))
        .collect()
}

fn resource_claims(client: &Client) -> Vec<Value> {
    let list = ok(client
        .request("GET", "/v1/namespaces/default/resourceclaims", None)
        .unwrap());
    list["items"].as_array().unwrap().clone()
}

fn resource_claim(client: &Client, name: &str) -> Reply {
    client
        .request(
            "GET",
            &format!("/v1/namespaces/default/resourceclaims/{name}"),
            None,
        )
        .unwrap()
}

#[test]
fn standalone_serve_makes_claims_from_templates_and_gives_them_back_when_pods_go() {
    let dir = temp_dir("dra-templates");
    let server = Server::start(&dir, &[]);
    let admin = server.admin();
    let gpu_pod = |name: &str| {
        let mut pod = prioritized_pod(name, 0, "10m");
        pod["spec"]["resourceClaims"] =
            json!([{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]);
        pod
    };
    // The pods come before their template: they wait, and get claims when it arrives.
    let trainers = ["trainer-a", "trainer-b", "trainer-c"];
    for name in trainers {
        ok(send(
            &admin,
            "POST",
            "/v1/namespaces/default/pods",
            gpu_pod(name),
        ));
    }
    let mut user = prioritized_pod("user", 0, "10m");
    user["spec"]["resourceClaims"] = json!([{"name": "gpu", "resourceClaimName": "shared"}]);
    let items = json!({"kind": "List", "items": [
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
         "metadata": {"name": "gpu.example.com"},
         "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]}},
        two_cpu_node("node-a"),
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
         "metadata": {"name": "node-a-gpus"},
         "spec": {"driver": "gpu.example.com", "nodeName": "node-a",
                  "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
                  "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}, {"name": "gpu-2"}]}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
         "metadata": {"name": "shared", "namespace": "default"},
         "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}},
        user,
    ]});
    ok(send(&admin, "POST", "/v1/objects", items));
    wait_until("user is bound", Duration::from_secs(30), || {
        node_of(&stored_pod(&admin, "user")).is_some()
    });
    assert!(
        trainers
            .iter()
            .all(|t| recorded_claims(&stored_pod(&admin, t)).is_empty()),
        "no claim before the template exists"
    );
    ok(send(
        &admin,
        "POST",
        "/v1/objects",
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
               "metadata": {"name": "one-gpu", "namespace": "default"},
               "spec": {"spec": {"devices": {"requests": [
                   {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}}}),
    ));
    // Two GPUs are left for three trainers.
    wait_until("two trainers are bound", Duration::from_secs(30), || {
        let bound = trainers
            .iter()
            .filter(|t| node_of(&stored_pod(&admin, t)).is_some())
            .count();
        let failed = trainers.iter().any(|t| {
            stored_pod(&admin, t)["status"]["conditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["reason"] == "Unschedulable"))
        });
        bound == 2 && failed
    });
    for name in trainers {
        let pod = stored_pod(&admin, name);
        let claims = recorded_claims(&pod);
        assert_eq!(claims.len(), 1, "{name}: {pod}");
        assert!(claims[0].starts_with(&format!("{name}-gpu-")), "{claims:?}");
        let claim = ok(resource_claim(&admin, &claims[0]));
        let owner = &claim["metadata"]["ownerReferences"][0];
        assert_eq!(
            (&owner["kind"], &owner["uid"], &owner["controller"]),
            (&json!("Pod"), &pod["metadata"]["uid"], &json!(true)),
            "{claim}"
        );
        assert_eq!(
            claim["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"],
            "gpu"
        );
    }
    let waiting = *trainers
        .iter()
        .find(|t| node_of(&stored_pod(&admin, t)).is_none())
        .unwrap();
    let done = *trainers
        .iter()
        .find(|t| node_of(&stored_pod(&admin, t)).is_some())
        .unwrap();

    // A client replacing a pod with a status of its own keeps the claims the store made for it.
    let before = recorded_claims(&stored_pod(&admin, waiting));
    let mut replaced = gpu_pod(waiting);
    replaced["status"] = json!({"phase": "Pending"});
    ok(send(
        &admin,
        "PUT",
        &format!("/v1/namespaces/default/pods/{waiting}"),
        replaced,
    ));
    assert_eq!(recorded_claims(&stored_pod(&admin, waiting)), before);
    assert_eq!(resource_claims(&admin).len(), 4, "three made, one shared");

    // The shared claim's last user goes: it is deallocated, and its GPU goes to the waiting pod.
    ok(admin
        .request("DELETE", "/v1/namespaces/default/pods/user", None)
        .unwrap());
    let shared = ok(resource_claim(&admin, "shared"));
    assert!(
        shared["status"]["allocation"].is_null() && shared["status"]["reservedFor"].is_null(),
        "{shared}"
    );
    assert!(
        !shared["metadata"]["finalizers"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|f| f == "resource.kubernetes.io/delete-protection"),
        "{shared}"
    );
    wait_until(
        "the waiting trainer is bound",
        Duration::from_secs(30),
        || node_of(&stored_pod(&admin, waiting)).is_some(),
    );
    assert_devices_whole(&admin);

    // A pod that finishes gives its made claim back: the claim goes with it.
    let finished_claim = recorded_claims(&stored_pod(&admin, done)).remove(0);
    let mut finished = stored_pod(&admin, done);
    finished["status"]["phase"] = json!("Succeeded");
    ok(send(
        &admin,
        "PUT",
        &format!("/v1/namespaces/default/pods/{done}"),
        finished,
    ));
    assert_eq!(resource_claim(&admin, &finished_claim).status, 404);
    ok(send(
        &admin,
        "POST",
        "/v1/namespaces/default/pods",
        gpu_pod("trainer-d"),
    ));
    wait_until(
        "trainer-d takes the freed GPU",
        Duration::from_secs(30),
        || node_of(&stored_pod(&admin, "trainer-d")).is_some(),
    );
    assert_devices_whole(&admin);
}
