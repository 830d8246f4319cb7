//! `overseer serve`: the running service.

use std::time::Duration;

use anyhow::Context;
use overseer_api::ApiState;
use overseer_api::dashboard::FrameAncestors;
use overseer_core::actors::PollSettings;
use overseer_core::secret::SecretUrl;
use overseer_core::{Executor, Overseer, Settings};
use overseer_migration::{Migrator, MigratorTrait};
use tokio::sync::watch;

use crate::config::executor::ExecutorKind;
use crate::config::{Config, ExecutorConfig};
use crate::db;

/// Opens the database, brings the schema up to date, supervises the configured
/// executors, and runs until `shutdown` completes (SIGTERM or Ctrl-C, see
/// [`shutdown_signal`]); then writes the last verdicts and ends its rows. It
/// ends with an error when another writer ended its rows first
/// ([`Overseer::ousted`]).
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let open_files = crate::limits::raise_open_files();
    let url = &config.database.url;
    // Take the port first: a port in use stops start-up before any row is written.
    let listener = std::net::TcpListener::bind(config.api.bind)
        .with_context(|| format!("cannot listen on {}", config.api.bind))?;
    let address = listener
        .local_addr()
        .context("while reading the bound address")?;
    crate::limits::widen_backlog(&listener);
    // Who may frame the dashboard; loading checked that these are origins.
    let frame_ancestors = FrameAncestors::new(&config.api.frame_ancestors)
        .map_err(|problem| anyhow::anyhow!("api.frame_ancestors: {problem}"))?;

    if config.executors.is_empty() {
        tracing::warn!(
            "no executor is configured, so none is supervised: set AIRFLOW__CORE__EXECUTOR \
             (with AIRFLOW__CELERY__BROKER_URL for Celery), OVERSEER_EXECUTORS, or an \
             [[executors]] entry in overseer.toml"
        );
    }
    let db = db::connect(url).await?;
    Migrator::up(&db, None)
        .await
        .map_err(scrubbed(url))
        .context("while migrating the schema up")?;
    db.close().await.ok();

    let overseer = Overseer::builder()
        .database(url.expose_secret())
        .settings(settings(&config))
        .executors(
            config
                .executors
                .iter()
                .map(|e| executor(e, url, config.supervisor.poll_timeout))
                .collect::<anyhow::Result<Vec<_>>>()?,
        )
        .start()
        .await
        .map_err(scrubbed(url))
        .context("while starting the supervisor")?;

    // The history route reads the database through a small pool of its own.
    let history = overseer_core::history::HistoryReader::connect(url.expose_secret())
        .await
        .map_err(scrubbed(url))
        .context("while opening the history reader")?;
    // Alerts read the published reports, on this runtime; deliveries on threads of their own.
    let alerts = crate::alerts::Notifier::start(
        &config.alerts,
        &config.supervisor.hostname,
        &overseer,
        Some(history.clone()),
    );

    let (stopping, stopping_rx) = watch::channel(false);
    let limits = crate::limits::HttpLimits::new(open_files, config.api.max_stream_clients);
    let state = ApiState::new(&overseer, stopping_rx, limits.max_stream_clients)
        .with_history(history)
        .with_frame_ancestors(frame_ancestors)
        .with_extra_metrics(alerts.stats());
    let tls = crate::config::tls::server_config(&config.api)?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let server = overseer_api::server(state, listener, limits.max_connections, tls)
        .context("while starting the HTTP server")?;
    let http = server.handle();
    let serving = tokio::spawn(server);
    tracing::info!(
        database = %url,
        hostname = %config.supervisor.hostname,
        executors = config.executors.len(),
        alerts = config.alerts.len(),
        "overseer is running, listening on {scheme}://{address}"
    );

    // Another Overseer given this hostname may take the rows over: then this
    // one's verdicts would land nowhere, and it leaves, saying why.
    let ousted = tokio::select! {
        () = shutdown => None,
        why = overseer.ousted() => Some(why),
    };
    tracing::info!("shutting down: writing the last verdicts");
    let _ = stopping.send(true);
    let (ended, (), ()) = tokio::join!(overseer.shutdown(), http.stop(true), alerts.stop());
    // The probes are stopped: nothing they left behind runs on.
    tokio::task::spawn_blocking(overseer_checks::orphans::sweep_at_exit)
        .await
        .ok();
    ended
        .map_err(scrubbed(url))
        .context("while ending the executor rows")?;
    let _ = serving.await;
    tracing::info!("stopped");
    match ousted {
        Some(why) => Err(anyhow::anyhow!(why)),
        None => Ok(()),
    }
}

/// An error of the database's driver as one of ours, the database URL's
/// credentials masked wherever the driver quoted it.
fn scrubbed<E: std::fmt::Display>(url: &SecretUrl) -> impl Fn(E) -> anyhow::Error + '_ {
    move |e| anyhow::anyhow!(url.scrub(&e.to_string()))
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
        thresholds: config.thresholds(),
        history: overseer_core::history::HistorySettings {
            retention: config.history.retention,
            ..Default::default()
        },
        ..Settings::default()
    }
}

