//! How many statements one flush makes the database run, counted where they
//! run and never by `storage::flush`'s own account. The design's bound: one
//! transaction of at most two statements (the heartbeats, the verdicts),
//! whatever the number of executors.
//!
//! Two observers, on 1 executor and on 1,000:
//! - the driver: sqlx logs every statement it executes (target `sqlx::query`),
//!   prepared or not, with the rows it affected; a subscriber of this process
//!   collects them. (sea-orm's metric callback would not do: it never sees
//!   `execute_unprepared`, which the verdict update uses.)
//! - the server, which also counts statements the driver sent as one string:
//!   on Postgres a statement-level trigger on `job` logs each write statement
//!   with its transaction and row count; on MariaDB the session's `Com_*`
//!   counters. SQLite has no server; its driver's log is the count there.
//!
//! A flush whose verdicts did not change runs the heartbeat alone: one
//! statement. The last test holds a whole running [`Overseer`] (its aggregator,
//! the path production takes) to the same bound, as Postgres saw its
//! transactions, and to writes that follow the change: each verdict written
//! once when it changes, never while it holds.

use crate::support;

use std::sync::{Mutex, Once};
use std::time::Duration;

use chrono::Utc;
use overseer_core::entity::job;
use overseer_core::history::{HistoryWrite, flush_with_history};
use overseer_core::storage::{self, ExecutorIdentity, Session, VerdictRow};
use overseer_core::{Executor, ExecutorHealth, Overseer};
use overseer_migration::{Migrator, MigratorTrait};
use overseer_testkit::TestDb;
use sea_orm::{
    ColumnTrait, ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbBackend,
    EntityTrait, PaginatorTrait, QueryFilter, Statement,
};
use support::Switch;
use tracing::field::{Field, Visit};
use tracing::span;

/// The executor counts one flush is measured at: the bound must not move.
const EXECUTORS: [usize; 2] = [1, 1_000];

/// The design's bound on a flush's statements (besides `BEGIN` and `COMMIT`).
const MAX_STATEMENTS: usize = 2;

/// One statement as the driver logged it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Logged {
    /// Its first four words (sqlx's summary), enough to tell statements apart.
    summary: String,
    rows_affected: u64,
}

impl Logged {
    /// `BEGIN`, `COMMIT` and their kin: the transaction, not a statement of it.
    fn is_transaction_control(&self) -> bool {
        let first = self.summary.split_whitespace().next().unwrap_or_default();
        [
            "BEGIN",
            "START",
            "COMMIT",
            "ROLLBACK",
            "SAVEPOINT",
            "RELEASE",
        ]
        .iter()
        .any(|word| first.eq_ignore_ascii_case(word))
    }
}

/// Every statement the drivers of this process logged. Only connections opened
/// with sqlx's logging on log ([`logging_connection`]); the testkit's do not.
static DRIVER_LOG: Mutex<Vec<Logged>> = Mutex::new(Vec::new());

/// A subscriber that keeps sqlx's statement events and nothing else. It is the
/// process's global one: sqlx's SQLite driver logs from a thread of its own.
struct SqlxStatements;

impl tracing::Subscriber for SqlxStatements {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        metadata.target() == "sqlx::query"
    }

    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }

    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}

    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        let mut logged = Logged {
            summary: String::new(),
            rows_affected: 0,
        };
        event.record(&mut logged);
        DRIVER_LOG.lock().unwrap().push(logged);
    }

    fn enter(&self, _: &span::Id) {}

    fn exit(&self, _: &span::Id) {}
}

impl Visit for Logged {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "summary" {
            self.summary = value.to_owned();
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "rows_affected" {
            self.rows_affected = value;
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "summary" {
            self.summary = format!("{value:?}").trim_matches('"').to_owned();
        }
    }
}

/// The statements logged since `from` (an earlier length of the log).
fn logged_since(from: usize) -> Vec<Logged> {
    DRIVER_LOG.lock().unwrap()[from..].to_vec()
}

fn driver_log_len() -> usize {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        tracing::subscriber::set_global_default(SqlxStatements)
            .expect("no other subscriber in this test binary");
    });
    DRIVER_LOG.lock().unwrap().len()
}

