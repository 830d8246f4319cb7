//! Airflow's own `/api/v2/monitor/health` with Overseer's plugin (issue 23):
//! the `executor` entry the plugin's root middleware adds, read from the `job`
//! table through Airflow's session, agrees with `overseer serve`'s own entry.
//!
//! One test, `airflows_endpoint_agrees_with_overseers`, in phases, on one fresh
//! Postgres database: the plugin pip-installed for a real Airflow 3.3.2 (its
//! Python unit tests run against the install), `airflow db migrate`, the
//! api-server started, then:
//! 1. **before Overseer's migration**: the entry is `unknown`, its reason says
//!    the migration has not run, naming the missing column; Airflow's other entries are there, the body parses
//!    with Airflow's own `HealthInfoResponse`; `/api/v2/plugins` lists the root
//!    middleware beside the navigation entry.
//! 2. **no row**: after `overseer migrate`, `unhealthy`, "Overseer is not running".
//! 3. **healthy, and an unchecked transport**: host `sched-a` supervises a
//!    Celery executor on a throwaway Redis (`healthy`) and one on `sqs://`
//!    (`unknown`, "the sqs:// transport has no health check yet"); the entries
//!    agree field by field.
//! 4. **broker killed**: the Redis killed by pid; Airflow's entry turns
//!    `unhealthy`, the broker named as the instance, agreeing with Overseer's
//!    (the time from the kill is printed, not asserted).
//! 5. **two hosts**: `sched-b` supervises its own healthy broker: `degraded`,
//!    every instance of both hosts, agreeing with either host's entry.
//! 6. **SIGKILL**: `sched-a` killed; once its rows are older than the executor
//!    threshold (5 s on both sides: `thresholds.executor` and
//!    `AIRFLOW__OVERSEER__EXECUTOR_HEALTH_CHECK_THRESHOLD`) they are not live;
//!    Airflow's entry agrees with `sched-b`'s and its `reason` names `sched-a`
//!    and its last heartbeat. Then `sched-b` killed too: `unhealthy`, `down`,
//!    no instance, both hosts named.
//!
//! A second test, `the_read_agrees_on_sqlite_and_mariadb`, holds the plugin's
//! read (`overseer_airflow.read.HeldConnection`, as the api-server reads: the
//! same statement on one connection held across reads, in autocommit, through
//! SQLAlchemy with the database's driver: the standard library's on SQLite,
//! PyMySQL, installed for the test, on MariaDB) to `overseer serve`'s entry on those databases
//! (Airflow's `job` table made by Airflow's DDL, then Overseer's migration):
//! healthy with an unchecked transport, the broker killed, and Overseer killed
//! with SIGKILL (its rows stale, the reason naming its host). The api-server
//! itself runs on Postgres only (Airflow's api-server does not run on SQLite's
//! single file shared with another writer, and Airflow does not support MariaDB).
//!
//! Compared field by field: everything of Overseer's entry but what the table
//! does not hold (see [`NOT_FROM_THE_TABLE`]); the plugin writes those as `null`
//! (checked), and its entry-level `reason` (Overseer has none) is checked on its
//! own. Each comparison reads Overseer, Airflow, then Overseer again, and wants
//! Airflow's entry to equal one of the two (a heartbeat may land in between),
//! retrying until a deadline.
//!
//! Needs the Airflow venv, PyPI (setuptools for the plugin's build, PyMySQL),
//! Postgres and MariaDB on loopback and `redis-server`; without them it says
//! SKIPPED, and fails under `CI`.

use crate::support;

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use overseer_testkit::wait;
use sea_orm::DbBackend;
use serde_json::Value;
use support::airflow::{Airflow, CLI_DEADLINE};
use support::{Serving, get, overseer, run, workdir};

/// The executor threshold of both sides, in seconds: short, so that a killed
/// Overseer's rows go stale within the test.
const THRESHOLD_SECS: u64 = 5;
/// How long the two entries may take to agree (a poll, a flush, a refresh).
const AGREE_DEADLINE: Duration = Duration::from_secs(60);
/// Overseer's per-instance fields the `job` table does not hold: `since` and
/// `previous` come from Overseer's history table, `detail` from its own checks.
const NOT_FROM_THE_TABLE: [&str; 3] = ["since", "previous", "detail"];

