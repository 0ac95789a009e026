//! WebAssembly component plugins under wasmtime.
//!
//! A component is compiled once (and cached on disk by its sha256), checked against the `plugin`
//! world, and pre-instantiated; each [`PluginInstance`] is then a cheap instantiation in its own
//! [`Store`] with a memory limit, and every call runs under an epoch deadline.

use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, Func, Instance, InstancePre, Linker, TypedFunc};
use wasmtime::{Config, Engine, Store, StoreLimits, StoreLimitsBuilder};

use wasched_sdk as sdk;
use wasched_sdk::wire;

use wasched_core::runtime::{
    check_len, CallError, FailureKind, LoadError, Permit, PermitAnswer, PluginFactory,
    PluginInstance,
};

mod bindings {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "plugin",
    });
}

pub(crate) use bindings::wasched::plugin::types as wit;

/// The types of the optional `stages` interface, over the same `types` as the `plugin` world.
#[allow(dead_code)]
mod staged_bindings {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "staged-plugin",
        with: {
            "wasched:plugin/types": super::bindings::wasched::plugin::types,
        },
    });
}

use bindings::{Plugin as PluginWorld, PluginPre};
use staged_bindings::exports::wasched::plugin::details as wit_details;
use staged_bindings::exports::wasched::plugin::devices as wit_devices;
use staged_bindings::exports::wasched::plugin::groups as wit_groups;
use staged_bindings::exports::wasched::plugin::reserve as wit_reserve;
use staged_bindings::exports::wasched::plugin::stages as wit_stages;

use crate::legacy::ExportsV01;

mod convert;
mod exports;
mod held;
mod instance;
#[cfg(test)]
mod tests;
mod ticker;

use convert::*;
use exports::*;
pub use exports::{
    BATCHED_INTERFACE, DETAILS_INTERFACE, ENCODED_INTERFACE, PLAIN_PLANS_INTERFACE,
    RESERVE_INTERFACE, STAGES_INTERFACE, ZERO_SCORES_INTERFACE,
};
use held::*;
use instance::*;
use ticker::Ticker;

/// How often the epoch advances; call deadlines are counted in these ticks.
pub const EPOCH_TICK: Duration = Duration::from_millis(1);
/// Default deadline of one call, before the per-node allowance: enough for `set-pod` or a small
/// batch in the slowest guest languages measured (Python ~3 µs per node), far below what would
/// stall the scheduler.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_millis(20);
/// Default deadline of one call into an embedded default plugin, before the per-node allowance.
/// They are built from this repository and answer in microseconds, so their deadline only has to
/// catch a bug; 20 ms was missed three times by NodeResourcesFit in one replay on a busy 2-core
/// machine, where the scheduling thread itself waited that long for a core, and five misses in a
/// row would quarantine a plugin every pod needs.
pub const BUILT_IN_CALL_TIMEOUT: Duration = Duration::from_secs(1);
/// Deadline of instantiation and `init`: an interpreter-based component (Python, JavaScript) runs
/// its runtime's start-up there, measured at 6 ms on an idle machine and several times that on a
/// loaded one. It runs when a plugin is loaded, not in a cycle, and a start that loops is still cut
/// off.
pub const INSTANTIATE_TIMEOUT: Duration = Duration::from_secs(1);
/// Extra time a call gets per node in its batch (filter, score, mirror updates): a batch of
/// 5,000 nodes may take 20 ms + 50 ms.
pub const PER_NODE_ALLOWANCE: Duration = Duration::from_micros(10);
/// Extra time `set-pod` gets per item of the pod it sends (a label, a toleration, a container, a
/// value of a node selector requirement): a pod's own size is the plugin's input there, and a pod
/// with tens of thousands of affinity expressions (still under an API server's object limit) is
/// not the plugin's fault.
pub const SET_POD_PER_ITEM_ALLOWANCE: Duration = Duration::from_micros(2);
/// Extra time a mirror update gets per node sent: more than a filter's, because a plugin may index
/// what it is sent (labels, taint sets).
pub const SYNC_PER_NODE_ALLOWANCE: Duration = Duration::from_micros(50);
/// Extra time a mirror update gets per node already in the mirror: growing a large mirror moves
/// and rehashes all of it now and then (measured: a 512-node update into a 50,000-node mirror
/// missed a 46 ms deadline), so the allowance follows the mirror's size, not the batch's.
pub const SYNC_PER_MIRRORED_NODE_ALLOWANCE: Duration = Duration::from_micros(2);
/// Default linear-memory limit of one instance: room for a 50,000-node mirror, or an
/// interpreter-based guest's runtime plus a 5,000-node mirror.
pub const DEFAULT_MEMORY_LIMIT: usize = 128 << 20;
/// Default linear-memory limit of an embedded default plugin. Their mirrors follow the cluster the
/// host already holds, not a user's code: at 50,000 nodes DynamicResources' mirror of eight GPUs a
/// node outgrew 128 MiB (`wasched bench --nodes 50000 --scenario dra` failed in `upsert-nodes`).
pub const BUILT_IN_MEMORY_LIMIT: usize = 1 << 30;
/// Default limit on table elements of one instance.
pub const DEFAULT_TABLE_ELEMENTS: usize = 100_000;
/// Core instances one component may create (Rust and C components hold a few; interpreters more).
pub const MAX_CORE_INSTANCES: usize = 64;
/// Longest reason string a plugin may return.
pub const MAX_REASON_BYTES: usize = 1024;
/// Most reasons one failure may carry.
pub const MAX_REASONS_PER_FAILURE: usize = 32;
/// Most nodes an `only-nodes` or `failing-nodes` plan may list.
pub const MAX_LISTED_NODES: usize = 100_000;

