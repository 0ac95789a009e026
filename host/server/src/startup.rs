//! Starting `wasched serve`: tokens checked, the store opened, the policy it starts with (a
//! file, the store, or in Kubernetes mode the replicas' ConfigMaps), the engine's threads, and
//! the HTTP listener until a signal.

use axum::http::StatusCode;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use crate::auth::{self, Tokens};
use crate::engine::{Engine, EngineMetrics, ResultSink, StartGate};
use crate::policy::{config_location, parse_and_load};
use crate::store::{stored_version, PluginRecord, Store};
use crate::store_binding::StoreSink;
use crate::watch::WatchLog;
use crate::{http, kubernetes, shared_policy, ConfigSource, KubeMode, Mode, ServeArgs, Server};
use crate::{leader, Policy, PolicyError};
use wasched_core::clock::{Clock, SystemClock};
use wasched_core::events::{Action, EventPipeline, Kind, ObjectKey};
use wasched_core::framework::{Decider, ProfileSpec};
use wasched_core::metrics::PluginStatsRegistry;
use wasched_core::service::Service;
use wasched_wasm::config::ProfileChain;

fn read_tokens(args: &ServeArgs) -> anyhow::Result<Tokens> {
    Tokens::new(
        Tokens::read(args.token_file.as_deref(), auth::ADMIN_TOKEN_ENV)?,
        Tokens::read(args.write_token_file.as_deref(), auth::WRITE_TOKEN_ENV)?,
        Tokens::read(args.read_token_file.as_deref(), auth::READ_TOKEN_ENV)?,
        args.listen.ip(),
    )
}

/// Runs the server until SIGINT or SIGTERM.
///
/// # Errors
/// It cannot start: a bad configuration or token, an unusable store, a busy address.
pub fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("wasched-http")
        .build()?;
    let (server, restored) = {
        // Kubernetes mode's watches run on this runtime.
        let _entered = runtime.enter();
        Server::open(args)?
    };
    let result = runtime.block_on(run_http(server.clone(), restored));
    // The running cycle finishes and every result is written before the process exits.
    server.engine.shutdown();
    tracing::info!("stopped");
    result
}

impl Server {
    /// Everything but the listener: tokens checked, store opened, policy loaded, the stored
    /// objects submitted as events, the engine's threads started. Returns the server and how many
    /// objects were restored.
    ///
    /// # Errors
    /// As [`serve`], but for the address.
    pub fn open(args: ServeArgs) -> anyhow::Result<(Arc<Server>, usize)> {
        let args = args.with_file_settings()?;
        let tokens = read_tokens(&args)?;
        warn_about_open_parts(&tokens, &args);
        let store_path = args.data_dir.join("wasched.redb");
        let store = Store::open_with_cache(&store_path, args.store_cache_bytes)?;
        let plugin_stats = Arc::new(PluginStatsRegistry::default());

        let kube = kube_connection(&args)?;
        let shared_policy = kube.as_ref().map(|kube| shared_policy_of(kube, &args));
        let (policy, specs) =
            starting_policy(&args, &store, shared_policy.as_deref(), &plugin_stats)?;

        let clock: Arc<dyn Clock> = Arc::new(SystemClock::default());
        let decider = Decider::with_clock(&specs, args.seed, clock.clone())
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let service = Service::deferred(decider, clock.clone())
            .with_assume_ttl(Duration::from_secs(args.assume_ttl_seconds));
        let pipeline = service.pipeline();
        let service_stats = service.stats.clone();

        let engine_metrics = Arc::new(EngineMetrics::default());
        let mut objects = match &kube {
            Some((client, runtime)) => kubernetes_source(
                &args,
                client.clone(),
                runtime.clone(),
                &pipeline,
                service.binding_failures(),
            )?,
            None => store_source(&store, &pipeline, service.binding_failures())?,
        };
        let leader_handoff = objects.leader_handoff.take();
        let (version, restored) = (objects.version, objects.restored);
        let mode = objects.mode(shared_policy.clone());
        let watch = Arc::new(WatchLog::new(version));
        let engine = Engine::start(
            service,
            objects.sink,
            watch.clone(),
            engine_metrics.clone(),
            objects.gate,
        )?;

        let (shutdown, _) = tokio::sync::watch::channel(false);
        let server = Arc::new(Server {
            store,
            pipeline,
            watch,
            engine,
            engine_metrics,
            service_stats,
            plugin_stats,
            policy: Arc::new(tokio::sync::Mutex::new(policy)),
            tokens,
            sites: http::site::Sites::new(args.listen, &args.allowed_hosts, &args.allowed_origins),
            args: args.clone(),
            clock,
            plugin_loads: Default::default(),
            uids: std::sync::Mutex::new(wasched_core::util::Rng::new(uid_seed())),
            shutdown,
            policy_changes: tokio::sync::watch::Sender::new(0),
            mode,
        });
        if let Some(shared) = shared_policy {
            tokio::spawn(shared_policy::follow(
                server.clone(),
                shared,
                leader_handoff,
            ));
        }

        Ok((server, restored))
    }
}

