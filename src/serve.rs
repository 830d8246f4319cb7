//! `overseer serve`: the running service.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use overseer_api::ApiState;
use overseer_api::metrics::Metrics;
use overseer_core::actors::PollSettings;
use overseer_core::{Executor, Overseer, Settings, Thresholds};
use overseer_migration::{Migrator, MigratorTrait};
use tokio::sync::watch;

use crate::config::executor::ExecutorKind;
use crate::config::{Config, ExecutorConfig};
use crate::db;

/// Opens the database, brings the schema up to date, supervises the configured
/// executors, and runs until `shutdown` completes (SIGTERM or Ctrl-C, see
/// [`shutdown_signal`]); then writes the last verdicts and ends its rows.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let url = &config.database.url;
    // Take the port first: a port in use stops start-up before any row is written.
    let listener = std::net::TcpListener::bind(config.api.bind)
        .with_context(|| format!("cannot listen on {}", config.api.bind))?;
    let address = listener
        .local_addr()
        .context("while reading the bound address")?;

    let db = db::connect(url).await?;
    Migrator::up(&db, None)
        .await
        .map_err(|e| anyhow::anyhow!(url.scrub_from(&e.to_string())))
        .context("while migrating the schema up")?;
    db.close().await.ok();

    let overseer = Overseer::builder()
        .database(url.expose())
        .settings(settings(&config))
        .executors(
            config
                .executors
                .iter()
                .map(|e| executor(e, config.supervisor.poll_timeout))
                .collect::<anyhow::Result<Vec<_>>>()?,
        )
        .start()
        .await
        .map_err(|e| anyhow::anyhow!(url.scrub_from(&e.to_string())))
        .context("while starting the supervisor")?;

    let (stopping, stopping_rx) = watch::channel(false);
    let state = ApiState {
        reports: overseer.watch(),
        metrics: Arc::new(Metrics::new(
            overseer.executor_stats(),
            overseer.aggregator_stats(),
            overseer.watch(),
        )),
        shutdown: stopping_rx,
    };
    let server = overseer_api::server(state, listener).context("while starting the HTTP server")?;
    let http = server.handle();
    let serving = tokio::spawn(server);
    tracing::info!(
        database = %url,
        hostname = %config.supervisor.hostname,
        executors = config.executors.len(),
        "overseer is running, listening on http://{address}"
    );

    shutdown.await;
    tracing::info!("shutting down: writing the last verdicts");
    let _ = stopping.send(true);
    let (ended, ()) = tokio::join!(overseer.shutdown(), http.stop(true));
    ended
        .map_err(|e| anyhow::anyhow!(url.scrub_from(&e.to_string())))
        .context("while ending the executor rows")?;
    let _ = serving.await;
    tracing::info!("stopped");
    Ok(())
}

/// The actors' settings from the configuration.
pub fn settings(config: &Config) -> Settings {
    let supervisor = &config.supervisor;
    Settings {
        hostname: supervisor.hostname.clone(),
        poll: PollSettings {
            poll_interval: supervisor.poll_interval,
            poll_timeout: supervisor.poll_timeout,
            failures_before_unhealthy: supervisor.failures_before_unhealthy,
            successes_before_healthy: supervisor.successes_before_healthy,
        },
        heartbeat_interval: supervisor.heartbeat_interval,
        refresh_interval: supervisor.refresh_interval,
        thresholds: Thresholds {
            scheduler: config.thresholds.scheduler,
            triggerer: config.thresholds.triggerer,
            dag_processor: config.thresholds.dag_processor,
            executor: executor_threshold(supervisor.heartbeat_interval),
        },
        ..Settings::default()
    }
}

fn executor_threshold(heartbeat_interval: Duration) -> Duration {
    heartbeat_interval.mul_f64(Thresholds::GRACE_MULTIPLIER)
}

/// One configured executor, with the check its kind gets: Celery's checks its
/// broker (the broker, without credentials, is its instance); any other
/// executor has no check yet and reports `unknown`.
pub fn executor(config: &ExecutorConfig, poll_timeout: Duration) -> anyhow::Result<Executor> {
    match (config.parsed_name().kind(), &config.broker_url) {
        (ExecutorKind::Celery, Some(broker)) => overseer_celery::executor(
            &config.name,
            broker,
            &config.queues,
            config.worker_ping,
            config.min_workers,
            poll_timeout,
        )
        .with_context(|| format!("executor {}: broker_url", config.name)),
        _ => Ok(Executor::unchecked(config.name.clone())),
    }
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
