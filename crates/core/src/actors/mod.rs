//! The actors (actix 0.13): one [`ExecutorActor`] per executor, the
//! [`HealthSupervisor`] that polls them, and the [`Aggregator`] that keeps the
//! Jobs table and publishes the report.

pub mod aggregator;
pub mod executor;
pub mod supervisor;

pub use aggregator::Aggregator;
pub use executor::{Answered, CheckHealth, ExecutorActor, QueuedSource, RestartPolicy};
pub use supervisor::{HealthSupervisor, NewVerdict, PollSettings};

/// Which core actor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CoreActor {
    Supervisor,
    Aggregator,
}

impl CoreActor {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Supervisor => "supervisor",
            Self::Aggregator => "aggregator",
        }
    }
}
