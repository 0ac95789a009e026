//! The epoch ticker: the engine's epoch follows the wall clock in [`EPOCH_TICK`]s while an armed
//! call's deadline could still fall due, and the ticker sleeps otherwise. Ticking at all times
//! woke the process a thousand times a second even with nothing to schedule: 2.3% of a core for
//! an idle `serve`, nearly all its CPU.
//!
//! It wakes only as often as the shortest deadline ever armed needs (a twentieth of it, 1 to 50
//! ms) and then advances the epoch by the ticks that passed. Waking every millisecond for the
//! embedded default plugins, whose deadline is a second, was ~4% of Kubernetes mode's CPU at
//! ~900 pods a second. A deadline still never falls due early: it is set past the ticks the
//! epoch may be behind the clock when it is armed, and a wake never advances the epoch by more
//! than that allowance, however late the thread ran.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::Instant;

use wasmtime::{Engine, Store};

use super::EPOCH_TICK;

/// The longest the ticker sleeps between two advances of the epoch, in ticks.
const LONGEST_PERIOD: u64 = 50;

/// The ticks the ticker may sleep between advances while a call whose deadline is `deadline`
/// ticks away is armed: a twentieth of it. With the allowance of [`deadline_from_epoch`] and a
/// wake's lag, the call is stopped at most ~15% and 3 ticks late.
fn period_for(deadline: u64) -> u64 {
    (deadline / 20).clamp(1, LONGEST_PERIOD)
}

/// The most one wake advances the epoch when the ticker sleeps `period` ticks at a time. What a
/// late wake leaves out makes deadlines fall due late, never early.
fn most_per_wake(period: u64) -> u64 {
    period + 1
}

/// The store deadline, counted from the engine's epoch when it is armed, for a call due
/// `deadline` ticks from now while the ticker sleeps at most `period` ticks at a time. Past it by
/// what the epoch may yet advance for time before the call: the rest of a wake being made, and
/// the next wake's ticks up to the call, each at most what one wake adds.
fn deadline_from_epoch(deadline: u64, period: u64) -> u64 {
    deadline + 2 * most_per_wake(period)
}

/// One engine's ticker, shared by its runtime and every instance whose calls it times.
pub struct Ticker {
    /// Ticks so far: the engine's epoch, or behind it by the wake being made.
    ticks: AtomicU64,
    /// The tick until which the epoch must advance: past the deadline of every armed call.
    until: AtomicU64,
    /// Ticks between two wakes: set by the shortest deadline ever armed. It never grows, so no
    /// wake adds more ticks than an earlier `arm` allowed for.
    period: AtomicU64,
    /// The ticker thread sleeps until a call is armed.
    parked: AtomicBool,
    thread: OnceLock<Thread>,
    /// Wakes so far.
    #[cfg(test)]
    wakes: AtomicU64,
}

impl Ticker {
    /// Starts the thread advancing `engine`'s epoch; it ends when the engine is dropped.
    pub(super) fn start(engine: &Engine) -> std::io::Result<Arc<Ticker>> {
        let ticker = Arc::new(Ticker {
            ticks: AtomicU64::new(0),
            until: AtomicU64::new(0),
            period: AtomicU64::new(LONGEST_PERIOD),
            parked: AtomicBool::new(false),
            thread: OnceLock::new(),
            #[cfg(test)]
            wakes: AtomicU64::new(0),
        });
        let (weak, running) = (engine.weak(), ticker.clone());
        let thread = std::thread::Builder::new()
            .name("wasched-epoch".into())
            .spawn(move || running.run(&weak))?;
        let _ = ticker.thread.set(thread.thread().clone());
        Ok(ticker)
    }

    /// Sets `store`'s next call deadline `deadline` ticks away, and keeps the epoch advancing
    /// until it has passed: a deadline set without the ticker awake would never fall due.
    pub(super) fn set_deadline<T>(&self, store: &mut Store<T>, deadline: u64) {
        store.set_epoch_deadline(self.arm(deadline));
    }

    /// A call is armed with a deadline `deadline` ticks away: the epoch keeps advancing until it
    /// has passed. Returns the store deadline, counted from the engine's epoch. Costs a few
    /// relaxed loads unless the deadline is shorter or reaches further than every earlier one.
    fn arm(&self, deadline: u64) -> u64 {
        // The ticker may be sleeping for this period now, even if this deadline shortens it.
        let period = self.period.load(Ordering::SeqCst);
        let wanted = period_for(deadline);
        let from_epoch = deadline_from_epoch(deadline, period);
        if wanted < period {
            self.period.fetch_min(wanted, Ordering::SeqCst);
            // It may be asleep for the longer period: woken, it goes on with this one.
            self.wake();
        }
        // `ticks` can trail the engine's epoch, from which the store counts, by one wake.
        let until = self.ticks.load(Ordering::Relaxed) + from_epoch + most_per_wake(period);
        if self.until.load(Ordering::Relaxed) >= until {
            return from_epoch;
        }
        // Raising `until` and then reading `parked`, as the ticker sets `parked` and then reads
        // `until` (both sequentially consistent): one of the two sees the other's write, so a
        // ticker about to sleep either stays awake or is woken here.
        self.until.fetch_max(until, Ordering::SeqCst);
        if self.parked.load(Ordering::SeqCst) {
            self.wake();
        }
        from_epoch
    }