/// A one-connection pool to `url` whose driver logs every statement, slow ones
/// included (sea-orm leaves slow statements unlogged by default).
async fn logging_connection(url: &str) -> DatabaseConnection {
    let mut options = ConnectOptions::new(url.to_owned());
    let level = options.get_sqlx_logging_level();
    options
        .max_connections(1)
        .sqlx_logging(true)
        .sqlx_slow_statements_logging_settings(level, Duration::from_secs(1));
    Database::connect(options).await.unwrap()
}

/// What the server counted over one flush.
#[derive(Debug, Default, PartialEq, Eq)]
struct ServerCount {
    /// Statements that wrote (or, on MariaDB, read) the table.
    statements: usize,
    /// Transactions they ran in.
    transactions: usize,
    /// Rows each write statement touched, where the server says (Postgres).
    rows: Vec<u64>,
}

/// Postgres: a statement-level trigger logs each statement that writes `job`,
/// with its transaction and the rows it touched.
const POSTGRES_STATEMENT_LOG: [&str; 5] = [
    "CREATE TABLE statement_log (id bigserial PRIMARY KEY, txid bigint NOT NULL, \
     op text NOT NULL, touched bigint NOT NULL)",
    "CREATE FUNCTION log_update() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
     INSERT INTO statement_log (txid, op, touched) \
     SELECT txid_current(), TG_OP, count(*) FROM touched; RETURN NULL; END $$",
    "CREATE FUNCTION log_other() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
     INSERT INTO statement_log (txid, op, touched) VALUES (txid_current(), TG_OP, -1); \
     RETURN NULL; END $$",
    "CREATE TRIGGER log_updates AFTER UPDATE ON job REFERENCING NEW TABLE AS touched \
     FOR EACH STATEMENT EXECUTE FUNCTION log_update()",
    "CREATE TRIGGER log_others AFTER INSERT OR DELETE ON job \
     FOR EACH STATEMENT EXECUTE FUNCTION log_other()",
];

/// MariaDB: the session counters of every kind of statement a flush could run.
const MARIADB_WRITES: [&str; 8] = [
    "Com_update",
    "Com_update_multi",
    "Com_insert",
    "Com_insert_select",
    "Com_delete",
    "Com_delete_multi",
    "Com_replace",
    "Com_select",
];

/// The server's counters before a flush, to subtract afterwards.
enum ServerMark {
    Postgres {
        last_id: i64,
    },
    MariaDb {
        session: u64,
        counters: Vec<(String, u64)>,
    },
    None,
}

async fn install_server_count(db: &TestDb) {
    if db.backend == DbBackend::Postgres {
        for statement in POSTGRES_STATEMENT_LOG {
            db.conn.execute_unprepared(statement).await.unwrap();
        }
    }
}

/// Reads the server's counters. On MariaDB they are the session's, so they are
/// read on `conn`, the one-connection pool the flush runs on.
async fn server_mark(db: &TestDb, conn: &DatabaseConnection) -> ServerMark {
    match db.backend {
        DbBackend::Postgres => ServerMark::Postgres {
            last_id: scalar(
                &db.conn,
                "SELECT coalesce(max(id), 0)::bigint FROM statement_log",
            )
            .await,
        },
        DbBackend::MySql => {
            let session = scalar(conn, "SELECT CAST(CONNECTION_ID() AS SIGNED)").await as u64;
            let names = [&MARIADB_WRITES[..], &["Com_begin", "Com_commit"]]
                .concat()
                .iter()
                .map(|n| format!("'{n}'"))
                .collect::<Vec<_>>()
                .join(", ");
            let rows = conn
                .query_all_raw(Statement::from_string(
                    DbBackend::MySql,
                    format!("SHOW SESSION STATUS WHERE Variable_name IN ({names})"),
                ))
                .await
                .unwrap();
            let counters = rows
                .iter()
                .map(|row| {
                    let name: String = row.try_get_by_index(0).unwrap();
                    let value: String = row.try_get_by_index(1).unwrap();
                    (name, value.parse().unwrap())
                })
                .collect();
            ServerMark::MariaDb { session, counters }
        }
        _ => ServerMark::None,
    }
}

