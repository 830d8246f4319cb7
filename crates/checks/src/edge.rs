//! [`EdgeCheck`]: Airflow's EdgeExecutor (`apache-airflow-providers-edge3`),
//! judged from the two tables it keeps in Airflow's metadata database.
//!
//! The Edge executor has no broker: the scheduler writes each task to
//! `edge_job` (`state = 'queued'`, its `queue`), and each `airflow edge worker`
//! heartbeats through the api-server into its `edge_worker` row (`state`,
//! `queues`, `sysinfo`). The scheduler marks a worker `unknown` when its row
//! has not moved for 5 of `[edge] heartbeat_interval`. Everything the check
//! knows is in those rows, read at each poll with two statements; the
//! *instance* is the deployment's edge fleet, named after the database that
//! holds it, without credentials (`edge_worker@db:5432/airflow`).
//!
//! | what the rows say | the verdict |
//! | --- | --- |
//! | a connected worker takes jobs from every queue where jobs wait | `healthy` |
//! | no worker connected while jobs wait | `unhealthy: no edge worker is connected while 3 jobs wait (default: 2, gpu: 1)` |
//! | every worker `unknown` or `offline`, jobs waiting or not | `unhealthy: every edge worker is unknown or offline (w1: unknown, w2: offline)` |
//! | a queue with waiting jobs that no connected worker serves | `unhealthy: queue gpu: 1 job waiting and no connected edge worker serves it` |
//! | ... whose connected workers are paused (maintenance, shutting down) | `unhealthy: queue gpu: 1 job waiting and its edge workers take no jobs (w1: maintenance mode)` |
//! | no worker and nothing waiting (a fleet scaled to zero) | `healthy` |
//! | no `edge_worker` table (the provider never migrated) | `unknown` |
//! | the database does not answer within the deadline, or refuses | `unhealthy: cannot read the edge_worker table: ...` |
//!
//! Worker and queue names come from rows any client can write: in a reason
//! each is cut to 40 characters, a list names a few and counts the rest
//! (`and 8 more`), and the whole is one line of at most 240 characters
//! ([`overseer_core::reason`]), whatever the names hold.
//!
//! When the verdict is `unhealthy`, its reason also names the workers that
//! are `unknown` (no heartbeat for 5 heartbeats) while others are connected,
//! and those whose `sysinfo` status is a warning or worse
//! (`edge worker w3 reports warning: Healthy but version mismatch`). A
//! `healthy` verdict carries no reason in Overseer's model; the detail shows
//! every worker's state then.
//!
//! A worker with no `queues` (null or empty) fetches jobs of every queue, as
//! the provider's `jobs/fetch` route does. A worker is *connected* unless its
//! state is `unknown`, `offline` or `offline maintenance` (the provider's own
//! `edge_worker.connected` metric); a connected worker *takes jobs* unless it
//! is in maintenance (`maintenance request`, `maintenance pending`,
//! `maintenance mode`) or stopping (`shutdown request`, `terminating`).
//!
//! # Both schemas
//! Providers before 3.5.0 keep `sysinfo` as a JSON string in a `VARCHAR(256)`
//! and have `jobs_taken`, `jobs_success`, `jobs_failed`; 3.5.0 made `sysinfo` a
//! JSON column and dropped the three counters (migration
//! `0005_3_5_0_replace_individual_counters_with_`). The check reads only
//! columns both have, and reads `sysinfo` cast to text, which is JSON either
//! way (older workers send no `status`). `queues` is Python's `repr` of a list
//! (`['default', 'gpu']`) in both.
//!
//! # Detail
//! - `queues`: every configured queue (`executors[].queues`), every queue
//!   where jobs wait and every queue a connected worker names; `depth` is the
//!   jobs waiting there (`edge_job.state = 'queued'`), `consumers` the
//!   workers taking jobs from it, `broker` the instance.
//! - `workers`: every registered worker, connected or not, with its queues
//!   (`null`: all), its `state`, its `concurrency` and `free_concurrency` (from
//!   `sysinfo`).
//!
//! # Waiting on the database
//! The connection pool (two connections, opened on the first poll and kept)
//! and both statements are bounded by one deadline (`budget`: 90 % of
//! `poll_timeout`), so a database that does not answer is this check's
//! reason, not the supervisor's `no reply within 5s`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use overseer_core::detail::{QueueDetail, WorkerDetail};
use overseer_core::duration::short;
use overseer_core::reason;
use overseer_core::secret::SecretUrl;
use overseer_core::{Detail, Executor, ExecutorHealth, HealthCheck, Observation};
use sea_orm::{ConnectionTrait, Database, DatabaseConnection, DbBackend, Statement};
use tokio::sync::OnceCell;

