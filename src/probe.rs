//! `overseer health` and `overseer jobs check`: answers for probes and people.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, anyhow};
use chrono::Utc;
use overseer_core::report::{Component, Thresholds, is_alive};
use overseer_core::storage;
use serde_json::Value;

use crate::config::Config;
use crate::db;

/// How long `overseer health` waits for the service: it answers from memory, so
/// anything slower means it is in trouble.
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(10);

/// What a probe concluded, and so its exit code (`0` healthy, `1` unhealthy).
/// Not an executor's verdict (that is `ExecutorHealth`): the whole answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing is unhealthy.
    Healthy,
    /// Something is unhealthy, or the service could not be asked.
    Unhealthy,
}

/// The base URL `overseer health` asks by default: the configured bind address,
/// on loopback when it binds every interface; `https://` when the API serves TLS.
pub fn default_url(config: &Config) -> String {
    let mut bind = config.api.bind;
    if bind.ip().is_unspecified() {
        bind.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let scheme = if config.api.tls_cert.is_some() {
        "https"
    } else {
        "http"
    };
    format!("{scheme}://{bind}")
}

/// `overseer health`: prints the report (a table, or the JSON) and says whether
/// anything is unhealthy: any of `components`, or any component when none is named.
///
/// An `https://` URL is verified against the system's roots, or only `cacert` (a
/// PEM bundle) when given, host name included.
pub fn health(
    url: &str,
    json: bool,
    cacert: Option<&Path>,
    components: &[Component],
) -> anyhow::Result<Outcome> {
    let endpoint = format!("{}/api/v2/monitor/health", url.trim_end_matches('/'));
    let agent = agent(cacert)?;
    let body = match agent.get(&endpoint).timeout(HEALTH_TIMEOUT).call() {
        Ok(response) => response.into_string(),
        Err(ureq::Error::Status(503, response)) => response.into_string(),
        Err(ureq::Error::Status(status, _)) => {
            return Err(anyhow!("{endpoint} answered HTTP {status}"));
        }
        Err(e) => return Err(anyhow!("cannot reach {endpoint}: {e}")),
    }
    .with_context(|| format!("while reading {endpoint}"))?;
    let report: Value =
        serde_json::from_str(&body).with_context(|| format!("{endpoint} did not answer JSON"))?;

    if json {
        println!("{body}");
    } else {
        print!("{}", table(&report));
    }
    // Every component: none unhealthy, as Airflow's own `?strict=true` judges.
    // The components named: each must have said healthy; one that has no
    // verdict (nothing checked yet, or none supervised) is not taken for one.
    let unhealthy = if components.is_empty() {
        Component::ALL
            .iter()
            .any(|c| report[c.as_str()]["status"] == "unhealthy")
    } else {
        let mut failed = false;
        for component in components {
            let entry = &report[component.as_str()];
            match entry["status"].as_str() {
                Some("healthy") => {}
                Some(_) => failed = true,
                None => {
                    failed = true;
                    let why = if entry.is_null() && *component == Component::Executor {
                        "none supervised"
                    } else if entry.is_null() {
                        "not in the report"
                    } else {
                        "no verdict yet (nothing checked)"
                    };
                    eprintln!("{}: {why}", component.as_str());
                }
            }
        }
        failed
    };
    Ok(if unhealthy {
        Outcome::Unhealthy
    } else {
        Outcome::Healthy
    })
}

/// The HTTP client: rustls with the system's roots, or with only `cacert`'s.
fn agent(cacert: Option<&Path>) -> anyhow::Result<ureq::Agent> {
    let mut agent = ureq::AgentBuilder::new();
    if let Some(cacert) = cacert {
        let config =
            overseer_checks::http::tls_config(cacert).map_err(|e| anyhow!("--cacert {e}"))?;
        agent = agent.tls_config(config);
    }
    Ok(agent.build())
}

/// `, for 3m (was healthy)`: how long an instance's state has held, from its
/// `since` and `previous`; nothing when the report does not say.
fn since(instance: &Value) -> String {
    let Some(at) = instance["since"]
        .as_str()
        .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
    else {
        return String::new();
    };
    let held = (Utc::now() - at.with_timezone(&Utc))
        .to_std()
        .unwrap_or_default();
    let held = Duration::from_secs(held.as_secs());
    match instance["previous"].as_str() {
        Some(previous) => format!(
            ", for {} (was {previous})",
            overseer_core::duration::age(held)
        ),
        None => format!(", for {}", overseer_core::duration::age(held)),
    }
}

/// The table's line for a report without an `executor` entry: no executor row
/// is open on the database, so the Overseer asked supervises none (its own rows
/// would be open) and neither does any other sharing its database. What to
/// configure, as `serve` warns it at start and the dashboard's card says it.
pub const NOTHING_SUPERVISED: &str = "none supervised: neither this Overseer nor any other on its database supervises an executor; \
     set AIRFLOW__CORE__EXECUTOR (with AIRFLOW__CELERY__BROKER_URL for Celery, \
     AIRFLOW__DATABASE__SQL_ALCHEMY_CONN for Airflow's database), OVERSEER_EXECUTORS, \
     or [[executors]] in overseer.toml, and restart it";

/// The report as a table for people.
fn table(report: &Value) -> String {
    let text = |v: &Value| v.as_str().map_or_else(|| "-".to_owned(), str::to_owned);
    let mut out = format!(
        "{:<14} {:<10} {:<9} {}\n",
        "COMPONENT", "STATUS", "DETAIL", "LATEST HEARTBEAT"
    );
    out += &format!(
        "{:<14} {:<10}\n",
        "metadatabase",
        text(&report["metadatabase"]["status"])
    );
    for (name, heartbeat) in [
        ("scheduler", "latest_scheduler_heartbeat"),
        ("triggerer", "latest_triggerer_heartbeat"),
        ("dag_processor", "latest_dag_processor_heartbeat"),
        ("executor", "latest_executor_heartbeat"),
    ] {
        let entry = &report[name];
        if entry.is_null() {
            if name == "executor" {
                out += &format!("{name:<14} {NOTHING_SUPERVISED}\n");
            }
            continue;
        }
        out += &format!(
            "{:<14} {:<10} {:<9} {}\n",
            name,
            text(&entry["status"]),
            text(&entry["detailed_status"]),
            text(&entry[heartbeat])
        );
        for instance in entry["instances"].as_array().into_iter().flatten() {
            if name == "executor" {
                out += &format!(
                    "  {} {} on {}: {}{}{}\n",
                    text(&instance["executor"]),
                    text(&instance["instance"]),
                    text(&instance["hostname"]),
                    text(&instance["health"]),
                    instance["reason"]
                        .as_str()
                        .map(|r| format!(" ({r})"))
                        .unwrap_or_default(),
                    since(instance)
                );
            } else {
                out += &format!(
                    "  {} at {}\n",
                    text(&instance["hostname"]),
                    text(&instance[heartbeat])
                );
            }
        }
    }
    out
}

/// `overseer jobs check`, as `airflow jobs check`: the message it prints and
/// whether the check passed (Airflow exits 1 when it does not).
pub async fn jobs_check(
    config: &Config,
    job_type: Option<&str>,
    hostname: Option<&str>,
    limit: u64,
    allow_multiple: bool,
    local: bool,
) -> anyhow::Result<Result<String, String>> {
    if allow_multiple && limit <= 1 {
        return Ok(Err(
            "To use option --allow-multiple, you must set the limit to a value greater than 1."
                .into(),
        ));
    }
    if hostname.is_some() && local {
        return Ok(Err(
            "You can't use --hostname and --local at the same time".into()
        ));
    }
    let hostname = if local {
        Some(config.supervisor.hostname.as_str())
    } else {
        hostname
    };

    let db = db::connect(&config.database.url).await?;
    let jobs = storage::running_jobs(&db, job_type, hostname, limit)
        .await
        .map_err(|e| anyhow!(config.database.url.scrub(&e.to_string())))?;
    db.close().await.ok();

    let thresholds = config.thresholds();
    let now = Utc::now();
    let alive = jobs
        .iter()
        .filter(|job| {
            let threshold = match job.job_type() {
                Ok(Some(job_type)) => thresholds.of(job_type),
                // Other job types (LocalTaskJob, ...): Airflow's default heart rate
                // (5 s) times its grace multiplier.
                _ => Duration::from_secs(5).mul_f64(Thresholds::GRACE_MULTIPLIER),
            };
            is_alive(job, threshold, now)
        })
        .count();
    Ok(match alive {
        0 => Err("No alive jobs found.".into()),
        1 => Ok("Found one alive job.".into()),
        n if allow_multiple => Ok(format!("Found {n} alive jobs.")),
        n => Err(format!("Found {n} alive jobs. Expected only one.")),
    })
}
