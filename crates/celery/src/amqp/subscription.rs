//! The workers' events on RabbitMQ: a queue of Overseer's own bound to the
//! `celeryev` topic exchange for `worker.#`, consumed on a heartbeating
//! connection of its own, in batches.
//!
//! The queue is bounded by the broker (a length, a TTL, a prefetch), so a
//! flood of events costs this process at most a prefetch's worth. What the
//! bounds drop, the broker drops: when the subscription takes less than the
//! broker sends, the oldest events go, a live worker's heartbeats among them,
//! and its silence would read as its death. So the queue's depth is asked at
//! each status tick (a passive declare): a queue near its length, or holding
//! events near their TTL, puts the subscription [`behind`](WorkerEvents::behind)
//! and nobody is blamed for a silence on it until it has caught up and
//! listened for two heartbeats again.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicQosOptions, ExchangeDeclareOptions,
    QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection};
use tokio::time::{Instant, timeout};
use tokio_stream::{Stream as _, StreamExt};

use super::held::{HELD_CONNECT, STATUS_EVERY};
use super::{AmqpCheck, declare_passive};
use crate::broker::held::{Ended, Link, Refusal};
use crate::events::{self, Event, WorkerEvents};
use overseer_core::secret::scrub_with;

/// The heartbeat, in seconds, of an event subscription's connection. Longer
/// than the watch's: the watch says a broker is gone; the subscription only
/// needs to know that it still hears, and a 1 s heartbeat missed on a loaded
/// host (a worker's shutdown takes both cores for a moment) would turn every
/// worker `unknown` for a reconnect. A broker that closes the socket is lost
/// at once either way.
const EVENTS_HEARTBEAT: u16 = 5;
/// What RabbitMQ's management UI calls an event subscription's connection.
const EVENTS_CONNECTION_NAME: &str = "overseer-events";
/// How long a subscription lets events gather before it takes them. Each
/// event woke three threads (lapin's, a runtime worker, back to lapin's); taken
/// in batches, 1,000 workers' heartbeats cost a wake per batch. A heartbeat is
/// judged this much later at most, against two of its intervals (4 s by default).
const GATHER: Duration = Duration::from_millis(100);
/// How many events RabbitMQ may have in flight to a subscription before it
/// takes (acknowledges) them: what a flood can push into this process at most.
/// The rest waits in the broker's queue, whose TTL and length drop the oldest.
/// A prefetch every [`GATHER`] is 25,000 events a second at most: bench
/// section 10's flood of 20,000 a second is read as it comes (1,000 left the
/// subscription behind it most of the flood), for ~45 MiB.
const PREFETCH: u16 = 2_500;
/// The most events the subscription's queue holds: past it, the broker drops
/// the oldest (a flood's backlog, not this process's memory).
const MAX_QUEUED: u32 = 10_000;
/// How long a message waits in the events queue before RabbitMQ drops it
/// (Celery's own `event_queue_ttl`): a heartbeat read late says nothing.
const TTL: Duration = Duration::from_secs(5);
/// How long the events queue outlives its last consumer should auto-delete
/// not remove it (Celery's `event_queue_expires`).
const EXPIRES: Duration = Duration::from_secs(60);

/// How the subscription stands against its queue, at a status tick.
#[derive(Debug, Clone, PartialEq)]
enum Backlog {
    /// No more waits than one prefetch: the subscription keeps up.
    Clear,
    /// More waits, but the broker drops none of it yet.
    Waiting,
    /// The broker drops events before they are taken: the queue is at its
    /// length (it drops the oldest), or what waits nears its TTL. Why.
    Dropping(String),
}