use crate::budget;

/// Connections the check keeps open: it runs two statements one after the other.
const MAX_CONNECTIONS: u32 = 2;

/// Python's `logging.WARNING`: a worker reporting this status or above is named.
const WARNING: i64 = 30;

/// What the composition root calls: an executor named `executor_class` judged
/// from the edge tables of the database at `database` (Airflow's metadata
/// database, which Overseer also writes to), answering within `poll_timeout`.
/// `queues` are listed in the detail even when nothing waits there.
pub fn executor(
    executor_class: &str,
    database: &SecretUrl,
    queues: &[String],
    poll_timeout: Duration,
) -> Executor {
    let check = EdgeCheck::new(database, queues, poll_timeout);
    let instance = check.instance().to_owned();
    Executor::new(executor_class, check).with_instance(instance)
}

/// A health check of an Edge fleet; cloning it shares its connection pool.
#[derive(Clone)]
pub struct EdgeCheck {
    /// Airflow's metadata database, with its password; shown only redacted.
    database: SecretUrl,
    /// `edge_worker@host:port/db`: what counts as the instance.
    instance: String,
    /// The configured queues, always in the detail.
    queues: Vec<String>,
    /// How long one poll may wait on the database.
    deadline: Duration,
    /// Opened on the first poll, kept for the next.
    db: Arc<OnceCell<DatabaseConnection>>,
    /// Whether the missing tables were already logged.
    warned_missing: Arc<AtomicBool>,
}

impl std::fmt::Debug for EdgeCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EdgeCheck")
            .field("instance", &self.instance)
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

impl EdgeCheck {
    /// A check of the edge tables in `database`, answering within `poll_timeout`.
    pub fn new(database: &SecretUrl, queues: &[String], poll_timeout: Duration) -> Self {
        Self {
            database: database.clone(),
            instance: instance(database),
            queues: queues.to_vec(),
            deadline: budget::deadline(poll_timeout),
            db: Arc::new(OnceCell::new()),
            warned_missing: Arc::new(AtomicBool::new(false)),
        }
    }

    /// `edge_worker@host:port/db`: the instance.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// The pool, opened lazily: connections are made by the statements, each
    /// within the deadline.
    async fn db(&self) -> Result<&DatabaseConnection, String> {
        self.db
            .get_or_try_init(|| async {
                let mut options = overseer_core::connect::options(self.database.expose_secret());
                options
                    .max_connections(MAX_CONNECTIONS)
                    .min_connections(0)
                    .connect_lazy(true);
                Database::connect(options).await
            })
            .await
            .map_err(|e| self.database.scrub(&e.to_string()))
    }

    /// One poll: read the rows, or say why not.
    async fn read(&self) -> Result<Option<Fleet>, String> {
        let db = self.db().await?;
        match read(db).await {
            Ok(fleet) => Ok(Some(fleet)),
            Err(e) => {
                // A database that answers but has no edge tables: not installed yet.
                let probe = Statement::from_string(db.get_database_backend(), "SELECT 1");
                if db.query_one_raw(probe).await.is_ok() {
                    if !self.warned_missing.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            instance = %self.instance,
                            error = %reason::sanitise(&self.database.scrub(&e.to_string())),
                            "the edge_worker and edge_job tables cannot be read: is the Edge \
                             provider installed and its tables migrated? The verdict stays unknown"
                        );
                    }
                    return Ok(None);
                }
                Err(self.database.scrub(&e.to_string()))
            }
        }
    }
}

