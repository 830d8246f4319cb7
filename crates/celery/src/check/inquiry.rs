//! Which queues each worker consumes, known by default.
//!
//! A Redis broker keeps no consumer count, and the workers' heartbeats do not
//! say what they consume: without `worker_ping`, a queue that holds work and
//! that no worker consumes could not be told from one whose consumers are
//! busy. So, with `worker_ping` off and the heartbeats heard, the check asks
//! the workers over Celery's remote control (`active_queues`, the ping's
//! question) when a worker it has not asked is heard online, at most every
//! [`ASK_AT_MOST`], and every [`ASK_EVERY`] besides: a few broadcasts an hour,
//! not one per poll. Airflow's workers answer remote control by default.
//!
//! The answers are kept per worker: its queues fill `detail.workers[].queues`,
//! and a queue's consumers (where the broker cannot count them) are the
//! workers heard `online` that consume it, counted only when every such
//! worker has said what it consumes. A worker that never answers leaves the
//! count unknown: never blamed, never a queue without consumers. The answers
//! make no verdict of their own (that is `worker_ping`'s): a worker that does
//! not answer is not a fault here.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::detail::{BrokerReport, QueueDepth, WorkerPing};

/// Asked at least this often, for workers whose queues changed
/// (`celery control add_consumer`) without a restart.
pub(crate) const ASK_EVERY: Duration = Duration::from_secs(300);

/// Asked at most this often, however many new workers come online: a worker
/// that never answers does not make every poll an inquiry.
pub(crate) const ASK_AT_MOST: Duration = Duration::from_secs(10);

/// How long an inquiry waits for the workers' answers: in a task of its own,
/// past the poll that started it, so that neither a short `poll_timeout` nor a
/// loaded host makes a worker miss it.
pub(crate) const WINDOW: Duration = Duration::from_secs(2);

/// What the workers answered, and when they were last asked.
#[derive(Debug, Default)]
pub(crate) struct Inquiry {
    /// Each worker's queues, as it last answered.
    queues: HashMap<String, Vec<String>>,
    /// When an inquiry last went out.
    asked_at: Option<Instant>,
    /// One is out now: no second until it ends.
    asking: bool,
}

/// An inquiry out: it ends when this is dropped, answered or not.
pub(crate) struct Asking<'a>(pub(crate) &'a std::sync::Mutex<Inquiry>);

impl Asking<'_> {
    /// Takes in the answers.
    pub(crate) fn answered(&self, ping: &WorkerPing) {
        super::lock(self.0).answered(ping, Instant::now());
    }
}

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        super::lock(self.0).asking = false;
    }
}

