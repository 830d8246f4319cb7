//! This session's own rows and their cache: the latest verdict and heartbeat
//! of each, as the report shows them (written yet or not), which of them need
//! writing, and the verdicts a restarted aggregator takes back.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::detail::Detail;
use crate::entity::job;
use crate::history::RowKey;
use crate::job::{ExecutorHealth, JobState, JobType};
use crate::reason::Reason;
use crate::report::{ExecutorHealthKind, RowExtras};
use crate::storage::{ExecutorIdentity, Session, VerdictRow};

use super::Aggregator;

/// One of this session's executor rows, as this process holds it.
#[derive(Debug, Clone)]
pub(super) struct OwnRow {
    /// The row as the report shows it: the latest verdict, its
    /// `checked_at`, and the latest heartbeat.
    pub(super) row: job::Model,
    /// The latest verdict, typed: what `row`'s `executor_health` column
    /// says, kept as it came rather than parsed back from the row.
    health: ExecutorHealth,
    /// Beside a healthy verdict, the note its check gave (shown as the row's
    /// reason while it is healthy).
    note: Option<Reason>,
    /// The verdict changed since the last heartbeat: its `checked_at` is still
    /// the moment it was made, and the next heartbeat leaves it there.
    pub(super) fresh: bool,
    /// Bumped by every changed verdict; the row needs writing while it differs
    /// from `written`.
    pub(super) version: u64,
    pub(super) written: u64,
    /// The latest evidence beside the verdict: shown in the report, never written.
    pub(super) detail: Option<Arc<Detail>>,
    /// The state the history holds as the row's current one (its latest
    /// transition's, else the registered `unknown`): a verdict of another
    /// state is a transition. `None` until the history has been read.
    pub(super) in_history: Option<ExecutorHealthKind>,
    /// When `in_history` began, if the history says.
    pub(super) since: Option<DateTime<Utc>>,
    /// The state before `in_history`, if the history says.
    pub(super) previous: Option<ExecutorHealthKind>,
    /// The reason the history holds for the row's current `unhealthy` span
    /// (the latest transition's): a new one while the row stays `unhealthy`
    /// is a change of cause, recorded too.
    pub(super) reason_in_history: Option<String>,
    /// When this aggregator's latest verdict for the row was made (`None`:
    /// none yet, or only one taken back after a restart).
    pub(super) made_at: Option<DateTime<Utc>>,
}

impl OwnRow {
    /// The row `id` as registered for `key` in `session`: running, its
    /// verdict `unknown`.
    pub(super) fn registered(id: i32, identity: ExecutorIdentity, session: &Session) -> Self {
        Self {
            row: job::Model {
                id,
                dag_id: None,
                state: Some(JobState::Running.as_str().to_owned()),
                job_type: Some(JobType::ExecutorJob.as_str().to_owned()),
                start_date: Some(session.started),
                end_date: None,
                latest_heartbeat: Some(session.started),
                executor_class: Some(identity.executor_class),
                hostname: Some(session.hostname.clone()),
                unixname: Some(session.unixname.clone()),
                executor_health: ExecutorHealth::default().as_str().to_owned(),
                executor_health_reason: None,
                executor_instance: identity.instance,
                executor_health_checked_at: None,
            },
            health: ExecutorHealth::default(),
            note: None,
            fresh: false,
            version: 0,
            written: 0,
            detail: None,
            in_history: None,
            since: None,
            previous: None,
            reason_in_history: None,
            made_at: None,
        }
    }

    pub(super) fn health(&self) -> &ExecutorHealth {
        &self.health
    }

    /// The row's identity in the history.
    pub(super) fn key(&self) -> RowKey {
        (
            self.row.hostname.clone().unwrap_or_default(),
            self.row.executor_class.clone().unwrap_or_default(),
            self.row.executor_instance.clone(),
        )
    }