/// One configured executor, with its check: `check_command` or `check_url` when
/// the entry has one (any kind but Celery; the program, or the URL without its
/// query, is the instance); else Celery's checks its broker (the broker, without
/// credentials, is its instance), and Edge's reads its workers and jobs from
/// `database`, Airflow's metadata database (the edge fleet, named after that
/// database without credentials, is its instance); any other executor has no
/// check and reports `unknown`.
pub fn executor(
    config: &ExecutorConfig,
    database: &SecretUrl,
    poll_timeout: Duration,
) -> anyhow::Result<Executor> {
    Ok(check(config, database, poll_timeout)?
        .with_max_queued_age(config.max_queued_age)
        .with_canary_max_pickup(config.canary_max_pickup)
        .with_capacity(config.parallelism, config.max_at_capacity))
}

/// What the Celery check asks of `[celery] result_backend`
/// ([`overseer_celery::backend`]): `None` for none, for `rpc://` (the broker
/// carries the replies, and is checked) and for a backend no check speaks
/// (said once, at INFO).
fn result_backend(config: &ExecutorConfig) -> Option<overseer_celery::ResultBackend> {
    use overseer_celery::ResultBackend;
    let url = config.result_backend.as_ref()?;
    let raw = url.expose_secret().trim();
    let scheme = raw
        .split("://")
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    let unchecked = |why: &str| {
        tracing::info!(executor = %config.name, backend = %url.redacted(), "the result backend is not checked: {why}");
        None
    };
    match scheme.as_str() {
        "redis" | "rediss" => Some(ResultBackend::Redis(url.clone())),
        "rpc" => None,
        db if db.starts_with("db+") => {
            match crate::config::airflow::sqlalchemy_to_sea_orm(&raw["db+".len()..]) {
                Ok(sea_orm) => Some(ResultBackend::Database {
                    configured: url.clone(),
                    url: SecretUrl::new(sea_orm),
                }),
                Err(problem) => unchecked(&url.scrub(&problem)),
            }
        }
        _ => unchecked("only redis:// and db+ (postgresql, mysql, sqlite) backends are asked"),
    }
}

/// The executor of [`executor`], with its check and nothing else.
fn check(
    config: &ExecutorConfig,
    database: &SecretUrl,
    poll_timeout: Duration,
) -> anyhow::Result<Executor> {
    let name = config.name.to_string();
    if let Some(argv) = &config.check_command {
        return overseer_checks::command::executor(&name, argv, poll_timeout)
            .with_context(|| format!("executor {}: check_command", config.name));
    }
    if let Some(url) = &config.check_url {
        let cacert = config.check_cacert.as_deref().map(std::path::Path::new);
        return overseer_checks::http::executor(&name, url, cacert, poll_timeout)
            .with_context(|| format!("executor {}: check_url", config.name));
    }
    match (config.name.kind(), &config.broker_url) {
        (ExecutorKind::Celery, Some(broker)) => {
            let settings = overseer_celery::CheckSettings {
                queues: config.queues.clone(),
                worker_ping: config.worker_ping,
                worker_events: config.worker_events,
                min_workers: config.min_workers,
                worker_concurrency: Some(config.worker_concurrency),
                poll_timeout,
                broker_use_ssl: config.broker_use_ssl(),
                result_backend: result_backend(config),
                ..overseer_celery::CheckSettings::default()
            };
            overseer_celery::executor_with(&name, broker, settings)
                .with_context(|| format!("executor {}: broker_url", config.name))
        }
        (ExecutorKind::Edge, _) => Ok(overseer_checks::edge::executor(
            &name,
            database,
            &config.queues,
            poll_timeout,
        )),
        _ => Ok(Executor::unchecked(name)),
    }
}

/// Completes on SIGTERM or Ctrl-C (SIGINT). The handlers are installed when this
/// is called, not when the future is first polled: a SIGTERM that arrives just
/// after "overseer is running" is logged still ends the service gracefully.
/// Call it within the runtime.
pub fn shutdown_signal() -> impl Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let listen = |kind: SignalKind, name: &'static str| {
            signal(kind)
                .inspect_err(|e| tracing::error!(error = %e, "cannot listen for {name}"))
                .ok()
        };
        let terminate = listen(SignalKind::terminate(), "SIGTERM");
        let interrupt = listen(SignalKind::interrupt(), "Ctrl-C");
        async move {
            let recv = |signal: Option<tokio::signal::unix::Signal>| async move {
                match signal {
                    Some(mut signal) => {
                        signal.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = recv(terminate) => {}
                () = recv(interrupt) => {}
            }
        }
    }
    #[cfg(not(unix))]
    async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    }
}
