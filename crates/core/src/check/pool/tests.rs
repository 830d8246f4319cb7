use super::*;
use std::sync::atomic::AtomicU8;
use std::thread::Thread;
use std::time::Instant;

/// Runs `check` on a fresh pool of two threads and waits for its outcome.
fn run_on_pool<F>(checks: &AsyncChecks, executor: &Arc<Watched>, check: F) -> Outcome<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let waiting = checks.run(check, executor);
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async { tokio::time::timeout(Duration::from_secs(30), waiting).await })
        .expect("an outcome within 30 s")
}

fn watched() -> Arc<Watched> {
    Watched::new("TestExecutor".into(), Arc::default())
}

#[test]
fn a_check_woken_while_it_runs_and_by_a_timer_finishes() {
    let threads = CheckThreads::start(2).unwrap();
    let outcome = run_on_pool(&threads.checks(), &watched(), async {
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        std::thread::current().name().map(str::to_owned)
    });
    assert_eq!(outcome, Ok(Some(CHECK_THREAD_NAME.to_owned())));
    threads.shutdown_background();
}

#[test]
fn a_panic_comes_back_as_its_message_and_the_pool_goes_on() {
    let threads = CheckThreads::start(1).unwrap();
    let checks = threads.checks();
    let outcome = run_on_pool(&checks, &watched(), async { panic!("poisoned") });
    assert_eq!(outcome, Err::<(), _>("poisoned".into()));
    assert_eq!(run_on_pool(&checks, &watched(), async { 7 }), Ok(7));
    threads.shutdown_background();
}

#[test]
fn a_check_that_blocks_is_given_its_thread_finishes_there_and_later_runs_alone() {
    let threads = CheckThreads::start(1).unwrap();
    let checks = threads.checks();
    let executor = watched();
    // Blocks the pool's only thread, then waits (a wake that must reach
    // the thread it was given), then answers.
    let blocks = run_on_pool(&checks, &executor, async {
        let pool_thread = std::thread::current().id();
        std::thread::sleep(STALL_AFTER * 3);
        tokio::time::sleep(Duration::from_millis(5)).await;
        std::thread::current().id() == pool_thread
    });
    assert_eq!(blocks, Ok(true), "it finished on the thread it blocked");
    assert_eq!(executor.stats.stalls.load(SeqCst), 1);
    assert!(executor.blocks.load(SeqCst));
    // Its next run starts on a thread of its own, and the pool has a
    // thread for everyone else.
    let pool_threads: Vec<_> = lock(&threads.pool.workers)
        .iter()
        .filter_map(|w| w.thread.get().map(Thread::id))
        .collect();
    assert_eq!(pool_threads.len(), 1, "the blocked thread was replaced");
    let again = run_on_pool(&checks, &executor, async { std::thread::current().id() });
    assert!(!pool_threads.contains(&again.unwrap()));
    let other = run_on_pool(&checks, &watched(), async { std::thread::current().id() });
    assert!(pool_threads.contains(&other.unwrap()));
    assert_eq!(executor.stats.stalls.load(SeqCst), 1, "found once");
    threads.shutdown_background();
}

/// What the log says when a poll held its thread: the measurement (how
/// long, over which limit), never advice that blames the check. Overseer's
/// own checks only wait, and on a machine short of CPU a poll of theirs
/// can hold its thread as long as one that blocks (here it sleeps).
#[test]
fn a_poll_that_held_its_thread_is_logged_as_a_measurement_blaming_no_check() {
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
    let threads = CheckThreads::start(1).unwrap();
    let executor = Watched::new("CeleryExecutor".into(), Arc::default());
    let held = run_on_pool(&threads.checks(), &executor, async {
        std::thread::sleep(STALL_AFTER * 3);
    });
    assert_eq!(held, Ok(()));
    threads.shutdown_background();
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    // Only this test's executor: under `cargo test` the other tests of
    // this binary log to the same subscriber.
    let warnings: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("executor=CeleryExecutor"))
        .collect();
    assert_eq!(warnings.len(), 1, "{text}");
    let warning = warnings[0];
    for said in [
        "limit=100ms",
        "held its thread longer than the limit",
        "or the machine was short of CPU",
        "its runs go on a thread of their own",
    ] {
        assert!(warning.contains(said), "{said:?} missing: {warning}");
    }
    assert!(
        !warning.contains("BlockingHealthCheck") && !warning.contains("should be"),
        "advice that blames the check: {warning}"
    );
}

