//! The executor entry's rules as one table of cases,
//! `integrations/airflow/tests/entry_cases.json`, which the Airflow plugin's
//! own tests read too (`test_entry.py`): the two sets of rules are held to the
//! same table, in seconds, rather than only by the minutes-long run against a
//! real Airflow. Each case's rows are written into a migrated job table on every
//! backend, read as the report reads them (Airflow's most recent job, the live
//! rows), and built into the report; its `executor` entry must be the case's
//! (absent where the case's is `null`).

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use overseer_core::HealthReport;
use overseer_core::entity::job;
use overseer_core::report::Thresholds;
use overseer_core::storage::report_rows;
use overseer_migration::{Migrator, MigratorTrait};
use sea_orm::{EntityTrait, IntoActiveModel};
use serde_json::Value;

const CASES: &str = include_str!("../../../integrations/airflow/tests/entry_cases.json");

/// `seconds` before `now`, to the microsecond; `None` for `null`.
fn ago(now: DateTime<Utc>, seconds: &Value) -> Option<DateTime<Utc>> {
    let seconds = seconds.as_f64()?;
    Some(now - TimeDelta::microseconds((seconds * 1e6).round() as i64))
}

/// A case's row: the table's defaults with its own columns over them.
fn row(defaults: &Value, columns: &Value, now: DateTime<Utc>) -> job::Model {
    let mut c = defaults.as_object().unwrap().clone();
    c.extend(columns.as_object().unwrap().clone());
    let text = |key: &str| c[key].as_str().map(str::to_owned);
    job::Model {
        id: i32::try_from(c["id"].as_i64().unwrap()).unwrap(),
        dag_id: None,
        state: text("state"),
        job_type: Some("ExecutorJob".into()),
        start_date: ago(now, &Value::from(3600)),
        end_date: ago(now, &c["end_age"]),
        latest_heartbeat: ago(now, &c["age"]),
        executor_class: text("executor_class"),
        hostname: text("hostname"),
        unixname: Some("airflow".into()),
        executor_health: text("executor_health").unwrap(),
        executor_health_reason: text("executor_health_reason"),
        executor_instance: text("executor_instance"),
        executor_health_checked_at: ago(now, &c["checked_age"]),
    }
}

#[tokio::test]
async fn every_case_of_the_table_shared_with_the_plugin_makes_its_entry() {
    let table: Value = serde_json::from_str(CASES).unwrap();
    let now: DateTime<Utc> = table["now"].as_str().unwrap().parse().unwrap();
    let thresholds = Thresholds {
        executor: Duration::from_secs(table["threshold_seconds"].as_u64().unwrap()),
        ..Thresholds::with_heartbeat_interval(Duration::from_secs(5))
    };
    let cases = table["cases"].as_array().unwrap();
    assert!(cases.len() > 10, "the table has its cases");
    for db in overseer_testkit::all_backends().await {
        Migrator::up(&db.conn, None).await.unwrap();
        for case in cases {
            let name = format!("{:?}: {}", db.backend, case["name"]);
            job::Entity::delete_many().exec(&db.conn).await.unwrap();
            for columns in case["rows"].as_array().unwrap() {
                let model = row(&table["row_defaults"], columns, now);
                job::Entity::insert(model.into_active_model())
                    .exec(&db.conn)
                    .await
                    .unwrap();
            }
            let rows = report_rows(&db.conn, now, thresholds.longest())
                .await
                .unwrap();
            let report = HealthReport::build(&rows, true, &thresholds, now);
            let body: Value = serde_json::from_str(report.json()).unwrap();
            let entry = body.get("executor").cloned().unwrap_or(Value::Null);
            assert_eq!(entry, case["entry"], "{name}");
        }
    }
}