/// Limits applied to every instance of a component.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The longest one call may run before it is interrupted (zero: no deadline).
    pub call_timeout: Duration,
    /// The most linear memory an instance may grow to, in bytes.
    pub memory: usize,
    /// The most elements a table may grow to.
    pub table_elements: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            call_timeout: DEFAULT_CALL_TIMEOUT,
            memory: DEFAULT_MEMORY_LIMIT,
            table_elements: DEFAULT_TABLE_ELEMENTS,
        }
    }
}

/// The wasmtime engine shared by every component, with its epoch ticker.
#[derive(Clone)]
pub struct WasmRuntime {
    engine: Engine,
    linker: Arc<Linker<StoreState>>,
    cache_dir: Option<PathBuf>,
    /// Advances the epoch call deadlines count in; none without deadlines.
    ticker: Option<Arc<Ticker>>,
}

impl WasmRuntime {
    /// The process-wide runtime (one engine, one epoch ticker thread).
    ///
    /// # Panics
    /// If wasmtime cannot create an engine for this machine.
    pub fn shared() -> &'static WasmRuntime {
        Self::shared_with(true)
    }

    /// The process-wide runtime with call deadlines, or the one without (which only `bench` uses,
    /// to measure what deadlines cost).
    ///
    /// # Panics
    /// If wasmtime cannot create an engine for this machine.
    pub fn shared_with(deadlines: bool) -> &'static WasmRuntime {
        static WITH: OnceLock<WasmRuntime> = OnceLock::new();
        static WITHOUT: OnceLock<WasmRuntime> = OnceLock::new();
        let cell = if deadlines { &WITH } else { &WITHOUT };
        cell.get_or_init(|| WasmRuntime::new(deadlines).expect("wasmtime engine"))
    }

    fn new(deadlines: bool) -> Result<WasmRuntime, LoadError> {
        let mut config = Config::new();
        config.epoch_interruption(deadlines);
        config.wasm_component_model(true);
        if std::env::var_os("WASCHED_PERFMAP").is_some() {
            config.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        let engine = Engine::new(&config).map_err(|e| LoadError(format!("wasmtime: {e:#}")))?;
        let ticker = match deadlines {
            true => {
                Some(Ticker::start(&engine).map_err(|e| LoadError(format!("epoch thread: {e}")))?)
            }
            false => None,
        };
        // WASI is linked whole, but `load` refuses any import outside `wasi::ALLOWED_IMPORTS`, and
        // the context grants no preopened directory, network, environment or real wall clock.
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
            .map_err(|e| LoadError(format!("linking WASI: {e:#}")))?;
        Ok(WasmRuntime {
            engine,
            linker: Arc::new(linker),
            cache_dir: cache_dir(),
            ticker,
        })
    }

    /// Compiles (or loads from the on-disk cache) a component and checks it is a plugin.
    ///
    /// # Errors
    /// Not a component, not the `plugin` world, or it imports something the host does not give.
    pub fn load(
        &self,
        name: &str,
        bytes: &[u8],
        limits: Limits,
    ) -> Result<ComponentFactory, LoadError> {
        // The parser's error for a file that is not WebAssembly quotes its first bytes, and the
        // file may be any file a configuration named.
        if !bytes.starts_with(b"\0asm") {
            return Err(LoadError(format!(
                "plugin {name}: not a valid WebAssembly component: it does not start with \\0asm"
            )));
        }
        let sha256 = sha256_hex(bytes);
        let component = self.compile(bytes, &sha256).map_err(|e| {
            LoadError(format!(
                "plugin {name}: not a valid WebAssembly component: {e:#}"
            ))
        })?;
        // Checked by name rather than left to the linker (which has all of WASI, and accepts an
        // import of an empty instance).
        let component_type = component.component_type();
        let refused: Vec<&str> = component_type
            .imports(&self.engine)
            .map(|(import, _)| import)
            .filter(|import| !crate::wasi::import_allowed(import))
            .collect();
        if !refused.is_empty() {
            return Err(LoadError(format!(
                "plugin {name}: imports {}, which plugins may not use (no filesystem, network or HTTP; \
                 only stdout/stderr, an empty environment, clocks and seeded randomness)",
                refused.join(", ")
            )));
        }
        let pre = self.linker.instantiate_pre(&component).map_err(|e| {
            LoadError(format!(
                "plugin {name}: its imports cannot be satisfied (plugins get no imports): {e:#}"
            ))
        })?;
        let version = world_version(component_type.exports(&self.engine).map(|(e, _)| e));
        let pre = if speaks_0_2(version) {
            Pre::Current(Box::new(PluginPre::new(pre).map_err(|e| {
                LoadError(format!(
                    "plugin {name}: does not implement the wasched:plugin/plugin world: {e:#}"
                ))
            })?))
        } else {
            // Their types are checked when an instance is made; a component lacking one of them
            // is no plugin of either version.
            let exports: Vec<&str> = component_type
                .exports(&self.engine)
                .map(|(export, _)| export)
                .collect();
            let missing: Vec<&str> = crate::legacy::EXPORTS
                .into_iter()
                .filter(|wanted| !exports.contains(wanted))
                .collect();
            if !missing.is_empty() {
                return Err(LoadError(format!(
                    "plugin {name}: does not implement the wasched:plugin/plugin world \
                     (0.2.0, or 0.1.0): it does not export {}",
                    missing.join(", ")
                )));
            }
            Pre::V01(pre)
        };
        Ok(ComponentFactory {
            name: name.to_string(),
            engine: self.engine.clone(),
            pre,
            limits,
            sha256,
            ticker: self.ticker.clone(),
        })
    }

    /// What a component file is: its imports and exports, and whether this host accepts it as a
    /// plugin (and what it then says it does).
    pub fn inspect(&self, bytes: &[u8]) -> Inspection {
        let sha256 = sha256_hex(bytes);
        let mut inspection = Inspection {
            size: bytes.len(),
            sha256: sha256.clone(),
            imports: Vec::new(),
            exports: Vec::new(),
            world: CURRENT_WORLD,
            verdict: Err(String::new()),
        };
        let component = match self.compile(bytes, &sha256) {
            Ok(component) => component,
            Err(e) => {
                inspection.verdict = Err(format!("not a valid WebAssembly component: {e:#}"));
                return inspection;
            }
        };
        let ty = component.component_type();
        inspection.imports = ty
            .imports(&self.engine)
            .map(|(n, _)| n.to_string())
            .collect();
        inspection.exports = ty
            .exports(&self.engine)
            .map(|(n, _)| n.to_string())
            .collect();
        inspection.world = world_version(inspection.exports.iter().map(String::as_str));
        inspection.verdict = self
            .load("inspected", bytes, Limits::default())
            .and_then(|factory| factory.instantiate("{}"))
            .map(|instance| instance.descriptor().clone())
            .map_err(|e| e.0.replacen("plugin inspected: ", "", 1));
        inspection
    }

    fn compile(&self, bytes: &[u8], sha256: &str) -> wasmtime::Result<Component> {
        let Some(dir) = &self.cache_dir else {
            return Component::new(&self.engine, bytes);
        };
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        self.engine
            .precompile_compatibility_hash()
            .hash(&mut hasher);
        let path = dir.join(format!("{sha256}-{:016x}.cwasm", hasher.finish()));
        if let Ok(compiled) = std::fs::read(&path) {
            // SAFETY: the file was written by `precompile_component` of an engine with the same
            // compatibility hash, under a name that includes the source's sha256.
            if let Ok(component) = unsafe { Component::deserialize(&self.engine, &compiled) } {
                return Ok(component);
            }
        }
        let compiled = self.engine.precompile_component(bytes)?;
        // A cache that cannot be written only costs a recompilation next time.
        if std::fs::create_dir_all(dir).is_ok() {
            let temporary = path.with_extension(format!("tmp{}", std::process::id()));
            if std::fs::write(&temporary, &compiled).is_ok() {
                let _ = std::fs::rename(&temporary, &path);
            }
        }
        // SAFETY: just produced by this engine.
        unsafe { Component::deserialize(&self.engine, &compiled) }
    }
}