/// PyMySQL, for the read on MariaDB (pure Python, no dependency of its own).
const PYMYSQL: &str = "PyMySQL==1.1.1";
/// The plugin's read and rules in a loop: one line in (any), one read of the
/// database `argv[1]` and the entry as one JSON line out (threshold `argv[2]`).
/// The read is the api-server's: one connection held across reads, in
/// autocommit, so each read must see what Overseer committed since the last.
const READER: &str = "\
import json, sys
from datetime import datetime, timedelta, timezone
from sqlalchemy import create_engine
from overseer_airflow.entry import executor_entry
from overseer_airflow.read import HeldConnection
engine = create_engine(sys.argv[1])
read = HeldConnection(lambda: engine).rows
threshold = timedelta(seconds=float(sys.argv[2]))
for _ in sys.stdin:
    rows = read()
    print(json.dumps(executor_entry(rows, threshold, datetime.now(timezone.utc))), flush=True)
";

#[tokio::test]
async fn airflows_endpoint_agrees_with_overseers() {
    let Some((venv, db)) = support::airflow::venv_redis_and_db().await else {
        return;
    };
    let mut airflow = Airflow::new(venv, &db.url);
    airflow.env.extend([
        (
            "AIRFLOW__OVERSEER__EXECUTOR_HEALTH_CHECK_THRESHOLD".to_owned(),
            THRESHOLD_SECS.to_string(),
        ),
        // The navigation entry stays beside the middleware.
        (
            "AIRFLOW__OVERSEER__URL".to_owned(),
            "http://127.0.0.1:9/".to_owned(),
        ),
    ]);
    if !airflow.install_plugin() {
        return;
    }
    airflow.start_api_server();

    // 1. Before Overseer's migration: the columns are missing.
    let plugins = airflow.plugins_from_the_api_server();
    let plugin = plugins["plugins"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == "overseer"))
        .unwrap_or_else(|| panic!("the overseer plugin in {plugins}"));
    assert_eq!(
        plugin["fastapi_root_middlewares"][0]["name"], "overseer_executor_health",
        "{plugin}"
    );
    assert_eq!(
        plugin["external_views"][0]["url_route"], "overseer",
        "{plugin}"
    );
    let (body, entry) = airflow_health(&airflow);
    assert_eq!(entry["status"], "unknown", "{body}");
    let reason = entry["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with(
            "Overseer's migration has not run on this database: the job table has no "
        ) && reason.contains("run `overseer migrate`"),
        "{reason}"
    );
    only_appended(&body, &entry);
    airflows_model_parses(&airflow, &body);

    // 2. Migrated, and no Overseer ever ran.
    let a_dir = workdir();
    let redis_a = overseer_testkit::throwaway::ThrowawayRedis::start(&[]).expect("redis-server");
    let broker_a = redis_a.url(None, 0);
    write_config(
        a_dir.path(),
        &db.url,
        "sched-a",
        &[
            ("CeleryExecutor", &broker_a),
            ("unchecked:CeleryExecutor", "sqs://"),
        ],
    );
    let migrated = run(overseer(a_dir.path()).arg("migrate"));
    assert_eq!(migrated.code, Some(0), "{}", migrated.stderr);
    let (body, entry) = airflow_health(&airflow);
    assert_eq!(
        (
            &entry["status"],
            &entry["detailed_status"],
            &entry["instances"]
        ),
        (
            &Value::from("unhealthy"),
            &Value::from("down"),
            &Value::Array(vec![])
        ),
        "{body}"
    );
    assert_eq!(
        entry["reason"],
        "Overseer is not running: the job table has no ExecutorJob row"
    );

    // 3. Healthy, and an unchecked transport.
    let mut a = Serving::start(&mut overseer(a_dir.path()));
    let entry = agree(&airflow, &[&a], "healthy, one unchecked", |e| {
        health_of(e, "sched-a", "CeleryExecutor") == Some("healthy")
            && instance(e, "sched-a", "unchecked:CeleryExecutor").is_some_and(|i| {
                i["health"] == "unknown"
                    && i["reason"] == "the sqs:// transport has no health check yet"
            })
    });
    assert_eq!(
        (&entry["status"], &entry["detailed_status"]),
        (&Value::from("healthy"), &Value::from("healthy"))
    );
    let unchecked = instance(&entry, "sched-a", "unchecked:CeleryExecutor").unwrap();
    assert_eq!(
        unchecked["reason"],
        "the sqs:// transport has no health check yet"
    );
    let celery = instance(&entry, "sched-a", "CeleryExecutor").unwrap();
    assert_eq!(celery["instance"], broker_a.as_str());
    for field in NOT_FROM_THE_TABLE {
        assert!(celery[field].is_null(), "{field}: {celery}");
    }
    assert!(entry.get("reason").is_none(), "{entry}");

    // 4. The broker killed.
    let mut redis_a = redis_a;
    redis_a.kill();
    let killed = Instant::now();
    let entry = agree(&airflow, &[&a], "broker killed", |e| {
        health_of(e, "sched-a", "CeleryExecutor") == Some("unhealthy")
    });
    eprintln!(
        "airflow health: Airflow's entry agreed on `unhealthy` {:.1?} after the broker's death (poll interval 1s)",
        killed.elapsed()
    );
    let celery = instance(&entry, "sched-a", "CeleryExecutor").unwrap();
    assert_eq!(celery["instance"], broker_a.as_str(), "{celery}");
    assert!(
        !celery["reason"].as_str().unwrap_or_default().is_empty(),
        "{celery}"
    );
    assert_eq!(
        (&entry["status"], &entry["detailed_status"]),
        (&Value::from("unhealthy"), &Value::from("degraded"))
    );

    // 5. Two hosts.
    let b_dir = workdir();
    let redis_b = overseer_testkit::throwaway::ThrowawayRedis::start(&[]).expect("redis-server");
    write_config(
        b_dir.path(),
        &db.url,
        "sched-b",
        &[("CeleryExecutor", &redis_b.url(None, 0))],
    );
    let mut b = Serving::start(&mut overseer(b_dir.path()));
    let entry = agree(&airflow, &[&a, &b], "two hosts", |e| {
        health_of(e, "sched-b", "CeleryExecutor") == Some("healthy")
            && health_of(e, "sched-a", "CeleryExecutor") == Some("unhealthy")
    });
    assert_eq!(entry["instances"].as_array().map(Vec::len), Some(3));

    // 6. SIGKILL: sched-a's rows go stale.
    a.child.kill().expect("SIGKILL to sched-a");
    let _ = a.child.wait();
    let entry = agree(&airflow, &[&b], "sched-a killed", |e| {
        instance(e, "sched-a", "CeleryExecutor").is_none()
    });
    assert_eq!(
        (&entry["status"], &entry["detailed_status"]),
        (&Value::from("healthy"), &Value::from("healthy"))
    );
    let reason = entry["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("Overseer on sched-a stopped heartbeating: its last heartbeat was at ")
            && reason.ends_with(&format!("(threshold {THRESHOLD_SECS}s)")),
        "{reason}"
    );

    b.child.kill().expect("SIGKILL to sched-b");
    let _ = b.child.wait();
    let entry = wait_for_airflow(&airflow, "every Overseer killed", |e| {
        e["instances"].as_array().is_some_and(Vec::is_empty)
    });
    assert_eq!(
        (&entry["status"], &entry["detailed_status"]),
        (&Value::from("unhealthy"), &Value::from("down"))
    );
    let reason = entry["reason"].as_str().unwrap_or_default();
    let (first, second) = reason.split_once("; ").unwrap_or_default();
    assert!(
        first.starts_with("Overseer on sched-b stopped heartbeating"),
        "{reason}"
    );
    assert!(
        second.starts_with("Overseer on sched-a stopped heartbeating"),
        "{reason}"
    );
    assert!(!entry["latest_executor_heartbeat"].is_null(), "{entry}");
    let (body, entry) = airflow_health(&airflow);
    only_appended(&body, &entry);
    airflows_model_parses(&airflow, &body);

    // 7. Two teams, configured through Airflow's variables: team A's broker
    // killed turns team A's instance unhealthy, in both endpoints, while team
    // B's stays healthy.
    let t_dir = workdir();
    let mut redis_ta =
        overseer_testkit::throwaway::ThrowawayRedis::start(&[]).expect("redis-server");
    let redis_tb = overseer_testkit::throwaway::ThrowawayRedis::start(&[]).expect("redis-server");
    write_config(t_dir.path(), &db.url, "sched-teams", &[]);
    let mut teams = Serving::start(
        overseer(t_dir.path())
            .env("AIRFLOW__CORE__MULTI_TEAM", "True")
            .env(
                "AIRFLOW__CORE__EXECUTOR",
                "LocalExecutor;team_a=CeleryExecutor;team_b=CeleryExecutor",
            )
            .env(
                "AIRFLOW__TEAM_A___CELERY__BROKER_URL",
                redis_ta.url(None, 0),
            )
            .env(
                "AIRFLOW__TEAM_B___CELERY__BROKER_URL",
                redis_tb.url(None, 0),
            ),
    );
    agree(&airflow, &[&teams], "two teams, healthy", |e| {
        health_of(e, "sched-teams", "team_a=CeleryExecutor") == Some("healthy")
            && health_of(e, "sched-teams", "team_b=CeleryExecutor") == Some("healthy")
    });
    redis_ta.kill();
    let entry = agree(&airflow, &[&teams], "team A's broker killed", |e| {
        health_of(e, "sched-teams", "team_a=CeleryExecutor") == Some("unhealthy")
            && health_of(e, "sched-teams", "team_b=CeleryExecutor") == Some("healthy")
    });
    let team_a = instance(&entry, "sched-teams", "team_a=CeleryExecutor").unwrap();
    assert!(
        team_a["reason"]
            .as_str()
            .is_some_and(|r| r.contains(&redis_ta.url(None, 0))),
        "{team_a}"
    );
    assert_eq!(entry["status"], "unhealthy", "{entry}");
    teams.child.kill().expect("SIGKILL to sched-teams");
    let _ = teams.child.wait();

    // 8. A host whose Airflow is configured by airflow.cfg alone: no Overseer
    // setting and no AIRFLOW__ variable, the broker's URL only from a command
    // (`broker_url_cmd`). Overseer finds Airflow's database and executor, and
    // the plugin shows the executor healthy.
    let c_dir = workdir();
    let redis_c = overseer_testkit::throwaway::ThrowawayRedis::start(&[]).expect("redis-server");
    let secret = c_dir.path().join("broker");
    std::fs::write(&secret, redis_c.url(None, 0)).unwrap();
    let sql_alchemy_conn = airflow
        .env
        .iter()
        .find(|(var, _)| var == "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN")
        .map(|(_, url)| url.replace('%', "%%"))
        .unwrap();
    let home = c_dir.path().join("airflow-home");
    std::fs::create_dir(&home).unwrap();
    std::fs::write(
        home.join("airflow.cfg"),
        format!(
            "[core]\nexecutor = CeleryExecutor\n\n[database]\nsql_alchemy_conn = {sql_alchemy_conn}\n\n\
             [celery]\nbroker_url_cmd = cat {}\n",
            secret.display()
        ),
    )
    .unwrap();
    let cfg_only = Serving::start(overseer(c_dir.path()).env("AIRFLOW_HOME", &home));
    let from_cfg = |e: &Value| {
        e["instances"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|i| {
                i["executor"] == "CeleryExecutor"
                    && !i["hostname"]
                        .as_str()
                        .unwrap_or_default()
                        .starts_with("sched-")
            })
            .cloned()
    };
    let entry = wait_for_airflow(&airflow, "configured by airflow.cfg alone", |e| {
        from_cfg(e).is_some_and(|i| i["health"] == "healthy")
    });
    let ours = from_cfg(&support::health(&cfg_only)["executor"]).unwrap();
    assert_eq!(ours["health"], "healthy", "{ours}");
    assert_eq!(from_cfg(&entry).unwrap()["hostname"], ours["hostname"]);
    drop(cfg_only);

    // 9. The same host, the broker's URL now only from the environment's
    // `AIRFLOW__CELERY__BROKER_URL_CMD` (airflow.cfg names no broker), and
    // another broker, so that the plugin's instance is this Overseer's.
    let redis_d = overseer_testkit::throwaway::ThrowawayRedis::start(&[]).expect("redis-server");
    let secret_d = c_dir.path().join("broker-d");
    std::fs::write(&secret_d, redis_d.url(None, 0)).unwrap();
    let home_d = c_dir.path().join("airflow-home-d");
    std::fs::create_dir(&home_d).unwrap();
    std::fs::write(
        home_d.join("airflow.cfg"),
        format!(
            "[core]\nexecutor = CeleryExecutor\n\n[database]\nsql_alchemy_conn = {sql_alchemy_conn}\n"
        ),
    )
    .unwrap();
    let cmd_only = Serving::start(overseer(c_dir.path()).env("AIRFLOW_HOME", &home_d).env(
        "AIRFLOW__CELERY__BROKER_URL_CMD",
        format!("cat {}", secret_d.display()),
    ));
    let broker_d = redis_d.url(None, 0);
    let from_cmd = |e: &Value| {
        e["instances"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|i| i["instance"] == broker_d.as_str())
            .cloned()
    };
    let entry = wait_for_airflow(&airflow, "the broker from BROKER_URL_CMD alone", |e| {
        from_cmd(e).is_some_and(|i| i["health"] == "healthy")
    });
    let ours = from_cmd(&support::health(&cmd_only)["executor"]).unwrap();
    assert_eq!(ours["health"], "healthy", "{ours}");
    assert_eq!(from_cmd(&entry).unwrap()["hostname"], ours["hostname"]);
    drop(cmd_only);

    let strays = airflow.stop();
    assert!(strays.is_empty(), "processes left behind: {strays:?}");
    drop((
        airflow, redis_a, redis_b, redis_ta, redis_tb, redis_c, redis_d, db,
    ));
}