/// Where Kubernetes mode's replicas share uploaded plugins and the admin configuration.
fn shared_policy_of(
    (client, runtime): &(kube::Client, tokio::runtime::Handle),
    args: &ServeArgs,
) -> Arc<shared_policy::SharedPolicy> {
    Arc::new(shared_policy::SharedPolicy::new(
        client.clone(),
        &args.kube.policy,
        runtime.clone(),
        args.max_component_bytes,
    ))
}

/// Says which parts of the HTTP API need no token.
fn warn_about_open_parts(tokens: &Tokens, args: &ServeArgs) {
    for part in tokens.open_parts() {
        tracing::warn!(
            "{part} is open to anyone who can reach {}: see --token-file, --write-token-file and --read-token-file",
            args.listen
        );
    }
}

/// A seed no other process started at another time shares, for the uids of created objects.
fn uid_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id())
}

/// The API server's client and the async runtime Kubernetes mode runs on, in Kubernetes mode.
fn kube_connection(
    args: &ServeArgs,
) -> anyhow::Result<Option<(kube::Client, tokio::runtime::Handle)>> {
    if !args.kube.kubernetes {
        return Ok(None);
    }
    let runtime = tokio::runtime::Handle::try_current()
        .context("Kubernetes mode needs the server's async runtime")?;
    let client = off_runtime(|| runtime.block_on(kubernetes::client(&args.kube)))?;
    Ok(Some((client, runtime)))
}

/// The policy to start with, loaded: the stored (or shared) one, or this replica's own when the
/// shared one does not build.
fn starting_policy(
    args: &ServeArgs,
    store: &Store,
    shared: Option<&shared_policy::SharedPolicy>,
    plugin_stats: &Arc<PluginStatsRegistry>,
) -> anyhow::Result<(Policy, Vec<ProfileSpec>)> {
    let mut policy = stored_policy(args, store, shared)?;
    let build = |policy: &Policy| {
        let (label, dir) = config_location(&policy.source, &args.data_dir);
        parse_and_load(
            &label,
            &dir,
            &policy.text,
            &policy.uploaded,
            plugin_stats,
            args,
        )
    };
    let (config, specs) = match (build(&policy), shared) {
        (Ok(built), _) => built,
        // A configuration anyone who may edit the ConfigMap wrote must not keep every
        // replica down: start with this replica's own, and take the cluster's in once a
        // change makes it buildable.
        (Err(e), Some(shared)) if matches!(policy.source, ConfigSource::Cluster(_)) => {
            refuse_shared_policy(shared, &format!("its configuration: {e}"));
            policy = local_policy(args, policy.uploaded, policy.records)?;
            build(&policy).map_err(|e| anyhow::anyhow!("{e}"))?
        }
        (Err(e), _) => anyhow::bail!("{e}"),
    };
    policy.usage = config.usage();
    policy.chains = specs.iter().map(ProfileChain::of).collect();
    Ok((policy, specs))
}

/// Where the cluster's objects come from and where results go.
struct Source {
    sink: Box<dyn ResultSink>,
    /// Opens when the scheduling thread may start (None: at once).
    gate: Option<Arc<StartGate>>,
    kube_watches: Option<Arc<kubernetes::WatchStats>>,
    kube_synced: Option<Arc<StartGate>>,
    leading: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// Fires when this replica takes the Lease, and the gate to open once it has read the
    /// shared policy afresh.
    leader_handoff: Option<(tokio::sync::oneshot::Receiver<()>, Arc<StartGate>)>,
    /// The store's version, where `/v1/watch` starts.
    version: u64,
    /// Objects restored from the store.
    restored: usize,
}

