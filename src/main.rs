//! The `overseer` binary. Exit codes: 0 done, 1 a failure while running,
//! 2 a bad command line or configuration (nothing was written).

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use overseer::cli::{Cli, Command, JobsAction, MigrateAction};
use overseer::config::{self, Config, Overrides};
use overseer::probe::{self, Outcome};
use overseer::{db, logging, serve};
use overseer_migration::{Migrator, MigratorTrait};

/// The exit code of a bad command line or configuration, as clap uses for usage errors.
const EXIT_CONFIG: u8 = 2;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // Help and version print as clap prints them.
        Err(e) if !e.use_stderr() => e.exit(),
        // A bad command line is one line, like a bad configuration.
        Err(e) => {
            eprintln!("{}", one_line_usage_error(&e));
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    logging::init(cli.log_format);
    // This process's only children are the commands it runs (Airflow's
    // `_CMD` options, executors' check commands): it adopts what they leave
    // in sessions of their own (setsid) and ends them, so none outlives it.
    if let Err(e) = overseer_checks::orphans::adopt() {
        tracing::warn!(
            "cannot adopt the processes commands leave in sessions of their own ({e}): \
             a command that starts one with setsid leaves it running"
        );
    }

    let overrides = Overrides {
        config_file: cli.config.clone(),
        bind: match cli.command {
            Command::Serve { bind } => bind,
            _ => None,
        },
    };
    let (config, airflow_sources) = match config::load_with_sources(&overrides) {
        Ok(loaded) => loaded,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let scrubber = config.scrubber();
    logging::register_secrets(scrubber.clone());

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.command, config, &airflow_sources)) {
        Ok(Outcome::Healthy) => ExitCode::SUCCESS,
        Ok(Outcome::Unhealthy) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {}", scrubber.scrub(&format!("{e:#}")));
            ExitCode::FAILURE
        }
    }
}

/// Runs a command; `Unhealthy` makes the exit code 1 without an error message.
async fn run(
    command: Command,
    config: Config,
    airflow_sources: &BTreeMap<String, String>,
) -> anyhow::Result<Outcome> {
    match command {
        Command::Serve { .. } => serve::run(config, serve::shutdown_signal())
            .await
            .map(|()| Outcome::Healthy),
        Command::Config => {
            let text = toml::to_string(&config).context("while printing the configuration")?;
            // Where Airflow's values came from, as TOML comments: the output stays TOML.
            if !airflow_sources.is_empty() {
                println!("# Read from Airflow's configuration:");
                for (key, source) in airflow_sources {
                    println!("#   {key} <- {source}");
                }
            }
            print!("{text}");
            Ok(Outcome::Healthy)
        }
        Command::Migrate { action } => migrate(action.unwrap_or(MigrateAction::Up), &config)
            .await
            .map(|()| Outcome::Healthy),
        Command::Health {
            url,
            json,
            cacert,
            components,
        } => {
            let url = url.unwrap_or_else(|| probe::default_url(&config));
            tokio::task::spawn_blocking(move || {
                probe::health(&url, json, cacert.as_deref(), &components)
            })
            .await?
        }
        Command::Jobs {
            action:
                JobsAction::Check {
                    job_type,
                    hostname,
                    limit,
                    allow_multiple,
                    local,
                },
        } => {
            let answer = probe::jobs_check(
                &config,
                job_type.as_deref(),
                hostname.as_deref(),
                limit,
                allow_multiple,
                local,
            )
            .await?;
            Ok(match answer {
                Ok(message) => {
                    println!("{message}");
                    Outcome::Healthy
                }
                Err(message) => {
                    eprintln!("{message}");
                    Outcome::Unhealthy
                }
            })
        }
    }
}

/// clap's error as one line: its first, with the possible values when it lists them.
fn one_line_usage_error(error: &clap::Error) -> String {
    if error.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        return "error: a subcommand is required (see --help)".into();
    }
    let rendered = error.render().to_string();
    let mut lines = rendered.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines
        .next()
        .unwrap_or("error: invalid command line")
        .to_owned();
    match lines.find(|l| l.starts_with("[possible values:")) {
        Some(values) => format!("{first} {values}"),
        None => first,
    }
}

async fn migrate(action: MigrateAction, config: &Config) -> anyhow::Result<()> {
    let url = &config.database.url;
    let db = db::connect(url).await?;
    let scrubbed = |e: sea_orm::DbErr| anyhow::anyhow!(url.scrub(&e.to_string()));
    match action {
        MigrateAction::Up => {
            let pending = Migrator::get_pending_migrations(&db)
                .await
                .map_err(scrubbed)?;
            Migrator::up(&db, None)
                .await
                .map_err(scrubbed)
                .context("while migrating up")?;
            for migration in &pending {
                println!("applied {}", migration.name());
            }
            if pending.is_empty() {
                println!("the schema is up to date");
            }
        }
        MigrateAction::Down => {
            let applied = Migrator::get_applied_migrations(&db)
                .await
                .map_err(scrubbed)?;
            Migrator::down(&db, Some(1))
                .await
                .map_err(scrubbed)
                .context("while migrating down")?;
            match applied.last() {
                Some(migration) => println!("rolled back {}", migration.name()),
                None => println!("no migration is applied"),
            }
        }
        MigrateAction::Status => {
            for migration in Migrator::get_migration_with_status_read_only(&db)
                .await
                .map_err(scrubbed)?
            {
                println!(
                    "{:<40} {}",
                    migration.name(),
                    migration.status().to_string().to_lowercase()
                );
            }
        }
    }
    db.close().await.map_err(scrubbed)?;
    Ok(())
}