/// An `overseer.toml` in `dir`: quick polls, the test's threshold, `executors`
/// as `(name, broker_url)` (on `sqs://`, no check and no queued-work rules).
fn write_config(dir: &Path, db_url: &str, hostname: &str, executors: &[(&str, &str)]) {
    let mut toml = format!(
        "[database]\nurl = \"{db_url}\"\n\n[api]\nbind = \"127.0.0.1:0\"\n\n\
         [supervisor]\nhostname = \"{hostname}\"\npoll_interval = \"1s\"\npoll_timeout = \"500ms\"\n\
         heartbeat_interval = \"500ms\"\nrefresh_interval = \"250ms\"\n\n\
         [thresholds]\nexecutor = \"{THRESHOLD_SECS}s\"\n"
    );
    for (name, broker_url) in executors {
        toml.push_str(&format!(
            "\n[[executors]]\nname = \"{name}\"\nbroker_url = \"{broker_url}\"\n"
        ));
        // On Airflow's database the queued-work rules would judge the unchecked
        // transport (`healthy` while nothing waits) a poll after start: off, it
        // stays `unknown` for the whole test.
        if broker_url.starts_with("sqs://") {
            toml.push_str("max_queued_age = \"0s\"\n");
        }
    }
    std::fs::write(dir.join("overseer.toml"), toml).unwrap();
}

