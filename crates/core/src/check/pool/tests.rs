use super::*;

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