#[async_trait::async_trait]
impl HealthCheck for EdgeCheck {
    async fn get_health(&self) -> ExecutorHealth {
        self.observe().await.health
    }

    /// The verdict of [`judge`], or why there is none; its reason and note
    /// sanitised ([`reason`]) whichever it is.
    async fn observe(&self) -> Observation {
        let observation = match tokio::time::timeout(self.deadline, self.read()).await {
            Ok(Ok(Some(fleet))) => judge(&fleet, &self.queues, &self.instance),
            Ok(Ok(None)) => ExecutorHealth::unknown(
                "the database has no edge_worker table (is the Edge provider installed and migrated?)",
            )
            .into(),
            Ok(Err(e)) => {
                ExecutorHealth::unhealthy(format!("cannot read the edge_worker table: {e}")).into()
            }
            Err(_) => ExecutorHealth::unhealthy(format!(
                "cannot read the edge_worker table: no answer within {}",
                short(self.deadline)
            ))
            .into(),
        };
        reason::sanitise_observation(observation)
    }
}

/// `edge_worker@host:port/db` of a database URL: no scheme, no user or
/// password, no query (a SQLite file is its path).
pub fn instance(database: &SecretUrl) -> String {
    let text = database.expose_secret();
    let rest = text.split_once("://").map_or(text, |(_, rest)| rest);
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let (authority, path) = match rest.find('/') {
        Some(slash) => rest.split_at(slash),
        None => (rest, ""),
    };
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    format!("edge_worker@{host}{path}")
}

/// What one poll read: the workers, and the jobs waiting per queue.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fleet {
    /// Every `edge_worker` row, by name.
    pub workers: Vec<EdgeWorker>,
    /// `edge_job` rows in `queued`, counted per queue, by name.
    pub waiting: BTreeMap<String, u64>,
}

/// One `edge_worker` row, as the check reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeWorker {
    /// `worker_name`.
    pub name: String,
    /// `state`, as the provider writes it (`idle`, `running`, `unknown`, ...).
    pub state: String,
    /// `queues`; `None`: every queue.
    pub queues: Option<Vec<String>>,
    /// `sysinfo.concurrency`, when reported and not negative.
    pub concurrency: Option<u32>,
    /// `sysinfo.free_concurrency`, when reported and not negative.
    pub free_concurrency: Option<u32>,
    /// `sysinfo.status`: a Python logging level (20 info, 30 warning, ...).
    pub status: Option<i64>,
    /// `sysinfo.status_text`, when the worker explains its status.
    pub status_text: Option<String>,
}

impl EdgeWorker {
    /// A row: `queues` as the provider stores them (Python's `repr` of a list),
    /// `sysinfo` as text (JSON in both schemas).
    pub fn from_row(
        name: String,
        state: String,
        queues: Option<&str>,
        sysinfo: Option<&str>,
    ) -> Self {
        let sysinfo: serde_json::Value = sysinfo
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or_default();
        let int = |key: &str| {
            sysinfo.get(key).and_then(|v| {
                v.as_i64()
                    .or_else(|| v.as_f64().map(|f| f as i64))
                    .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
            })
        };
        Self {
            name,
            state,
            queues: queues.and_then(python_list),
            concurrency: int("concurrency").and_then(|n| u32::try_from(n).ok()),
            free_concurrency: int("free_concurrency").and_then(|n| u32::try_from(n).ok()),
            status: int("status"),
            status_text: sysinfo
                .get("status_text")
                .and_then(|v| v.as_str())
                .map(str::to_owned),
        }
    }

