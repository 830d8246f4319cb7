//! Airflow's values in Overseer's terms: a SQLAlchemy URL as a sea-orm one,
//! a threshold's seconds as a duration within its bounds, a boolean as
//! `conf.getboolean` reads it.

use std::time::Duration;

use crate::config::bounds::Bounds;

/// A boolean as Airflow's `conf.getboolean` reads one.
pub(super) fn airflow_bool(text: &str) -> Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "t" | "true" | "1" => Ok(true),
        "f" | "false" | "0" => Ok(false),
        _ => Err(format!(
            "{:?} is not a boolean (Airflow accepts true, false, t, f, 1, 0)",
            text.trim()
        )),
    }
}

/// Translates a SQLAlchemy URL, as Airflow takes it, into a sea-orm one.
///
/// - `postgresql://`, `postgresql+psycopg2://`, `postgresql+psycopg://`, `postgres://`
///   become `postgres://` (query options such as `sslmode` are kept);
/// - `mysql://`, `mysql+mysqldb://`, `mysql+pymysql://`, ... become `mysql://`;
/// - `sqlite:////abs/path` (four slashes) is the absolute file `/abs/path`,
///   `sqlite:///rel/path` is refused as Airflow refuses it, and `sqlite://`
///   an in-memory database. The file must exist: Overseer does not create
///   Airflow's database.
pub fn sqlalchemy_to_sea_orm(url: &str) -> Result<String, String> {
    let url = url.trim();
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err("is not a SQLAlchemy URL (expected dialect://...)".into());
    };
    let dialect = scheme
        .split('+')
        .next()
        .unwrap_or(scheme)
        .to_ascii_lowercase();
    match dialect.as_str() {
        "postgresql" | "postgres" => Ok(format!("postgres://{rest}")),
        "mysql" | "mariadb" => Ok(format!("mysql://{rest}")),
        "sqlite" => {
            let path = rest.split('?').next().unwrap_or_default();
            match path.strip_prefix('/') {
                None if path.is_empty() => Ok("sqlite::memory:".into()),
                // As Airflow's `configure_orm`, which refuses the same URL.
                Some(file) if !file.starts_with('/') => Err(
                    "Airflow cannot use a relative SQLite path (use sqlite:////absolute/path)"
                        .into(),
                ),
                Some(file) => Ok(format!("sqlite://{file}")),
                _ => Err(format!(
                    "SQLite URL {url:?} names no file (expected sqlite:////absolute/path)"
                )),
            }
        }
        _ => Err(format!(
            "dialect {scheme:?} is not supported (Overseer reads postgresql, mysql and sqlite databases)"
        )),
    }
}

/// Parses Airflow's thresholds: a number of seconds, integer or fractional,
/// within the `bounds` of the key it sets (`1e20` is refused, not converted).
pub fn parse_seconds(text: &str, bounds: Bounds) -> Result<Duration, String> {
    let seconds = text
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0);
    let Some(seconds) = seconds else {
        return Err(format!(
            "expected a positive number of seconds, got {:?}",
            text.trim()
        ));
    };
    bounds.seconds(seconds)
}
