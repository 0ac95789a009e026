//! Shadow policies: a candidate profile run beside a live one on the same cycles, deciding
//! nothing.
//!
//! The live [`Service`](crate::service::Service) hands a [`ShadowFeed`] every event it applies
//! and, after each cycle, the pod, where its search started and what it decided. The shadow's
//! thread keeps a cache of its own from those events, so when it takes a cycle it holds what the
//! live cache held when that cycle ran: it runs the candidate on the pod from the same search
//! start with the same tie-breaking state, classifies the answer ([`Verdict`]), and then places
//! the pod where the live profile did, so the next comparison starts from the live cluster again.
//! The scheduling thread never waits for it: at most [`MAX_IN_FLIGHT`] cycles wait for the
//! shadow, and a cycle past that is not compared (counted as dropped) but still placed.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use wasched_sdk as sdk;

use crate::cache::PodVolumes;
use crate::clock::Clock;
use crate::events::Event;
use crate::framework::{Choice, Decider, NodeReport, SearchState, ShadowPair};
use crate::service::Service;

/// Most live cycles waiting for the shadow; later ones are dropped until it catches up.
pub const MAX_IN_FLIGHT: usize = 256;
/// Disagreeing pods kept per shadow, the latest first.
const LATEST_KEPT: usize = 50;
/// Compared cycles between two syncs of a shadow's copy of the live profile.
const LIVE_COPY_SYNC_EVERY: u64 = 64;
/// How often a shadow releases the placements it follows whose binding never came.
const EXPIRY_INTERVAL: Duration = Duration::from_secs(1);
/// Minutes of per-minute counts kept per shadow.
const MINUTES_KEPT: usize = 60;

/// How a shadow's answer for one pod compares with the live profile's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// The same node (or both found none).
    Same,
    /// Another node, which the live profile scored as high as its own choice: only the tie
    /// was broken differently.
    Tie,
    /// Another node the live profile scored lower (or found infeasible), or a node where the
    /// live profile found none.
    Different,
    /// No node, where the live profile placed the pod.
    Infeasible,
    /// A shadow plugin failed.
    Error,
}

impl Verdict {
    /// Every verdict, in the order reports list them.
    pub const ALL: [Verdict; 5] = [
        Verdict::Same,
        Verdict::Tie,
        Verdict::Different,
        Verdict::Infeasible,
        Verdict::Error,
    ];

    /// The `outcome` label.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Same => "same",
            Verdict::Tie => "tie",
            Verdict::Different => "different",
            Verdict::Infeasible => "infeasible",
            Verdict::Error => "error",
        }
    }
}

/// One plugin's score of a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PluginScore {
    /// The score plugin.
    pub plugin: String,
    /// Its normalized score; the total weighs it by the plugin's weight.
    pub score: i64,
}

/// How one policy scored one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Breakdown {
    /// The weighted sum.
    pub total: i64,
    /// Per score plugin, in the order they ran.
    pub scores: Vec<PluginScore>,
}

impl Breakdown {
    fn of(scores: &[(String, i64)], total: i64) -> Breakdown {
        Breakdown {
            total,
            scores: scores
                .iter()
                .map(|(plugin, score)| PluginScore {
                    plugin: plugin.clone(),
                    score: *score,
                })
                .collect(),
        }
    }
}

/// Both policies' scores of a node one of them chose.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeComparison {
    /// The node.
    pub node: String,
    /// The live profile's scores of it; `None` when it found the node infeasible or did not
    /// examine it.
    pub live: Option<Breakdown>,
    /// The shadow's scores of it, likewise.
    pub shadow: Option<Breakdown>,
}

/// One policy's answer for a pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Answer {
    /// The chosen node.
    pub node: Option<String>,
    /// Why it chose none (the FitError), or the plugin's error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A pod the shadow would have placed otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Disagreement {
    /// `namespace/name`.
    pub pod: String,
    /// How the answers differ.
    pub verdict: Verdict,
    /// When the live cycle ran, in milliseconds since the epoch.
    pub at_millis: u64,
    /// The live profile's answer.
    pub live: Answer,
    /// The shadow's answer.
    pub shadow: Answer,
    /// The live node, then the shadow's, each scored by both policies.
    pub nodes: Vec<NodeComparison>,
}

