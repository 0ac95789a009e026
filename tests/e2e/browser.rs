//! The status page in a real browser: headless Chromium driven over WebDriver (`chromedriver`,
//! installed by `scripts/setup` from Debian's `chromium-driver`), against `wasched serve`.
//!
//! Each test saves screenshots of what it looked at under `target/screenshots/` (the README
//! shows them) and fails on any error in the browser console besides the refusals it provoked.

use super::*;

/// A WebDriver session of headless Chromium, ended (and its driver stopped) when dropped.
struct Browser {
    driver: Child,
    client: Client,
    session: String,
}

/// The key WebDriver puts element references under.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

impl Browser {
    fn start() -> Browser {
        let driver_path = ["chromedriver", "/usr/bin/chromedriver"]
            .into_iter()
            .find(|p| Command::new(p).arg("--version").output().is_ok())
            .expect("chromedriver is missing: run scripts/setup (it installs chromium and chromium-driver)");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new(driver_path)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let client = Client::new(&Connection {
            server: format!("http://127.0.0.1:{port}"),
            token_file: None,
        })
        .unwrap();
        wait_until("chromedriver answers", Duration::from_secs(30), || {
            client
                .request("GET", "/status", None)
                .is_ok_and(|r| r.status == 200)
        });
        let mut browser = Browser {
            driver,
            client,
            session: String::new(),
        };
        let chromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("chromium is missing: run scripts/setup");
        let session = browser.call(
            "POST",
            "/session",
            json!({ "capabilities": { "alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {
                    "binary": chromium,
                    "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                             "--disable-dev-shm-usage", "--window-size=1400,1000"],
                },
                "goog:loggingPrefs": { "browser": "ALL" },
            } } }),
        );
        browser.session = session["sessionId"].as_str().unwrap().to_string();
        browser
    }

    /// One WebDriver command; its `value`.
    fn call(&self, method: &str, path: &str, body: Value) -> Value {
        let path = if self.session.is_empty() {
            path.to_string()
        } else {
            format!("/session/{}{path}", self.session)
        };
        let body = (method != "GET" && method != "DELETE")
            .then(|| ("application/json", body.to_string().into_bytes()));
        let reply = self.client.request(method, &path, body).unwrap();
        let value: Value = serde_json::from_str(&reply.body)
            .unwrap_or_else(|e| panic!("WebDriver {path}: {e}: {}", reply.body));
        assert_eq!(reply.status, 200, "WebDriver {method} {path}: {value}");
        value["value"].clone()
    }

    fn open(&self, url: &str) {
        self.call("POST", "/url", json!({ "url": url }));
    }

    /// Runs `script` (a function body; `arguments` are `args`) in the page; what it returns.
    fn run(&self, script: &str, args: Value) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            json!({ "script": script, "args": args }),
        )
    }

    /// Waits until `script` returns something truthy, and returns it.
    fn wait_for(&self, what: &str, script: &str, args: Value) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let value = self.run(script, args.clone());
            let truthy = !matches!(&value, Value::Null | Value::Bool(false))
                && value != json!("")
                && value != json!(0);
            if truthy {
                return value;
            }
            assert!(
                Instant::now() < deadline,
                "the page never showed {what} (last answer {value})"
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Navigates the page to `hash` (or renders it again) and waits until that view has rendered.
    fn view(&self, hash: &str) {
        self.run(
            "delete document.body.dataset.loaded;
             if (location.hash === arguments[0]) route(); else location.hash = arguments[0];",
            json!([hash]),
        );
        let loaded = hash.trim_start_matches("#/");
        self.wait_for(
            &format!("the view {hash}"),
            "return document.body.dataset.loaded === arguments[0];",
            json!([loaded]),
        );
    }

    fn element(&self, css: &str) -> String {
        let found = self.call(
            "POST",
            "/element",
            json!({ "using": "css selector", "value": css }),
        );
        found[ELEMENT].as_str().unwrap().to_string()
    }

    fn type_into(&self, css: &str, text: &str) {
        let id = self.element(css);
        self.call("POST", &format!("/element/{id}/clear"), json!({}));
        self.call(
            "POST",
            &format!("/element/{id}/value"),
            json!({ "text": text }),
        );
    }

    fn click(&self, css: &str) {
        let id = self.element(css);
        self.call("POST", &format!("/element/{id}/click"), json!({}));
    }

    fn text(&self, css: &str) -> String {
        self.run(
            "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
            json!([css]),
        )
        .as_str()
        .unwrap_or_else(|| panic!("no element {css}"))
        .to_string()
    }

    /// Saves what the window shows, scrolled so that `css` is in the middle.
    fn screenshot_at(&self, name: &str, css: &str) {
        self.run(
            "document.querySelector(arguments[0]).scrollIntoView({ block: 'center' });",
            json!([css]),
        );
        self.screenshot(name);
    }

    fn screenshot(&self, name: &str) {
        let dir = super::super::support::repo_root()
            .join("target")
            .join("screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        let png = self.call("GET", "/screenshot", json!(null));
        let bytes = base64_decode(png.as_str().unwrap());
        assert!(bytes.starts_with(b"\x89PNG"), "a PNG");
        std::fs::write(dir.join(format!("{name}.png")), bytes).unwrap();
    }

    /// The console's errors since the last call (Chromium logs failed requests there too).
    fn console_errors(&self) -> Vec<String> {
        let entries = self.call("POST", "/se/log", json!({ "type": "browser" }));
        entries
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["level"] == "SEVERE")
            .map(|e| e["message"].as_str().unwrap_or_default().to_string())
            .collect()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self
                .client
                .request("DELETE", &format!("/session/{}", self.session), None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let digits: Vec<u8> = text.bytes().filter(|&c| c != b'=').map(value).collect();
    digits
        .chunks(4)
        .flat_map(|chunk| {
            let bits = chunk
                .iter()
                .enumerate()
                .fold(0u32, |acc, (i, &d)| acc | (u32::from(d) << (18 - 6 * i)));
            let bytes = bits.to_be_bytes();
            bytes[1..chunk.len()].to_vec()
        })
        .collect()
}

#[test]
fn base64_decoding_gives_the_bytes_back() {
    assert_eq!(base64_decode("aGVsbG8="), b"hello");
    assert_eq!(base64_decode("aGk="), b"hi");
    assert_eq!(base64_decode("YWJj"), b"abc");
}

fn cpu_milli(quantity: &str) -> i64 {
    match quantity.strip_suffix('m') {
        Some(milli) => milli.parse().unwrap(),
        None => (quantity.parse::<f64>().unwrap() * 1000.0).round() as i64,
    }
}

/// The cluster page shows the usage the API's objects add up to; the pending page a pod's
/// FitError; its drill-down every node's verdict as `simulate --explain` gives it; a placed pod
/// the scores that chose its node, as `simulate --explain` scored that node; and a binding shows
/// up on an open page within a second, without reloading it.
#[test]
fn the_pages_show_usage_verdicts_and_scores_as_simulate_does_and_bindings_live() {
    let dir = temp_dir("browser-cluster");
    let server = Server::start(&dir, &[]);
    let admin = server.admin();
    let node = |name: &str, zone: &str, cpu: &str, taints: Value| {
        json!({
            "kind": "Node",
            "metadata": { "name": name, "labels": {
                "kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone } },
            "spec": { "taints": taints },
            "status": { "allocatable": { "cpu": cpu, "memory": "16Gi", "pods": "110" } }
        })
    };
    let pod = |name: &str, cpu: &str| {
        json!({
            "kind": "Pod",
            "metadata": { "name": name, "namespace": "default", "labels": { "app": name } },
            "spec": { "containers": [{ "name": "c", "resources": { "requests": { "cpu": cpu, "memory": "1Gi" } } }] }
        })
    };
    let gpu_taint = json!([{ "key": "gpu", "value": "true", "effect": "NoSchedule" }]);
    let objects = vec![
        node("small", "zone-a", "2", json!([])),
        node("big", "zone-b", "4", json!([])),
        node("gpu", "zone-b", "64", gpu_taint),
        pod("huge", "8"),
        pod("tiny", "300m"),
    ];
    let list = json!({ "kind": "List", "items": objects });
    ok(send(&admin, "POST", "/v1/objects", list.clone()));
    let stored = |name: &str| stored_pod(&admin, name);
    wait_until_failed_and_bound(&admin, "huge", "tiny");
    let tiny_node = node_of(&stored("tiny")).unwrap();

    // What simulate --explain says of the same objects.
    let file = dir.join("cluster.json");
    std::fs::write(&file, list.to_string()).unwrap();
    let simulated: Vec<Value> = wasched(
        &[
            "simulate",
            "--explain",
            "--output",
            "json",
            file.to_str().unwrap(),
        ],
        None,
    )
    .lines()
    .map(|line| serde_json::from_str(line).unwrap())
    .collect();
    let decision = |pod: &str| {
        simulated
            .iter()
            .find(|d| d["pod"] == pod)
            .unwrap_or_else(|| panic!("simulate decides for {pod}"))
            .clone()
    };

    let browser = Browser::start();
    browser.open(&format!("{}/#/cluster", server.url));
    browser.view("#/cluster");

    // Usage: each node's requested cpu is what its pods request, against its allocatable.
    let pods = pods(&admin, "default");
    for (name, allocatable) in [("small", 2000), ("big", 4000), ("gpu", 64000)] {
        let requested: i64 = pods
            .iter()
            .filter(|p| node_of(p).as_deref() == Some(name))
            .map(|p| {
                cpu_milli(
                    p["spec"]["containers"][0]["resources"]["requests"]["cpu"]
                        .as_str()
                        .unwrap(),
                )
            })
            .sum();
        let shown = browser.run(
            "const b = document.querySelector(`tr[data-node='${arguments[0]}'] td.cpu .bar`);
             return b && [Number(b.dataset.requested), Number(b.dataset.allocatable), b.textContent];",
            json!([name]),
        );
        assert_eq!(shown[0], json!(requested), "{name}: {shown}");
        assert_eq!(shown[1], json!(allocatable), "{name}: {shown}");
        let label = format!("{} / {}", requested as f64 / 1000.0, allocatable / 1000);
        assert_eq!(shown[2].as_str().unwrap(), label, "{name}");
    }
    assert_eq!(browser.text("#node-count"), "3");
    assert!(browser
        .text("tr[data-node='gpu']")
        .contains("gpu=true:NoSchedule"));
    browser.click("tr[data-node='big'] .labels-button");
    browser.wait_for(
        "big's labels",
        "const r = document.querySelector(`tr[data-node='big'] + tr.labels`); return r && r.textContent.includes('topology.kubernetes.io/zone=zone-b');",
        json!([]),
    );
    browser.screenshot("cluster");

    // Pending pods: huge with its FitError.
    browser.view("#/pending");
    let message = decision("default/huge")["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        browser.text("tr[data-pod='default/huge'] td.message"),
        message
    );
    assert_eq!(browser.text("#pending-count"), "1 matching of 1 pending");
    browser.screenshot("pending");

    // Its drill-down: every node's verdict, as simulate --explain gives it.
    browser.click("tr[data-pod='default/huge'] a");
    browser.wait_for(
        "huge's drill-down",
        "return document.body.dataset.loaded === 'pod/default/huge';",
        json!([]),
    );
    assert_eq!(browser.text("#explain-message"), message);
    let shown = browser.run(
        "return [...document.querySelectorAll('#explain-table tbody tr')].map(r => ({
            node: r.dataset.node, feasible: r.dataset.feasible === 'true',
            reasons: [...r.querySelectorAll('.reason')].map(x => x.textContent) }));",
        json!([]),
    );
    let mut expected: Vec<Value> = decision("default/huge")["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| json!({ "node": n["node"], "feasible": n["feasible"], "reasons": n["reasons"] }))
        .collect();
    let mut shown = shown.as_array().unwrap().clone();
    let by_name = |v: &Value| v["node"].as_str().unwrap().to_string();
    expected.sort_by_key(by_name);
    shown.sort_by_key(by_name);
    assert_eq!(shown, expected);
    browser.screenshot("pending-pod");

    // The placed pod: the scores that chose its node, as simulate scored that node for it.
    browser.view("#/pod/default/tiny");
    assert_eq!(browser.text("#placed-node"), tiny_node);
    let scores = browser.run(
        "return Object.fromEntries([...document.querySelectorAll('#choice-table tbody tr')]
            .map(r => [r.dataset.plugin, Number(r.children[1].textContent)]));",
        json!([]),
    );
    let report = decision("default/tiny")["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == tiny_node.as_str())
        .expect("simulate reports the node")
        .clone();
    assert_eq!(scores, report["scores"], "{report}");
    assert!(!scores.as_object().unwrap().is_empty());
    assert_eq!(browser.text("#choice-total"), report["total"].to_string());
    browser.screenshot("placed-pod");

    // Live: a binding appears on the open page within a second of the API showing it.
    browser.view("#/cluster");
    browser.wait_for(
        "the live streams connected",
        "return document.querySelector('#live-state').className === 'up';",
        json!([]),
    );
    ok(send(
        &admin,
        "POST",
        "/v1/namespaces/default/pods",
        pod("live", "100m"),
    ));
    wait_until("live is bound", Duration::from_secs(10), || {
        node_of(&stored("live")).is_some()
    });
    let bound_at = Instant::now();
    let live_node = node_of(&stored("live")).unwrap();
    let shown = browser.wait_for(
        "the binding of default/live",
        "const e = document.querySelector(`#events li.Scheduled[data-pod='default/live']`); return e && e.textContent;",
        json!([]),
    );
    let delay = bound_at.elapsed();
    assert!(
        delay < Duration::from_secs(1),
        "the binding took {delay:?} to appear"
    );
    assert!(shown.as_str().unwrap().contains(&live_node), "{shown}");
    // The cluster page follows it too (its usage is refreshed on bindings).
    let expected = 100 + if live_node == tiny_node { 300 } else { 0 };
    browser.wait_for(
        "the new usage",
        "const b = document.querySelector(`tr[data-node='${arguments[0]}'] td.cpu .bar`); return b && Number(b.dataset.requested) === arguments[1];",
        json!([live_node, expected]),
    );
    assert_eq!(browser.console_errors(), Vec::<String>::new());
}

/// Uploading through the page swaps the plugin in (the page shows the new digest and the next
/// placements follow it); a wrong token is refused with a visible message and changes nothing; a
/// broken configuration is refused where it was typed.
#[test]
fn uploading_through_the_page_swaps_the_plugin_and_a_wrong_token_changes_nothing() {
    let dir = temp_dir("browser-plugins");
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
    for (name, pool) in [
        ("blue-1", "blue"),
        ("green-1", "green"),
        ("blue-2", "blue"),
        ("green-2", "green"),
    ] {
        ok(send(&admin, "POST", "/v1/nodes", pool_node(name, pool)));
    }
    let place = |name: &str| {
        ok(send(
            &admin,
            "POST",
            "/v1/namespaces/default/pods",
            small_pod(name),
        ));
        let mut node = None;
        wait_until(&format!("{name} is bound"), Duration::from_secs(20), || {
            let pod = ok(admin
                .request("GET", &format!("/v1/namespaces/default/pods/{name}"), None)
                .unwrap());
            node = node_of(&pod);
            node.is_some()
        });
        node.unwrap()
    };
    assert!(place("before").starts_with("blue"));
    let digest = || {
        let plugins = ok(admin.request("GET", "/admin/plugins", None).unwrap());
        plugins["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "PoolPreference")
            .unwrap()["sha256"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let old_digest = digest();

    let browser = Browser::start();
    browser.open(&format!("{}/#/plugins", server.url));
    browser.view("#/plugins");
    let shown_digest = |b: &Browser| {
        b.run(
            "const c = document.querySelector(`tr[data-plugin='PoolPreference'] td.sha256`); return c && c.title;",
            json!([]),
        )
    };
    assert_eq!(shown_digest(&browser), json!(old_digest));
    assert!(
        browser
            .text("tr[data-plugin='PoolPreference']")
            .contains("uploaded (Rust)"),
        "the language its toolchain recorded"
    );
    assert!(browser
        .text("div.profile[data-profile='default-scheduler']")
        .contains("PoolPreference ×100"));
    browser.wait_for(
        "the live streams connected",
        "return document.querySelector('#live-state').className === 'up';",
        json!([]),
    );

    // A wrong token: refused, visibly, and nothing changes.
    browser.type_into("#token", "not-the-token");
    // Leaving the box commits it (its `change` event), as a user does.
    browser.run("document.querySelector('#token').blur();", json!([]));
    browser.view("#/plugins");
    browser.type_into("#upload-name", "PoolPreference");
    browser.type_into("#upload-file", pool_v2().to_str().unwrap());
    browser.click("#upload-form button[type=submit]");
    let refusal = browser.wait_for(
        "the refusal",
        "const r = document.querySelector('#upload-result'); return r.className === 'error' && r.textContent;",
        json!([]),
    );
    assert!(
        refusal.as_str().unwrap().starts_with("Refused: "),
        "{refusal}"
    );
    browser.screenshot_at("plugins-refused", "#upload-result");
    assert_eq!(digest(), old_digest);
    assert_eq!(shown_digest(&browser), json!(old_digest));
    assert!(place("after-refusal").starts_with("blue"));

    // The admin token: the upload swaps the plugin in, and the open page shows the new digest.
    browser.type_into("#token", TOKEN);
    // Leaving the box commits it (its `change` event), as a user does.
    browser.run("document.querySelector('#token').blur();", json!([]));
    browser.view("#/plugins");
    browser.type_into("#upload-name", "PoolPreference");
    browser.type_into("#upload-file", pool_v2().to_str().unwrap());
    browser.click("#upload-form button[type=submit]");
    let loaded = browser.wait_for(
        "the upload's answer",
        "const r = document.querySelector('#upload-result'); return r.className === 'success' && r.textContent;",
        json!([]),
    );
    assert!(
        loaded
            .as_str()
            .unwrap()
            .starts_with("Replaced PoolPreference"),
        "{loaded}"
    );
    let new_digest = digest();
    assert_ne!(new_digest, old_digest);
    browser.wait_for(
        "the new digest in the plugin list",
        "const c = document.querySelector(`tr[data-plugin='PoolPreference'] td.sha256`); return c && c.title === arguments[0];",
        json!([new_digest]),
    );
    assert!(place("after-upload").starts_with("green"));
    browser.screenshot("plugins");

    // A broken configuration is refused in place; the one in force stays.
    browser.run(
        "document.querySelector('#config-text').value = '[[profiles]]\\nscheduler_name = 3\\n';",
        json!([]),
    );
    browser.click("#config-apply");
    let error = browser.wait_for(
        "the configuration error",
        "const r = document.querySelector('#config-result'); return r.className === 'error' && r.textContent;",
        json!([]),
    );
    assert!(error.as_str().unwrap().contains(":2: "), "{error}");
    let selected = browser.run(
        "const t = document.querySelector('#config-text'); return t.value.slice(t.selectionStart, t.selectionEnd);",
        json!([]),
    );
    assert_eq!(
        selected, "scheduler_name = 3",
        "the faulty line is selected"
    );
    let config = admin.request("GET", "/admin/config", None).unwrap().body;
    assert!(config.contains("PoolPreference"), "{config}");
    browser.screenshot_at("config-error", "#config-result");

    // The only console errors are the two refusals this test provoked.
    let errors = browser.console_errors();
    let provoked = |e: &String| {
        e.contains("Failed to load resource")
            && (e.contains("status of 403") || e.contains("status of 400"))
    };
    assert!(errors.iter().all(provoked), "{errors:?}");
    assert_eq!(errors.len(), 2, "{errors:?}");
}

/// The Gangs view: each PodGroup's progress toward `minMember` and its members by state, as the
/// scheduler has them: a complete gang bound, a member held at Permit while its partner is
/// gated, and a gang short of members all pending.
#[test]
fn the_gangs_view_shows_each_gang_s_progress_and_its_members_by_state() {
    let dir = temp_dir("browser-gangs");
    let config = crate::support::repo_root().join("examples/configs/gangs.toml");
    let server = Server::start(&dir, &["--config", config.to_str().unwrap()]);
    let admin = server.admin();
    let node = |name: &str| {
        json!({ "kind": "Node", "metadata": { "name": name },
            "status": { "allocatable": { "cpu": "8", "memory": "16Gi", "pods": "110" } } })
    };
    let group = |name: &str, min: u32| {
        json!({ "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": { "name": name, "namespace": "default" },
            "spec": { "minMember": min, "scheduleTimeoutSeconds": 600 } })
    };
    let member = |name: &str, group: &str, gated: bool| {
        let mut pod = json!({ "kind": "Pod",
            "metadata": { "name": name, "namespace": "default",
                "labels": { "scheduling.x-k8s.io/pod-group": group } },
            "spec": { "containers": [{ "name": "c", "resources": { "requests": { "cpu": "1" } } }] } });
        if gated {
            pod["spec"]["schedulingGates"] = json!([{ "name": "example.com/later" }]);
        }
        pod
    };
    let objects = vec![
        node("n1"),
        group("ready", 2),
        group("held", 2),
        group("short", 3),
        member("ready-0", "ready", false),
        member("ready-1", "ready", false),
        member("held-0", "held", false),
        member("held-1", "held", true),
        member("short-0", "short", false),
        member("short-1", "short", false),
    ];
    ok(send(
        &admin,
        "POST",
        "/v1/objects",
        json!({ "kind": "List", "items": objects }),
    ));

    let browser = Browser::start();
    browser.open(&format!("{}/#/gangs", server.url));
    browser.wait_for(
        "the complete gang bound and a member held at Permit",
        "route(); const held = document.querySelector('tr[data-gang=\"default/held\"] td.members.waiting');
         const ready = document.querySelector('tr[data-gang=\"default/ready\"] td.members.bound');
         return held && ready && held.textContent.includes('default/held-0')
           && ready.textContent.includes('default/ready-0') && ready.textContent.includes('default/ready-1');",
        json!([]),
    );
    browser.view("#/gangs");
    let row =
        |gang: &str, cell: &str| browser.text(&format!("tr[data-gang=\"default/{gang}\"] {cell}"));
    assert_eq!(row("ready", "span.assigned"), "2 of minMember 2");
    assert_eq!(row("held", "span.assigned"), "1 of minMember 2");
    assert!(row("held", "td.members.waiting").contains("on n1"));
    assert!(row("held", "td.members.pending").contains("default/held-1"));
    assert_eq!(row("short", "span.assigned"), "0 of minMember 3");
    let short_pending = row("short", "td.members.pending");
    assert!(short_pending.contains("default/short-0") && short_pending.contains("default/short-1"));
    assert_eq!(row("short", "td.members.bound"), "");
    browser.screenshot_at("gangs", "#gangs-table");
    assert_eq!(browser.console_errors(), Vec::<String>::new());
}

#[test]
fn the_shadow_view_shows_agreement_the_disagreeing_pods_with_both_scores_and_promotes() {
    use super::shadow::{compared, create_and_bind, shadowed_server};
    let server = shadowed_server("browser-shadow");
    let admin = server.admin();
    let names: Vec<String> = (0..10).map(|i| format!("p-{i}")).collect();
    create_and_bind(&admin, &names);
    let report = compared(&admin, 10);

    let browser = Browser::start();
    browser.open(&format!("{}/#/shadow", server.url));
    browser.wait_for(
        "the shadow's counts",
        "route(); const c = document.querySelector('div.shadow b.compared');
         return c && c.textContent === '10';",
        json!([]),
    );
    browser.view("#/shadow");
    let counts = &report["counts"];
    for verdict in ["same", "tie", "different", "infeasible", "error"] {
        let shown = browser.text(&format!("div.shadow b.count.{verdict}"));
        assert_eq!(shown, counts[verdict].to_string(), "{verdict}");
    }
    let agreement = report["agreement"].as_f64().unwrap();
    assert_eq!(
        browser.text("div.shadow b.agreement"),
        format!("{:.1}%", agreement * 100.0)
    );
    assert!(browser
        .text("span.shadow-chain")
        .contains("ZonePreference×3"));
    assert!(!browser.text("span.live-chain").contains("ZonePreference"));
    let latest = report["latest"].as_array().unwrap();
    assert!(
        !latest.is_empty(),
        "some pods went to the larger node: {report}"
    );
    let rows = browser.run(
        "return document.querySelectorAll('table.disagreements tbody tr').length;",
        json!([]),
    );
    assert_eq!(rows, json!(latest.len()));
    let first = &latest[0];
    let row = |cell: &str| {
        browser.text(&format!(
            "table.disagreements tr[data-pod=\"{}\"] {cell}",
            first["pod"].as_str().unwrap()
        ))
    };
    assert_eq!(row("td.live-node"), first["live"]["node"].as_str().unwrap());
    assert_eq!(row("td.shadow-node"), "node-a");
    let shadow_node = row("td.breakdown div[data-node=\"node-a\"]");
    assert!(shadow_node.contains("ZonePreference 100"), "{shadow_node}");
    assert!(row("td a").ends_with(first["pod"].as_str().unwrap()));
    browser.screenshot_at("shadow", "div.shadow .minutes");

    // Promote from the page with the admin token: the chains change places.
    browser.type_into("#token", TOKEN);
    browser.run("document.querySelector('#token').blur();", json!([]));
    // Clicked from the page's own script: entering the token renders the view again, which
    // can replace a button found a moment before.
    browser.wait_for(
        "the promote button",
        "const b = document.querySelector('div.shadow button.promote'); if (b) b.click(); return !!b;",
        json!([]),
    );
    browser.wait_for(
        "the promoted chains",
        "const live = document.querySelector('span.live-chain');
         return live && live.textContent.includes('ZonePreference');",
        json!([]),
    );
    assert!(!browser.text("span.shadow-chain").contains("ZonePreference"));
    assert_eq!(browser.console_errors(), Vec::<String>::new());
}
