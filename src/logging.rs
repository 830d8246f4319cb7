//! Logging: `tracing` to stderr, filtered by `RUST_LOG` (or `OVERSEER_LOG`).

use std::io::IsTerminal;

use clap::ValueEnum;
use tracing_subscriber::EnvFilter;

/// What is logged when neither `OVERSEER_LOG` nor `RUST_LOG` says otherwise:
/// Overseer's own events, and only warnings from the database drivers.
pub const DEFAULT_FILTER: &str = "info,sqlx=warn,sea_orm=warn,sea_orm_migration=warn";

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    Plain,
    /// One JSON object per event, for log shippers.
    Json,
}

/// Installs the global subscriber. Call once, early.
pub fn init(format: LogFormat) {
    let filter = std::env::var("OVERSEER_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .ok()
        .and_then(|directives| EnvFilter::try_new(directives).ok())
        .unwrap_or_else(|| EnvFilter::new(DEFAULT_FILTER));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Plain => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
