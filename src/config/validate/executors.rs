//! The checks of one `[[executors]]` entry: its name among the others, its
//! broker and result backend, its TLS files, its limits, and the health-check
//! command or URL of an executor that is not Celery's.

use super::super::executor::ExecutorKind;
use super::super::{ExecutorConfig, bounds};
use super::{Problem, check_broker_url};

/// One `[[executors]]` entry, after the `earlier` ones; the problem names a field
/// of the entry (`name`, `broker_url`, ...).
pub(super) fn executor(
    executor: &ExecutorConfig,
    earlier: &[ExecutorConfig],
) -> Result<(), Problem> {
    let name = &executor.name;
    if earlier.iter().any(|e| e.name == *name) {
        return Err((
            "name",
            format!("executor {:?} is configured twice", name.to_string()),
        ));
    }
    checks(executor, name.kind())?;
    match (name.kind(), &executor.broker_url) {
        (ExecutorKind::Celery, None) => {
            return Err((
                "broker_url",
                format!("is missing: {} needs its Celery broker", executor.name),
            ));
        }
        (ExecutorKind::Celery, Some(url)) => {
            check_broker_url(url).map_err(|problem| ("broker_url", problem))?;
        }
        (ExecutorKind::Unchecked | ExecutorKind::Edge, Some(_)) => {
            return Err((
                "broker_url",
                format!("applies only to CeleryExecutor, not to {}", executor.name),
            ));
        }
        (ExecutorKind::Unchecked | ExecutorKind::Edge, None) => {}
    }
    if let Some(backend) = &executor.result_backend {
        if name.kind() != ExecutorKind::Celery {
            return Err((
                "result_backend",
                format!("applies only to CeleryExecutor, not to {}", executor.name),
            ));
        }
        if !backend.expose_secret().contains("://") {
            return Err((
                "result_backend",
                "is not a URL (expected scheme://..., as Celery's result_backend; the value \
                 is not shown: it may hold a password)"
                    .to_owned(),
            ));
        }
    }
    ssl(executor, name.kind())?;
    bounds::of("executors[].max_queued_age")
        .check(executor.max_queued_age)
        .map_err(|problem| ("max_queued_age", problem))?;
    bounds::of("executors[].canary_max_pickup")
        .check(executor.canary_max_pickup)
        .map_err(|problem| ("canary_max_pickup", problem))?;
    bounds::of("executors[].max_at_capacity")
        .check(executor.max_at_capacity)
        .map_err(|problem| ("max_at_capacity", problem))?;
    if executor.parallelism == 0 {
        return Err((
            "parallelism",
            "must be at least 1 (Airflow's [core] parallelism)".to_owned(),
        ));
    }
    if executor.worker_concurrency == 0 {
        return Err((
            "worker_concurrency",
            "must be at least 1 (Airflow's [celery] worker_concurrency)".to_owned(),
        ));
    }
    if executor.queues.is_empty() || executor.queues.iter().any(|q| q.trim().is_empty()) {
        return Err((
            "queues",
            "must list at least one queue, and no empty names".into(),
        ));
    }
    if executor.min_workers > 0 && !executor.worker_ping && !executor.worker_events {
        return Err((
            "min_workers",
            format!(
                "is {}, which needs worker_events or worker_ping = true to count workers",
                executor.min_workers
            ),
        ));
    }
    Ok(())
}

/// `ssl_active`, `ssl_key`, `ssl_cert`, `ssl_cacert`: Celery's only, and, as
/// Airflow's Celery provider requires, `ssl_active` only with a broker it can give
/// TLS to (an `amqp://` URL, or `redis://`, `rediss://`, `sentinel://`).
fn ssl(executor: &ExecutorConfig, kind: ExecutorKind) -> Result<(), Problem> {
    let set = [
        ("ssl_active", executor.ssl_active),
        ("ssl_key", executor.ssl_key.is_some()),
        ("ssl_cert", executor.ssl_cert.is_some()),
        ("ssl_cacert", executor.ssl_cacert.is_some()),
    ];
    if kind != ExecutorKind::Celery
        && let Some((key, _)) = set.iter().find(|(_, is_set)| *is_set)
    {
        return Err((
            *key,
            format!("applies only to CeleryExecutor, not to {}", executor.name),
        ));
    }
    if let (true, Some(url)) = (executor.ssl_active, &executor.broker_url) {
        // Airflow's own test, on the URL's text (`default_celery.py`).
        let text = url.expose_secret();
        let redis = ["redis://", "rediss://", "sentinel://"]
            .iter()
            .any(|s| text.contains(s));
        if !text.contains("amqp://") && !redis {
            return Err((
                "ssl_active",
                "is true, but the broker is neither RabbitMQ (amqp://) nor Redis (redis://, rediss://, sentinel://): \
                 Airflow refuses ssl_active for any other broker"
                    .into(),
            ));
        }
    }
    Ok(())
}

/// `check_command` and `check_url`: one of them at most, on any executor but
/// Celery's (checked through its broker), each in a form that can be run or asked.
fn checks(executor: &ExecutorConfig, kind: ExecutorKind) -> Result<(), Problem> {
    let set = [
        ("check_command", executor.check_command.is_some()),
        ("check_url", executor.check_url.is_some()),
    ];
    if kind == ExecutorKind::Celery
        && let Some((key, _)) = set.iter().find(|(_, is_set)| *is_set)
    {
        return Err((
            *key,
            format!(
                "does not apply to {}: a Celery executor is checked through its broker",
                executor.name
            ),
        ));
    }
    if set.iter().all(|(_, is_set)| *is_set) {
        return Err((
            "check_url",
            "cannot be set beside check_command: an executor has one check".into(),
        ));
    }
    if let Some(argv) = &executor.check_command {
        overseer_checks::command::check_argv(argv)
            .map_err(|problem| ("check_command", problem.to_string()))?;
    }
    if let Some(url) = &executor.check_url {
        overseer_checks::http::parse_url(url)
            .map_err(|problem| ("check_url", problem.to_string()))?;
    }
    if let Some(cacert) = &executor.check_cacert {
        if executor.check_url.is_none() {
            return Err((
                "check_cacert",
                "applies only beside an https:// check_url".into(),
            ));
        }
        overseer_checks::http::tls_config(std::path::Path::new(cacert))
            .map_err(|problem| ("check_cacert", problem.to_string()))?;
    }
    Ok(())
}
