//! How a cycle's work is shared between the scheduling thread and the profile's workers: each
//! thread has its own plugin instances, gets a contiguous share of the nodes, and runs the
//! filters (or scores) of its share; the scheduling thread merges the shares in node order.

use wasched_sdk::{self as sdk, FilterResults};

use super::cycle::InstanceRef;
use super::spin::SpinPool;
use super::sync::Synced;
use super::{catch_up, PluginSpec, Profile, Reads};
use crate::cache::Cache;
use crate::runtime::CallError;
use crate::runtime::PluginInstance;

/// Fewest nodes per thread worth handing to a worker: below this the hand-off costs more than it
/// saves.
pub(super) const MIN_NODES_PER_WORKER: usize = 64;

/// A filter-and-score thread's own instance of every plugin of a profile (the scheduling thread
/// uses the slots' instances), indexed like the profile's slots.
#[derive(Default)]
pub(super) struct WorkerInstances {
    pub(super) instances: Vec<Option<Box<dyn PluginInstance>>>,
    pub(super) synced: Vec<Synced>,
}

impl WorkerInstances {
    pub(super) fn new(slots: usize) -> WorkerInstances {
        WorkerInstances {
            instances: (0..slots).map(|_| None).collect(),
            synced: vec![Synced::default(); slots],
        }
    }
}

impl Profile {
    /// Each scoring plugin's raw scores of the `feasible` nodes, in the order of `scoring`. A
    /// plugin that normalizes its own scores may weigh each node against the whole feasible set
    /// (PodTopologySpread counts its domains), so it scores every feasible node in one call on
    /// this thread; the others are split between the threads and joined in node order.
    pub(super) fn raw_scores(
        &mut self,
        feasible: &[u32],
        scoring: &[(usize, i64)],
    ) -> Vec<Result<Vec<i64>, CallError>> {
        let (whole, split): (Vec<usize>, Vec<usize>) =
            scoring.iter().map(|&(i, _)| i).partition(|&i| {
                matches!(
                    self.slots[i].descriptor.normalize,
                    sdk::Normalize::Custom | sdk::Normalize::InScore
                )
            });
        let mut parts: Vec<Vec<Result<Vec<i64>, CallError>>> =
            vec![Vec::new(); 1 + self.workers.len()];
        let used = self.on_each_part(feasible, &mut parts, |instances, nodes, part| {
            score_part(instances, &split, nodes, part)
        });
        parts.truncate(used);
        let mut whole_results = Vec::with_capacity(whole.len());
        let mut main_instances: Vec<InstanceRef> =
            self.slots.iter_mut().map(|s| &mut s.instance).collect();
        score_part(&mut main_instances, &whole, feasible, &mut whole_results);
        let mut whole_results = whole_results.into_iter();
        let mut per_part: Vec<_> = parts.into_iter().map(Vec::into_iter).collect();
        scoring
            .iter()
            .map(|&(i, _)| {
                // Every part holds one result per split plugin, in `scoring` order.
                if whole.contains(&i) {
                    whole_results.next().expect("one result per plugin")
                } else {
                    per_part
                        .iter_mut()
                        .map(|part| part.next().expect("one result per plugin"))
                        .try_fold(Vec::with_capacity(feasible.len()), |mut all, part| {
                            all.extend(part?);
                            Ok(all)
                        })
                }
            })
            .collect()
    }

    /// Workers bring their mirrors up to date and start the pod while this thread starts it on
    /// the slots' instances: each slot lends its spec to the workers and its instance here.
    /// Returns this thread's answer per slot (`None` for a plugin left out) and the workers'
    /// failures by slot.
    #[allow(clippy::type_complexity)]
    pub(super) fn start_pod_on_every_thread(
        &mut self,
        cache: &Cache,
        pod: &sdk::Pod,
        left_out: &[bool],
        idle: &[bool],
    ) -> (
        Vec<Option<Result<sdk::PodPlan, CallError>>>,
        Vec<Vec<(usize, CallError)>>,
    ) {
        let mut answers = Vec::new();
        let mut worker_errors: Vec<Vec<(usize, CallError)>> = vec![Vec::new(); self.workers.len()];
        let (specs, mut instances): (Vec<(&PluginSpec, Reads)>, Vec<InstanceRef>) = self
            .slots
            .iter_mut()
            .map(|slot| {
                (
                    (&slot.spec, Reads::of(&slot.descriptor)),
                    &mut slot.instance,
                )
            })
            .unzip();
        let main = || {
            answers = instances
                .iter_mut()
                .zip(left_out.iter().zip(idle))
                .map(|(instance, (&out, &idle))| {
                    (!out).then(|| {
                        if idle {
                            Ok(sdk::PodPlan {
                                filter: sdk::FilterPlan::Skip,
                                score: false,
                            })
                        } else {
                            instance.as_mut().expect("synced").set_pod(pod)
                        }
                    })
                })
                .collect();
        };
        let helpers = self.workers.iter_mut().zip(&mut worker_errors);
        run_beside(self.pool.as_ref(), main, helpers, |(worker, errors)| {
            prepare_worker(worker, &specs, cache, left_out, idle, pod, errors)
        });
        (answers, worker_errors)
    }

