//! Worker threads that wait for a cycle's share of work by spinning, not sleeping.
//!
//! A cycle hands work to its workers two or three times in ~100 µs. Waking a sleeping thread
//! costs tens of microseconds (measured ~70 µs per hand-off with rayon's sleeping workers on this
//! project's 2-vCPU machines), more than the work saves, so a worker spins for a while after each
//! job and only parks when the scheduler has been idle that long.

use std::cell::UnsafeCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

/// How long an idle worker stays awake before it parks: longer than the gap between the phases
/// of back-to-back cycles, short enough to give the core back soon when pods stop coming.
const SPIN_FOR: Duration = Duration::from_micros(500);
/// How long a waiting thread spins before it starts yielding its core at each check: on a machine
/// with more runnable threads than cores, spinning would keep the awaited thread off the CPU.
const YIELD_AFTER: Duration = Duration::from_micros(50);

const IDLE: u8 = 0;
const READY: u8 = 1;
const DONE: u8 = 2;
const PANICKED: u8 = 3;
const STOP: u8 = 4;
/// A thread (the worker, or the lender itself) has claimed the job and is running it.
const RUNNING: u8 = 5;

/// A job lent to a worker for the duration of one [`SpinPool::run`] call.
type Job = *mut (dyn FnMut() + Send);

struct Mailbox {
    state: AtomicU8,
    job: UnsafeCell<Option<Job>>,
}

// SAFETY: `job` is written by the pool only while `state` is IDLE (nobody reads it then) and
// taken only by the one thread that moves `state` from READY (set with Release after writing the
// job) to RUNNING (Acquire): the worker, or the lender when the worker has not started it.
unsafe impl Sync for Mailbox {}
unsafe impl Send for Mailbox {}

struct Worker {
    mailbox: Arc<Mailbox>,
    thread: Thread,
    handle: Option<JoinHandle<()>>,
}

/// A fixed set of spinning worker threads.
pub struct SpinPool {
    workers: Vec<Worker>,
}

impl SpinPool {
    /// Starts `threads` workers.
    ///
    /// # Errors
    /// The operating system refused a thread.
    pub fn new(threads: usize) -> std::io::Result<SpinPool> {
        let mut workers = Vec::with_capacity(threads);
        for i in 0..threads {
            let mailbox = Arc::new(Mailbox {
                state: AtomicU8::new(IDLE),
                job: UnsafeCell::new(None),
            });
            let theirs = mailbox.clone();
            let handle = thread::Builder::new()
                .name(format!("wasched-worker-{}", i + 1))
                .spawn(move || work(&theirs))?;
            workers.push(Worker {
                mailbox,
                thread: handle.thread().clone(),
                handle: Some(handle),
            });
        }
        Ok(SpinPool { workers })
    }

    /// Runs `jobs` on the workers (job `i` on worker `i`) while `main` runs on this thread, and
    /// returns when all have finished.
    ///
    /// # Panics
    /// With more jobs than workers, or when a job panicked.
    pub fn run(&self, jobs: Vec<&mut (dyn FnMut() + Send)>, main: impl FnOnce()) {
        assert!(jobs.len() <= self.workers.len(), "more jobs than workers");
        // Waits for every lent job even if `main` panics, so no worker outlives the borrow.
        struct Join<'a>(&'a [Worker], bool);
        impl Drop for Join<'_> {
            fn drop(&mut self) {
                // A job no worker has started yet (its thread is off the CPU on a busy machine) is
                // run here rather than waited for.
                for worker in self.0 {
                    try_run(&worker.mailbox);
                }
                let waiting_since = Instant::now();
                for worker in self.0 {
                    loop {
                        match worker.mailbox.state.load(Ordering::Acquire) {
                            DONE => break,
                            PANICKED => {
                                self.1 = true;
                                break;
                            }
                            _ => pause(waiting_since),
                        }
                    }
                    worker.mailbox.state.store(IDLE, Ordering::Relaxed);
                }
                if self.1 && !thread::panicking() {
                    panic!("a worker thread's job panicked");
                }
            }
        }
        let lent = &self.workers[..jobs.len()];
        for (worker, job) in lent.iter().zip(jobs) {
            // SAFETY: the lifetime is erased only until `Join` has seen the worker finish, which
            // happens before this function returns or unwinds.
            let job: Job = unsafe { std::mem::transmute::<&mut (dyn FnMut() + Send), Job>(job) };
            unsafe { *worker.mailbox.job.get() = Some(job) };
            worker.mailbox.state.store(READY, Ordering::Release);
            worker.thread.unpark();
        }
        let join = Join(lent, false);
        main();
        drop(join);
    }
}

fn work(mailbox: &Mailbox) {
    let mut idle_since = Instant::now();
    loop {
        match mailbox.state.load(Ordering::Acquire) {
            READY => {
                try_run(mailbox);
                idle_since = Instant::now();
            }
            STOP => return,
            _ if idle_since.elapsed() < SPIN_FOR => pause(idle_since),
            _ => thread::park_timeout(Duration::from_millis(50)),
        }
    }
}

/// Runs the mailbox's job if this thread is the one to move it from READY to RUNNING (the worker
/// and the lender may both try), then publishes DONE or PANICKED.
fn try_run(mailbox: &Mailbox) {
    if mailbox
        .state
        .compare_exchange(READY, RUNNING, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    // SAFETY: see `Mailbox`; only the thread that won the exchange gets here, and the lender
    // keeps the job alive until it sees DONE or PANICKED.
    let job = unsafe { (*mailbox.job.get()).take() }.expect("a job with READY");
    let state = match catch_unwind(AssertUnwindSafe(|| unsafe { (*job)() })) {
        Ok(()) => DONE,
        Err(_) => PANICKED,
    };
    mailbox.state.store(state, Ordering::Release);
}

/// One step of a wait that began at `since`: a spin at first, then a yield of the core.
fn pause(since: Instant) {
    if since.elapsed() < YIELD_AFTER {
        std::hint::spin_loop();
    } else {
        thread::yield_now();
    }
}

impl Drop for SpinPool {
    fn drop(&mut self) {
        for worker in &mut self.workers {
            worker.mailbox.state.store(STOP, Ordering::Release);
            worker.thread.unpark();
            if let Some(handle) = worker.handle.take() {
                let _ = handle.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_run_on_workers_beside_the_main_part_and_finish_before_run_returns() {
        let pool = SpinPool::new(2).unwrap();
        for round in 0..200u64 {
            let mut parts = [0u64; 3];
            let (main_part, rest) = parts.split_at_mut(1);
            let (a, b) = rest.split_at_mut(1);
            let mut job_a = || a[0] = (0..1000).sum::<u64>() + round;
            let mut job_b = || b[0] = round * 2;
            pool.run(vec![&mut job_a, &mut job_b], || main_part[0] = round);
            assert_eq!(parts, [round, 499_500 + round, round * 2]);
        }
    }

    #[test]
    fn a_panicking_job_is_reported_and_the_pool_keeps_working() {
        let pool = SpinPool::new(1).unwrap();
        let caught = catch_unwind(AssertUnwindSafe(|| {
            let mut bad = || panic!("boom");
            pool.run(vec![&mut bad], || {});
        }));
        assert!(caught.is_err());
        let mut value = 0;
        let mut good = || value = 7;
        pool.run(vec![&mut good], || {});
        assert_eq!(value, 7);
    }
}
