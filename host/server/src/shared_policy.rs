//! Kubernetes mode keeps the plugin policy (the components uploaded through the admin API and the
//! configuration put through it) in the cluster, so every replica schedules with the same plugins
//! and a newly elected leader with the latest ones:
//!
//! - an index ConfigMap (`wasched-policy` by default, key `policy.json`) lists each uploaded
//!   component (name, sha256, size, version, how many chunks) and holds the admin configuration;
//! - each component's bytes are in immutable ConfigMaps named after its sha256
//!   (`wasched-policy-component-<sha256>-<i>`, key `component.part`), 512 KiB each, because the
//!   API server refuses objects over 1 MiB.
//!
//! A change writes the chunks first, then the index with its resourceVersion as a precondition
//! (a concurrent change from another replica is re-read and merged, never overwritten); a
//! replica reads chunks only through an index that names them, and checks the sha256 of what it
//! put together before using it. Every replica watches the index and swaps in what it lists.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt as _};
use kube::{Api, Client};
use serde::{Deserialize, Serialize};

use crate::store::PluginRecord;

/// Raw bytes per chunk: 683 KiB once base64-encoded, under the API server's 1 MiB object limit
/// with room for the metadata.
pub const CHUNK_BYTES: usize = 512 * 1024;
/// The index's size limit: what a ConfigMap holds, less room for its metadata.
const INDEX_LIMIT: usize = 1_000_000;
const INDEX_KEY: &str = "policy.json";
const CHUNK_KEY: &str = "component.part";
const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
const POLICY_LABEL: &str = "wasched.io/policy";
const SHA256_ANNOTATION: &str = "wasched.io/sha256";
/// Chunks no index names are deleted once this old: younger ones may belong to an upload whose
/// index update has not landed yet.
const ORPHAN_GRACE: Duration = Duration::from_secs(10 * 60);
/// How often a change that could not be taken in (a chunk missing, the API server away, a
/// configuration this replica cannot build) is tried again.
const RETRY_EVERY: Duration = Duration::from_secs(5);

/// `wasched serve --kubernetes` options of the shared policy.
#[derive(clap::Args, Debug, Clone)]
pub struct SharedPolicyArgs {
    /// The namespace of the ConfigMaps holding the uploaded plugins and the admin configuration
    /// (default: the kubeconfig context's namespace, or in a cluster the service account's).
    #[arg(long, value_name = "NAMESPACE")]
    pub policy_namespace: Option<String>,
    /// The name of the ConfigMap indexing them; chunks are named after it.
    #[arg(long, default_value = "wasched-policy", value_name = "NAME")]
    pub policy_configmap: String,
}

impl Default for SharedPolicyArgs {
    fn default() -> Self {
        SharedPolicyArgs {
            policy_namespace: None,
            policy_configmap: "wasched-policy".into(),
        }
    }
}

/// Longest a change of the shared policy (its chunks, the index, retries after conflicts) may
/// wait on the API server before the admin call that made it fails with 503.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(60);

/// Components' bytes by plugin name.
pub type Components = BTreeMap<String, Arc<Vec<u8>>>;

/// An uploaded component as the index lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexedComponent {
    /// What is known of it besides its bytes.
    #[serde(flatten)]
    pub record: PluginRecord,
    /// How many ConfigMaps its bytes are split into.
    pub chunks: u32,
}

/// The index ConfigMap's content.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyIndex {
    /// The configuration put through the admin API (None: `--config`, or the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    /// By name.
    #[serde(default)]
    pub plugins: Vec<IndexedComponent>,
}

impl PolicyIndex {
    fn put(&mut self, entry: IndexedComponent) {
        self.plugins.retain(|p| p.record.name != entry.record.name);
        self.plugins.push(entry);
        self.plugins
            .sort_by(|a, b| a.record.name.cmp(&b.record.name));
    }

    fn references(&self, sha256: &str) -> bool {
        self.plugins.iter().any(|p| p.record.sha256 == sha256)
    }