/// Verdicts counted in one minute.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MinuteCounts {
    /// Minutes since the epoch.
    pub minute: u64,
    /// Per verdict, in [`Verdict::ALL`] order.
    pub counts: [u64; 5],
    /// Cycles not compared.
    pub dropped: u64,
}

/// Verdicts of a profile's shadows since the process started, for `/metrics`.
#[derive(Debug, Default)]
struct Totals {
    counts: [AtomicU64; 5],
    dropped: AtomicU64,
}

/// One shadow's record since it started.
#[derive(Debug)]
pub struct ShadowRecord {
    profile: String,
    started_millis: u64,
    counts: [AtomicU64; 5],
    dropped: AtomicU64,
    totals: Arc<Totals>,
    state: Mutex<RecordState>,
}

#[derive(Debug, Default)]
struct RecordState {
    latest: VecDeque<Disagreement>,
    minutes: VecDeque<MinuteCounts>,
    /// Why the shadow's plugins could not be brought up to date when it started.
    failure: Option<String>,
}

impl ShadowRecord {
    fn count(&self, verdict: Verdict, disagreement: Option<Disagreement>) {
        let i = verdict as usize;
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.totals.counts[i].fetch_add(1, Ordering::Relaxed);
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.minute(now_millis()).counts[i] += 1;
        if let Some(disagreement) = disagreement {
            if state.latest.len() == LATEST_KEPT {
                state.latest.pop_back();
            }
            state.latest.push_front(disagreement);
        }
    }

    fn dropped(&self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
        self.totals.dropped.fetch_add(1, Ordering::Relaxed);
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.minute(now_millis()).dropped += 1;
    }

    fn failed(&self, why: String) {
        tracing::warn!(profile = %self.profile, "the shadow's plugins failed: {why}");
        self.state.lock().unwrap_or_else(|e| e.into_inner()).failure = Some(why);
    }

    /// What the shadow found so far.
    pub fn report(&self) -> ShadowReport {
        let counts: Vec<u64> = self
            .counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        let compared: u64 = counts.iter().sum();
        let agreeing = counts[Verdict::Same as usize] + counts[Verdict::Tie as usize];
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        ShadowReport {
            profile: self.profile.clone(),
            started_millis: self.started_millis,
            failure: state.failure.clone(),
            counts: Verdict::ALL
                .iter()
                .map(|v| (v.name(), counts[*v as usize]))
                .collect(),
            compared,
            dropped: self.dropped.load(Ordering::Relaxed),
            agreement: (compared > 0).then(|| agreeing as f64 / compared as f64),
            minutes: state.minutes.iter().copied().collect(),
            latest: state.latest.iter().cloned().collect(),
        }
    }
}

impl RecordState {
    fn minute(&mut self, millis: u64) -> &mut MinuteCounts {
        let minute = millis / 60_000;
        if self.minutes.back().is_none_or(|m| m.minute != minute) {
            if self.minutes.len() == MINUTES_KEPT {
                self.minutes.pop_front();
            }
            self.minutes.push_back(MinuteCounts {
                minute,
                ..MinuteCounts::default()
            });
        }
        self.minutes.back_mut().expect("just pushed")
    }
}

/// What a shadow found, for `/v1/status/shadow` and `wasched shadow report`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShadowReport {
    /// The live profile's scheduler name.
    pub profile: String,
    /// When the shadow started, in milliseconds since the epoch.
    pub started_millis: u64,
    /// Why its plugins could not be brought up to date when it started, if so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// Cycles compared, per verdict.
    pub counts: BTreeMap<&'static str, u64>,
    /// Cycles compared.
    pub compared: u64,
    /// Live cycles not compared because the shadow was behind.
    pub dropped: u64,
    /// The share of compared cycles whose verdict was `same` or `tie`.
    pub agreement: Option<f64>,
    /// Per-minute counts, oldest first.
    pub minutes: Vec<MinuteCounts>,
    /// The latest disagreeing pods, the latest first.
    pub latest: Vec<Disagreement>,
}

