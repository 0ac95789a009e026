//! What keeps a page from another site out of the API: a browser sends its cookies nowhere here
//! (the API takes bearer tokens only), but on the loopback default nothing needs a token, so any
//! page the user opens could send requests to `127.0.0.1:7878` and read nothing, yet change
//! objects and plugins. Three checks close that, before any route runs:
//!
//! - **Host**: on a loopback listener the `Host` header must be an IP address, `localhost`, or a
//!   name given with `--allowed-host`; a page of `attacker.example` whose name was re-pointed at
//!   127.0.0.1 (DNS rebinding) is refused. Off loopback every request but the probes needs a
//!   token, which no page has; there the check applies only when `--allowed-host` is set.
//! - **Origin**: a request whose `Origin` is not the server's own (scheme, host and port as its
//!   `Host` header names them) or one given with `--allowed-origin` is refused, whatever its
//!   method: browsers send `Origin` on every cross-site request that can change anything.
//! - **Media type**: a body must say what it is (JSON or YAML for objects, a component or a form
//!   for plugins, TOML, YAML or JSON for the configuration); `text/plain`, which a page can send
//!   across sites without asking, is refused.
//!
//! Every answer also forbids framing, so the status page cannot be laid under another site's
//! clicks.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{ApiError, Shared};

/// The sites a server answers, from its listen address and `--allowed-host` /
/// `--allowed-origin`.
#[derive(Debug, Clone)]
pub struct Sites {
    loopback: bool,
    hosts: Vec<String>,
    origins: Vec<String>,
}

impl Sites {
    /// The sites of a server listening on `listen`.
    pub fn new(listen: SocketAddr, hosts: &[String], origins: &[String]) -> Sites {
        Sites {
            loopback: listen.ip().is_loopback(),
            hosts: hosts.iter().map(|h| h.to_ascii_lowercase()).collect(),
            origins: origins
                .iter()
                .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
                .collect(),
        }
    }

    /// Whether a request with these headers may go on.
    ///
    /// # Errors
    /// Why not: a `Host` the server is not reached by, or an `Origin` of another site.
    pub fn check(&self, headers: &HeaderMap) -> Result<(), String> {
        let host = headers
            .get(header::HOST)
            .map(|h| h.to_str().map(str::to_ascii_lowercase))
            .transpose()
            .map_err(|_| "the Host header is not text".to_string())?;
        if let Some(host) = &host {
            if !self.host_allowed(host) {
                return Err(format!(
                    "Host {host:?} does not name this server: use its address or localhost, or start it with --allowed-host"
                ));
            }
        }
        let Some(origin) = headers.get(header::ORIGIN) else {
            return Ok(());
        };
        let origin = origin
            .to_str()
            .map_err(|_| "the Origin header is not text".to_string())?
            .trim_end_matches('/')
            .to_ascii_lowercase();
        let own = host.as_deref().is_some_and(|host| {
            origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"))
                == Some(host)
        });
        if own || self.origins.contains(&origin) {
            Ok(())
        } else {
            Err(format!(
                "requests from pages of {origin} are refused: only this server's own page may call it from a browser (see --allowed-origin)"
            ))
        }
    }

    fn host_allowed(&self, host: &str) -> bool {
        let name = host_name(host);
        if self.hosts.iter().any(|h| h == name) || name.parse::<IpAddr>().is_ok() {
            return true;
        }
        if self.loopback {
            name == "localhost"
        } else {
            self.hosts.is_empty()
        }
    }
}

/// The name or address of a `Host` header, without its port (`[::1]:7878` -> `::1`).
fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