/// Where compiled components are cached: `$WASCHED_CACHE_DIR`, else the user's cache directory.
fn cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("WASCHED_CACHE_DIR") {
        return (!dir.is_empty()).then(|| PathBuf::from(dir));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("wasched").join("compiled"))
}

/// The plugin world this host speaks natively.
pub const CURRENT_WORLD: &str = "wasched:plugin/plugin@0.2.1";
/// 0.2.1's predecessor on the same compatible track: the same functions and interfaces but
/// `groups`, loaded the same way (the component model finds its exports under their 0.2.0
/// names).
pub const V020_WORLD: &str = "wasched:plugin/plugin@0.2.0";
/// The older plugin world it still loads (see [`crate::legacy`]).
pub const V01_WORLD: &str = "wasched:plugin/plugin@0.1.0";

/// Which world a component with these exports was built against: 0.2.0 added `upsert-pods`
/// (among others), 0.2.1 names its interfaces `@0.2.1`; a component without `upsert-pods` is
/// taken for 0.1.0, whose exports are checked when an instance is made.
pub fn world_version<'a>(exports: impl Iterator<Item = &'a str>) -> &'static str {
    let mut version = V01_WORLD;
    for export in exports {
        if export.ends_with("@0.2.1") {
            return CURRENT_WORLD;
        }
        if export == "upsert-pods" {
            version = V020_WORLD;
        }
    }
    version
}