/// Every running shadow's record, shared by the scheduling thread and the HTTP handlers.
#[derive(Debug, Default)]
pub struct ShadowBoard {
    records: Mutex<BTreeMap<String, Arc<ShadowRecord>>>,
    totals: Mutex<BTreeMap<String, Arc<Totals>>>,
}

impl ShadowBoard {
    fn start(&self, profile: &str) -> Arc<ShadowRecord> {
        let totals = self
            .totals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(profile.to_string())
            .or_default()
            .clone();
        let record = Arc::new(ShadowRecord {
            profile: profile.to_string(),
            started_millis: now_millis(),
            counts: Default::default(),
            dropped: AtomicU64::new(0),
            totals,
            state: Mutex::default(),
        });
        self.records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(profile.to_string(), record.clone());
        record
    }

    /// Forgets the records of shadows no profile has any more.
    pub fn retain(&self, profiles: &[&str]) {
        self.records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|p, _| profiles.contains(&p.as_str()));
    }

    /// Every running shadow's report, by profile.
    pub fn reports(&self) -> Vec<ShadowReport> {
        let records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        records.values().map(|r| r.report()).collect()
    }

    /// Appends the shadows' series in the Prometheus text format.
    pub fn render(&self, out: &mut String) {
        use std::fmt::Write as _;
        let totals = self.totals.lock().unwrap_or_else(|e| e.into_inner());
        let name = "wasched_shadow_cycles_total";
        let _ = writeln!(out, "# HELP {name} Live cycles a shadow policy ran on too, by how its answer compared (same, tie, different, infeasible, error).");
        let _ = writeln!(out, "# TYPE {name} counter");
        for (profile, t) in totals.iter() {
            let profile = crate::metrics::escape(profile);
            for verdict in Verdict::ALL {
                let count = t.counts[verdict as usize].load(Ordering::Relaxed);
                let outcome = verdict.name();
                let _ = writeln!(
                    out,
                    "{name}{{profile=\"{profile}\",outcome=\"{outcome}\"}} {count}"
                );
            }
        }
        let name = "wasched_shadow_cycles_dropped_total";
        let _ = writeln!(
            out,
            "# HELP {name} Live cycles not compared because the shadow policy was behind."
        );
        let _ = writeln!(out, "# TYPE {name} counter");
        for (profile, t) in totals.iter() {
            let profile = crate::metrics::escape(profile);
            let dropped = t.dropped.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}{{profile=\"{profile}\"}} {dropped}");
        }
    }
}

/// What the live cycle of one pod knew and decided.
pub struct LiveDecision {
    /// The pod as the cycle saw it.
    pub pod: sdk::Pod,
    /// Where the cycle started its search and how it would break ties.
    pub search: SearchState,
    /// The node chosen.
    pub node: Option<String>,
    /// Why that node: the live scores of it.
    pub choice: Option<Box<Choice>>,
    /// Why no node (the FitError), or the plugin's error.
    pub message: Option<String>,
    /// The volumes reserved with the pod on its node.
    pub volumes: PodVolumes,
    /// The devices allocated to its claims there.
    pub claims: Vec<sdk::ClaimAllocation>,
}

impl LiveDecision {
    /// What the cycle of `pod` that started at `search` decided.
    pub fn of(pod: &sdk::Pod, search: SearchState, outcome: &crate::framework::Outcome) -> Self {
        LiveDecision {
            pod: pod.clone(),
            search,
            node: outcome.node.clone(),
            choice: outcome.choice.clone(),
            message: outcome.message.clone(),
            volumes: outcome.volumes.clone(),
            claims: outcome.claims.clone(),
        }
    }
}

enum Message {
    Events(Vec<Event>),
    /// A live cycle to compare (or, `compare` false, only to follow).
    Cycle {
        decision: Box<LiveDecision>,
        compare: bool,
    },
    /// The live scheduler released what it had reserved for the pod.
    Forget(String),
    /// The live scheduler nominated the pod to the node (preemption).
    Nominate(Box<sdk::Pod>, String),
}

/// The scheduling thread's end of a running shadow. Dropping it stops the shadow's thread.
pub struct ShadowFeed {
    profile: String,
    sender: mpsc::Sender<Message>,
    in_flight: Arc<AtomicUsize>,
    record: Arc<ShadowRecord>,
}

