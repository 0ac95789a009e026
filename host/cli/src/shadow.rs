//! `wasched shadow ...`: set, read, promote and remove a running server's shadow policies.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Subcommand;
use serde_json::Value;
use wasched::server::client::{Client, Connection};

#[derive(Subcommand)]
pub enum ShadowCommand {
    /// Run the profile in FILE (TOML: the keys of a `[[profiles]]` table but `scheduler_name`)
    /// beside a live profile on the same cycles, deciding nothing.
    Set {
        file: PathBuf,
        /// The live profile's scheduler name.
        #[arg(long, default_value = wasched::DEFAULT_SCHEDULER_NAME)]
        profile: String,
        #[command(flatten)]
        connection: Connection,
    },
    /// How often and how each shadow decided differently, and the latest pods it disagreed on.
    Report {
        /// Only this live profile's shadow.
        #[arg(long)]
        profile: Option<String>,
        /// Print the server's JSON report.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        connection: Connection,
    },
    /// Make the shadow the live profile and the live profile its shadow, in one swap (again to
    /// roll back).
    Promote {
        #[arg(long, default_value = wasched::DEFAULT_SCHEDULER_NAME)]
        profile: String,
        #[command(flatten)]
        connection: Connection,
    },
    /// Stop running a shadow beside the profile.
    Remove {
        #[arg(long, default_value = wasched::DEFAULT_SCHEDULER_NAME)]
        profile: String,
        #[command(flatten)]
        connection: Connection,
    },
}

/// Runs one `wasched shadow` command.
///
/// # Errors
/// The file cannot be read, or the server refused or cannot be reached.
pub fn run(command: ShadowCommand) -> anyhow::Result<()> {
    match command {
        ShadowCommand::Set {
            file,
            profile,
            connection,
        } => {
            let text = std::fs::read(&file)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", file.display()))?;
            let path = format!("/admin/shadow?profile={}", query_value(&profile));
            Client::new(&connection)?
                .request("PUT", &path, Some(("application/toml", text)))?
                .ok_json()?;
            println!("{} now runs beside profile {profile}", file.display());
        }
        ShadowCommand::Promote {
            profile,
            connection,
        } => {
            let path = format!("/admin/shadow/promote?profile={}", query_value(&profile));
            Client::new(&connection)?
                .request("POST", &path, None)?
                .ok_json()?;
            println!(
                "profile {profile} now runs its former shadow; its former chains are the shadow"
            );
        }
        ShadowCommand::Remove {
            profile,
            connection,
        } => {
            let path = format!("/admin/shadow?profile={}", query_value(&profile));
            Client::new(&connection)?
                .request("DELETE", &path, None)?
                .ok_json()?;
            println!("profile {profile} runs without a shadow");
        }
        ShadowCommand::Report {
            profile,
            json,
            connection,
        } => {
            let reply = Client::new(&connection)?
                .request("GET", "/v1/status/shadow", None)?
                .ok_json()?;
            if json {
                println!("{}", serde_json::to_string_pretty(&reply)?);
            } else {
                print!("{}", report_text(&reply, profile.as_deref()));
            }
        }
    }
    Ok(())
}

/// `s` for a query string: the characters a scheduler name may hold that a query may not.
fn query_value(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The report as a reader wants it: per shadow, the verdict counts and agreement, then each
/// latest disagreeing pod with both choices and both policies' scores of them.
pub fn report_text(reply: &Value, only: Option<&str>) -> String {
    let mut out = String::new();
    let shadows = reply["shadows"].as_array().cloned().unwrap_or_default();
    let shadows: Vec<&Value> = shadows
        .iter()
        .filter(|s| only.is_none_or(|p| s["profile"] == p))
        .collect();
    if shadows.is_empty() {
        out.push_str("no shadow is running\n");
        return out;
    }
    for shadow in shadows {
        let counts = &shadow["counts"];
        let agreement = shadow["agreement"]
            .as_f64()
            .map_or("-".to_string(), |a| format!("{:.1}%", a * 100.0));
        let _ = writeln!(
            out,
            "profile {}: {} cycles compared, agreement {agreement} (same {}, tie {}, different {}, infeasible {}, error {}), {} dropped",
            shadow["profile"].as_str().unwrap_or(""),
            shadow["compared"],
            counts["same"],
            counts["tie"],
            counts["different"],
            counts["infeasible"],
            counts["error"],
            shadow["dropped"],
        );
        if let Some(failure) = shadow["failure"].as_str() {
            let _ = writeln!(out, "  failure: {failure}");
        }
        for d in shadow["latest"].as_array().into_iter().flatten() {
            let node = |answer: &Value| {
                answer["node"]
                    .as_str()
                    .map_or("(none)".to_string(), str::to_string)
            };
            let _ = writeln!(
                out,
                "  {} {}: live {} / shadow {}",
                d["verdict"].as_str().unwrap_or(""),
                d["pod"].as_str().unwrap_or(""),
                node(&d["live"]),
                node(&d["shadow"]),
            );
            if let Some(message) = d["shadow"]["message"].as_str() {
                let _ = writeln!(out, "    shadow: {message}");
            }
            for n in d["nodes"].as_array().into_iter().flatten() {
                let _ = writeln!(
                    out,
                    "    {}: live {}  shadow {}",
                    n["node"].as_str().unwrap_or(""),
                    breakdown(&n["live"]),
                    breakdown(&n["shadow"]),
                );
            }
        }
    }
    out
}

/// `total (Plugin score, ...)`, or `-` for a node the policy did not score.
fn breakdown(b: &Value) -> String {
    if b.is_null() {
        return "-".to_string();
    }
    let scores: Vec<String> = b["scores"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| format!("{} {}", s["plugin"].as_str().unwrap_or(""), s["score"]))
        .collect();
    format!("{} ({})", b["total"], scores.join(", "))
}
