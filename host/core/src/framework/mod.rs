//! Profiles and the scheduling cycle.
//!
//! A [`Decider`] owns the [`Cache`] and one [`Profile`] per scheduler name. A profile owns one
//! instance of each plugin it uses; before every cycle each instance is brought up to date with the
//! cache's change log (only the nodes that changed are sent, `sync.rs`), then [`cycle`] runs the
//! pod through the filters and scores. Every instance is wrapped to time its calls and leave out
//! the `set-pod` calls whose answer is known (`instance.rs`). Outside the cycle, the plugins that
//! take part in PreEnqueue say whether a pending pod may enter the queue, and after Reserve those
//! that take part in Permit say whether the pod may be bound (`stages.rs`).

mod cycle;
mod instance;
mod preemption;
pub mod reasons;
mod spin;
mod stages;
mod sync;
mod threads;

#[cfg(test)]
use instance::{FrameworkInstance, SETTLED_PLANS};
use sync::{catch_up, Reads, Synced};

use std::sync::Arc;

use wasched_sdk as sdk;

use std::time::{Duration, Instant};

use crate::cache::Cache;
use crate::clock::{Clock, SystemClock};
use crate::metrics::PluginCallStats;
use crate::runtime::{CallError, FailureKind, LoadError, PluginFactory, PluginInstance};
use crate::util::Rng;

pub use crate::result::Outcome;
pub use cycle::{Choice, NodeReport};
pub use preemption::{Preemption, PreemptionSettings, Victim};
pub use stages::{Gate, PermitOutcome, PermitRejection};

/// What a cycle does when a plugin fails (traps, times out, runs out of memory, returns nonsense).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnFailure {
    /// The pod's cycle fails with a status naming the plugin and the failure; the pod backs off.
    #[default]
    Fail,
    /// The plugin is left out of that cycle: its filter passes every node, its score gives 0.
    Ignore,
}

/// How a plugin's failures are handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailurePolicy {
    /// Whether a failure ends the pod's cycle or leaves the plugin out of it.
    pub on_failure: OnFailure,
    /// Consecutive failures that quarantine the plugin (0: never).
    pub quarantine_after: u32,
    /// How long a quarantine lasts; the plugin is then tried again, and quarantined again at its
    /// next failure.
    pub quarantine_for: Duration,
}

/// Consecutive failures before a quarantine, by default.
pub const DEFAULT_QUARANTINE_AFTER: u32 = 5;
/// Length of a quarantine, by default.
pub const DEFAULT_QUARANTINE_FOR: Duration = Duration::from_secs(60);

impl Default for FailurePolicy {
    fn default() -> Self {
        FailurePolicy {
            on_failure: OnFailure::Fail,
            quarantine_after: DEFAULT_QUARANTINE_AFTER,
            quarantine_for: DEFAULT_QUARANTINE_FOR,
        }
    }
}

/// A plugin as a profile uses it: where instances come from and their configuration.
#[derive(Clone)]
pub struct PluginSpec {
    /// The name profiles refer to it by.
    pub name: String,
    /// Makes its instances.
    pub factory: Arc<dyn PluginFactory>,
    /// The plugin's configuration as JSON.
    pub config: String,
    /// How its failures are handled.
    pub policy: FailurePolicy,
    /// Where the instances' call times are recorded.
    pub stats: Arc<PluginCallStats>,
    /// When the plugin is a default one whose answer for some pods is known without calling it
    /// (kube-scheduler's Skip with no score): the host then gives that answer itself and syncs
    /// the plugin's mirror in batches.
    pub idle_when: Option<IdleWhen>,
}

/// Pods a plugin has no opinion on ([`sdk::Plugin::IDLE_WITHOUT`]); the SDK's rule, so the host
/// and `sdk::testing` hold plugins to the same promise.
pub use sdk::IdleWhen;

/// A plugin's health, for operators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginHealth {
    /// The profile's scheduler name.
    pub profile: String,
    /// The plugin's name.
    pub plugin: String,
    /// Failures recorded since it was loaded.
    pub failures: u64,
    /// Failures in a row, up to now.
    pub consecutive_failures: u32,
    /// Until when (on the scheduler's clock) the plugin is quarantined.
    pub quarantined_until: Option<Duration>,
    /// The last failure's message.
    pub last_error: Option<String>,
}

/// The host's phases of a cycle, for `wasched bench`'s breakdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Bringing plugin mirrors up to date and refreshing the node listing.
    Snapshot,
    /// Every plugin's `set-pod` (PreFilter and PreScore).
    PreFilter,
    /// The filters over the sampled nodes.
    Filter,
    /// Scoring, normalizing and weighting.
    Score,
    /// The best total, ties broken at random.
    Select,
    /// Recording the placement in the cache.
    Assume,
}

impl Phase {
    /// Every phase, in cycle order.
    pub const ALL: [Phase; 6] = [
        Phase::Snapshot,
        Phase::PreFilter,
        Phase::Filter,
        Phase::Score,
        Phase::Select,
        Phase::Assume,
    ];

    /// The phase's name in `wasched bench`'s output.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Snapshot => "snapshot",
            Phase::PreFilter => "prefilter",
            Phase::Filter => "filter",
            Phase::Score => "score",
            Phase::Select => "select",
            Phase::Assume => "assume",
        }
    }
}

/// Time spent in each [`Phase`] since the scheduler was built (one clock read per phase per cycle).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PhaseTimes {
    nanos: [u64; 6],
}

impl PhaseTimes {
    /// Adds the time since `mark` to `phase` and moves `mark` to now.
    fn lap(&mut self, phase: Phase, mark: &mut Instant) {
        let now = Instant::now();
        self.nanos[phase as usize] += now.duration_since(*mark).as_nanos() as u64;
        *mark = now;
    }

    /// The time spent in `phase`.
    pub fn get(&self, phase: Phase) -> Duration {
        Duration::from_nanos(self.nanos[phase as usize])
    }

    fn add(&mut self, other: &PhaseTimes) {
        for (total, more) in self.nanos.iter_mut().zip(other.nanos) {
            *total += more;
        }
    }
}

