//! The command-line client of a running `wasched serve`: `wasched plugin load|list|remove`,
//! `wasched config apply|show`, `wasched apply`, `wasched get pods|nodes`.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context as _};
use serde_json::Value;

use super::auth::ADMIN_TOKEN_ENV;

/// The environment variable holding the token a client sends when `--token-file` is not given.
pub const TOKEN_ENV: &str = "WASCHED_TOKEN";

/// Where the server is and how to authenticate.
#[derive(clap::Args, Debug, Clone)]
pub struct Connection {
    /// The server's URL.
    #[arg(
        long,
        env = "WASCHED_SERVER",
        default_value = "http://127.0.0.1:7878",
        global = true
    )]
    /// The server's base URL.
    pub server: String,
    /// A file holding the bearer token to send: admin, write or read, as the command needs
    /// (else $WASCHED_TOKEN, else $WASCHED_ADMIN_TOKEN).
    #[arg(long, global = true)]
    pub token_file: Option<std::path::PathBuf>,
}

/// A blocking HTTP client of the server's API.
pub struct Client {
    agent: ureq::Agent,
    base: String,
    token: Option<String>,
}

/// A response: status and body.
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// The body, as text.
    pub body: String,
}

impl Reply {
    /// The body as JSON.
    ///
    /// # Errors
    /// The body is not JSON.
    pub fn json(&self) -> anyhow::Result<Value> {
        serde_json::from_str(&self.body)
            .with_context(|| format!("the server answered {}: {}", self.status, self.body))
    }

    /// The body as JSON when the status is 2xx; otherwise the server's message as the error.
    ///
    /// # Errors
    /// A non-2xx status.
    pub fn ok_json(self) -> anyhow::Result<Value> {
        if (200..300).contains(&self.status) {
            return self.json();
        }
        let message = serde_json::from_str::<Value>(&self.body)
            .ok()
            .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_string))
            .unwrap_or_else(|| self.body.clone());
        bail!("{} (HTTP {})", message, self.status)
    }
}

/// The server's base URL from what a user wrote: `localhost:7878` means `http://localhost:7878`.
fn server_url(server: &str) -> String {
    let server = server.trim().trim_end_matches('/');
    if server.contains("://") {
        server.to_string()
    } else {
        format!("http://{server}")
    }
}

/// `text` as one URL path segment: everything but RFC 3986's unreserved characters
/// percent-encoded, so that `-n 'x/y'` asks for namespace `x/y` (which does not exist) rather than
/// another path.
fn path_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    // `.` and `..` alone would be read as dot-segments and remove path parts.
    let dot_segment = text == "." || text == "..";
    for byte in text.bytes() {
        let unreserved = byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~');
        if unreserved && !(dot_segment && byte == b'.') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

impl Client {
    /// A client of `connection`.
    ///
    /// # Errors
    /// The token file cannot be read.
    pub fn new(connection: &Connection) -> anyhow::Result<Client> {
        let token = match &connection.token_file {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?
                    .trim()
                    .to_string(),
            ),
            None => [TOKEN_ENV, ADMIN_TOKEN_ENV]
                .iter()
                .find_map(|name| std::env::var(name).ok().filter(|t| !t.trim().is_empty()))
                .map(|t| t.trim().to_string()),
        };
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(300)))
            .build();
        Ok(Client {
            agent: config.into(),
            base: server_url(&connection.server),
            token,
        })
    }

    /// Sends a request; `body` with its content type.
    ///
    /// # Errors
    /// The server cannot be reached.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> anyhow::Result<Reply> {
        let url = format!("{}{path}", self.base);
        let auth = self.token.as_ref().map(|t| format!("Bearer {t}"));
        let result = match (method, body) {
            ("GET", _) => {
                let mut r = self.agent.get(&url);
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                r.call()
            }
            ("DELETE", _) => {
                let mut r = self.agent.delete(&url);
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                r.call()
            }
            (method, body) => {
                let mut r = match method {
                    "PUT" => self.agent.put(&url),
                    "PATCH" => self.agent.patch(&url),
                    _ => self.agent.post(&url),
                };
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                let (content_type, bytes) = body.unwrap_or(("application/json", Vec::new()));
                // No `Expect: 100-continue`: when the server's refusal came after the client gave
                // up waiting, the upload raced the closing connection. The server reads and drops
                // an oversized body before refusing it, so the refusal always arrives.
                r.header("Content-Type", content_type).send(bytes)
            }
        };
        let mut response =
            result.with_context(|| format!("cannot reach the wasched server at {}", self.base))?;
        let status = response.status().as_u16();
        let body = response
            .body_mut()
            .with_config()
            .limit(1 << 30)
            .read_to_string()
            .context("reading the response")?;
        Ok(Reply { status, body })
    }
}

