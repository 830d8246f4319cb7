//! Publishing: the report built from this session's rows as held and the
//! other rows as last read, sent (its JSON rendered) only when it says
//! something new, and spaced so that building it never takes the actors'
//! thread from the polls.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use actix::prelude::*;
use chrono::Utc;
use tokio::time::Instant;

use crate::entity::job;
use crate::job::{JobState, JobType};
use crate::report::{HealthReport, RowExtras, type_index};

use super::Aggregator;

/// How long after a verdict changes the report that shows it is published.
/// Verdicts that change together (a broker that serves many executors dies)
/// are published together, in one report, not one report each.
pub const PUBLISH_DELAY: Duration = Duration::from_millis(5);

/// A publish waits at least this many times as long as the last one took, so
/// building and rendering the report takes at most a fifth of the actors'
/// thread however often verdicts change. At ten thousand instances a report
/// takes milliseconds and this changes nothing; at fifty thousand whose polls
/// time out and flap, each change would otherwise render the whole fleet
/// again, and the renders would take the thread the polls need.
pub const PUBLISH_SPACING: u32 = 4;

/// Whether a publish is scheduled, and what the last one cost.
#[derive(Debug, Default)]
pub(super) struct Publishing {
    phase: PublishPhase,
    /// How long the last publish took: the next one waits
    /// [`PUBLISH_SPACING`] times as long.
    cost: Duration,
}

/// The phase of publishing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum PublishPhase {
    /// No publish is scheduled.
    #[default]
    Idle,
    /// One is, and takes in every change made until it runs.
    Scheduled,
}

impl Publishing {
    /// Schedules a publish unless one is: the delay before it, if scheduled now.
    fn schedule(&mut self) -> Option<Duration> {
        match self.phase {
            PublishPhase::Scheduled => None,
            PublishPhase::Idle => {
                self.phase = PublishPhase::Scheduled;
                Some(PUBLISH_DELAY.max(self.cost * PUBLISH_SPACING))
            }
        }
    }

    /// The scheduled publish runs.
    fn due(&mut self) {
        self.phase = PublishPhase::Idle;
    }
}

impl Aggregator {
    /// Publishes a report soon, with every change made until then: after
    /// [`PUBLISH_DELAY`], or [`PUBLISH_SPACING`] times as long as the last
    /// report took to build, if that is longer.
    pub(super) fn publish_soon(&mut self, ctx: &mut Context<Self>) {
        if let Some(delay) = self.publishing.schedule() {
            ctx.run_later(delay, |act, _| {
                act.publishing.due();
                act.publish();
            });
        }
    }

    /// Builds the report from this session's rows as held and the other rows as
    /// last read, and publishes it (rendering its JSON) if it says something new.
    /// Nothing is published before the first read is in.
    pub(super) fn publish(&mut self) {
        if !self.stage.publishes() {
            return;
        }
        let started = Instant::now();
        self.build_and_publish();
        self.publishing.cost = started.elapsed();
        let micros = u64::try_from(self.publishing.cost.as_micros()).unwrap_or(u64::MAX);
        self.stats
            .last_publish_micros
            .store(micros, Ordering::Relaxed);
    }

    fn build_and_publish(&mut self) {
        let now = Utc::now();
        let live: Vec<&job::Model> = self
            .others
            .values()
            .chain(self.own.iter().map(|o| &o.row))
            .collect();
        let mut most_recent = self.most_recent.each_ref().map(Option::as_ref);
        let executor = type_index(JobType::ExecutorJob);
        most_recent[executor] = self.most_recent_executor();
        let own_ids = &self.own_ids;
        let own = &self.own;
        let others_since = &self.others_since;
        let extras = |row: &job::Model| {
            if let Some(&index) = own_ids.get(&row.id) {
                return own[index].extras();
            }
            match others_since.get(&row.id) {
                Some((to, from, at)) if to.as_str() == row.executor_health => RowExtras {
                    detail: None,
                    since: Some(*at),
                    previous: Some(*from),
                },
                _ => RowExtras::default(),
            }
        };
        let mut report = HealthReport::assemble_with(
            most_recent,
            &live,
            &extras,
            // Reads and writes both: a database that answers reads but
            // refuses every write (its disk full) is no healthy one.
            !self.reads.in_outage() && !self.writes.in_outage(),
            &self.settings.thresholds,
            now,
        );
        if report.same_content(&self.reports.borrow()) {
            return;
        }
        report.render();
        self.stats.renders.fetch_add(1, Ordering::Relaxed);
        self.reports.send_replace(Arc::new(report));
    }

    /// Airflow's most recent executor job (running first, then the latest
    /// heartbeat), with this session's rows as held: the one read, unless it is
    /// one of this session's (then as held) or one of this session's rows is
    /// more recent.
    fn most_recent_executor(&self) -> Option<&job::Model> {
        let read = self.most_recent[type_index(JobType::ExecutorJob)].as_ref();
        let read = match read.and_then(|r| self.own_ids.get(&r.id)) {
            Some(&index) => Some(&self.own[index].row),
            None => read,
        };
        let rank = |row: &job::Model| {
            (
                row.state.as_deref() == Some(JobState::Running.as_str()),
                row.latest_heartbeat,
            )
        };
        let own = self.own.first().map(|o| &o.row);
        match (read, own) {
            (Some(read), Some(own)) if rank(own) > rank(read) => Some(own),
            (Some(read), _) => Some(read),
            (None, own) => own,
        }
    }
}