/// Judges a queue holding `backlog` events while the subscription took
/// `taken` in the last `elapsed`.
fn judge(backlog: u32, taken: u64, elapsed: Duration) -> Backlog {
    if backlog <= u32::from(PREFETCH) {
        return Backlog::Clear;
    }
    let rate = taken as f64 / elapsed.as_secs_f64().max(0.001);
    if backlog >= MAX_QUEUED / 10 * 9 {
        return Backlog::Dropping(format!(
            "its queue holds {backlog} of at most {MAX_QUEUED} events and drops the oldest \
             (taking {rate:.0} a second)"
        ));
    }
    // What waits now is taken in backlog / rate seconds; past half the TTL,
    // the events at its end are near being dropped.
    let wait = f64::from(backlog) / rate.max(1.0);
    if wait >= TTL.as_secs_f64() / 2.0 {
        return Backlog::Dropping(format!(
            "{backlog} events wait in its queue, about {wait:.0}s of taking at {rate:.0} a \
             second, and the broker drops those older than {}s",
            TTL.as_secs()
        ));
    }
    Backlog::Waiting
}

/// The subscription's connection to one broker, for broker `index`'s events:
/// the `worker` group of Celery's events, from a queue of its own (exclusive,
/// auto-delete) bound to the `celeryev` topic exchange for `worker.#`, on a
/// heartbeating connection of its own.
pub(super) struct Subscription<'a> {
    pub(super) check: &'a AmqpCheck,
    pub(super) index: usize,
    pub(super) events: Arc<WorkerEvents>,
}

impl Link for Subscription<'_> {
    type Conn = (Connection, Subscribed);

    async fn connect(&mut self) -> Result<Self::Conn, Ended> {
        let check = self.check;
        let conn = check
            .held_connection(EVENTS_CONNECTION_NAME, EVENTS_HEARTBEAT)
            .await
            .map_err(|reason| Ended::Gone(Some(reason)))?;
        match timeout(HELD_CONNECT, consume(&conn)).await {
            Ok(Ok(subscribed)) => Ok((conn, subscribed)),
            // The user may not use `celeryev` (its permissions or topic
            // permissions).
            Ok(Err(e)) if e.to_string().contains("ACCESS_REFUSED") => {
                Err(Ended::Refused(Refusal {
                    reason: scrub_with(&e.to_string(), &[&check.password]),
                    warning: "the broker refuses the subscription to the workers' heartbeats; \
                              gone workers are not watched on it",
                    note: format!(
                        "broker {} refuses the subscription to the workers' heartbeats \
                         (ACCESS_REFUSED: the user may not use exchange {})",
                        check.identity,
                        events::EXCHANGE
                    ),
                }))
            }
            Ok(Err(e)) => Err(Ended::Gone(Some(scrub_with(
                &format!("broker {}: {e}", check.identity),
                &[&check.password],
            )))),
            Err(_) => Err(Ended::Gone(Some(check.timed_out(HELD_CONNECT)))),
        }
    }

    async fn hold(&mut self, (conn, subscribed): Self::Conn) -> Ended {
        listen(self.check, self.index, &self.events, &conn, subscribed).await;
        Ended::Gone(None)
    }
}

/// A subscription's queue and its consumer.
pub(super) struct Subscribed {
    channel: Channel,
    queue: String,
    consumer: lapin::Consumer,
}

