//! `overseer serve`: the running service.

use anyhow::Context;
use overseer_migration::{Migrator, MigratorTrait};

use crate::config::Config;
use crate::db;

/// Opens the database, brings the schema up to date, and runs until `shutdown`
/// completes (SIGTERM or Ctrl-C, see [`shutdown_signal`]).
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let db = db::connect(&config.database.url).await?;
    Migrator::up(&db, None)
        .await
        .map_err(|e| anyhow::anyhow!(config.database.url.scrub_from(&e.to_string())))
        .context("while migrating the schema up")?;
    tracing::info!(
        database = %config.database.url,
        hostname = %config.supervisor.hostname,
        executors = config.executors.len(),
        "overseer is running"
    );

    shutdown.await;
    tracing::info!("shutting down");
    db.close().await.context("while closing the database")?;
    Ok(())
}

/// Completes on SIGTERM or Ctrl-C (SIGINT).
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut sigterm) => {
                sigterm.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}