/// `wasched plugin load NAME FILE`.
///
/// # Errors
/// The file cannot be read or the server refused it.
pub fn plugin_load(
    client: &Client,
    name: &str,
    file: &Path,
    sha256: Option<&str>,
) -> anyhow::Result<String> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let mut path = format!("/admin/plugins/{name}");
    if let Some(sha) = sha256 {
        path.push_str(&format!("?sha256={sha}"));
    }
    let reply = client
        .request("PUT", &path, Some(("application/wasm", bytes)))?
        .ok_json()?;
    let verb = if reply["replaced"].as_bool() == Some(true) {
        "replaced"
    } else {
        "loaded"
    };
    let active = if reply["active"].as_bool() == Some(true) {
        "in use by the active profiles from the next cycle"
    } else {
        "not used by any profile yet: name it in the configuration"
    };
    Ok(format!(
        "plugin {name} {verb} (sha256 {}, {} bytes): {active}",
        reply["sha256"].as_str().unwrap_or("?"),
        reply["size"]
    ))
}

/// `wasched plugin list`: a table.
///
/// # Errors
/// The server refused or cannot be reached.
pub fn plugin_list(client: &Client) -> anyhow::Result<String> {
    let reply = client.request("GET", "/admin/plugins", None)?.ok_json()?;
    let mut out = format!(
        "{:<32} {:<9} {:<8} {:<14} {:>10} {:>7} {:>10} {:>16}  {}\n",
        "NAME", "SOURCE", "VERSION", "SHA256", "CALLS", "ERRORS", "QUARANTINE", "P99", "USED-BY"
    );
    for p in reply["plugins"].as_array().into_iter().flatten() {
        // The filter's p99 for a filter, else the score's, named so that neither passes for the other.
        let p99 = ["Filter", "Score"]
            .iter()
            .find_map(|point| {
                let seconds = p["p99Seconds"][point].as_f64()?;
                Some(format!("{:.0}µs {}", seconds * 1e6, point.to_lowercase()))
            })
            .unwrap_or_else(|| "-".to_string());
        let quarantine = p["quarantineSecondsLeft"]
            .as_u64()
            .map_or("-".to_string(), |s| format!("{s}s left"));
        let used: Vec<&str> = p["usedBy"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        out.push_str(&format!(
            "{:<32} {:<9} {:<8} {:<14} {:>10} {:>7} {:>10} {:>16}  {}\n",
            p["name"].as_str().unwrap_or(""),
            p["source"].as_str().unwrap_or(""),
            p["version"].as_str().unwrap_or("-"),
            p["sha256"].as_str().map_or("-", |s| &s[..s.len().min(12)]),
            p["calls"].to_string(),
            p["errors"].to_string(),
            quarantine,
            p99,
            if used.is_empty() {
                "-".to_string()
            } else {
                used.join(",")
            }
        ));
    }
    Ok(out)
}

/// `wasched get pods`: one line per pod with its node or why it is pending.
///
/// # Errors
/// The server refused or cannot be reached.
pub fn get_pods(client: &Client, namespace: Option<&str>) -> anyhow::Result<String> {
    let path = match namespace {
        Some(ns) => format!("/v1/namespaces/{}/pods", path_segment(ns)),
        None => "/v1/pods".to_string(),
    };
    let reply = client.request("GET", &path, None)?.ok_json()?;
    let mut out = format!(
        "{:<16} {:<32} {:<24} {:>8}  {}\n",
        "NAMESPACE", "NAME", "NODE", "ATTEMPTS", "STATUS"
    );
    for pod in reply["items"].as_array().into_iter().flatten() {
        let node = pod["spec"]["nodeName"].as_str().unwrap_or("<pending>");
        let condition = pod["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "PodScheduled");
        let status = match condition {
            Some(c) if c["status"] == "True" => "Scheduled".to_string(),
            Some(c) => format!(
                "{}: {}",
                c["reason"].as_str().unwrap_or("Pending"),
                c["message"].as_str().unwrap_or("")
            ),
            None => pod["status"]["phase"]
                .as_str()
                .unwrap_or(if node == "<pending>" {
                    "Pending"
                } else {
                    "Bound"
                })
                .to_string(),
        };
        let attempts = pod["metadata"]["annotations"][super::engine::ATTEMPTS_ANNOTATION]
            .as_str()
            .unwrap_or("0");
        out.push_str(&format!(
            "{:<16} {:<32} {:<24} {:>8}  {}\n",
            pod["metadata"]["namespace"].as_str().unwrap_or(""),
            pod["metadata"]["name"].as_str().unwrap_or(""),
            node,
            attempts,
            status
        ));
    }
    Ok(out)
}

/// `wasched get nodes`.
///
/// # Errors
/// The server refused or cannot be reached.
pub fn get_nodes(client: &Client) -> anyhow::Result<String> {
    let reply = client.request("GET", "/v1/nodes", None)?.ok_json()?;
    let mut out = format!("{:<32} {:>8} {:>12}\n", "NAME", "CPU", "MEMORY");
    for node in reply["items"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "{:<32} {:>8} {:>12}\n",
            node["metadata"]["name"].as_str().unwrap_or(""),
            node["status"]["allocatable"]["cpu"].as_str().unwrap_or("-"),
            node["status"]["allocatable"]["memory"]
                .as_str()
                .unwrap_or("-"),
        ));
    }
    Ok(out)
}

