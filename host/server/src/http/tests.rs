//! Request handling through the assembled router (`tower::ServiceExt::oneshot`), no socket:
//! tokens, the error shape, body limits and the object round trip.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, Request};
use clap::Parser as _;
use serde_json::{json, Value};
use tower::ServiceExt as _;

use crate::{ServeArgs, Server};

const ADMIN: &str = "admin-token-6d2";
const WRITE: &str = "write-token-81a";
const READ: &str = "read-token-3c9";

#[derive(clap::Parser)]
struct Cli {
    #[command(flatten)]
    args: ServeArgs,
}

/// A server with its engine running and no listener; shut down when dropped.
struct Harness {
    server: Arc<Server>,
    dir: PathBuf,
    runtime: tokio::runtime::Runtime,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.server.engine.shutdown();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Harness {
    /// `serve` with `flags` (after `--data-dir` and `--runtime native`); `tokens` names which of
    /// the three token files to pass.
    fn open(tokens: &[&str], flags: &[&str]) -> Harness {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "wasched-http-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut argv: Vec<String> = ["serve", "--runtime", "native", "--data-dir"]
            .map(String::from)
            .to_vec();
        argv.push(dir.join("data").display().to_string());
        for (kind, flag, token) in [
            ("admin", "--token-file", ADMIN),
            ("write", "--write-token-file", WRITE),
            ("read", "--read-token-file", READ),
        ] {
            if tokens.contains(&kind) {
                let file = dir.join(kind);
                std::fs::write(&file, format!("{token}\n")).unwrap();
                argv.push(flag.into());
                argv.push(file.display().to_string());
            }
        }
        argv.extend(flags.iter().map(|f| f.to_string()));
        let args = Cli::parse_from(argv).args;
        let (server, _) = Server::open(args).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        Harness {
            server,
            dir,
            runtime,
        }
    }

    /// The status and body of one request; a body goes with the media type its endpoint takes.
    fn call(&self, method: &str, path: &str, token: Option<&str>, body: &str) -> (u16, String) {
        let mut headers = Vec::new();
        let bearer = token.map(|t| format!("Bearer {t}"));
        if let Some(bearer) = &bearer {
            headers.push(("authorization", bearer.as_str()));
        }
        if !body.is_empty() {
            headers.push(("content-type", media_type_for(path, body)));
        }
        let (status, _, text) = self.send(method, path, &headers, body);
        (status, text)
    }

    /// The status, headers and body of one request with exactly `headers` (and the body's
    /// length).
    fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> (u16, axum::http::HeaderMap, String) {
        let mut request = Request::builder().method(method).uri(path);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if !body.is_empty() {
            request = request.header(header::CONTENT_LENGTH, body.len());
        }
        let request = request.body(Body::from(body.to_string())).unwrap();
        let router = super::router(self.server.clone());
        self.runtime.block_on(async move {
            let response = router.oneshot(request).await.unwrap();
            let status = response.status().as_u16();
            let headers = response.headers().clone();
            let bytes = axum::body::to_bytes(response.into_body(), 64 << 20)
                .await
                .unwrap();
            (
                status,
                headers,
                String::from_utf8_lossy(&bytes).into_owned(),
            )
        })
    }

    fn json(&self, method: &str, path: &str, token: Option<&str>, body: &str) -> (u16, Value) {
        let (status, text) = self.call(method, path, token, body);
        let value = serde_json::from_str(&text)
            .unwrap_or_else(|_| panic!("{method} {path}: not JSON ({status}): {text}"));
        (status, value)
    }
}

/// What a client of `path` says its body is.
fn media_type_for(path: &str, body: &str) -> &'static str {
    if path == "/admin/config" {
        "application/toml"
    } else if path.starts_with("/admin/plugins/") {
        "application/wasm"
    } else if body.trim_start().starts_with('{') {
        "application/json"
    } else {
        "application/yaml"
    }
}