/// The media types a body sent to `path` may have, and how to say them; None: any (the route
/// takes no body, or does not exist).
fn accepted_media(method: &Method, path: &str) -> Option<(&'static [&'static str], &'static str)> {
    const OBJECTS: &[&str] = &[
        "application/json",
        "application/yaml",
        "application/x-yaml",
        "text/yaml",
        "text/x-yaml",
    ];
    const CONFIG: &[&str] = &[
        "application/toml",
        "text/toml",
        "application/yaml",
        "application/x-yaml",
        "text/yaml",
        "application/json",
    ];
    const COMPONENT: &[&str] = &["application/wasm", "application/octet-stream"];
    const FORM: &[&str] = &["multipart/form-data"];
    if *method != Method::POST && *method != Method::PUT && *method != Method::PATCH {
        return None;
    }
    if path.starts_with("/v1/") {
        Some((OBJECTS, "application/json or application/yaml"))
    } else if path == "/admin/config" {
        Some((CONFIG, "application/toml"))
    } else if path == "/admin/plugins" {
        Some((FORM, "multipart/form-data"))
    } else if path.starts_with("/admin/plugins/") {
        Some((COMPONENT, "application/wasm"))
    } else {
        None
    }
}

/// Whether `request` carries a body (declared, or chunked).
fn has_body(headers: &HeaderMap) -> bool {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    declared.is_some_and(|n| n > 0) || headers.contains_key(header::TRANSFER_ENCODING)
}

/// Refuses a body whose `Content-Type` is not one `path` takes (415).
fn check_media(method: &Method, path: &str, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some((accepted, say)) = accepted_media(method, path) else {
        return Ok(());
    };
    if !has_body(headers) {
        return Ok(());
    }
    let given = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = given
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if accepted.contains(&essence.as_str()) {
        return Ok(());
    }
    let what = if given.is_empty() {
        "a body without a Content-Type".to_string()
    } else {
        format!("Content-Type {given:?}")
    };
    Err(ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        format!("{what} is not accepted here: send {say}"),
    ))
}

/// The longest request target (path and query) answered: far above any the API uses (the
/// longest are object paths of 253-character names), so a longer one is garbage or an attack.
/// hyper answers a target over 64 KiB itself, with an empty 414, before any of this runs.
pub const MAX_URI_BYTES: usize = 8 * 1024;

fn check_uri_length(uri: &axum::http::Uri) -> Result<(), ApiError> {
    let length = uri.path_and_query().map_or(0, |p| p.as_str().len());
    if length > MAX_URI_BYTES {
        return Err(ApiError::new(
            StatusCode::URI_TOO_LONG,
            format!("the request target is {length} bytes, more than the {MAX_URI_BYTES} this server reads"),
        ));
    }
    Ok(())
}

