//! Who may do what: bearer tokens for the three kinds of access the API gives.
//!
//! - **Admin** (`--token-file`, `$WASCHED_ADMIN_TOKEN`): the admin API (plugins, configuration),
//!   and everything a write token may do.
//! - **Write** (`--write-token-file`, `$WASCHED_WRITE_TOKEN`): creating, replacing and deleting
//!   cluster objects, and everything a read token may do.
//! - **Read** (`--read-token-file`, `$WASCHED_READ_TOKEN`): listing and getting objects, the watch,
//!   `/metrics`.
//!
//! The admin API is guarded when an admin token is set. The cluster API is guarded when a read or
//! write token is set, and always off loopback, where the admin token is required and then guards
//! it as well: a server reachable from the network never answers an anonymous request other than
//! `/healthz`, `/readyz` and `/openapi.json`, which probes and clients need before they have a token.

use std::net::IpAddr;
use std::path::Path;

use anyhow::Context as _;
use axum::http::StatusCode;

/// A kind of access, weakest first: a token granting one grants those before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Access {
    /// Reading cluster objects and status.
    Read,
    /// Changing cluster objects.
    Write,
    /// Plugins and configuration.
    Admin,
}

impl Access {
    fn what(self) -> &'static str {
        match self {
            Access::Read => "reading cluster objects",
            Access::Write => "changing cluster objects",
            Access::Admin => "the admin API",
        }
    }
}

/// The environment variable holding the admin token when `--token-file` is not given.
pub const ADMIN_TOKEN_ENV: &str = "WASCHED_ADMIN_TOKEN";
/// The environment variable holding the write token when `--write-token-file` is not given.
pub const WRITE_TOKEN_ENV: &str = "WASCHED_WRITE_TOKEN";
/// The environment variable holding the read token when `--read-token-file` is not given.
pub const READ_TOKEN_ENV: &str = "WASCHED_READ_TOKEN";

/// The tokens a server accepts and which access needs one.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    admin: Option<String>,
    write: Option<String>,
    read: Option<String>,
    cluster_guarded: bool,
}

/// Why a request may not go on: the HTTP status and the message.
#[derive(Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The HTTP status to answer with.
    pub status: StatusCode,
    /// Why, for the caller.
    pub message: String,
}

impl Tokens {
    /// The tokens given to a server listening on `listen`.
    ///
    /// # Errors
    /// A token is empty, two kinds share one token, or a non-loopback listener has no admin token.
    pub fn new(
        admin: Option<String>,
        write: Option<String>,
        read: Option<String>,
        listen: IpAddr,
    ) -> anyhow::Result<Tokens> {
        let named = [("admin", &admin), ("write", &write), ("read", &read)];
        for (name, token) in named {
            if token.as_deref() == Some("") {
                anyhow::bail!("the {name} token is empty");
            }
        }
        for (i, (first, a)) in named.iter().enumerate() {
            for (second, b) in &named[i + 1..] {
                if a.is_some() && a == b {
                    anyhow::bail!(
                        "the {first} token and the {second} token are the same: a holder of one could not be told from a holder of the other"
                    );
                }
            }
        }
        if admin.is_none() && !listen.is_loopback() {
            anyhow::bail!(
                "refusing to serve on {listen} without an admin token: set --token-file or ${ADMIN_TOKEN_ENV} (off loopback it also guards the cluster API unless --write-token-file or --read-token-file is set)"
            );
        }
        let cluster_guarded = write.is_some() || read.is_some() || !listen.is_loopback();
        Ok(Tokens {
            admin,
            write,
            read,
            cluster_guarded,
        })
    }