/// One profile: which plugins filter and score pods of one scheduler name.
#[derive(Clone)]
pub struct ProfileSpec {
    /// The `schedulerName` of the pods it serves.
    pub scheduler_name: String,
    /// Filter plugins, in the order they run.
    pub filters: Vec<PluginSpec>,
    /// Score plugins with their weights.
    pub scores: Vec<(PluginSpec, i64)>,
    /// Plugins listed for PreEnqueue. A plugin of the profile listed anywhere takes part in
    /// every extension point outside the cycle its descriptor declares (PreEnqueue, Permit),
    /// as kube-scheduler's `multiPoint` plugins do; these lists add plugins that take part in
    /// nothing else.
    pub pre_enqueue: Vec<PluginSpec>,
    /// Plugins listed for Permit (and Unreserve).
    pub permit: Vec<PluginSpec>,
    /// `None` or `Some(0)`: kube-scheduler's adaptive percentage.
    pub percentage_of_nodes_to_score: Option<u32>,
    /// Threads that filter and score a cycle's nodes, each with its own instance of every plugin
    /// (1: the scheduling thread alone).
    pub parallelism: usize,
    /// DefaultPreemption's settings.
    pub preemption: PreemptionSettings,
    /// A candidate policy run beside this profile on the same cycles, off the scheduling
    /// thread, deciding nothing ([`crate::shadow`]).
    pub shadow: Option<Box<ProfileSpec>>,
}

/// Most nodes sent in one mirror update. Each call's deadline is a fixed part plus a per-node
/// allowance; in batches this size the fixed part leaves room for slow guests (JavaScript receives
/// ~16 µs per node) and for a loaded machine, where one 5,000-node call missed its deadline.
const SYNC_BATCH: usize = 512;

/// One live plugin instance of a profile and how far its node mirror has caught up.
struct Slot {
    spec: PluginSpec,
    instance: Option<Box<dyn PluginInstance>>,
    descriptor: sdk::Descriptor,
    synced: Synced,
    failures: u64,
    consecutive_failures: u32,
    quarantined_until: Option<Duration>,
    last_error: Option<String>,
    /// The pods whose cycles the plugin failed since its last success (see
    /// [`Slot::record_failure`]); at most `quarantine_after` long.
    pods_failed_in_a_row: Vec<String>,
    /// The profile filters or scores with it. A plugin listed only for PreEnqueue or Permit
    /// sits the cycles out and keeps an empty mirror: it is never sent a node or a pod.
    in_cycle: bool,
}

/// The calls whose input is the pod of the cycle: a failure in one of them may be that pod's
/// doing (a pod too large or too odd for the plugin), not the plugin's for every pod. A
/// component's `apply-and-set-pod` is `set-pod` with held-back mirror updates.
const POD_CALLS: [&str; 5] = [
    "set-pod",
    "apply-and-set-pod",
    "filter",
    "score",
    "normalize",
];

impl Slot {
    fn new(spec: PluginSpec) -> Result<Slot, LoadError> {
        let instance = spec.instantiate()?;
        let descriptor = instance.descriptor().clone();
        Ok(Slot {
            spec,
            instance: Some(instance),
            descriptor,
            synced: Synced::default(),
            failures: 0,
            consecutive_failures: 0,
            quarantined_until: None,
            last_error: None,
            pods_failed_in_a_row: Vec::new(),
            in_cycle: true,
        })
    }

    /// The instance, made afresh with an empty mirror when there is none (a plugin outside the
    /// cycle whose instance failed).
    fn ensure_instance(&mut self) -> Result<&mut Box<dyn PluginInstance>, CallError> {
        if self.instance.is_none() {
            let fresh = self
                .spec
                .instantiate()
                .map_err(|e| CallError::of_kind(FailureKind::Init, "init", e.0))?;
            self.synced = Synced::default();
            return Ok(self.instance.insert(fresh));
        }
        Ok(self.instance.as_mut().expect("checked above"))
    }

    /// Equal for two slots whose instances are interchangeable.
    fn reuse_key(&self) -> (String, String, String, String) {
        (
            self.spec.name.clone(),
            self.spec.factory.identity(),
            self.spec.config.clone(),
            format!("{:?}", self.spec.policy),
        )
    }

    /// Records a failure: the instance is dropped (a fresh one replaces it at the next sync) and
    /// the plugin quarantined once it failed too often in a row. `pod` is the key of the pod whose
    /// cycle it failed in: a failure in a call that reads the pod counts toward the quarantine
    /// only for a pod that has not failed it since its last success, so that one pod, retried
    /// with backoff, fails its own cycles but cannot quarantine the plugin for every other pod.
    fn record_failure(&mut self, error: &CallError, now: Duration, pod: Option<&str>) {
        self.discard();
        self.failures += 1;
        self.spec.stats.failed(error.kind);
        self.last_error = Some(error.to_string());
        let pod = pod.filter(|_| POD_CALLS.contains(&error.call));
        if let Some(pod) = pod {
            if self.pods_failed_in_a_row.iter().any(|p| p == pod) {
                tracing::warn!(plugin = %self.spec.name, call = error.call, pod, "plugin failed again on the same pod (not counted toward quarantine): {}", error.message);
                return;
            }
            self.pods_failed_in_a_row.push(pod.to_string());
        }
        self.consecutive_failures += 1;
        let policy = self.spec.policy;
        tracing::warn!(plugin = %self.spec.name, call = error.call, consecutive = self.consecutive_failures, "plugin failed: {}", error.message);
        if policy.quarantine_after > 0 && self.consecutive_failures >= policy.quarantine_after {
            self.quarantined_until = Some(now + policy.quarantine_for);
            self.spec.stats.quarantined_for(policy.quarantine_for);
            tracing::warn!(plugin = %self.spec.name, seconds = policy.quarantine_for.as_secs(), "plugin quarantined");
        }
    }

    fn record_success(&mut self) {
        self.consecutive_failures = 0;
        self.pods_failed_in_a_row.clear();
    }

    /// True while quarantined at `now`.
    fn quarantined(&self, now: Duration) -> bool {
        self.quarantined_until.is_some_and(|until| now < until)
    }

    /// Drops a misbehaving instance; the next sync makes a fresh one.
    fn discard(&mut self) {
        self.instance = None;
        self.synced = Synced::default();
    }

    /// Brings the instance's mirror up to the cache's generation, replacing a broken instance by a
    /// fresh one that gets every node.
    fn sync(&mut self, cache: &Cache) -> Result<(), CallError> {
        catch_up(
            &self.spec,
            Reads::of(&self.descriptor),
            &mut self.instance,
            &mut self.synced,
            cache,
        )
    }
}