fn node(name: &str) -> String {
    json!({"kind": "Node", "metadata": {"name": name},
           "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "10"}}})
    .to_string()
}

#[test]
fn each_token_opens_what_it_grants_and_nothing_more() {
    let h = Harness::open(&["admin", "write", "read"], &[]);
    let cases: &[(&str, &str, Option<&str>, String, u16)] = &[
        ("GET", "/v1/nodes", None, String::new(), 401),
        ("GET", "/v1/nodes", Some("nope"), String::new(), 403),
        ("GET", "/v1/nodes", Some(READ), String::new(), 200),
        ("GET", "/metrics", None, String::new(), 401),
        ("GET", "/metrics", Some(READ), String::new(), 200),
        ("GET", "/v1/watch", None, String::new(), 401),
        ("POST", "/v1/nodes", Some(READ), node("r"), 403),
        ("POST", "/v1/objects", Some(READ), node("r"), 403),
        ("POST", "/v1/nodes", None, node("a"), 401),
        ("POST", "/v1/nodes", Some(WRITE), node("w"), 201),
        ("DELETE", "/v1/nodes/w", Some(READ), String::new(), 403),
        ("POST", "/v1/nodes", Some(ADMIN), node("x"), 201),
        ("GET", "/admin/plugins", Some(WRITE), String::new(), 403),
        ("GET", "/admin/plugins", None, String::new(), 401),
        ("GET", "/admin/plugins", Some(ADMIN), String::new(), 200),
        ("GET", "/healthz", None, String::new(), 200),
        ("GET", "/openapi.json", None, String::new(), 200),
        ("GET", "/", None, String::new(), 200),
        ("GET", "/v1/status/plugins", None, String::new(), 401),
        ("GET", "/v1/status/plugins", Some(READ), String::new(), 200),
        ("GET", "/v1/status/nodes", None, String::new(), 401),
        ("GET", "/v1/status/nodes", Some(READ), String::new(), 200),
        (
            "GET",
            "/v1/watch?policyChanges=true",
            Some("nope"),
            String::new(),
            403,
        ),
    ];
    for (method, path, token, body, expected) in cases {
        let (status, text) = h.call(method, path, *token, body);
        assert_eq!(status, *expected, "{method} {path} with {token:?}: {text}");
        if status >= 400 {
            let status_object: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(status_object["kind"], "Status", "{text}");
            assert_eq!(status_object["code"], *expected);
        }
    }
    let (_, refusal) = h.json("POST", "/v1/nodes", Some(READ), &node("r"));
    assert_eq!(
        refusal["message"],
        "this token does not allow changing cluster objects: it is a read token"
    );
    let (_, list) = h.json("GET", "/v1/nodes", Some(READ), "");
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["w", "x"], "refused writes wrote nothing");
}

#[test]
fn without_tokens_on_loopback_everything_answers() {
    let h = Harness::open(&[], &[]);
    assert_eq!(h.call("POST", "/v1/nodes", None, &node("n")).0, 201);
    assert_eq!(h.call("GET", "/metrics", None, "").0, 200);
    assert_eq!(h.call("GET", "/admin/config", None, "").0, 200);
}

#[test]
fn an_object_round_trips_and_the_server_keeps_what_it_owns() {
    let h = Harness::open(&[], &[]);
    let (status, created) = h.json("POST", "/v1/nodes", None, &node("n1"));
    assert_eq!(status, 201, "{created}");
    let uid = created["metadata"]["uid"].as_str().unwrap().to_string();
    assert!(!uid.is_empty());
    let (status, fetched) = h.json("GET", "/v1/nodes/n1", None, "");
    assert_eq!(status, 200);
    assert_eq!(fetched["metadata"]["uid"], uid.as_str());
    assert_eq!(fetched["status"]["allocatable"]["cpu"], "4");

    let (status, replaced) = h.json("PUT", "/v1/nodes/n1", None, &node("n1"));
    assert_eq!(status, 200, "{replaced}");
    assert_eq!(
        replaced["metadata"]["uid"],
        uid.as_str(),
        "the uid survives a PUT"
    );
    let (status, conflict) = h.json("POST", "/v1/nodes", None, &node("n1"));
    assert_eq!(
        (status, conflict["reason"].as_str()),
        (409, Some("AlreadyExists"))
    );

    let pod = |node: &str| {
        json!({"metadata": {"name": "p"}, "spec": {"nodeName": node, "containers": [{"name": "c"}]}})
            .to_string()
    };
    assert_eq!(
        h.call("POST", "/v1/namespaces/team/pods", None, &pod("n1"))
            .0,
        201
    );
    let (status, moved) = h.json("PUT", "/v1/namespaces/team/pods/p", None, &pod("n2"));
    assert_eq!(status, 422, "{moved}");
    assert!(
        moved["message"]
            .as_str()
            .unwrap()
            .contains("spec.nodeName is immutable once set"),
        "{moved}"
    );
    let (status, mismatch) = h.json(
        "POST",
        "/v1/namespaces/other/pods",
        None,
        &json!({"metadata": {"name": "q", "namespace": "team"}}).to_string(),
    );
    assert_eq!(status, 400);
    assert!(mismatch["message"]
        .as_str()
        .unwrap()
        .contains("does not match the URL"));

    assert_eq!(h.call("DELETE", "/v1/nodes/n1", None, "").0, 200);
    let (status, gone) = h.json("GET", "/v1/nodes/n1", None, "");
    assert_eq!((status, gone["reason"].as_str()), (404, Some("NotFound")));
}

#[test]
fn unknown_paths_methods_and_oversized_bodies_get_a_status() {
    let h = Harness::open(&[], &["--max-request-bytes", "1000"]);
    let (status, unknown) = h.json("GET", "/v2/things", None, "");
    assert_eq!(
        (status, unknown["reason"].as_str()),
        (404, Some("NotFound"))
    );
    let (status, method) = h.json("PATCH", "/v1/nodes", None, "");
    assert_eq!(status, 405, "{method}");
    let big = format!(
        "{{\"kind\": \"Node\", \"metadata\": {{\"name\": \"{}\"}}}}",
        "n".repeat(2000)
    );
    let (status, too_large) = h.json("POST", "/v1/nodes", None, &big);
    assert_eq!(status, 413, "{too_large}");
    assert!(too_large["message"]
        .as_str()
        .unwrap()
        .contains("at most 1000"));
    let (status, garbage) = h.json("POST", "/v1/objects", None, "kind: [\n");
    assert_eq!(status, 400);
    assert!(
        garbage["message"]
            .as_str()
            .unwrap()
            .contains("invalid YAML"),
        "{garbage}"
    );
}

/// Waits (a few seconds at most) until `done` holds.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn the_status_endpoints_read_the_schedulers_cache_queue_and_choices() {
    let h = Harness::open(&[], &[]);
    let pod = |name: &str, cpu: &str, team: &str| {
        json!({"kind": "Pod", "metadata": {"name": name, "namespace": "apps", "labels": {"team": team}},
               "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}})
    };
    let zoned = json!({"kind": "Node", "metadata": {"name": "n1", "labels": {
            "topology.kubernetes.io/region": "eu", "topology.kubernetes.io/zone": "eu-1"}},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "10"}}});
    let list = json!({"kind": "List", "items": [
        zoned, serde_json::from_str::<Value>(&node("n2")).unwrap(),
        pod("small", "1500m", "web"), pod("huge-a", "64", "ml"), pod("huge-b", "64", "web"),
    ]});
    let (status, applied) = h.call("POST", "/v1/objects", None, &list.to_string());
    assert_eq!(status, 200, "{applied}");
    eventually("both huge pods were tried", || {
        let (_, page) = h.json("GET", "/v1/status/pending", None, "");
        page["items"].as_array().unwrap().len() == 2
            && page["items"]
                .as_array()
                .unwrap()
                .iter()
                .all(|p| p["attempts"] == 1)
    });

    let (_, nodes) = h.json("GET", "/v1/status/nodes", None, "");
    let nodes = nodes["nodes"].as_array().unwrap().clone();
    assert_eq!(nodes.len(), 2);
    // The scheduler assumes a pod before the writer records its binding and placement.
    let small_status = || h.json("GET", "/v1/status/pods/apps/small", None, "").1;
    eventually("small's placement is recorded", || {
        !small_status()["placement"].is_null()
    });
    let small = small_status();
    let placed_on = small["node"].as_str().unwrap();
    for n in &nodes {
        let expected = if n["name"] == placed_on { 1500 } else { 0 };
        assert_eq!(n["requested"]["cpu"], expected, "{n}");
        assert_eq!(n["requested"]["pods"], expected / 1500, "{n}");
        assert_eq!(n["allocatable"]["cpu"], 4000, "{n}");
    }
    let zone_of = |name: &str| nodes.iter().find(|n| n["name"] == name).unwrap()["zone"].clone();
    assert_eq!(zone_of("n1"), "eu/eu-1");
    assert_eq!(zone_of("n2"), "");
    let (_, labels) = h.json("GET", "/v1/status/nodes/n1", None, "");
    assert_eq!(labels["labels"]["topology.kubernetes.io/zone"], "eu-1");
    assert_eq!(h.call("GET", "/v1/status/nodes/none", None, "").0, 404);

    // The placed pod: where, and the scores that chose it (two nodes were feasible).
    assert!(
        ["bound", "assumed"].contains(&small["state"].as_str().unwrap()),
        "{small}"
    );
    let choice = &small["placement"]["choice"];
    assert_eq!(choice["feasibleNodes"], 2, "{small}");
    let scores = choice["scores"].as_object().unwrap();
    assert!(scores.contains_key("NodeResourcesFit"), "{small}");
    assert!(choice["total"].as_i64().unwrap() > 0, "{small}");
    let (status, placement) = h.json("GET", "/v1/namespaces/apps/pods/small/placement", None, "");
    assert_eq!(status, 200);
    assert_eq!(placement["node"], placed_on);
    assert_eq!(placement["choice"], *choice);
    assert_eq!(
        h.call("GET", "/v1/namespaces/apps/pods/huge-a/placement", None, "")
            .0,
        404
    );

    // Pending: searched by label or by name, sorted, paged.
    let (_, huge) = h.json("GET", "/v1/status/pods/apps/huge-a", None, "");
    assert_eq!(huge["state"], "pending");
    let names = |query: &str| {
        let (status, page) = h.json("GET", &format!("/v1/status/pending?{query}"), None, "");
        assert_eq!(status, 200, "{page}");
        let names: Vec<String> = page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["pod"].as_str().unwrap().to_string())
            .collect();
        (
            names,
            page["matched"].as_u64().unwrap(),
            page["total"].as_u64().unwrap(),
        )
    };
    assert_eq!(
        names(""),
        (vec!["apps/huge-a".into(), "apps/huge-b".into()], 2, 2)
    );
    assert_eq!(names("q=team=web"), (vec!["apps/huge-b".into()], 1, 2));
    assert_eq!(names("q=HUGE-A"), (vec!["apps/huge-a".into()], 1, 2));
    assert_eq!(names("q=apps/+team=ml"), (vec!["apps/huge-a".into()], 1, 2));
    assert_eq!(
        names("offset=1&limit=1"),
        (vec!["apps/huge-b".into()], 2, 2)
    );
    let (_, page) = h.json("GET", "/v1/status/pending?q=huge-a", None, "");
    let message = page["items"][0]["message"].as_str().unwrap();
    assert!(
        message.starts_with("0/2 nodes are available: 2 Insufficient cpu."),
        "{message}"
    );
    assert_eq!(
        h.call("GET", "/v1/status/pending?sort=age", None, "").0,
        400
    );

    let (_, unknown) = h.json("GET", "/v1/status/pods/apps/nobody", None, "");
    assert_eq!(unknown["state"], "unknown");
}

