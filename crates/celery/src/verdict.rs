//! The verdict over a failover list, from what its brokers and workers answered:
//! - no broker checked at all (TLS, a transport with no check yet): `unknown`, saying why;
//! - no broker answered: `unhealthy`, with every broker's reason;
//! - fewer workers answered the ping than `min_workers`: `unhealthy`;
//! - else `healthy`, noting the failover brokers that did not answer, if any.

use std::time::Duration;

use overseer_core::{ExecutorHealth, duration};

use crate::detail::{BrokerReport, BrokerStatus, WorkerPing};

/// The verdict and its reason. `window` is how long the ping waited, for the reason.
pub(crate) fn verdict(
    brokers: &[BrokerReport],
    workers: Option<&WorkerPing>,
    window: Duration,
    min_workers: u32,
) -> (ExecutorHealth, Option<String>) {
    let failed: Vec<&str> = brokers
        .iter()
        .filter_map(|b| match &b.status {
            BrokerStatus::Failed(reason) => Some(reason.as_str()),
            _ => None,
        })
        .collect();
    let answered = brokers.iter().any(|b| b.status == BrokerStatus::Answered);
    if !answered && failed.is_empty() {
        let unchecked: Vec<&str> = brokers
            .iter()
            .filter_map(|b| match &b.status {
                BrokerStatus::Unchecked(why) => Some(why.as_str()),
                _ => None,
            })
            .collect();
        let why = unchecked.join("; ");
        return (ExecutorHealth::unknown(why.clone()), Some(why));
    }
    if !answered {
        return (
            ExecutorHealth::unhealthy(failed.join("; ")),
            Some(failed.join("; ")),
        );
    }
    if let Some(ping) = workers {
        let count = ping.answered.len();
        if count < min_workers as usize {
            let mut reason = format!(
                "{count} of at least {min_workers} workers answered ping within {}",
                duration::short(window)
            );
            if !ping.errors.is_empty() {
                reason = format!("{reason} ({})", ping.errors.join("; "));
            }
            return (ExecutorHealth::unhealthy(reason.clone()), Some(reason));
        }
    }
    let note = (!failed.is_empty()).then(|| {
        format!(
            "healthy through failover; not answering: {}",
            failed.join("; ")
        )
    });
    (ExecutorHealth::Healthy, note)
}
