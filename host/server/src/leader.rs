//! Leader election on a `coordination.k8s.io/v1` Lease, as kube-scheduler does it (client-go's
//! leaderelection): every replica watches the cluster and keeps its cache warm; only the holder of
//! the Lease schedules and binds. A candidate takes the Lease when its holder has not renewed it
//! for the lease duration, measured on the candidate's own clock from when it last saw the record
//! change (so clock skew between replicas does not matter). Every write carries the Lease's
//! resourceVersion, so two candidates cannot both succeed. A leader that has not renewed for the
//! renew deadline (shorter than the lease duration) stops the process before its Lease can expire
//! and another replica take over: no two schedulers ever bind at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};

/// `wasched serve --kubernetes` options of leader election (kube-scheduler's defaults).
#[derive(clap::Args, Debug, Clone)]
pub struct LeaderArgs {
    /// Elect one leader among replicas through a Lease; only the leader schedules.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub leader_elect: bool,
    /// How long a Lease holds without renewal before another replica may take it.
    #[arg(long, default_value = "15s", value_parser = duration)]
    pub leader_elect_lease_duration: Duration,
    /// How long the leader keeps trying to renew before it stops (less than the lease duration).
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub leader_elect_renew_deadline: Duration,
    /// How often candidates try to take the Lease and the leader renews it.
    #[arg(long, default_value = "2s", value_parser = duration)]
    pub leader_elect_retry_period: Duration,
    /// The Lease's name.
    #[arg(long, default_value = "wasched")]
    pub leader_elect_resource_name: String,
    /// The Lease's namespace.
    #[arg(long, default_value = "kube-system")]
    pub leader_elect_resource_namespace: String,
}

impl Default for LeaderArgs {
    fn default() -> Self {
        LeaderArgs {
            leader_elect: true,
            leader_elect_lease_duration: Duration::from_secs(15),
            leader_elect_renew_deadline: Duration::from_secs(10),
            leader_elect_retry_period: Duration::from_secs(2),
            leader_elect_resource_name: "wasched".into(),
            leader_elect_resource_namespace: "kube-system".into(),
        }
    }
}

/// `15s`, `500ms` or `1m`.
fn duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map_or((text, ""), |at| text.split_at(at));
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration like 15s or 500ms"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        _ => return Err(format!("`{text}`: the unit must be ms, s or m")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("`{text}`: {e}"))
}

impl LeaderArgs {
    /// Refuses timings under which two leaders could overlap.
    ///
    /// # Errors
    /// The renew deadline is not shorter than the lease duration, or the retry period not
    /// shorter than the renew deadline.
    pub fn check(&self) -> anyhow::Result<()> {
        if self.leader_elect_renew_deadline >= self.leader_elect_lease_duration {
            anyhow::bail!(
                "--leader-elect-renew-deadline must be shorter than --leader-elect-lease-duration"
            );
        }
        if self.leader_elect_retry_period >= self.leader_elect_renew_deadline {
            anyhow::bail!(
                "--leader-elect-retry-period must be shorter than --leader-elect-renew-deadline"
            );
        }
        Ok(())
    }
}

/// This replica's name in the Lease: the host's name and a random suffix, so two replicas on one
/// host differ.
pub fn identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "wasched".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{host}_{:08x}", nanos ^ std::process::id().rotate_left(16))
}