#[test]
fn a_page_of_another_site_cannot_change_objects_or_plugins_on_the_open_loopback_default() {
    let h = Harness::open(&[], &[]);
    let yaml = "kind: Node\nmetadata: {name: planted}\n";
    let own = [
        ("host", "127.0.0.1:7878"),
        ("origin", "http://127.0.0.1:7878"),
    ];
    /// A request a page could send, and how it is refused.
    struct Refused<'a> {
        name: &'a str,
        path: &'a str,
        headers: Vec<(&'a str, &'a str)>,
        status: u16,
        message: &'a str,
    }
    let foreign = [
        ("host", "127.0.0.1:7878"),
        ("origin", "http://attacker.example"),
    ];
    let cases = [
        Refused {
            name: "a form post of text/plain from another origin",
            path: "/v1/objects",
            headers: vec![foreign[0], foreign[1], ("content-type", "text/plain")],
            status: 403,
            message: "requests from pages of http://attacker.example are refused",
        },
        Refused {
            name: "a multipart upload from another origin",
            path: "/admin/plugins",
            headers: vec![
                foreign[0],
                foreign[1],
                ("content-type", "multipart/form-data; boundary=x"),
            ],
            status: 403,
            message: "requests from pages of http://attacker.example are refused",
        },
        Refused {
            name: "a rebound name without an Origin",
            path: "/v1/objects",
            headers: vec![
                ("host", "attacker.example:7878"),
                ("content-type", "application/yaml"),
            ],
            status: 403,
            message: "Host \"attacker.example:7878\" does not name this server",
        },
        Refused {
            name: "text/plain from the server's own page",
            path: "/v1/objects",
            headers: vec![own[0], own[1], ("content-type", "text/plain")],
            status: 415,
            message: "Content-Type \"text/plain\" is not accepted here: send application/json or application/yaml",
        },
        Refused {
            name: "a body without a media type",
            path: "/v1/objects",
            headers: vec![own[0]],
            status: 415,
            message: "a body without a Content-Type is not accepted here",
        },
    ];
    for case in &cases {
        let name = case.name;
        let (got, answer_headers, text) = h.send("POST", case.path, &case.headers, yaml);
        assert_eq!(got, case.status, "{name}: {text}");
        let body: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{name}: {text}"));
        assert_eq!(body["kind"], "Status", "{name}");
        assert!(
            body["message"].as_str().unwrap().contains(case.message),
            "{name}: {body}"
        );
        assert_eq!(answer_headers["x-frame-options"], "DENY", "{name}");
    }
    let (_, nodes) = h.json("GET", "/v1/nodes", None, "");
    assert_eq!(nodes["items"], json!([]), "nothing was created");
    // The page itself still works: the same request with its own origin and a real type.
    let (status, _, text) = h.send(
        "POST",
        "/v1/objects",
        &[own[0], own[1], ("content-type", "application/yaml")],
        yaml,
    );
    assert_eq!(status, 200, "{text}");
    let (status, headers, _) = h.send("GET", "/", &[("host", "localhost:7878")], "");
    assert_eq!(status, 200);
    assert_eq!(headers["content-security-policy"], "frame-ancestors 'none'");
}

