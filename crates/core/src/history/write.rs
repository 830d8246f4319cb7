//! Writing the history: the flush's part (the transitions inserted with the
//! verdicts, each `unhealthy` span's cost counted first) and the prune.

use std::borrow::Cow;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbBackend, EntityTrait, QueryFilter, Statement,
    TransactionSession, TransactionTrait,
};
use serde::Serialize;

use super::{TABLE, Transition};
use crate::airflow::cost::{self, Span};
use crate::airflow::routes::Routes;
use crate::entity::history::{Column, Entity as History};
use crate::error::Result;
use crate::storage::{
    self, Flushed, Session, VerdictRow, json_statement, timestamp_text, to_micros,
};

/// Deletes the transitions older than `before`: one statement. Returns how
/// many it deleted.
pub async fn prune(db: &impl ConnectionTrait, before: DateTime<Utc>) -> Result<u64> {
    Ok(History::delete_many()
        .filter(Column::At.lt(to_micros(before)))
        .exec(db)
        .await?
        .rows_affected)
}

/// What a flush writes to the history besides the verdicts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistoryWrite {
    /// The transitions the verdicts make, inserted with them.
    pub transitions: Vec<Transition>,
    /// The transitions that end an `unhealthy` span (by their place in
    /// `transitions`), with the span: what it cost is counted first.
    pub costs: Vec<(usize, Span)>,
    /// Which executor runs each task instance, for counting the costs.
    pub routes: Option<Arc<Routes>>,
    /// Delete the transitions older than this (at most once an hour).
    pub prune_before: Option<DateTime<Utc>>,
}

impl HistoryWrite {
    /// The transitions with what each `unhealthy` span they end cost, counted
    /// now ([`cost::read`]); a count that fails leaves the cost `null`, and
    /// the transition is written all the same. The counts of one flush share
    /// [`cost::FLUSH_BUDGET`], inside the write's own timeout, and end at the
    /// first that fails (a database that cannot count one, one without
    /// Airflow's `task_instance`, cannot count the next): a flush ending
    /// thousands of spans at once (every executor back after an outage)
    /// counts what fits and writes the rest uncounted, rather than outlast
    /// its timeout and fail, to count them all again at the next attempt.
    /// A flush that fails counts again at the next attempt (the database
    /// that failed it may have failed the count too).
    async fn counted(&self, db: &impl ConnectionTrait) -> Vec<Transition> {
        let mut transitions = self.transitions.clone();
        let Some(routes) = &self.routes else {
            return transitions;
        };
        let deadline = tokio::time::Instant::now() + cost::FLUSH_BUDGET;
        let mut spans = self.costs.iter();
        for (position, span) in spans.by_ref() {
            let Some(t) = transitions.get_mut(*position) else {
                continue;
            };
            let within = deadline
                .saturating_duration_since(tokio::time::Instant::now())
                .min(cost::READ_TIMEOUT);
            match tokio::time::timeout(within, cost::read(db, routes, *span, t.at)).await {
                Ok(Ok(counted)) => {
                    tracing::info!(
                        executor = %t.executor,
                        instance = t.instance.as_deref().unwrap_or_default(),
                        "{} after {} unhealthy: {} meanwhile",
                        t.to.as_str(),
                        crate::duration::age((t.at - span.from).to_std().unwrap_or_default()),
                        counted.describe()
                    );
                    t.cost = Some(counted);
                    continue;
                }
                Ok(Err(e)) => tracing::debug!(
                    executor = %t.executor,
                    error = %crate::secret::scrub(&e.to_string()),
                    "cannot count what the unhealthy span cost: the transition is written without it"
                ),
                Err(_) => tracing::debug!(
                    executor = %t.executor,
                    "counting what the unhealthy span cost did not fit in {} (this flush's counts \
                     share it): the transition is written without it",
                    crate::duration::short(cost::FLUSH_BUDGET.min(cost::READ_TIMEOUT))
                ),
            }
            break;
        }
        let uncounted = spans.count();
        if uncounted > 0 {
            tracing::debug!(
                spans = uncounted,
                "the other unhealthy spans this flush ends are written without their cost"
            );
        }
        transitions
    }
}

