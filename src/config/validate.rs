//! The checks serde cannot make: ranges, relations between keys, executor names,
//! URLs a driver could connect to, health-check commands and URLs that can be
//! run and asked.
//!
//! Each check looks at one section (or, for durations, one rule across sections)
//! and answers the first problem it finds; [`validate`] runs them in a fixed order,
//! and the first problem found is the one reported, naming where its value came from.

use std::time::Duration;

use figment::Figment;
use figment::value::Value;
use overseer_core::Thresholds;

use super::layers::{describe, origin_of};
use super::{
    AlertConfig, ApiConfig, Config, ConfigError, DatabaseConfig, SupervisorConfig, bounds, duration,
};
use crate::secret::SecretUrl;

mod executors;

use executors::executor;

/// A problem with one key: the key, and what is wrong with its value.
type Problem = (&'static str, String);

/// The whole configuration, checked; the first problem, naming its key and origin.
pub(super) fn validate(config: &Config, figment: &Figment) -> Result<(), ConfigError> {
    let at = |(key, problem): Problem| ConfigError::new(key, origin_of(figment, key), problem);
    // When several keys are wrong, the first in this order is reported: the order
    // `overseer` has always checked them in (so `[supervisor]` has two steps).
    database(&config.database).map_err(at)?;
    hostname(&config.supervisor).map_err(at)?;
    durations(config).map_err(at)?;
    counts(&config.supervisor).map_err(at)?;
    executor_threshold(config).map_err(at)?;
    api(&config.api).map_err(at)?;
    poll_timeout(&config.supervisor, figment).map_err(at)?;
    for (index, entry) in config.executors.iter().enumerate() {
        executor(entry, &config.executors[..index]).map_err(|(field, problem)| {
            ConfigError::new(
                format!("executors[{index}].{field}"),
                executor_origin(figment, index, field),
                problem,
            )
        })?;
    }
    for (index, entry) in config.alerts.iter().enumerate() {
        alert(entry, &config.alerts[..index]).map_err(|(field, problem)| {
            ConfigError::new(
                format!("alerts[{index}].{field}"),
                origin_of(figment, &format!("alerts.{index}.{field}")),
                problem,
            )
        })?;
    }
    Ok(())
}

/// Where `executors[index].field` came from.
///
/// figment's own lookup stops at the array, so every field would be said to
/// come from whoever wrote the array last: Airflow's executor list, when it
/// names the executor. The keys Airflow never writes (`check_command`,
/// `check_url`, `check_cacert`, `max_queued_age`, `canary_max_pickup`, `max_at_capacity`) are carried from an earlier layer with their values' own tags,
/// so for those the value itself says where it was written (`overseer.toml`,
/// `OVERSEER_EXECUTORS`).
fn executor_origin(figment: &Figment, index: usize, field: &str) -> String {
    let path = format!("executors.{index}.{field}");
    if !matches!(
        field,
        "check_command"
            | "check_url"
            | "check_cacert"
            | "max_queued_age"
            | "canary_max_pickup"
            | "max_at_capacity"
    ) {
        return origin_of(figment, &path);
    }
    let value = match figment.find_value("executors") {
        Ok(Value::Array(_, entries)) => entries
            .into_iter()
            .nth(index)
            .and_then(Value::into_dict)
            .and_then(|mut entry| entry.remove(field)),
        _ => None,
    };
    match value.and_then(|v| figment.get_metadata(v.tag())) {
        Some(metadata) => describe(metadata, &["executors", &index.to_string(), field]),
        None => origin_of(figment, &path),
    }
}

/// `[database]`: a URL sea-orm can connect to.
fn database(database: &DatabaseConfig) -> Result<(), Problem> {
    check_database_url(&database.url).map_err(|problem| ("database.url", problem))
}

/// `supervisor.hostname`: what `job.hostname` can hold.
fn hostname(supervisor: &SupervisorConfig) -> Result<(), Problem> {
    if supervisor.hostname.trim().is_empty() {
        return Err(("supervisor.hostname", "must not be empty".into()));
    }
    if let Some(c) = super::executor::unsafe_char(&supervisor.hostname) {
        return Err((
            "supervisor.hostname",
            format!(
                "holds U+{:04X}, a control or bidirectional character, which a name may not",
                u32::from(c)
            ),
        ));
    }
    if supervisor.hostname.len() > 500 {
        return Err((
            "supervisor.hostname",
            "is longer than the 500 characters job.hostname holds".into(),
        ));
    }
    Ok(())
}

/// Every duration of `[supervisor]`, `[thresholds]` and `[history]` lies within
/// its [`bounds`]: checked before anything computes with them (`thresholds.executor`
/// multiplies `heartbeat_interval`, the aggregator subtracts thresholds from now).
fn durations(config: &Config) -> Result<(), Problem> {
    let supervisor = &config.supervisor;
    let thresholds = &config.thresholds;
    let set = [
        ("supervisor.poll_interval", Some(supervisor.poll_interval)),
        ("supervisor.poll_timeout", Some(supervisor.poll_timeout)),
        (
            "supervisor.heartbeat_interval",
            Some(supervisor.heartbeat_interval),
        ),
        (
            "supervisor.refresh_interval",
            Some(supervisor.refresh_interval),
        ),
        ("thresholds.scheduler", Some(thresholds.scheduler)),
        ("thresholds.triggerer", Some(thresholds.triggerer)),
        ("thresholds.dag_processor", Some(thresholds.dag_processor)),
        ("thresholds.executor", thresholds.executor),
        ("history.retention", Some(config.history.retention)),
    ];
    for (key, value) in set {
        if let Some(value) = value {
            bounds::of(key)
                .check(value)
                .map_err(|problem| (key, problem))?;
        }
    }
    Ok(())
}

/// `[supervisor]`'s counts of consecutive polls: at least one each.
fn counts(supervisor: &SupervisorConfig) -> Result<(), Problem> {
    for (key, value) in [
        (
            "supervisor.failures_before_unhealthy",
            supervisor.failures_before_unhealthy,
        ),
        (
            "supervisor.successes_before_healthy",
            supervisor.successes_before_healthy,
        ),
    ] {
        if value == 0 {
            return Err((key, "must be at least 1".into()));
        }
    }
    Ok(())
}

/// `thresholds.executor`, when set: long enough that this host's own rows stay
/// alive between two of its heartbeats.
fn executor_threshold(config: &Config) -> Result<(), Problem> {
    let Some(threshold) = config.thresholds.executor else {
        return Ok(());
    };
    let heartbeat = config.supervisor.heartbeat_interval;
    let own = heartbeat.mul_f64(Thresholds::GRACE_MULTIPLIER);
    // Within a microsecond: 2.1 is not exact in binary, and `2100ms` for a 1 s
    // heartbeat must pass.
    if threshold + Duration::from_micros(1) < own {
        return Err((
            "thresholds.executor",
            format!(
                "{} is shorter than {} (supervisor.heartbeat_interval {} times {}): this host's own executor rows would count as dead between heartbeats",
                duration::format(threshold),
                duration::format(own),
                duration::format(heartbeat),
                Thresholds::GRACE_MULTIPLIER,
            ),
        ));
    }
    Ok(())
}

/// `[api]`: room for at least one stream client; origins only in `frame_ancestors`;
/// `tls_cert` and `tls_key` together, each a readable PEM file, that make a TLS server.
fn api(api: &ApiConfig) -> Result<(), Problem> {
    if api.max_stream_clients == 0 {
        return Err(("api.max_stream_clients", "must be at least 1".into()));
    }
    overseer_api::dashboard::FrameAncestors::new(&api.frame_ancestors)
        .map_err(|problem| ("api.frame_ancestors", problem))?;
    super::tls::server_config(api).map_err(|e| {
        // The file is in the key's value already: the problem alone.
        (e.key, e.problem)
    })?;
    Ok(())
}

/// `supervisor.poll_timeout`: shorter than `poll_interval`, so a poll ends before
/// the next tick.
fn poll_timeout(supervisor: &SupervisorConfig, figment: &Figment) -> Result<(), Problem> {
    if supervisor.poll_timeout >= supervisor.poll_interval {
        return Err((
            "supervisor.poll_timeout",
            format!(
                "{} must be shorter than supervisor.poll_interval ({}, from {})",
                duration::format(supervisor.poll_timeout),
                duration::format(supervisor.poll_interval),
                origin_of(figment, "supervisor.poll_interval"),
            ),
        ));
    }
    Ok(())
}

/// One `[[alerts]]` entry, after the `earlier` ones: an `http://` or `https://`
/// URL with a host (the problem never quotes it: it may hold a token), and a
/// `target` label of its own, so that no two targets share their metrics.
fn alert(alert: &AlertConfig, earlier: &[AlertConfig]) -> Result<(), Problem> {
    let parsed = url::Url::parse(alert.url.expose_secret())
        .map_err(|e| ("url", format!("is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        // `ftp://host/...`, but `javascript:alert(1)` or `mailto:ops@...`: the
        // scheme as it was written, `//` only where the URL had one.
        let slashes = if parsed.cannot_be_a_base() { "" } else { "//" };
        return Err((
            "url",
            format!(
                "must be an http:// or https:// URL, not {}:{slashes}",
                scheme_for_display(parsed.scheme())
            ),
        ));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(("url", "must name a host".into()));
    }
    for (field, value) in [
        ("min_duration", alert.min_duration),
        ("retry_for", alert.retry_for),
    ] {
        bounds::of(&format!("alerts[].{field}"))
            .check(value)
            .map_err(|problem| (field, problem))?;
    }
    if let Some(name) = &alert.name
        && name.trim().is_empty()
    {
        return Err((
            "name",
            "must not be empty (leave it out to use the URL)".into(),
        ));
    }
    let label = alert.target_label();
    if let Some(index) = earlier.iter().position(|e| e.target_label() == label) {
        let (field, problem) = if alert.name.is_some() {
            ("name", format!("{label:?} is alerts[{index}]'s already"))
        } else {
            (
                "url",
                format!(
                    "is shown as {label}, as alerts[{index}] is: give each a name, so their metrics can be told apart"
                ),
            )
        };
        return Err((field, problem));
    }
    Ok(())
}

/// The schemes sea-orm connects to.
fn check_database_url(url: &SecretUrl) -> Result<(), String> {
    let text = url.expose_secret();
    if let Some(rest) = text.strip_prefix("sqlite:") {
        return if rest
            .trim_start_matches('/')
            .split('?')
            .next()
            .unwrap_or_default()
            .is_empty()
        {
            Err(
                "a sqlite URL must name a file (sqlite://overseer.db?mode=rwc) or sqlite::memory:"
                    .into(),
            )
        } else {
            Ok(())
        };
    }
    let Some((scheme, _)) = text.split_once("://") else {
        let written = scheme_for_display(text);
        return Err(
            match ["postgresql", "postgres", "mysql", "sqlite"]
                .into_iter()
                .find(|known| written.eq_ignore_ascii_case(known))
            {
                Some(known) => format!(
                    "is missing \"://\" after \"{known}\" (expected {known}://host/database)"
                ),
                None => "is not a URL: expected sqlite://, postgres:// or mysql://".into(),
            },
        );
    };
    if !matches!(scheme, "postgres" | "postgresql" | "mysql") {
        return Err(format!(
            "unsupported database URL scheme {:?}: expected sqlite://, postgres:// or mysql://",
            scheme_for_display(text)
        ));
    }
    let parsed = url::Url::parse(text).map_err(|e| format!("is not a valid {scheme} URL: {e}"))?;
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(format!("a {scheme} URL must name a host"));
    }
    Ok(())
}

/// A broker URL, or a `;`-separated failover list, as Celery and kombu accept
/// them; the error says what is wrong without quoting the URL.
fn check_broker_url(url: &SecretUrl) -> Result<(), String> {
    overseer_celery::BrokerUrl::parse(url.expose_secret())
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The part of a URL before `://` or `:`, enough to say which kind it is, never
/// more (a malformed URL may hold a password anywhere).
fn scheme_for_display(text: &str) -> String {
    text.split([':', '/', '@'])
        .next()
        .unwrap_or_default()
        .chars()
        .take(20)
        .collect()
}
