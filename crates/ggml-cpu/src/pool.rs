//! The worker team a [`crate::CpuBackend`] computes its graphs with.
//!
//! A graph is hundreds of short operations (a token of a 1B model is about
//! 500 nodes of a few tens of microseconds each), so what matters is how
//! fast the workers start on the next operation. The team is the calling
//! thread plus `n - 1` workers; between operations the workers spin on a
//! generation counter for a short while and only then sleep on a condition
//! variable, as ggml's thread pool does. The calling thread always takes
//! part in the work, so a graph never waits on a hand-over to another
//! thread: a worker joins an operation only while it is open, and the
//! caller closes it when it has run out of work, then waits only for the
//! workers that joined. A worker that is asleep, or that the system has
//! not scheduled (a loaded machine, more threads than cores), thus delays
//! nobody: its share of the indices goes to the members that are running.
//!
//! Inside [`Team::enter`], [`current_num_threads`], [`for_each`] and
//! [`try_for_each_init`] use the team; anywhere else they run on the
//! calling thread alone.

use std::any::Any;
use std::cell::Cell;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a worker polls for the next operation before it sleeps.
const SPIN: Duration = Duration::from_micros(200);

/// One operation handed to the team: each member calls `body` once.
struct Job<'a> {
    body: &'a (dyn Fn() + Sync),
}

/// Bits of [`Shared::state`]: the workers in the current job,
const JOINED: u64 = 0xffff;
/// whether it still takes workers,
const OPEN: u64 = 1 << 16;
/// and above, the job's generation.
const GEN_SHIFT: u32 = 17;

fn generation(state: u64) -> u64 {
    state >> GEN_SHIFT
}

struct Shared {
    n_threads: usize,
    /// The generation (bumped once per job, and once to stop), whether the
    /// job is open, and how many workers are in it (see [`JOINED`]).
    state: AtomicU64,
    /// The current job, on the stack of the thread that runs it.
    job: AtomicPtr<()>,
    stop: AtomicBool,
    /// Workers asleep (or about to sleep) on `wake`.
    sleeping: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
    /// The first panic of a worker in the current job.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

/// The calling thread plus `n - 1` workers.
pub(crate) struct Team {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Team {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Team")
            .field("n_threads", &self.shared.n_threads)
            .finish()
    }
}

thread_local! {
    /// The team of the graph this thread is computing, if any.
    static CURRENT: Cell<*const Shared> = const { Cell::new(std::ptr::null()) };
}

impl Team {
    /// A team of `n` threads (at least 1): `n - 1` workers are started.
    pub(crate) fn new(n: usize) -> std::io::Result<Team> {
        let n = n.clamp(1, JOINED as usize + 1);
        let shared = Arc::new(Shared {
            n_threads: n,
            state: AtomicU64::new(0),
            job: AtomicPtr::new(std::ptr::null_mut()),
            stop: AtomicBool::new(false),
            sleeping: AtomicUsize::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
            panic: Mutex::new(None),
        });
        let mut team = Team {
            shared,
            workers: Vec::with_capacity(n - 1),
        };
        for i in 1..n {
            let s = Arc::clone(&team.shared);
            let h = std::thread::Builder::new()
                .name(format!("ggml-cpu-{i}"))
                .spawn(move || worker(&s))?;
            team.workers.push(h);
        }
        Ok(team)
    }

