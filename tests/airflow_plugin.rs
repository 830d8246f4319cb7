//! Overseer's dashboard inside Airflow's UI: the Airflow plugin in
//! `integrations/airflow`, in a real Airflow 3.3.2, and the frame policy the
//! dashboard needs to be shown there.
//!
//! - `the_plugin_puts_the_dashboard_in_airflows_navigation`: the plugin is
//!   pip-installed (`--no-deps --target` a folder of the test's own, on
//!   `PYTHONPATH`: the shared venv is never written to) and its unit tests run
//!   against what was installed; then, with `AIRFLOW__OVERSEER__URL` pointing at
//!   an `overseer serve` that lets the Airflow UI's origin frame it,
//!   `airflow plugins --output json` lists the plugin and its external view, and
//!   the api-server (on a fresh Postgres database, `airflow db migrate`d) answers
//!   `GET /api/v2/plugins` with the view, whose `href` is the dashboard, which
//!   names Airflow's origin in `frame-ancestors`. The api-server runs in a
//!   process group of its own, stopped as a whole, and no process of the test is
//!   left behind (checked).
//! - `serve_frames_the_dashboard_for_the_configured_origins_only`: `overseer
//!   serve`, with `OVERSEER_API__FRAME_ANCESTORS` as a TOML array and without it.
//!
//! Needs the Airflow venv (`overseer_testkit::venv::airflow`), PyPI (pip fetches
//! setuptools to build the plugin) and Postgres on loopback; without them the
//! first test says SKIPPED, and fails under `CI`.
//!
//! The harness (`Airflow`: its commands run from the shared venv with the plugin
//! on `PYTHONPATH`, the api-server stopped by process group) is in
//! `support/airflow.rs`, shared with `airflow_health.rs`.

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use support::airflow::{Airflow, CLI_DEADLINE, DISTRIBUTION};
use support::{Serving, overseer, workdir};

#[tokio::test]
async fn the_plugin_puts_the_dashboard_in_airflows_navigation() {
    let Some(venv) = support::airflow::venv() else {
        return;
    };
    let Some(db) = support::airflow::migrated_db(&venv).await else {
        return;
    };
    let mut airflow = Airflow::new(venv, &db.url);
    if !airflow.install_plugin() {
        return;
    }

    // The dashboard the view opens, framed by the Airflow UI's origin only.
    let airflow_origin = format!("http://127.0.0.1:{}", airflow.api_port);
    let dir = workdir();
    let serving = Serving::start(overseer(dir.path()).env(
        "OVERSEER_API__FRAME_ANCESTORS",
        format!("[\"{airflow_origin}\"]"),
    ));
    let dashboard = serving.url("/");
    let expected = json!({
        "name": "Executor health",
        "href": dashboard,
        "destination": "nav",
        "category": "browse",
        "url_route": "overseer",
    });
    airflow
        .env
        .push(("AIRFLOW__OVERSEER__URL".into(), dashboard.clone()));

    // `airflow plugins` lists it, loaded through its entry point.
    let listed = airflow.finish(&["plugins", "--output", "json"], CLI_DEADLINE);
    let plugins: Value = serde_json::from_str(&listed)
        .unwrap_or_else(|e| panic!("airflow plugins --output json: {e}: {listed}"));
    let plugin = overseer_plugin(&plugins);
    assert_eq!(plugin["external_views"], json!([expected]), "{plugin}");
    let source = plugin["source"].as_str().unwrap_or_default();
    assert!(
        source.starts_with(DISTRIBUTION) && source.contains("group='airflow.plugins'"),
        "{source}"
    );

    // The api-server gives it to the UI.
    airflow.start_api_server();
    let answer = airflow.plugins_from_the_api_server();
    let plugin = overseer_plugin(&answer["plugins"]);
    let views = plugin["external_views"].as_array().expect("external_views");
    assert_eq!(views.len(), 1, "{plugin}");
    eprintln!(
        "airflow plugin: GET /api/v2/plugins gives the view {}",
        views[0]
    );
    for (field, value) in expected.as_object().unwrap() {
        assert_eq!(&views[0][field], value, "{field} in {plugin}");
    }

    // The view's href is Overseer's dashboard, which the Airflow UI may frame.
    let href = views[0]["href"].as_str().unwrap();
    let (status, policy) = page_policy(href);
    assert_eq!(status, 200, "GET {href}");
    assert!(
        policy.ends_with(&format!("frame-ancestors 'self' {airflow_origin}")),
        "{policy}"
    );

    let strays = airflow.stop();
    assert!(strays.is_empty(), "processes left behind: {strays:?}");
    drop(serving);
    drop(airflow);
    drop(db);
}

#[test]
fn serve_frames_the_dashboard_for_the_configured_origins_only() {
    let dir = workdir();
    let serving = Serving::start(&mut overseer(dir.path()));
    let (status, policy) = page_policy(&serving.url("/"));
    assert_eq!(status, 200);
    assert!(policy.starts_with("default-src 'none'; "), "{policy}");
    assert!(policy.ends_with("; frame-ancestors 'self'"), "{policy}");
    drop(serving);

    let serving = Serving::start(overseer(dir.path()).env(
        "OVERSEER_API__FRAME_ANCESTORS",
        r#"["https://Airflow.example.com:443/", "http://127.0.0.1:28080"]"#,
    ));
    let (status, policy) = page_policy(&serving.url("/"));
    assert_eq!(status, 200);
    assert!(
        policy.ends_with(
            "; frame-ancestors 'self' https://airflow.example.com http://127.0.0.1:28080"
        ),
        "{policy}"
    );
}

/// The status of `GET url` and its `Content-Security-Policy`.
fn page_policy(url: &str) -> (u16, String) {
    let response = ureq::get(url)
        .timeout(Duration::from_secs(10))
        .call()
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let policy = response
        .header("content-security-policy")
        .unwrap_or_default()
        .to_owned();
    (response.status(), policy)
}

/// The plugin named `overseer` among `plugins` (a JSON array), exactly once.
fn overseer_plugin(plugins: &Value) -> &Value {
    let found: Vec<&Value> = plugins
        .as_array()
        .unwrap_or_else(|| panic!("a list of plugins: {plugins}"))
        .iter()
        .filter(|p| p["name"] == "overseer")
        .collect();
    assert_eq!(found.len(), 1, "the overseer plugin once in {plugins}");
    found[0]
}