/// Log lines written by the subscriber of the test above.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        lock(&self.0).extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn checks_not_started_when_the_pool_stops_are_cancelled() {
    // A pool with no thread: whatever is queued stays queued.
    let threads = CheckThreads::start(0).unwrap();
    let queued = threads.checks().run(async { 1 }, &watched());
    threads.shutdown_background();
    let outcome = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(queued);
    assert_eq!(outcome, Err("the check was cancelled".into()));
}

// Stress: many checks at once, wakes from threads outside the pool, the pool
// stopped while checks are being polled. Each asserts outcomes: every check
// answered (or was cancelled) exactly once, none polled by two threads at
// once or after it finished, no more threads than the pool's.

/// The outcomes of `waiting`, in order, each within a generous deadline.
fn outcomes<T>(waiting: Vec<impl Future<Output = Outcome<T>>>) -> Vec<Outcome<T>> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let mut all = Vec::with_capacity(waiting.len());
            for (index, outcome) in waiting.into_iter().enumerate() {
                let outcome = tokio::time::timeout(Duration::from_secs(60), outcome).await;
                all.push(outcome.unwrap_or_else(|_| panic!("check {index}: no outcome in 60 s")));
            }
            all
        })
}

/// What the checks of a stress test saw, shared with the test.
#[derive(Default)]
struct Seen {
    /// Each check's polls under way (must never be more than one).
    in_poll: Vec<AtomicU8>,
    /// Each check's finishes, and its drops (once each).
    finished: Vec<AtomicU8>,
    dropped: Vec<AtomicU8>,
    /// Polls of a check that had finished, or that ran beside another of its own.
    wrong: std::sync::atomic::AtomicUsize,
    /// The threads that polled any check.
    threads: Mutex<std::collections::HashSet<std::thread::ThreadId>>,
}

impl Seen {
    fn new(checks: usize) -> Arc<Self> {
        let zeros = || (0..checks).map(|_| AtomicU8::new(0)).collect();
        Arc::new(Self {
            in_poll: zeros(),
            finished: zeros(),
            dropped: zeros(),
            ..Self::default()
        })
    }

    fn all_once(counts: &[AtomicU8]) -> bool {
        counts.iter().all(|n| n.load(SeqCst) == 1)
    }

    /// Whether every check was dropped exactly once. A check answers from
    /// inside its last poll and is dropped just after, so this waits
    /// (boundedly) for the last drops.
    /// Every check finished and was dropped once, never polled twice at once
    /// nor after it finished, on no thread but the pool's two, unless the
    /// watchdog gave one away (a poll held up past the limit on a machine
    /// short of CPU), each counted as a stall of `executor`; from then on the
    /// executor's runs start on threads of their own: `marked` runs were
    /// started after the test saw it marked, and one more may have been
    /// started as it was marked.
    fn each_once_on_two_threads(&self, executor: &Watched, marked: usize) {
        assert!(Self::all_once(&self.finished), "each finished once");
        assert!(self.all_dropped_once(), "each dropped once");
        assert_eq!(
            self.wrong.load(SeqCst),
            0,
            "polled twice at once or after it finished"
        );
        let stalls = executor.stats.stalls.load(SeqCst) as usize;
        let polled_on = lock(&self.threads).len();
        let own = if stalls > 0 { marked + 1 } else { 0 };
        assert!(
            polled_on <= 2 + stalls + own,
            "{polled_on} threads, {stalls} stalls, {marked} runs started once marked"
        );
    }