/// Fills a shadow's cache directly, before its events (a user of the library that feeds its
/// decider's cache without events, such as `bench`).
pub type CacheLoader = Box<dyn FnOnce(&mut crate::cache::Cache) + Send>;

/// The cluster as the live scheduler holds it when a shadow starts.
#[derive(Default)]
pub struct Seed {
    /// What goes into the cache first.
    pub load: Option<CacheLoader>,
    /// Every object, as events in the order they were applied.
    pub events: Vec<Event>,
    /// The pods the live scheduler placed whose bindings are not confirmed yet, with their
    /// nodes.
    pub placed: Vec<(sdk::Pod, String)>,
}

impl ShadowFeed {
    /// Starts `pair` on a thread of its own with a cache built from `seed`; its findings go to
    /// `board` under the live profile's name.
    ///
    /// # Errors
    /// The thread could not be started.
    pub fn start(
        pair: ShadowPair,
        seed: Seed,
        clock: Arc<dyn Clock>,
        assume_ttl: Duration,
        board: &ShadowBoard,
    ) -> std::io::Result<ShadowFeed> {
        let profile = pair.live.scheduler_name.clone();
        let record = board.start(&profile);
        let (sender, receiver) = mpsc::channel();
        let in_flight = Arc::new(AtomicUsize::new(0));
        let runner = Runner {
            shadow_name: pair.shadow.scheduler_name.clone(),
            live_name: profile.clone(),
            record: record.clone(),
            in_flight: in_flight.clone(),
        };
        std::thread::Builder::new()
            .name("wasched-shadow".into())
            .spawn(move || {
                let decider = Decider::of_profiles(vec![pair.live, pair.shadow]);
                let service = Service::deferred(decider, clock).with_assume_ttl(assume_ttl);
                runner.run(service, seed, receiver);
            })?;
        Ok(ShadowFeed {
            profile,
            sender,
            in_flight,
            record,
        })
    }

    /// The live profile's scheduler name.
    pub fn profile(&self) -> &str {
        &self.profile
    }

    /// What the shadow found so far.
    pub fn report(&self) -> ShadowReport {
        self.record.report()
    }

    /// Live cycles handed over and not compared yet.
    pub fn behind(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Events the live scheduler applied, in order.
    pub fn events(&self, events: Vec<Event>) {
        if !events.is_empty() {
            let _ = self.sender.send(Message::Events(events));
        }
    }

    /// A live cycle ended: compared, unless [`MAX_IN_FLIGHT`] cycles already wait.
    pub fn cycle(&self, decision: LiveDecision) {
        let compare = self.in_flight.load(Ordering::Relaxed) < MAX_IN_FLIGHT;
        if compare {
            self.in_flight.fetch_add(1, Ordering::Relaxed);
        } else {
            self.record.dropped();
        }
        let decision = Box::new(decision);
        let _ = self.sender.send(Message::Cycle { decision, compare });
    }

    /// The live scheduler released the pod `key`'s reservation.
    pub fn forget(&self, key: String) {
        let _ = self.sender.send(Message::Forget(key));
    }

    /// The live scheduler nominated `pod` to `node`.
    pub fn nominate(&self, pod: &sdk::Pod, node: &str) {
        let _ = self
            .sender
            .send(Message::Nominate(Box::new(pod.clone()), node.to_string()));
    }
}

/// The shadow's thread.
struct Runner {
    live_name: String,
    shadow_name: String,
    record: Arc<ShadowRecord>,
    in_flight: Arc<AtomicUsize>,
}

impl Runner {
    fn run(self, mut service: Service, seed: Seed, messages: mpsc::Receiver<Message>) {
        if let Some(load) = seed.load {
            load(service.decider_mut().cache_mut());
        }
        service.apply_batch(seed.events);
        for (pod, node) in &seed.placed {
            service.follow_placement(pod, node, &PodVolumes::default(), &[]);
        }
        if let Err(e) = service.warm_up() {
            // Its cycles fail too, and are counted as errors.
            self.record.failed(e.to_string());
        }
        let mut last_expiry = std::time::Instant::now();
        let mut compared = 0u64;
        while let Ok(message) = messages.recv() {
            match message {
                Message::Events(events) => service.apply_batch(events),
                Message::Cycle { decision, compare } => {
                    if compare {
                        self.in_flight.fetch_sub(1, Ordering::Relaxed);
                        let (verdict, disagreement) = self.compare(&mut service, &decision);
                        self.record.count(verdict, disagreement);
                        compared += 1;
                        if compared.is_multiple_of(LIVE_COPY_SYNC_EVERY) {
                            // The live copy runs only on disagreements; unsynced, it would hold
                            // the cache's change log long, which every cycle then compacts.
                            let _ = service.warm_up();
                        }
                    }
                    if let Some(node) = &decision.node {
                        let d = &decision;
                        service.follow_placement(&d.pod, node, &d.volumes, &d.claims);
                    }
                }
                Message::Forget(key) => service.forget_placement(&key),
                Message::Nominate(pod, node) => service.follow_nomination(&pod, &node),
            }
            // Placements whose binding never came are released as the live scheduler releases
            // them; looking once a second keeps the look's cost off every message.
            if last_expiry.elapsed() >= EXPIRY_INTERVAL {
                last_expiry = std::time::Instant::now();
                service.expire_assumed();
            }
            service.discard_reports();
        }
    }

