//! The service's side of shadow policies ([`crate::shadow`]): what the live scheduler hands its
//! shadows, and how a shadow's own service follows the live one.

use wasched_sdk as sdk;

use super::Service;
use crate::cache::PodVolumes;
use crate::events::{Action, Event};
use crate::framework::{Decider, Outcome, SearchState};
use crate::shadow::{LiveDecision, Seed, ShadowFeed};

/// The running shadows of a service, and the events they have not been sent yet.
#[derive(Default)]
pub(super) struct Shadows {
    feeds: Vec<ShadowFeed>,
    /// Events applied since the last send.
    outbox: Vec<Event>,
    /// The profiles were swapped: their shadows start before the next cycle.
    stale: bool,
}

impl Shadows {
    /// Before the first cycle, the shadows the profiles were built with start.
    pub(super) fn new() -> Shadows {
        Shadows {
            stale: true,
            ..Shadows::default()
        }
    }

    pub(super) fn running(&self) -> bool {
        !self.feeds.is_empty()
    }

    /// Keeps a copy of an event about to be applied, for the shadows.
    pub(super) fn observe(&mut self, event: &Event) {
        if self.running() {
            self.outbox.push(event.clone());
        }
    }

    /// Sends the shadows the events applied since the last send.
    pub(super) fn flush(&mut self) {
        if self.outbox.is_empty() {
            return;
        }
        let events = std::mem::take(&mut self.outbox);
        if let Some((last, others)) = self.feeds.split_last() {
            for feed in others {
                feed.events(events.clone());
            }
            last.events(events);
        }
    }

    fn feed(&self, profile: &str) -> Option<&ShadowFeed> {
        self.feeds.iter().find(|f| f.profile() == profile)
    }

    pub(super) fn forget(&self, pod: &sdk::Pod) {
        if let Some(feed) = self.feed(&pod.scheduler_name) {
            feed.forget(pod.key());
        }
    }

    pub(super) fn nominate(&self, pod: &sdk::Pod, node: &str) {
        if let Some(feed) = self.feed(&pod.scheduler_name) {
            feed.nominate(pod, node);
        }
    }
}

impl Service {
    /// Stops the running shadows; the new profiles' start before the next cycle.
    pub(super) fn shadows_swapped(&mut self) {
        self.shadows.feeds.clear();
        self.shadows.outbox.clear();
        self.shadows.stale = true;
    }

    /// Starts the shadows of the profiles in place, each with a copy of the cluster as this
    /// service holds it. Only a scheduling service starts them (a standby does not).
    pub(super) fn start_shadows(&mut self) {
        if !std::mem::take(&mut self.shadows.stale) {
            return;
        }
        let pairs = self.decider.take_shadows();
        let profiles: Vec<String> = pairs
            .iter()
            .map(|p| p.live.scheduler_name.clone())
            .collect();
        let names: Vec<&str> = profiles.iter().map(String::as_str).collect();
        self.stats.shadows.retain(&names);
        for pair in pairs {
            let mut events: Vec<Event> = self
                .objects
                .values()
                .map(|(version, object)| Event {
                    action: Action::Upsert,
                    object: object.object(),
                    version: *version,
                })
                .collect();
            events.sort_by_key(|e| e.version);
            let placed = self
                .assumed
                .values()
                .map(|a| (a.pod.clone(), a.node.clone()))
                .collect();
            let seed = Seed {
                events,
                placed,
                ..Seed::default()
            };
            let profile = pair.live.scheduler_name.clone();
            match ShadowFeed::start(
                pair,
                seed,
                self.clock.clone(),
                self.assume_ttl,
                &self.stats.shadows,
            ) {
                Ok(feed) => {
                    tracing::info!(%profile, "shadow policy started");
                    self.shadows.feeds.push(feed);
                }
                Err(e) => tracing::warn!(%profile, "starting the shadow policy: {e}"),
            }
        }
    }

    /// Where the cycle of `pod` will start, when a shadow runs beside its profile.
    pub(super) fn shadow_search(&self, pod: &sdk::Pod) -> Option<SearchState> {
        self.shadows.feed(&pod.scheduler_name)?;
        self.decider.search_state(&pod.scheduler_name)
    }

    /// Hands the shadow of `pod`'s profile the live cycle that started at `search`.
    pub(super) fn shadow_cycle(&mut self, pod: &sdk::Pod, search: SearchState, outcome: &Outcome) {
        self.shadows.flush();
        let Some(feed) = self.shadows.feed(&pod.scheduler_name) else {
            return;
        };
        feed.cycle(LiveDecision::of(pod, search, outcome));
    }

    /// Applies `events` at once (a shadow's service, fed by the live one).
    pub fn apply_batch(&mut self, events: Vec<Event>) {
        for event in events {
            self.apply(event);
        }
    }

    /// The scheduler, to run cycles on directly (a shadow compares its own).
    pub fn decider_mut(&mut self) -> &mut Decider {
        &mut self.decider
    }

    /// Holds `pod` on `node` as the live scheduler's Reserve did, until its binding is seen or
    /// the assume TTL runs out.
    pub fn follow_placement(
        &mut self,
        pod: &sdk::Pod,
        node: &str,
        volumes: &PodVolumes,
        claims: &[sdk::ClaimAllocation],
    ) {
        let deadline = Some(self.clock.now() + self.assume_ttl);
        self.hold(pod, node, volumes, claims, deadline, 1);
    }

    /// Releases what [`Service::follow_placement`] held for the pod `key`: the live scheduler
    /// released it.
    pub fn forget_placement(&mut self, key: &str) {
        if self.assumed.remove(key).is_some() {
            self.decider.cache_mut().unreserve_volumes(key);
            self.decider.cache_mut().unreserve_claims(key);
            self.decider.forget(key);
        }
    }

    /// Nominates `pod` to `node` as the live scheduler did after a preemption.
    pub fn follow_nomination(&mut self, pod: &sdk::Pod, node: &str) {
        let mut nominated = pod.clone();
        nominated.nominated_node_name = node.to_string();
        self.decider.cache_mut().nominate(&nominated);
    }

    /// Drops the results no one will take from a service whose cycles are not run (a shadow's):
    /// pods reported gated, unreadable or let go at Permit.
    pub fn discard_reports(&mut self) {
        self.released.clear();
        self.unreadable.clear();
        self.newly_gated.clear();
    }
}
