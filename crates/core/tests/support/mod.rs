//! What the core's integration tests share: a quick Overseer and a wait for
//! the report to say something.
#![allow(dead_code)] // each test file uses its own part of this module

use std::sync::Arc;
use std::time::Duration;

use overseer_core::{HealthReport, Overseer, OverseerBuilder};

/// The longest a test waits for something the actors do every 100-200 ms.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// An Overseer on `url` for host `host` that polls, writes and reads every
/// 100-200 ms.
pub fn quick(url: &str, host: &str) -> OverseerBuilder {
    Overseer::builder()
        .database(url)
        .hostname(host)
        .poll_interval(Duration::from_millis(200))
        .poll_timeout(Duration::from_millis(150))
        .heartbeat_interval(Duration::from_millis(200))
        .refresh_interval(Duration::from_millis(100))
}

/// Waits until the published report satisfies `done`, and returns it.
pub async fn report_until(
    overseer: &Overseer,
    what: &str,
    done: impl Fn(&HealthReport) -> bool,
) -> Arc<HealthReport> {
    let mut reports = overseer.watch();
    tokio::time::timeout(PATIENCE, async {
        loop {
            let report = reports.borrow_and_update().clone();
            if done(&report) {
                return report;
            }
            reports.changed().await.expect("the actors run");
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "{what}: not seen within {PATIENCE:?}; last: {}",
            overseer.report().json()
        )
    })
}
