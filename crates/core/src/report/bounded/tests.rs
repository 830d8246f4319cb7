//! The entry stays within its budget whatever the fleet, and what it cuts is
//! what is not at fault.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use serde_json::Value;

use crate::HealthReport;
use crate::detail::{
    CanaryDetail, CanaryOnQueue, Detail, LoadAverage, QueueDetail, QueuedOnQueue, QueuedTasks,
    WorkerDetail, WorkerHeartbeat,
};
use crate::entity::job;
use crate::job::{ExecutorHealth, JobType};
use crate::report::{ENTRY_BUDGET, Thresholds, type_index};

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 7, 4, 0, 0).unwrap()
}

fn executor_row(id: i32, host: &str, health: &ExecutorHealth) -> job::Model {
    job::Model {
        id,
        dag_id: None,
        state: Some("running".into()),
        job_type: Some(JobType::ExecutorJob.as_str().into()),
        start_date: Some(now() - chrono::Duration::hours(1)),
        end_date: None,
        latest_heartbeat: Some(now() - chrono::Duration::seconds(1)),
        executor_class: Some("CeleryExecutor".into()),
        hostname: Some(host.into()),
        unixname: Some("airflow".into()),
        executor_health: health.as_str().into(),
        executor_health_reason: health.reason().map(str::to_owned),
        executor_instance: Some(format!("redis://broker-{id}:6379/0")),
        executor_health_checked_at: Some(now() - chrono::Duration::seconds(1)),
    }
}

/// The report of `rows`, each with the detail `detail` gives it.
fn report(rows: &[job::Model], detail: impl Fn(&job::Model) -> Option<Arc<Detail>>) -> Value {
    let live: Vec<&job::Model> = rows.iter().collect();
    let mut most_recent: [Option<&job::Model>; 4] = Default::default();
    most_recent[type_index(JobType::ExecutorJob)] = rows.first();
    let mut report = HealthReport::assemble(
        most_recent,
        &live,
        &detail,
        true,
        &Thresholds::with_heartbeat_interval(Duration::from_secs(5)),
        now(),
    );
    report.render();
    // The whole evidence stays in the report, for `/metrics` and the routes.
    let entry = report.executor.as_ref().unwrap();
    for (instance, row) in entry.instances.iter().zip(rows) {
        assert_eq!(instance.detail, detail(row));
    }
    serde_json::from_str(report.json()).unwrap()
}

fn size(value: &Value) -> usize {
    serde_json::to_string(value).unwrap().len()
}

fn worker(name: &str, state: Option<&str>) -> WorkerDetail {
    WorkerDetail {
        name: name.into(),
        queues: Some(vec!["default".into(), "reports".into()]),
        state: state.map(str::to_owned),
        concurrency: Some(16),
        free_concurrency: Some(12),
        heartbeat: Some(WorkerHeartbeat {
            last: now(),
            every_ms: 2000,
            active: Some(4),
            processed: Some(123_456),
            loadavg: Some([LoadAverage(0.42), LoadAverage(0.5), LoadAverage(0.61)]),
            software: Some("py-celery 5.5.3".into()),
        }),
    }
}

fn queue(name: &str, depth: Option<u64>, consumers: Option<u32>) -> QueueDetail {
    QueueDetail {
        name: name.into(),
        broker: "redis://broker:6379/0".into(),
        depth,
        consumers,
    }
}

/// A fleet: 1,000 workers (two stopped first, three gone last), 300 queues
/// (two that nobody consumes last), as many queued and canary queues (the
/// overdue and the failing last).
fn fleet() -> Detail {
    let mut workers: Vec<WorkerDetail> = (0..1000)
        .map(|i| worker(&format!("celery@host-{i:04}"), None))
        .collect();
    workers[0].state = Some("offline".into());
    workers[1].state = Some("offline".into());
    for w in &mut workers[997..] {
        w.state = Some("gone".into());
    }
    let mut queues: Vec<QueueDetail> = (0..300)
        .map(|i| queue(&format!("q-{i:03}"), Some(1), Some(2)))
        .collect();
    queues[298] = queue("nowhere", Some(5), Some(0));
    queues[299] = queue("elsewhere", Some(9), Some(0));
    let queued: Vec<QueuedOnQueue> = (0..300)
        .map(|i| QueuedOnQueue {
            queue: format!("q-{i:03}"),
            count: 1,
            oldest_seconds: Some(3),
            overdue: u64::from(i == 299),
        })
        .collect();
    let canary: Vec<CanaryOnQueue> = (0..300)
        .map(|i| CanaryOnQueue {
            queue: format!("q-{i:03}"),
            run_id: "scheduled__2026-12-07T04:00:00+00:00".into(),
            state: Some(if i == 299 { "queued" } else { "success" }.into()),
            waiting_seconds: (i == 299).then_some(400),
            pickup_seconds: None,
            run_seconds: None,
            last_success: None,
        })
        .collect();
    Detail {
        queues,
        workers: Some(workers),
        queued_tasks: Some(QueuedTasks {
            count: 300,
            oldest_seconds: Some(3),
            queues: queued,
        }),
        canary: Some(CanaryDetail {
            dag_id: "overseer_canary".into(),
            dag: "scheduled".into(),
            queues: canary,
        }),
        ..Detail::default()
    }
}

