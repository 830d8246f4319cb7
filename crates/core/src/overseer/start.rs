//! What [`OverseerBuilder::start`](super::OverseerBuilder::start) runs on the
//! actors' thread, in order: the database opened and its schema checked, the
//! rows a crash of this host left open closed, the executors' rows
//! registered, a first report read, then the core actors' makers and the
//! executors' actors, each start-up step against the database bounded by a
//! timeout of its own.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use chrono::Utc;
use sea_orm::{Database, DatabaseConnection};
use tokio::sync::watch;

use super::Settings;
use super::thread::Started;
use crate::actors::aggregator::{AggregatorSettings, Ousted, UnwrittenTransitions};
use crate::actors::{Aggregator, ExecutorActor, HealthSupervisor, QueuedSource};
use crate::airflow::queued::QueuedBoard;
use crate::airflow::routes::Routes;
use crate::check::alarm::AlarmBoard;
use crate::check::{AsyncChecks, Executor};
use crate::error::{Error, Result};
use crate::history::Transition;
use crate::report::HealthReport;
use crate::stats::{AggregatorStats, ExecutorStats};
use crate::storage::{self, ExecutorIdentity, Session};

/// One start-up step against the database, given `timeout` to answer.
async fn bounded<T>(
    what: &str,
    timeout: Duration,
    step: impl Future<Output = Result<T>>,
) -> Result<T> {
    tokio::time::timeout(timeout, step)
        .await
        .unwrap_or_else(|_| {
            Err(Error::Runtime(format!(
                "the database did not answer within {} when asked to {what} at start-up",
                crate::duration::short(timeout)
            )))
        })
}

/// Runs on the actors' thread: everything `start` promises, in order.
pub(super) async fn start_actors(
    url: String,
    executors: Vec<Executor>,
    stats: Vec<Arc<ExecutorStats>>,
    settings: Settings,
    checks: AsyncChecks,
    aggregator_stats: Arc<AggregatorStats>,
    ousted: Ousted,
) -> Result<Started> {
    let db = open(&url, &settings).await?;
    let keys: Vec<ExecutorIdentity> = executors.iter().map(Executor::identity).collect();
    let session = Session::start(settings.hostname.clone(), settings.unixname.clone());
    let (job_ids, unsupervised) = take_rows(&db, &settings, &session, &keys).await?;
    let (reports_tx, reports_rx) = watch::channel(Arc::new(first_report(&db, &settings).await?));

    // The core actors are built by the actors' thread, and built again should
    // one of them stop or panic (see `thread`).
    let reports_tx = Arc::new(reports_tx);
    let routes = Arc::new(Routes::new(
        executors.iter().map(|e| e.executor_class.as_str()),
    ));
    let aggregator_settings = aggregator_settings(&settings, routes.clone(), ousted);
    let rows: Vec<(i32, ExecutorIdentity)> = job_ids.into_iter().zip(keys).collect();
    let (board, queued_reader) = start_reader(db.clone(), &executors, routes.clone(), &settings);
    let stats_for_restarts = aggregator_stats.clone();
    let unwritten = Arc::new(UnwrittenTransitions::holding(unsupervised));
    let make_aggregator = move || {
        Aggregator::new(
            db.clone(),
            session.clone(),
            aggregator_settings.clone(),
            rows.clone(),
            reports_tx.clone(),
            aggregator_stats.clone(),
            unwritten.clone(),
        )
    };
    let default_executor = routes.route(None, None);
    let (polled, alarms) = start_executors(
        executors,
        stats,
        &settings,
        &checks,
        &board,
        default_executor,
    );
    let poll = settings.poll;
    let make_supervisor =
        move |sink| HealthSupervisor::new(poll, polled.clone(), sink).with_alarms(alarms.clone());
    tracing::info!(hostname = %settings.hostname, "supervising executors");
    Ok(Started {
        supervisor: Box::new(make_supervisor),
        aggregator: Box::new(make_aggregator),
        stats: stats_for_restarts,
        reports: reports_rx,
        background: vec![queued_reader],
    })
}

/// What the aggregator is told of the settings.
fn aggregator_settings(
    settings: &Settings,
    routes: Arc<Routes>,
    ousted: Ousted,
) -> AggregatorSettings {
    AggregatorSettings {
        heartbeat_interval: settings.heartbeat_interval,
        refresh_interval: settings.refresh_interval,
        thresholds: settings.thresholds,
        history: settings.history,
        routes,
        ousted,
    }
}

/// The database, its schema checked. Connecting is bounded by the pool's
/// acquire timeout; each step after it by a timeout of its own, so a database
/// that takes connections but does not answer (frozen, or a table held by a
/// lock that is not let go) fails start-up with an error naming the step
/// instead of holding it forever.
async fn open(url: &str, settings: &Settings) -> Result<DatabaseConnection> {
    let db = Database::connect(crate::connect::options(url)).await?;
    let read_timeout = crate::connect::full_read_timeout(settings.refresh_interval);
    bounded("check the schema", read_timeout, async {
        storage::check_schema(&db).await?;
        crate::history::check_schema(&db).await
    })
    .await?;
    Ok(db)
}