    /// Splits `nodes` between this thread and the workers and runs `work` on each share with that
    /// thread's plugin instances, writing into its entry of `parts` (one per thread). Returns how
    /// many entries were used, in the order of `nodes`.
    pub(super) fn on_each_part<P: Send>(
        &mut self,
        nodes: &[u32],
        parts: &mut [P],
        work: impl Fn(&mut [InstanceRef], &[u32], &mut P) + Sync,
    ) -> usize {
        let ranges = split(nodes.len(), parts.len());
        let (main_part, helper_parts) = parts.split_at_mut(1);
        let mut main_instances: Vec<InstanceRef> =
            self.slots.iter_mut().map(|s| &mut s.instance).collect();
        let work = &work;
        let main = || {
            work(
                &mut main_instances,
                &nodes[ranges[0].clone()],
                &mut main_part[0],
            )
        };
        let helpers = self.workers.iter_mut().zip(helper_parts).zip(&ranges[1..]);
        run_beside(
            self.pool.as_ref(),
            main,
            helpers,
            |((worker, part), range)| {
                let mut instances: Vec<InstanceRef> = worker.instances.iter_mut().collect();
                work(&mut instances, &nodes[range.clone()], part);
            },
        );
        ranges.len()
    }
}

/// Splits `len` nodes into at most `threads` contiguous, nearly equal ranges, none smaller than
/// [`MIN_NODES_PER_WORKER`] unless there is only one.
pub(super) fn split(len: usize, threads: usize) -> Vec<std::ops::Range<usize>> {
    let count = threads.min(len / MIN_NODES_PER_WORKER).max(1);
    (0..count)
        .map(|t| len * t / count..len * (t + 1) / count)
        .collect()
}

/// Runs `main` on this thread while the pool's workers run `work` on the helper items (one
/// each); returns when all are done. Without a pool everything runs here, in order.
pub(super) fn run_beside<T: Send>(
    pool: Option<&SpinPool>,
    main: impl FnOnce(),
    helpers: impl Iterator<Item = T>,
    work: impl Fn(T) + Sync,
) {
    match pool {
        None => {
            main();
            helpers.for_each(work);
        }
        Some(pool) => {
            let work = &work;
            let mut jobs: Vec<_> = helpers
                .map(|item| {
                    let mut item = Some(item);
                    move || {
                        if let Some(item) = item.take() {
                            work(item);
                        }
                    }
                })
                .collect();
            let lent: Vec<&mut (dyn FnMut() + Send)> = jobs
                .iter_mut()
                .map(|job| job as &mut (dyn FnMut() + Send))
                .collect();
            pool.run(lent, main);
        }
    }
}

/// Brings a worker's mirrors up to date and starts the cycle of `pod` on its instances; failures
/// are returned by slot (and the failed instance dropped, to be re-made at the next sync).
pub(super) fn prepare_worker(
    worker: &mut WorkerInstances,
    specs: &[(&PluginSpec, Reads)],
    cache: &Cache,
    left_out: &[bool],
    idle: &[bool],
    pod: &sdk::Pod,
    errors: &mut Vec<(usize, CallError)>,
) {
    for (i, (spec, reads)) in specs.iter().enumerate() {
        if left_out[i] || idle[i] {
            continue;
        }
        let (instance, synced) = (&mut worker.instances[i], &mut worker.synced[i]);
        let result = catch_up(spec, *reads, instance, synced, cache)
            .and_then(|()| instance.as_mut().expect("caught up").set_pod(pod));
        if let Err(e) = result {
            *instance = None;
            *synced = Default::default();
            errors.push((i, e));
        }
    }
}

/// One thread's share of a chunk: what the active filters make of its nodes.
#[derive(Default)]
pub(super) struct PartVerdicts {
    /// Per node of the share, its verdict; the failures of every filter that rejected one.
    pub(super) results: FilterResults,
    /// Per failure in `results`: the slot whose filter returned it.
    pub(super) filtered_by: Vec<usize>,
    /// Plugins whose call failed on this part, by slot; they judged none of its nodes.
    pub(super) errors: Vec<(usize, CallError)>,
    /// Positions of the share's nodes that every filter so far passed.
    pub(super) alive: Vec<usize>,
    /// The ids of the `alive` nodes, as one filter call's argument, and that call's answer.
    pub(super) batch: Vec<u32>,
    pub(super) batch_results: FilterResults,
    /// Per failure of a [`FailingTable`]: its verdict in `results`, once a node used it.
    pub(super) copied: Vec<u32>,
}

impl PartVerdicts {
    fn start(&mut self, nodes: usize) {
        self.results.clear();
        self.results.verdicts.resize(nodes, 0);
        self.filtered_by.clear();
        self.errors.clear();
        self.alive.clear();
        self.alive.extend(0..nodes);
    }