/// Whether a component of `world` is called through the 0.2 exports (not [`crate::legacy`]).
fn speaks_0_2(world: &str) -> bool {
    world == CURRENT_WORLD || world == V020_WORLD
}

/// The lowercase hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What `wasched plugin inspect` reports.
#[derive(Debug, Clone)]
pub struct Inspection {
    /// The component's size in bytes.
    pub size: usize,
    /// Its SHA-256, in lowercase hex.
    pub sha256: String,
    /// The interfaces and functions it imports.
    pub imports: Vec<String>,
    /// The interfaces and functions it exports.
    pub exports: Vec<String>,
    /// [`CURRENT_WORLD`] or [`V01_WORLD`], by its exports.
    pub world: &'static str,
    /// The plugin's descriptor (from `init` with an empty configuration), or why it is refused.
    pub verdict: Result<sdk::Descriptor, String>,
}

/// A compiled component, pre-instantiated for the world version it was built against.
enum Pre {
    /// `wasched:plugin@0.2.0` (boxed: its export indexes outweigh a bare `InstancePre`).
    Current(Box<PluginPre<StoreState>>),
    /// `wasched:plugin@0.1.0` (see [`crate::legacy`]).
    V01(InstancePre<StoreState>),
}

/// The exports of one instance, by world version.
enum Exports {
    Current(Box<PluginWorld>),
    V01(Box<ExportsV01>),
}

/// A compiled, pre-instantiated plugin component.
pub struct ComponentFactory {
    name: String,
    engine: Engine,
    pre: Pre,
    limits: Limits,
    sha256: String,
    ticker: Option<Arc<Ticker>>,
}

/// Per-instance host state: the resource limits and the (minimal) WASI context.
pub struct StoreState {
    limits: StoreLimits,
    wasi: wasmtime_wasi::WasiCtx,
    table: wasmtime::component::ResourceTable,
}

