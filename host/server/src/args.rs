//! `wasched serve`'s command line.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use wasched_wasm::config::DefaultPluginRuntime;
use wasched_wasm::kube_config;

use crate::kubernetes;

/// The default listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7878";

/// A listen address as `IP:PORT` or `HOST:PORT` (`localhost:7878`), the host resolved now; of
/// several addresses the first IPv4 one, as most clients try it first.
fn listen_address(text: &str) -> Result<SocketAddr, String> {
    if let Ok(address) = text.parse() {
        return Ok(address);
    }
    let resolved: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(text)
        .map_err(|e| format!("{text:?} is not HOST:PORT or IP:PORT: {e}"))?
        .collect();
    resolved
        .iter()
        .find(|a| a.is_ipv4())
        .or(resolved.first())
        .copied()
        .ok_or_else(|| format!("{text:?} resolves to no address"))
}

/// `wasched serve` options.
#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// Scheduler configuration (TOML or a KubeSchedulerConfiguration). Read at start and on
    /// SIGHUP; `PUT /admin/config` writes it.
    /// Without it, the configuration put through the admin API, else the default profile.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Address to listen on. A non-loopback address requires an admin token, which then also
    /// guards the cluster API unless a write or read token is set.
    #[arg(long, default_value = DEFAULT_LISTEN, value_parser = listen_address)]
    pub listen: SocketAddr,
    /// Where the store (objects, uploaded plugins, configuration) lives.
    #[arg(long, default_value_os_t = default_data_dir())]
    pub data_dir: PathBuf,
    /// A file holding the admin token: the admin API and every cluster API call
    /// (else $WASCHED_ADMIN_TOKEN).
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// A file holding the write token: reading and changing cluster objects
    /// (else $WASCHED_WRITE_TOKEN). Setting it or a read token guards the cluster API on loopback.
    #[arg(long)]
    pub write_token_file: Option<PathBuf>,
    /// A file holding the read token: listing objects, the watch and /metrics
    /// (else $WASCHED_READ_TOKEN).
    #[arg(long)]
    pub read_token_file: Option<PathBuf>,
    /// Largest cluster API request body, in bytes.
    #[arg(long, default_value_t = 8 << 20)]
    pub max_request_bytes: usize,
    /// Largest plugin upload, in bytes (Python and JavaScript components are 12-18 MB).
    #[arg(long, default_value_t = wasched_wasm::config::DEFAULT_MAX_COMPONENT_BYTES)]
    pub max_component_bytes: usize,
    /// Memory the store may use to cache its file's pages, in bytes (a tenth of it buffers a
    /// write before it is committed). Reads past it come from the operating system's cache.
    #[arg(long, default_value_t = crate::store::DEFAULT_CACHE_BYTES)]
    pub store_cache_bytes: usize,
    /// Confine `component` paths in configurations to this directory (symbolic links resolved):
    /// without it, any regular file the server can read may be named.
    #[arg(long)]
    pub plugin_dir: Option<PathBuf>,
    /// How long a placement may wait for its binding to be written before it is undone.
    #[arg(long, default_value_t = 30)]
    pub assume_ttl_seconds: u64,
    /// Run the default plugins as WebAssembly components or natively (overrides the config).
    #[arg(long, value_enum)]
    pub runtime: Option<DefaultPluginRuntime>,
    /// Seed for breaking ties between equally good nodes.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// A name clients reach the server by (through a proxy or DNS), besides its IP addresses
    /// and, on loopback, `localhost`: on loopback a request naming any other `Host` is refused,
    /// so a page whose name was re-pointed at 127.0.0.1 cannot call the API. Repeatable.
    #[arg(long = "allowed-host", value_name = "NAME")]
    pub allowed_hosts: Vec<String>,
    /// An origin (`https://dash.example:8443`) whose pages may call the API from a browser,
    /// besides the server's own page. Repeatable.
    #[arg(long = "allowed-origin", value_name = "ORIGIN")]
    pub allowed_origins: Vec<String>,
    /// Kubernetes mode: the API server, its client limits, leader election, the shared policy.
    #[command(flatten)]
    pub kube: kubernetes::KubeArgs,
    /// The flags given on the command line (by their ids: `kube_api_qps`), as the CLI found
    /// them: a flag given wins over the `--config` file's `clientConnection` and
    /// `leaderElection` ([`ServeArgs::with_file_settings`]).
    #[arg(skip)]
    pub given_flags: BTreeSet<String>,
}

