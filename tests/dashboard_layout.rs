//! The dashboard at a glance, in a real browser (headless Chromium over
//! WebDriver) against the real `overseer serve`: executors with long names (a
//! Celery broker of a throwaway Redis, killed; an Edge executor; a custom
//! executor whose probe fails; one that is fine), at 1280 and at 390 pixels
//! wide. No card, name or line spills out of its box, the worst instance comes
//! first, and the filter by state and name, kept in the URL, keeps only what
//! it names: also among 50 instances. Screenshots in `target/artifacts/`.

use crate::support;

use overseer_testkit::throwaway::ThrowawayRedis;
use serde_json::{Value, json};
use support::browser::{Driver, report_time};
use support::{Serving, overseer, workdir};

/// Every box the page draws that holds text, and whether its content is wider
/// than the box: `[]` when nothing spills. The page itself must not scroll sideways.
const SPILLS: &str = r#"
    const boxes = document.querySelectorAll(
      '#summary, .card, .card > ul > li, .host, .detail, .reason, .since, div.name, .evidence td, .filters');
    const spilled = [...boxes]
      .filter((node) => node.offsetParent !== null && node.scrollWidth > node.clientWidth)
      .map((node) => (node.id || node.className) + ': ' + node.scrollWidth + ' > ' + node.clientWidth
                     + ' ' + node.innerText.slice(0, 60));
    if (document.documentElement.scrollWidth > window.innerWidth) spilled.push('the page scrolls sideways');
    return spilled;"#;

/// The health of each executor instance shown, top to bottom, left to right.
const ORDER: &str = r#"
    return [...document.querySelectorAll('#card-executor > ul > li[data-health]')]
      .filter((item) => !item.hidden)
      .map((item) => item.dataset.health);"#;

/// Where each health sits in `order` is the worst first: no unhealthy after an
/// unknown or a healthy one, no unknown after a healthy one.
fn worst_first(order: &Value) -> bool {
    let rank = |h: &Value| match h.as_str() {
        Some("unhealthy") => 0,
        Some("unknown") => 1,
        _ => 2,
    };
    let ranks: Vec<u8> = order.as_array().unwrap().iter().map(rank).collect();
    ranks.windows(2).all(|w| w[0] <= w[1])
}

/// At `width` by `height`: nothing spills, and a screenshot.
fn nothing_spills_at(browser: &Driver, width: u32, height: u32, screenshot: &str) {
    browser.resize(width, height);
    browser.wait_until(
        &format!("return Math.abs(window.innerWidth - {width}) < 40"),
        "return window.innerWidth",
    );
    assert_eq!(browser.eval(SPILLS), json!([]), "at {width} px");
    browser.screenshot(screenshot);
}

#[tokio::test]
async fn executors_get_the_room_their_names_never_spill_and_the_worst_comes_first() {
    let Some(browser) = Driver::start() else {
        return;
    };
    let Some(mut broker) = ThrowawayRedis::start(&[]) else {
        return;
    };
    let dir = workdir();
    std::fs::write(
        dir.path().join("overseer.toml"),
        format!(
            "[supervisor]\nheartbeat_interval = \"200ms\"\nrefresh_interval = \"100ms\"\n\
             poll_interval = \"300ms\"\npoll_timeout = \"200ms\"\n\n\
             [[executors]]\nname = \"CeleryExecutor\"\nbroker_url = \"redis://127.0.0.1:{}/0\"\n\n\
             [[executors]]\nname = \"edge:airflow.providers.edge3.executors.EdgeExecutor\"\n\n\
             [[executors]]\nname = \"batch:my_company.executors.BatchExecutor\"\n\
             check_command = [\"sh\", \"-c\", \"echo 'my_company.executors.batch_scheduler.PartitionedNightlyReports: 3 jobs waiting'; exit 1\"]\n\n\
             [[executors]]\nname = \"LocalExecutor\"\ncheck_command = [\"true\"]\n",
            broker.port
        ),
    )
    .unwrap();
    let serving = Serving::start(&mut overseer(dir.path()));
    browser.open(&serving.url("/"));
    let healthy = |executor: &str| {
        format!(
            "return [...document.querySelectorAll('#card-executor li[data-health]')] \
               .some((i) => i.dataset.executor === '{executor}' && i.dataset.health === 'healthy')"
        )
    };
    browser.wait_until(&healthy("CeleryExecutor"), ORDER);
    browser.wait_until(&healthy("LocalExecutor"), ORDER);

    // The broker dies: its instance moves to the top, with the failing probe.
    broker.kill();
    browser.wait_until(
        "const first = document.querySelector('#card-executor li[data-health]'); \
         return [...document.querySelectorAll('#card-executor li[data-health=\"unhealthy\"]')] \
           .some((i) => i.dataset.executor === 'CeleryExecutor') \
           && first.dataset.health === 'unhealthy'",
        ORDER,
    );
    let order = browser.eval(ORDER);
    assert_eq!(order.as_array().unwrap().len(), 4, "{order}");
    assert!(
        worst_first(&order),
        "unhealthy first, healthy last: {order}"
    );
    assert_eq!(order[3], "healthy", "{order}");

    // Airflow's components, which never ran here, are a line each; the
    // executors' card takes the width.
    let widths = browser.eval(
        "const w = (id) => document.getElementById(id).getBoundingClientRect(); \
         return { executor: w('card-executor').width, scheduler: w('card-scheduler').height, \
                  page: document.querySelector('main').getBoundingClientRect().width }",
    );
    assert!(
        widths["executor"].as_f64().unwrap() > 0.9 * widths["page"].as_f64().unwrap(),
        "{widths}"
    );
    assert!(widths["scheduler"].as_f64().unwrap() < 120.0, "{widths}");

    // No line said twice in an instance's card.
    let repeated = browser.eval(
        "return [...document.querySelectorAll('#card-executor > ul > li')].flatMap((item) => { \
           const lines = item.innerText.split('\\n').map((l) => l.trim()).filter((l) => l); \
           return lines.filter((l, i) => lines.indexOf(l) !== i); })",
    );
    assert_eq!(repeated, json!([]));

    nothing_spills_at(&browser, 1280, 1000, "dashboard-layout-1280.png");
    nothing_spills_at(&browser, 390, 1400, "dashboard-layout-390.png");
    browser.resize(1280, 1000);

    // The filter, from a shared link: unhealthy only.
    browser.open(&serving.url("/?state=unhealthy"));
    browser.wait_until(
        "return document.querySelectorAll('#card-executor li[data-health]').length === 4",
        ORDER,
    );
    let shown = browser.eval(ORDER);
    assert!(!shown.as_array().unwrap().is_empty(), "{shown}");
    assert!(
        shown.as_array().unwrap().iter().all(|h| h == "unhealthy"),
        "{shown}"
    );
    assert_eq!(
        browser.eval("return document.getElementById('filter-state').value"),
        json!("unhealthy")
    );
    // And by name, written into the URL as it is typed.
    let seen = browser.eval(
        "const name = document.getElementById('filter-name'); \
         name.value = 'BatchExecutor'; name.dispatchEvent(new Event('input')); \
         return { url: location.search, \
                  shown: [...document.querySelectorAll('#card-executor li[data-health]')] \
                    .filter((i) => !i.hidden).map((i) => i.dataset.executor), \
                  count: document.getElementById('filter-count').innerText }",
    );
    assert_eq!(seen["url"], json!("?state=unhealthy&q=BatchExecutor"));
    assert_eq!(
        seen["shown"],
        json!(["batch:my_company.executors.BatchExecutor"])
    );
    assert_eq!(seen["count"], json!("1 of 4 shown"));
    drop(serving);
}