    /// Runs `f` with this team as the calling thread's current team.
    pub(crate) fn enter<R>(&mut self, f: impl FnOnce() -> R) -> R {
        let _restore = set_current(Arc::as_ptr(&self.shared));
        f()
    }
}

/// Sets the calling thread's current team until the guard is dropped.
fn set_current(team: *const Shared) -> impl Drop {
    struct Restore(*const Shared);
    impl Drop for Restore {
        fn drop(&mut self) {
            CURRENT.with(|c| c.set(self.0));
        }
    }
    Restore(CURRENT.with(|c| c.replace(team)))
}

impl Drop for Team {
    fn drop(&mut self) {
        let s = &self.shared;
        s.stop.store(true, Ordering::SeqCst);
        // No job is running (`broadcast` returns only when its job is
        // closed and left): a new generation, closed, wakes every worker.
        s.state.fetch_add(1 << GEN_SHIFT, Ordering::SeqCst);
        {
            let _g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        for h in self.workers.drain(..) {
            let _ = h.join();
        }
    }
}

fn worker(s: &Shared) {
    let mut seen = 0u64;
    loop {
        let st = wait_for_job(s, seen);
        seen = generation(st);
        if s.stop.load(Ordering::Acquire) {
            return;
        }
        if !join(s, st) {
            // Closed before this worker came: the others did its share.
            continue;
        }
        let p = s.job.load(Ordering::Acquire) as *const Job<'_>;
        // SAFETY: this worker joined generation `seen` while it was open;
        // the thread that published it stored a pointer to a `Job` on its
        // stack before opening it, and it does not return (so the job and
        // everything it borrows stay alive) until every worker that joined
        // has left, which needs this worker's decrement below.
        let job = unsafe { &*p };
        if let Err(e) = panic::catch_unwind(AssertUnwindSafe(job.body)) {
            let mut slot = s.panic.lock().unwrap_or_else(|e| e.into_inner());
            slot.get_or_insert(e);
        }
        s.state.fetch_sub(1, Ordering::Release);
    }
}

/// Counts this worker into the job of state `st` if that job is still
/// open; false when it was closed (or replaced) first.
fn join(s: &Shared, mut st: u64) -> bool {
    let g = generation(st);
    while st & OPEN != 0 && generation(st) == g {
        match s
            .state
            .compare_exchange_weak(st, st + 1, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => return true,
            Err(now) => st = now,
        }
    }
    false
}

/// Polls for a generation other than `seen`, then sleeps until one comes;
/// returns the state that has it.
fn wait_for_job(s: &Shared, seen: u64) -> u64 {
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        let st = s.state.load(Ordering::Acquire);
        if generation(st) != seen {
            return st;
        }
        std::hint::spin_loop();
        spins += 1;
        if spins % 256 == 0 && start.elapsed() >= SPIN {
            break;
        }
    }
    let mut guard = s.lock.lock().unwrap_or_else(|e| e.into_inner());
    s.sleeping.fetch_add(1, Ordering::SeqCst);
    loop {
        let st = s.state.load(Ordering::SeqCst);
        if generation(st) != seen {
            s.sleeping.fetch_sub(1, Ordering::SeqCst);
            return st;
        }
        guard = s.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
    }
}

/// Runs `body` once on every member of the current team (the calling
/// thread included) and returns when all have finished; with no team, once
/// on the calling thread.
fn broadcast(body: &(dyn Fn() + Sync)) {
    let p = CURRENT.with(|c| c.get());
    if p.is_null() {
        return body();
    }
    // SAFETY: `CURRENT` is only set by `Team::enter`, which keeps the team
    // (and so its `Shared`, owned through an `Arc`) alive while it runs,
    // and restores the previous value before returning.
    let s = unsafe { &*p };
    if s.n_threads == 1 {
        return body();
    }
    // The caller closes the job when its own `body` returns (all indices
    // handed out), then waits for the workers that joined: the job lives on
    // this stack. Waiting here also covers a caller that unwinds out of
    // `body`.
    struct Join<'s>(&'s Shared);
    impl Drop for Join<'_> {
        fn drop(&mut self) {
            self.0.state.fetch_and(!OPEN, Ordering::AcqRel);
            while self.0.state.load(Ordering::Acquire) & JOINED != 0 {
                std::hint::spin_loop();
            }
        }
    }
    // A worker's panic left from a job whose caller panicked too (and so
    // never collected it) is not this job's.
    drop(s.panic.lock().unwrap_or_else(|e| e.into_inner()).take());
    let job = Job { body };
    s.job
        .store(&job as *const Job<'_> as *mut (), Ordering::Relaxed);
    // The previous job is closed and left (its caller waited): a new
    // generation, open, with no worker in it yet.
    let g = generation(s.state.load(Ordering::Relaxed)) + 1;
    s.state.store((g << GEN_SHIFT) | OPEN, Ordering::SeqCst);
    if s.sleeping.load(Ordering::SeqCst) > 0 {
        let _g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
        s.wake.notify_all();
    }
    {
        let _join = Join(s);
        // Work started inside a job runs on the thread that meets it.
        let _alone = set_current(std::ptr::null());
        body();
    }
    let worker_panic = s.panic.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(e) = worker_panic {
        panic::resume_unwind(e);
    }
}

/// Threads of the current team (1 outside [`Team::enter`]).
pub(crate) fn current_num_threads() -> usize {
    let p = CURRENT.with(|c| c.get());
    if p.is_null() {
        1
    } else {
        // SAFETY: as in `broadcast`.
        unsafe { (*p).n_threads }
    }
}

/// Calls `f(i)` for every `i` in `0..n`, the indices handed out one at a
/// time to the members of the current team.
pub(crate) fn for_each(n: usize, f: impl Fn(usize) + Sync) {
    let done: Result<(), std::convert::Infallible> = try_for_each_init(
        n,
        || (),
        |_, i| {
            f(i);
            Ok(())
        },
    );
    let Ok(()) = done;
}