impl Inquiry {
    /// Whether to ask now, and if so, the inquiry is out from now on: none is
    /// out, and it was never asked, or a worker heard online has not answered
    /// (once [`ASK_AT_MOST`] passed), or [`ASK_EVERY`] passed.
    pub(crate) fn start<'a>(
        &mut self,
        online: impl IntoIterator<Item = &'a str>,
        now: Instant,
    ) -> bool {
        let due = !self.asking && self.due(online, now);
        if due {
            self.asking = true;
            self.asked_at = Some(now);
        }
        due
    }

    fn due<'a>(&self, online: impl IntoIterator<Item = &'a str>, now: Instant) -> bool {
        let Some(asked_at) = self.asked_at else {
            return true;
        };
        let since = now.saturating_duration_since(asked_at);
        since >= ASK_EVERY
            || (since >= ASK_AT_MOST && online.into_iter().any(|w| !self.queues.contains_key(w)))
    }

    /// Takes in an inquiry's answers; one that went out on no broker asked
    /// nobody, and the next poll may ask again.
    pub(crate) fn answered(&mut self, ping: &WorkerPing, now: Instant) {
        if !ping.conclusive() {
            self.asked_at = None;
            return;
        }
        self.asked_at = Some(now);
        for worker in &ping.answered {
            if let Some(queues) = &worker.queues {
                self.queues.insert(worker.name.clone(), queues.clone());
            }
        }
    }

    /// Forgets the workers no longer heard.
    pub(crate) fn keep_only<'a>(&mut self, heard: impl IntoIterator<Item = &'a str>) {
        let heard: std::collections::HashSet<&str> = heard.into_iter().collect();
        self.queues.retain(|name, _| heard.contains(name.as_str()));
    }

    /// The queues `worker` last said it consumes.
    pub(crate) fn queues_of(&self, worker: &str) -> Option<Vec<String>> {
        self.queues.get(worker).cloned()
    }

    /// Fills in the consumers of each queue its broker could not count, from
    /// the workers heard `online`: how many consume it, when every one of them
    /// has said what it consumes (else unknown). With none online there is
    /// nobody to count: unknown, not zero (no worker at all is another finding).
    pub(crate) fn count_consumers(&self, brokers: &mut [BrokerReport], online: &[&str]) {
        if online.is_empty() {
            return;
        }
        let Some(consumed) = online
            .iter()
            .map(|w| self.queues.get(*w))
            .collect::<Option<Vec<_>>>()
        else {
            return;
        };
        let unknown = |q: &&mut QueueDepth| q.consumers.is_none() && q.messages.is_some();
        for queue in brokers
            .iter_mut()
            .flat_map(|b| b.queues.iter_mut())
            .filter(unknown)
        {
            let count = consumed.iter().filter(|q| q.contains(&queue.queue)).count();
            queue.consumers = Some(u32::try_from(count).unwrap_or(u32::MAX));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detail::BrokerStatus;
    use overseer_core::detail::WorkerDetail;

    fn answered(workers: &[(&str, &[&str])]) -> WorkerPing {
        WorkerPing {
            answered: workers
                .iter()
                .map(|(name, queues)| WorkerDetail {
                    name: (*name).into(),
                    queues: Some(queues.iter().map(|q| (*q).to_owned()).collect()),
                    state: None,
                    concurrency: None,
                    free_concurrency: None,
                    heartbeat: None,
                })
                .collect(),
            sent: true,
            ..WorkerPing::default()
        }
    }

    fn broker(queues: &[(&str, u64)]) -> BrokerReport {
        BrokerReport {
            broker: "redis://127.0.0.1:6379/0".into(),
            status: BrokerStatus::Answered,
            queues: queues
                .iter()
                .map(|(q, n)| QueueDepth {
                    queue: (*q).into(),
                    messages: Some(*n),
                    consumers: None,
                    note: None,
                })
                .collect(),
            delivered: None,
            started_at: None,
        }
    }

    #[test]
    fn workers_are_asked_when_new_and_then_rarely() {
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let mut inquiry = Inquiry::default();
        assert!(inquiry.start(["celery@a"], at(0)), "never asked");
        // One out: no second meanwhile.
        assert!(!inquiry.start(["celery@a"], at(0)));
        inquiry.asking = false;
        inquiry.answered(&answered(&[("celery@a", &["default"])]), at(0));
        assert!(!inquiry.start(["celery@a"], at(5)));
        // A new worker: asked, once the last inquiry is 10 s old.
        assert!(!inquiry.start(["celery@a", "celery@b"], at(9)));
        assert!(inquiry.start(["celery@a", "celery@b"], at(10)));
        inquiry.asking = false;
        // One that never answers does not make every poll an inquiry.
        assert!(!inquiry.start(["celery@a", "celery@b"], at(19)));
        // Everyone again after 5 minutes.
        assert!(inquiry.start(["celery@a"], at(310)));
        inquiry.asking = false;
        // An inquiry that went out on no broker asked nobody: asked again.
        inquiry.answered(&WorkerPing::default(), at(310));
        assert!(inquiry.start(["celery@a"], at(311)));
    }

    #[test]
    fn an_inquiry_ends_however_its_task_ends() {
        let mutex = std::sync::Mutex::new(Inquiry::default());
        assert!(super::super::lock(&mutex).start(["celery@a"], Instant::now()));
        {
            let _asking = Asking(&mutex);
            // Dropped unanswered (the task ended, or panicked).
        }
        assert!(!super::super::lock(&mutex).asking);
    }

    #[test]
    fn consumers_are_counted_only_when_every_online_worker_said_its_queues() {
        let mut inquiry = Inquiry::default();
        inquiry.answered(
            &answered(&[
                ("celery@a", &["default"]),
                ("celery@b", &["default", "gpu"]),
            ]),
            Instant::now(),
        );
        let mut brokers = [broker(&[("default", 3), ("gpu", 1), ("nowhere", 2)])];
        inquiry.count_consumers(&mut brokers, &["celery@a", "celery@b"]);
        let counted: Vec<_> = brokers[0].queues.iter().map(|q| q.consumers).collect();
        assert_eq!(counted, [Some(2), Some(1), Some(0)]);
        // A worker online that never answered: not known, never zero.
        let mut brokers = [broker(&[("nowhere", 2)])];
        inquiry.count_consumers(&mut brokers, &["celery@a", "celery@c"]);
        assert_eq!(brokers[0].queues[0].consumers, None);
        // Nobody online: nobody to count.
        inquiry.count_consumers(&mut brokers, &[]);
        assert_eq!(brokers[0].queues[0].consumers, None);
        // Forgotten once no longer heard.
        inquiry.keep_only(["celery@a"]);
        assert_eq!(inquiry.queues_of("celery@b"), None);
        assert_eq!(
            inquiry.queues_of("celery@a"),
            Some(vec!["default".to_owned()])
        );
    }
}