/// A profile with its live plugin instances.
pub struct Profile {
    /// The `schedulerName` of the pods it serves.
    pub scheduler_name: String,
    slots: Vec<Slot>,
    /// Indexes into `slots`, in filter order.
    filters: Vec<usize>,
    /// Indexes into `slots` with weights.
    scores: Vec<(usize, i64)>,
    percentage_of_nodes_to_score: Option<u32>,
    /// Where the next cycle's node search starts (kube-scheduler's `nextStartNodeIndex`).
    next_start: usize,
    rng: Rng,
    phases: PhaseTimes,
    clock: Arc<dyn Clock>,
    /// One per thread beyond the scheduling thread; empty when the profile runs on one thread.
    workers: Vec<threads::WorkerInstances>,
    /// Runs the workers' share of a cycle while the scheduling thread does its own.
    pool: Option<spin::SpinPool>,
    /// Per slot: its `failing-nodes` plan of the current cycle, as a table by node id.
    failing: Vec<threads::FailingTable>,
    preemption: PreemptionSettings,
    /// The statuses of the last cycle that placed nothing, for preemption.
    diagnosis: cycle::Diagnosis,
    /// The profile's shadow, built with it and not yet handed to its thread.
    shadow: Option<Box<ShadowPair>>,
}

/// What a shadow's thread runs: the candidate profile, and a copy of the live profile that
/// scores the candidate's choices as the live one would. Both on one thread, without
/// preemption (a shadow compares placements, and evicts nothing).
pub struct ShadowPair {
    /// A copy of the live profile, named as it.
    pub live: Profile,
    /// The candidate, named [`ShadowPair::name`] of the live one.
    pub shadow: Profile,
}

impl ShadowPair {
    /// The scheduler name the candidate profile of `live`'s shadow carries.
    pub fn name(live: &str) -> String {
        format!("{live} (shadow)")
    }

    fn build(
        spec: &ProfileSpec,
        shadow: &ProfileSpec,
        seed: u64,
        clock: Arc<dyn Clock>,
    ) -> Result<ShadowPair, LoadError> {
        let on_its_own = |mut spec: ProfileSpec, name: String| {
            spec.scheduler_name = name;
            spec.parallelism = 1;
            spec.preemption.enabled = false;
            spec.shadow = None;
            spec
        };
        let live = on_its_own(spec.clone(), spec.scheduler_name.clone());
        let candidate = on_its_own(shadow.clone(), ShadowPair::name(&spec.scheduler_name));
        Ok(ShadowPair {
            live: Profile::new(&live, seed, clock.clone())?,
            shadow: Profile::new(&candidate, seed, clock)?,
        })
    }
}

/// Where a profile's next node search starts and how it breaks ties: what a shadow needs to
/// examine the same nodes as the live cycle it is compared with.
#[derive(Debug, Clone)]
pub struct SearchState {
    next_start: usize,
    rng: Rng,
}

