//! The epoch ticker: advances the engine's epoch every [`EPOCH_TICK`] while an armed call's
//! deadline could still fall due, and sleeps otherwise. Ticking at all times woke the process a
//! thousand times a second even with nothing to schedule: 2.3% of a core for an idle `serve`,
//! nearly all its CPU.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;

use wasmtime::{Engine, Store};

use super::EPOCH_TICK;

/// One engine's ticker, shared by its runtime and every instance whose calls it times.
pub struct Ticker {
    /// Ticks so far (the engine's epoch, give or take the one being made).
    ticks: AtomicU64,
    /// The tick until which the epoch must advance: past the deadline of every armed call.
    until: AtomicU64,
    /// The ticker thread sleeps until a call is armed.
    parked: AtomicBool,
    thread: OnceLock<Thread>,
}

impl Ticker {
    /// Starts the thread advancing `engine`'s epoch; it ends when the engine is dropped.
    pub(super) fn start(engine: &Engine) -> std::io::Result<Arc<Ticker>> {
        let ticker = Arc::new(Ticker {
            ticks: AtomicU64::new(0),
            until: AtomicU64::new(0),
            parked: AtomicBool::new(false),
            thread: OnceLock::new(),
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
        store.set_epoch_deadline(deadline);
        self.arm(deadline);
    }

    /// A call is armed with a deadline `deadline` ticks away: the epoch keeps advancing until it
    /// has passed. Costs two relaxed loads unless the deadline reaches past every earlier one.
    fn arm(&self, deadline: u64) {
        // One more: `ticks` can trail the engine's epoch by the tick being made.
        let until = self.ticks.load(Ordering::Relaxed) + deadline + 1;
        if self.until.load(Ordering::Relaxed) >= until {
            return;
        }
        // Raising `until` and then reading `parked`, as the ticker sets `parked` and then reads
        // `until` (both sequentially consistent): one of the two sees the other's write, so a
        // ticker about to sleep either stays awake or is woken here.
        self.until.fetch_max(until, Ordering::SeqCst);
        if self.parked.load(Ordering::SeqCst) {
            if let Some(thread) = self.thread.get() {
                thread.unpark();
            }
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
        loop {
            std::thread::sleep(EPOCH_TICK);
            let Some(engine) = engine.upgrade() else {
                break;
            };
            engine.increment_epoch();
            let now = self.ticks.fetch_add(1, Ordering::Relaxed) + 1;
            if now < self.until.load(Ordering::SeqCst) {
                continue;
            }
            self.parked.store(true, Ordering::SeqCst);
            if now >= self.until.load(Ordering::SeqCst) {
                drop(engine);
                // A spurious wake-up only costs a tick and another look at `until`.
                std::thread::park();
            }
            self.parked.store(false, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

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

    #[test]
    fn ticks_while_a_deadline_is_ahead_and_sleeps_otherwise() {
        let mut config = wasmtime::Config::new();
        config.epoch_interruption(true);
        let engine = Engine::new(&config).unwrap();
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
}