/// Takes the events until the connection or the consumer ends, in batches,
/// and asks the queue's depth at each status tick, and at once after a full
/// batch (the broker had more waiting: a flood may have begun): behind while
/// the broker drops events, or while it cannot say within a tick how many
/// wait; caught up once no more than a prefetch waits.
async fn listen(
    check: &AmqpCheck,
    index: usize,
    events: &WorkerEvents,
    conn: &Connection,
    subscribed: Subscribed,
) {
    let Subscribed {
        channel,
        queue,
        mut consumer,
    } = subscribed;
    let mut status = tokio::time::interval(STATUS_EVERY);
    let mut last: Option<lapin::message::Delivery> = None;
    let mut taken = Taken::new();
    'listening: loop {
        let mut ask = false;
        tokio::select! {
            delivery = consumer.next() => match delivery {
                Some(Ok(delivery)) => {
                    heard(index, events, &delivery);
                    taken.count += 1;
                    last = Some(delivery);
                }
                _ => break,
            },
            _ = status.tick() => {
                if !conn.status().connected() {
                    break;
                }
                ask = true;
            },
        }
        // Let the next events gather in lapin's buffer, then take them all:
        // a wake per batch, not per event.
        tokio::time::sleep(GATHER).await;
        // At most a prefetch's worth: the broker sends no more until these
        // are taken.
        let mut batch = 0;
        for _ in 0..PREFETCH {
            let waiting =
                Pin::new(&mut consumer).poll_next(&mut Context::from_waker(Waker::noop()));
            match waiting {
                Poll::Ready(Some(Ok(delivery))) => {
                    heard(index, events, &delivery);
                    batch += 1;
                    last = Some(delivery);
                }
                Poll::Ready(_) => break 'listening,
                Poll::Pending => break,
            }
        }
        taken.count += batch;
        // Taken, all of them at once: the broker may send the next.
        if let Some(delivery) = last.take()
            && delivery
                .acker
                .ack(BasicAckOptions { multiple: true })
                .await
                .is_err()
        {
            break;
        }
        if (ask || (batch == u64::from(PREFETCH) && taken.since.elapsed() >= ASK_AFTER_FULL))
            && ask_depth(check, index, events, &channel, &queue, &mut taken)
                .await
                .is_err()
        {
            // The queue or the channel is gone: subscribe again.
            break;
        }
    }
}

/// After a full batch, the depth is asked at once, but not more often than
/// this.
const ASK_AFTER_FULL: Duration = Duration::from_millis(250);

/// The events taken since the depth was last asked.
struct Taken {
    count: u64,
    since: Instant,
}

impl Taken {
    fn new() -> Self {
        Self {
            count: 0,
            since: Instant::now(),
        }
    }
}

/// Asks the queue's depth (a passive declare) and records what it says of
/// the subscription; `Err` when the queue or the channel is gone.
async fn ask_depth(
    check: &AmqpCheck,
    index: usize,
    events: &WorkerEvents,
    channel: &Channel,
    queue: &str,
    taken: &mut Taken,
) -> Result<(), ()> {
    let declared = timeout(STATUS_EVERY, declare_passive(channel, queue)).await;
    let backlog = match declared {
        Ok(Ok(declared)) => declared.message_count(),
        Ok(Err(_)) => return Err(()),
        // Too busy to say within a tick how many wait: nothing tells that it
        // drops none, so nobody is blamed meanwhile.
        Err(_) => {
            fall_behind(
                check,
                index,
                events,
                format!(
                    "broker {} did not say within {}s how many of the workers' events wait",
                    check.identity,
                    STATUS_EVERY.as_secs()
                ),
                None,
            );
            return Ok(());
        }
    };
    match judge(backlog, taken.count, taken.since.elapsed()) {
        Backlog::Dropping(why) => fall_behind(
            check,
            index,
            events,
            format!(
                "broker {} drops the workers' events before they are read: {why}",
                check.identity
            ),
            Some(u64::from(backlog)),
        ),
        Backlog::Clear => {
            if events.is_behind(index) {
                tracing::info!(broker = %check.identity, backlog, "the workers' events subscription caught up; silences count again after two heartbeats");
            }
            events.caught_up(index, u64::from(backlog));
        }
        // Behind stays behind until clear; keeping up stays so.
        Backlog::Waiting if events.is_behind(index) => {
            events.behind_still(index, u64::from(backlog));
        }
        Backlog::Waiting => events.caught_up(index, u64::from(backlog)),
    }
    *taken = Taken::new();
    Ok(())
}