/// Writes this session's heartbeats and the verdicts that changed
/// (`storage::heartbeats_and_verdicts`), with the history in the same transaction: one multi-row
/// `INSERT` of the transitions when there are some, and one `DELETE` of the
/// old ones when a prune is due; at most four statements, whatever the
/// number of executors and transitions. Returns what it wrote.
pub async fn flush_with_history<C>(
    db: &C,
    session: &Session,
    now: DateTime<Utc>,
    verdicts: &[VerdictRow],
    history: &HistoryWrite,
) -> Result<Flushed>
where
    C: ConnectionTrait + TransactionTrait,
{
    // Counted before the transaction, on a connection of its own: a count
    // that fails or is slow never rolls back nor holds the verdicts' write.
    let transitions = if history.costs.is_empty() {
        Cow::Borrowed(history.transitions.as_slice())
    } else {
        Cow::Owned(history.counted(db).await)
    };
    let txn = db.begin().await?;
    let mut flushed = storage::heartbeats_and_verdicts(&txn, session, now, verdicts).await?;
    if !transitions.is_empty() {
        let backend = txn.get_database_backend();
        txn.execute_raw(insert_statement(backend, &transitions))
            .await?;
        flushed.statements += 1;
    }
    if let Some(before) = history.prune_before {
        let pruned = prune(&txn, before).await?;
        if pruned > 0 {
            tracing::debug!(rows = pruned, "pruned the executor history");
        }
        flushed.statements += 1;
    }
    txn.commit().await?;
    Ok(flushed)
}

/// One `INSERT` of every transition, read from one JSON parameter as the
/// verdicts are (see `storage`'s `verdict_update`): no parameter limit bounds how
/// many one statement takes, and its SQL text is the same for any number.
fn insert_statement(backend: DbBackend, transitions: &[Transition]) -> Statement {
    #[derive(Serialize)]
    struct Row<'a> {
        executor: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        instance: Option<&'a str>,
        hostname: &'a str,
        from_health: &'a str,
        to_health: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<&'a str>,
        at: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        cost_failed: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cost_up_for_retry: Option<u64>,
    }
    let rows: Vec<Row> = transitions
        .iter()
        .map(|t| Row {
            executor: &t.executor,
            instance: t.instance.as_deref(),
            hostname: &t.hostname,
            from_health: t.from.as_str(),
            to_health: t.to.as_str(),
            reason: t.reason.as_deref(),
            at: timestamp_text(backend, t.at),
            cost_failed: t.cost.map(|c| c.failed),
            cost_up_for_retry: t.cost.map(|c| c.up_for_retry),
        })
        .collect();
    // A transition the table already holds (same row, state and time) is not
    // written again: a flush whose commit went through but whose answer timed
    // out keeps its transitions and writes them at the next, once.
    let columns = "executor, instance, hostname, from_health, to_health, reason, at, \
                   cost_failed, cost_up_for_retry";
    let absent = |instance_equal: &str| {
        format!(
            "NOT EXISTS (SELECT 1 FROM {TABLE} h WHERE h.executor = v.executor \
             AND h.hostname = v.hostname AND h.at = v.at AND h.to_health = v.to_health \
             AND {instance_equal})"
        )
    };
    let sql = match backend {
        DbBackend::Postgres => format!(
            "INSERT INTO {TABLE} ({columns}) SELECT {columns} \
             FROM json_to_recordset(CAST($1 AS json)) AS v(executor text, instance text, \
             hostname text, from_health text, to_health text, reason text, at timestamptz, \
             cost_failed bigint, cost_up_for_retry bigint) \
             WHERE {}",
            absent("h.instance IS NOT DISTINCT FROM v.instance")
        ),
        DbBackend::MySql => format!(
            "INSERT INTO {TABLE} ({columns}) SELECT {columns} \
             FROM JSON_TABLE(?, '$[*]' COLUMNS (executor VARCHAR(500) PATH '$.executor', \
             instance VARCHAR(500) PATH '$.instance', hostname VARCHAR(500) PATH '$.hostname', \
             from_health VARCHAR(20) PATH '$.from_health', to_health VARCHAR(20) PATH '$.to_health', \
             reason TEXT PATH '$.reason', at DATETIME(6) PATH '$.at', \
             cost_failed BIGINT PATH '$.cost_failed', cost_up_for_retry BIGINT PATH '$.cost_up_for_retry')) \
             AS v WHERE {}",
            absent("h.instance <=> v.instance")
        ),
        _ => format!(
            "INSERT INTO {TABLE} ({columns}) SELECT {columns} FROM (SELECT \
             json_extract(value, '$.executor') AS executor, \
             json_extract(value, '$.instance') AS instance, \
             json_extract(value, '$.hostname') AS hostname, \
             json_extract(value, '$.from_health') AS from_health, \
             json_extract(value, '$.to_health') AS to_health, \
             json_extract(value, '$.reason') AS reason, json_extract(value, '$.at') AS at, \
             json_extract(value, '$.cost_failed') AS cost_failed, \
             json_extract(value, '$.cost_up_for_retry') AS cost_up_for_retry \
             FROM json_each(?)) AS v WHERE {}",
            absent("h.instance IS v.instance")
        ),
    };
    json_statement(backend, &sql, &rows)
}