#[test]
fn query_errors_and_overlong_targets_answer_as_a_status() {
    let h = Harness::open(&[], &[]);
    for query in [
        "/v1/status/pending?limit=lots",
        "/v1/watch?policyChanges=maybe",
    ] {
        let (status, bad) = h.json("GET", query, None, "");
        assert_eq!(status, 400, "{query}: {bad}");
        assert_eq!(bad["kind"], "Status", "{query}");
        assert!(
            bad["message"].as_str().unwrap().contains("query string"),
            "{query}: {bad}"
        );
    }
    let long = format!("/v1/nodes?x={}", "a".repeat(super::site::MAX_URI_BYTES));
    let (status, too_long) = h.json("GET", &long, None, "");
    assert_eq!(status, 414, "{too_long}");
    assert_eq!(too_long["reason"], "RequestURITooLong");
}

#[test]
fn the_bearer_scheme_is_case_insensitive_and_a_read_token_sees_no_configuration() {
    let h = Harness::open(&["admin", "read"], &[]);
    for scheme in ["bearer", "BEARER", "Bearer"] {
        let auth = format!("{scheme} {READ}");
        let (status, _, _) = h.send("GET", "/v1/nodes", &[("authorization", &auth)], "");
        assert_eq!(status, 200, "{scheme}");
    }
    let (status, plugins) = h.json("GET", "/v1/status/plugins", Some(READ), "");
    assert_eq!(status, 200);
    assert!(plugins.get("config").is_none(), "{plugins}");
    assert_eq!(h.call("GET", "/admin/config", Some(READ), "").0, 403);
    let (_, plugins) = h.json("GET", "/v1/status/plugins", Some(ADMIN), "");
    assert!(plugins["config"].is_string(), "{plugins}");
}