    /// Heartbeats reach Airflow: not `unknown`, `offline` or `offline maintenance`.
    pub fn connected(&self) -> bool {
        !matches!(
            self.state.as_str(),
            "unknown" | "offline" | "offline maintenance"
        )
    }

    /// Connected and fetching: not in maintenance, not stopping.
    pub fn takes_jobs(&self) -> bool {
        self.connected()
            && !matches!(
                self.state.as_str(),
                "maintenance request"
                    | "maintenance pending"
                    | "maintenance mode"
                    | "shutdown request"
                    | "terminating"
            )
    }

    /// Whether it fetches jobs of `queue` (no queues: every queue).
    pub fn serves(&self, queue: &str) -> bool {
        self.queues
            .as_ref()
            .is_none_or(|queues| queues.iter().any(|q| q == queue))
    }
}

/// The queues of a worker as the provider stores them: `str(list)` in Python,
/// `['default', 'gpu']`, read back as the provider does (`ast.literal_eval`),
/// escapes included: `['new\nline']` is the queue whose name holds a newline,
/// as `edge_job.queue` holds it. `None` for null, empty (`None` or `[]` in
/// Python: every queue). Text that is no list is kept whole, as one queue's name.
pub fn python_list(text: &str) -> Option<Vec<String>> {
    let text = text.trim();
    let Some(inner) = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) else {
        return (!text.is_empty() && text != "None").then(|| vec![text.to_owned()]);
    };
    let mut items = Vec::new();
    let mut chars = inner.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace() || *c == ',').is_some() {}
        let Some(quote) = chars.next() else { break };
        if quote != '\'' && quote != '"' {
            return Some(vec![text.to_owned()]);
        }
        let mut item = String::new();
        loop {
            match chars.next() {
                None => return Some(vec![text.to_owned()]),
                Some('\\') => {
                    if unescape(&mut chars, &mut item).is_none() {
                        return Some(vec![text.to_owned()]);
                    }
                }
                Some(c) if c == quote => break,
                Some(c) => item.push(c),
            }
        }
        items.push(item);
    }
    (!items.is_empty()).then_some(items)
}

/// One escape of a Python string literal, its backslash read: what Python
/// makes of it, pushed to `item`. `None` where Python would refuse the
/// literal (`\x` without two hex digits).
///
/// | written | read |
/// | --- | --- |
/// | `\\` `\'` `\"` | the character |
/// | `\n` `\r` `\t` `\a` `\b` `\f` `\v` | the control character |
/// | `\xhh` `\uhhhh` `\Uhhhhhhhh`, `\ooo` (octal) | that code point (`repr` writes these for the unprintable) |
/// | backslash, newline | nothing (a continued line) |
/// | any other | kept as written, backslash included (`\d`, `\N{...}`) |
fn unescape(chars: &mut std::iter::Peekable<std::str::Chars<'_>>, item: &mut String) -> Option<()> {
    let escaped = chars.next()?;
    let c = match escaped {
        '\\' | '\'' | '"' => escaped,
        'n' => '\n',
        'r' => '\r',
        't' => '\t',
        'a' => '\u{7}',
        'b' => '\u{8}',
        'f' => '\u{c}',
        'v' => '\u{b}',
        'x' => code_point(chars, 2, 16, None)?,
        'u' => code_point(chars, 4, 16, None)?,
        'U' => code_point(chars, 8, 16, None)?,
        '0'..='7' => code_point(chars, 3, 8, escaped.to_digit(8))?,
        '\n' => return Some(()),
        other => {
            item.push('\\');
            other
        }
    };
    item.push(c);
    Some(())
}