    /// The index `map` holds, every entry checked by [`IndexedComponent::check`] against
    /// `max_component_bytes`: anyone who may edit ConfigMaps in the namespace can write it, so
    /// nothing in it is trusted.
    fn parse(map: &ConfigMap, max_component_bytes: usize) -> Result<PolicyIndex, String> {
        let text = map
            .data
            .as_ref()
            .and_then(|d| d.get(INDEX_KEY))
            .map_or("{}", String::as_str);
        let index: PolicyIndex =
            serde_json::from_str(text).map_err(|e| format!("its {INDEX_KEY} is not valid: {e}"))?;
        let mut names = std::collections::BTreeSet::new();
        for (i, entry) in index.plugins.iter().enumerate() {
            entry
                .check(max_component_bytes)
                .map_err(|e| format!("its {INDEX_KEY} is refused: plugins[{i}].{e}"))?;
            if !names.insert(entry.record.name.as_str()) {
                return Err(format!(
                    "its {INDEX_KEY} is refused: plugins[{i}].name {:?} is listed twice",
                    entry.record.name
                ));
            }
        }
        Ok(index)
    }
}

impl IndexedComponent {
    /// Checks the entry with the upload API's rules; the error starts with the field's name.
    ///
    /// # Errors
    /// The name is not a plugin name, the sha256 not 64 lowercase hex digits (it becomes part of
    /// ConfigMap names), the size not within 1..=`max_component_bytes`, or the chunk count not
    /// the one that size takes.
    fn check(&self, max_component_bytes: usize) -> Result<(), String> {
        let record = &self.record;
        if !crate::valid_plugin_name(&record.name) {
            return Err(format!(
                "name {:?} is not a plugin name (1-63 letters, digits, '-', '_' or '.', starting with a letter)",
                record.name
            ));
        }
        let hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
        if record.sha256.len() != 64 || !record.sha256.bytes().all(hex) {
            return Err(format!(
                "sha256 {:?} is not 64 lowercase hex digits",
                record.sha256
            ));
        }
        if record.size == 0 || record.size > max_component_bytes {
            return Err(format!(
                "size {} is not within 1..={max_component_bytes} bytes (--max-component-bytes)",
                record.size
            ));
        }
        let chunks = record.size.div_ceil(CHUNK_BYTES);
        if self.chunks as usize != chunks {
            return Err(format!(
                "chunks {} does not match its size: {} bytes take {chunks} chunks of {CHUNK_BYTES}",
                self.chunks, record.size
            ));
        }
        Ok(())
    }
}

/// Counters of the shared policy, for `/metrics`.
#[derive(Default)]
pub struct SharedPolicyStats {
    /// Indexes taken in.
    pub adopted: AtomicU64,
    /// Indexes that could not be taken in (invalid, or their components failed to load).
    pub adopt_failures: AtomicU64,
    /// Changes this replica wrote to the index.
    pub writes: AtomicU64,
    /// Writes that lost to another replica's and were retried.
    pub write_conflicts: AtomicU64,
}

impl SharedPolicyStats {
    /// Appends the counters in the Prometheus text format.
    pub fn render(&self, out: &mut String) {
        for (name, help, value) in [
            (
                "wasched_policy_adopted_total",
                "Policy changes made through another replica (or the ConfigMap) and swapped in here.",
                &self.adopted,
            ),
            (
                "wasched_policy_adopt_failures_total",
                "Attempts to take in the cluster's policy that failed (each retried); the previous policy stays.",
                &self.adopt_failures,
            ),
            (
                "wasched_policy_writes_total",
                "Policy changes this replica wrote to the cluster.",
                &self.writes,
            ),
            (
                "wasched_policy_write_conflicts_total",
                "Index writes that lost a race with another replica's and were merged and retried.",
                &self.write_conflicts,
            ),
        ] {
            crate::engine::render_counter(out, name, help, value);
        }
    }
}

