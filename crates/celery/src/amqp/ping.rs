//! Celery's worker ping (`active_queues`) over a RabbitMQ broker (the exchange of
//! messages is in [`crate::ping`]).
//!
//! A real reply queue, exclusive to our connection, is bound to the reply exchange
//! before the request is published, and deleted afterwards. Were that cleanup cut
//! short, RabbitMQ still removes it: it goes with our connection, and expires
//! (`x-expires`) 10 s after its last use.

use std::time::Duration;

use lapin::message::Delivery;
use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Consumer, ExchangeKind};
use overseer_core::detail::WorkerDetail;
use tokio::time::{Instant, timeout_at};
use tokio_stream::StreamExt as _;

use crate::ping::{Pidbox, Request, Unsent, answers};

/// Pings the workers of a RabbitMQ broker on `conn` until `window_end`: the
/// workers that answered, with the queues each consumes.
///
/// Every round trip is bounded by `window_end`, and the cleanup after it by `cleanup`.
pub(super) async fn ping(
    conn: &lapin::Connection,
    pidbox: &Pidbox,
    window_end: Instant,
    cleanup: Duration,
) -> Result<Vec<WorkerDetail>, Unsent> {
    let request = Request::new(pidbox, window_end);
    let channel = timeout_at(window_end, conn.create_channel())
        .await
        .map_err(|_| Unsent::Late("could not open a channel in time".to_owned()))?
        .map_err(|e| Unsent::Failed(format!("could not open a channel: {e}")))?;
    let mut answered = Vec::new();
    let mut published = false;
    let exchange = timeout_at(window_end, async {
        let mut answers = set_up(&channel, pidbox, &request).await?;
        publish(&channel, pidbox, &request).await?;
        published = true;
        // Until `timeout_at` above ends the whole block at `window_end`: answers are
        // collected into `answered` as they come, so none is lost when it does.
        while let Some(Ok(delivery)) = answers.next().await {
            if let Some(workers) = answer(&delivery, &request.ticket) {
                answered.extend(workers);
            }
        }
        Ok::<(), String>(())
    })
    .await;
    let result = match exchange {
        // The window ended (or the consumer did): what was heard is the answer.
        Ok(Ok(())) => Ok(answered),
        Err(_) if published => Ok(answered),
        Err(_) => Err(Unsent::Late("the ping was not set up in time".to_owned())),
        Ok(Err(e)) => Err(Unsent::Failed(e)),
    };
    clean_up(&channel, &request, cleanup).await;
    result
}

/// Declares the pidbox exchanges and our reply queue, binds it, and starts
/// consuming it: ready for answers before the request goes out.
async fn set_up(channel: &Channel, pidbox: &Pidbox, request: &Request) -> Result<Consumer, String> {
    // Exactly Celery's flags: anything else is refused (406) by an existing exchange.
    let flags = ExchangeDeclareOptions {
        durable: false,
        auto_delete: false,
        ..ExchangeDeclareOptions::default()
    };
    channel
        .exchange_declare(
            pidbox.reply_exchange.as_str().into(),
            ExchangeKind::Direct,
            flags,
            FieldTable::default(),
        )
        .await
        .map_err(|e| format!("could not declare {}: {e}", pidbox.reply_exchange))?;
    channel
        .exchange_declare(
            pidbox.exchange.as_str().into(),
            ExchangeKind::Fanout,
            flags,
            FieldTable::default(),
        )
        .await
        .map_err(|e| format!("could not declare {}: {e}", pidbox.exchange))?;
    let mut arguments = FieldTable::default();
    arguments.insert("x-message-ttl".into(), AMQPValue::LongInt(300_000));
    arguments.insert("x-expires".into(), AMQPValue::LongInt(10_000));
    channel
        .queue_declare(
            request.reply_queue.as_str().into(),
            QueueDeclareOptions {
                exclusive: true,
                auto_delete: true,
                ..QueueDeclareOptions::default()
            },
            arguments,
        )
        .await
        .map_err(|e| format!("could not declare the reply queue: {e}"))?;
    channel
        .queue_bind(
            request.reply_queue.as_str().into(),
            pidbox.reply_exchange.as_str().into(),
            request.oid.as_str().into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .map_err(|e| format!("could not bind the reply queue: {e}"))?;
    channel
        .basic_consume(
            request.reply_queue.as_str().into(),
            "".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..BasicConsumeOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .map_err(|e| format!("could not read the reply queue: {e}"))
}

/// Broadcasts the request on the pidbox exchange, as Celery's `Mailbox` does.
async fn publish(channel: &Channel, pidbox: &Pidbox, request: &Request) -> Result<(), String> {
    let mut headers = FieldTable::default();
    headers.insert("clock".into(), AMQPValue::LongLongInt(1));
    headers.insert("expires".into(), AMQPValue::Double(request.expires));
    channel
        .basic_publish(
            pidbox.exchange.as_str().into(),
            "".into(),
            BasicPublishOptions::default(),
            request.body.as_bytes(),
            BasicProperties::default()
                .with_content_type("application/json".into())
                .with_content_encoding("utf-8".into())
                .with_headers(headers)
                .with_delivery_mode(1)
                .with_priority(0),
        )
        .await
        .map_err(|e| format!("could not send the ping: {e}"))?;
    Ok(())
}

/// The workers in one answer, if it answers `ticket`.
fn answer(delivery: &Delivery, ticket: &str) -> Option<Vec<WorkerDetail>> {
    let theirs = delivery
        .properties
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get("ticket").cloned());
    let matches = match theirs {
        Some(AMQPValue::LongString(t)) => t.as_bytes() == ticket.as_bytes(),
        Some(AMQPValue::ShortString(t)) => t.as_str() == ticket,
        _ => false,
    };
    if !matches {
        return None;
    }
    let content_type = delivery
        .properties
        .content_type()
        .as_ref()
        .map(|c| c.as_str().to_owned());
    Some(answers(&delivery.data, content_type.as_deref()))
}

/// Deletes the reply queue (which also cancels its consumer) and closes the
/// channel, for at most `bound`.
async fn clean_up(channel: &Channel, request: &Request, bound: Duration) {
    let _ = tokio::time::timeout(bound, async {
        let _ = channel
            .queue_delete(
                request.reply_queue.as_str().into(),
                QueueDeleteOptions::default(),
            )
            .await;
        let _ = channel.close(200, "OK".into()).await;
    })
    .await;
}
