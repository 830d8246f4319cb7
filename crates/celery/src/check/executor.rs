//! The check as a supervised executor: what the composition root calls.

use std::time::Duration;

use overseer_core::Executor;
use overseer_core::check::Alarm;
use overseer_core::secret::SecretUrl;

use super::{CeleryCheck, CheckSettings};
use crate::error::Result;
use crate::url::BrokerUrl;

impl CeleryCheck {
    /// This check's URL and settings as a supervised executor named `name`, its
    /// instance the broker's identity. Each incarnation of its actor (the
    /// first, and each restarted after a panic) builds a check of its own, with
    /// new connections and nothing carried over; every one rings the
    /// executor's one alarm.
    pub fn executor(&self, name: &str) -> Executor {
        let alarm = Alarm::new();
        let rings = alarm.clone();
        let (broker, settings) = (self.inner.broker.clone(), self.inner.settings.clone());
        Executor::with_factory(name.to_owned(), move || {
            CeleryCheck::build(&broker, settings.clone(), Some(rings.clone()))
                .expect("the same URL and settings built a check before")
        })
        .with_instance(self.instance().to_owned())
        .with_alarm(alarm)
    }
}

/// The supervised executor for a Celery deployment: what the composition root calls.
///
/// `broker_url` is parsed as Celery would (see [`crate::url`]); the instance is the
/// URL without credentials. A malformed URL is an error whose `Display` is one line
/// without the password.
pub fn executor(
    name: &str,
    broker_url: &SecretUrl,
    queues: &[String],
    worker_ping: bool,
    min_workers: u32,
    poll_timeout: Duration,
) -> Result<Executor> {
    let settings = CheckSettings {
        queues: queues.to_vec(),
        worker_ping,
        min_workers,
        poll_timeout,
        ..CheckSettings::default()
    };
    executor_with(name, broker_url, settings)
}

/// [`executor`] with every setting (control exchange, sentinel master name).
pub fn executor_with(
    name: &str,
    broker_url: &SecretUrl,
    settings: CheckSettings,
) -> Result<Executor> {
    let broker = BrokerUrl::parse(broker_url.expose_secret())?;
    Ok(CeleryCheck::new(&broker, settings)?.executor(name))
}