/// The policy's ConfigMaps in one namespace.
pub struct SharedPolicy {
    maps: Api<ConfigMap>,
    /// Their namespace.
    pub namespace: String,
    /// The index ConfigMap's name; component chunks are named after it.
    pub name: String,
    runtime: tokio::runtime::Handle,
    /// The largest component an index may list (`--max-component-bytes`).
    max_component_bytes: usize,
    /// Its counters, for `/metrics`.
    pub stats: SharedPolicyStats,
}

impl SharedPolicy {
    /// The policy `args` name, through `client`; components over `max_component_bytes` are
    /// refused as the upload API refuses them.
    pub fn new(
        client: Client,
        args: &SharedPolicyArgs,
        runtime: tokio::runtime::Handle,
        max_component_bytes: usize,
    ) -> SharedPolicy {
        let namespace = args
            .policy_namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_string());
        SharedPolicy {
            maps: Api::namespaced(client, &namespace),
            namespace,
            name: args.policy_configmap.clone(),
            runtime,
            max_component_bytes,
            stats: SharedPolicyStats::default(),
        }
    }

    /// `namespace/name` of the index, for messages.
    pub fn location(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    fn chunk_name(&self, sha256: &str, index: u32) -> String {
        format!("{}-component-{sha256}-{index}", self.name)
    }

    fn labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (MANAGED_BY.to_string(), "wasched".to_string()),
            (POLICY_LABEL.to_string(), self.name.clone()),
        ])
    }

    /// The index and its resourceVersion (None: there is no index yet).
    ///
    /// # Errors
    /// The API server failed, or the index is not one wasched wrote.
    pub async fn read(&self) -> Result<(Option<String>, PolicyIndex), String> {
        match self.maps.get_opt(&self.name).await {
            Ok(Some(map)) => {
                let index = PolicyIndex::parse(&map, self.max_component_bytes)
                    .map_err(|e| format!("ConfigMap {}: {e}", self.location()))?;
                Ok((map.metadata.resource_version, index))
            }
            Ok(None) => Ok((None, PolicyIndex::default())),
            Err(e) => Err(format!("reading ConfigMap {}: {e}", self.location())),
        }
    }

    /// The bytes of `entry`, put together from its chunks and checked against its sha256.
    ///
    /// # Errors
    /// A chunk is missing or the bytes are not the ones the index names.
    pub async fn fetch(&self, entry: &IndexedComponent) -> Result<Vec<u8>, String> {
        entry
            .check(self.max_component_bytes)
            .map_err(|e| format!("plugin {:?}: {e}", entry.record.name))?;
        let mut bytes = Vec::with_capacity(entry.record.size);
        for i in 0..entry.chunks {
            let name = self.chunk_name(&entry.record.sha256, i);
            let map = self.maps.get(&name).await.map_err(|e| {
                format!("reading chunk {name} of plugin {}: {e}", entry.record.name)
            })?;
            let part = map
                .binary_data
                .and_then(|mut d| d.remove(CHUNK_KEY))
                .ok_or_else(|| format!("chunk {name} has no {CHUNK_KEY}"))?;
            if bytes.len() + part.0.len() > entry.record.size {
                return Err(format!(
                    "plugin {}: chunk {name} holds more than the {} bytes the index names",
                    entry.record.name, entry.record.size
                ));
            }
            bytes.extend_from_slice(&part.0);
        }
        let sha256 = wasched_wasm::component::sha256_hex(&bytes);
        if sha256 != entry.record.sha256 || bytes.len() != entry.record.size {
            return Err(format!(
                "plugin {}: the chunks hold {} bytes with sha256 {sha256}, the index names {} bytes with {}",
                entry.record.name,
                bytes.len(),
                entry.record.size,
                entry.record.sha256
            ));
        }
        Ok(bytes)
    }

    /// Every component `index` lists, by name; `known` gives bytes this replica already holds
    /// (by sha256), which are not fetched again.
    ///
    /// # Errors
    /// As [`SharedPolicy::fetch`].
    pub async fn fetch_all(
        &self,
        index: &PolicyIndex,
        known: &Components,
    ) -> Result<Components, String> {
        let mut components = BTreeMap::new();
        for entry in &index.plugins {
            let bytes = match known.get(&entry.record.sha256) {
                Some(bytes) => bytes.clone(),
                None => Arc::new(self.fetch(entry).await?),
            };
            components.insert(entry.record.name.clone(), bytes);
        }
        Ok(components)
    }

    /// Writes the chunks of a component (those already there, named by the same sha256, hold
    /// the same bytes and are kept); returns how many there are.
    async fn put_chunks(&self, sha256: &str, bytes: &[u8]) -> Result<u32, String> {
        let chunks: Vec<&[u8]> = bytes.chunks(CHUNK_BYTES).collect();
        let count = chunks.len() as u32;
        for (i, part) in chunks.into_iter().enumerate() {
            let map = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(self.chunk_name(sha256, i as u32)),
                    namespace: Some(self.namespace.clone()),
                    labels: Some(self.labels()),
                    annotations: Some(BTreeMap::from([
                        (SHA256_ANNOTATION.to_string(), sha256.to_string()),
                        ("wasched.io/chunk".to_string(), format!("{}/{count}", i + 1)),
                    ])),
                    ..Default::default()
                },
                binary_data: Some(BTreeMap::from([(
                    CHUNK_KEY.to_string(),
                    ByteString(part.to_vec()),
                )])),
                immutable: Some(true),
                ..Default::default()
            };
            match self.maps.create(&PostParams::default(), &map).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(format!("writing chunk {i} of {sha256}: {e}")),
            }
        }
        Ok(count)
    }

    /// Applies `change` to the index, re-reading and retrying when another replica wrote it
    /// first; returns the index written, its resourceVersion, and the index it replaced.
    async fn update(
        &self,
        change: impl Fn(&mut PolicyIndex),
    ) -> Result<(PolicyIndex, u64, PolicyIndex), String> {
        for _ in 0..20 {
            let (version, before) = self.read().await?;
            let mut after = before.clone();
            change(&mut after);
            let text = serde_json::to_string_pretty(&after).map_err(|e| e.to_string())?;
            if text.len() > INDEX_LIMIT {
                return Err(format!(
                    "the policy index would be {} bytes, more than a ConfigMap holds",
                    text.len()
                ));
            }
            let written = match &version {
                // A merge patch carrying the resourceVersion: the API server applies it only to
                // that version, and answers 409 Conflict to a stale one.
                Some(version) => {
                    let patch = serde_json::json!({
                        "metadata": {"resourceVersion": version},
                        "data": {INDEX_KEY: text},
                    });
                    self.maps
                        .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                }
                None => {
                    let map = ConfigMap {
                        metadata: ObjectMeta {
                            name: Some(self.name.clone()),
                            namespace: Some(self.namespace.clone()),
                            labels: Some(self.labels()),
                            ..Default::default()
                        },
                        data: Some(BTreeMap::from([(INDEX_KEY.to_string(), text)])),
                        ..Default::default()
                    };
                    self.maps.create(&PostParams::default(), &map).await
                }
            };
            match written {
                Ok(map) => {
                    self.stats.writes.fetch_add(1, Ordering::Relaxed);
                    return Ok((after, version_of(&map), before));
                }
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    self.stats.write_conflicts.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => return Err(format!("writing ConfigMap {}: {e}", self.location())),
            }
        }
        Err(format!(
            "ConfigMap {} kept changing under this write: try again",
            self.location()
        ))
    }

    /// Deletes the chunks of `sha256` (those already gone are fine).
    async fn delete_chunks(&self, sha256: &str, chunks: u32) {
        for i in 0..chunks {
            let name = self.chunk_name(sha256, i);
            match self.maps.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => tracing::warn!(chunk = %name, "deleting an unused chunk: {e}"),
            }
        }
    }

    /// Deletes the chunks of components `replaced` listed and `current` no longer does.
    async fn drop_unreferenced(&self, current: &PolicyIndex, replaced: &PolicyIndex) {
        for entry in &replaced.plugins {
            if !current.references(&entry.record.sha256) {
                self.delete_chunks(&entry.record.sha256, entry.chunks).await;
            }
        }
    }

    /// Deletes chunks no index names that are older than [`ORPHAN_GRACE`]: left by an upload
    /// that stopped between its chunks and its index update.
    pub async fn sweep_orphans(&self) -> Result<usize, String> {
        let (_, index) = self.read().await?;
        let selector = format!("{POLICY_LABEL}={}", self.name);
        let maps = self
            .maps
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| format!("listing the policy's chunks: {e}"))?;
        let now = k8s_openapi::jiff::Timestamp::now();
        let mut deleted = 0;
        for map in maps.items {
            let meta = &map.metadata;
            let ours = meta
                .labels
                .as_ref()
                .and_then(|l| l.get(POLICY_LABEL))
                .is_some_and(|v| *v == self.name);
            let Some(sha256) = meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(SHA256_ANNOTATION))
            else {
                continue;
            };
            let old = meta.creation_timestamp.as_ref().is_some_and(|t| {
                now.duration_since(t.0).as_secs() >= ORPHAN_GRACE.as_secs() as i64
            });
            if ours && old && !index.references(sha256) {
                if let Some(name) = &meta.name {
                    if self
                        .maps
                        .delete(name, &DeleteParams::default())
                        .await
                        .is_ok()
                    {
                        deleted += 1;
                    }
                }
            }
        }
        Ok(deleted)
    }

    fn block_on<T>(&self, future: impl std::future::Future<Output = T>) -> T {
        self.runtime.block_on(future)
    }

    /// Runs a change of the shared policy (blocking), given up after [`WRITE_TIMEOUT`]: an API
    /// server that takes the connection and never answers must not hold an admin call, and the
    /// policy lock with it, for as long as the client waits.
    fn write_bounded<T>(
        &self,
        change: impl std::future::Future<Output = Result<T, String>>,
    ) -> Result<T, String> {
        self.block_on(async {
            tokio::time::timeout(WRITE_TIMEOUT, change)
                .await
                .unwrap_or_else(|_| {
                    Err(format!(
                        "no answer from the API server within {}s while changing ConfigMap {}; \
                         the change may or may not have been made: read the policy back",
                        WRITE_TIMEOUT.as_secs(),
                        self.location()
                    ))
                })
        })
    }

    /// Keeps an uploaded component in the cluster (blocking: call off the async runtime);
    /// returns the index's new resourceVersion.
    ///
    /// # Errors
    /// The API server refused or could not be reached: the cluster's policy is unchanged but
    /// for chunks no index names.
    pub fn put_plugin(&self, record: &PluginRecord, bytes: &[u8]) -> Result<u64, String> {
        self.write_bounded(async {
            let chunks = self.put_chunks(&record.sha256, bytes).await?;
            let entry = IndexedComponent {
                record: record.clone(),
                chunks,
            };
            let (current, version, replaced) =
                self.update(|index| index.put(entry.clone())).await?;
            self.drop_unreferenced(&current, &replaced).await;
            Ok(version)
        })
    }

    /// Removes an uploaded component from the cluster (blocking); returns the index's new
    /// resourceVersion.
    ///
    /// # Errors
    /// As [`SharedPolicy::put_plugin`].
    pub fn remove_plugin(&self, name: &str) -> Result<u64, String> {
        self.write_bounded(async {
            let (current, version, replaced) = self
                .update(|index| index.plugins.retain(|p| p.record.name != name))
                .await?;
            self.drop_unreferenced(&current, &replaced).await;
            Ok(version)
        })
    }

    /// Keeps the admin configuration in the cluster (blocking); returns the index's new
    /// resourceVersion.
    ///
    /// # Errors
    /// As [`SharedPolicy::put_plugin`].
    pub fn set_config(&self, text: &str) -> Result<u64, String> {
        self.write_bounded(async {
            self.update(|index| index.config = Some(text.to_string()))
                .await
                .map(|(_, version, _)| version)
        })
    }

    /// The index, its resourceVersion and every component it lists (blocking), for a replica
    /// that starts.
    ///
    /// # Errors
    /// [`LoadError::Unreachable`] when the index cannot be read, [`LoadError::Refused`] when it
    /// is not valid or a component it lists cannot be put together.
    pub fn load(&self) -> Result<(PolicyIndex, u64, Components), LoadError> {
        self.block_on(async {
            let map = self.maps.get_opt(&self.name).await.map_err(|e| {
                LoadError::Unreachable(format!("reading ConfigMap {}: {e}", self.location()))
            })?;
            let Some(map) = map else {
                return Ok((PolicyIndex::default(), 0, BTreeMap::new()));
            };
            let index = PolicyIndex::parse(&map, self.max_component_bytes)
                .map_err(|e| LoadError::Refused(format!("ConfigMap {}: {e}", self.location())))?;
            let components = self
                .fetch_all(&index, &BTreeMap::new())
                .await
                .map_err(LoadError::Refused)?;
            Ok((index, version_of(&map), components))
        })
    }
}