impl ServeArgs {
    /// Takes Kubernetes mode's connection and leader election from a KubeSchedulerConfiguration
    /// given as `--config FILE` (its `clientConnection` and `leaderElection`, as kube-scheduler
    /// reads them from its file), except where a flag for the same setting was given.
    ///
    /// # Errors
    /// The file cannot be read, or a setting there is refused ([`kube_config::start_settings`]).
    pub fn with_file_settings(mut self) -> anyhow::Result<ServeArgs> {
        let Some(path) = self.config.clone() else {
            return Ok(self);
        };
        if !self.kube.kubernetes {
            return Ok(self);
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading the configuration {}", path.display()))?;
        if !kube_config::is_kube_scheduler_configuration(&text) {
            return Ok(self);
        }
        let settings = kube_config::start_settings(&text)
            .map_err(|e| anyhow::anyhow!("{}: {}", path.display(), e.message))?;
        let given = &self.given_flags;
        let kube = &mut self.kube;
        let kubeconfig = settings.kubeconfig.map(|file| Some(PathBuf::from(file)));
        unless_given(given, "kubeconfig", &mut kube.kubeconfig, kubeconfig);
        unless_given(given, "kube_api_qps", &mut kube.kube_api_qps, settings.qps);
        unless_given(
            given,
            "kube_api_burst",
            &mut kube.kube_api_burst,
            settings.burst,
        );
        let leader = &mut kube.leader;
        for (id, field, value) in [
            (
                "leader_elect_lease_duration",
                &mut leader.leader_elect_lease_duration,
                settings.lease_duration,
            ),
            (
                "leader_elect_renew_deadline",
                &mut leader.leader_elect_renew_deadline,
                settings.renew_deadline,
            ),
            (
                "leader_elect_retry_period",
                &mut leader.leader_elect_retry_period,
                settings.retry_period,
            ),
        ] {
            unless_given(given, id, field, value);
        }
        for (id, field, value) in [
            (
                "leader_elect_resource_name",
                &mut leader.leader_elect_resource_name,
                settings.resource_name,
            ),
            (
                "leader_elect_resource_namespace",
                &mut leader.leader_elect_resource_namespace,
                settings.resource_namespace,
            ),
        ] {
            unless_given(given, id, field, value);
        }
        unless_given(
            given,
            "leader_elect",
            &mut leader.leader_elect,
            settings.leader_elect,
        );
        Ok(self)
    }
}

/// Puts the file's `value`, if it has one, in `field`, unless the flag `id` was given.
fn unless_given<T>(given: &BTreeSet<String>, id: &str, field: &mut T, value: Option<T>) {
    if let (Some(value), false) = (value, given.contains(id)) {
        *field = value;
    }
}

/// How logs are written.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// `$XDG_DATA_HOME/wasched`, else `~/.local/share/wasched`, else `./wasched-data`.
pub fn default_data_dir() -> PathBuf {
    std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .map(|d| d.join("wasched"))
        .unwrap_or_else(|| PathBuf::from("wasched-data"))
}

/// Where the active configuration comes from and goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// `--config FILE`.
    File(PathBuf),
    /// Put through the admin API and kept in the store.
    Store,
    /// Put through the admin API of a replica in Kubernetes mode and kept in the policy
    /// ConfigMap `namespace/name`.
    Cluster(String),
    /// Nothing configured: kube-scheduler's default profile.
    Default,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[derive(clap::Parser)]
    struct Command {
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn parsed(flags: &[&str]) -> ServeArgs {
        let argv = std::iter::once("wasched").chain(flags.iter().copied());
        <Command as clap::Parser>::parse_from(argv).serve
    }

    const KUBE_CONFIG: &str = "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  qps: 300
  burst: 600
leaderElection:
  leaseDuration: 30s
  renewDeadline: 20s
  resourceName: kube-scheduler
";

    #[test]
    fn the_config_files_connection_and_election_apply_where_no_flag_was_given() {
        let dir = std::env::temp_dir().join(format!("wasched-args-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("scheduler.yaml");
        std::fs::write(&path, KUBE_CONFIG).unwrap();
        let config = path.to_str().unwrap();
        let flags = ["--kubernetes", "--config", config, "--kube-api-qps", "75"];
        let mut args = parsed(&flags);
        args.given_flags.insert("kube_api_qps".into());
        let args = args.with_file_settings().unwrap();
        assert_eq!(args.kube.kube_api_qps, 75.0, "the flag given wins");
        assert_eq!(args.kube.kube_api_burst, 600);
        let leader = &args.kube.leader;
        assert_eq!(leader.leader_elect_lease_duration, Duration::from_secs(30));
        assert_eq!(leader.leader_elect_renew_deadline, Duration::from_secs(20));
        assert_eq!(leader.leader_elect_retry_period, Duration::from_secs(2));
        assert_eq!(leader.leader_elect_resource_name, "kube-scheduler");
        assert_eq!(leader.leader_elect_resource_namespace, "kube-system");

        let standalone = parsed(&["--config", config]).with_file_settings().unwrap();
        assert_eq!(
            standalone.kube.kube_api_qps, 50.0,
            "only Kubernetes mode reads them"
        );

        std::fs::write(&path, KUBE_CONFIG.replace("qps: 300", "qps: -1")).unwrap();
        let refused = parsed(&flags[..3]).with_file_settings().unwrap_err();
        assert!(
            refused.to_string().contains("clientConnection.qps"),
            "{refused}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_listen_address_may_name_a_host() {
        assert_eq!(
            listen_address("localhost:7878").unwrap(),
            "127.0.0.1:7878".parse::<SocketAddr>().unwrap()
        );
        assert_eq!(
            listen_address("[::1]:80").unwrap(),
            "[::1]:80".parse::<SocketAddr>().unwrap()
        );
        assert!(listen_address("localhost").is_err(), "a port is needed");
    }
}