/// The middleware: the checks of this module, then the route, then the anti-framing headers.
pub(super) async fn guard_site(
    State(server): State<Shared>,
    request: Request,
    next: Next,
) -> Response {
    let refused = check_uri_length(request.uri())
        .and_then(|()| {
            server
                .sites
                .check(request.headers())
                .map_err(|message| ApiError::new(StatusCode::FORBIDDEN, message))
        })
        .and_then(|()| check_media(request.method(), request.uri().path(), request.headers()));
    let mut response = match refused {
        Ok(()) => next.run(request).await,
        Err(e) => e.into_response(),
    };
    let headers = response.headers_mut();
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("frame-ancestors 'none'"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(
                header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    #[test]
    fn a_loopback_server_answers_its_own_names_and_refuses_rebound_ones() {
        let sites = Sites::new(
            "127.0.0.1:7878".parse().unwrap(),
            &["sched.internal".into()],
            &[],
        );
        let cases = [
            ("the address itself", "127.0.0.1:7878", true),
            (
                "localhost with another port (a port-forward)",
                "localhost:9000",
                true,
            ),
            ("IPv6 loopback", "[::1]:7878", true),
            ("a configured name", "Sched.Internal:7878", true),
            (
                "a name re-pointed at 127.0.0.1",
                "attacker.example:7878",
                false,
            ),
            ("a name without a port", "attacker.example", false),
            (
                "a lookalike of localhost",
                "localhost.attacker.example",
                false,
            ),
        ];
        for (name, host, allowed) in cases {
            let outcome = sites.check(&headers(&[("host", host)]));
            assert_eq!(outcome.is_ok(), allowed, "{name}: {outcome:?}");
        }
        assert!(sites.check(&HeaderMap::new()).is_ok(), "no Host (HTTP/1.0)");
    }

    #[test]
    fn off_loopback_any_name_is_answered_unless_names_are_configured() {
        let open = Sites::new("0.0.0.0:7878".parse().unwrap(), &[], &[]);
        assert!(open.check(&headers(&[("host", "sched.example")])).is_ok());
        let named = Sites::new(
            "0.0.0.0:7878".parse().unwrap(),
            &["sched.example".into()],
            &[],
        );
        assert!(named.check(&headers(&[("host", "sched.example")])).is_ok());
        assert!(named.check(&headers(&[("host", "10.0.0.7:7878")])).is_ok());
        assert!(named.check(&headers(&[("host", "other.example")])).is_err());
    }

    #[test]
    fn only_the_servers_own_origin_and_configured_ones_may_call_from_a_browser() {
        let sites = Sites::new(
            "127.0.0.1:7878".parse().unwrap(),
            &[],
            &["https://dash.example:8443/".into()],
        );
        let cases = [
            ("the page itself", "http://127.0.0.1:7878", true),
            (
                "another port on the same host",
                "http://127.0.0.1:3000",
                false,
            ),
            ("another site", "http://attacker.example", false),
            ("a sandboxed frame", "null", false),
            ("a configured origin", "https://dash.example:8443", true),
        ];
        for (name, origin, allowed) in cases {
            let outcome = sites.check(&headers(&[("host", "127.0.0.1:7878"), ("origin", origin)]));
            assert_eq!(outcome.is_ok(), allowed, "{name}: {outcome:?}");
        }
    }

    #[test]
    fn bodies_are_taken_only_with_their_real_media_types() {
        let body = [("content-length", "10")];
        let with = |ct: &str| {
            let mut h = headers(&body);
            h.insert(header::CONTENT_TYPE, HeaderValue::from_str(ct).unwrap());
            h
        };
        let cases = [
            (
                "YAML objects",
                Method::POST,
                "/v1/objects",
                Some("application/yaml"),
                true,
            ),
            (
                "JSON with a charset",
                Method::PUT,
                "/v1/nodes/a",
                Some("application/json; charset=utf-8"),
                true,
            ),
            (
                "plain text parsed as YAML before",
                Method::POST,
                "/v1/objects",
                Some("text/plain"),
                false,
            ),
            (
                "a form",
                Method::POST,
                "/v1/objects",
                Some("application/x-www-form-urlencoded"),
                false,
            ),
            ("no Content-Type", Method::POST, "/v1/objects", None, false),
            (
                "a component",
                Method::PUT,
                "/admin/plugins/P",
                Some("application/wasm"),
                true,
            ),
            (
                "a component as text",
                Method::PUT,
                "/admin/plugins/P",
                Some("text/plain"),
                false,
            ),
            (
                "an upload form",
                Method::POST,
                "/admin/plugins",
                Some("multipart/form-data; boundary=x"),
                true,
            ),
            (
                "TOML",
                Method::PUT,
                "/admin/config",
                Some("application/toml"),
                true,
            ),
            (
                "TOML as text",
                Method::PUT,
                "/admin/config",
                Some("text/plain"),
                false,
            ),
            ("a GET", Method::GET, "/v1/nodes", Some("text/plain"), true),
        ];
        for (name, method, path, content_type, accepted) in cases {
            let h = content_type.map_or_else(|| headers(&body), with);
            let outcome = check_media(&method, path, &h);
            assert_eq!(outcome.is_ok(), accepted, "{name}: {outcome:?}");
        }
        assert!(
            check_media(&Method::POST, "/v1/objects", &HeaderMap::new()).is_ok(),
            "an empty body is left to the route"
        );
    }
}