impl Source {
    /// The server's [`Mode`]: Kubernetes mode when the objects come from an API server.
    fn mode(&mut self, shared_policy: Option<Arc<shared_policy::SharedPolicy>>) -> Mode {
        let parts = (
            self.kube_watches.take(),
            self.kube_synced.take(),
            shared_policy,
        );
        match parts {
            (Some(watches), Some(synced), Some(shared_policy)) => Mode::Kubernetes(KubeMode {
                watches,
                synced,
                leading: self.leading.take(),
                shared_policy,
            }),
            _ => Mode::Standalone,
        }
    }
}

/// Standalone mode: what the store acknowledged before a restart comes back as events, nodes and
/// storage first, and results are written to the store.
fn store_source(
    store: &Store,
    pipeline: &Arc<EventPipeline>,
    bindings: wasched_core::service::BindingFailures,
) -> anyhow::Result<Source> {
    // Kept as the JSON stored and typed only as the scheduler applies each: a store of a large
    // cluster's objects, all typed at once, took several times the memory of the cluster.
    let mut objects: Vec<(ObjectKey, Arc<[u8]>)> = Vec::new();
    let version = store.for_each_json(None, None, |key, json| {
        objects.push((key, Arc::from(json)));
        Ok(())
    })?;
    objects.sort_by_key(|(key, _)| key.kind == Kind::Pod);
    let restored = objects.len();
    for (key, json) in objects {
        let object_version = stored_version(&json).unwrap_or(0);
        pipeline.submit_json(Action::Upsert, key, json, object_version);
    }
    Ok(Source {
        sink: Box::new(StoreSink {
            store: store.clone(),
            pipeline: pipeline.clone(),
            bindings,
        }),
        gate: None,
        kube_watches: None,
        kube_synced: None,
        leading: None,
        leader_handoff: None,
        version,
        restored,
    })
}

/// Kubernetes mode: the API server's watches feed `pipeline` and the gate opens once each kind
/// was listed; the returned sink binds through the API server.
fn kubernetes_source(
    args: &ServeArgs,
    client: kube::Client,
    runtime: tokio::runtime::Handle,
    pipeline: &Arc<EventPipeline>,
    failures: wasched_core::service::BindingFailures,
) -> anyhow::Result<Source> {
    let election = &args.kube.leader;
    let identity = leader::identity();
    if election.leader_elect {
        election.check()?;
    }
    let gate = Arc::new(StartGate::requiring(1 + usize::from(election.leader_elect)));
    let synced = Arc::new(StartGate::requiring(1));
    let stats = Arc::new(kubernetes::WatchStats::default());
    let _entered = runtime.enter();
    let groups = (args.kube.pod_group_status).then(Arc::<kubernetes::GroupStatuses>::default);
    let gates = [gate.clone(), synced.clone()];
    kubernetes::watch_cluster(&client, pipeline, &gates, &stats, groups.as_ref());
    let mut leader_handoff = None;
    let leading = election.leader_elect.then(|| {
        let leading = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (became_leader, handoff) = tokio::sync::oneshot::channel();
        leader_handoff = Some((handoff, gate.clone()));
        tokio::spawn(leader::campaign(
            client.clone(),
            election.clone(),
            identity.clone(),
            became_leader,
            leading.clone(),
        ));
        leading
    });
    let sink = Box::new(kubernetes::ApiSink::new(
        client.clone(),
        failures,
        Arc::new(kubernetes::Recorder::new(identity.clone())),
        runtime.clone(),
        args.kube.kube_api_qps,
        args.kube.kube_api_burst,
    ));
    if let Some(groups) = groups {
        // The gate opens once every kind is listed and this replica leads: only the leader
        // writes, as only it schedules.
        let writer =
            kubernetes::write_statuses(client, groups, gate.clone(), sink.rate(), stats.clone());
        tokio::spawn(writer);
    }
    Ok(Source {
        sink,
        gate: Some(gate),
        kube_watches: Some(stats),
        kube_synced: Some(synced),
        leading,
        leader_handoff,
        version: 0,
        restored: 0,
    })
}