    /// Reads the token of one kind from its file, else from its environment variable.
    ///
    /// # Errors
    /// The file cannot be read.
    pub fn read(file: Option<&Path>, env: &str) -> anyhow::Result<Option<String>> {
        let token = match file {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .with_context(|| format!("reading the token file {}", path.display()))?,
            ),
            None => std::env::var(env).ok(),
        };
        Ok(token.map(|t| t.trim().to_string()))
    }

    /// Whether requests needing `access` must carry a token.
    pub fn guarded(&self, access: Access) -> bool {
        match access {
            Access::Admin => self.admin.is_some(),
            Access::Read | Access::Write => self.cluster_guarded,
        }
    }

    /// What the server tells its operator about anything left open.
    pub fn open_parts(&self) -> Vec<&'static str> {
        let mut open = Vec::new();
        if !self.guarded(Access::Admin) {
            open.push("the admin API (plugins, configuration)");
        }
        if !self.guarded(Access::Write) {
            open.push("the cluster API (objects, watch, metrics)");
        }
        open
    }

    /// The strongest access `given` grants.
    fn grant(&self, given: &str) -> Option<Access> {
        let matches = |token: &Option<String>| {
            token
                .as_deref()
                .is_some_and(|t| constant_time_eq(given.as_bytes(), t.as_bytes()))
        };
        if matches(&self.admin) {
            Some(Access::Admin)
        } else if matches(&self.write) {
            Some(Access::Write)
        } else if matches(&self.read) {
            Some(Access::Read)
        } else {
            None
        }
    }

    /// Whether a request carrying the `Authorization` header `authorization` may have `access`.
    ///
    /// # Errors
    /// 401 without a bearer token, 403 with a token that is unknown or grants less.
    pub fn check(&self, access: Access, authorization: Option<&str>) -> Result<(), Refusal> {
        if !self.guarded(access) {
            return Ok(());
        }
        // RFC 7235: the scheme is case-insensitive (`bearer`, `BEARER`).
        let bearer = authorization
            .and_then(|v| v.trim_start().split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token);
        let Some(given) = bearer else {
            return Err(Refusal {
                status: StatusCode::UNAUTHORIZED,
                message: format!(
                    "{} needs a bearer token: Authorization: Bearer <token>",
                    access.what()
                ),
            });
        };
        match self.grant(given.trim()) {
            None => Err(Refusal {
                status: StatusCode::FORBIDDEN,
                message: "wrong bearer token".to_string(),
            }),
            Some(granted) if granted < access => Err(Refusal {
                status: StatusCode::FORBIDDEN,
                message: format!(
                    "this token does not allow {}: it is a {} token",
                    access.what(),
                    format!("{granted:?}").to_lowercase()
                ),
            }),
            Some(_) => Ok(()),
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOOPBACK: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
    const ANY: IpAddr = IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED);

    fn tokens(admin: Option<&str>, write: Option<&str>, read: Option<&str>, ip: IpAddr) -> Tokens {
        let own = |t: Option<&str>| t.map(str::to_string);
        Tokens::new(own(admin), own(write), own(read), ip).unwrap()
    }

    fn status(tokens: &Tokens, access: Access, bearer: Option<&str>) -> u16 {
        let header = bearer.map(|t| format!("Bearer {t}"));
        match tokens.check(access, header.as_deref()) {
            Ok(()) => 200,
            Err(refusal) => refusal.status.as_u16(),
        }
    }

    #[test]
    fn loopback_without_tokens_is_open_and_says_so() {
        let t = tokens(None, None, None, LOOPBACK);
        for access in [Access::Read, Access::Write, Access::Admin] {
            assert_eq!(status(&t, access, None), 200);
        }
        assert_eq!(t.open_parts().len(), 2);
    }

    #[test]
    fn off_loopback_the_admin_token_is_required_and_guards_the_cluster_api() {
        let error = Tokens::new(None, Some("w".into()), None, ANY).unwrap_err();
        assert!(
            error.to_string().contains("without an admin token"),
            "{error}"
        );
        let t = tokens(Some("a"), None, None, ANY);
        assert!(t.open_parts().is_empty());
        assert_eq!(status(&t, Access::Read, None), 401);
        assert_eq!(status(&t, Access::Write, Some("x")), 403);
        assert_eq!(status(&t, Access::Read, Some("a")), 200);
        assert_eq!(status(&t, Access::Write, Some("a")), 200);
    }

    #[test]
    fn each_token_grants_its_access_and_the_weaker_ones() {
        let t = tokens(Some("a"), Some("w"), Some("r"), LOOPBACK);
        let table = [
            (Access::Read, "r", 200),
            (Access::Write, "r", 403),
            (Access::Admin, "r", 403),
            (Access::Read, "w", 200),
            (Access::Write, "w", 200),
            (Access::Admin, "w", 403),
            (Access::Read, "a", 200),
            (Access::Write, "a", 200),
            (Access::Admin, "a", 200),
        ];
        for (access, token, expected) in table {
            assert_eq!(
                status(&t, access, Some(token)),
                expected,
                "{access:?} with {token}"
            );
        }
        let refusal = t.check(Access::Write, Some("Bearer r")).unwrap_err();
        assert!(
            refusal.message.contains("read token"),
            "{}",
            refusal.message
        );
    }

    #[test]
    fn a_read_token_alone_guards_writes_too_on_loopback() {
        let t = tokens(None, None, Some("r"), LOOPBACK);
        assert_eq!(status(&t, Access::Write, None), 401);
        assert_eq!(status(&t, Access::Write, Some("r")), 403);
        assert_eq!(status(&t, Access::Read, Some("r")), 200);
        assert_eq!(
            status(&t, Access::Admin, None),
            200,
            "no admin token: admin API open"
        );
    }

    #[test]
    fn refuses_empty_and_shared_tokens() {
        let empty = Tokens::new(Some(String::new()), None, None, LOOPBACK).unwrap_err();
        assert!(empty.to_string().contains("admin token is empty"));
        let shared = Tokens::new(Some("t".into()), None, Some("t".into()), LOOPBACK).unwrap_err();
        assert!(shared.to_string().contains("are the same"), "{shared}");
    }

    #[test]
    fn a_token_that_differs_only_in_length_is_refused() {
        let t = tokens(Some("abc"), None, None, LOOPBACK);
        assert_eq!(status(&t, Access::Admin, Some("ab")), 403);
        assert_eq!(status(&t, Access::Admin, Some("abcd")), 403);
        assert_eq!(
            status(&t, Access::Admin, Some(" abc ")),
            200,
            "surrounding blanks trimmed"
        );
    }
}
