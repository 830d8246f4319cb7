//! The `overseer-actors` thread: where the actors live, apart from the host's
//! threads and runtime, and how a handle starts and ends it.

use std::sync::Arc;

use actix::prelude::*;
use tokio::sync::{oneshot, watch};

use crate::actors::aggregator::Finish;
use crate::actors::supervisor::StopPolling;
use crate::actors::{Aggregator, HealthSupervisor};
use crate::error::{Error, Result};
use crate::report::HealthReport;

/// The two core actors, and the reports the aggregator publishes.
pub(super) struct Started {
    pub(super) supervisor: Addr<HealthSupervisor>,
    pub(super) aggregator: Addr<Aggregator>,
    pub(super) reports: watch::Receiver<Arc<HealthReport>>,
}

/// The `overseer-actors` thread: an actix `System` on a runtime of its own, and
/// the two signals between it and the handle: `stop` (sent by
/// [`Overseer::shutdown`](super::Overseer::shutdown) or a drop) and `done` (the last verdicts written).
pub(super) struct ActorsThread {
    stop: Option<oneshot::Sender<()>>,
    done: Option<oneshot::Receiver<Result<()>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ActorsThread {
    /// Starts the thread, runs `start` on it, and returns once the actors run (or
    /// failed to start). `checks`, the async checks' runtime, lives and ends with
    /// the thread.
    pub(super) async fn spawn<F>(
        checks: tokio::runtime::Runtime,
        start: impl FnOnce() -> F + Send + 'static,
    ) -> Result<(Self, watch::Receiver<Arc<HealthReport>>)>
    where
        F: Future<Output = Result<Started>> + 'static,
    {
        let (ready_tx, ready_rx) = oneshot::channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let (done_tx, done_rx) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("overseer-actors".into())
            .spawn(move || {
                let system = actix_rt::System::with_tokio_rt(|| {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("a runtime for the actors")
                });
                system.block_on(async move {
                    let Started {
                        supervisor,
                        aggregator,
                        reports,
                    } = match start().await {
                        Ok(started) => started,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    let _ = ready_tx.send(Ok(reports));
                    // Run until asked to stop, or until the handle is dropped.
                    let _ = stop_rx.await;
                    let _ = supervisor.send(StopPolling).await;
                    let finished = aggregator.send(Finish).await.unwrap_or_else(|e| {
                        Err(Error::Runtime(format!("the aggregator is gone: {e}")))
                    });
                    let _ = done_tx.send(finished);
                    System::current().stop();
                });
                // A hung check may hold a task forever: do not wait for it.
                checks.shutdown_background();
            })
            .map_err(|e| Error::Runtime(format!("cannot start the actors' thread: {e}")))?;
        let reports = ready_rx
            .await
            .map_err(|_| Error::Runtime("the actors' thread ended while starting".into()))??;
        Ok((
            Self {
                stop: Some(stop_tx),
                done: Some(done_rx),
                thread: Some(thread),
            },
            reports,
        ))
    }

    /// Asks the actors to finish, without waiting.
    pub(super) fn signal_stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// Asks the actors to finish, and waits for the last verdicts and the thread.
    pub(super) async fn stop(&mut self) -> Result<()> {
        self.signal_stop();
        let result = match self.done.take() {
            Some(done) => done
                .await
                .unwrap_or_else(|_| Err(Error::Runtime("the actors' thread ended early".into()))),
            None => Ok(()),
        };
        if let Some(thread) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        result
    }
}