fn names<'a>(list: &'a Value, key: &str) -> Vec<&'a str> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|item| item[key].as_str().unwrap())
        .collect()
}

#[test]
fn a_thousand_workers_make_an_entry_of_a_few_kilobytes_naming_those_at_fault_first() {
    let rows = [executor_row(1, "sched-1", &ExecutorHealth::Healthy)];
    let whole = Arc::new(fleet());
    let body = report(&rows, |_| Some(whole.clone()));
    let entry = &body["executor"];
    assert!(size(entry) <= ENTRY_BUDGET, "{} bytes", size(entry));
    assert!(
        serde_json::to_string(&*whole).unwrap().len() > 200 * 1024,
        "the whole evidence is what the entry used to carry"
    );

    let detail = &entry["instances"][0]["detail"];
    let workers = names(&detail["workers"], "name");
    assert_eq!(workers.len(), 10);
    assert_eq!(
        workers[..3],
        ["celery@host-0997", "celery@host-0998", "celery@host-0999"],
        "the gone workers first"
    );
    assert!(!workers.contains(&"celery@host-0000"), "stopped ones last");
    assert_eq!(detail["workers_left_out"], 990);

    assert_eq!(
        names(&detail["queues"], "name")[..2],
        ["elsewhere", "nowhere"]
    );
    assert_eq!(detail["queues_left_out"], 290);
    let queued = &detail["queued_tasks"];
    assert_eq!(queued["count"], 300, "the counts are the whole fleet's");
    assert_eq!(
        names(&queued["queues"], "queue")[0],
        "q-299",
        "the overdue first"
    );
    assert_eq!(queued["queues_left_out"], 290);
    let canary = &detail["canary"];
    assert_eq!(
        names(&canary["queues"], "queue")[0],
        "q-299",
        "the failing first"
    );
    assert_eq!(canary["queues_left_out"], 290);
    assert_eq!(entry["instances_left_out"], 0);
}

#[test]
fn the_more_executors_share_the_entry_the_shorter_each_list_never_the_verdicts() {
    let rows: Vec<job::Model> = (1..=8)
        .map(|id| executor_row(id, "sched-1", &ExecutorHealth::Healthy))
        .collect();
    let whole = Arc::new(fleet());
    let body = report(&rows, |_| Some(whole.clone()));
    let entry = &body["executor"];
    assert!(size(entry) <= ENTRY_BUDGET, "{} bytes", size(entry));
    let instances = entry["instances"].as_array().unwrap();
    assert_eq!(instances.len(), 8, "every executor is shown");
    assert_eq!(entry["instances_left_out"], 0);
    for instance in instances {
        let workers = names(&instance["detail"]["workers"], "name");
        assert!(workers.len() < 10, "cut shorter: {workers:?}");
        assert_eq!(
            workers.len() + instance["detail"]["workers_left_out"].as_u64().unwrap() as usize,
            1000
        );
        assert_eq!(
            workers.first(),
            Some(&"celery@host-0997"),
            "still the gone first"
        );
    }
}

#[test]
fn hundreds_of_executors_keep_those_at_fault_and_say_how_many_were_left_out() {
    // As the plugin's own test (`test_entry.py`): 400 rows, every 40th
    // unhealthy and every 40th unknown.
    let rows: Vec<job::Model> = (0..400)
        .map(|i| {
            let health = match i % 40 {
                0 => ExecutorHealth::unhealthy("not answering"),
                20 => ExecutorHealth::unknown("host saturated"),
                _ => ExecutorHealth::Healthy,
            };
            executor_row(i, &format!("host-{i:03}"), &health)
        })
        .collect();
    let body = report(&rows, |_| None);
    let entry = &body["executor"];
    assert!(size(entry) <= ENTRY_BUDGET, "{} bytes", size(entry));
    let shown = entry["instances"].as_array().unwrap();
    let left_out = entry["instances_left_out"].as_u64().unwrap() as usize;
    assert!(left_out > 0);
    assert_eq!(shown.len() + left_out, 400);
    let at_fault = shown.iter().filter(|i| i["health"] != "healthy").count();
    assert_eq!(at_fault, 20, "every row at fault is kept");
    let hosts = names(&entry["instances"], "hostname");
    assert!(hosts.is_sorted(), "those shown keep their order");
    assert_eq!(entry["status"], "unhealthy", "the whole fleet's verdict");
    assert_eq!(entry["detailed_status"], "degraded");
}