impl wasmtime_wasi::WasiView for StoreState {
    fn ctx(&mut self) -> wasmtime_wasi::WasiCtxView<'_> {
        wasmtime_wasi::WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl PluginFactory for ComponentFactory {
    fn instantiate(&self, config: &str) -> Result<Box<dyn PluginInstance>, LoadError> {
        Ok(Box::new(self.instance(config)?))
    }

    fn kind(&self) -> &'static str {
        "wasm"
    }

    fn identity(&self) -> String {
        format!(
            "wasm:{}:{:?}:deadlines={}",
            self.sha256,
            self.limits,
            self.ticker.is_some()
        )
    }
}

impl ComponentFactory {
    /// The sha256 of the component's bytes.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// A store for one instance: its limits, its WASI context, and a deadline of `start_ticks`.
    fn new_store(&self, start_ticks: u64) -> Store<StoreState> {
        let limits = StoreLimitsBuilder::new()
            .memory_size(self.limits.memory)
            .table_elements(self.limits.table_elements)
            // A component holds several core instances (its module, adapter shims).
            .instances(MAX_CORE_INSTANCES)
            .trap_on_grow_failure(true)
            .build();
        // Seeded by the component, so a plugin's "randomness" repeats from run to run.
        let seed = u64::from_str_radix(&self.sha256[..16], 16).unwrap_or(0);
        let state = StoreState {
            limits,
            wasi: crate::wasi::context(&self.name, seed),
            table: wasmtime::component::ResourceTable::new(),
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.limits);
        if let Some(ticker) = &self.ticker {
            store.epoch_deadline_trap();
            ticker.set_deadline(&mut store, start_ticks);
        }
        store
    }

    /// The optional interfaces `instance` exports, each type-checked.
    fn optional_exports(
        &self,
        store: &mut Store<StoreState>,
        instance: &Instance,
    ) -> Result<OptionalExports, LoadError> {
        let wrong_type = |interface: &str, e: wasmtime::Error| {
            LoadError(format!(
                "plugin {}: exports {interface} with the wrong type: {e:#}",
                self.name
            ))
        };
        Ok(OptionalExports {
            batched: batched_export(store, instance)
                .map_err(|e| wrong_type(BATCHED_INTERFACE, e))?,
            encoded: encoded_exports(store, instance)
                .map_err(|e| wrong_type(ENCODED_INTERFACE, e))?,
            stages: stage_exports(store, instance).map_err(|e| wrong_type(STAGES_INTERFACE, e))?,
            reserve: reserve_exports(store, instance)
                .map_err(|e| wrong_type(RESERVE_INTERFACE, e))?,
            details: details_export(store, instance)
                .map_err(|e| wrong_type(DETAILS_INTERFACE, e))?,
            devices: devices_exports(store, instance)
                .map_err(|e| wrong_type(DEVICES_INTERFACE, e))?,
            groups: groups_exports(store, instance).map_err(|e| wrong_type(GROUPS_INTERFACE, e))?,
            usage_with_calls: usage_with_calls_exports(store, instance)
                .map_err(|e| wrong_type(USAGE_WITH_CALLS_INTERFACE, e))?,
            plain_plans: plain_plans_exports(store, instance)
                .map_err(|e| wrong_type(PLAIN_PLANS_INTERFACE, e))?,
        })
    }