    /// Runs the shadow on the pod as the live cycle did, and scores both answers with both
    /// policies when they differ.
    fn compare(
        &self,
        service: &mut Service,
        live: &LiveDecision,
    ) -> (Verdict, Option<Disagreement>) {
        let decider = service.decider_mut();
        let mut pod = live.pod.clone();
        pod.scheduler_name.clone_from(&self.shadow_name);
        decider.set_search_state(&self.shadow_name, &live.search);
        let Some(shadow) = decider.plan(&pod) else {
            return (Verdict::Error, None);
        };
        let mut verdict = match (&live.node, &shadow.node) {
            _ if shadow.error => Verdict::Error,
            (Some(l), Some(s)) if l == s => Verdict::Same,
            (None, None) => Verdict::Same,
            (Some(_), None) => Verdict::Infeasible,
            _ => Verdict::Different,
        };
        if verdict == Verdict::Same {
            return (verdict, None);
        }
        decider.set_search_state(&self.shadow_name, &live.search);
        let shadow_nodes = decider.explain(&pod).map(|o| o.nodes).unwrap_or_default();
        decider.set_search_state(&self.live_name, &live.search);
        let live_nodes = decider
            .explain(&live.pod)
            .map(|o| o.nodes)
            .unwrap_or_default();
        let scored = |reports: &[NodeReport], node: &str| {
            reports
                .iter()
                .find(|r| r.node == node && r.feasible)
                .map(|r| Breakdown::of(&r.scores, r.total))
        };
        let mut nodes = Vec::new();
        if let Some(node) = &live.node {
            nodes.push(NodeComparison {
                node: node.clone(),
                live: match &live.choice {
                    Some(choice) => Some(Breakdown::of(&choice.scores, choice.total)),
                    None => scored(&live_nodes, node),
                },
                shadow: scored(&shadow_nodes, node),
            });
        }
        if let Some(node) = &shadow.node {
            let on_shadow_node = NodeComparison {
                node: node.clone(),
                live: scored(&live_nodes, node),
                shadow: shadow
                    .choice
                    .as_ref()
                    .map(|c| Breakdown::of(&c.scores, c.total)),
            };
            let live_total = live.choice.as_ref().map(|c| c.total);
            let tie = on_shadow_node.live.as_ref().map(|b| b.total);
            if verdict == Verdict::Different && live_total.is_some() && tie == live_total {
                verdict = Verdict::Tie;
            }
            nodes.push(on_shadow_node);
        }
        let disagreement = Disagreement {
            pod: live.pod.key(),
            verdict,
            at_millis: now_millis(),
            live: Answer {
                node: live.node.clone(),
                message: live.message.clone(),
            },
            shadow: Answer {
                node: shadow.node,
                message: shadow.message,
            },
            nodes,
        };
        (verdict, Some(disagreement))
    }
}

fn now_millis() -> u64 {
    crate::metrics::unix_ms(std::time::SystemTime::now())
}
