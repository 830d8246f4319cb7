//! One way for a test to wait: until the settled state it means holds (a
//! verdict with its reason, a row with its state), read again every
//! [`EVERY`], for at most one deadline.
//!
//! # The deadline policy
//! A deadline is how long a loaded 2-core machine may take, never a
//! measurement (speed is the bench's): [`PATIENCE`] for anything Overseer
//! itself does, [`PATIENCE_PYTHON`] for a step that starts a Python program
//! (Airflow, a Celery worker) from a cold interpreter. A test that needs
//! another names why beside its constant. A wait that runs out fails the test
//! with what it waited for and the last thing it read.
//!
//! A probe answers `Ok(value)` when the state holds, and `Err(last)` with what
//! it read otherwise (for the failure's message).

use std::fmt::Debug;
use std::future::Future;
use std::time::{Duration, Instant};

/// How long to wait for a state of Overseer's own on a loaded machine.
pub const PATIENCE: Duration = Duration::from_secs(60);
/// How long to wait for a step that starts Python (Airflow, a Celery worker).
pub const PATIENCE_PYTHON: Duration = Duration::from_secs(180);
/// How often a state is read again.
pub const EVERY: Duration = Duration::from_millis(50);

/// Waits until `probe` answers `Ok`, for at most [`PATIENCE`]; its value.
#[track_caller]
pub fn until<T, L: Debug>(what: &str, probe: impl FnMut() -> Result<T, L>) -> T {
    until_within(what, PATIENCE, probe)
}

/// [`until`], for at most `patience`.
#[track_caller]
pub fn until_within<T, L: Debug>(
    what: &str,
    patience: Duration,
    mut probe: impl FnMut() -> Result<T, L>,
) -> T {
    let deadline = Instant::now() + patience;
    loop {
        match probe() {
            Ok(value) => return value,
            Err(last) if Instant::now() >= deadline => {
                panic!("{what}: not within {patience:?}; last read: {last:?}")
            }
            Err(_) => std::thread::sleep(EVERY),
        }
    }
}

/// Waits until `holds()` is true, for at most [`PATIENCE`].
#[track_caller]
pub fn until_true(what: &str, mut holds: impl FnMut() -> bool) {
    until(what, || if holds() { Ok(()) } else { Err("false") })
}

/// [`until`] for a test on tokio: the probe is awaited, the pause is tokio's.
pub async fn until_async<T, L: Debug, F: Future<Output = Result<T, L>>>(
    what: &str,
    patience: Duration,
    mut probe: impl FnMut() -> F,
) -> T {
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        match probe().await {
            Ok(value) => return value,
            Err(last) if tokio::time::Instant::now() >= deadline => {
                panic!("{what}: not within {patience:?}; last read: {last:?}")
            }
            Err(_) => tokio::time::sleep(EVERY).await,
        }
    }
}

/// [`until_async`] for a state read without awaiting.
pub async fn until_true_async(what: &str, patience: Duration, mut holds: impl FnMut() -> bool) {
    until_async(what, patience, || {
        let held = holds();
        async move { if held { Ok(()) } else { Err("false") } }
    })
    .await
}