    fn wake(&self) {
        if let Some(thread) = self.thread.get() {
            thread.unpark();
        }
    }

    /// Whether the ticker sleeps (no armed call's deadline is ahead).
    #[cfg(test)]
    fn is_parked(&self) -> bool {
        self.parked.load(Ordering::SeqCst)
    }

    /// Ticks made so far.
    #[cfg(test)]
    fn ticks(&self) -> u64 {
        self.ticks.load(Ordering::Relaxed)
    }

    fn run(&self, engine: &wasmtime::EngineWeak) {
        // The time up to which ticks were counted.
        let mut counted_to = Instant::now();
        loop {
            let period = self.period.load(Ordering::SeqCst);
            // Not `sleep`: an `arm` with a shorter deadline wakes it early.
            std::thread::park_timeout(EPOCH_TICK * period as u32);
            #[cfg(test)]
            self.wakes.fetch_add(1, Ordering::Relaxed);
            let Some(engine) = engine.upgrade() else {
                break;
            };
            let passed = (counted_to.elapsed().as_micros() / EPOCH_TICK.as_micros()) as u64;
            let most = most_per_wake(self.period.load(Ordering::SeqCst));
            let advance = passed.min(most);
            if advance == 0 {
                continue;
            }
            counted_to = if passed > most {
                Instant::now()
            } else {
                counted_to + EPOCH_TICK * advance as u32
            };
            for _ in 0..advance {
                engine.increment_epoch();
            }
            let now = self.ticks.fetch_add(advance, Ordering::Relaxed) + advance;
            if now < self.until.load(Ordering::SeqCst) {
                continue;
            }
            self.parked.store(true, Ordering::SeqCst);
            if now >= self.until.load(Ordering::SeqCst) {
                drop(engine);
                // A spurious wake-up only costs another look at `until`: the time asleep is
                // not counted.
                std::thread::park();
                counted_to = Instant::now();
            }
            self.parked.store(false, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(
                Instant::now() < deadline,
                "{what} did not happen within 10 s"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn epoch_engine() -> Engine {
        let mut config = wasmtime::Config::new();
        config.epoch_interruption(true);
        Engine::new(&config).unwrap()
    }

    #[test]
    fn ticks_while_a_deadline_is_ahead_and_sleeps_otherwise() {
        let engine = epoch_engine();
        let ticker = Ticker::start(&engine).unwrap();
        wait_until("sleeping with no call armed", || ticker.is_parked());
        let asleep_at = ticker.ticks();
        std::thread::sleep(Duration::from_millis(30));
        assert!(ticker.ticks() <= asleep_at + 1, "it ticked while asleep");

        ticker.arm(20);
        let armed_at = ticker.ticks();
        // Awake again for the deadline's 20 ticks, then asleep.
        wait_until("ticking through the deadline, then sleeping", || {
            ticker.ticks() >= armed_at + 20 && ticker.is_parked()
        });
    }

    #[test]
    fn with_only_second_long_deadlines_it_wakes_a_twentieth_as_often_and_keeps_time() {
        let engine = epoch_engine();
        let started = Instant::now();
        let ticker = Ticker::start(&engine).unwrap();
        ticker.arm(1_000);
        let woken = ticker.wakes.load(Ordering::Relaxed);
        let armed_at = Instant::now();
        while armed_at.elapsed() < Duration::from_millis(400) {
            // The epoch never runs ahead of the clock: a deadline would fall due early.
            assert!(
                u128::from(ticker.ticks()) <= started.elapsed().as_millis(),
                "{} ticks after {:?}",
                ticker.ticks(),
                started.elapsed()
            );
            ticker.arm(1_000);
            std::thread::sleep(Duration::from_millis(3));
        }
        let wakes = ticker.wakes.load(Ordering::Relaxed) - woken;
        // Every 50 ms, not every millisecond (a busy machine only makes it fewer).
        assert!(wakes <= 12, "{wakes} wakes in 400 ms");
        // And it keeps up with the clock (by half at least, however busy the machine).
        assert!(ticker.ticks() >= 200, "{} ticks in 400 ms", ticker.ticks());
    }

    #[test]
    fn a_shorter_deadline_shortens_the_period_and_is_allowed_for_the_longer_one() {
        let engine = epoch_engine();
        let ticker = Ticker::start(&engine).unwrap();
        // Armed while the ticker may sleep 50 ticks at a time: the epoch may be up to a wake
        // behind, so the store's deadline reaches past that.
        assert_eq!(ticker.arm(1_000), 1_000 + 2 * 51);
        assert_eq!(ticker.arm(20), 20 + 2 * 51);
        // From then on the ticker wakes every tick, and the allowance is two ticks a wake.
        assert_eq!(ticker.arm(20), 20 + 2 * 2);
        assert_eq!(ticker.arm(1_000), 1_000 + 2 * 2);
        let woken = ticker.wakes.load(Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(100));
        let wakes = ticker.wakes.load(Ordering::Relaxed) - woken;
        assert!(wakes >= 20, "{wakes} wakes in 100 ms");
    }
}