/// Why a starting replica could not take in the cluster's policy.
#[derive(Debug)]
pub enum LoadError {
    /// The API server did not answer: the replica cannot know the policy and does not start.
    Unreachable(String),
    /// The index is not valid or names chunks that are not there: the replica starts with its
    /// own configuration and takes in the cluster's once a change makes it whole, so a bad
    /// ConfigMap cannot keep every replica down.
    Refused(String),
}

fn parse_version(version: Option<&str>) -> u64 {
    version.and_then(|v| v.parse().ok()).unwrap_or(0)
}

fn version_of(map: &ConfigMap) -> u64 {
    parse_version(map.metadata.resource_version.as_deref())
}

/// Keeps `server`'s policy equal to the cluster's: watches the index and swaps in each change.
/// With leader election, `became_leader` fires when this replica takes the Lease: it reads the
/// index afresh and takes it in before `gate` lets it schedule, so a new leader never schedules
/// with a policy older than the last change acknowledged by any replica.
pub async fn follow(
    server: Arc<crate::Server>,
    shared: Arc<SharedPolicy>,
    mut became_leader: Option<(
        tokio::sync::oneshot::Receiver<()>,
        Arc<crate::engine::StartGate>,
    )>,
) {
    match shared.sweep_orphans().await {
        Ok(0) => {}
        Ok(n) => tracing::info!(chunks = n, "deleted chunks no policy index names"),
        Err(e) => tracing::warn!("sweeping the policy's chunks: {e}"),
    }
    let config = watcher::Config::default().fields(&format!("metadata.name={}", shared.name));
    let mut stream = watcher(shared.maps.clone(), config)
        .default_backoff()
        .boxed();
    // An index (and its resourceVersion) not taken in yet, tried again every RETRY_EVERY.
    let mut pending: Option<(u64, PolicyIndex)> = None;
    loop {
        let leader = async {
            match became_leader.as_mut() {
                Some((signal, _)) => {
                    let _ = signal.await;
                }
                None => std::future::pending().await,
            }
        };
        let retry = async {
            if pending.is_some() {
                tokio::time::sleep(RETRY_EVERY).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            next = stream.next() => {
                let Some(next) = next else { return };
                match index_of(&shared, next) {
                    Some(index) => pending = Some(index),
                    None => continue,
                }
            }
            _ = leader => {
                let (_, gate) = became_leader.take().expect("waited on it");
                adopt_before_leading(&server, &shared, &mut pending).await;
                gate.open();
                continue;
            }
            _ = retry => {}
        }
        if let Some((version, index)) = pending.take() {
            if adopt(&server, &shared, version, index.clone())
                .await
                .is_err()
            {
                pending = Some((version, index));
            }
        }
    }
}

/// The policy index (and its resourceVersion) a watch event of the ConfigMap brings, if it
/// brings a valid one; what else it says is logged.
fn index_of(
    shared: &SharedPolicy,
    event: Result<watcher::Event<ConfigMap>, watcher::Error>,
) -> Option<(u64, PolicyIndex)> {
    let ours = |map: &ConfigMap| map.metadata.name.as_deref() == Some(shared.name.as_str());
    match event {
        Ok(watcher::Event::Apply(map) | watcher::Event::InitApply(map)) if ours(&map) => {
            match PolicyIndex::parse(&map, shared.max_component_bytes) {
                Ok(index) => Some((version_of(&map), index)),
                Err(e) => {
                    shared.stats.adopt_failures.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(
                        "ConfigMap {}: {e}; keeping the current policy",
                        shared.location()
                    );
                    None
                }
            }
        }
        Ok(watcher::Event::Delete(map)) if ours(&map) => {
            tracing::warn!("ConfigMap {} was deleted; keeping the current policy until a change writes it again", shared.location());
            None
        }
        Ok(_) => None,
        Err(e) => {
            tracing::warn!("watching ConfigMap {}, retrying: {e}", shared.location());
            None
        }
    }
}

/// Reads the index afresh and takes it in (three tries), before this replica leads. `pending`
/// is emptied when that worked, and holds the index read last when it did not.
async fn adopt_before_leading(
    server: &Arc<crate::Server>,
    shared: &SharedPolicy,
    pending: &mut Option<(u64, PolicyIndex)>,
) {
    for attempt in 1..=3 {
        match shared.read().await {
            Ok((version, index)) => {
                let version = parse_version(version.as_deref());
                if adopt(server, shared, version, index.clone()).await.is_ok() {
                    *pending = None;
                    return;
                }
                *pending = Some((version, index));
            }
            Err(e) => tracing::warn!(attempt, "reading the policy before leading: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Takes in `index` at `version`: fetches the components this replica lacks, then rebuilds the
/// profiles and swaps them in under the policy lock. Nothing happens when the policy already
/// matches it or reflects a later version (this replica's own write, seen before the watch
/// delivered an older one).
async fn adopt(
    server: &Arc<crate::Server>,
    shared: &SharedPolicy,
    version: u64,
    index: PolicyIndex,
) -> Result<(), ()> {
    let known: Components = {
        let policy = server.policy.lock().await;
        if version <= policy.shared_version || policy.matches(&index) {
            return Ok(());
        }
        policy
            .records
            .iter()
            .filter_map(|(name, r)| Some((r.sha256.clone(), policy.uploaded.get(name)?.clone())))
            .collect()
    };
    let fail = |e: String| {
        shared.stats.adopt_failures.fetch_add(1, Ordering::Relaxed);
        tracing::error!(
            "taking in the policy of ConfigMap {}: {e}; keeping the current one, retrying",
            shared.location()
        );
    };
    let components = shared.fetch_all(&index, &known).await.map_err(fail)?;
    let mut policy = server.policy.clone().lock_owned().await;
    let s = server.clone();
    let outcome = tokio::task::spawn_blocking(move || {
        s.adopt_shared_policy(&mut policy, version, &index, components)
    })
    .await
    .map_err(|e| e.to_string())
    .and_then(|r| r.map_err(|e| e.message));
    match outcome {
        Ok(true) => {
            shared.stats.adopted.fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                "took in a policy change from ConfigMap {}",
                shared.location()
            );
            Ok(())
        }
        Ok(false) => Ok(()),
        Err(e) => {
            fail(e);
            Err(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: usize = 64 << 20;

    fn entry(name: &str, sha256: &str) -> IndexedComponent {
        IndexedComponent {
            record: PluginRecord {
                name: name.into(),
                sha256: sha256.into(),
                size: 3,
                version: "1".into(),
                uploaded_at: 0,
            },
            chunks: 1,
        }
    }

    #[test]
    fn putting_a_component_replaces_the_one_of_that_name_and_keeps_names_sorted() {
        let mut index = PolicyIndex::default();
        index.put(entry("b", "1"));
        index.put(entry("a", "2"));
        index.put(entry("b", "3"));
        let names: Vec<&str> = index
            .plugins
            .iter()
            .map(|p| p.record.name.as_str())
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert!(index.references("3") && !index.references("1"));
    }

    #[test]
    fn the_index_reads_back_what_was_written_and_refuses_what_was_not() {
        let mut index = PolicyIndex {
            config: Some("[[profiles]]\n".into()),
            ..Default::default()
        };
        index.put(entry("a", &"2".repeat(64)));
        let map = ConfigMap {
            data: Some(BTreeMap::from([(
                INDEX_KEY.to_string(),
                serde_json::to_string(&index).unwrap(),
            )])),
            ..Default::default()
        };
        assert_eq!(PolicyIndex::parse(&map, LIMIT).unwrap(), index);
        assert_eq!(
            PolicyIndex::parse(&ConfigMap::default(), LIMIT).unwrap(),
            PolicyIndex::default()
        );
        let garbage = ConfigMap {
            data: Some(BTreeMap::from([(INDEX_KEY.to_string(), "[1".to_string())])),
            ..Default::default()
        };
        assert!(PolicyIndex::parse(&garbage, LIMIT)
            .unwrap_err()
            .contains("not valid"));
    }

    fn index_map(index: &PolicyIndex) -> ConfigMap {
        ConfigMap {
            data: Some(BTreeMap::from([(
                INDEX_KEY.to_string(),
                serde_json::to_string(index).unwrap(),
            )])),
            ..Default::default()
        }
    }

    #[test]
    fn an_index_entry_the_upload_api_would_refuse_is_refused_naming_its_field() {
        let sha = "ab".repeat(32);
        let big = |size: usize, chunks: u32| {
            let mut e = entry("big", &sha);
            e.record.size = size;
            e.chunks = chunks;
            e
        };
        let cases: Vec<(&str, IndexedComponent, Option<&str>)> = vec![
            ("a valid entry is taken", entry("fine", &sha), None),
            (
                "a size of 64 GiB is over --max-component-bytes",
                big(68_719_476_736, 131_072),
                Some("plugins[0].size 68719476736 is not within 1..=67108864"),
            ),
            (
                "the largest size is refused before anything is allocated",
                big(usize::MAX, 1),
                Some("plugins[0].size"),
            ),
            (
                "a size of zero is refused",
                big(0, 0),
                Some("plugins[0].size 0"),
            ),
            (
                "a path as a name is refused",
                entry("../../etc/passwd", &sha),
                Some("plugins[0].name \"../../etc/passwd\" is not a plugin name"),
            ),
            (
                "a path as a sha256 never reaches a ConfigMap name",
                entry("fine", "../../../x"),
                Some("plugins[0].sha256 \"../../../x\" is not 64 lowercase hex digits"),
            ),
            (
                "upper-case hex is not what the upload API writes",
                entry("fine", &"AB".repeat(32)),
                Some("plugins[0].sha256"),
            ),
            (
                "a chunk count that does not match the size is refused",
                big(CHUNK_BYTES + 1, 1),
                Some("plugins[0].chunks 1 does not match its size: 524289 bytes take 2 chunks"),
            ),
            (
                "two chunks for two chunks' worth of bytes are fine",
                big(CHUNK_BYTES + 1, 2),
                None,
            ),
        ];
        for (name, entry, expected) in cases {
            let index = PolicyIndex {
                config: None,
                plugins: vec![entry],
            };
            match (PolicyIndex::parse(&index_map(&index), LIMIT), expected) {
                (Ok(parsed), None) => assert_eq!(parsed, index, "{name}"),
                (Err(e), Some(expected)) => assert!(e.contains(expected), "{name}: {e}"),
                (outcome, _) => panic!("{name}: {outcome:?}"),
            }
        }
    }

    #[test]
    fn an_index_naming_one_plugin_twice_is_refused() {
        let index = PolicyIndex {
            config: None,
            plugins: vec![
                entry("twin", &"1".repeat(64)),
                entry("twin", &"2".repeat(64)),
            ],
        };
        let e = PolicyIndex::parse(&index_map(&index), LIMIT).unwrap_err();
        assert!(
            e.contains("plugins[1].name \"twin\" is listed twice"),
            "{e}"
        );
    }
}