/// What the server counted between `before` and now (`None` on SQLite).
async fn server_count(
    db: &TestDb,
    conn: &DatabaseConnection,
    before: ServerMark,
) -> Option<ServerCount> {
    match (before, server_mark(db, conn).await) {
        (ServerMark::Postgres { last_id }, ServerMark::Postgres { .. }) => {
            let rows = db
                .conn
                .query_all_raw(Statement::from_string(
                    DbBackend::Postgres,
                    format!(
                        "SELECT txid, touched FROM statement_log WHERE id > {last_id} ORDER BY id"
                    ),
                ))
                .await
                .unwrap();
            let logged: Vec<(i64, i64)> = rows
                .iter()
                .map(|r| {
                    (
                        r.try_get_by_index(0).unwrap(),
                        r.try_get_by_index(1).unwrap(),
                    )
                })
                .collect();
            let mut transactions: Vec<i64> = logged.iter().map(|(txid, _)| *txid).collect();
            transactions.dedup();
            Some(ServerCount {
                statements: logged.len(),
                transactions: transactions.len(),
                rows: logged.iter().map(|(_, n)| *n as u64).collect(),
            })
        }
        (
            ServerMark::MariaDb {
                session,
                counters: before,
            },
            ServerMark::MariaDb {
                session: now,
                counters: after,
            },
        ) => {
            assert_eq!(session, now, "MariaDB: the flush ran on another session");
            let delta = |name: &str| {
                let of = |counters: &[(String, u64)]| {
                    counters
                        .iter()
                        .find(|(n, _)| n.eq_ignore_ascii_case(name))
                        .map(|(_, v)| *v)
                        .unwrap_or_else(|| panic!("MariaDB has no counter {name}"))
                };
                of(&after) - of(&before)
            };
            // The mark itself ran one SELECT (CONNECTION_ID) after the flush.
            let statements = MARIADB_WRITES.iter().map(|n| delta(n)).sum::<u64>() - 1;
            assert_eq!(
                delta("Com_begin"),
                delta("Com_commit"),
                "MariaDB: every transaction begun was committed"
            );
            Some(ServerCount {
                statements: statements as usize,
                transactions: delta("Com_commit") as usize,
                rows: Vec::new(),
            })
        }
        _ => None,
    }
}

/// The first few items and how many there are, for a failure message.
fn brief<T: std::fmt::Debug>(items: &[T]) -> String {
    const SHOWN: usize = 5;
    let more = match items.len().saturating_sub(SHOWN) {
        0 => String::new(),
        more => format!(" and {more} more"),
    };
    format!("{:?}{more}", &items[..items.len().min(SHOWN)])
}

async fn scalar(conn: &DatabaseConnection, sql: &str) -> i64 {
    conn.query_one_raw(Statement::from_string(conn.get_database_backend(), sql))
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{sql}: no row"))
        .try_get_by_index(0)
        .unwrap()
}

/// `n` executors registered for a session of their own.
async fn registered(db: &TestDb, n: usize) -> (Session, Vec<i32>) {
    let session = Session::start(format!("sched-{n}"), "airflow");
    let keys: Vec<ExecutorIdentity> = (0..n)
        .map(|i| ExecutorIdentity {
            executor_class: format!("e{i}:CeleryExecutor"),
            instance: Some(format!("redis://broker-{i}:6379/0")),
        })
        .collect();
    let ids = storage::register(&db.conn, &session, &keys).await.unwrap();
    (session, ids)
}

/// A changed verdict for every executor: the most a flush ever writes.
fn verdicts(ids: &[i32]) -> Vec<VerdictRow> {
    let checked_at = Utc::now();
    ids.iter()
        .enumerate()
        .map(|(i, id)| VerdictRow {
            id: *id,
            health: if i % 2 == 0 {
                ExecutorHealth::Healthy
            } else {
                ExecutorHealth::unhealthy(format!("broker {i} refused the connection"))
            },
            note: None,
            checked_at,
        })
        .collect()
}

