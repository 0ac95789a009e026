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
use staged_bindings::exports::wasched::plugin::reserve as wit_reserve;
use staged_bindings::exports::wasched::plugin::stages as wit_stages;

use crate::legacy::ExportsV01;

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
    deadlines: bool,
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
        if deadlines {
            let weak = engine.weak();
            std::thread::Builder::new()
                .name("wasched-epoch".into())
                .spawn(move || loop {
                    std::thread::sleep(EPOCH_TICK);
                    match weak.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => break,
                    }
                })
                .map_err(|e| LoadError(format!("epoch thread: {e}")))?;
        }
        // WASI is linked whole, but `load` refuses any import outside `wasi::ALLOWED_IMPORTS`, and
        // the context grants no preopened directory, network, environment or real wall clock.
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
            .map_err(|e| LoadError(format!("linking WASI: {e:#}")))?;
        Ok(WasmRuntime {
            engine,
            linker: Arc::new(linker),
            cache_dir: cache_dir(),
            deadlines,
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
        let pre = if version == CURRENT_WORLD {
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
            deadlines: self.deadlines,
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
pub const CURRENT_WORLD: &str = "wasched:plugin/plugin@0.2.0";
/// The older plugin world it still loads (see [`crate::legacy`]).
pub const V01_WORLD: &str = "wasched:plugin/plugin@0.1.0";

/// Which world a component with these exports was built against: 0.2.0 added `upsert-pods`
/// (among others); a component without it is taken for 0.1.0, whose exports are checked when an
/// instance is made.
pub fn world_version<'a>(mut exports: impl Iterator<Item = &'a str>) -> &'static str {
    if exports.any(|export| export == "upsert-pods") {
        CURRENT_WORLD
    } else {
        V01_WORLD
    }
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
    deadlines: bool,
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
            self.sha256, self.limits, self.deadlines
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
        if self.deadlines {
            store.epoch_deadline_trap();
            store.set_epoch_deadline(start_ticks);
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
                if self.deadlines {
                    store.set_epoch_deadline(start_ticks);
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
                }
                (Exports::Current(Box::new(world)), descriptor)
            }
            Pre::V01(pre) => {
                let instance = pre.instantiate(&mut store).map_err(instantiation_failed)?;
                if self.deadlines {
                    store.set_epoch_deadline(start_ticks);
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
        Ok(ComponentInstance {
            store,
            exports,
            descriptor,
            call_ticks: ticks,
            deadlines: self.deadlines,
            scratch_nodes: Vec::new(),
            mirrored: 0,
            held: Held::for_exports(optional.encoded.is_some(), optional.batched.is_some()),
            batched: optional.batched,
            encoded: optional.encoded,
            stages: optional.stages,
            reserve: optional.reserve,
            input: Vec::new(),
            calls: 0,
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
}

fn ticks(timeout: Duration) -> u64 {
    (timeout.as_micros() / EPOCH_TICK.as_micros()).max(1) as u64
}

struct ComponentInstance {
    store: Store<StoreState>,
    exports: Exports,
    descriptor: sdk::Descriptor,
    call_ticks: u64,
    deadlines: bool,
    scratch_nodes: Vec<(u32, wit::NodeInfo)>,
    /// One past the highest node id sent: a bound on the mirror's size.
    mirrored: usize,
    /// `apply-and-set-pod`, when the component exports [`BATCHED_INTERFACE`].
    batched: Option<BatchedSetPod>,
    /// The exports of [`ENCODED_INTERFACE`], which the host prefers to `batched` and `set-pod`.
    encoded: Option<EncodedExports>,
    /// The exports of [`STAGES_INTERFACE`], when the component has them.
    stages: Option<StageExports>,
    /// `reserve` of [`RESERVE_INTERFACE`], when the component has it.
    reserve: Option<ReserveFunc>,
    /// Pod and usage updates held back for the next `set-pod`: as bytes with `encoded`, as
    /// records with `batched`, none without either.
    held: Option<Held>,
    /// The bytes of the last `encoded` call, kept for their allocation.
    input: Vec<u8>,
    /// Calls made into the component, for tests.
    calls: u64,
}

/// The interface through which a component takes held-back mirror updates with the next pod.
pub const BATCHED_INTERFACE: &str = "wasched:plugin/batched@0.2.0";

type BatchedSetPod = TypedFunc<(wit::MirrorChanges, wit::Pod), (wit::PodPlan,)>;

/// The interface through which a component takes its pods and held-back updates as bytes.
pub const ENCODED_INTERFACE: &str = "wasched:plugin/encoded@0.2.0";

/// The functions of [`ENCODED_INTERFACE`], type-checked when the instance starts.
#[derive(Clone, Copy)]
struct EncodedExports {
    apply: Func,
    apply_and_set_pod: Func,
    upsert_nodes: Func,
}

impl EncodedExports {
    fn apply(&self) -> TypedFunc<(&[u8],), ()> {
        // SAFETY: `encoded_exports` checked this type when the instance started.
        unsafe { TypedFunc::new_unchecked(self.apply) }
    }

    fn apply_and_set_pod(&self) -> TypedFunc<(&[u8],), (wit::PodPlan,)> {
        // SAFETY: as in `apply`.
        unsafe { TypedFunc::new_unchecked(self.apply_and_set_pod) }
    }

    fn upsert_nodes(&self) -> TypedFunc<(&[u8],), ()> {
        // SAFETY: as in `apply`.
        unsafe { TypedFunc::new_unchecked(self.upsert_nodes) }
    }
}

/// The functions of [`ENCODED_INTERFACE`] of `instance`, if it exports it.
fn encoded_exports(
    store: &mut Store<StoreState>,
    instance: &Instance,
) -> wasmtime::Result<Option<EncodedExports>> {
    let Some([apply, apply_and_set_pod, upsert_nodes]) = interface_funcs(
        store,
        instance,
        ENCODED_INTERFACE,
        ["apply", "apply-and-set-pod", "upsert-nodes"],
    )?
    else {
        return Ok(None);
    };
    apply.typed::<(&[u8],), ()>(&*store)?;
    apply_and_set_pod.typed::<(&[u8],), (wit::PodPlan,)>(&*store)?;
    upsert_nodes.typed::<(&[u8],), ()>(&*store)?;
    Ok(Some(EncodedExports {
        apply,
        apply_and_set_pod,
        upsert_nodes,
    }))
}

/// The functions `names` of `interface`, if `instance` exports the interface (an error if it
/// lacks one of them).
fn interface_funcs<const N: usize>(
    store: &mut Store<StoreState>,
    instance: &Instance,
    interface: &str,
    names: [&str; N],
) -> wasmtime::Result<Option<[Func; N]>> {
    let Some(interface) = instance.get_export_index(&mut *store, None, interface) else {
        return Ok(None);
    };
    let mut funcs = Vec::with_capacity(N);
    for name in names {
        let func = instance
            .get_export_index(&mut *store, Some(&interface), name)
            .and_then(|index| instance.get_func(&mut *store, index))
            .ok_or_else(|| wasmtime::Error::msg(format!("it lacks the function {name}")))?;
        funcs.push(func);
    }
    Ok(funcs.try_into().ok())
}

/// The interface through which a component takes part in PreEnqueue, Permit and Unreserve.
pub const STAGES_INTERFACE: &str = "wasched:plugin/stages@0.2.0";

/// The functions of [`STAGES_INTERFACE`], type-checked when the instance starts.
#[derive(Clone, Copy)]
struct StageExports {
    stages: TypedFunc<(), (wit_stages::StageSet,)>,
    pre_enqueue: TypedFunc<(wit_stages::StagedPod,), (Option<wit::Failure>,)>,
    permit: TypedFunc<(wit_stages::StagedPod, String), (wit_stages::PermitAnswer,)>,
    unreserve: TypedFunc<(wit_stages::StagedPod, String), ()>,
}

/// The functions of [`STAGES_INTERFACE`] of `instance`, if it exports it.
fn stage_exports(
    store: &mut Store<StoreState>,
    instance: &Instance,
) -> wasmtime::Result<Option<StageExports>> {
    let Some([stages, pre_enqueue, permit, unreserve]) = interface_funcs(
        store,
        instance,
        STAGES_INTERFACE,
        ["stages", "pre-enqueue", "permit", "unreserve"],
    )?
    else {
        return Ok(None);
    };
    Ok(Some(StageExports {
        stages: stages.typed(&*store)?,
        pre_enqueue: pre_enqueue.typed(&*store)?,
        permit: permit.typed(&*store)?,
        unreserve: unreserve.typed(&*store)?,
    }))
}

/// The interface through which a component takes part in Reserve.
pub const RESERVE_INTERFACE: &str = "wasched:plugin/reserve@0.2.0";

/// `reserves` and `reserve` of [`RESERVE_INTERFACE`].
#[derive(Clone, Copy)]
struct ReserveFunc {
    reserves: TypedFunc<(), (bool,)>,
    reserve: TypedFunc<(u32,), (Result<wit_reserve::Reservation, wit::Failure>,)>,
}

/// The functions of [`RESERVE_INTERFACE`] of `instance`, if it exports it.
fn reserve_exports(
    store: &mut Store<StoreState>,
    instance: &Instance,
) -> wasmtime::Result<Option<ReserveFunc>> {
    let Some([reserves, reserve]) =
        interface_funcs(store, instance, RESERVE_INTERFACE, ["reserves", "reserve"])?
    else {
        return Ok(None);
    };
    Ok(Some(ReserveFunc {
        reserves: reserves.typed(&*store)?,
        reserve: reserve.typed(&*store)?,
    }))
}

/// Asks the component which stages it takes part in (once, after `init`, within its deadline)
/// and puts the answer into `descriptor`.
fn declare_stages(
    store: &mut Store<StoreState>,
    stages: Option<&StageExports>,
    reserve: Option<&ReserveFunc>,
    descriptor: &mut sdk::Descriptor,
) -> wasmtime::Result<()> {
    if let Some(stages) = stages {
        let (set,) = stages.stages.call(&mut *store, ())?;
        descriptor.pre_enqueue = set.contains(wit_stages::StageSet::PRE_ENQUEUE);
        descriptor.permit = set.contains(wit_stages::StageSet::PERMIT);
    }
    if let Some(reserve) = reserve {
        (descriptor.reserve,) = reserve.reserves.call(&mut *store, ())?;
    }
    Ok(())
}

/// A pod as the `stages` interface sends it.
fn staged_pod(pod: &sdk::Pod) -> wit_stages::StagedPod {
    wit_stages::StagedPod {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        uid: pod.uid.clone(),
        labels: pairs(&pod.labels),
        annotations: pairs(&pod.annotations),
        priority: pod.priority,
        scheduling_gates: pod.scheduling_gates.clone(),
    }
}

/// Longest wait a Permit plugin may ask for: kube-scheduler caps it at 15 minutes too.
const MAX_PERMIT_WAIT: Duration = Duration::from_secs(15 * 60);

/// At most this many updates are held back: a plugin that is sent no pod for a long time (one
/// idle for the pods being scheduled) gets them in batches of this size.
const MAX_HELD_CHANGES: usize = 512;

/// `apply-and-set-pod` of `instance`, if it exports [`BATCHED_INTERFACE`].
fn batched_export(
    store: &mut Store<StoreState>,
    instance: &Instance,
) -> wasmtime::Result<Option<BatchedSetPod>> {
    let Some([func]) = interface_funcs(store, instance, BATCHED_INTERFACE, ["apply-and-set-pod"])?
    else {
        return Ok(None);
    };
    func.typed(&*store).map(Some)
}

/// Mirror updates not yet sent, in the order `apply-and-set-pod` applies them: removals, then
/// upserts, then usage. An update that would have to go before one already held (a removal
/// after an upsert, a pod after usage) first sends what is held.
#[derive(Default)]
struct HeldChanges {
    removed_pods: Vec<u32>,
    upserted_pods: Vec<(u32, wit::ExistingPod)>,
    usage: Vec<(u32, wit::NodeUsage)>,
}

impl HeldChanges {
    fn count(&self) -> usize {
        self.removed_pods.len() + self.upserted_pods.len() + self.usage.len()
    }

    fn is_empty(&self) -> bool {
        self.count() == 0
    }

    fn remove_pod(&mut self, id: u32) {
        self.removed_pods.push(id);
    }

    fn upsert_pod(&mut self, id: u32, pod: &sdk::ExistingPod) {
        self.upserted_pods.push((id, existing_pod(pod)));
    }

    fn update_usage(&mut self, id: u32, usage: &sdk::NodeUsage) {
        self.usage.push((id, node_usage(usage)));
    }

    fn has_upserts(&self) -> bool {
        !self.upserted_pods.is_empty()
    }

    fn has_usage(&self) -> bool {
        !self.usage.is_empty()
    }

    /// What is held, emptying it.
    fn take(&mut self) -> wit::MirrorChanges {
        wit::MirrorChanges {
            removed_pods: std::mem::take(&mut self.removed_pods),
            upserted_pods: std::mem::take(&mut self.upserted_pods),
            usage: std::mem::take(&mut self.usage),
        }
    }
}

/// `$call` with `$held` bound to whichever form a [`Held`] holds: both forms have the same
/// methods.
macro_rules! either_form {
    ($value:expr, $held:ident => $call:expr) => {
        match $value {
            Held::Records($held) => $call,
            Held::Bytes($held) => $call,
        }
    };
}

/// Mirror updates held back for the next pod, in the form the component takes them.
enum Held {
    /// As WIT records, for [`BATCHED_INTERFACE`].
    Records(HeldChanges),
    /// As bytes, for [`ENCODED_INTERFACE`].
    Bytes(wire::HeldChanges),
}

impl Held {
    /// What a component with these exports is held back (none: it takes each update at once).
    fn for_exports(encoded: bool, batched: bool) -> Option<Held> {
        match (encoded, batched) {
            (true, _) => Some(Held::Bytes(wire::HeldChanges::default())),
            (false, true) => Some(Held::Records(HeldChanges::default())),
            (false, false) => None,
        }
    }

    fn count(&self) -> usize {
        either_form!(self, held => held.count())
    }

    fn has_upserts(&self) -> bool {
        either_form!(self, held => held.has_upserts())
    }

    fn has_usage(&self) -> bool {
        either_form!(self, held => held.has_usage())
    }

    fn remove_pod(&mut self, id: u32) {
        either_form!(self, held => held.remove_pod(id))
    }

    fn upsert_pod(&mut self, id: u32, pod: &sdk::ExistingPod) {
        either_form!(self, held => held.upsert_pod(id, pod))
    }

    fn update_usage(&mut self, id: u32, usage: &sdk::NodeUsage) {
        either_form!(self, held => held.update_usage(id, usage))
    }
}

fn trapped(call: &'static str, error: wasmtime::Error) -> CallError {
    let root = error.root_cause().to_string();
    let (kind, message) = match error.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::Interrupt) => (
            FailureKind::Deadline,
            "deadline exceeded (the call ran too long)".to_string(),
        ),
        Some(trap) => (FailureKind::Trap, trap.to_string()),
        // StoreLimits refuses the growth and, with `trap_on_grow_failure`, fails the call.
        None if root.contains("growing memory") => (
            FailureKind::Memory,
            format!("memory limit exceeded ({root})"),
        ),
        None if root.contains("growing table") => (
            FailureKind::Memory,
            format!("table limit exceeded ({root})"),
        ),
        None => (FailureKind::Trap, format!("failed: {root}")),
    };
    CallError::of_kind(kind, call, message)
}

impl ComponentInstance {
    /// Sets the deadline of the next call, allowing for the nodes it handles.
    fn arm(&mut self, nodes: usize) {
        self.arm_for(PER_NODE_ALLOWANCE * nodes as u32);
    }

    /// The 0.2.0 exports and the store, with the next call's deadline set; none for a 0.1.0
    /// component, which is never sent pods or namespaces (its descriptor reads neither).
    fn current_armed(
        &mut self,
        allowance: Duration,
    ) -> Option<(&PluginWorld, &mut Store<StoreState>)> {
        self.arm_for(allowance);
        match &self.exports {
            Exports::Current(world) => Some((world, &mut self.store)),
            Exports::V01(_) => None,
        }
    }

    /// Sets the deadline of the next call: the call timeout plus `allowance`. Every call into the
    /// component is armed once.
    fn arm_for(&mut self, allowance: Duration) {
        self.calls += 1;
        if self.deadlines {
            let extra = allowance.as_micros() / EPOCH_TICK.as_micros();
            self.store
                .set_epoch_deadline(self.call_ticks + extra as u64);
        }
    }
}

/// Calls export `$call` of either world version with the same arguments.
macro_rules! call {
    ($self:ident, $call:ident, $v01:ident, $($arg:expr),*) => {
        match &$self.exports {
            Exports::Current(world) => world.$call(&mut $self.store, $($arg),*),
            Exports::V01(exports) => exports.$v01(&mut $self.store, $($arg),*),
        }
    };
}

impl ComponentInstance {
    /// Sends the held-back updates: as bytes through `apply` to a component exporting
    /// [`ENCODED_INTERFACE`], otherwise through the plain exports.
    fn send_held(&mut self) -> Result<(), CallError> {
        let Some(held) = &mut self.held else {
            return Ok(());
        };
        let count = held.count();
        if count == 0 {
            return Ok(());
        }
        match held {
            Held::Bytes(held) => {
                self.input.clear();
                held.write(&mut self.input);
                let encoded = self.encoded.expect("bytes are held only for `encoded`");
                self.arm_for(SYNC_PER_NODE_ALLOWANCE * count as u32);
                encoded
                    .apply()
                    .call(&mut self.store, (&self.input,))
                    .map_err(|e| trapped("apply", e))
            }
            Held::Records(held) => {
                let changes = held.take();
                if !changes.removed_pods.is_empty() {
                    self.send_removed_pods(&changes.removed_pods)?;
                }
                if !changes.upserted_pods.is_empty() {
                    self.send_upserted_pods(&changes.upserted_pods)?;
                }
                if !changes.usage.is_empty() {
                    self.send_usage(&changes.usage)?;
                }
                Ok(())
            }
        }
    }

    /// Holds an update back if the component takes updates with its pods (`add` holds it),
    /// first sending what is held when `must_follow` says the update must come after it.
    /// False when the component takes each update at once.
    fn hold(
        &mut self,
        must_follow: fn(&Held) -> bool,
        add: impl FnOnce(&mut Held),
    ) -> Result<bool, CallError> {
        let Some(held) = &self.held else {
            return Ok(false);
        };
        if must_follow(held) {
            self.send_held()?;
        }
        add(self.held.as_mut().expect("sending keeps the holding"));
        self.send_held_if_full()?;
        Ok(true)
    }

    /// `set-pod`, or `apply-and-set-pod` of `batched`, with the pod as a WIT record.
    fn set_pod_lowered(&mut self, pod: &sdk::Pod, items: usize) -> Result<wit::PodPlan, CallError> {
        let sent = wit_pod(pod, self.descriptor.reads_pod);
        Ok(match (self.batched, &mut self.held) {
            (Some(batched), Some(Held::Records(held))) if !held.is_empty() => {
                let count = held.count();
                let changes = held.take();
                self.arm_for(
                    SET_POD_PER_ITEM_ALLOWANCE * items as u32
                        + SYNC_PER_NODE_ALLOWANCE * count as u32,
                );
                batched
                    .call(&mut self.store, (changes, sent))
                    .map(|(plan,)| plan)
                    .map_err(|e| trapped("apply-and-set-pod", e))?
            }
            _ => {
                self.arm_for(SET_POD_PER_ITEM_ALLOWANCE * items as u32);
                match &self.exports {
                    Exports::Current(world) => world.call_set_pod(&mut self.store, &sent),
                    Exports::V01(exports) => exports.set_pod(&mut self.store, sent),
                }
                .map_err(|e| trapped("set-pod", e))?
            }
        })
    }

    /// Sends what is held once there is a batch's worth.
    fn send_held_if_full(&mut self) -> Result<(), CallError> {
        if self.held.as_ref().map_or(0, Held::count) >= MAX_HELD_CHANGES {
            self.send_held()?;
        }
        Ok(())
    }

    fn send_usage(&mut self, usage: &[(u32, wit::NodeUsage)]) -> Result<(), CallError> {
        self.arm(usage.len());
        call!(self, call_update_usage, update_usage, usage).map_err(|e| trapped("update-usage", e))
    }

    fn send_upserted_pods(&mut self, pods: &[(u32, wit::ExistingPod)]) -> Result<(), CallError> {
        // Like nodes: a plugin may index what it is sent (counts per topology domain).
        let Some((world, store)) = self.current_armed(SYNC_PER_NODE_ALLOWANCE * pods.len() as u32)
        else {
            return Ok(());
        };
        world
            .call_upsert_pods(store, pods)
            .map_err(|e| trapped("upsert-pods", e))
    }

    fn send_removed_pods(&mut self, ids: &[u32]) -> Result<(), CallError> {
        let Some((world, store)) = self.current_armed(PER_NODE_ALLOWANCE * ids.len() as u32) else {
            return Ok(());
        };
        world
            .call_remove_pods(store, ids)
            .map_err(|e| trapped("remove-pods", e))
    }
}

impl PluginInstance for ComponentInstance {
    fn descriptor(&self) -> &sdk::Descriptor {
        &self.descriptor
    }

    fn upsert_nodes(&mut self, nodes: &[(u32, &sdk::NodeInfo)]) -> Result<(), CallError> {
        self.send_held()?;
        let highest = nodes
            .iter()
            .map(|(id, _)| *id as usize + 1)
            .max()
            .unwrap_or(0);
        self.mirrored = self.mirrored.max(highest);
        self.arm_for(
            SYNC_PER_NODE_ALLOWANCE * nodes.len() as u32
                + SYNC_PER_MIRRORED_NODE_ALLOWANCE * self.mirrored as u32,
        );
        if let Some(encoded) = self.encoded {
            self.input.clear();
            wire::write_nodes(&mut self.input, nodes);
            return encoded
                .upsert_nodes()
                .call(&mut self.store, (&self.input,))
                .map_err(|e| trapped("upsert-nodes", e));
        }
        let mut batch = std::mem::take(&mut self.scratch_nodes);
        batch.clear();
        batch.extend(nodes.iter().map(|(id, node)| (*id, node_info(node))));
        let result = call!(self, call_upsert_nodes, upsert_nodes, &batch);
        batch.clear();
        self.scratch_nodes = batch;
        result.map_err(|e| trapped("upsert-nodes", e))
    }

    fn remove_nodes(&mut self, ids: &[u32]) -> Result<(), CallError> {
        self.send_held()?;
        self.arm(ids.len());
        call!(self, call_remove_nodes, remove_nodes, ids).map_err(|e| trapped("remove-nodes", e))
    }

    fn update_usage(&mut self, usage: &[(u32, &sdk::NodeUsage)]) -> Result<(), CallError> {
        let held = self.hold(
            |_| false,
            |held| {
                for (id, u) in usage {
                    held.update_usage(*id, u);
                }
            },
        )?;
        if held {
            return Ok(());
        }
        let converted: Vec<(u32, wit::NodeUsage)> =
            usage.iter().map(|(id, u)| (*id, node_usage(u))).collect();
        self.send_usage(&converted)
    }

    fn upsert_pods(&mut self, pods: &[(u32, sdk::ExistingPod)]) -> Result<(), CallError> {
        let held = self.hold(Held::has_usage, |held| {
            for (id, p) in pods {
                held.upsert_pod(*id, p);
            }
        })?;
        if held {
            return Ok(());
        }
        let converted: Vec<(u32, wit::ExistingPod)> =
            pods.iter().map(|(id, p)| (*id, existing_pod(p))).collect();
        self.send_upserted_pods(&converted)
    }

    fn remove_pods(&mut self, ids: &[u32]) -> Result<(), CallError> {
        let held = self.hold(
            |held| held.has_upserts() || held.has_usage(),
            |held| {
                for &id in ids {
                    held.remove_pod(id);
                }
            },
        )?;
        if held {
            return Ok(());
        }
        self.send_removed_pods(ids)
    }

    fn upsert_namespaces(&mut self, namespaces: &[(&str, &sdk::Labels)]) -> Result<(), CallError> {
        self.send_held()?;
        let Some((world, store)) = self.current_armed(PER_NODE_ALLOWANCE * namespaces.len() as u32)
        else {
            return Ok(());
        };
        let converted: Vec<wit::NamespaceInfo> = namespaces
            .iter()
            .map(|(name, labels)| wit::NamespaceInfo {
                name: name.to_string(),
                labels: pairs(labels),
            })
            .collect();
        world
            .call_upsert_namespaces(store, &converted)
            .map_err(|e| trapped("upsert-namespaces", e))
    }

    fn remove_namespaces(&mut self, names: &[&str]) -> Result<(), CallError> {
        self.send_held()?;
        let Some((world, store)) = self.current_armed(PER_NODE_ALLOWANCE * names.len() as u32)
        else {
            return Ok(());
        };
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        world
            .call_remove_namespaces(store, &names)
            .map_err(|e| trapped("remove-namespaces", e))
    }

    fn upsert_volumes(&mut self, volumes: &[&sdk::VolumeInfo]) -> Result<(), CallError> {
        self.send_held()?;
        let Some((world, store)) = self.current_armed(PER_NODE_ALLOWANCE * volumes.len() as u32)
        else {
            return Ok(());
        };
        let converted: Vec<wit::VolumeInfo> = volumes.iter().map(|v| volume_info(v)).collect();
        world
            .call_upsert_volumes(store, &converted)
            .map_err(|e| trapped("upsert-volumes", e))
    }

    fn remove_volumes(&mut self, names: &[&str]) -> Result<(), CallError> {
        self.send_held()?;
        let Some((world, store)) = self.current_armed(PER_NODE_ALLOWANCE * names.len() as u32)
        else {
            return Ok(());
        };
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        world
            .call_remove_volumes(store, &names)
            .map_err(|e| trapped("remove-volumes", e))
    }

    fn set_pod(&mut self, pod: &sdk::Pod) -> Result<sdk::PodPlan, CallError> {
        let items = pod_items(pod, self.descriptor.reads_pod);
        let plan = if let (Some(encoded), Some(Held::Bytes(held))) = (self.encoded, &mut self.held)
        {
            let count = held.count();
            self.input.clear();
            held.write(&mut self.input);
            wire::write_pod(&mut self.input, pod, self.descriptor.reads_pod);
            self.arm_for(
                SET_POD_PER_ITEM_ALLOWANCE * items as u32 + SYNC_PER_NODE_ALLOWANCE * count as u32,
            );
            encoded
                .apply_and_set_pod()
                .call(&mut self.store, (&self.input,))
                .map(|(plan,)| plan)
                .map_err(|e| trapped("apply-and-set-pod", e))?
        } else {
            self.set_pod_lowered(pod, items)?
        };
        check_plan(plan)
    }

    fn filter(&mut self, ids: &[u32], out: &mut sdk::FilterResults) -> Result<(), CallError> {
        self.send_held()?;
        self.arm(ids.len());
        let results = call!(self, call_filter, filter, ids).map_err(|e| trapped("filter", e))?;
        check_failures("filter", &results.failures, ids.len())?;
        let results = sdk::FilterResults {
            verdicts: results.verdicts,
            failures: results.failures.into_iter().map(failure).collect(),
        };
        results
            .check(ids.len())
            .map_err(|message| CallError::new("filter", message))?;
        out.append(results);
        Ok(())
    }

    fn score(&mut self, ids: &[u32], out: &mut Vec<i64>) -> Result<(), CallError> {
        self.send_held()?;
        self.arm(ids.len());
        let scores = call!(self, call_score, score, ids).map_err(|e| trapped("score", e))?;
        check_len("score", scores.len(), ids.len())?;
        if out.is_empty() {
            *out = scores;
        } else {
            out.extend(scores);
        }
        Ok(())
    }

    fn pre_enqueue(&mut self, pod: &sdk::Pod) -> Result<Option<sdk::Failure>, CallError> {
        let Some(stages) = self.stages else {
            return Ok(None);
        };
        self.arm_for(Duration::ZERO);
        let (answer,) = stages
            .pre_enqueue
            .call(&mut self.store, (staged_pod(pod),))
            .map_err(|e| trapped("pre-enqueue", e))?;
        match answer {
            None => Ok(None),
            Some(f) => {
                check_failure("pre-enqueue", &f)?;
                Ok(Some(failure(f)))
            }
        }
    }

    fn permit(&mut self, pod: &sdk::Pod, node: &str) -> Result<PermitAnswer, CallError> {
        let Some(stages) = self.stages else {
            return Ok(PermitAnswer::allow());
        };
        self.arm_for(Duration::ZERO);
        let (answer,) = stages
            .permit
            .call(&mut self.store, (staged_pod(pod), node.to_string()))
            .map_err(|e| trapped("permit", e))?;
        let permit = match answer.decision {
            wit_stages::PermitDecision::Allow => Permit::Allow,
            wit_stages::PermitDecision::Wait(millis) => Permit::Wait {
                timeout: Duration::from_millis(millis).min(MAX_PERMIT_WAIT),
            },
            wit_stages::PermitDecision::Reject(reason) => {
                check_reason("permit", &reason)?;
                Permit::Reject(reason)
            }
        };
        if answer.allow.len() > MAX_LISTED_NODES {
            return Err(CallError::new(
                "permit",
                format!(
                    "allowed {} pods, more than {MAX_LISTED_NODES}",
                    answer.allow.len()
                ),
            ));
        }
        Ok(PermitAnswer {
            permit,
            allow: answer.allow,
        })
    }

    fn reserve(&mut self, node: u32) -> Result<Result<sdk::Reservation, sdk::Failure>, CallError> {
        let Some(reserve) = self.reserve else {
            return Ok(Ok(sdk::Reservation::default()));
        };
        self.send_held()?;
        self.arm_for(Duration::ZERO);
        let (answer,) = reserve
            .reserve
            .call(&mut self.store, (node,))
            .map_err(|e| trapped("reserve", e))?;
        match answer {
            Ok(reservation) => {
                let listed = reservation.bind_volumes.len() + reservation.provision_volumes.len();
                if listed > MAX_LISTED_NODES {
                    return Err(CallError::new(
                        "reserve",
                        format!("reserved {listed} volumes, more than {MAX_LISTED_NODES}"),
                    ));
                }
                Ok(Ok(sdk::Reservation {
                    volumes: sdk::PodVolumes {
                        static_bindings: reservation
                            .bind_volumes
                            .into_iter()
                            .map(|b| (b.claim, b.volume))
                            .collect(),
                        provisions: reservation.provision_volumes,
                    },
                }))
            }
            Err(f) => {
                check_failure("reserve", &f)?;
                Ok(Err(failure(f)))
            }
        }
    }

    fn unreserve(&mut self, pod: &sdk::Pod, node: &str) -> Result<(), CallError> {
        let Some(stages) = self.stages else {
            return Ok(());
        };
        self.arm_for(Duration::ZERO);
        stages
            .unreserve
            .call(&mut self.store, (staged_pod(pod), node.to_string()))
            .map_err(|e| trapped("unreserve", e))
    }

    fn normalize(&mut self, scores: &mut Vec<i64>) -> Result<(), CallError> {
        self.send_held()?;
        self.arm(scores.len());
        let normalized =
            call!(self, call_normalize, normalize, scores).map_err(|e| trapped("normalize", e))?;
        check_len("normalize", normalized.len(), scores.len())?;
        *scores = normalized;
        Ok(())
    }
}

/// Refuses a plan that lists too many nodes or carries a malformed failure.
fn check_plan(plan: wit::PodPlan) -> Result<sdk::PodPlan, CallError> {
    match &plan.filter {
        wit::FilterPlan::Reject(f) => check_failure("set-pod", f)?,
        wit::FilterPlan::OnlyNodes(names) if names.len() > MAX_LISTED_NODES => {
            return Err(CallError::new(
                "set-pod",
                format!("listed {} nodes, more than {MAX_LISTED_NODES}", names.len()),
            ))
        }
        wit::FilterPlan::FailingNodes(failing) => {
            if failing.nodes.len() > MAX_LISTED_NODES {
                return Err(CallError::new(
                    "set-pod",
                    format!(
                        "listed {} failing nodes, more than {MAX_LISTED_NODES}",
                        failing.nodes.len()
                    ),
                ));
            }
            check_failures("set-pod", &failing.failures, failing.nodes.len())?;
        }
        _ => {}
    }
    Ok(pod_plan(plan))
}

/// Refuses more distinct failures than the `nodes` they are for, or any failure
/// [`check_failure`] refuses.
fn check_failures(
    call: &'static str,
    failures: &[wit::Failure],
    nodes: usize,
) -> Result<(), CallError> {
    if failures.len() > nodes {
        return Err(CallError::new(
            call,
            format!("returned {} failures for {nodes} nodes", failures.len()),
        ));
    }
    failures.iter().try_for_each(|f| check_failure(call, f))
}

/// Refuses failures with absurdly many or long reasons (they end up in pod statuses and logs).
fn check_failure(call: &'static str, f: &wit::Failure) -> Result<(), CallError> {
    if f.reasons.len() > MAX_REASONS_PER_FAILURE {
        return Err(CallError::new(
            call,
            format!(
                "returned a failure with {} reasons, more than {MAX_REASONS_PER_FAILURE}",
                f.reasons.len()
            ),
        ));
    }
    f.reasons.iter().try_for_each(|r| check_reason(call, r))
}

/// Refuses a reason longer than [`MAX_REASON_BYTES`].
fn check_reason(call: &'static str, reason: &str) -> Result<(), CallError> {
    if reason.len() > MAX_REASON_BYTES {
        return Err(CallError::new(
            call,
            format!(
                "returned a {}-byte reason, longer than {MAX_REASON_BYTES}",
                reason.len()
            ),
        ));
    }
    Ok(())
}

fn pairs(labels: &sdk::Labels) -> Vec<(String, String)> {
    labels.to_vec()
}

fn resources(r: &sdk::Resources) -> wit::Resources {
    wit::Resources {
        milli_cpu: r.milli_cpu,
        memory: r.memory,
        ephemeral_storage: r.ephemeral_storage,
        pods: r.pods,
        scalar: r.scalar.clone(),
    }
}

fn node_usage(u: &sdk::NodeUsage) -> wit::NodeUsage {
    wit::NodeUsage {
        requested: resources(&u.requested),
        non_zero_requested: resources(&u.non_zero_requested),
        pod_count: u.pod_count,
    }
}

fn node_info(n: &sdk::NodeInfo) -> wit::NodeInfo {
    wit::NodeInfo {
        name: n.name.clone(),
        labels: pairs(&n.labels),
        annotations: pairs(&n.annotations),
        taints: n
            .taints
            .iter()
            .map(|t| wit::Taint {
                key: t.key.clone(),
                value: t.value.clone(),
                effect: t.effect.clone(),
            })
            .collect(),
        unschedulable: n.unschedulable,
        allocatable: resources(&n.allocatable),
        usage: node_usage(&n.usage),
    }
}

fn term(t: &sdk::NodeSelectorTerm) -> wit::NodeSelectorTerm {
    let requirements = |list: &[sdk::NodeSelectorRequirement]| {
        list.iter()
            .map(|r| wit::NodeSelectorRequirement {
                key: r.key.clone(),
                operator: r.operator.clone(),
                values: r.values.clone(),
            })
            .collect()
    };
    wit::NodeSelectorTerm {
        match_expressions: requirements(&t.match_expressions),
        match_fields: requirements(&t.match_fields),
    }
}

fn volume_info(pv: &sdk::VolumeInfo) -> wit::VolumeInfo {
    wit::VolumeInfo {
        name: pv.name.clone(),
        labels: pairs(&pv.labels),
        storage_class_name: pv.storage_class_name.clone(),
        capacity: pv.capacity,
        access_modes: pv.access_modes.clone(),
        volume_mode: pv.volume_mode.clone(),
        volume_attributes_class_name: pv.volume_attributes_class_name.clone(),
        phase: pv.phase.clone(),
        deleting: pv.deleting,
        claim_ref: pv.claim_ref.as_ref().map(|r| wit::ClaimRef {
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            uid: r.uid.clone(),
        }),
        node_affinity: pv
            .node_affinity
            .as_ref()
            .map(|terms| terms.iter().map(term).collect()),
    }
}

pub(crate) fn volume_claim(v: &sdk::VolumeClaim) -> wit::VolumeClaim {
    wit::VolumeClaim {
        volume: v.volume.clone(),
        claim_name: v.claim_name.clone(),
        ephemeral: v.ephemeral,
        claim: v.claim.as_ref().map(|c| wit::ClaimInfo {
            volume_name: c.volume_name.clone(),
            storage_class_name: c.storage_class_name.clone(),
            storage_class: c.storage_class.as_ref().map(|s| wit::StorageClassInfo {
                name: s.name.clone(),
                volume_binding_mode: s.volume_binding_mode.clone(),
                provisioner: s.provisioner.clone(),
                allowed_topologies: s.allowed_topologies.iter().map(term).collect(),
            }),
            volume: c.volume.as_ref().map(volume_info),
            uid: c.uid.clone(),
            phase: c.phase.clone(),
            deleting: c.deleting,
            bind_completed: c.bind_completed,
            selected_node: c.selected_node.clone(),
            requested_storage: c.requested_storage,
            access_modes: c.access_modes.clone(),
            volume_mode: c.volume_mode.clone(),
            volume_attributes_class_name: c.volume_attributes_class_name.clone(),
            selector: c.selector.as_ref().map(label_selector),
        }),
    }
}

/// The WIT pod with the parts of `p` in `parts`: each part left out spares the guest an allocator
/// call per string and list in it.
fn wit_pod(p: &sdk::Pod, parts: sdk::PodParts) -> wit::Pod {
    let part = |wanted: sdk::PodParts| parts.contains(wanted);
    wit::Pod {
        priority: p.priority,
        identity: part(sdk::PodParts::IDENTITY).then(|| wit::PodIdentity {
            namespace: p.namespace.clone(),
            name: p.name.clone(),
            uid: p.uid.clone(),
            scheduler_name: p.scheduler_name.clone(),
        }),
        labels: part(sdk::PodParts::LABELS).then(|| pairs(&p.labels)),
        annotations: part(sdk::PodParts::ANNOTATIONS).then(|| pairs(&p.annotations)),
        node_name: part(sdk::PodParts::NODE_NAME).then(|| p.node_name.clone()),
        node_selection: part(sdk::PodParts::NODE_SELECTION).then(|| wit::NodeSelection {
            node_selector: pairs(&p.node_selector),
            node_affinity: p.node_affinity.as_ref().map(|a| wit::NodeAffinity {
                required: a
                    .required
                    .as_ref()
                    .map(|terms| terms.iter().map(term).collect()),
                preferred: a
                    .preferred
                    .iter()
                    .map(|p| wit::PreferredSchedulingTerm {
                        weight: p.weight,
                        preference: term(&p.preference),
                    })
                    .collect(),
            }),
        }),
        tolerations: part(sdk::PodParts::TOLERATIONS).then(|| {
            p.tolerations
                .iter()
                .map(|t| wit::Toleration {
                    key: t.key.clone(),
                    operator: t.operator.clone(),
                    value: t.value.clone(),
                    effect: t.effect.clone(),
                    toleration_seconds: t.toleration_seconds,
                })
                .collect()
        }),
        requests: part(sdk::PodParts::REQUESTS).then(|| wit::PodRequests {
            requests: resources(&p.requests),
            non_zero_requests: resources(&p.non_zero_requests),
        }),
        volume_claims: part(sdk::PodParts::VOLUME_CLAIMS)
            .then(|| p.volume_claims.iter().map(volume_claim).collect()),
        containers: part(sdk::PodParts::CONTAINERS).then(|| {
            p.containers
                .iter()
                .map(|c| wit::Container {
                    name: c.name.clone(),
                    image: c.image.clone(),
                })
                .collect()
        }),
        pod_affinity: part(sdk::PodParts::POD_AFFINITY).then(|| pod_affinity(&p.pod_affinity)),
        host_ports: part(sdk::PodParts::HOST_PORTS).then(|| host_ports(&p.host_ports)),
        topology_spread: part(sdk::PodParts::TOPOLOGY_SPREAD).then(|| wit::TopologySpread {
            constraints: p
                .topology_spread_constraints
                .iter()
                .map(|c| wit::TopologySpreadConstraint {
                    max_skew: c.max_skew,
                    topology_key: c.topology_key.clone(),
                    when_unsatisfiable: c.when_unsatisfiable.clone(),
                    label_selector: c.label_selector.as_ref().map(label_selector),
                    min_domains: c.min_domains,
                    node_affinity_policy: c.node_affinity_policy.clone(),
                    node_taints_policy: c.node_taints_policy.clone(),
                    match_label_keys: c.match_label_keys.clone(),
                })
                .collect(),
            default_selector: p.default_spread_selector.as_ref().map(label_selector),
        }),
    }
}

fn label_selector(s: &sdk::LabelSelector) -> wit::LabelSelector {
    wit::LabelSelector {
        match_labels: pairs(&s.match_labels),
        match_expressions: s
            .match_expressions
            .iter()
            .map(|r| wit::LabelSelectorRequirement {
                key: r.key.clone(),
                operator: r.operator.clone(),
                values: r.values.clone(),
            })
            .collect(),
    }
}

fn affinity_term(t: &sdk::PodAffinityTerm) -> wit::PodAffinityTerm {
    wit::PodAffinityTerm {
        label_selector: t.label_selector.as_ref().map(label_selector),
        namespaces: t.namespaces.clone(),
        namespace_selector: t.namespace_selector.as_ref().map(label_selector),
        topology_key: t.topology_key.clone(),
    }
}

fn pod_affinity(a: &sdk::PodAffinity) -> wit::PodAffinity {
    let weighted = |terms: &[sdk::WeightedPodAffinityTerm]| {
        terms
            .iter()
            .map(|w| wit::WeightedPodAffinityTerm {
                weight: w.weight,
                term: affinity_term(&w.term),
            })
            .collect()
    };
    wit::PodAffinity {
        required_affinity: a.required_affinity.iter().map(affinity_term).collect(),
        preferred_affinity: weighted(&a.preferred_affinity),
        required_anti_affinity: a.required_anti_affinity.iter().map(affinity_term).collect(),
        preferred_anti_affinity: weighted(&a.preferred_anti_affinity),
    }
}

fn host_ports(ports: &[sdk::HostPort]) -> Vec<wit::HostPort> {
    ports
        .iter()
        .map(|p| wit::HostPort {
            host_ip: p.host_ip.clone(),
            protocol: p.protocol.clone(),
            port: p.port,
        })
        .collect()
}

fn existing_pod(p: &sdk::ExistingPod) -> wit::ExistingPod {
    wit::ExistingPod {
        node: p.node,
        namespace: p.namespace.clone(),
        labels: pairs(&p.labels),
        terminating: p.terminating,
        pod_affinity: pod_affinity(&p.pod_affinity),
        host_ports: host_ports(&p.host_ports),
    }
}

fn code(c: wit::Code) -> sdk::Code {
    match c {
        wit::Code::Success => sdk::Code::Success,
        wit::Code::Unschedulable => sdk::Code::Unschedulable,
        wit::Code::UnschedulableAndUnresolvable => sdk::Code::UnschedulableAndUnresolvable,
        wit::Code::Error => sdk::Code::Error,
    }
}

/// How many items of `pod` a plugin reading `parts` is sent, for its deadline.
fn pod_items(pod: &sdk::Pod, parts: sdk::PodParts) -> usize {
    let terms = |terms: &[sdk::NodeSelectorTerm]| -> usize {
        terms
            .iter()
            .flat_map(|t| t.match_expressions.iter().chain(&t.match_fields))
            .map(|r| 1 + r.values.len())
            .sum()
    };
    let affinity = pod.node_affinity.as_ref().map_or(0, |a| {
        a.required.as_deref().map_or(0, terms)
            + a.preferred
                .iter()
                .map(|p| terms(std::slice::from_ref(&p.preference)))
                .sum::<usize>()
    });
    [
        (sdk::PodParts::LABELS, pod.labels.len()),
        (sdk::PodParts::ANNOTATIONS, pod.annotations.len()),
        (
            sdk::PodParts::NODE_SELECTION,
            pod.node_selector.len() + affinity,
        ),
        (sdk::PodParts::TOLERATIONS, pod.tolerations.len()),
        (sdk::PodParts::VOLUME_CLAIMS, pod.volume_claims.len()),
        (sdk::PodParts::CONTAINERS, pod.containers.len()),
        (
            sdk::PodParts::POD_AFFINITY,
            affinity_items(&pod.pod_affinity),
        ),
        (sdk::PodParts::HOST_PORTS, pod.host_ports.len()),
        (
            sdk::PodParts::TOPOLOGY_SPREAD,
            pod.topology_spread_constraints
                .iter()
                .map(|c| 1 + c.label_selector.as_ref().map_or(0, selector_items))
                .sum::<usize>()
                + pod
                    .default_spread_selector
                    .as_ref()
                    .map_or(0, selector_items),
        ),
    ]
    .iter()
    .filter(|(part, _)| parts.contains(*part))
    .map(|&(_, items)| items)
    .sum()
}

fn selector_items(s: &sdk::LabelSelector) -> usize {
    s.match_labels.len()
        + s.match_expressions
            .iter()
            .map(|r| 1 + r.values.len())
            .sum::<usize>()
}

fn affinity_items(a: &sdk::PodAffinity) -> usize {
    let term = |t: &sdk::PodAffinityTerm| {
        1 + t.namespaces.len()
            + t.label_selector.as_ref().map_or(0, selector_items)
            + t.namespace_selector.as_ref().map_or(0, selector_items)
    };
    a.required_affinity
        .iter()
        .chain(&a.required_anti_affinity)
        .map(term)
        .chain(
            a.preferred_affinity
                .iter()
                .chain(&a.preferred_anti_affinity)
                .map(|w| term(&w.term)),
        )
        .sum()
}

fn failure(f: wit::Failure) -> sdk::Failure {
    sdk::Failure {
        code: code(f.code),
        reasons: f.reasons.into_iter().map(Into::into).collect(),
    }
}

fn pod_plan(p: wit::PodPlan) -> sdk::PodPlan {
    sdk::PodPlan {
        filter: match p.filter {
            wit::FilterPlan::Run => sdk::FilterPlan::Run,
            wit::FilterPlan::Skip => sdk::FilterPlan::Skip,
            wit::FilterPlan::OnlyNodes(names) => sdk::FilterPlan::OnlyNodes(names),
            wit::FilterPlan::Reject(f) => sdk::FilterPlan::Reject(failure(f)),
            wit::FilterPlan::FailingNodes(failing) => sdk::FilterPlan::FailingNodes {
                nodes: failing.nodes,
                results: sdk::FilterResults {
                    verdicts: failing.verdicts,
                    failures: failing.failures.into_iter().map(failure).collect(),
                },
            },
        },
        score: p.score,
    }
}

fn normalize_kind(kind: wit::NormalizeKind) -> sdk::Normalize {
    match kind {
        wit::NormalizeKind::None => sdk::Normalize::None,
        wit::NormalizeKind::Scale => sdk::Normalize::Scale,
        wit::NormalizeKind::Reverse => sdk::Normalize::Reverse,
        wit::NormalizeKind::Custom => sdk::Normalize::Custom,
        wit::NormalizeKind::InScore => sdk::Normalize::InScore,
    }
}

impl From<wit::Descriptor> for sdk::Descriptor {
    fn from(d: wit::Descriptor) -> Self {
        sdk::Descriptor {
            name: d.name,
            version: d.version,
            filter: d.filter,
            score: d.score,
            normalize: normalize_kind(d.normalize),
            reads_usage: d.reads_usage,
            // The canonical ABI numbers flags in the order the WIT declares them, as `PodParts` does.
            reads_pod: sdk::PodParts::from_bits(d.reads_pod.as_array()[0] as u16),
            reads_existing_pods: sdk::ExistingPodParts::from_bits(
                d.reads_existing_pods.as_array()[0] as u8,
            ),
            reads_namespaces: d.reads_namespaces,
            reads_volumes: d.reads_volumes,
            pre_enqueue: false,
            permit: false,
            reserve: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use wasched_core::runtime::defaults;

    /// Default plugin `name` as a component and natively.
    fn instances(name: &str) -> (ComponentInstance, Box<dyn PluginInstance>) {
        let plugin = defaults::find(name).expect("a default plugin");
        let factory = WasmRuntime::shared()
            .load(name, crate::embedded::component(plugin), Limits::default())
            .expect("loads");
        let wasm = factory.instance("{}").expect("instantiates");
        let native = (plugin.native)().instantiate("{}").expect("instantiates");
        (wasm, native)
    }

    /// Node `i` of four: its own hostname, zone `a` or `b`, 4 cpus.
    fn node(i: u32) -> sdk::NodeInfo {
        let name = format!("n{i}");
        let zone = if i.is_multiple_of(2) { "a" } else { "b" };
        sdk::NodeInfo {
            labels: [
                ("kubernetes.io/hostname", name.as_str()),
                ("topology.kubernetes.io/zone", zone),
            ]
            .into_iter()
            .collect(),
            name,
            allocatable: sdk::Resources {
                milli_cpu: 4000,
                memory: 1 << 34,
                pods: 110,
                ..sdk::Resources::default()
            },
            ..sdk::NodeInfo::default()
        }
    }

    fn app(i: u8) -> sdk::Labels {
        [("app", format!("a{i}"))].into_iter().collect()
    }

    fn placed(node: u32, app_of: u8) -> sdk::ExistingPod {
        sdk::ExistingPod {
            node,
            namespace: "default".into(),
            labels: app(app_of),
            ..sdk::ExistingPod::default()
        }
    }

    fn selecting(i: u8) -> Option<sdk::LabelSelector> {
        Some(sdk::LabelSelector {
            match_labels: app(i),
            match_expressions: Vec::new(),
        })
    }

    fn term(i: u8, key: &str) -> sdk::PodAffinityTerm {
        sdk::PodAffinityTerm {
            label_selector: selecting(i),
            topology_key: key.into(),
            ..sdk::PodAffinityTerm::default()
        }
    }

    /// A pod of app `a<i>` that, by `kind`, keeps off nodes with `a<i+1>` pods, prefers zones
    /// with `a<i+2>` pods, or spreads over zones with its own app.
    fn pod(i: u8, kind: u8) -> sdk::Pod {
        let mut pod = sdk::Pod {
            namespace: "default".into(),
            name: format!("p{i}-{kind}"),
            labels: app(i),
            requests: sdk::Resources {
                milli_cpu: 500,
                ..sdk::Resources::default()
            },
            non_zero_requests: sdk::Resources {
                milli_cpu: 500,
                memory: 200 << 20,
                ..sdk::Resources::default()
            },
            ..sdk::Pod::default()
        };
        match kind {
            0 => pod
                .pod_affinity
                .required_anti_affinity
                .push(term((i + 1) % 3, "kubernetes.io/hostname")),
            1 => pod
                .pod_affinity
                .preferred_affinity
                .push(sdk::WeightedPodAffinityTerm {
                    weight: 10,
                    term: term((i + 2) % 3, "topology.kubernetes.io/zone"),
                }),
            _ => pod
                .topology_spread_constraints
                .push(sdk::TopologySpreadConstraint {
                    max_skew: 1,
                    topology_key: "topology.kubernetes.io/zone".into(),
                    when_unsatisfiable: "DoNotSchedule".into(),
                    label_selector: selecting(i),
                    ..sdk::TopologySpreadConstraint::default()
                }),
        }
        pod
    }

    #[derive(Debug, Clone)]
    enum Step {
        Place { pod: u32, node: u32, app: u8 },
        Remove { pod: u32 },
        Usage { node: u32, milli_cpu: i64 },
        Schedule { app: u8, kind: u8 },
        Filter,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (0u32..6, 0u32..4, 0u8..3).prop_map(|(pod, node, app)| Step::Place { pod, node, app }),
            (0u32..6).prop_map(|pod| Step::Remove { pod }),
            (0u32..4, 0i64..4000).prop_map(|(node, milli_cpu)| Step::Usage { node, milli_cpu }),
            (0u8..3, 0u8..3).prop_map(|(app, kind)| Step::Schedule { app, kind }),
            Just(Step::Filter),
        ]
    }

    /// What an instance answers to `step` (nothing for a mirror update).
    fn answer(
        instance: &mut dyn PluginInstance,
        step: &Step,
    ) -> Option<(sdk::PodPlan, sdk::FilterResults, Vec<i64>)> {
        let ids = [0, 1, 2, 3];
        match *step {
            Step::Place { pod, node, app } => {
                instance.upsert_pods(&[(pod, placed(node, app))]).unwrap();
                None
            }
            Step::Remove { pod } => {
                instance.remove_pods(&[pod]).unwrap();
                None
            }
            Step::Usage { node, milli_cpu } => {
                let usage = sdk::NodeUsage {
                    requested: sdk::Resources {
                        milli_cpu,
                        ..sdk::Resources::default()
                    },
                    non_zero_requested: sdk::Resources {
                        milli_cpu,
                        ..sdk::Resources::default()
                    },
                    pod_count: 1,
                };
                instance.update_usage(&[(node, &usage)]).unwrap();
                None
            }
            Step::Schedule { app, kind } => {
                let plan = instance.set_pod(&pod(app, kind)).unwrap();
                let mut results = sdk::FilterResults::default();
                if matches!(plan.filter, sdk::FilterPlan::Run) && instance.descriptor().filter {
                    instance.filter(&ids, &mut results).unwrap();
                }
                let mut scores = Vec::new();
                if plan.score && instance.descriptor().score {
                    instance.score(&ids, &mut scores).unwrap();
                }
                Some((plan, results, scores))
            }
            // Updates held back must reach the mirror before a filter that follows them.
            Step::Filter => {
                let mut results = sdk::FilterResults::default();
                if instance.descriptor().filter {
                    instance.filter(&ids, &mut results).unwrap();
                }
                Some((sdk::PodPlan::default(), results, Vec::new()))
            }
        }
    }

    /// How the host sends a component its pods and held-back updates.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Sending {
        /// As bytes, through [`ENCODED_INTERFACE`] (what the SDK's components get).
        Encoded,
        /// As WIT records, through [`BATCHED_INTERFACE`].
        Batched,
        /// Each update at once, through the plain exports.
        Plain,
    }

    /// Default plugin `name` as a component sent its pods `sending`, and natively.
    fn instances_sending(
        name: &str,
        sending: Sending,
    ) -> (ComponentInstance, Box<dyn PluginInstance>) {
        let (mut wasm, native) = instances(name);
        assert!(
            wasm.encoded.is_some() && wasm.batched.is_some(),
            "the SDK exports {ENCODED_INTERFACE} and {BATCHED_INTERFACE}"
        );
        if sending != Sending::Encoded {
            wasm.encoded = None;
        }
        if sending == Sending::Plain {
            wasm.batched = None;
        }
        wasm.held = Held::for_exports(wasm.encoded.is_some(), wasm.batched.is_some());
        (wasm, native)
    }

    #[test]
    fn held_back_updates_go_with_the_next_pod_in_one_call() {
        for sending in [Sending::Encoded, Sending::Batched] {
            held_back_updates_go_with_the_next_pod_sent(sending);
        }
    }

    fn held_back_updates_go_with_the_next_pod_sent(sending: Sending) {
        let (mut wasm, _) = instances_sending("InterPodAffinity", sending);
        let nodes: Vec<sdk::NodeInfo> = (0..4).map(node).collect();
        let entries: Vec<(u32, &sdk::NodeInfo)> = (0u32..).zip(&nodes).collect();
        wasm.upsert_nodes(&entries).unwrap();
        let keeps_off_a1 = pod(0, 0);

        let before = wasm.calls;
        wasm.upsert_pods(&[(7, placed(1, 1))]).unwrap();
        assert_eq!(wasm.calls, before, "the pod is held back");
        let plan = wasm.set_pod(&keeps_off_a1).unwrap();
        assert_eq!(wasm.calls, before + 1, "one call: the pod, then set-pod");
        assert_eq!(
            !wasm.input.is_empty(),
            sending == Sending::Encoded,
            "only the encoded interface is sent bytes"
        );
        match plan.filter {
            sdk::FilterPlan::FailingNodes { nodes, .. } => assert_eq!(nodes, vec![1]),
            other => panic!("the a1 pod on n1 was not in the mirror: {other:?}"),
        }

        wasm.remove_pods(&[7]).unwrap();
        assert_eq!(wasm.calls, before + 1, "the removal is held back");
        let mut scores = Vec::new();
        wasm.score(&[0, 1, 2, 3], &mut scores).unwrap();
        assert_eq!(wasm.calls, before + 3, "remove-pods, then score");
        let plan = wasm.set_pod(&keeps_off_a1).unwrap();
        assert_eq!(wasm.calls, before + 4, "nothing held: a plain set-pod");
        assert_eq!(
            plan.filter,
            sdk::FilterPlan::Skip,
            "the pod left the mirror"
        );
    }

    #[test]
    fn a_component_without_the_batched_interface_gets_each_update_at_once() {
        let (mut wasm, _) = instances_sending("InterPodAffinity", Sending::Plain);
        let nodes: Vec<sdk::NodeInfo> = (0..4).map(node).collect();
        let entries: Vec<(u32, &sdk::NodeInfo)> = (0u32..).zip(&nodes).collect();
        wasm.upsert_nodes(&entries).unwrap();
        let before = wasm.calls;
        wasm.upsert_pods(&[(7, placed(1, 1))]).unwrap();
        assert_eq!(wasm.calls, before + 1);
        let plan = wasm.set_pod(&pod(0, 0)).unwrap();
        assert_eq!(wasm.calls, before + 2);
        assert!(matches!(plan.filter, sdk::FilterPlan::FailingNodes { .. }));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Whatever the order of placements, removals, usage updates and questions, a component
        /// taking held-back updates with its pods, as bytes or as records, answers as the native
        /// build given each at once.
        #[test]
        fn held_back_updates_give_the_answers_of_updates_sent_at_once(
            steps in proptest::collection::vec(step(), 1..40)
        ) {
            for (name, sending) in ["InterPodAffinity", "PodTopologySpread", "NodeResourcesFit"]
                .into_iter()
                .flat_map(|name| {
                    [Sending::Encoded, Sending::Batched, Sending::Plain].map(|s| (name, s))
                })
            {
                let (mut wasm, mut native) = instances_sending(name, sending);
                let nodes: Vec<sdk::NodeInfo> = (0..4).map(node).collect();
                let entries: Vec<(u32, &sdk::NodeInfo)> = (0u32..).zip(&nodes).collect();
                wasm.upsert_nodes(&entries).unwrap();
                native.upsert_nodes(&entries).unwrap();
                let reads_pods = !wasm.descriptor().reads_existing_pods.is_empty();
                for step in &steps {
                    if matches!(step, Step::Place { .. } | Step::Remove { .. }) && !reads_pods {
                        continue;
                    }
                    let from_wasm = answer(&mut wasm, step);
                    let from_native = answer(native.as_mut(), step);
                    prop_assert_eq!(
                        from_wasm, from_native, "{} sent {:?} at {:?}", name, sending, step
                    );
                }
            }
        }
    }

    #[test]
    fn set_pod_deadline_items_count_only_the_parts_a_plugin_reads() {
        let requirement = |key: &str| sdk::NodeSelectorRequirement {
            key: key.into(),
            operator: "In".into(),
            values: vec!["a".into(), "b".into(), "c".into()],
        };
        let pod = sdk::Pod {
            labels: [("app", "web"), ("tier", "front")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            tolerations: vec![sdk::Toleration::default()],
            node_affinity: Some(sdk::NodeAffinity {
                required: Some(vec![sdk::NodeSelectorTerm {
                    match_expressions: vec![requirement("zone"), requirement("disk")],
                    match_fields: Vec::new(),
                }]),
                preferred: Vec::new(),
            }),
            ..sdk::Pod::default()
        };
        assert_eq!(
            pod_items(&pod, sdk::PodParts::NODE_SELECTION),
            8,
            "2 x (1 + 3)"
        );
        assert_eq!(
            pod_items(&pod, sdk::PodParts::LABELS | sdk::PodParts::NODE_SELECTION),
            10
        );
        assert_eq!(pod_items(&pod, sdk::PodParts::ALL), 11);
        assert_eq!(pod_items(&pod, sdk::PodParts::NONE), 0);
    }

    #[test]
    fn set_pod_sends_only_the_declared_parts() {
        let labels = sdk::Labels::new([("k".to_string(), "v".to_string())]);
        let pod = sdk::Pod {
            name: "p".into(),
            priority: 3,
            labels: labels.clone(),
            annotations: labels.clone(),
            node_selector: labels,
            tolerations: vec![sdk::Toleration::default()],
            ..sdk::Pod::default()
        };
        let sent = wit_pod(&pod, sdk::PodParts::TOLERATIONS | sdk::PodParts::LABELS);
        assert_eq!(sent.priority, 3);
        assert_eq!(sent.labels, Some(vec![("k".into(), "v".into())]));
        assert_eq!(sent.tolerations.as_ref().map(Vec::len), Some(1));
        assert!(sent.identity.is_none());
        assert!(sent.annotations.is_none());
        assert!(sent.node_name.is_none() && sent.node_selection.is_none());
        assert!(sent.requests.is_none() && sent.volume_claims.is_none());
        assert!(sent.containers.is_none());

        let everything = wit_pod(&pod, sdk::PodParts::ALL);
        assert_eq!(everything.identity.map(|i| i.name), Some("p".to_string()));
        assert_eq!(everything.containers.map(|c| c.len()), Some(0));
        assert_eq!(
            everything.node_selection.map(|p| p.node_selector.len()),
            Some(1)
        );
    }
}