    /// `since` and `previous` as the report shows them: only while the row
    /// holds the state they are about.
    pub(super) fn extras(&self) -> RowExtras {
        let current = ExecutorHealthKind::of(self.health());
        let (since, previous) = if self.in_history == Some(current) {
            (self.since, self.previous)
        } else {
            (None, None)
        };
        RowExtras {
            detail: self.detail.clone(),
            since,
            previous,
        }
    }

    /// Holds a verdict: `executor_health_reason` is its reason, or, for a
    /// healthy one, its note ([`ExecutorHealth::shown`]).
    pub(super) fn set(
        &mut self,
        health: &ExecutorHealth,
        note: Option<&Reason>,
        checked_at: Option<DateTime<Utc>>,
    ) {
        self.health = health.clone();
        self.note = note.filter(|_| health.is_healthy()).cloned();
        self.row.executor_health = health.as_str().to_owned();
        self.row.executor_health_reason = health.shown(note).map(Reason::to_string);
        self.row.executor_health_checked_at = checked_at;
    }

    /// Whether `health` with `note` is the verdict held, its reason included.
    pub(super) fn holds(&self, health: &ExecutorHealth, note: Option<&Reason>) -> bool {
        self.health == *health && self.health.shown(self.note.as_ref()) == health.shown(note)
    }
}

impl Aggregator {
    /// The verdicts not yet written, with the version each one carries.
    pub(super) fn pending(&self) -> Vec<(usize, u64, VerdictRow)> {
        self.own
            .iter()
            .enumerate()
            .filter(|(_, own)| own.version != own.written)
            .filter_map(|(index, own)| {
                own.row.executor_health_checked_at.map(|checked_at| {
                    (
                        index,
                        own.version,
                        VerdictRow {
                            id: own.row.id,
                            health: own.health().clone(),
                            note: own.note.clone(),
                            checked_at,
                        },
                    )
                })
            })
            .collect()
    }

    /// Takes back the verdicts of this session's rows that no verdict has
    /// replaced yet: from the table, unless the last published report shows a
    /// later one (the aggregator before this one made it and stopped before
    /// writing it), or, when the table cannot be read, from that report; a
    /// verdict taken from the report is written again. At the first start
    /// there is nothing to take back: the rows are as registered.
    pub(super) fn take_back(&mut self, table: crate::Result<Option<Vec<job::Model>>>) {
        let rows = match table {
            Ok(None) => return,
            Ok(Some(rows)) => rows,
            Err(e) => {
                tracing::debug!(error = %e, "cannot read this session's rows back; taking the verdicts from the last report");
                Vec::new()
            }
        };
        let table: HashMap<i32, job::Model> = rows.into_iter().map(|r| (r.id, r)).collect();
        let report = self.reports.borrow().clone();
        for own in self.own.iter_mut().filter(|o| o.version == 0) {
            let shown = report.executor.iter().flat_map(|e| &e.instances).find(|i| {
                i.checked_at.is_some()
                    && i.hostname == own.row.hostname
                    && i.executor == own.row.executor_class
                    && i.instance == own.row.executor_instance
            });
            let written = table.get(&own.row.id);
            match (shown, written) {
                (Some(shown), written)
                    if written.is_none_or(|w| shown.checked_at > w.executor_health_checked_at) =>
                {
                    own.set(&shown.health, shown.reason.as_ref(), shown.checked_at);
                    own.version = 1;
                }
                (_, Some(written)) => {
                    // What the table holds, read once as it enters.
                    own.health = written
                        .executor_health()
                        .unwrap_or_else(|e| ExecutorHealth::unhealthy(e.to_string()));
                    own.note = written
                        .executor_health_reason
                        .as_deref()
                        .filter(|_| own.health.is_healthy())
                        .map(Reason::new);
                    own.row.executor_health = written.executor_health.clone();
                    own.row.executor_health_reason = written.executor_health_reason.clone();
                    own.row.executor_health_checked_at = written.executor_health_checked_at;
                }
                (_, None) => {}
            }
        }
    }
}