/// One test for every backend: the driver's log is the whole process's, so
/// this is the one test of the binary that opens a logging connection.
#[tokio::test]
async fn one_flush_runs_at_most_two_statements_in_one_transaction_whatever_the_executor_count() {
    for db in overseer_testkit::all_backends().await {
        Migrator::up(&db.conn, None).await.unwrap();
        install_server_count(&db).await;
        let conn = logging_connection(&db.url).await;
        let backend = db.backend;

        let mut seen = Vec::new();
        for n in EXECUTORS {
            let (session, ids) = registered(&db, n).await;
            let verdicts = verdicts(&ids);

            let mark = server_mark(&db, &conn).await;
            let from = driver_log_len();
            flush_with_history(
                &conn,
                &session,
                Utc::now(),
                &verdicts,
                &HistoryWrite::default(),
            )
            .await
            .unwrap();
            let ran = logged_since(from);
            let server = server_count(&db, &conn, mark).await;

            // The driver: at most two statements, each writing every row once.
            let statements: Vec<&Logged> =
                ran.iter().filter(|s| !s.is_transaction_control()).collect();
            assert!(
                statements.len() <= MAX_STATEMENTS,
                "{backend:?}, {n} executors: the driver ran {} statements: {}",
                statements.len(),
                brief(&ran)
            );
            assert!(
                statements
                    .iter()
                    .all(|s| s.summary.to_ascii_uppercase().starts_with("UPDATE")),
                "{backend:?}: {}",
                brief(&ran)
            );
            let rows: Vec<u64> = statements.iter().map(|s| s.rows_affected).collect();
            assert_eq!(
                rows,
                [n as u64, n as u64],
                "{backend:?}: the heartbeats, then the verdicts, of all {n} executors"
            );

            // The server: the same, in one transaction.
            if let Some(server) = &server {
                assert!(
                    server.statements <= MAX_STATEMENTS,
                    "{backend:?}, {n} executors: the server ran {} statements in {} \
                     transactions; rows each touched (Postgres only): {}",
                    server.statements,
                    server.transactions,
                    brief(&server.rows)
                );
                assert_eq!(server.transactions, 1, "{backend:?}");
                if backend == DbBackend::Postgres {
                    assert_eq!(server.rows, [n as u64, n as u64], "{backend:?}");
                }
            }

            // And the statements did the work: every verdict is in its row.
            let healthy = job::Entity::find()
                .filter(job::Column::Hostname.eq(session.hostname.as_str()))
                .filter(job::Column::ExecutorHealth.eq("healthy"))
                .count(&db.conn)
                .await
                .unwrap();
            assert_eq!(healthy as usize, n.div_ceil(2), "{backend:?}");

            seen.push((statements.len(), server.map(|s| s.statements)));

            // With no verdict changed since, a flush is the heartbeat alone: one
            // statement, touching every row of the session.
            let mark = server_mark(&db, &conn).await;
            let from = driver_log_len();
            let ran_count =
                flush_with_history(&conn, &session, Utc::now(), &[], &HistoryWrite::default())
                    .await
                    .unwrap();
            let ran = logged_since(from);
            let server = server_count(&db, &conn, mark).await;
            let rows: Vec<u64> = ran
                .iter()
                .filter(|s| !s.is_transaction_control())
                .map(|s| s.rows_affected)
                .collect();
            // The heartbeat says it reached every row of the session (what
            // tells an Overseer that another writer ended none of them).
            assert_eq!(
                (ran_count.statements, ran_count.open, rows),
                (1, n as u64, vec![n as u64]),
                "{backend:?}, {n} executors, nothing changed: {}",
                brief(&ran)
            );
            if let Some(server) = server {
                assert_eq!(
                    (server.statements, server.transactions),
                    (1, 1),
                    "{backend:?}, {n} executors, nothing changed"
                );
            }
        }
        // Constant: a thousand executors cost what one does.
        assert!(
            seen.windows(2).all(|w| w[0] == w[1]),
            "{backend:?}: statements per executor count {EXECUTORS:?}: {seen:?}"
        );
        conn.close().await.unwrap();
    }
}

/// How long the running Overseer may take to make the flushes the test reads.
const PATIENCE: Duration = Duration::from_secs(30);

/// Heartbeat-only flushes the running Overseer must have made, with no
/// verdict changing, before the test reads what the server saw.
const FLUSHES_SEEN: i64 = 3;