    fn all_dropped_once(&self) -> bool {
        settled(|| self.dropped.iter().all(|n| n.load(SeqCst) > 0));
        Self::all_once(&self.dropped)
    }
}

/// Waits, 30 s at most, for `done`: what follows a check's answer (its drop,
/// the pool letting go of it) happens just after the answer, on its thread.
/// The pool holds no task once every check ended; then it is stopped.
fn holds_nothing_then_stops(threads: CheckThreads) {
    settled(|| lock(&threads.pool.live).is_empty());
    assert!(
        lock(&threads.pool.live).is_empty(),
        "no task held after its end"
    );
    threads.shutdown_background();
}

fn settled(done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A check that wraps `inner` and notes in [`Seen`] how it is polled and
/// dropped.
struct Noted<F> {
    index: usize,
    seen: Arc<Seen>,
    inner: Pin<Box<F>>,
    done: bool,
}

impl<F: Future> Future for Noted<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let (index, seen) = (self.index, self.seen.clone());
        lock(&seen.threads).insert(std::thread::current().id());
        if self.done || seen.in_poll[index].fetch_add(1, SeqCst) != 0 {
            seen.wrong.fetch_add(1, SeqCst);
        }
        let polled = self.inner.as_mut().poll(cx);
        seen.in_poll[index].fetch_sub(1, SeqCst);
        if polled.is_ready() {
            self.done = true;
            seen.finished[index].fetch_add(1, SeqCst);
        }
        polled
    }
}

impl<F> Drop for Noted<F> {
    fn drop(&mut self) {
        self.seen.dropped[self.index].fetch_add(1, SeqCst);
    }
}

fn noted<F: Future>(index: usize, seen: &Arc<Seen>, inner: F) -> Noted<F> {
    Noted {
        index,
        seen: seen.clone(),
        inner: Box::pin(inner),
        done: false,
    }
}

/// Pending until a thread outside the pool wakes it, `wakes` times: the waker
/// goes to `elsewhere`, which wakes it twice (by reference, then by value),
/// while the poll that handed it over may still be running.
struct WokenElsewhere {
    wakes: u32,
    elsewhere: std::sync::mpsc::Sender<std::task::Waker>,
}

impl Future for WokenElsewhere {
    type Output = u32;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u32> {
        if self.wakes == 0 {
            return Poll::Ready(7);
        }
        self.wakes -= 1;
        self.elsewhere.send(cx.waker().clone()).unwrap();
        Poll::Pending
    }
}

