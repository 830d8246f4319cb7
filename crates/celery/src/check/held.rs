//! The connections a check holds between its polls, as tasks: each checked
//! broker watched for the executor's alarm ([`BrokerProbe::watch`]), each
//! subscribed to the workers' heartbeats ([`BrokerProbe::subscribe`]), and the
//! look that rings the alarm on the workers' news.
//!
//! They are started together, once, by [`Held::start`] on the runtime the
//! check runs on, and stopped together when the check goes (its last clone).

use std::sync::Arc;
use std::time::Duration;

use overseer_core::check::Alarm;
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use super::brokers::Target;
use crate::events::WorkerEvents;

/// The tasks holding a connection to each of a check's brokers (watches,
/// event subscriptions) and looking at the workers' news; aborted when dropped.
pub(super) struct Held(Vec<JoinHandle<()>>);

impl Held {
    /// Starts, on `runtime`, for every checked broker of `targets`: its watch
    /// when there is an `alarm` to ring (the check is an executor's), its
    /// subscription to the workers' events with `events`; and, with both, the
    /// look at the workers' news ([`ring_on_worker_news`]).
    pub(super) fn start(
        runtime: &Handle,
        targets: &[Target],
        alarm: Option<&Alarm>,
        events: Option<&Arc<WorkerEvents>>,
    ) -> Self {
        let mut tasks = Vec::new();
        for (index, target) in targets.iter().enumerate() {
            let Some(probe) = target.probed() else {
                continue;
            };
            if let Some(alarm) = alarm {
                let (probe, alarm, answers) =
                    (Arc::clone(probe), alarm.clone(), target.answers.clone());
                tasks.push(runtime.spawn(async move { probe.watch(alarm, answers).await }));
            }
            if let Some(events) = events {
                let (probe, events, answers) = (
                    Arc::clone(probe),
                    Arc::clone(events),
                    target.answers.clone(),
                );
                tasks.push(
                    runtime.spawn(async move { probe.subscribe(index, events, answers).await }),
                );
            }
        }
        if let (Some(alarm), Some(events)) = (alarm, events) {
            let (events, alarm) = (Arc::clone(events), alarm.clone());
            tasks.push(runtime.spawn(async move { ring_on_worker_news(&events, &alarm).await }));
        }
        Self(tasks)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Rings the executor's alarm once the workers' heartbeats can be judged
/// (warmed up, refused, or [`crate::events::SETTLE_WITHIN`] passed): the
/// verdict that waited for them is made then, not at the next tick, which
/// may be an hour away. Then rings it each time a worker falls silent for two
/// of its heartbeats: its death is judged then, not up to a poll later.
async fn ring_on_worker_news(events: &WorkerEvents, alarm: &Alarm) {
    loop {
        tokio::time::sleep(SETTLE_LOOK_EVERY).await;
        // Asking for the workers warms them up once listened long enough.
        let _ = events.workers();
        if !events.pending() {
            alarm.ring();
            break;
        }
    }
    loop {
        tokio::time::sleep(SETTLE_LOOK_EVERY).await;
        if events.fell_silent() {
            alarm.ring();
        }
    }
}

/// How often [`ring_on_worker_news`] looks.
const SETTLE_LOOK_EVERY: Duration = Duration::from_millis(250);