/// The code point of an escape's digits in `radix`: hex takes exactly
/// `digits`, octal 1 to `digits` (`first` already read).
fn code_point(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    digits: usize,
    radix: u32,
    first: Option<u32>,
) -> Option<char> {
    let mut value = first.unwrap_or(0);
    let mut read = usize::from(first.is_some());
    while read < digits {
        match chars.peek().and_then(|c| c.to_digit(radix)) {
            Some(digit) => value = value * radix + digit,
            None if radix == 8 => break,
            None => return None,
        }
        chars.next();
        read += 1;
    }
    char::from_u32(value)
}

/// Reads the fleet: two statements, on either schema of the provider.
pub async fn read(db: &impl ConnectionTrait) -> Result<Fleet, sea_orm::DbErr> {
    let backend = db.get_database_backend();
    let text = match backend {
        DbBackend::MySql => "CHAR",
        _ => "TEXT",
    };
    let workers = db
        .query_all_raw(Statement::from_string(
            backend,
            format!(
                "SELECT worker_name, state, queues, CAST(sysinfo AS {text}) AS sysinfo \
                 FROM edge_worker ORDER BY worker_name"
            ),
        ))
        .await?;
    let waiting = db
        .query_all_raw(Statement::from_string(
            backend,
            "SELECT queue, COUNT(*) AS waiting FROM edge_job WHERE state = 'queued' GROUP BY queue",
        ))
        .await?;
    let mut fleet = Fleet::default();
    for row in workers {
        let queues: Option<String> = row.try_get("", "queues")?;
        let sysinfo: Option<String> = row.try_get("", "sysinfo")?;
        fleet.workers.push(EdgeWorker::from_row(
            row.try_get("", "worker_name")?,
            row.try_get::<Option<String>>("", "state")?
                .unwrap_or_default(),
            queues.as_deref(),
            sysinfo.as_deref(),
        ));
    }
    for row in waiting {
        let queue: String = row.try_get("", "queue")?;
        let count: i64 = row.try_get("", "waiting")?;
        *fleet.waiting.entry(queue).or_default() += count.max(0).unsigned_abs();
    }
    Ok(fleet)
}

/// The verdict and its detail from what one poll read: every rule of the
/// module's table, and nothing else.
pub fn judge(fleet: &Fleet, configured: &[String], instance: &str) -> Observation {
    let workers = &fleet.workers;
    let connected: Vec<&EdgeWorker> = workers.iter().filter(|w| w.connected()).collect();
    let waiting_total: u64 = fleet.waiting.values().sum();
    let waiting_list = || {
        let per_queue: Vec<String> = fleet
            .waiting
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(q, n)| format!("{}: {n}", reason::name(q)))
            .collect();
        reason::list(per_queue)
    };
    let mut findings = Vec::new();
    if connected.is_empty() {
        if !workers.is_empty() {
            let states = reason::list(workers.iter().map(named_state));
            let mut finding = format!("every edge worker is unknown or offline ({states})");
            if waiting_total > 0 {
                finding += &format!(" while {} ({})", wait(waiting_total), waiting_list());
            }
            findings.push(finding);
        } else if waiting_total > 0 {
            findings.push(format!(
                "no edge worker is connected while {} ({})",
                wait(waiting_total),
                waiting_list()
            ));
        }
    } else {
        for (queue, &count) in fleet.waiting.iter().filter(|(_, n)| **n > 0) {
            let serving: Vec<&&EdgeWorker> = connected.iter().filter(|w| w.serves(queue)).collect();
            if serving.iter().any(|w| w.takes_jobs()) {
                continue;
            }
            let waiting = format!("queue {}: {} waiting", reason::name(queue), jobs(count));
            if serving.is_empty() {
                findings.push(format!("{waiting} and no connected edge worker serves it"));
            } else {
                let paused = reason::list(serving.iter().map(|w| named_state(w)));
                findings.push(format!(
                    "{waiting} and its edge workers take no jobs ({paused})"
                ));
            }
        }
    }
    // Workers gone quiet, or reporting a warning, are named whatever the
    // verdict: in its reason when unhealthy, in its note when healthy.
    let mut concerns = Vec::new();
    if !connected.is_empty() {
        let lost: Vec<&EdgeWorker> = workers.iter().filter(|w| w.state == "unknown").collect();
        if !lost.is_empty() {
            concerns.push(format!(
                "no heartbeat for 5 heartbeats from {}",
                reason::list(
                    lost.iter()
                        .map(|w| format!("edge worker {}", reason::name(&w.name)))
                )
            ));
        }
    }
    for worker in workers
        .iter()
        .filter(|w| w.status.is_some_and(|s| s >= WARNING))
    {
        let level = level_name(worker.status.unwrap_or_default());
        let name = reason::name(&worker.name);
        concerns.push(match &worker.status_text {
            Some(text) => format!(
                "edge worker {name} reports {level}: {}",
                reason::clip(text, reason::MAX_ITEM_CHARS)
            ),
            None => format!("edge worker {name} reports {level}"),
        });
    }
    let detail = detail(fleet, configured, instance);
    let observation = if findings.is_empty() {
        let observation = Observation::new(ExecutorHealth::Healthy, detail);
        match concerns.is_empty() {
            true => observation,
            false => observation.with_note(concerns.join("; ")),
        }
    } else {
        findings.extend(concerns);
        Observation::new(ExecutorHealth::unhealthy(findings.join("; ")), detail)
    };
    // Names come from rows any client can write: each was cut above so the
    // reason keeps its shape; the whole is made one bounded line here.
    reason::sanitise_observation(observation)
}

