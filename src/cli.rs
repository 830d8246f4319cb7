//! The command line. Its names are a contract: scripts and other tools rely on them.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::logging::LogFormat;

/// Overseer: executor health for Apache Airflow, as heartbeating rows in the Jobs
/// table and an `executor` entry in the health JSON.
#[derive(Debug, Parser)]
#[command(name = "overseer", version, about, long_about = None)]
pub struct Cli {
    /// The configuration file. Without it, ./overseer.toml when present, else built-in defaults.
    #[arg(long, global = true, env = "OVERSEER_CONFIG", value_name = "PATH")]
    pub config: Option<PathBuf>,

    /// How log lines are written to stderr (filter them with RUST_LOG or OVERSEER_LOG).
    #[arg(long, global = true, env = "OVERSEER_LOG_FORMAT", value_enum, default_value_t = LogFormat::Plain)]
    pub log_format: LogFormat,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the service until SIGTERM or Ctrl-C (migrates the schema up first).
    Serve {
        /// The address the HTTP API listens on (overrides api.bind).
        #[arg(long, value_name = "ADDR")]
        bind: Option<SocketAddr>,
    },
    /// Manage the schema: Airflow's job table and the executor-health columns.
    Migrate {
        #[command(subcommand)]
        action: Option<MigrateAction>,
    },
    /// Print the effective configuration as TOML, credentials redacted.
    Config,
    /// Print a running service's report; exit 1 if anything is unhealthy or it cannot be reached.
    Health {
        /// The service's base URL (default: http:// and the configured api.bind).
        #[arg(long, value_name = "URL")]
        url: Option<String>,
        /// Print the JSON as the service gives it, instead of a table.
        #[arg(long)]
        json: bool,
        /// For an https:// URL: the CA certificate (PEM) to trust instead of the
        /// system's roots.
        #[arg(long, value_name = "PATH")]
        cacert: Option<std::path::PathBuf>,
        /// Judge only this component (repeat for several): exit 1 only when one of
        /// them is unhealthy. metadatabase, scheduler, triggerer, dag_processor or
        /// executor; every one by default.
        #[arg(long = "component", value_name = "NAME", value_parser = parse_component)]
        components: Vec<overseer_core::report::Component>,
    },
    /// Inspect the Jobs table directly, as `airflow jobs` does.
    Jobs {
        #[command(subcommand)]
        action: JobsAction,
    },
}

#[derive(Debug, Clone, Subcommand)]
pub enum JobsAction {
    /// Check that alive jobs exist, with `airflow jobs check`'s semantics and exit codes.
    Check {
        /// Only jobs of this type: SchedulerJob, TriggererJob, DagProcessorJob, ExecutorJob, ...
        #[arg(long, value_name = "TYPE")]
        job_type: Option<String>,
        /// Only jobs of this host.
        #[arg(long, value_name = "HOSTNAME")]
        hostname: Option<String>,
        /// How many of the most recent running jobs to look at (0 for all).
        #[arg(long, default_value_t = 1)]
        limit: u64,
        /// Accept more than one alive job (needs --limit above 1).
        #[arg(long)]
        allow_multiple: bool,
        /// Only jobs of this host (supervisor.hostname).
        #[arg(long)]
        local: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Subcommand)]
pub enum MigrateAction {
    /// Apply every pending migration (the default).
    Up,
    /// Roll back the last migration: the history table, then (run again) the four executor columns; never `job`.
    Down,
    /// List the migrations and whether each is applied.
    Status,
}

/// A component's name, as the report's JSON keys it.
fn parse_component(name: &str) -> Result<overseer_core::report::Component, String> {
    name.parse()
}