/// Campaigns for the Lease; fires `became_leader` when this replica leads, sets `leading` while
/// it does, and ends the process when it loses the Lease.
pub async fn campaign(
    client: Client,
    args: LeaderArgs,
    identity: String,
    became_leader: tokio::sync::oneshot::Sender<()>,
    leading: Arc<AtomicBool>,
) {
    let mut became_leader = Some(became_leader);
    let leases: Api<Lease> = Api::namespaced(client, &args.leader_elect_resource_namespace);
    let name = args.leader_elect_resource_name.clone();
    let mut observed: Option<(LeaseSpec, Instant)> = None;
    let mut last_renewal: Option<Instant> = None;
    loop {
        // As client-go: a round may take no longer than the renew deadline allows, so a request
        // the API server neither answers nor fails cannot keep a leader leading past it. The
        // round's start stands for the renewal, since the API server may apply the write at
        // any moment until its answer arrives.
        let started = Instant::now();
        let bound = round_bound(last_renewal, started, args.leader_elect_renew_deadline);
        let round = try_acquire_or_renew(&leases, &name, &identity, &args, &mut observed);
        let outcome = match tokio::time::timeout(bound, round).await {
            Ok(outcome) => outcome.map_err(|e| e.to_string()),
            Err(_) => Err(format!("no answer from the API server within {bound:?}")),
        };
        match outcome {
            Ok(true) => {
                if last_renewal.is_none() {
                    tracing::info!(lease = %name, %identity, "became the leader");
                    leading.store(true, Ordering::Release);
                    if let Some(signal) = became_leader.take() {
                        let _ = signal.send(());
                    }
                }
                last_renewal = Some(started);
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(lease = %name, "leader election: {e}"),
        }
        if let Some(renewed) = last_renewal {
            if renewed.elapsed() >= args.leader_elect_renew_deadline {
                leading.store(false, Ordering::Release);
                tracing::error!(lease = %name, "leader election lost: the Lease was not renewed within the renew deadline; stopping");
                // As kube-scheduler: end the process rather than risk a second scheduler binding.
                std::process::exit(1);
            }
        }
        tokio::time::sleep(args.leader_elect_retry_period).await;
    }
}

/// How long a round started at `started` may take: a leader's ends at its renew deadline
/// (measured from its last renewal), a candidate's after one renew deadline.
fn round_bound(last_renewal: Option<Instant>, started: Instant, deadline: Duration) -> Duration {
    match last_renewal {
        Some(renewed) => (renewed + deadline).saturating_duration_since(started),
        None => deadline,
    }
}

/// One round: true when this replica holds the Lease afterwards.
async fn try_acquire_or_renew(
    leases: &Api<Lease>,
    name: &str,
    identity: &str,
    args: &LeaderArgs,
    observed: &mut Option<(LeaseSpec, Instant)>,
) -> kube::Result<bool> {
    let now = MicroTime(Timestamp::now());
    let lease_seconds = args.leader_elect_lease_duration.as_secs().max(1) as i32;
    let Some(current) = leases.get_opt(name).await? else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(identity.to_string()),
                lease_duration_seconds: Some(lease_seconds),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(0),
                ..Default::default()
            }),
        };
        return match leases.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        };
    };
    let spec = current.spec.clone().unwrap_or_default();
    // When the record last changed, by this replica's clock.
    let seen_at = match observed.take() {
        Some((previous, at)) if previous == spec => at,
        _ => Instant::now(),
    };
    *observed = Some((spec.clone(), seen_at));
    let holder = spec.holder_identity.as_deref().unwrap_or("");
    let held_by_other = !holder.is_empty() && holder != identity;
    let duration = spec
        .lease_duration_seconds
        .map_or(args.leader_elect_lease_duration, |s| {
            Duration::from_secs(s.max(0) as u64)
        });
    if held_by_other && seen_at.elapsed() < duration {
        return Ok(false);
    }
    let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(held_by_other);
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": current.metadata.resource_version},
        "spec": {
            "holderIdentity": identity,
            "leaseDurationSeconds": lease_seconds,
            "acquireTime": if holder == identity { spec.acquire_time.clone() } else { Some(now.clone()) },
            "renewTime": now,
            "leaseTransitions": transitions,
        },
    });
    match leases
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(true),
        // Another candidate wrote first: it holds the Lease now.
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_kube_scheduler_writes_them() {
        assert_eq!(duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration("1m"), Ok(Duration::from_secs(60)));
        assert!(duration("15").unwrap_err().contains("unit"));
        assert!(duration("fast").is_err());
    }

    #[test]
    fn a_leaders_round_ends_at_its_renew_deadline_whatever_the_api_server_does() {
        let deadline = Duration::from_secs(3);
        let renewed = Instant::now();
        let one = Duration::from_secs(1);
        assert_eq!(round_bound(None, renewed, deadline), deadline);
        assert_eq!(round_bound(Some(renewed), renewed + one, deadline), 2 * one);
        assert_eq!(
            round_bound(Some(renewed), renewed + 4 * one, deadline),
            Duration::ZERO
        );
    }

    #[test]
    fn timings_that_could_overlap_two_leaders_are_refused() {
        assert!(LeaderArgs::default().check().is_ok());
        let mut args = LeaderArgs::default();
        args.leader_elect_renew_deadline = args.leader_elect_lease_duration;
        assert!(args.check().is_err());
        let mut args = LeaderArgs::default();
        args.leader_elect_retry_period = args.leader_elect_renew_deadline;
        assert!(args.check().is_err());
    }
}
