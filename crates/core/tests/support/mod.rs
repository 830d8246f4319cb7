//! What the core's integration tests share: a quick Overseer and a wait for
//! the report to say something.
#![allow(dead_code)] // each test file uses its own part of this module

use std::sync::Arc;
use std::time::Duration;

use overseer_core::{HealthReport, Overseer, OverseerBuilder};

/// The longest a test waits for something the actors do every 100-200 ms.
pub use overseer_testkit::wait::PATIENCE;

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

/// A check whose answer the test sets.
#[derive(Clone)]
pub struct Switch(std::sync::Arc<std::sync::Mutex<overseer_core::ExecutorHealth>>);

impl Switch {
    pub fn new(health: overseer_core::ExecutorHealth) -> Self {
        Self(Arc::new(std::sync::Mutex::new(health)))
    }

    pub fn set(&self, health: overseer_core::ExecutorHealth) {
        *self.0.lock().unwrap() = health;
    }
}

#[async_trait::async_trait]
impl overseer_core::HealthCheck for Switch {
    async fn get_health(&self) -> overseer_core::ExecutorHealth {
        self.0.lock().unwrap().clone()
    }
}

/// A Postgres of the test's own (it may be killed and resumed), migrated; or
/// `None` (skipped, or failed under CI) when none can be started.
pub async fn migrated_throwaway_postgres() -> Option<overseer_testkit::throwaway::ThrowawayPostgres>
{
    use overseer_migration::{Migrator, MigratorTrait};
    let server = match overseer_testkit::throwaway::ThrowawayPostgres::start() {
        Ok(server) => server,
        Err(e) => return overseer_testkit::unavailable("a throwaway PostgreSQL server", e),
    };
    let setup = sea_orm::Database::connect(server.url()).await.unwrap();
    Migrator::up(&setup, None).await.unwrap();
    setup.close().await.unwrap();
    Some(server)
}