#[test]
fn ten_thousand_checks_each_answer_once_on_the_pool_s_threads() {
    const CHECKS: usize = 10_000;
    let threads = CheckThreads::start(2).unwrap();
    let checks = threads.checks();
    let executor = watched();
    let seen = Seen::new(CHECKS);
    let mut marked = 0;
    let waiting: Vec<_> = (0..CHECKS)
        .map(|index| {
            marked += usize::from(executor.blocks.load(SeqCst));
            checks.run(
                noted(index, &seen, async move {
                    // Some answer at once, some wait for the runtime a few
                    // times, some for a timer.
                    for _ in 0..index % 4 {
                        tokio::task::yield_now().await;
                    }
                    if index % 10 == 0 {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    index
                }),
                &executor,
            )
        })
        .collect();
    let answers = outcomes(waiting);
    assert!(answers.iter().enumerate().all(|(i, a)| *a == Ok(i)));
    seen.each_once_on_two_threads(&executor, marked);
    holds_nothing_then_stops(threads);
}

#[test]
fn checks_woken_from_threads_outside_the_pool_answer_once_each() {
    const CHECKS: usize = 2_000;
    const WAKES: u32 = 5;
    let threads = CheckThreads::start(2).unwrap();
    let checks = threads.checks();
    let executor = watched();
    let seen = Seen::new(CHECKS);
    // Four threads that wake whatever waker they are handed, twice.
    let (wakers, wakers_rx) = std::sync::mpsc::channel::<std::task::Waker>();
    let wakers_rx = Arc::new(Mutex::new(wakers_rx));
    let wakers_threads: Vec<_> = (0..4)
        .map(|_| {
            let wakers_rx = wakers_rx.clone();
            std::thread::spawn(move || {
                loop {
                    let next = lock(&wakers_rx).recv();
                    let Ok(waker) = next else { return };
                    waker.wake_by_ref();
                    waker.wake();
                }
            })
        })
        .collect();
    let mut marked = 0;
    let waiting: Vec<_> = (0..CHECKS)
        .map(|index| {
            marked += usize::from(executor.blocks.load(SeqCst));
            let woken = WokenElsewhere {
                wakes: WAKES,
                elsewhere: wakers.clone(),
            };
            checks.run(noted(index, &seen, woken), &executor)
        })
        .collect();
    drop(wakers);
    let answers = outcomes(waiting);
    assert!(answers.iter().all(|a| *a == Ok(7)));
    seen.each_once_on_two_threads(&executor, marked);
    for thread in wakers_threads {
        thread.join().unwrap();
    }
    holds_nothing_then_stops(threads);
}

#[test]
fn the_pool_stopped_while_checks_are_polled_answers_or_cancels_each_once() {
    const CHECKS: usize = 400;
    for round in 0..5 {
        let threads = CheckThreads::start(2).unwrap();
        let checks = threads.checks();
        let executor = watched();
        let seen = Seen::new(CHECKS);
        let started = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let waiting: Vec<_> = (0..CHECKS)
            .map(|index| {
                let started = started.clone();
                checks.run(
                    noted(index, &seen, async move {
                        started.fetch_add(1, SeqCst);
                        // A poll that takes a while (well under the stall
                        // limit), so that the pool stops during one.
                        std::thread::sleep(Duration::from_micros(500));
                        match index % 3 {
                            0 => index,
                            // Waits for a timer, or for a wake that never comes.
                            1 => {
                                tokio::time::sleep(Duration::from_millis(1)).await;
                                index
                            }
                            _ => std::future::pending().await,
                        }
                    }),
                    &executor,
                )
            })
            .collect();
        // Stop once some have started: some answered, some waiting, some
        // queued, and (most rounds) one being polled on each thread.
        while started.load(SeqCst) < CHECKS / 4 {
            std::thread::yield_now();
        }
        threads.shutdown_background();
        let answers = outcomes(waiting);
        for (index, answer) in answers.iter().enumerate() {
            match answer {
                Ok(i) => assert_eq!(*i, index),
                // Cancelled; or, polled when the pool stopped, it went on and
                // met the IO runtime shut down (tokio panics then), which
                // answers with that panic's message.
                Err(e) => assert!(
                    e == "the check was cancelled" || e.contains("is being shutdown"),
                    "round {round}, check {index}: {e}"
                ),
            }
            let finished = seen.finished[index].load(SeqCst);
            assert_eq!(
                finished,
                u8::from(answer.is_ok()),
                "round {round}, check {index}: answered {answer:?}, finished {finished} times"
            );
        }
        assert!(answers.iter().any(Result::is_ok) && answers.iter().any(Result::is_err));
        assert!(
            seen.all_dropped_once(),
            "round {round}: each dropped once: {:?}",
            seen.dropped
                .iter()
                .enumerate()
                .filter(|(_, n)| n.load(SeqCst) != 1)
                .map(|(i, n)| (i, n.load(SeqCst), &answers[i]))
                .collect::<Vec<_>>()
        );
        assert_eq!(
            seen.wrong.load(SeqCst),
            0,
            "polled twice at once or after it finished"
        );
    }
}