/// Like [`for_each`], with per-thread state made by `init` and a fallible
/// `f`: the first error stops the handing out of indices and is returned.
pub(crate) fn try_for_each_init<S, E: Send>(
    n: usize,
    init: impl Fn() -> S + Sync,
    f: impl Fn(&mut S, usize) -> Result<(), E> + Sync,
) -> Result<(), E> {
    if n <= 1 || current_num_threads() == 1 {
        let mut s = init();
        return (0..n).try_for_each(|i| f(&mut s, i));
    }
    let next = AtomicUsize::new(0);
    let error: Mutex<Option<E>> = Mutex::new(None);
    broadcast(&|| {
        let mut s = None;
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= n {
                break;
            }
            if let Err(e) = f(s.get_or_insert_with(&init), i) {
                next.store(n, Ordering::Relaxed);
                error
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_or_insert(e);
                break;
            }
        }
    });
    match error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_index_once_on_every_team_size() {
        for n in 1..=4 {
            let mut team = Team::new(n).unwrap();
            for len in [0, 1, 2, 7, 1000] {
                let hits: Vec<AtomicUsize> = (0..len).map(|_| AtomicUsize::new(0)).collect();
                team.enter(|| {
                    assert_eq!(current_num_threads(), n);
                    for_each(len, |i| {
                        hits[i].fetch_add(1, Ordering::Relaxed);
                    })
                });
                assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
            }
        }
        assert_eq!(current_num_threads(), 1);
    }

    #[test]
    fn many_jobs_in_a_row_and_after_sleeping() {
        let mut team = Team::new(3).unwrap();
        let total = AtomicUsize::new(0);
        team.enter(|| {
            for round in 0..2000 {
                if round == 1000 {
                    // Long enough for the workers to go to sleep.
                    std::thread::sleep(SPIN * 5);
                }
                for_each(3, |i| {
                    total.fetch_add(i + 1, Ordering::Relaxed);
                });
            }
        });
        assert_eq!(total.load(Ordering::Relaxed), 2000 * 6);
    }

    #[test]
    fn first_error_is_returned_and_state_is_per_thread() {
        let mut team = Team::new(2).unwrap();
        let r: Result<(), usize> = team.enter(|| {
            try_for_each_init(
                100,
                || 0usize,
                |calls, i| {
                    *calls += 1;
                    if i == 40 {
                        Err(i)
                    } else {
                        Ok(())
                    }
                },
            )
        });
        assert_eq!(r, Err(40));
        let ok: Result<(), usize> = team.enter(|| {
            try_for_each_init(100, Vec::<usize>::new, |v, i| {
                v.push(i);
                Ok(())
            })
        });
        assert_eq!(ok, Ok(()));
    }

    /// Runs two indices on a team of two, one on each thread: the worker
    /// panics, and the caller too when `caller_panics`.
    fn two_panicking_tasks(team: &mut Team, caller_panics: bool) -> std::thread::Result<()> {
        let caller = std::thread::current().id();
        let worker_started = AtomicBool::new(false);
        panic::catch_unwind(AssertUnwindSafe(|| {
            team.enter(|| {
                for_each(2, |_| {
                    if std::thread::current().id() != caller {
                        worker_started.store(true, Ordering::Release);
                        panic!("worker");
                    }
                    // Leave the other index to the worker.
                    let t = Instant::now();
                    while !worker_started.load(Ordering::Acquire)
                        && t.elapsed() < Duration::from_secs(10)
                    {
                        std::hint::spin_loop();
                    }
                    if caller_panics {
                        panic!("caller");
                    }
                })
            })
        }))
    }

    #[test]
    fn a_worker_panic_reaches_the_caller_and_the_team_goes_on() {
        let mut team = Team::new(2).unwrap();
        assert!(two_panicking_tasks(&mut team, false).is_err());
        // Caller and worker both panic: the worker's panic is not raised
        // again by the next job.
        let r = two_panicking_tasks(&mut team, true);
        assert!(r.is_err());
        let count = AtomicUsize::new(0);
        team.enter(|| {
            for_each(10, |_| {
                count.fetch_add(1, Ordering::Relaxed);
            })
        });
        assert_eq!(count.load(Ordering::Relaxed), 10);
        assert_eq!(current_num_threads(), 1);
    }

    #[test]
    fn nested_work_runs_on_the_thread_that_meets_it() {
        let mut team = Team::new(2).unwrap();
        let count = AtomicUsize::new(0);
        team.enter(|| {
            for_each(8, |_| {
                let me = std::thread::current().id();
                assert_eq!(current_num_threads(), 1);
                for_each(4, |_| {
                    assert_eq!(std::thread::current().id(), me);
                    count.fetch_add(1, Ordering::Relaxed);
                })
            })
        });
        assert_eq!(count.load(Ordering::Relaxed), 32);
    }

    #[test]
    fn without_a_team_work_runs_on_the_caller() {
        let caller = std::thread::current().id();
        for_each(5, |_| assert_eq!(std::thread::current().id(), caller));
    }
}