/// `wasched apply FILE...`: creates or replaces the objects of YAML/JSON files.
///
/// # Errors
/// A file cannot be read or the server refused it (nothing of that file is written).
pub fn apply(client: &Client, files: &[std::path::PathBuf]) -> anyhow::Result<String> {
    let mut out = String::new();
    for file in files {
        let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
        let json = file
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"));
        let content_type = if json {
            "application/json"
        } else {
            "application/yaml"
        };
        let reply = client
            .request("POST", "/v1/objects", Some((content_type, bytes)))?
            .ok_json()
            .with_context(|| format!("applying {}", file.display()))?;
        if let Some(skipped) = reply["skipped"].as_object().filter(|s| !s.is_empty()) {
            let kinds: Vec<String> = skipped
                .iter()
                .map(|(kind, n)| format!("{n} {kind}"))
                .collect();
            let kept: Vec<&str> = wasched_core::events::Kind::ALL
                .iter()
                .map(|kind| kind.name())
                .collect();
            eprintln!(
                "warning: {}: skipped {} (wasched keeps {})",
                file.display(),
                kinds.join(", "),
                kept.join(", ")
            );
        }
        for item in reply["items"].as_array().into_iter().flatten() {
            let namespace = item["namespace"].as_str().unwrap_or("");
            let name = item["name"].as_str().unwrap_or("");
            let name = if namespace.is_empty() {
                name.to_string()
            } else {
                format!("{namespace}/{name}")
            };
            out.push_str(&format!(
                "{} {name} {}\n",
                item["kind"].as_str().unwrap_or("").to_lowercase(),
                item["result"].as_str().unwrap_or("")
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_is_one_path_segment() {
        assert_eq!(path_segment("team-a"), "team-a");
        assert_eq!(path_segment("x/y"), "x%2Fy");
        assert_eq!(path_segment("../a b"), "..%2Fa%20b");
        assert_eq!(path_segment(".."), "%2E%2E");
    }

    #[test]
    fn a_server_without_a_scheme_is_reached_over_http() {
        assert_eq!(server_url("localhost:7878"), "http://localhost:7878");
        assert_eq!(
            server_url("http://127.0.0.1:7878/"),
            "http://127.0.0.1:7878"
        );
        assert_eq!(
            server_url("https://sched.example:443"),
            "https://sched.example:443"
        );
    }
}
