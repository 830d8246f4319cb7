//! The ping across brokers: Celery's remote control on every broker that
//! answered, at once, and the consumers it counts where a broker keeps no count.

use std::collections::BTreeMap;
use std::time::Duration;

use overseer_core::detail::WorkerDetail;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::CeleryCheck;
use crate::detail::{BrokerReport, BrokerStatus, QueueDepth, WorkerPing};
use crate::ping::Unsent;

impl CeleryCheck {
    /// Pings the workers on every broker that answered, at the same time, and
    /// counts each broker's consumers that it could not count itself from the
    /// workers that answered on it.
    pub(super) async fn ping(
        &self,
        brokers: &mut [BrokerReport],
        window: Duration,
        cleanup: Duration,
    ) -> WorkerPing {
        // The window starts now: the broker phase may have ended well before its deadline.
        let window_end = Instant::now() + window;
        let mut tasks = JoinSet::new();
        for (index, report) in brokers.iter().enumerate() {
            if report.status != BrokerStatus::Answered {
                continue;
            }
            let this = self.clone();
            tasks.spawn(async move {
                let pidbox = &this.inner.pidbox;
                let workers = match this.inner.targets[index].probed() {
                    Some(probe) => probe.ping(pidbox, window_end, cleanup).await,
                    None => Ok(Vec::new()),
                };
                (index, workers)
            });
        }
        let mut answered = BTreeMap::new();
        let (mut errors, mut failed, mut sent) = (Vec::new(), Vec::new(), false);
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok((index, Ok(workers))) => {
                    sent = true;
                    count_consumers(&mut brokers[index].queues, &workers);
                    // Listed once, even when heard on two brokers of a failover list.
                    for worker in workers {
                        let queues = answered.entry(worker.name).or_insert(None);
                        if queues.is_none() {
                            *queues = worker.queues;
                        }
                    }
                }
                Ok((_, Err(unsent))) => {
                    errors.push(unsent.reason().to_owned());
                    if let Unsent::Failed(reason) = unsent {
                        failed.push(reason);
                    }
                }
                // Overseer's own fault: it says nothing of the broker.
                Err(e) => errors.push(format!("the ping task failed: {e}")),
            }
        }
        WorkerPing {
            answered: answered
                .into_iter()
                .map(|(name, queues)| WorkerDetail {
                    name,
                    queues,
                    state: None,
                    concurrency: None,
                    free_concurrency: None,
                    heartbeat: None,
                })
                .collect(),
            window_ms: u64::try_from(window.as_millis()).unwrap_or(u64::MAX),
            errors,
            sent,
            failed,
        }
    }
}

/// Fills in the consumers of each queue its broker could not count (Redis keeps no
/// count; RabbitMQ's own is kept), from the workers that answered the ping on that
/// broker: how many named the queue. Left unknown when one of them did not say
/// which queues it consumes, since a count without it could be too low, and a
/// queue that could not be read stays unknown too.
fn count_consumers(queues: &mut [QueueDepth], workers: &[WorkerDetail]) {
    let Some(consumed) = workers
        .iter()
        .map(|w| w.queues.as_deref())
        .collect::<Option<Vec<_>>>()
    else {
        return;
    };
    for queue in queues
        .iter_mut()
        .filter(|q| q.consumers.is_none() && q.messages.is_some())
    {
        let count = consumed
            .iter()
            .filter(|names| names.contains(&queue.queue))
            .count();
        queue.consumers = Some(u32::try_from(count).unwrap_or(u32::MAX));
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn depth(queue: &str, messages: Option<u64>, consumers: Option<u32>) -> QueueDepth {
        QueueDepth {
            queue: queue.into(),
            messages,
            consumers,
            note: None,
        }
    }

    /// A worker that answered the ping, with the queues it said (`None`: not said).
    pub(crate) fn worker(name: &str, queues: Option<&[&str]>) -> WorkerDetail {
        WorkerDetail {
            name: name.into(),
            queues: queues.map(|q| q.iter().map(|s| s.to_string()).collect()),
            state: None,
            concurrency: None,
            free_concurrency: None,
            heartbeat: None,
        }
    }

    #[test]
    fn consumers_are_counted_from_the_workers_only_where_the_broker_could_not() {
        let queues = || {
            vec![
                depth("a", Some(0), None),
                depth("b", Some(4), None),
                depth("counted", Some(1), Some(3)),
                depth("unread", None, None),
            ]
        };
        let two = [
            worker("celery@1", Some(&["a", "b"])),
            worker("celery@2", Some(&["a"])),
        ];
        let mut counted = queues();
        count_consumers(&mut counted, &two);
        assert_eq!(
            counted.iter().map(|q| q.consumers).collect::<Vec<_>>(),
            [Some(2), Some(1), Some(3), None]
        );

        let mut none_answered = queues();
        count_consumers(&mut none_answered, &[]);
        assert_eq!(
            none_answered
                .iter()
                .map(|q| q.consumers)
                .collect::<Vec<_>>(),
            [Some(0), Some(0), Some(3), None]
        );

        let mut one_silent = queues();
        count_consumers(
            &mut one_silent,
            &[worker("celery@1", Some(&["a"])), worker("celery@2", None)],
        );
        assert_eq!(
            one_silent.iter().map(|q| q.consumers).collect::<Vec<_>>(),
            [None, None, Some(3), None]
        );
    }
}