#[test]
fn an_unauthenticated_chunked_body_is_not_read_before_the_refusal() {
    let h = Harness::open(&["admin"], &[]);
    let request = Request::builder()
        .method("PUT")
        .uri("/admin/plugins/P")
        .header(header::CONTENT_TYPE, "application/wasm")
        .header(header::TRANSFER_ENCODING, "chunked")
        // A body that never ends: reading it before answering would never answer.
        .body(Body::from_stream(futures_util::stream::repeat_with(|| {
            Ok::<_, std::io::Error>(axum::body::Bytes::from_static(&[0u8; 4096]))
        })))
        .unwrap();
    let router = super::router(h.server.clone());
    let status = h.runtime.block_on(async move {
        let answer =
            tokio::time::timeout(std::time::Duration::from_secs(10), router.oneshot(request));
        answer
            .await
            .expect("answered without reading the body")
            .unwrap()
            .status()
    });
    assert_eq!(status.as_u16(), 401);
}

/// `POST /v1/objects` takes a List's objects one at a time into one transaction: what one
/// object's write sets off (claims made from a template) still sees the objects after it, and
/// an object refused late leaves nothing of the earlier ones.
#[test]
fn a_list_is_written_an_object_at_a_time_in_one_transaction() {
    let h = Harness::open(&[], &[]);
    let pod = json!({"kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": "trainer", "namespace": "ml"},
        "spec": {"containers": [{"name": "c"}],
                 "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]}});
    let template = json!({"kind": "ResourceClaimTemplate", "apiVersion": "resource.k8s.io/v1",
        "metadata": {"name": "one-gpu", "namespace": "ml"},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}}});
    // As kubectl writes a List: `items` before `kind`, the pod before its template.
    let list = format!(
        r#"{{"apiVersion":"v1","items":[{pod},{template},{}],"kind":"List","metadata":{{}}}}"#,
        node("n1")
    );
    let (status, answer) = h.json("POST", "/v1/objects", None, &list);
    assert_eq!(status, 200, "{answer}");
    let written: Vec<(&str, &str)> = answer["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["kind"].as_str().unwrap(), i["result"].as_str().unwrap()))
        .collect();
    assert_eq!(
        written,
        [
            ("ResourceClaimTemplate", "created"),
            ("Node", "created"),
            ("Pod", "created")
        ]
    );
    let (_, stored) = h.json("GET", "/v1/namespaces/ml/pods/trainer", None, "");
    let claim = stored["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
        .as_str()
        .unwrap_or_else(|| panic!("the pod got a claim from its template: {stored}"));
    assert!(claim.starts_with("trainer-gpu-"), "{claim}");
    let (status, _) = h.json(
        "GET",
        &format!("/v1/namespaces/ml/resourceclaims/{claim}"),
        None,
        "",
    );
    assert_eq!(status, 200);

    // The second node is written before the pod that is refused: neither stays.
    let mut moved = pod.clone();
    moved["spec"]["nodeName"] = json!("n1");
    let mut moved_again = moved.clone();
    moved_again["spec"]["nodeName"] = json!("n2");
    assert_eq!(
        h.call(
            "PUT",
            "/v1/namespaces/ml/pods/trainer",
            None,
            &moved.to_string()
        )
        .0,
        200
    );
    let refused = format!(
        r#"{{"kind":"List","items":[{},{moved_again}]}}"#,
        node("n2")
    );
    let (status, answer) = h.json("POST", "/v1/objects", None, &refused);
    assert_eq!(status, 422, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .starts_with("Pod ml/trainer: spec.nodeName is immutable"),
        "{answer}"
    );
    assert_eq!(h.call("GET", "/v1/nodes/n2", None, "").0, 404);

    // A create answers with the object as stored, as a read gives it back.
    let (status, created) = h.json("POST", "/v1/nodes", None, &node("n3"));
    assert_eq!(status, 201);
    let (_, read) = h.json("GET", "/v1/nodes/n3", None, "");
    assert_eq!(created, read);
}
