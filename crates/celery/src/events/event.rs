//! One event of Celery's `worker` group, read from a message body (Celery's
//! JSON, bare on RabbitMQ, in kombu's envelope on Redis): only the fields the
//! workers' state needs, each in the shape a worker may send it.

use std::borrow::Cow;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::Deserialize;
use serde_json::Value;

/// One event of the `worker` group, as a worker sent it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Event {
    /// `worker-heartbeat`, `worker-online` or `worker-offline`.
    pub(super) kind: Kind,
    /// Its node name (`celery@host`).
    pub(super) hostname: String,
    pub(super) freq: Option<f64>,
    pub(super) active: Option<u64>,
    pub(super) processed: Option<u64>,
    pub(super) loadavg: Option<[f64; 3]>,
    pub(super) software: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Heartbeat,
    Online,
    Offline,
}

impl Event {
    /// The event in a message body (Celery's JSON), if it is one of the
    /// `worker` group's. Read into a struct of borrowed fields, every other
    /// field skipped unread: a thousand workers send 500 of these a second.
    pub(crate) fn from_body(body: &[u8]) -> Option<Self> {
        let event: RawEvent<'_> = serde_json::from_slice(body).ok()?;
        let kind = match &*event.kind {
            "worker-heartbeat" => Kind::Heartbeat,
            "worker-online" => Kind::Online,
            "worker-offline" => Kind::Offline,
            _ => return None,
        };
        let hostname = event.hostname;
        if hostname.is_empty() || hostname.len() > 255 {
            return None;
        }
        let loadavg = event
            .loadavg
            .as_ref()
            .and_then(Value::as_array)
            .and_then(
                |l| match l.iter().map(Value::as_f64).collect::<Option<Vec<_>>>()?[..] {
                    [a, b, c] => Some([a, b, c]),
                    _ => None,
                },
            );
        let text = |v: &Option<Value>| v.as_ref().and_then(Value::as_str).map(str::to_owned);
        let software = match (text(&event.sw_ident), text(&event.sw_ver)) {
            (Some(ident), Some(ver)) => Some(format!("{ident} {ver}")),
            (None, Some(ver)) => Some(ver),
            _ => None,
        }
        .map(|s| s.chars().take(64).collect());
        let number = |v: &Option<Value>| v.as_ref().and_then(Value::as_u64);
        Some(Self {
            kind,
            hostname: hostname.into_owned(),
            freq: event.freq.as_ref().and_then(Value::as_f64),
            active: number(&event.active),
            processed: number(&event.processed),
            loadavg,
            software,
        })
    }

    /// The event in a kombu Redis envelope (a JSON message whose `body` is the
    /// event, base64-encoded).
    pub(crate) fn from_redis_envelope(raw: &[u8]) -> Option<Self> {
        let envelope: Envelope<'_> = serde_json::from_slice(raw).ok()?;
        match envelope.properties.and_then(|p| p.body_encoding).as_deref() {
            Some("base64") => Self::from_body(&BASE64.decode(envelope.body.as_bytes()).ok()?),
            _ => Self::from_body(envelope.body.as_bytes()),
        }
    }
}

/// The fields of a Celery event this module reads; any other is skipped.
/// Those a worker might send in another shape are kept as values, so that one
/// odd field never loses the whole heartbeat.
#[derive(Deserialize)]
struct RawEvent<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    hostname: Cow<'a, str>,
    freq: Option<Value>,
    active: Option<Value>,
    processed: Option<Value>,
    loadavg: Option<Value>,
    sw_ident: Option<Value>,
    sw_ver: Option<Value>,
}

/// Kombu's Redis envelope, as far as this module reads it.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    body: Cow<'a, str>,
    #[serde(borrow)]
    properties: Option<Properties<'a>>,
}

#[derive(Deserialize)]
struct Properties<'a> {
    #[serde(borrow)]
    body_encoding: Option<Cow<'a, str>>,
}