    fn instance(&self, config: &str) -> Result<ComponentInstance, LoadError> {
        let ticks = ticks(self.limits.call_timeout);
        let start_ticks = self::ticks(INSTANTIATE_TIMEOUT.max(self.limits.call_timeout));
        let mut store = self.new_store(start_ticks);
        let instantiation_failed = |e: wasmtime::Error| {
            LoadError(format!("plugin {}: instantiation failed: {e:#}", self.name))
        };
        let init_trapped =
            |e: wasmtime::Error| LoadError(format!("plugin {}: init trapped: {e:#}", self.name));
        let mut optional = OptionalExports::default();
        let (exports, descriptor) = match &self.pre {
            Pre::Current(pre) => {
                let instance = pre
                    .instance_pre()
                    .instantiate(&mut store)
                    .map_err(instantiation_failed)?;
                let world =
                    PluginWorld::new(&mut store, &instance).map_err(instantiation_failed)?;
                optional = self.optional_exports(&mut store, &instance)?;
                if let Some(ticker) = &self.ticker {
                    ticker.set_deadline(&mut store, start_ticks);
                }
                let mut descriptor = world
                    .call_init(&mut store, config)
                    .map_err(init_trapped)?
                    .map(sdk::Descriptor::from);
                if let Ok(descriptor) = &mut descriptor {
                    let (stages, reserve) = (optional.stages.as_ref(), optional.reserve.as_ref());
                    declare_stages(&mut store, stages, reserve, descriptor).map_err(|e| {
                        LoadError(format!(
                            "plugin {}: trapped saying which stages it takes part in: {e:#}",
                            self.name
                        ))
                    })?;
                    if let Some(details) = &optional.details {
                        let encoded = optional.encoded.is_some();
                        declare_details(&mut store, details, encoded, descriptor)
                            .map_err(|e| LoadError(format!("plugin {}: {e:#}", self.name)))?;
                    }
                    if let Some(devices) = &optional.devices {
                        let encoded = optional.encoded.is_some();
                        declare_devices(&mut store, devices, encoded, descriptor)
                            .map_err(|e| LoadError(format!("plugin {}: {e:#}", self.name)))?;
                    }
                    if let Some(groups) = &optional.groups {
                        let encoded = optional.encoded.is_some();
                        declare_groups(&mut store, groups, encoded, descriptor)
                            .map_err(|e| LoadError(format!("plugin {}: {e:#}", self.name)))?;
                    }
                    if let Some(usage) = &optional.usage_with_calls {
                        let encoded = optional.encoded.is_some();
                        declare_usage_with_calls(&mut store, usage, encoded, descriptor)
                            .map_err(|e| LoadError(format!("plugin {}: {e:#}", self.name)))?;
                    }
                }
                (Exports::Current(Box::new(world)), descriptor)
            }
            Pre::V01(pre) => {
                let instance = pre.instantiate(&mut store).map_err(instantiation_failed)?;
                if let Some(ticker) = &self.ticker {
                    ticker.set_deadline(&mut store, start_ticks);
                }
                let (exports, descriptor) = ExportsV01::new(&mut store, &instance, config)
                    .map_err(|e| {
                        LoadError(format!(
                            "plugin {}: does not implement the wasched:plugin/plugin world (0.2.0 or 0.1.0): {e:#}",
                            self.name
                        ))
                    })?;
                (Exports::V01(Box::new(exports)), descriptor)
            }
        };
        let descriptor = descriptor.map_err(|e| {
            LoadError(format!(
                "plugin {}: refused its configuration: {e}",
                self.name
            ))
        })?;
        let reads_devices = descriptor.reads_devices;
        let reads_groups = descriptor.reads_groups;
        let plan_ignores_usage = descriptor.plan_ignores_usage;
        let placed_volumes = descriptor
            .reads_existing_pods
            .contains(sdk::ExistingPodParts::VOLUMES);
        Ok(ComponentInstance {
            store,
            exports,
            descriptor,
            call_ticks: ticks,
            ticker: self.ticker.clone(),
            scratch_nodes: Vec::new(),
            mirrored: 0,
            held: Held::for_exports(
                optional.encoded.is_some(),
                optional.batched.is_some(),
                placed_volumes,
            ),
            batched: optional.batched,
            encoded: optional.encoded,
            stages: optional.stages,
            reserve: optional.reserve,
            devices: optional.devices.filter(|_| reads_devices),
            groups: optional.groups.filter(|_| reads_groups),
            usage_with_calls: optional.usage_with_calls.filter(|_| plan_ignores_usage),
            // Its input is the `encoded` interface's.
            plain_plans: optional.plain_plans.filter(|_| optional.encoded.is_some()),
            plans_follow: false,
            input: Vec::new(),
            calls: 0,
            scores_zero: false,
            calls_at_plan: 0,
        })
    }
}

/// The optional interfaces of the `staged-plugin` world a component exports.
#[derive(Default)]
struct OptionalExports {
    batched: Option<BatchedSetPod>,
    encoded: Option<EncodedExports>,
    stages: Option<StageExports>,
    reserve: Option<ReserveFunc>,
    details: Option<DetailsFunc>,
    devices: Option<DevicesExports>,
    groups: Option<GroupsExports>,
    usage_with_calls: Option<UsageWithCallsExports>,
    plain_plans: Option<PlainPlansExports>,
}

fn ticks(timeout: Duration) -> u64 {
    (timeout.as_micros() / EPOCH_TICK.as_micros()).max(1) as u64
}
