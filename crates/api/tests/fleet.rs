//! The paged routes of every worker and queue: the health entry shows a few of
//! a large fleet, these give the rest, in the same order, page by page.

use crate::support;

use std::sync::Arc;

use actix_web::http::StatusCode;
use actix_web::test;
use overseer_core::ExecutorHealth;
use overseer_core::detail::{Detail, WorkerDetail};
use serde_json::Value;
use support::{Harness, app};

fn worker(name: &str, state: Option<&str>) -> WorkerDetail {
    WorkerDetail {
        name: name.into(),
        queues: Some(vec!["default".into()]),
        state: state.map(str::to_owned),
        concurrency: Some(4),
        free_concurrency: Some(4),
        heartbeat: None,
    }
}

/// Two executors on this host: `CeleryExecutor` with 250 workers (the last
/// two gone) and 30 queues (the last one waiting with no consumer),
/// `alias:CeleryExecutor` with 3 workers; and one on another host, whose row
/// carries no evidence.
fn fleet_report() -> overseer_core::HealthReport {
    let mut big: Vec<WorkerDetail> = (0..250)
        .map(|i| worker(&format!("celery@big-{i:03}"), None))
        .collect();
    big[248].state = Some("gone".into());
    big[249].state = Some("gone".into());
    let mut queues: Vec<_> = (0..30)
        .map(|i| {
            support::queue(
                &format!("q-{i:02}"),
                "redis://broker:6379/0",
                Some(0),
                Some(1),
            )
        })
        .collect();
    queues[29] = support::queue("nowhere", "redis://broker:6379/0", Some(7), Some(0));
    let big = Arc::new(Detail {
        queues,
        workers: Some(big),
        ..Detail::default()
    });
    let small = Arc::new(Detail {
        workers: Some(
            (0..3)
                .map(|i| worker(&format!("celery@small-{i}"), None))
                .collect(),
        ),
        ..Detail::default()
    });
    let rows = vec![
        support::executor_row(1, "CeleryExecutor", "sched-1", ExecutorHealth::Healthy),
        support::executor_row(
            2,
            "alias:CeleryExecutor",
            "sched-1",
            ExecutorHealth::Healthy,
        ),
        support::executor_row(3, "CeleryExecutor", "sched-2", ExecutorHealth::Healthy),
    ];
    support::report_with_detail(rows, true, &move |row| match row.id {
        1 => Some(big.clone()),
        2 => Some(small.clone()),
        _ => None,
    })
}

async fn get(harness: &Harness, uri: &str) -> (StatusCode, Value) {
    let app = app!(harness.state);
    let response = test::call_service(&app, test::TestRequest::get().uri(uri).to_request()).await;
    let status = response.status();
    let body = test::read_body(response).await;
    (status, serde_json::from_slice(&body).unwrap())
}

fn names(page: &Value, list: &str) -> Vec<String> {
    page[list]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["name"].as_str().unwrap().to_owned())
        .collect()
}

#[actix_web::test]
async fn every_worker_is_on_some_page_once_the_entrys_first_ones_first() {
    let report = fleet_report();
    let json: Value = serde_json::from_str(report.json()).unwrap();
    let entry_workers = names(&json["executor"]["instances"][0]["detail"], "workers");
    let harness = Harness::new(report, 4);

    let mut seen = Vec::new();
    let mut offset = 0;
    loop {
        let uri = format!("/api/v2/monitor/health/executor/workers?limit=100&offset={offset}");
        let (status, page) = get(&harness, &uri).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(page["total_entries"], 253, "both executors' workers");
        let workers = names(&page, "workers");
        if workers.is_empty() {
            break;
        }
        seen.extend(workers);
        offset += 100;
    }
    assert_eq!(seen.len(), 253);
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 253, "no worker twice");
    assert_eq!(
        seen[..entry_workers.len()],
        entry_workers[..],
        "the route goes on from the entry's list, in its order"
    );
    assert_eq!(
        seen[..2],
        ["celery@big-248", "celery@big-249"],
        "the gone first"
    );
    assert_eq!(
        seen[250..],
        ["celery@small-0", "celery@small-1", "celery@small-2"]
    );
}

#[actix_web::test]
async fn a_page_of_one_executor_names_it_beside_each_worker() {
    let harness = Harness::new(fleet_report(), 4);
    let (status, page) = get(
        &harness,
        "/api/v2/monitor/health/executor/workers?executor=alias:CeleryExecutor&instance=redis://broker:6379/0",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page["total_entries"], 3);
    let first = &page["workers"][0];
    assert_eq!(first["executor"], "alias:CeleryExecutor");
    assert_eq!(first["instance"], "redis://broker:6379/0");
    assert_eq!(first["name"], "celery@small-0");
    assert_eq!(first["concurrency"], 4);

    let (_, one) = get(
        &harness,
        "/api/v2/monitor/health/executor/workers?name=celery@big-249",
    )
    .await;
    assert_eq!(one["total_entries"], 1);
    assert_eq!(one["workers"][0]["state"], "gone");
    assert_eq!(one["workers"][0]["executor"], "CeleryExecutor");

    let (_, none) = get(
        &harness,
        "/api/v2/monitor/health/executor/workers?executor=KubernetesExecutor",
    )
    .await;
    assert_eq!(none, serde_json::json!({"workers": [], "total_entries": 0}));
}

#[actix_web::test]
async fn queues_are_paged_with_the_unconsumed_first() {
    let harness = Harness::new(fleet_report(), 4);
    let (status, page) = get(&harness, "/api/v2/monitor/health/executor/queues?limit=5").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page["total_entries"], 30);
    let queues = names(&page, "queues");
    assert_eq!(queues, ["nowhere", "q-00", "q-01", "q-02", "q-03"]);
    assert_eq!(page["queues"][0]["depth"], 7);
    assert_eq!(page["queues"][0]["consumers"], 0);
    assert_eq!(page["queues"][0]["executor"], "CeleryExecutor");

    let (_, last) = get(&harness, "/api/v2/monitor/health/executor/queues?offset=28").await;
    assert_eq!(names(&last, "queues"), ["q-27", "q-28"]);
}

#[actix_web::test]
async fn a_bad_page_is_400_naming_the_key() {
    let harness = Harness::new(fleet_report(), 4);
    for (query, named) in [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=ten", "limit"),
        ("offset=-1", "offset"),
        ("offset=1000001", "offset"),
    ] {
        for route in ["workers", "queues"] {
            let uri = format!("/api/v2/monitor/health/executor/{route}?{query}");
            let (status, body) = get(&harness, &uri).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}");
            let detail = body["detail"].as_str().unwrap();
            assert!(detail.contains(named), "{uri}: {detail}");
            assert!(!detail.contains('\n'), "one line: {detail}");
        }
    }
}