/// `w1: offline`: a worker and its state, each cut as a name.
fn named_state(worker: &EdgeWorker) -> String {
    format!(
        "{}: {}",
        reason::name(&worker.name),
        reason::name(&worker.state)
    )
}

/// The detail of the module's doc: queues with their waiting jobs and takers,
/// every worker with its state.
fn detail(fleet: &Fleet, configured: &[String], instance: &str) -> Detail {
    let mut names: Vec<&str> = configured.iter().map(String::as_str).collect();
    names.extend(fleet.waiting.keys().map(String::as_str));
    names.extend(
        fleet
            .workers
            .iter()
            .filter(|w| w.connected())
            .flat_map(|w| w.queues.iter().flatten().map(String::as_str)),
    );
    names.sort_unstable();
    names.dedup();
    let queues = names
        .into_iter()
        .map(|name| QueueDetail {
            name: name.to_owned(),
            broker: instance.to_owned(),
            depth: Some(fleet.waiting.get(name).copied().unwrap_or(0)),
            consumers: Some(
                fleet
                    .workers
                    .iter()
                    .filter(|w| w.takes_jobs() && w.serves(name))
                    .count()
                    .try_into()
                    .unwrap_or(u32::MAX),
            ),
        })
        .collect();
    let workers = fleet
        .workers
        .iter()
        .map(|w| WorkerDetail {
            name: w.name.clone(),
            queues: w.queues.clone(),
            state: Some(w.state.clone()),
            concurrency: w.concurrency,
            free_concurrency: w.free_concurrency,
            heartbeat: None,
        })
        .collect();
    Detail {
        queues,
        workers: Some(workers),
        queued_tasks: None,
        worker_events: Vec::new(),
        canary: None,
        capacity: None,
    }
}

/// `1 job`, `3 jobs`.
fn jobs(n: u64) -> String {
    if n == 1 {
        "1 job".into()
    } else {
        format!("{n} jobs")
    }
}

/// `1 job waits`, `3 jobs wait`.
fn wait(n: u64) -> String {
    if n == 1 {
        "1 job waits".into()
    } else {
        format!("{n} jobs wait")
    }
}

/// Python's `logging.getLevelName`, lower-cased, for the levels a worker reports.
fn level_name(level: i64) -> String {
    match level {
        50.. => "critical".into(),
        40..50 => "error".into(),
        30..40 => "warning".into(),
        other => format!("status {other}"),
    }
}

#[cfg(test)]
mod tests;
