//! Airflow's layer: URLs translated, thresholds bounded, and the settings an
//! earlier layer gave an executor kept.

use std::time::Duration;

use super::conf::{BROKER_URL, EXECUTOR};
use super::executors::name_of;
use super::*;

#[test]
fn sqlalchemy_urls_translate_to_sea_orm_urls() {
    for (sqlalchemy, sea_orm) in [
        (
            "postgresql+psycopg2://airflow:pw@db:5432/airflow",
            "postgres://airflow:pw@db:5432/airflow",
        ),
        (
            "postgresql://airflow@db/airflow?sslmode=require",
            "postgres://airflow@db/airflow?sslmode=require",
        ),
        (
            "postgresql+psycopg://a@db/airflow",
            "postgres://a@db/airflow",
        ),
        (
            "mysql+mysqldb://airflow:pw@db:3306/airflow",
            "mysql://airflow:pw@db:3306/airflow",
        ),
        (
            "mysql+pymysql://airflow@db/airflow?charset=utf8mb4",
            "mysql://airflow@db/airflow?charset=utf8mb4",
        ),
        (
            "sqlite:////opt/airflow/airflow.db",
            "sqlite:///opt/airflow/airflow.db",
        ),
        ("sqlite://", "sqlite::memory:"),
    ] {
        assert_eq!(
            sqlalchemy_to_sea_orm(sqlalchemy).unwrap(),
            sea_orm,
            "{sqlalchemy}"
        );
    }
}

#[test]
fn unsupported_sqlalchemy_urls_are_refused_without_their_credentials() {
    let err = sqlalchemy_to_sea_orm("mssql+pyodbc://sa:hunter2@db/airflow").unwrap_err();
    assert_eq!(
        err,
        r#"dialect "mssql+pyodbc" is not supported (Overseer reads postgresql, mysql and sqlite databases)"#
    );
    assert!(sqlalchemy_to_sea_orm("airflow.db").is_err());
    assert_eq!(
        sqlalchemy_to_sea_orm("sqlite:///airflow.db").unwrap_err(),
        "Airflow cannot use a relative SQLite path (use sqlite:////absolute/path)"
    );
}

/// `check_command` and `check_url` are never Airflow's: an executor Airflow
/// names keeps them from the layer that set them, as the text it was read
/// from, whether Airflow lists the executors or only sets the broker.
#[test]
fn an_executor_airflow_names_keeps_its_check_from_an_earlier_layer() {
    let entry = |name: &str, key: &str, value: Value| {
        Dict::from([
            ("name".to_owned(), Value::from(name)),
            (key.to_owned(), value),
        ])
    };
    let url = "http://ops:hunter2@probe:8080/health?token=s3cret";
    let argv = vec!["/usr/local/bin/probe".to_owned(), "--fast".to_owned()];
    let earlier = [
        entry("KubernetesExecutor", "check_url", Value::from(url)),
        entry(
            "team:my.company.BatchExecutor",
            "check_command",
            Value::from(argv.clone()),
        ),
    ];
    for list in [
        Some("CeleryExecutor, KubernetesExecutor,team:my.company.BatchExecutor"),
        None,
    ] {
        let mut vars = vec![
            ("HOME".to_owned(), "/nonexistent".to_owned()),
            (
                BROKER_URL.variable(None),
                "redis://broker:6379/0".to_owned(),
            ),
        ];
        if let Some(list) = list {
            vars.push((EXECUTOR.variable(None), list.to_owned()));
        }
        let conf = AirflowConf::read(vars).unwrap();
        let earlier = Earlier {
            executors: &earlier,
            database_set: false,
        };
        let env = AirflowEnv::read(&conf, &earlier).unwrap();
        let Some(Value::Array(_, executors)) = env.values.get("executors") else {
            panic!("Airflow's layer sets the executors: {:?}", env.values);
        };
        let field = |name: &str, key: &str| {
            executors
                .iter()
                .filter_map(Value::as_dict)
                .find(|e| name_of(e) == Some(name))
                .and_then(|e| e.get(key).cloned())
        };
        assert_eq!(
            field("KubernetesExecutor", "check_url").and_then(|v| v.into_string()),
            Some(url.to_owned()),
            "{list:?}"
        );
        assert_eq!(
            field("team:my.company.BatchExecutor", "check_command")
                .and_then(|v| v.deserialize::<Vec<String>>().ok()),
            Some(argv.clone()),
            "{list:?}"
        );
        // Airflow's broker goes to Celery executors only.
        assert_eq!(field("KubernetesExecutor", "broker_url"), None, "{list:?}");
    }
}

#[test]
fn thresholds_are_seconds_within_their_bounds() {
    let bounds = super::bounds::of("thresholds.scheduler");
    assert_eq!(
        parse_seconds("30", bounds).unwrap(),
        Duration::from_secs(30)
    );
    assert_eq!(
        parse_seconds("2.5", bounds).unwrap(),
        Duration::from_millis(2500)
    );
    assert_eq!(
        parse_seconds("-1", bounds).unwrap_err(),
        r#"expected a positive number of seconds, got "-1""#
    );
    assert!(parse_seconds("30s", bounds).is_err());
    for text in ["1e20", "1e308", "inf", "nan", "0.5", "604801"] {
        assert!(parse_seconds(text, bounds).is_err(), "{text}");
    }
}