/// The report of the table as it is, published before the first verdict.
async fn first_report(db: &DatabaseConnection, settings: &Settings) -> Result<HealthReport> {
    let now = Utc::now();
    let rows = bounded(
        "read the job table",
        crate::connect::full_read_timeout(settings.refresh_interval),
        storage::report_rows(db, now, settings.thresholds.longest()),
    )
    .await?;
    Ok(HealthReport::build(&rows, true, &settings.thresholds, now))
}

/// This session's rows: the ones a crash of this host left open closed (or
/// the refusal naming another live owner), the time no Overseer supervised
/// them read from the history, and a `running` row registered per executor.
/// Returns the rows' ids, in executor order, and the history's gaps.
async fn take_rows(
    db: &DatabaseConnection,
    settings: &Settings,
    session: &Session,
    keys: &[ExecutorIdentity],
) -> Result<(Vec<i32>, Vec<Transition>)> {
    let read_timeout = crate::connect::full_read_timeout(settings.refresh_interval);
    let write_timeout = crate::connect::MAX_TIMEOUT;
    // Read bounded per read; the wait between reads is the owner check's own.
    let crashed = bounded(
        "read the rows of this hostname left open",
        read_timeout + super::owner::window(settings.heartbeat_interval),
        super::owner::crashed_rows(
            db,
            &session.hostname,
            keys,
            settings.heartbeat_interval,
            session.started,
        ),
    )
    .await?;
    let closed = bounded(
        "close the rows a crash left open",
        write_timeout,
        storage::close_crashed(db, &crashed, session.started),
    )
    .await?;
    if closed > 0 {
        tracing::warn!(
            rows = closed,
            "closed executor rows a crash left open on this host"
        );
    }
    let unsupervised = unsupervised(db, settings, session, keys).await;
    let job_ids = bounded(
        "register the executors' rows",
        write_timeout,
        storage::register(db, session, keys),
    )
    .await?;
    Ok((job_ids, unsupervised))
}

/// The time no Overseer supervised these rows, when they went stale
/// meanwhile: queued for the history before the first verdict, which then
/// says when supervision resumed. Not a reason to fail the start.
async fn unsupervised(
    db: &DatabaseConnection,
    settings: &Settings,
    session: &Session,
    keys: &[ExecutorIdentity],
) -> Vec<Transition> {
    let read = crate::history::unsupervised_since_earlier_runs(
        db,
        &session.hostname,
        keys,
        session.started,
        settings.thresholds.executor,
    );
    let read_timeout = crate::connect::full_read_timeout(settings.refresh_interval);
    match bounded("read the history earlier runs left", read_timeout, read).await {
        Ok(gaps) => gaps,
        Err(e) => {
            tracing::warn!(
                error = %e,
                "cannot read the history: the time Overseer was not running is not recorded in it"
            );
            Vec::new()
        }
    }
}

/// Airflow's queued task instances: one reader for every executor, off the
/// report's path, on the actors' runtime; each executor's actor takes its
/// share of the board at every poll.
fn start_reader(
    db: DatabaseConnection,
    executors: &[Executor],
    routes: Arc<Routes>,
    settings: &Settings,
) -> (Arc<QueuedBoard>, tokio::task::JoinHandle<()>) {
    let board = Arc::new(QueuedBoard::default());
    let mut limits: Vec<Duration> = executors
        .iter()
        .map(|e| e.max_queued_age)
        .filter(|age| !age.is_zero())
        .collect();
    // The lost-work rule counts the task instances queued long enough for
    // their message to have reached the broker.
    limits.push(crate::rules::lost::SETTLE);
    limits.sort();
    limits.dedup();
    let reader = actix_rt::spawn(crate::airflow::reader::run(
        db,
        board.clone(),
        routes,
        limits,
        settings.poll.poll_interval,
        crate::connect::full_read_timeout(settings.poll.poll_timeout),
        settings.thresholds.scheduler,
    ));
    (board, reader)
}

/// Each executor's actor, started under its own supervision, and the alarms
/// of the checks that hold a connection (rung, the executor is polled at
/// once: `check::alarm`).
fn start_executors(
    executors: Vec<Executor>,
    stats: Vec<Arc<ExecutorStats>>,
    settings: &Settings,
    checks: &AsyncChecks,
    board: &Arc<QueuedBoard>,
    default_executor: Option<usize>,
) -> (Vec<Polled>, Arc<AlarmBoard>) {
    let alarms = Arc::new(AlarmBoard::default());
    for (index, executor) in executors.iter().enumerate() {
        if let Some(alarm) = &executor.alarm {
            alarm.attach(alarms.clone(), index);
        }
    }
    let polled = executors
        .into_iter()
        .zip(stats)
        .enumerate()
        .map(|(index, (executor, stats))| {
            let label = executor.label();
            let actor = ExecutorActor::new(
                executor,
                stats.clone(),
                settings.restart_policy,
                checks.clone(),
            )
            .with_queued(QueuedSource {
                board: board.clone(),
                index,
                default: default_executor == Some(index),
            });
            (actor.start_supervised(), stats, label)
        })
        .collect();
    (polled, alarms)
}

/// An executor's actor as the supervisor polls it: its address, its
/// counters and its label.
type Polled = (Addr<ExecutorActor>, Arc<ExecutorStats>, String);
