//! The actors (actix 0.13): one [`ExecutorActor`] per executor, the
//! [`HealthSupervisor`] that polls them, and the [`Aggregator`] that keeps the
//! Jobs table and publishes the report.

pub mod aggregator;
pub mod executor;
pub mod supervisor;

pub use aggregator::Aggregator;
pub use executor::{CheckHealth, ExecutorActor, RestartPolicy};
/// The old name of [`NewVerdict`], kept only until `tests/supervision.rs`
/// moves to the new one: remove it then.
#[doc(hidden)]
pub use supervisor::NewVerdict as Verdict;
pub use supervisor::{HealthSupervisor, NewVerdict, PollSettings};

/// `5s`, `150ms`: a duration as the reasons and logs write it.
pub(crate) fn short_duration(d: std::time::Duration) -> String {
    if d.subsec_millis() == 0 && d.as_secs() > 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}
