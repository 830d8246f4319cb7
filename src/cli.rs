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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Subcommand)]
pub enum MigrateAction {
    /// Apply every pending migration (the default).
    Up,
    /// Roll back the last migration: drops the four executor columns, never the table.
    Down,
    /// List the migrations and whether each is applied.
    Status,
}