/// 50 instances (five hosts, ten executors each), rendered as the page renders
/// the service's reports: the worst first, nothing spills, and the filter
/// keeps the chosen state.
#[tokio::test]
async fn fifty_instances_stay_readable_and_filterable() {
    let Some(browser) = Driver::start() else {
        return;
    };
    let db = overseer_testkit::sqlite().await;
    let dir = workdir();
    let serving = Serving::start(overseer(dir.path()).env("OVERSEER_DATABASE__URL", &db.url));
    browser.open_live(&serving.url("/"));
    let at = report_time(chrono::Utc::now());
    let instances: Vec<Value> = (0..50)
        .map(|n| {
            let health = ["healthy", "unhealthy", "healthy", "unknown", "healthy"][n % 5];
            json!({
                "executor": format!("team{}:my_company.platform.executors.VeryLongExecutorClassName{n}", n % 10),
                "instance": format!("redis://broker-{n}.internal.example.com:6379/0"),
                "hostname": format!("scheduler-{}.prod.eu-west-1.compute.internal", n / 10),
                "latest_executor_heartbeat": at, "health": health,
                "reason": (health != "healthy").then(|| format!(
                    "queue my_company.queues.partitioned_reports_{n}: messages waiting, none taken in 5m")),
                "checked_at": at, "detail": null,
            })
        })
        .collect();
    let report = json!({
        "metadatabase": {"status": "healthy"},
        "scheduler": {"status": null, "latest_scheduler_heartbeat": null, "detailed_status": "down", "instances": []},
        "triggerer": {"status": null, "latest_triggerer_heartbeat": null, "detailed_status": "down", "instances": []},
        "dag_processor": {"status": null, "latest_dag_processor_heartbeat": null, "detailed_status": "down", "instances": []},
        "executor": {"status": "unhealthy", "latest_executor_heartbeat": at,
                     "detailed_status": "degraded", "instances": instances},
    });
    browser.eval_with(
        "events.close(); render(arguments[0]); return true",
        json!([report]),
    );
    let order = browser.eval(ORDER);
    assert_eq!(order.as_array().unwrap().len(), 50);
    assert!(worst_first(&order), "{order}");
    nothing_spills_at(&browser, 1280, 1000, "dashboard-fifty-1280.png");
    nothing_spills_at(&browser, 390, 1400, "dashboard-fifty-390.png");

    for (state, count) in [("unknown", 10), ("unhealthy", 10), ("healthy", 30)] {
        let seen = browser.eval_with(
            "const select = document.getElementById('filter-state'); \
             select.value = arguments[0]; select.dispatchEvent(new Event('change')); \
             return { shown: [...document.querySelectorAll('#card-executor li[data-health]')] \
                        .filter((i) => !i.hidden).map((i) => i.dataset.health), \
                      url: location.search, \
                      count: document.getElementById('filter-count').innerText }",
            json!([state]),
        );
        let shown = seen["shown"].as_array().unwrap();
        assert_eq!(shown.len(), count, "{state}: {seen}");
        assert!(shown.iter().all(|h| h == state), "{state}: {seen}");
        assert_eq!(seen["url"], json!(format!("?state={state}")));
        assert_eq!(seen["count"], json!(format!("{count} of 50 shown")));
    }
    drop(serving);
}