/// Airflow's health body (it must answer 200) and its `executor` entry.
fn airflow_health(airflow: &Airflow) -> (String, Value) {
    let (status, body) = get(&airflow.url("/api/v2/monitor/health"));
    assert_eq!(status, 200, "{body}");
    let json: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    let entry = json.get("executor").cloned();
    (
        body,
        entry.unwrap_or_else(|| panic!("no executor entry: {json}")),
    )
}

/// The body is Airflow's four entries as Airflow wrote them, then the entry:
/// the text before `,"executor":` is a JSON object of exactly those four.
fn only_appended(body: &str, entry: &Value) {
    let (airflows, ours) = body
        .split_once(",\"executor\":")
        .unwrap_or_else(|| panic!("the entry appended: {body}"));
    let airflows: Value = serde_json::from_str(&format!("{airflows}}}"))
        .unwrap_or_else(|e| panic!("Airflow's part of the body: {e}: {body}"));
    let keys: Vec<&String> = airflows.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["metadatabase", "scheduler", "triggerer", "dag_processor"],
        "{body}"
    );
    let ours: Value = serde_json::from_str(ours.strip_suffix('}').unwrap()).unwrap();
    assert_eq!(&ours, entry);
}

/// Airflow's own response model takes the body.
fn airflows_model_parses(airflow: &Airflow, body: &str) {
    let script = "import sys\n\
        from airflow.api_fastapi.core_api.datamodels.monitor import HealthInfoResponse\n\
        HealthInfoResponse.model_validate_json(sys.argv[1])\n\
        print('parsed')";
    let mut python = airflow.command("python");
    python.args(["-c", script, body]);
    let (ok, log) = support::airflow::finish(python, CLI_DEADLINE, None);
    assert!(ok && log.contains("parsed"), "HealthInfoResponse: {log}");
}