/// Waits (boundedly) until the scalar `sql` reads at least `at_least`.
async fn scalar_until(db: &TestDb, what: &str, sql: &str, at_least: i64) -> i64 {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let value = scalar(&db.conn, sql).await;
        if value >= at_least {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: {value} of {at_least} within {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What the server logged after statement `mark`: the rows every verdict
/// update touched (an update that is not the first statement of its
/// transaction: the heartbeat comes first), and the flushes that heartbeat
/// every one of `n` rows and write nothing else.
fn after(mark: i64, n: usize) -> (String, String) {
    (
        format!(
            "SELECT coalesce(sum(touched), 0)::bigint FROM statement_log s WHERE id > {mark} \
             AND op = 'UPDATE' AND id > (SELECT min(id) FROM statement_log t WHERE t.txid = s.txid)"
        ),
        format!(
            "SELECT count(*) FROM (SELECT txid FROM statement_log WHERE id > {mark} \
             GROUP BY txid HAVING count(*) = 1 AND max(touched) = {n}) AS flushes"
        ),
    )
}

/// A running Overseer, as Postgres saw its transactions: every flush heartbeats
/// all 1,000 rows in one statement, a verdict is written once when it changes
/// and never while it holds, and no transaction runs more than two statements.
#[tokio::test]
async fn a_running_overseer_writes_heartbeats_every_flush_and_verdicts_only_when_they_change_on_postgres()
 {
    let Some(db) = overseer_testkit::postgres().await else {
        return;
    };
    Migrator::up(&db.conn, None).await.unwrap();
    install_server_count(&db).await;

    let n = EXECUTORS[1];
    let (even, odd) = (
        Switch::new(ExecutorHealth::Healthy),
        Switch::new(ExecutorHealth::Healthy),
    );
    let executors = (0..n).map(|i| {
        let check = if i % 2 == 0 {
            even.clone()
        } else {
            odd.clone()
        };
        Executor::new(format!("e{i}:CeleryExecutor"), check)
            .with_instance(format!("redis://broker-{i}:6379/0"))
    });
    let overseer = Overseer::builder()
        .database(&db.url)
        .hostname("sched-1")
        .executors(executors)
        .poll_interval(Duration::from_secs(1))
        .poll_timeout(Duration::from_millis(900))
        .heartbeat_interval(Duration::from_millis(100))
        .refresh_interval(Duration::from_millis(100))
        .start()
        .await
        .unwrap();

    // Every executor's first verdict is written once: 1,000 verdict rows.
    let (verdicts, _) = after(0, n);
    let written = scalar_until(&db, "the first verdicts written", &verdicts, n as i64).await;
    assert_eq!(written, n as i64, "each first verdict written once");

    // While the verdicts hold, flushes heartbeat and write nothing more.
    let mark = scalar(
        &db.conn,
        "SELECT coalesce(max(id), 0)::bigint FROM statement_log",
    )
    .await;
    let (verdicts, heartbeats_only) = after(mark, n);
    scalar_until(
        &db,
        "heartbeat-only flushes",
        &heartbeats_only,
        FLUSHES_SEEN,
    )
    .await;
    assert_eq!(
        scalar(&db.conn, &verdicts).await,
        0,
        "no verdict rewritten while it holds"
    );

    // Half the executors change: their 500 rows are written, once.
    odd.set(ExecutorHealth::unhealthy("broker refused the connection"));
    let written = scalar_until(
        &db,
        "the changed verdicts written",
        &verdicts,
        (n / 2) as i64,
    )
    .await;
    let mark = scalar(
        &db.conn,
        "SELECT coalesce(max(id), 0)::bigint FROM statement_log",
    )
    .await;
    let (_, heartbeats_only) = after(mark, n);
    scalar_until(
        &db,
        "heartbeat-only flushes after the change",
        &heartbeats_only,
        FLUSHES_SEEN,
    )
    .await;
    assert_eq!(
        (written, scalar(&db.conn, &verdicts).await),
        ((n / 2) as i64, (n / 2) as i64),
        "only the changed verdicts written, once"
    );
    overseer.shutdown().await.unwrap();

    // Every transaction that wrote `job`, from start-up (closing crashed rows,
    // inserting 1,000) to shutdown (the last flush, then ending the rows).
    let transactions = db
        .conn
        .query_all_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT count(*), max(touched) FROM statement_log GROUP BY txid ORDER BY min(id)",
        ))
        .await
        .unwrap();
    let transactions: Vec<(i64, i64)> = transactions
        .iter()
        .map(|r| {
            (
                r.try_get_by_index(0).unwrap(),
                r.try_get_by_index(1).unwrap(),
            )
        })
        .collect();
    assert!(
        transactions
            .iter()
            .all(|(statements, _)| *statements as usize <= MAX_STATEMENTS),
        "a transaction ran more than {MAX_STATEMENTS} statements: {}",
        brief(
            &transactions
                .iter()
                .filter(|(statements, _)| *statements as usize > MAX_STATEMENTS)
                .collect::<Vec<_>>()
        )
    );
}