/// The policy a server starts with (its profiles' plugin usage still to fill in): uploaded
/// components, then the configuration that may use them. In Kubernetes mode (`shared`) both are
/// the cluster's, and a configuration put through the admin API of any replica wins over this
/// replica's `--config`.
fn stored_policy(
    args: &ServeArgs,
    store: &Store,
    shared: Option<&shared_policy::SharedPolicy>,
) -> anyhow::Result<Policy> {
    let Some(shared) = shared else {
        let mut uploaded = BTreeMap::new();
        let mut records = BTreeMap::new();
        for (record, bytes) in store.plugins()? {
            uploaded.insert(record.name.clone(), Arc::new(bytes));
            records.insert(record.name.clone(), record);
        }
        let mut policy = local_policy(args, uploaded, records)?;
        if let (Some(text), None) = (store.config()?, &args.config) {
            (policy.source, policy.text) = (ConfigSource::Store, text);
        }
        return Ok(policy);
    };
    let (index, version, components) = match off_runtime(|| shared.load()) {
        Ok(loaded) => loaded,
        Err(shared_policy::LoadError::Unreachable(e)) => {
            anyhow::bail!("loading the shared policy: {e}")
        }
        Err(shared_policy::LoadError::Refused(e)) => {
            refuse_shared_policy(shared, &e);
            return local_policy(args, BTreeMap::new(), BTreeMap::new());
        }
    };
    let records: BTreeMap<String, PluginRecord> = index
        .plugins
        .into_iter()
        .map(|p| (p.record.name.clone(), p.record))
        .collect();
    let mut policy = local_policy(args, components, records)?;
    if let Some(text) = index.config {
        (policy.source, policy.text) = (ConfigSource::Cluster(shared.location()), text);
    }
    policy.shared_version = version;
    Ok(policy)
}

/// This replica's own policy: `--config`, else the default profile, with `uploaded` components.
fn local_policy(
    args: &ServeArgs,
    uploaded: BTreeMap<String, Arc<Vec<u8>>>,
    records: BTreeMap<String, PluginRecord>,
) -> anyhow::Result<Policy> {
    let (source, text) = match &args.config {
        Some(path) => (
            ConfigSource::File(path.clone()),
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?,
        ),
        None => (ConfigSource::Default, String::new()),
    };
    Ok(Policy {
        source,
        text,
        uploaded,
        records,
        usage: BTreeMap::new(),
        chains: Vec::new(),
        shared_version: 0,
    })
}

/// Counts and logs a cluster policy a starting replica does not take in.
fn refuse_shared_policy(shared: &shared_policy::SharedPolicy, why: &str) {
    shared.stats.adopt_failures.fetch_add(1, Ordering::Relaxed);
    tracing::error!(
        "not taking in the policy of ConfigMap {}: {why}; starting with this replica's own configuration and waiting for a valid change",
        shared.location()
    );
}

/// Runs `work` on a thread of its own: it may block on the async runtime, which the calling
/// thread has entered.
fn off_runtime<T: Send>(work: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|scope| {
        scope
            .spawn(work)
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

async fn run_http(server: Arc<Server>, restored: usize) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(server.args.listen)
        .await
        .with_context(|| format!("listening on {}", server.args.listen))?;
    let address = listener.local_addr()?;
    // Tests and scripts read the address from this line (with `--listen 127.0.0.1:0`).
    println!("wasched listening on http://{address}");
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    tracing::info!(%address, restored, data_dir = %server.args.data_dir.display(), "serving");

    tokio::spawn(reload_on_sighup(server.clone()));
    let app = http::router(server.clone());
    let shutdown = server.shutdown.clone();
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            wait_for_stop_signal().await;
            tracing::info!("shutting down: finishing the running cycle");
            let _ = shutdown.send(true);
        })
        .await?;
    Ok(())
}

async fn wait_for_stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut terminate) = signal(SignalKind::terminate()) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
}

async fn reload_on_sighup(server: Arc<Server>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hangup) = signal(SignalKind::hangup()) else {
        return;
    };
    while hangup.recv().await.is_some() {
        let mut policy = server.policy.clone().lock_owned().await;
        let path = match policy.source.clone() {
            ConfigSource::File(path) => path,
            ConfigSource::Cluster(location) => {
                tracing::warn!("SIGHUP: the configuration put through the admin API, kept in ConfigMap {location}, wins over --config: nothing to reload");
                continue;
            }
            _ => {
                tracing::warn!("SIGHUP: no --config file to reload");
                continue;
            }
        };
        let server = server.clone();
        let outcome = tokio::task::spawn_blocking(move || {
            let text = std::fs::read_to_string(&path).map_err(|e| {
                PolicyError::new(StatusCode::BAD_REQUEST, format!("{}: {e}", path.display()))
            })?;
            server.apply_config(&mut policy, text, false)
        })
        .await;
        match outcome {
            Ok(Ok(())) => tracing::info!("SIGHUP: configuration reloaded"),
            Ok(Err(e)) => tracing::error!(
                "SIGHUP: configuration not reloaded, nothing changed: {}",
                e.message
            ),
            Err(e) => tracing::error!("SIGHUP: reload failed: {e}"),
        }
    }
}