/// The instance of `executor` on `hostname` in an entry.
fn instance<'e>(entry: &'e Value, hostname: &str, executor: &str) -> Option<&'e Value> {
    entry["instances"]
        .as_array()?
        .iter()
        .find(|i| i["hostname"] == hostname && i["executor"] == executor)
}

fn health_of<'e>(entry: &'e Value, hostname: &str, executor: &str) -> Option<&'e str> {
    instance(entry, hostname, executor)?["health"].as_str()
}

/// What of an entry is compared: all of Overseer's fields but
/// [`NOT_FROM_THE_TABLE`]; the plugin's entry-level `reason` left out.
fn comparable(entry: &Value) -> Value {
    let mut entry = entry.clone();
    if let Some(object) = entry.as_object_mut() {
        object.remove("reason");
    }
    for instance in entry["instances"].as_array_mut().into_iter().flatten() {
        for field in NOT_FROM_THE_TABLE {
            instance.as_object_mut().unwrap().remove(field);
        }
    }
    entry
}

/// Waits until Airflow's entry satisfies `done` and equals (as [`comparable`])
/// the entry of each of `overseers` read just before or just after it; returns
/// Airflow's entry.
fn agree(
    airflow: &Airflow,
    overseers: &[&Serving],
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let until = Instant::now() + AGREE_DEADLINE;
    loop {
        let mut last = Vec::new();
        let mut agreed = true;
        for overseer in overseers {
            let before = support::health(overseer)["executor"].clone();
            let (_, theirs) = airflow_health(airflow);
            let after = support::health(overseer)["executor"].clone();
            let same = done(&theirs)
                && [&before, &after]
                    .iter()
                    .any(|o| comparable(o) == comparable(&theirs));
            agreed &= same;
            last.push((before, theirs, after));
        }
        if agreed {
            return last.pop().unwrap().1;
        }
        assert!(
            Instant::now() < until,
            "{what}: the entries did not agree within {AGREE_DEADLINE:?}; last read (Overseer, Airflow, Overseer): {last:#?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until Airflow's entry satisfies `done`; returns it.
fn wait_for_airflow(airflow: &Airflow, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    wait::until(what, || {
        let (_, entry) = airflow_health(airflow);
        if done(&entry) { Ok(entry) } else { Err(entry) }
    })
}

#[tokio::test]
async fn the_read_agrees_on_sqlite_and_mariadb() {
    let Some(venv) = support::airflow::venv() else {
        return;
    };
    if let Err(e) = Command::new("redis-server").arg("--version").output() {
        overseer_testkit::unavailable::<()>("redis-server", e);
        return;
    }
    // Only the plugin's Python runs here: Airflow's database is never opened.
    let mut python = Airflow::new(venv, "postgresql://unused@127.0.0.1/unused");
    if !python.install_plugin()
        || !python.pip_install(PYMYSQL.as_ref(), "PyPI (pip fetches PyMySQL)")
    {
        return;
    }
    let mut dbs = vec![overseer_testkit::sqlite().await];
    dbs.extend(overseer_testkit::mariadb().await);
    for db in dbs {
        db.create_airflow_job_table().await;
        let sqlalchemy_url = match db.backend {
            DbBackend::Sqlite => {
                let path = db.url.trim_start_matches("sqlite://");
                format!("sqlite:///{}", path.split('?').next().unwrap())
            }
            _ => db.url.replacen("mysql://", "mysql+pymysql://", 1),
        };
        let what = format!("{:?}", db.backend);
        eprintln!("airflow health: the read on {what}");
        let mut reader = Reader::start(&python, &sqlalchemy_url);

        let dir = workdir();
        let mut redis =
            overseer_testkit::throwaway::ThrowawayRedis::start(&[]).expect("redis-server");
        write_config(
            dir.path(),
            &db.url,
            "sched-a",
            &[
                ("CeleryExecutor", &redis.url(None, 0)),
                ("unchecked:CeleryExecutor", "sqs://"),
            ],
        );
        let mut serving = Serving::start(&mut overseer(dir.path()));
        let entry = reader.agree(&serving, &format!("{what}: healthy"), |e| {
            health_of(e, "sched-a", "CeleryExecutor") == Some("healthy")
                && health_of(e, "sched-a", "unchecked:CeleryExecutor") == Some("unknown")
        });
        assert_eq!(entry["status"], "healthy", "{entry}");

        redis.kill();
        let entry = reader.agree(&serving, &format!("{what}: broker killed"), |e| {
            health_of(e, "sched-a", "CeleryExecutor") == Some("unhealthy")
        });
        assert_eq!(entry["detailed_status"], "degraded", "{entry}");

        serving.child.kill().expect("SIGKILL to overseer");
        let _ = serving.child.wait();
        let until = Instant::now() + AGREE_DEADLINE;
        let entry = loop {
            let entry = reader.entry();
            if entry["instances"].as_array().is_some_and(Vec::is_empty) {
                break entry;
            }
            assert!(
                Instant::now() < until,
                "{what}: stale rows still live: {entry}"
            );
            std::thread::sleep(Duration::from_millis(200));
        };
        assert_eq!(
            (&entry["status"], &entry["detailed_status"]),
            (&Value::from("unhealthy"), &Value::from("down"))
        );
        let reason = entry["reason"].as_str().unwrap_or_default();
        assert!(
            reason.starts_with(
                "Overseer on sched-a stopped heartbeating: its last heartbeat was at "
            ),
            "{what}: {reason}"
        );
    }
    let strays = python.stop();
    assert!(strays.is_empty(), "processes left behind: {strays:?}");
}

/// [`READER`] running in the Airflow venv with the plugin on its path.
struct Reader {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Reader {
    fn start(python: &Airflow, url: &str) -> Self {
        let mut command = python.command("python");
        command
            .args(["-c", READER, url, &THRESHOLD_SECS.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        let mut child = command.spawn().expect("the reader starts");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Self {
            child,
            stdin,
            stdout,
        }
    }

    /// One read: the plugin's entry.
    fn entry(&mut self) -> Value {
        writeln!(self.stdin, "read").expect("the reader takes a line");
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .expect("the reader answers");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("the reader's line {line:?}: {e}"))
    }

    /// As [`agree`], with the plugin's read in place of Airflow's endpoint.
    fn agree(&mut self, overseer: &Serving, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let until = Instant::now() + AGREE_DEADLINE;
        loop {
            let before = support::health(overseer)["executor"].clone();
            let theirs = self.entry();
            let after = support::health(overseer)["executor"].clone();
            if done(&theirs)
                && [&before, &after]
                    .iter()
                    .any(|o| comparable(o) == comparable(&theirs))
            {
                return theirs;
            }
            assert!(
                Instant::now() < until,
                "{what}: the entries did not agree within {AGREE_DEADLINE:?}; last read (Overseer, plugin, Overseer): {before:#} {theirs:#} {after:#}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