impl Profile {
    /// Instantiates the profile's plugins and checks each does what the profile asks of it.
    ///
    /// # Errors
    /// A plugin that cannot be instantiated, or is used as a filter (score) without one.
    pub fn new(spec: &ProfileSpec, seed: u64, clock: Arc<dyn Clock>) -> Result<Profile, LoadError> {
        let mut slots: Vec<Slot> = Vec::new();
        let mut slot_of = |plugin: &PluginSpec| -> Result<usize, LoadError> {
            if let Some(i) = slots.iter().position(|s| s.spec.name == plugin.name) {
                return Ok(i);
            }
            slots.push(Slot::new(plugin.clone())?);
            Ok(slots.len() - 1)
        };
        let filters = spec
            .filters
            .iter()
            .map(&mut slot_of)
            .collect::<Result<Vec<_>, _>>()?;
        let scores = spec
            .scores
            .iter()
            .map(|(p, w)| slot_of(p).map(|i| (i, *w)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut staged: Vec<(usize, bool, &str)> = Vec::new();
        for plugin in &spec.pre_enqueue {
            staged.push((slot_of(plugin)?, true, "pre_enqueue"));
        }
        for plugin in &spec.permit {
            staged.push((slot_of(plugin)?, false, "permit"));
        }
        for &i in &filters {
            if !slots[i].descriptor.filter {
                return Err(LoadError(format!(
                    "profile {:?}: plugin {} is listed as a filter but does not implement filter",
                    spec.scheduler_name, slots[i].spec.name
                )));
            }
        }
        for (i, pre_enqueue, point) in staged {
            let descriptor = &slots[i].descriptor;
            let declared = if pre_enqueue {
                descriptor.pre_enqueue
            } else {
                descriptor.permit
            };
            if !declared {
                return Err(LoadError(format!(
                    "profile {:?}: plugin {} is listed as a {point} plugin but does not implement {point}",
                    spec.scheduler_name, slots[i].spec.name
                )));
            }
        }
        for &(i, _) in &scores {
            if !slots[i].descriptor.score {
                return Err(LoadError(format!(
                    "profile {:?}: plugin {} is listed as a score but does not implement score",
                    spec.scheduler_name, slots[i].spec.name
                )));
            }
        }
        let sorters: Vec<&str> = slots
            .iter()
            .filter(|s| s.descriptor.queue_sort)
            .map(|s| s.spec.name.as_str())
            .collect();
        if sorters.len() > 1 {
            return Err(LoadError(format!(
                "profile {:?}: plugins {} each order the scheduling queue (QueueSort); a profile takes one",
                spec.scheduler_name,
                sorters.join(" and ")
            )));
        }
        for (i, slot) in slots.iter_mut().enumerate() {
            slot.in_cycle = filters.contains(&i) || scores.iter().any(|&(s, _)| s == i);
        }
        let helpers = spec.parallelism.max(1) - 1;
        let pool = match helpers {
            0 => None,
            n => Some(
                spin::SpinPool::new(n)
                    .map_err(|e| LoadError(format!("starting {n} worker threads: {e}")))?,
            ),
        };
        let workers = (0..helpers)
            .map(|_| threads::WorkerInstances::new(slots.len()))
            .collect();
        Ok(Profile {
            scheduler_name: spec.scheduler_name.clone(),
            workers,
            pool,
            slots,
            filters,
            scores,
            percentage_of_nodes_to_score: spec.percentage_of_nodes_to_score,
            next_start: 0,
            phases: PhaseTimes::default(),
            rng: Rng::new(seed),
            clock: clock.clone(),
            failing: Vec::new(),
            preemption: spec.preemption,
            diagnosis: cycle::Diagnosis::default(),
            shadow: match &spec.shadow {
                Some(shadow) => Some(Box::new(ShadowPair::build(spec, shadow, seed, clock)?)),
                None => None,
            },
        })
    }

    /// The oldest cache generation any of this profile's instances still needs.
    fn oldest_synced(&self) -> u64 {
        // An instance with an empty mirror gets every node anyway: it holds nothing back.
        self.slots
            .iter()
            .filter_map(|s| s.synced.generation)
            .chain(
                self.workers
                    .iter()
                    .flat_map(|w| w.synced.iter().filter_map(|s| s.generation)),
            )
            .min()
            .unwrap_or(u64::MAX)
    }
}

/// The cache and the profiles: decides where each pod goes, one cycle at a time.
///
/// [`Decider::schedule`] only decides; the caller owns what follows: [`Decider::assume`] to
/// hold the pod's requests on the chosen node while it binds, [`Decider::forget`] when the
/// binding fails. [`crate::service::Service`] does both, and feeds the cache from events.
pub struct Decider {
    cache: Cache,
    profiles: Vec<Profile>,
}

/// Once the change log is this many times longer than the cluster, lagging instances are
/// re-created with every node instead of holding the log back.
const MAX_LOG_PER_NODE: usize = 4;
const MIN_LOG_BEFORE_TRIM: usize = 4096;

impl Decider {
    /// Builds every profile.
    ///
    /// # Errors
    /// As [`Profile::new`].
    pub fn new(profiles: &[ProfileSpec], seed: u64) -> Result<Decider, LoadError> {
        Self::with_clock(profiles, seed, Arc::new(SystemClock::default()))
    }

    /// As [`Decider::new`], with the clock that times quarantines.
    ///
    /// # Errors
    /// As [`Profile::new`].
    pub fn with_clock(
        profiles: &[ProfileSpec],
        seed: u64,
        clock: Arc<dyn Clock>,
    ) -> Result<Decider, LoadError> {
        let profiles = Self::build_profiles(profiles, seed, clock)?;
        Ok(Decider {
            cache: Cache::default(),
            profiles,
        })
    }

    /// Builds the profiles of `specs` without touching the running ones (so it can run off the
    /// scheduling thread); [`Decider::swap_profiles`] then puts them in place.
    ///
    /// # Errors
    /// As [`Profile::new`].
    pub fn build_profiles(
        specs: &[ProfileSpec],
        seed: u64,
        clock: Arc<dyn Clock>,
    ) -> Result<Vec<Profile>, LoadError> {
        specs
            .iter()
            .enumerate()
            .map(|(i, spec)| Profile::new(spec, seed.wrapping_add(i as u64), clock.clone()))
            .collect()
    }

    /// Replaces every profile at once (between cycles, since it takes `&mut self`) and returns the
    /// old ones, for the caller to drop off the scheduling thread. A plugin whose code, limits,
    /// configuration and failure policy did not change keeps its slot in the profile of the same
    /// scheduler name: its running instance with its node mirror, and its health, so that a swap
    /// neither re-syncs it nor lifts its quarantine. The other new instances get every node at
    /// their first sync.
    pub fn swap_profiles(&mut self, mut profiles: Vec<Profile>) -> Vec<Profile> {
        let mut old = std::mem::take(&mut self.profiles);
        for profile in &mut profiles {
            let Some(previous) = old
                .iter_mut()
                .find(|p| p.scheduler_name == profile.scheduler_name)
            else {
                continue;
            };
            for (i, slot) in profile.slots.iter_mut().enumerate() {
                let key = slot.reuse_key();
                if let Some(k) = previous.slots.iter().position(|s| s.reuse_key() == key) {
                    // The displaced fresh slot goes back with the old profile, to be dropped.
                    std::mem::swap(slot, &mut previous.slots[k]);
                    for (new, old) in profile.workers.iter_mut().zip(&mut previous.workers) {
                        std::mem::swap(&mut new.instances[i], &mut old.instances[k]);
                        std::mem::swap(&mut new.synced[i], &mut old.synced[k]);
                    }
                }
            }
        }
        self.profiles = profiles;
        self.trim_log();
        old
    }

    /// Every plugin instance's health.
    pub fn plugin_health(&self) -> Vec<PluginHealth> {
        self.profiles
            .iter()
            .flat_map(|p| {
                p.slots.iter().map(|slot| PluginHealth {
                    profile: p.scheduler_name.clone(),
                    plugin: slot.spec.name.clone(),
                    failures: slot.failures,
                    consecutive_failures: slot.consecutive_failures,
                    quarantined_until: slot.quarantined_until,
                    last_error: slot.last_error.clone(),
                })
            })
            .collect()
    }

    /// Whether a profile has a shadow not yet taken out.
    pub fn has_shadows(&self) -> bool {
        self.profiles.iter().any(|p| p.shadow.is_some())
    }

    /// Takes out the shadows built with the profiles, to run on threads of their own.
    pub fn take_shadows(&mut self) -> Vec<ShadowPair> {
        self.profiles
            .iter_mut()
            .filter_map(|p| p.shadow.take().map(|pair| *pair))
            .collect()
    }

    /// Where the next cycle of the profile of `scheduler_name` starts its node search and how it
    /// will break ties.
    pub fn search_state(&self, scheduler_name: &str) -> Option<SearchState> {
        let profile = self
            .profiles
            .iter()
            .find(|p| p.scheduler_name == scheduler_name)?;
        Some(SearchState {
            next_start: profile.next_start,
            rng: profile.rng.clone(),
        })
    }

    /// Makes the next cycle of the profile of `scheduler_name` start its search and break ties
    /// as `state` says.
    pub fn set_search_state(&mut self, scheduler_name: &str, state: &SearchState) {
        if let Some(profile) = self
            .profiles
            .iter_mut()
            .find(|p| p.scheduler_name == scheduler_name)
        {
            profile.next_start = state.next_start;
            profile.rng = state.rng.clone();
        }
    }

    /// A decider of already built profiles, with an empty cache.
    pub fn of_profiles(profiles: Vec<Profile>) -> Decider {
        Decider {
            cache: Cache::default(),
            profiles,
        }
    }

    /// The profiles' scheduler names.
    pub fn scheduler_names(&self) -> impl Iterator<Item = &str> {
        self.profiles.iter().map(|p| p.scheduler_name.as_str())
    }

    /// Brings every plugin instance's node mirror up to date now, rather than in the next cycle.
    ///
    /// # Errors
    /// The first plugin that failed, by name.
    pub fn warm_up(&mut self) -> Result<(), LoadError> {
        for profile in &mut self.profiles {
            for (i, slot) in profile.slots.iter_mut().enumerate() {
                if !slot.in_cycle {
                    continue;
                }
                let mut result = slot.sync(&self.cache);
                for worker in &mut profile.workers {
                    if result.is_err() {
                        break;
                    }
                    result = catch_up(
                        &slot.spec,
                        Reads::of(&slot.descriptor),
                        &mut worker.instances[i],
                        &mut worker.synced[i],
                        &self.cache,
                    );
                }
                if let Err(e) = result {
                    slot.record_failure(&e, profile.clock.now(), None);
                    return Err(LoadError(format!(
                        "plugin {} failed in {e}",
                        slot.spec.name
                    )));
                }
            }
        }
        self.trim_log();
        Ok(())
    }

    /// The cluster as this scheduler knows it.
    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// The cache to feed directly: nodes, observed pods and storage objects, for users of the
    /// library without the event pipeline (and for tests and `bench`, which measure this layer).
    /// [`crate::service::Service`] feeds it from events instead.
    pub fn cache_mut(&mut self) -> &mut Cache {
        &mut self.cache
    }

    /// Time spent in each phase, over every profile, since the scheduler was built.
    pub fn phase_times(&self) -> PhaseTimes {
        let mut total = PhaseTimes::default();
        for profile in &self.profiles {
            total.add(&profile.phases);
        }
        total
    }

    fn trim_log(&mut self) {
        let oldest = self
            .profiles
            .iter()
            .map(Profile::oldest_synced)
            .min()
            .unwrap_or(u64::MAX);
        let limit = (self.cache.node_count() * MAX_LOG_PER_NODE).max(MIN_LOG_BEFORE_TRIM) as u64;
        let generation = self.cache.generation();
        // Lagging instances past the limit are re-created in full at their next sync.
        let keep_from = oldest.max(generation.saturating_sub(limit)).min(generation);
        self.cache.compact(keep_from);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_topology_spread_is_idle_only_for_pods_no_constraint_applies_to() {
        let spread = crate::runtime::defaults::find(wasched_pod_topology_spread::NAME)
            .and_then(|p| p.idle_when)
            .expect("PodTopologySpread declares when it is idle");
        let cache = Cache::default();
        let plain = sdk::Pod::default();
        assert!(spread.holds(&plain, cache.pods_with_pod_affinity() > 0));
        let own = sdk::Pod {
            topology_spread_constraints: vec![sdk::TopologySpreadConstraint::default()],
            ..sdk::Pod::default()
        };
        assert!(!spread.holds(&own, cache.pods_with_pod_affinity() > 0));
        let selected = sdk::Pod {
            default_spread_selector: Some(sdk::LabelSelector::default()),
            ..sdk::Pod::default()
        };
        assert!(
            !spread.holds(&selected, cache.pods_with_pod_affinity() > 0),
            "a Service selects it"
        );
    }

    /// Counts `set-pod` calls; its plan says how many calls it has seen, so a reused plan shows.
    struct CountingInstance {
        descriptor: sdk::Descriptor,
        set_pods: usize,
        fail_next: Arc<std::sync::atomic::AtomicBool>,
        /// Plans that need no further call: every node but the one numbered by the call passes.
        settling: bool,
    }

    impl PluginInstance for CountingInstance {
        fn descriptor(&self) -> &sdk::Descriptor {
            &self.descriptor
        }
        fn upsert_nodes(&mut self, _: &[(u32, &sdk::NodeInfo)]) -> Result<(), CallError> {
            Ok(())
        }
        fn remove_nodes(&mut self, _: &[u32]) -> Result<(), CallError> {
            Ok(())
        }
        fn update_usage(&mut self, _: &[(u32, &sdk::NodeUsage)]) -> Result<(), CallError> {
            Ok(())
        }
        fn upsert_pods(&mut self, _: &[(u32, sdk::ExistingPod)]) -> Result<(), CallError> {
            Ok(())
        }
        fn remove_pods(&mut self, _: &[u32]) -> Result<(), CallError> {
            Ok(())
        }
        fn upsert_namespaces(&mut self, _: &[(&str, &sdk::Labels)]) -> Result<(), CallError> {
            Ok(())
        }
        fn remove_namespaces(&mut self, _: &[&str]) -> Result<(), CallError> {
            Ok(())
        }
        fn upsert_volumes(&mut self, _: &[&sdk::VolumeInfo]) -> Result<(), CallError> {
            Ok(())
        }
        fn remove_volumes(&mut self, _: &[&str]) -> Result<(), CallError> {
            Ok(())
        }
        fn set_pod(&mut self, _: &sdk::Pod) -> Result<sdk::PodPlan, CallError> {
            if self
                .fail_next
                .swap(false, std::sync::atomic::Ordering::Relaxed)
            {
                return Err(CallError::new("set-pod", "failed on purpose"));
            }
            self.set_pods += 1;
            if self.settling {
                return Ok(sdk::PodPlan {
                    filter: sdk::FilterPlan::FailingNodes {
                        nodes: vec![self.set_pods as u32],
                        results: sdk::FilterResults {
                            verdicts: vec![1],
                            failures: vec![sdk::Failure::unresolvable("numbered")],
                        },
                    },
                    score: false,
                });
            }
            Ok(sdk::PodPlan {
                filter: sdk::FilterPlan::OnlyNodes(vec![format!("call {}", self.set_pods)]),
                score: true,
            })
        }
        fn filter(&mut self, _: &[u32], _: &mut sdk::FilterResults) -> Result<(), CallError> {
            Ok(())
        }
        fn score(&mut self, _: &[u32], _: &mut Vec<i64>) -> Result<(), CallError> {
            Ok(())
        }
        fn normalize(&mut self, _: &mut Vec<i64>) -> Result<(), CallError> {
            Ok(())
        }
    }

    /// Which `set-pod` call the plan came from.
    fn call_of(plan: &sdk::PodPlan) -> String {
        match &plan.filter {
            sdk::FilterPlan::OnlyNodes(names) => names[0].clone(),
            sdk::FilterPlan::FailingNodes { nodes, .. } => format!("call {}", nodes[0]),
            other => panic!("unexpected plan {other:?}"),
        }
    }

    /// A [`FrameworkInstance`] over a [`CountingInstance`] that reads only tolerations and usage.
    fn counting_reuse(
        settling: bool,
        fail_next: Arc<std::sync::atomic::AtomicBool>,
    ) -> FrameworkInstance {
        counting_reuse_ignoring_usage(settling, fail_next, false)
    }

    /// [`counting_reuse`], whose plans ignore usage if `plan_ignores_usage`.
    fn counting_reuse_ignoring_usage(
        settling: bool,
        fail_next: Arc<std::sync::atomic::AtomicBool>,
        plan_ignores_usage: bool,
    ) -> FrameworkInstance {
        FrameworkInstance {
            stats: Arc::default(),
            inner: Box::new(CountingInstance {
                descriptor: sdk::Descriptor {
                    name: "counting".into(),
                    version: "0".into(),
                    filter: true,
                    score: false,
                    normalize: sdk::Normalize::None,
                    reads_usage: true,
                    reads_pod: sdk::PodParts::TOLERATIONS,
                    reads_existing_pods: sdk::ExistingPodParts::NONE,
                    reads_namespaces: false,
                    reads_volumes: false,
                    pre_enqueue: false,
                    permit: false,
                    reserve: false,
                    reads_node_images: false,
                    reads_csi_nodes: false,
                    reads_devices: false,
                    reads_groups: false,
                    post_filter: false,
                    queue_sort: false,
                    plan_ignores_usage,
                },
                set_pods: 0,
                fail_next,
                settling,
            }),
            last: None,
            settled: Vec::new(),
        }
    }

    /// A pod named `name` tolerating taints with key `toleration_key`.
    fn tolerating(name: &str, toleration_key: &str) -> sdk::Pod {
        sdk::Pod {
            name: name.into(),
            tolerations: vec![sdk::Toleration {
                key: toleration_key.into(),
                operator: "Exists".into(),
                ..sdk::Toleration::default()
            }],
            ..sdk::Pod::default()
        }
    }

    #[test]
    fn plans_that_need_no_further_call_stand_for_interleaved_pods_until_the_mirror_changes() {
        let calls = |settling: bool, keys: &[&str]| -> Vec<String> {
            let mut reuse = counting_reuse(settling, Arc::default());
            keys.iter()
                .map(|key| call_of(&reuse.set_pod(&tolerating("p", key)).expect("set-pod")))
                .collect()
        };
        let interleaved = ["gpu", "spot", "gpu", "spot", "gpu"];
        assert_eq!(
            calls(true, &interleaved),
            ["call 1", "call 2", "call 1", "call 2", "call 1"],
            "settled plans are kept for each shape of pod"
        );
        assert_eq!(
            calls(false, &interleaved),
            ["call 1", "call 2", "call 3", "call 4", "call 5"],
            "a plan that needs filter or score calls stands only for the pod the plugin holds"
        );
        let shapes: Vec<String> = (0..=SETTLED_PLANS).map(|i| format!("key-{i}")).collect();
        let mut keys: Vec<&str> = shapes.iter().map(String::as_str).collect();
        keys.push("key-0");
        assert_eq!(
            calls(true, &keys).last().map(String::as_str),
            Some(format!("call {}", SETTLED_PLANS + 2).as_str()),
            "the oldest of more than {SETTLED_PLANS} shapes is asked again"
        );

        let mut reuse = counting_reuse(true, Arc::default());
        for key in ["gpu", "spot"] {
            reuse.set_pod(&tolerating("p", key)).expect("set-pod");
        }
        reuse
            .update_usage(&[(0, &sdk::NodeUsage::default())])
            .expect("usage");
        let after = reuse.set_pod(&tolerating("p", "gpu")).expect("set-pod");
        assert_eq!(call_of(&after), "call 3", "after a mirror change");
    }

    #[test]
    fn usage_leaves_the_plans_of_a_plugin_that_ignores_it_standing() {
        let mut reuse = counting_reuse_ignoring_usage(false, Arc::default(), true);
        let set_pod = |reuse: &mut FrameworkInstance, name: &str| {
            call_of(&reuse.set_pod(&tolerating(name, "gpu")).expect("set-pod"))
        };
        assert_eq!(set_pod(&mut reuse, "a"), "call 1");
        reuse
            .update_usage(&[(0, &sdk::NodeUsage::default())])
            .expect("usage");
        assert_eq!(set_pod(&mut reuse, "b"), "call 1", "after usage alone");
        let node = sdk::NodeInfo::default();
        reuse.upsert_nodes(&[(0, &node)]).expect("upsert");
        assert_eq!(
            set_pod(&mut reuse, "c"),
            "call 2",
            "a node change still counts"
        );
    }

    #[test]
    fn set_pod_is_left_out_only_while_the_plugin_could_not_tell_the_pods_apart() {
        let fail_next = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut reuse = counting_reuse(false, fail_next.clone());
        let pod = tolerating;
        let set_pod = |reuse: &mut FrameworkInstance, pod: &sdk::Pod| {
            call_of(&reuse.set_pod(pod).expect("set-pod"))
        };
        assert_eq!(set_pod(&mut reuse, &pod("a", "gpu")), "call 1");
        assert_eq!(
            set_pod(&mut reuse, &pod("b", "gpu")),
            "call 1",
            "another name, same tolerations: the plugin reads only tolerations"
        );
        assert_eq!(set_pod(&mut reuse, &pod("c", "spot")), "call 2");
        let node = sdk::NodeInfo::default();
        reuse.upsert_nodes(&[(0, &node)]).expect("upsert");
        assert_eq!(
            set_pod(&mut reuse, &pod("c", "spot")),
            "call 3",
            "after upsert"
        );
        reuse
            .update_usage(&[(0, &sdk::NodeUsage::default())])
            .expect("usage");
        assert_eq!(
            set_pod(&mut reuse, &pod("c", "spot")),
            "call 4",
            "after usage"
        );
        reuse.remove_nodes(&[0]).expect("remove");
        assert_eq!(
            set_pod(&mut reuse, &pod("c", "spot")),
            "call 5",
            "after remove"
        );
        let priority = sdk::Pod {
            priority: 1,
            ..pod("c", "spot")
        };
        assert_eq!(set_pod(&mut reuse, &priority), "call 6", "priority is sent");
        fail_next.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(reuse.set_pod(&pod("d", "gpu")).is_err());
        assert_eq!(
            set_pod(&mut reuse, &priority),
            "call 7",
            "a failed set-pod leaves the plugin holding no known pod"
        );
    }

    /// What the host has sent one instance: its nodes, existing pods and namespaces, with every
    /// breach of the contract's ordering promises written down.
    #[derive(Default)]
    struct SentMirror {
        /// Each node as the plugin was last sent it, without its usage (which it does not read).
        nodes: std::collections::BTreeMap<u32, sdk::NodeInfo>,
        /// How many nodes it was sent, counting each time.
        node_upserts: usize,
        pods: std::collections::BTreeMap<u32, sdk::ExistingPod>,
        namespaces: std::collections::BTreeMap<String, sdk::Labels>,
        volumes: std::collections::BTreeMap<String, sdk::VolumeInfo>,
        breaches: Vec<String>,
    }

    struct Recording {
        descriptor: sdk::Descriptor,
        sent: Arc<std::sync::Mutex<SentMirror>>,
    }

    impl PluginInstance for Recording {
        fn descriptor(&self) -> &sdk::Descriptor {
            &self.descriptor
        }
        fn upsert_nodes(&mut self, nodes: &[(u32, &sdk::NodeInfo)]) -> Result<(), CallError> {
            let mut sent = self.sent.lock().unwrap();
            for (id, node) in nodes {
                sent.nodes.insert(*id, as_read(node, &self.descriptor));
            }
            sent.node_upserts += nodes.len();
            Ok(())
        }
        fn remove_nodes(&mut self, ids: &[u32]) -> Result<(), CallError> {
            let mut sent = self.sent.lock().unwrap();
            for id in ids {
                if sent.pods.values().any(|pod| pod.node == *id) {
                    let breach = format!("node {id} removed while pods are on it");
                    sent.breaches.push(breach);
                }
                sent.nodes.remove(id);
            }
            Ok(())
        }
        fn update_usage(&mut self, _: &[(u32, &sdk::NodeUsage)]) -> Result<(), CallError> {
            Ok(())
        }
        fn upsert_pods(&mut self, pods: &[(u32, sdk::ExistingPod)]) -> Result<(), CallError> {
            let mut sent = self.sent.lock().unwrap();
            for (id, pod) in pods {
                if !sent.nodes.contains_key(&pod.node) {
                    let breach = format!("pod {id} sent on node {} the mirror lacks", pod.node);
                    sent.breaches.push(breach);
                }
                sent.pods.insert(*id, pod.clone());
            }
            Ok(())
        }
        fn remove_pods(&mut self, ids: &[u32]) -> Result<(), CallError> {
            let mut sent = self.sent.lock().unwrap();
            ids.iter().for_each(|id| drop(sent.pods.remove(id)));
            Ok(())
        }
        fn upsert_namespaces(
            &mut self,
            namespaces: &[(&str, &sdk::Labels)],
        ) -> Result<(), CallError> {
            let mut sent = self.sent.lock().unwrap();
            for (name, labels) in namespaces {
                sent.namespaces.insert(name.to_string(), (*labels).clone());
            }
            Ok(())
        }
        fn remove_namespaces(&mut self, names: &[&str]) -> Result<(), CallError> {
            let mut sent = self.sent.lock().unwrap();
            names
                .iter()
                .for_each(|name| drop(sent.namespaces.remove(*name)));
            Ok(())
        }
        fn upsert_volumes(&mut self, volumes: &[&sdk::VolumeInfo]) -> Result<(), CallError> {
            let mut sent = self.sent.lock().unwrap();
            for volume in volumes {
                sent.volumes.insert(volume.name.clone(), (*volume).clone());
            }
            Ok(())
        }
        fn remove_volumes(&mut self, names: &[&str]) -> Result<(), CallError> {
            let mut sent = self.sent.lock().unwrap();
            names
                .iter()
                .for_each(|name| drop(sent.volumes.remove(*name)));
            Ok(())
        }
        fn set_pod(&mut self, _: &sdk::Pod) -> Result<sdk::PodPlan, CallError> {
            Ok(sdk::PodPlan::default())
        }
        fn filter(&mut self, _: &[u32], _: &mut sdk::FilterResults) -> Result<(), CallError> {
            Ok(())
        }
        fn score(&mut self, _: &[u32], _: &mut Vec<i64>) -> Result<(), CallError> {
            Ok(())
        }
        fn normalize(&mut self, _: &mut Vec<i64>) -> Result<(), CallError> {
            Ok(())
        }
    }

    /// A node as a plugin with `descriptor` reads it, but for its usage.
    fn as_read(node: &sdk::NodeInfo, descriptor: &sdk::Descriptor) -> sdk::NodeInfo {
        let mut read = node.sent(
            descriptor.reads_node_images,
            descriptor.reads_csi_nodes,
            descriptor.reads_devices,
        );
        read.usage = sdk::NodeUsage::default();
        read
    }

    /// Makes [`Recording`] instances; a fresh one starts from an empty mirror.
    struct RecordingFactory {
        parts: sdk::ExistingPodParts,
        reads_node_images: bool,
        sent: Arc<std::sync::Mutex<SentMirror>>,
    }

    impl PluginFactory for RecordingFactory {
        fn instantiate(&self, _: &str) -> Result<Box<dyn PluginInstance>, LoadError> {
            *self.sent.lock().unwrap() = SentMirror::default();
            Ok(Box::new(Recording {
                descriptor: sdk::Descriptor {
                    name: "recording".into(),
                    version: "0".into(),
                    filter: true,
                    score: false,
                    normalize: sdk::Normalize::None,
                    reads_usage: false,
                    reads_pod: sdk::PodParts::NONE,
                    reads_existing_pods: self.parts,
                    reads_namespaces: true,
                    reads_volumes: true,
                    pre_enqueue: false,
                    permit: false,
                    reserve: false,
                    reads_node_images: self.reads_node_images,
                    reads_csi_nodes: false,
                    reads_devices: false,
                    reads_groups: false,
                    post_filter: false,
                    queue_sort: false,
                    plan_ignores_usage: false,
                },
                sent: self.sent.clone(),
            }))
        }
        fn kind(&self) -> &'static str {
            "native"
        }
        fn identity(&self) -> String {
            "recording".into()
        }
    }

    /// Random cache changes (nodes joining, leaving and coming back; pods bound, assumed, forgotten,
    /// moved, relabelled and deleted; namespaces relabelled and deleted), with the log compacted now
    /// and then: after every catch-up, the instance's mirror holds exactly the cache's pods on the
    /// cache's nodes with the parts it reads, and never held a pod on a node it lacked. A plugin
    /// reading only host ports holds exactly the pods that have some. Its nodes are the cache's
    /// as it reads them, whether a change was to their labels or to their images alone.
    #[test]
    fn an_instance_mirrors_exactly_the_existing_pods_namespaces_and_volumes_through_any_changes() {
        for seed in 1..=20 {
            mirror_follows_random_changes(
                seed,
                sdk::ExistingPodParts::LABELS | sdk::ExistingPodParts::HOST_PORTS,
                true,
            );
            mirror_follows_random_changes(seed, sdk::ExistingPodParts::HOST_PORTS, false);
        }
    }

    #[test]
    fn a_node_whose_images_alone_changed_is_sent_only_to_a_plugin_that_reads_them() {
        for reads_node_images in [false, true] {
            let (spec, sent) = recording(sdk::ExistingPodParts::NONE, reads_node_images);
            let reads = Reads::of(spec.factory.instantiate("").unwrap().descriptor());
            let node = |image: &str| sdk::NodeInfo {
                name: "n1".into(),
                images: vec![sdk::NodeImage {
                    names: vec![image.into()],
                    size_bytes: 1,
                }],
                ..sdk::NodeInfo::default()
            };
            let mut cache = Cache::default();
            cache.upsert_node(node("one"));
            let (mut instance, mut synced) = (None, Synced::default());
            catch_up(&spec, reads, &mut instance, &mut synced, &cache).unwrap();
            assert_eq!(sent.lock().unwrap().node_upserts, 1);
            cache.upsert_node(node("two"));
            catch_up(&spec, reads, &mut instance, &mut synced, &cache).unwrap();
            let sent = sent.lock().unwrap();
            assert_eq!(
                sent.node_upserts,
                1 + usize::from(reads_node_images),
                "reads images: {reads_node_images}"
            );
        }
    }

    /// A plugin that records what it is sent, reading `parts` of placed pods and, if
    /// `reads_node_images`, the nodes' images; with what it was sent.
    fn recording(
        parts: sdk::ExistingPodParts,
        reads_node_images: bool,
    ) -> (PluginSpec, Arc<std::sync::Mutex<SentMirror>>) {
        let sent = Arc::new(std::sync::Mutex::new(SentMirror::default()));
        let spec = PluginSpec {
            name: "recording".into(),
            factory: Arc::new(RecordingFactory {
                parts,
                reads_node_images,
                sent: sent.clone(),
            }),
            config: "{}".into(),
            policy: FailurePolicy::default(),
            stats: Arc::new(PluginCallStats::default()),
            idle_when: None,
        };
        (spec, sent)
    }

    fn mirror_follows_random_changes(
        seed: u64,
        parts: sdk::ExistingPodParts,
        reads_node_images: bool,
    ) {
        let (spec, sent) = recording(parts, reads_node_images);
        let reads = Reads {
            usage: false,
            existing_pods: parts,
            namespaces: true,
            volumes: true,
            details: sdk::wire::NodeDetails {
                images: reads_node_images,
                ..sdk::wire::NodeDetails::default()
            },
        };
        let mut cache = Cache::default();
        let (mut instance, mut synced) = (None, Synced::default());
        let mut rng = Rng::new(seed);
        // A node's labels change less often than its images (as kubelet reports them).
        let node = |i: u64, version: u64| sdk::NodeInfo {
            name: format!("node-{i}"),
            labels: [("rack".to_string(), format!("r{}", version / 4 % 2))]
                .into_iter()
                .collect(),
            images: vec![sdk::NodeImage {
                names: vec![format!("image-{}", version % 3)],
                size_bytes: 1,
            }],
            ..sdk::NodeInfo::default()
        };
        let pod = |i: u64, version: u64| sdk::Pod {
            namespace: format!("ns-{}", i % 3),
            name: format!("pod-{i}"),
            labels: [("app".to_string(), format!("v{version}"))]
                .into_iter()
                .collect(),
            // Ports come and go on one pod too, as a replaced object may bring them.
            host_ports: (i + version / 3)
                .is_multiple_of(2)
                .then(|| sdk::HostPort {
                    host_ip: "0.0.0.0".into(),
                    protocol: "TCP".into(),
                    port: 80 + i as i32,
                })
                .into_iter()
                .collect(),
            terminating: version.is_multiple_of(5),
            ..sdk::Pod::default()
        };
        for step in 0..3_000u64 {
            let (n, p) = (rng.below(8), rng.below(24));
            match rng.below(13) {
                0 => {
                    cache.upsert_node(node(n, step));
                }
                10 => cache.upsert_volume(
                    serde_json::from_value(serde_json::json!({
                        "metadata": {"name": format!("pv-{}", n % 5)},
                        "spec": {"storageClassName": format!("class-{}", step % 2)},
                        "status": {"phase": if step % 3 == 0 { "Bound" } else { "Available" }}
                    }))
                    .unwrap(),
                ),
                11 => {
                    cache.remove_volume(&format!("pv-{}", n % 5));
                }
                12 => {
                    let held = pod(p, step);
                    if step.is_multiple_of(2) {
                        let volumes = crate::cache::PodVolumes {
                            static_bindings: vec![("data".into(), format!("pv-{}", n % 5))],
                            provisions: Vec::new(),
                        };
                        cache.reserve_volumes(&held, "node-0", &volumes);
                    } else {
                        cache.unreserve_volumes(&held.key());
                    }
                }
                1 => {
                    cache.remove_node(&format!("node-{n}"));
                }
                2..=3 => cache.add_pod(&pod(p, step), &format!("node-{n}")),
                4..=5 => cache.assume_pod(&pod(p, step), &format!("node-{n}")),
                6 => {
                    cache.forget_pod(&format!("ns-{}/pod-{p}", p % 3));
                }
                7 => {
                    cache.remove_pod(&format!("ns-{}/pod-{p}", p % 3));
                }
                8 => {
                    let labels = [("team".to_string(), format!("t{}", step % 4))];
                    cache.upsert_namespace(&format!("ns-{}", n % 4), labels.into_iter().collect());
                }
                _ => {
                    cache.remove_namespace(&format!("ns-{}", n % 4));
                }
            }
            if rng.below(4) == 0 {
                catch_up(&spec, reads, &mut instance, &mut synced, &cache).expect("catch-up");
                let sent = sent.lock().unwrap();
                assert!(
                    sent.breaches.is_empty(),
                    "seed {seed} step {step}: {:?}",
                    sent.breaches
                );
                let want: std::collections::BTreeMap<u32, sdk::ExistingPod> = cache
                    .existing_pods()
                    .filter(|(_, _, pod)| {
                        parts.contains(sdk::ExistingPodParts::LABELS) || !pod.host_ports.is_empty()
                    })
                    .map(|(id, node, pod)| (id, pod.with_parts(node, parts)))
                    .collect();
                assert_eq!(sent.pods, want, "seed {seed} step {step}: pods");
                let descriptor = instance.as_ref().expect("caught up").descriptor();
                let nodes: std::collections::BTreeMap<u32, sdk::NodeInfo> = cache
                    .nodes()
                    .map(|(id, entry)| (id, as_read(&entry.info, descriptor)))
                    .collect();
                assert_eq!(sent.nodes, nodes, "seed {seed} step {step}: nodes");
                let namespaces: std::collections::BTreeMap<String, sdk::Labels> = cache
                    .namespaces()
                    .map(|(name, labels)| (name.to_string(), labels.clone()))
                    .collect();
                assert_eq!(
                    sent.namespaces, namespaces,
                    "seed {seed} step {step}: namespaces"
                );
                let volumes: std::collections::BTreeMap<String, sdk::VolumeInfo> = cache
                    .all_volumes()
                    .map(|v| (v.name.clone(), v.clone()))
                    .collect();
                assert_eq!(sent.volumes, volumes, "seed {seed} step {step}: volumes");
            }
            if rng.below(50) == 0 {
                cache.compact(synced.generation.unwrap_or(0).min(cache.generation()));
            }
            if rng.below(200) == 0 {
                // The log no longer reaching back: the instance must be rebuilt from scratch.
                cache.compact(cache.generation());
            }
        }
    }
}