/// Puts the subscription behind for `why`, said in the log when it falls.
fn fall_behind(
    check: &AmqpCheck,
    index: usize,
    events: &WorkerEvents,
    why: String,
    backlog: Option<u64>,
) {
    if !events.is_behind(index) {
        tracing::warn!(broker = %check.identity, reason = %why, "the workers' events may be lost before they are read; no worker is blamed for silence until the subscription catches up");
    }
    events.behind(index, why, backlog);
}

/// Records one delivery of the events queue, if it is a worker event.
fn heard(index: usize, events: &WorkerEvents, delivery: &lapin::message::Delivery) {
    if let Some(event) = Event::from_body(&delivery.data) {
        events.heard(index, event);
    }
}

/// Sets up the events queue and starts consuming it. The `celeryev` exchange
/// is declared as Celery declares it (a durable topic exchange), which does
/// nothing when a worker made it first.
async fn consume(conn: &Connection) -> lapin::Result<Subscribed> {
    let channel = conn.create_channel().await?;
    channel
        .exchange_declare(
            events::EXCHANGE.into(),
            lapin::ExchangeKind::Topic,
            ExchangeDeclareOptions {
                durable: true,
                ..ExchangeDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await?;
    let queue = format!("overseer.celeryev.{}", uuid::Uuid::new_v4());
    let millis = |d: Duration| AMQPValue::LongInt(i32::try_from(d.as_millis()).unwrap_or(i32::MAX));
    let mut arguments = FieldTable::default();
    arguments.insert("x-message-ttl".into(), millis(TTL));
    arguments.insert("x-expires".into(), millis(EXPIRES));
    arguments.insert(
        "x-max-length".into(),
        AMQPValue::LongInt(i32::try_from(MAX_QUEUED).unwrap_or(i32::MAX)),
    );
    channel
        .queue_declare(
            queue.as_str().into(),
            QueueDeclareOptions {
                exclusive: true,
                auto_delete: true,
                ..QueueDeclareOptions::default()
            },
            arguments,
        )
        .await?;
    channel
        .queue_bind(
            queue.as_str().into(),
            events::EXCHANGE.into(),
            events::WORKER_KEYS.into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await?;
    channel
        .basic_qos(PREFETCH, BasicQosOptions::default())
        .await?;
    let consumer = channel
        .basic_consume(
            queue.as_str().into(),
            "overseer-events".into(),
            BasicConsumeOptions {
                no_ack: false,
                ..BasicConsumeOptions::default()
            },
            FieldTable::default(),
        )
        .await?;
    Ok(Subscribed {
        channel,
        queue,
        consumer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn a_queue_near_its_length_or_its_ttl_is_dropping_and_a_prefetch_is_clear() {
        // A prefetch or less waits: whatever the rate, nothing is dropped.
        assert_eq!(judge(0, 0, SECOND), Backlog::Clear);
        assert_eq!(judge(u32::from(PREFETCH), 0, SECOND), Backlog::Clear);
        // The queue at its length: the broker drops the oldest, however fast
        // the subscription takes.
        let Backlog::Dropping(why) = judge(MAX_QUEUED, 10_000, SECOND) else {
            panic!("a full queue drops");
        };
        assert_eq!(
            why,
            "its queue holds 10000 of at most 10000 events and drops the oldest (taking 10000 a second)"
        );
        // 3,000 waiting, taken at 1,000 a second: 3 s of a 5 s TTL.
        let Backlog::Dropping(why) = judge(3_000, 2_000, 2 * SECOND) else {
            panic!("events near their TTL are dropped");
        };
        assert!(why.contains("about 3s of taking at 1000 a second"), "{why}");
        // 3,000 waiting, taken at 5,000 a second: gone in 0.6 s.
        assert_eq!(judge(3_000, 5_000, SECOND), Backlog::Waiting);
        // Nothing taken at all while 3,000 wait: they can only expire.
        assert!(matches!(judge(3_000, 0, SECOND), Backlog::Dropping(_)));
    }
}