    /// Keeps alive the nodes whose verdict (by position in `alive`) is 0 and records the others'.
    fn sift(&mut self, verdict_of: impl Fn(&mut Self, usize) -> u32) {
        let mut kept = 0;
        for j in 0..self.alive.len() {
            let k = self.alive[j];
            match verdict_of(self, j) {
                0 => {
                    self.alive[kept] = k;
                    kept += 1;
                }
                verdict => self.results.verdicts[k] = verdict,
            }
        }
        self.alive.truncate(kept);
    }
}

/// A slot's `failing-nodes` plan as a table by node id, kept from cycle to cycle so that a cycle
/// writes it rather than allocates it. A stamp per entry tells this cycle's entries from older
/// ones, so nothing is cleared between cycles.
#[derive(Default)]
pub(super) struct FailingTable {
    /// Whether the slot's plan this cycle is `failing-nodes`.
    pub(super) active: bool,
    /// Per node id: the stamp of the cycle that wrote the entry (high half) and its verdict.
    pub(super) entries: Vec<u64>,
    stamp: u32,
    pub(super) failures: Vec<sdk::Failure>,
}

impl FailingTable {
    /// Takes this cycle's plan; ids at or past `id_bound` name no node and are left out.
    pub(super) fn fill(
        &mut self,
        nodes: &[u32],
        results: &FilterResults,
        id_bound: usize,
    ) -> Result<(), String> {
        self.active = false;
        results
            .check(nodes.len())
            .map_err(|message| format!("failing-nodes: {message}"))?;
        self.stamp = self.stamp.wrapping_add(1);
        if self.stamp == 0 {
            self.entries.fill(0);
            self.stamp = 1;
        }
        let stamp = u64::from(self.stamp) << 32;
        for (&id, &verdict) in nodes.iter().zip(&results.verdicts) {
            let id = id as usize;
            if id >= id_bound {
                continue;
            }
            if id >= self.entries.len() {
                self.entries.resize(id_bound, 0);
            }
            self.entries[id] = stamp | u64::from(verdict);
        }
        self.failures.clone_from(&results.failures);
        self.active = true;
        Ok(())
    }

    /// The verdict for node `id`: 0 (passes) unless this cycle's plan listed it.
    pub(super) fn verdict(&self, id: u32) -> u32 {
        match self.entries.get(id as usize) {
            Some(&entry) if (entry >> 32) as u32 == self.stamp => entry as u32,
            _ => 0,
        }
    }
}

/// Runs the active filters over `nodes`, each on the nodes every earlier filter passed. A filter
/// whose plan listed its failing nodes is read from its table instead of called.
pub(super) fn filter_part(
    instances: &mut [InstanceRef],
    active_filters: &[usize],
    left_out: &[bool],
    failing: &[FailingTable],
    nodes: &[u32],
    out: &mut PartVerdicts,
) {
    out.start(nodes.len());
    for &slot_index in active_filters {
        if out.alive.is_empty() {
            break;
        }
        if left_out[slot_index] {
            continue;
        }
        let table = &failing[slot_index];
        if table.active {
            read_failing_table(table, slot_index, nodes, out);
            continue;
        }
        out.batch.clear();
        out.batch.extend(out.alive.iter().map(|&k| nodes[k]));
        out.batch_results.clear();
        let instance = instances[slot_index].as_mut().expect("synced");
        if let Err(e) = instance.filter(&out.batch, &mut out.batch_results) {
            *instances[slot_index] = None;
            out.errors.push((slot_index, e));
            continue;
        }
        let failures = out.batch_results.failures.drain(..);
        let base = out.results.adopt_failures(failures);
        out.filtered_by
            .resize(out.results.failures.len(), slot_index);
        out.sift(|out, j| FilterResults::rebase(out.batch_results.verdicts[j], base));
    }
}

/// The verdicts of a `failing-nodes` plan for the part's alive nodes; each failure the part uses
/// is copied into its results once.
pub(super) fn read_failing_table(
    table: &FailingTable,
    slot_index: usize,
    nodes: &[u32],
    out: &mut PartVerdicts,
) {
    out.copied.clear();
    out.copied.resize(table.failures.len(), 0);
    out.sift(|out, j| match table.verdict(nodes[out.alive[j]]) {
        0 => 0,
        v => {
            let local = v as usize - 1;
            if out.copied[local] == 0 {
                let base = out.results.adopt_failures([table.failures[local].clone()]);
                out.filtered_by.push(slot_index);
                out.copied[local] = base + 1;
            }
            out.copied[local]
        }
    });
}

/// Raw scores of `nodes` from each plugin in `plugins`, in order.
pub(super) fn score_part(
    instances: &mut [InstanceRef],
    plugins: &[usize],
    nodes: &[u32],
    out: &mut Vec<Result<Vec<i64>, CallError>>,
) {
    for &slot_index in plugins {
        let mut scores = Vec::with_capacity(nodes.len());
        let instance = instances[slot_index].as_mut().expect("synced");
        match instance.score(nodes, &mut scores) {
            Ok(()) => out.push(Ok(scores)),
            Err(e) => {
                *instances[slot_index] = None;
                out.push(Err(e));
            }
        }
    }
}
