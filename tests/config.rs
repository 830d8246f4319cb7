//! Configuration as a user meets it: `overseer config` and the one-line errors,
//! through the real binary.

use crate::support;

use support::{overseer, run, workdir};

/// Each bad configuration, the exact line it prints, and nothing written: the
/// default SQLite file is never created.
#[test]
fn bad_configuration_stops_with_one_line_naming_key_and_origin_and_exit_code_2() {
    struct Case {
        what: &'static str,
        toml: Option<&'static str>,
        env: &'static [(&'static str, &'static str)],
        line: &'static str,
    }
    let cases = [
        Case {
            what: "bad TOML",
            toml: Some("[supervisor\npoll_interval = \"10s\"\n"),
            env: &[],
            line: "error: invalid configuration in overseer.toml: TOML parse error at line 1, column 12: invalid table header: expected `.`, `]`",
        },
        Case {
            what: "unknown key",
            toml: Some("[supervisor]\npol_interval = \"10s\"\n"),
            env: &[],
            line: "error: invalid configuration: supervisor.pol_interval (from overseer.toml): unknown key (expected one of: hostname, poll_interval, poll_timeout, heartbeat_interval, refresh_interval, failures_before_unhealthy, successes_before_healthy)",
        },
        Case {
            what: "unknown section",
            toml: Some("[databse]\nurl = \"sqlite::memory:\"\n"),
            env: &[],
            line: "error: invalid configuration: databse (from overseer.toml): unknown key (expected one of: database, api, supervisor, thresholds, history, executors, alerts)",
        },
        Case {
            what: "bad duration in TOML",
            toml: Some("[supervisor]\npoll_interval = \"ten seconds\"\n"),
            env: &[],
            line: "error: invalid configuration: supervisor.poll_interval (from overseer.toml): invalid duration \"ten seconds\": expected a number and a unit, such as 10s or 500ms",
        },
        Case {
            what: "duration without a unit",
            toml: Some("[thresholds]\nscheduler = 30\n"),
            env: &[],
            line: "error: invalid configuration: thresholds.scheduler (from overseer.toml): invalid duration 30: a unit is needed, such as 30s or 30ms",
        },
        Case {
            what: "bad duration in the environment",
            toml: None,
            env: &[("OVERSEER_SUPERVISOR__HEARTBEAT_INTERVAL", "5 parsecs")],
            line: "error: invalid configuration: supervisor.heartbeat_interval (from environment variable OVERSEER_SUPERVISOR__HEARTBEAT_INTERVAL): invalid duration \"5 parsecs\": expected a number and a unit, such as 10s or 500ms",
        },
        Case {
            what: "poll_timeout not shorter than poll_interval",
            toml: Some("[supervisor]\npoll_interval = \"5s\"\n"),
            env: &[("OVERSEER_SUPERVISOR__POLL_TIMEOUT", "5s")],
            line: "error: invalid configuration: supervisor.poll_timeout (from environment variable OVERSEER_SUPERVISOR__POLL_TIMEOUT): 5s must be shorter than supervisor.poll_interval (5s, from overseer.toml)",
        },
        Case {
            what: "zero interval",
            toml: Some("[supervisor]\nrefresh_interval = \"0s\"\n"),
            env: &[],
            line: "error: invalid configuration: supervisor.refresh_interval (from overseer.toml): must be longer than zero",
        },
        Case {
            what: "Celery executor with no broker URL",
            toml: Some("[[executors]]\nname = \"CeleryExecutor\"\n"),
            env: &[],
            line: "error: invalid configuration: executors[0].broker_url (from overseer.toml): is missing: CeleryExecutor needs its Celery broker",
        },
        Case {
            what: "unknown executor in TOML",
            toml: Some(
                "[[executors]]\nname = \"LocalExecutor\"\n\n[[executors]]\nname = \"CeleryExecuter\"\n",
            ),
            env: &[],
            line: "error: invalid configuration: executors[1].name (from overseer.toml): unknown executor \"CeleryExecuter\": expected one of LocalExecutor, CeleryExecutor, KubernetesExecutor or a module path such as my.module.MyExecutor",
        },
        Case {
            what: "unknown executor in Airflow's environment",
            toml: None,
            env: &[(
                "AIRFLOW__CORE__EXECUTOR",
                "LocalExecutor, SequentialExecutor",
            )],
            line: "error: invalid configuration: executors[1].name (from environment variable AIRFLOW__CORE__EXECUTOR): unknown executor \"SequentialExecutor\": expected one of LocalExecutor, CeleryExecutor, KubernetesExecutor or a module path such as my.module.MyExecutor",
        },
        Case {
            what: "the same executor twice",
            toml: Some(
                "[[executors]]\nname = \"LocalExecutor\"\n\n[[executors]]\nname = \"LocalExecutor\"\n",
            ),
            env: &[],
            line: "error: invalid configuration: executors[1].name (from overseer.toml): executor \"LocalExecutor\" is configured twice",
        },
        Case {
            what: "broker URL on a non-Celery executor",
            toml: Some(
                "[[executors]]\nname = \"LocalExecutor\"\nbroker_url = \"redis://localhost:6379/0\"\n",
            ),
            env: &[],
            line: "error: invalid configuration: executors[0].broker_url (from overseer.toml): applies only to CeleryExecutor, not to LocalExecutor",
        },
        Case {
            what: "result backend that is not a URL, password not shown",
            toml: None,
            env: &[
                ("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor"),
                ("AIRFLOW__CELERY__BROKER_URL", "redis://localhost:6379/0"),
                ("AIRFLOW__CELERY__RESULT_BACKEND", "hunter2@db/results"),
            ],
            line: "error: invalid configuration: executors[0].result_backend (from environment variable AIRFLOW__CELERY__RESULT_BACKEND): is not a URL (expected scheme://..., as Celery's result_backend; the value is not shown: it may hold a password)",
        },
        Case {
            what: "result backend on a non-Celery executor",
            toml: Some(
                "[[executors]]\nname = \"LocalExecutor\"\nresult_backend = \"redis://localhost:6379/1\"\n",
            ),
            env: &[],
            line: "error: invalid configuration: executors[0].result_backend (from overseer.toml): applies only to CeleryExecutor, not to LocalExecutor",
        },
        Case {
            what: "unknown executor key",
            toml: Some(
                "[[executors]]\nname = \"CeleryExecutor\"\nbroker = \"redis://localhost:6379/0\"\n",
            ),
            env: &[],
            line: "error: invalid configuration: executors[0].broker (from overseer.toml): unknown key (expected one of: name, broker_url, result_backend, queues, worker_ping, worker_events, min_workers, worker_concurrency, max_queued_age, canary_max_pickup, parallelism, max_at_capacity, ssl_active, ssl_key, ssl_cert, ssl_cacert, check_command, check_url, check_cacert)",
        },
        Case {
            what: "unsupported database, password not shown",
            toml: None,
            env: &[("OVERSEER_DATABASE__URL", "mssql://sa:hunter2@db/airflow")],
            line: "error: invalid configuration: database.url (from environment variable OVERSEER_DATABASE__URL): unsupported database URL scheme \"mssql\": expected sqlite://, postgres:// or mysql://",
        },
        Case {
            what: "unsupported SQLAlchemy dialect, password not shown",
            toml: None,
            env: &[(
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
                "mssql+pyodbc://sa:hunter2@db/airflow",
            )],
            line: "error: invalid configuration: database.url (from environment variable AIRFLOW__DATABASE__SQL_ALCHEMY_CONN): dialect \"mssql+pyodbc\" is not supported (Overseer reads postgresql, mysql and sqlite databases)",
        },
        Case {
            what: "bad Airflow threshold",
            toml: None,
            env: &[(
                "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD",
                "soon",
            )],
            line: "error: invalid configuration: thresholds.triggerer (from environment variable AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD): expected a positive number of seconds, got \"soon\"",
        },
        Case {
            what: "bad bind address",
            toml: Some("[api]\nbind = \"localhost\"\n"),
            env: &[],
            line: "error: invalid configuration: api.bind (from overseer.toml): invalid socket address syntax",
        },
        Case {
            what: "max_queued_age that is not a duration",
            toml: Some("[[executors]]\nname = \"LocalExecutor\"\nmax_queued_age = \"soon\"\n"),
            env: &[],
            line: "error: invalid configuration: executors[0].max_queued_age (from overseer.toml): invalid duration \"soon\": expected a number and a unit, such as 10s or 500ms",
        },
        Case {
            what: "min_workers with neither worker_events nor worker_ping",
            toml: Some(
                "[[executors]]\nname = \"CeleryExecutor\"\nbroker_url = \"redis://:hunter2@localhost:6379/0\"\nworker_events = false\nmin_workers = 1\n",
            ),
            env: &[],
            line: "error: invalid configuration: executors[0].min_workers (from overseer.toml): is 1, which needs worker_events or worker_ping = true to count workers",
        },
        Case {
            what: "a URL missing its colon names the mistake, not the scheme",
            toml: None,
            env: &[(
                "OVERSEER_DATABASE__URL",
                "postgres//airflow:hunter2@db/airflow",
            )],
            line: "error: invalid configuration: database.url (from environment variable OVERSEER_DATABASE__URL): is missing \"://\" after \"postgres\" (expected postgres://host/database)",
        },
        Case {
            what: "an executor threshold this host's own heartbeat cannot meet",
            toml: Some(
                "[supervisor]\nheartbeat_interval = \"10s\"\n\n[thresholds]\nexecutor = \"20s\"\n",
            ),
            env: &[],
            line: "error: invalid configuration: thresholds.executor (from overseer.toml): 20s is shorter than 21s (supervisor.heartbeat_interval 10s times 2.1): this host's own executor rows would count as dead between heartbeats",
        },
        Case {
            what: "a check command on a Celery executor",
            toml: Some(
                "[[executors]]\nname = \"fast:CeleryExecutor\"\nbroker_url = \"redis://:hunter2@localhost:6379/0\"\ncheck_command = [\"/usr/local/bin/probe\"]\n",
            ),
            env: &[],
            line: "error: invalid configuration: executors[0].check_command (from overseer.toml): does not apply to fast:CeleryExecutor: a Celery executor is checked through its broker",
        },
        Case {
            what: "a check URL on a Celery executor named by Airflow",
            toml: None,
            env: &[
                (
                    "OVERSEER_EXECUTORS",
                    r#"[{name = "CeleryExecutor", check_url = "http://probe:8080/health"}]"#,
                ),
                ("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor"),
                (
                    "AIRFLOW__CELERY__BROKER_URL",
                    "redis://:hunter2@localhost:6379/0",
                ),
            ],
            line: "error: invalid configuration: executors[0].check_url (from environment variable OVERSEER_EXECUTORS): does not apply to CeleryExecutor: a Celery executor is checked through its broker",
        },
        Case {
            what: "Airflow's ssl_active that is not a boolean",
            toml: None,
            env: &[
                ("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor"),
                ("AIRFLOW__CELERY__SSL_ACTIVE", "maybe"),
            ],
            line: "error: invalid configuration: executors[].ssl_active (from environment variable AIRFLOW__CELERY__SSL_ACTIVE): \"maybe\" is not a boolean (Airflow accepts true, false, t, f, 1, 0)",
        },
        Case {
            what: "Airflow's ssl_active with a broker Airflow cannot give TLS to",
            toml: None,
            env: &[
                ("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor"),
                ("AIRFLOW__CELERY__BROKER_URL", "sqs://AKIA:hunter2@"),
                ("AIRFLOW__CELERY__SSL_ACTIVE", "True"),
            ],
            line: "error: invalid configuration: executors[0].ssl_active (from environment variable AIRFLOW__CELERY__SSL_ACTIVE): is true, but the broker is neither RabbitMQ (amqp://) nor Redis (redis://, rediss://, sentinel://): Airflow refuses ssl_active for any other broker",
        },
        Case {
            what: "a TLS setting on an executor that is not Celery's",
            toml: Some(
                "[[executors]]\nname = \"LocalExecutor\"\nssl_cacert = \"/etc/ssl/ca.pem\"\n",
            ),
            env: &[],
            line: "error: invalid configuration: executors[0].ssl_cacert (from overseer.toml): applies only to CeleryExecutor, not to LocalExecutor",
        },
        Case {
            what: "a TLS certificate for the API without its key",
            toml: Some("[api]\ntls_cert = \"/etc/overseer/api.pem\"\n"),
            env: &[],
            line: "error: invalid configuration: api.tls_cert (from overseer.toml): is set without api.tls_key (the certificate's private key)",
        },
        Case {
            what: "a TLS certificate for the API that does not exist",
            toml: Some(
                "[api]\ntls_cert = \"/nonexistent/api.pem\"\ntls_key = \"/nonexistent/api-key.pem\"\n",
            ),
            env: &[],
            line: "error: invalid configuration: api.tls_cert (from overseer.toml): cannot read /nonexistent/api.pem: no such file",
        },
        Case {
            what: "both a check command and a check URL",
            toml: None,
            env: &[(
                "OVERSEER_EXECUTORS",
                r#"[{name = "KubernetesExecutor", check_command = ["/usr/local/bin/probe"], check_url = "http://probe:8080/health"}]"#,
            )],
            line: "error: invalid configuration: executors[0].check_url (from environment variable OVERSEER_EXECUTORS): cannot be set beside check_command: an executor has one check",
        },
        Case {
            what: "an empty check command",
            toml: Some("[[executors]]\nname = \"LocalExecutor\"\ncheck_command = []\n"),
            env: &[],
            line: "error: invalid configuration: executors[0].check_command (from overseer.toml): names no program: give the program, then each argument, as in [\"/usr/local/bin/probe\", \"--fast\"]",
        },
        Case {
            what: "a whole command line as one string, its token not shown",
            toml: Some(
                "[[executors]]\nname = \"my.company.MyExecutor\"\ncheck_command = [\"/usr/local/bin/probe --token hunter2\"]\n",
            ),
            env: &[],
            line: "error: invalid configuration: executors[0].check_command (from overseer.toml): the program has a space in its name and no such file exists: no shell splits it, so give the program and each argument as separate elements, as in [\"/usr/local/bin/probe\", \"--fast\"]",
        },
        Case {
            what: "a check URL that is not HTTP, its password not shown",
            toml: Some(
                "[[executors]]\nname = \"LocalExecutor\"\ncheck_url = \"ftp://ops:hunter2@probe/health\"\n",
            ),
            env: &[],
            line: "error: invalid configuration: executors[0].check_url (from overseer.toml): must be an http:// or https:// URL, not ftp://",
        },
        Case {
            what: "a check URL that is no URL, its token not shown",
            toml: None,
            env: &[(
                "OVERSEER_EXECUTORS",
                r#"[{name = "LocalExecutor", check_url = "probe/health?token=hunter2"}]"#,
            )],
            line: "error: invalid configuration: executors[0].check_url (from environment variable OVERSEER_EXECUTORS): is not a URL: relative URL without a base",
        },
        Case {
            what: "a check URL carried through Airflow's executor list names the file it came from",
            toml: Some("[[executors]]\nname = \"KubernetesExecutor\"\ncheck_url = \"http://\"\n"),
            env: &[(
                "AIRFLOW__CORE__EXECUTOR",
                "LocalExecutor,KubernetesExecutor",
            )],
            line: "error: invalid configuration: executors[1].check_url (from overseer.toml): is not a URL: empty host",
        },
        Case {
            what: "an alert webhook that is not HTTP, its token not shown",
            toml: None,
            env: &[(
                "OVERSEER_ALERTS",
                r#"[{url = "https://hooks.slack.com/services/T0/B0/hunter2"}, {url = "ftp://ops:hunter2@pager/hook?token=hunter2"}]"#,
            )],
            line: "error: invalid configuration: alerts[1].url (from environment variable OVERSEER_ALERTS): must be an http:// or https:// URL, not ftp://",
        },
        Case {
            what: "an alert URL with no authority is named by its scheme alone",
            toml: Some("[[alerts]]\nurl = \"javascript:alert(1)\"\n"),
            env: &[],
            line: "error: invalid configuration: alerts[0].url (from overseer.toml): must be an http:// or https:// URL, not javascript:",
        },
        Case {
            what: "an alert's min_duration past its ceiling",
            toml: Some("[[alerts]]\nurl = \"http://127.0.0.1:9/hook\"\nmin_duration = \"8days\"\n"),
            env: &[],
            line: "error: invalid configuration: alerts[0].min_duration (from overseer.toml): 8days is out of range: it must be from 0s to 7days",
        },
        Case {
            what: "a spinning refresh interval",
            toml: None,
            env: &[("OVERSEER_SUPERVISOR__REFRESH_INTERVAL", "1ns")],
            line: "error: invalid configuration: supervisor.refresh_interval (from environment variable OVERSEER_SUPERVISOR__REFRESH_INTERVAL): 1ns is out of range: it must be from 100ms to 1h",
        },
        Case {
            what: "an Airflow threshold no duration holds",
            toml: None,
            env: &[(
                "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD",
                "1e20",
            )],
            line: "error: invalid configuration: thresholds.scheduler (from environment variable AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD): 100000000000000000000 seconds is out of range: it must be from 1s to 7days",
        },
        Case {
            what: "no room for a single stream client",
            toml: None,
            env: &[("OVERSEER_API__MAX_STREAM_CLIENTS", "0")],
            line: "error: invalid configuration: api.max_stream_clients (from environment variable OVERSEER_API__MAX_STREAM_CLIENTS): must be at least 1",
        },
        Case {
            what: "a frame ancestor that is not an origin",
            toml: None,
            env: &[(
                "OVERSEER_API__FRAME_ANCESTORS",
                r#"["http://127.0.0.1:28080", "https://airflow.example.com/home"]"#,
            )],
            line: "error: invalid configuration: api.frame_ancestors (from environment variable OVERSEER_API__FRAME_ANCESTORS): \"https://airflow.example.com/home\" has a path, query or fragment, which an origin does not: expected scheme://host[:port], such as https://airflow.example.com",
        },
    ];

    for case in cases {
        for subcommand in [&["config"][..], &["serve"], &["migrate", "up"]] {
            let dir = workdir();
            if let Some(toml) = case.toml {
                std::fs::write(dir.path().join("overseer.toml"), toml).unwrap();
            }
            let mut command = overseer(dir.path());
            command.args(subcommand).envs(case.env.iter().copied());
            let out = run(&mut command);
            assert_eq!(
                out.code,
                Some(2),
                "{} ({subcommand:?}): {}",
                case.what,
                out.stderr
            );
            assert_eq!(
                out.stderr.trim_end(),
                case.line,
                "{} ({subcommand:?})",
                case.what
            );
            assert!(out.stdout.is_empty(), "{}: nothing on stdout", case.what);
            assert!(
                !out.stderr.contains("hunter2"),
                "{}: no password",
                case.what
            );
            assert!(
                !dir.path().join("overseer.db").exists(),
                "{} ({subcommand:?}): nothing written",
                case.what
            );
        }
    }
}

#[test]
fn an_overseer_variable_that_names_no_key_is_warned_about_and_ignored() {
    let dir = workdir();
    let out = run(overseer(dir.path())
        .env("OVERSEER_SUPERVISOR__POLL_INTERVALL", "3s")
        .env("OVERSEER_INTEROP_RUN", "1")
        .arg("config"));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    for var in [
        "OVERSEER_SUPERVISOR__POLL_INTERVALL",
        "OVERSEER_INTEROP_RUN",
    ] {
        let warning = format!("ignoring environment variable {var}: it names no configuration key");
        assert!(out.stderr.contains(&warning), "{}", out.stderr);
    }
    let config: toml::Table = out.stdout.parse().unwrap();
    assert_eq!(
        config["supervisor"]["poll_interval"].as_str(),
        Some("10s"),
        "the typo changed nothing"
    );
}

#[test]
fn a_bad_command_line_is_one_line_and_exit_code_2() {
    for (args, line) in [
        (
            &["serve", "--bind", "nope"][..],
            "error: invalid value 'nope' for '--bind <ADDR>': invalid socket address syntax",
        ),
        (
            &["frobnicate"],
            "error: unrecognized subcommand 'frobnicate'",
        ),
        (
            &["migrate", "sideways"],
            "error: unrecognized subcommand 'sideways'",
        ),
        (
            &["--log-format", "xml", "config"],
            "error: invalid value 'xml' for '--log-format <LOG_FORMAT>' [possible values: plain, json]",
        ),
        (
            &["jobs", "check", "--limit", "-1"],
            "error: unexpected argument '-1' found",
        ),
        (
            &["jobs", "check", "--limit", "many"],
            "error: invalid value 'many' for '--limit <LIMIT>': invalid digit found in string",
        ),
        (&[], "error: a subcommand is required (see --help)"),
        (
            &["health", "--url"],
            "error: a value is required for '--url <URL>' but none was supplied",
        ),
    ] {
        let dir = workdir();
        let out = run(overseer(dir.path()).args(args));
        assert_eq!(out.code, Some(2), "{args:?}");
        assert_eq!(out.stderr.trim_end(), line, "{args:?}");
        assert!(
            !dir.path().join("overseer.db").exists(),
            "{args:?}: nothing written"
        );
    }
}

#[test]
fn a_missing_config_file_named_explicitly_is_an_error() {
    let dir = workdir();
    for (how, command) in [
        (
            "flag",
            overseer(dir.path()).args(["--config", "missing.toml", "config"]),
        ),
        (
            "variable",
            overseer(dir.path())
                .env("OVERSEER_CONFIG", "missing.toml")
                .arg("config"),
        ),
    ] {
        let out = run(command);
        assert_eq!(out.code, Some(2), "{how}");
        assert_eq!(
            out.stderr.trim_end(),
            "error: invalid configuration in missing.toml: the configuration file does not exist or is not a file",
            "{how}"
        );
    }
}

fn effective(command: &mut std::process::Command) -> toml::Table {
    let out = run(command.arg("config"));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    out.stdout.parse().expect("overseer config prints TOML")
}

#[test]
fn defaults_are_the_embedded_sqlite_and_airflows_thresholds() {
    let dir = workdir();
    let config = effective(&mut overseer(dir.path()));
    assert_eq!(
        config["database"]["url"].as_str(),
        Some("sqlite://overseer.db?mode=rwc")
    );
    assert_eq!(config["api"]["bind"].as_str(), Some("127.0.0.1:8781"));
    let supervisor = &config["supervisor"];
    assert_eq!(supervisor["poll_interval"].as_str(), Some("10s"));
    assert_eq!(supervisor["poll_timeout"].as_str(), Some("5s"));
    assert_eq!(supervisor["heartbeat_interval"].as_str(), Some("5s"));
    assert_eq!(supervisor["refresh_interval"].as_str(), Some("1s"));
    assert!(!supervisor["hostname"].as_str().unwrap().is_empty());
    for component in ["scheduler", "triggerer", "dag_processor"] {
        assert_eq!(
            config["thresholds"][component].as_str(),
            Some("30s"),
            "{component}"
        );
    }
    assert!(config.get("executors").is_none());
    // `config` only prints: it opens no database.
    assert!(!dir.path().join("overseer.db").exists());
}

/// An operator sets the poll interval alone, shorter than the default
/// timeout: the timeout follows it (half of it) instead of refusing the
/// configuration; set explicitly, it is kept, and checked.
#[test]
fn the_poll_interval_alone_is_a_valid_configuration() {
    for (interval, timeout) in [
        ("2s", "1s"),
        ("1s", "500ms"),
        ("5s", "2s 500ms"),
        ("30s", "5s"),
    ] {
        let dir = workdir();
        let config = effective(
            overseer(dir.path())
                .env("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
                .env("AIRFLOW__CELERY__BROKER_URL", "redis://127.0.0.1:6379/0")
                .env("OVERSEER_SUPERVISOR__POLL_INTERVAL", interval),
        );
        let supervisor = &config["supervisor"];
        assert_eq!(supervisor["poll_interval"].as_str(), Some(interval));
        assert_eq!(
            supervisor["poll_timeout"].as_str(),
            Some(timeout),
            "{interval}"
        );
    }
    let dir = workdir();
    let config = effective(
        overseer(dir.path())
            .env("OVERSEER_SUPERVISOR__POLL_INTERVAL", "2s")
            .env("OVERSEER_SUPERVISOR__POLL_TIMEOUT", "1500ms"),
    );
    assert_eq!(
        config["supervisor"]["poll_timeout"].as_str(),
        Some("1s 500ms")
    );
}

#[test]
fn layers_apply_in_order_toml_then_overseer_env_then_airflow_env() {
    let dir = workdir();
    std::fs::write(
        dir.path().join("overseer.toml"),
        r#"
[database]
url = "postgres://toml@db/toml"

[supervisor]
hostname = "from-toml"
poll_interval = "20s"
poll_timeout = "2s"

[thresholds]
scheduler = "60s"

[[executors]]
name = "CeleryExecutor"
broker_url = "redis://toml-broker:6379/0"
queues = ["default", "high"]
worker_ping = true
worker_events = false
min_workers = 2
max_queued_age = "2m"
"#,
    )
    .unwrap();
    let config = effective(
        overseer(dir.path())
            .env("OVERSEER_SUPERVISOR__HOSTNAME", "from-env")
            .env("OVERSEER_SUPERVISOR__POLL_TIMEOUT", "3s")
            .env("OVERSEER_DATABASE__URL", "postgres://env@db/env")
            .env(
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
                "postgresql+psycopg2://airflow:hunter2@pg:5432/airflow",
            )
            .env(
                "AIRFLOW__CORE__EXECUTOR",
                "LocalExecutor,CeleryExecutor,team:my.company.BatchExecutor",
            )
            .env(
                "AIRFLOW__CELERY__BROKER_URL",
                "amqp://guest:hunter2@rabbit:5672/airflow",
            )
            .env("AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD", "45")
            .env(
                "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD",
                "12.5",
            )
            .env("AIRFLOW__DAG_PROCESSOR__HEALTH_CHECK_THRESHOLD", "90"),
    );
    let supervisor = &config["supervisor"];
    assert_eq!(supervisor["hostname"].as_str(), Some("from-env"));
    assert_eq!(supervisor["poll_interval"].as_str(), Some("20s"));
    assert_eq!(supervisor["poll_timeout"].as_str(), Some("3s"));
    // Airflow's variables come after Overseer's; passwords are masked.
    assert_eq!(
        config["database"]["url"].as_str(),
        Some("postgres://airflow:***@pg:5432/airflow")
    );
    assert_eq!(config["thresholds"]["scheduler"].as_str(), Some("45s"));
    assert_eq!(
        config["thresholds"]["triggerer"].as_str(),
        Some("12s 500ms")
    );
    assert_eq!(
        config["thresholds"]["dag_processor"].as_str(),
        Some("1m 30s")
    );

    let executors = config["executors"].as_array().unwrap();
    let names: Vec<_> = executors
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "LocalExecutor",
            "CeleryExecutor",
            "team:my.company.BatchExecutor"
        ]
    );
    let celery = &executors[1];
    assert_eq!(
        celery["broker_url"].as_str(),
        Some("amqp://guest:***@rabbit:5672/airflow")
    );
    // The TOML entry of the same name keeps its own settings.
    assert_eq!(celery["queues"].as_array().unwrap().len(), 2);
    assert_eq!(celery["worker_ping"].as_bool(), Some(true));
    assert_eq!(celery["min_workers"].as_integer(), Some(2));
    assert_eq!(celery["worker_events"].as_bool(), Some(false));
    assert_eq!(celery["max_queued_age"].as_str(), Some("2m"));
    // The workers' heartbeats are followed unless turned off.
    assert_eq!(executors[0]["worker_events"].as_bool(), Some(true));
    assert!(executors[0].get("broker_url").is_none());
    // Every executor is judged on its queued task instances, after 5m by default.
    assert_eq!(executors[0]["max_queued_age"].as_str(), Some("5m"));
}

#[test]
fn airflow_environment_alone_configures_celery_with_airflows_defaults() {
    let dir = workdir();
    let config = effective(
        overseer(dir.path())
            .env("AIRFLOW__CORE__EXECUTOR", "fast:CeleryExecutor")
            .env("AIRFLOW__OPERATORS__DEFAULT_QUEUE", "airflow")
            .env(
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
                "sqlite:////opt/airflow/airflow.db",
            ),
    );
    assert_eq!(
        config["database"]["url"].as_str(),
        Some("sqlite:///opt/airflow/airflow.db")
    );
    let celery = &config["executors"][0];
    assert_eq!(celery["name"].as_str(), Some("fast:CeleryExecutor"));
    // Airflow's own default broker when [celery] broker_url is unset.
    assert_eq!(celery["broker_url"].as_str(), Some("redis://redis:6379/0"));
    let said = run(overseer(dir.path())
        .env("AIRFLOW__CORE__EXECUTOR", "fast:CeleryExecutor")
        .arg("config"));
    let warnings: Vec<&str> = said.stderr.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 1, "{}", said.stderr);
    assert!(
        warnings[0]
            .contains("environment variable AIRFLOW__CORE__EXECUTOR names fast:CeleryExecutor but no broker URL is set")
            && warnings[0].contains("using Airflow's default redis://redis:6379/0"),
        "{}",
        warnings[0]
    );
    assert_eq!(
        celery["queues"].as_array().unwrap()[0].as_str(),
        Some("airflow")
    );

    let mysql = effective(overseer(dir.path()).env(
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
        "mysql+mysqldb://airflow:pw@maria:3306/airflow",
    ));
    assert_eq!(
        mysql["database"]["url"].as_str(),
        Some("mysql://airflow:***@maria:3306/airflow")
    );
}

/// Airflow starts each `airflow celery worker` with `[celery] worker_autoscale`
/// (`max,min`) when set, else `[celery] worker_concurrency` (16): the Celery
/// executors take the workers' concurrency from there, as the heartbeats'
/// `active` is judged against it.
#[test]
fn airflows_worker_concurrency_reaches_the_celery_executors() {
    let dir = workdir();
    let concurrency = |vars: &[(&str, &str)]| {
        let mut command = overseer(dir.path());
        command
            .env("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
            .env("AIRFLOW__CELERY__BROKER_URL", "redis://127.0.0.1:6379/0");
        for (key, value) in vars {
            command.env(key, value);
        }
        effective(&mut command)["executors"][0]["worker_concurrency"].as_integer()
    };
    assert_eq!(concurrency(&[]), Some(16));
    assert_eq!(
        concurrency(&[("AIRFLOW__CELERY__WORKER_CONCURRENCY", "4")]),
        Some(4)
    );
    assert_eq!(
        concurrency(&[
            ("AIRFLOW__CELERY__WORKER_CONCURRENCY", "4"),
            ("AIRFLOW__CELERY__WORKER_AUTOSCALE", "12,3"),
        ]),
        Some(12)
    );
    let bad = run(overseer(dir.path())
        .env("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
        .env("AIRFLOW__CELERY__WORKER_AUTOSCALE", "twelve")
        .arg("config"));
    assert_eq!(bad.code, Some(2), "{}", bad.stderr);
    assert_eq!(
        bad.stderr.trim_end(),
        "error: invalid configuration: executors (from environment variable \
         AIRFLOW__CELERY__WORKER_AUTOSCALE): [celery] worker_autoscale: expected max,min (two \
         positive whole numbers, as `16,12`), got \"twelve\""
    );
}

#[test]
fn airflows_broker_alone_updates_the_configured_celery_executors() {
    let dir = workdir();
    std::fs::write(
        dir.path().join("overseer.toml"),
        "[[executors]]\nname = \"CeleryExecutor\"\nbroker_url = \"redis://old:6379/0\"\n\n[[executors]]\nname = \"LocalExecutor\"\n",
    )
    .unwrap();
    let config =
        effective(overseer(dir.path()).env("AIRFLOW__CELERY__BROKER_URL", "redis://new:6379/1"));
    let executors = config["executors"].as_array().unwrap();
    assert_eq!(
        executors[0]["broker_url"].as_str(),
        Some("redis://new:6379/1")
    );
    assert!(executors[1].get("broker_url").is_none());
}

#[test]
fn airflows_ssl_settings_reach_the_celery_executors_as_their_keys() {
    let dir = workdir();
    std::fs::write(
        dir.path().join("overseer.toml"),
        "[[executors]]\nname = \"CeleryExecutor\"\nbroker_url = \"redis://:hunter2@broker:6379/0\"\nssl_cacert = \"/old/ca.pem\"\n\n[[executors]]\nname = \"LocalExecutor\"\n",
    )
    .unwrap();
    let out = run(overseer(dir.path())
        .arg("config")
        .env("AIRFLOW__CELERY__SSL_ACTIVE", "t")
        .env("AIRFLOW__CELERY__SSL_CERT", "/etc/airflow/client.pem")
        .env("AIRFLOW__CELERY__SSL_KEY", "/etc/airflow/client-key.pem")
        .env("AIRFLOW__CELERY__SSL_CACERT", "/etc/airflow/ca.pem"));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(!out.stdout.contains("hunter2"), "{}", out.stdout);
    let config: toml::Table = out.stdout.parse().unwrap();
    let executors = config["executors"].as_array().unwrap();
    let celery = &executors[0];
    assert_eq!(celery["ssl_active"].as_bool(), Some(true));
    assert_eq!(celery["ssl_cert"].as_str(), Some("/etc/airflow/client.pem"));
    assert_eq!(
        celery["ssl_key"].as_str(),
        Some("/etc/airflow/client-key.pem")
    );
    assert_eq!(celery["ssl_cacert"].as_str(), Some("/etc/airflow/ca.pem"));
    for key in ["ssl_active", "ssl_cert", "ssl_key", "ssl_cacert"] {
        assert!(executors[1].get(key).is_none(), "{key} on LocalExecutor");
    }
    // Off unless asked for, and then not shown.
    let config = effective(overseer(dir.path()).env("AIRFLOW__CELERY__SSL_ACTIVE", "False"));
    assert!(config["executors"][0].get("ssl_active").is_none());
}

/// `check_command` and `check_url`, from `overseer.toml` or `OVERSEER_EXECUTORS`,
/// survive Airflow's executor list naming their executors, and are shown
/// without their credentials.
#[test]
fn check_commands_and_urls_survive_airflows_layer_and_show_no_secret() {
    let toml = r#"
[[executors]]
name = "KubernetesExecutor"
check_url = "http://ops:hunter2@probe:8080/health?token=s3cret"

[[executors]]
name = "team:my.company.BatchExecutor"
check_command = ["/usr/local/bin/probe", "--broker", "redis://:hunter2@b:6379/0", "--token", "s3cret"]
"#;
    let env = r#"[{name = "KubernetesExecutor", check_url = "http://ops:hunter2@probe:8080/health?token=s3cret"},
                  {name = "team:my.company.BatchExecutor", check_command = ["/usr/local/bin/probe", "--broker", "redis://:hunter2@b:6379/0", "--token", "s3cret"]}]"#;
    for from_file in [true, false] {
        let dir = workdir();
        let mut command = overseer(dir.path());
        if from_file {
            std::fs::write(dir.path().join("overseer.toml"), toml).unwrap();
        } else {
            command.env("OVERSEER_EXECUTORS", env);
        }
        command
            .env(
                "AIRFLOW__CORE__EXECUTOR",
                "CeleryExecutor,KubernetesExecutor,team:my.company.BatchExecutor",
            )
            .env("AIRFLOW__CELERY__BROKER_URL", "redis://broker:6379/0")
            .arg("config");
        let out = run(&mut command);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        assert!(
            !out.stdout.contains("hunter2") && !out.stdout.contains("s3cret"),
            "{}",
            out.stdout
        );
        let config: toml::Table = out.stdout.parse().unwrap();
        let executors = config["executors"].as_array().unwrap();
        let names: Vec<_> = executors
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "CeleryExecutor",
                "KubernetesExecutor",
                "team:my.company.BatchExecutor"
            ]
        );
        assert_eq!(
            executors[1]["check_url"].as_str(),
            Some("http://ops:***@probe:8080/health?token=***"),
            "from_file {from_file}"
        );
        assert!(executors[1].get("broker_url").is_none());
        let argv: Vec<_> = executors[2]["check_command"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(
            argv,
            [
                "/usr/local/bin/probe",
                "--broker",
                "redis://:***@b:6379/0",
                "--token",
                "***"
            ],
            "from_file {from_file}"
        );
        assert!(executors[0].get("check_command").is_none());
        assert!(executors[0].get("check_url").is_none());
    }
}

/// The Jobs table's `executor_class` holds 500 characters: a longer name is bad
/// configuration, refused before anything is written, not a database error.
#[test]
fn an_executor_name_longer_than_its_column_is_refused() {
    let dir = workdir();
    let alias = "a".repeat(490);
    std::fs::write(
        dir.path().join("overseer.toml"),
        format!("[[executors]]\nname = \"{alias}:LocalExecutor\"\n"),
    )
    .unwrap();
    let out = run(overseer(dir.path()).arg("serve"));
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert_eq!(
        out.stderr.trim_end(),
        "error: invalid configuration: executors[0].name (from overseer.toml): is 504 characters long; job.executor_class holds at most 500"
    );
    assert!(!dir.path().join("overseer.db").exists());

    // Names are parsed as each layer is read: a folder without that file, so
    // Airflow's list is the only place the name is written.
    let dir = workdir();
    let out = run(overseer(dir.path())
        .env("AIRFLOW__CORE__EXECUTOR", format!("{alias}:CeleryExecutor"))
        .env("AIRFLOW__CELERY__BROKER_URL", "redis://127.0.0.1:6379/0")
        .args(["migrate", "up"]));
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("executors[0].name (from environment variable AIRFLOW__CORE__EXECUTOR): is 505 characters long"),
        "{}",
        out.stderr
    );
}

/// A pip or VM install configured by `airflow.cfg` alone (no `AIRFLOW__*`
/// variable): Overseer finds the same database, executor and broker, as
/// Airflow resolves them (`%%` is `%`, `$VAR` expanded), and `overseer config`
/// says where each came from, never the password.
#[test]
fn airflows_cfg_alone_configures_the_database_the_executor_and_the_broker() {
    let dir = workdir();
    let home = dir.path().join("af");
    std::fs::create_dir(&home).unwrap();
    std::fs::write(
        home.join("airflow.cfg"),
        "[core]\n\
         executor = CeleryExecutor\n\
         \n\
         [database]\n\
         sql_alchemy_conn = postgresql+psycopg2://airflow:p%%40ss@127.0.0.1:5432/$DB_NAME\n\
         \n\
         [celery]\n\
         broker_url = redis://:hunter2@127.0.0.1:6379/0\n\
         \n\
         [scheduler]\n\
         scheduler_health_check_threshold = 45\n",
    )
    .unwrap();
    let out = run(overseer(dir.path())
        .env("AIRFLOW_HOME", &home)
        .env("DB_NAME", "airflow")
        .arg("config"));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let config: toml::Table = out.stdout.parse().unwrap();
    let cfg = home.join("airflow.cfg");
    let cfg = cfg.display();
    assert_eq!(
        config["database"]["url"].as_str(),
        Some("postgres://airflow:***@127.0.0.1:5432/airflow")
    );
    assert_eq!(config["thresholds"]["scheduler"].as_str(), Some("45s"));
    let executor = &config["executors"].as_array().unwrap()[0];
    assert_eq!(executor["name"].as_str(), Some("CeleryExecutor"));
    assert_eq!(
        executor["broker_url"].as_str(),
        Some("redis://:***@127.0.0.1:6379/0")
    );
    for line in [
        format!("#   database.url <- {cfg} [database] sql_alchemy_conn"),
        format!("#   executors <- {cfg} [core] executor"),
        format!("#   executors.0.broker_url <- {cfg} [celery] broker_url"),
        format!("#   thresholds.scheduler <- {cfg} [scheduler] scheduler_health_check_threshold"),
    ] {
        assert!(out.stdout.contains(&line), "{line}\n{}", out.stdout);
    }
    assert!(!out.stdout.contains("hunter2") && !out.stdout.contains("p@ss"));
    assert!(!out.stderr.contains("hunter2"), "{}", out.stderr);

    // A variable still wins over the file, as in Airflow; AIRFLOW_CONFIG names another file.
    let other = dir.path().join("other.cfg");
    std::fs::write(&other, "[core]\nexecutor = KubernetesExecutor\n").unwrap();
    let config = effective(
        overseer(dir.path())
            .env("AIRFLOW_HOME", &home)
            .env("AIRFLOW_CONFIG", &other)
            .env("AIRFLOW__CORE__EXECUTOR", "LocalExecutor"),
    );
    assert_eq!(
        config["executors"].as_array().unwrap()[0]["name"].as_str(),
        Some("LocalExecutor")
    );
    assert_eq!(
        config["database"]["url"].as_str(),
        Some(format!("sqlite://{}/airflow.db", home.display()).as_str()),
        "other.cfg sets no database, so Airflow's default, and airflow.cfg is not read beside it"
    );
}

/// An `airflow.cfg` that leaves the executor and the database to Airflow's
/// defaults (as the one Airflow writes on its first run does, all commented
/// out): Overseer supervises what that Airflow runs, `LocalExecutor` on
/// `$AIRFLOW_HOME/airflow.db`, and says where that came from. What an
/// operator set in Overseer's own layers still wins, and with no `airflow.cfg`
/// nothing says an Airflow is there: Overseer's own defaults stay.
#[test]
fn an_airflow_cfg_that_sets_nothing_means_airflows_defaults() {
    let dir = workdir();
    let home = dir.path().join("af");
    std::fs::create_dir(&home).unwrap();
    let cfg = home.join("airflow.cfg");
    std::fs::write(
        &cfg,
        "[core]\n# executor = LocalExecutor\n\n[database]\n# sql_alchemy_conn = sqlite:////x.db\n\n\
         [scheduler]\nscheduler_health_check_threshold = 45\n",
    )
    .unwrap();
    let out = run(overseer(dir.path())
        .env("AIRFLOW_HOME", &home)
        .arg("config"));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let config: toml::Table = out.stdout.parse().unwrap();
    let db = format!("sqlite://{}/airflow.db", home.display());
    assert_eq!(config["database"]["url"].as_str(), Some(db.as_str()));
    let executors = config["executors"].as_array().unwrap();
    assert_eq!(executors.len(), 1, "{executors:?}");
    assert_eq!(executors[0]["name"].as_str(), Some("LocalExecutor"));
    let cfg = cfg.display();
    for line in [
        format!(
            "#   database.url <- Airflow's default for [database] sql_alchemy_conn, as {cfg} sets none"
        ),
        format!("#   executors <- Airflow's default for [core] executor, as {cfg} sets none"),
    ] {
        assert!(out.stdout.contains(&line), "{line}\n{}", out.stdout);
    }

    // Overseer's own layers keep what they set: a database and executors.
    let toml = dir.path().join("overseer.toml");
    std::fs::write(
        &toml,
        "[[executors]]\nname = \"CeleryExecutor\"\nbroker_url = \"redis://127.0.0.1:6379/0\"\n",
    )
    .unwrap();
    let config = effective(
        overseer(dir.path())
            .env("AIRFLOW_HOME", &home)
            .env("OVERSEER_DATABASE__URL", "postgres://127.0.0.1:5432/test"),
    );
    assert_eq!(
        config["database"]["url"].as_str(),
        Some("postgres://127.0.0.1:5432/test")
    );
    let executors = config["executors"].as_array().unwrap();
    assert_eq!(executors.len(), 1, "{executors:?}");
    assert_eq!(executors[0]["name"].as_str(), Some("CeleryExecutor"));
    std::fs::remove_file(&toml).unwrap();

    // Where Airflow has not made its database yet, serve says so and stops
    // (on a port of its own: the README's serve may hold 8781 meanwhile).
    let out = run(overseer(dir.path()).env("AIRFLOW_HOME", &home).args([
        "serve",
        "--bind",
        "127.0.0.1:0",
    ]));
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let db_file = home.join("airflow.db");
    assert!(
        out.stderr.lines().any(|l| l.contains(&format!(
            "the file {} does not exist (Overseer creates only its own database",
            db_file.display()
        )) && l.contains("airflow db migrate")),
        "{}",
        out.stderr
    );
    assert!(!db_file.exists(), "Overseer made Airflow's database");

    // No airflow.cfg: Overseer's own defaults.
    std::fs::remove_file(home.join("airflow.cfg")).unwrap();
    let config = effective(overseer(dir.path()).env("AIRFLOW_HOME", &home));
    assert_eq!(
        config["database"]["url"].as_str(),
        Some("sqlite://overseer.db?mode=rwc")
    );
    assert!(config.get("executors").is_none());
}

/// Airflow's way to keep a password out of the environment and the file:
/// `AIRFLOW__CELERY__BROKER_URL_CMD`, and `sql_alchemy_conn_cmd` in
/// `airflow.cfg`, run without a shell.
#[test]
fn a_sensitive_option_comes_from_its_command() {
    let dir = workdir();
    let secrets = dir.path().join("broker");
    std::fs::write(&secrets, "redis://:s3cret@127.0.0.1:6379/0\n").unwrap();
    std::fs::write(
        dir.path().join("airflow.cfg"),
        "[database]\nsql_alchemy_conn_cmd = printf postgresql://airflow:dbs3cret@127.0.0.1/airflow\n",
    )
    .unwrap();
    let out = run(overseer(dir.path())
        .env("AIRFLOW_CONFIG", dir.path().join("airflow.cfg"))
        .env("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
        .env(
            "AIRFLOW__CELERY__BROKER_URL_CMD",
            format!("cat {}", secrets.display()),
        )
        .arg("config"));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let config: toml::Table = out.stdout.parse().unwrap();
    assert_eq!(
        config["executors"].as_array().unwrap()[0]["broker_url"].as_str(),
        Some("redis://:***@127.0.0.1:6379/0")
    );
    assert_eq!(
        config["database"]["url"].as_str(),
        Some("postgres://airflow:***@127.0.0.1/airflow")
    );
    assert!(out.stdout.contains(
        "#   executors.0.broker_url <- environment variable AIRFLOW__CELERY__BROKER_URL_CMD"
    ));
    assert!(!out.stdout.contains("s3cret") && !out.stderr.contains("s3cret"));
}

/// A `_CMD` whose command leaves a process in a session of its own (`setsid`)
/// leaves nothing behind: Overseer ends it, whether it closed its output (the
/// value is read) or held it open (the error says the command exited and what
/// it started kept its output, not that the command never finished).
#[test]
fn a_commands_daemon_never_outlives_overseer() {
    use support::procs::{cmdline, proc_table};
    let dir = workdir();
    let nonce = std::process::id();
    let running = |marker: &str| {
        proc_table()
            .into_iter()
            .any(|p| p.state != 'Z' && cmdline(p.pid).contains(marker))
    };

    // Daemonised with its output closed: the value is read, the daemon ended.
    let quiet = format!("3601.{nonce}");
    let out = run(overseer(dir.path())
        .env("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
        .env(
            "AIRFLOW__CELERY__BROKER_URL_CMD",
            format!("sh -c 'setsid sleep {quiet} >/dev/null 2>&1 & echo redis://127.0.0.1:6379/0'"),
        )
        .arg("config"));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.contains("redis://127.0.0.1:6379/0"),
        "{}",
        out.stdout
    );
    assert!(
        !running(&quiet),
        "a daemon of the command outlived overseer"
    );

    // Daemonised holding its output: setsid forks and exits at once; its
    // child keeps the pipe open until the command's deadline.
    let holding = format!("3602.{nonce}");
    let out = run(overseer(dir.path())
        .env("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
        .env(
            "AIRFLOW__CELERY__BROKER_URL_CMD",
            format!("setsid sleep {holding}"),
        )
        .arg("config"));
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert_eq!(
        out.stderr.trim_end(),
        "error: invalid configuration in environment variable AIRFLOW__CELERY__BROKER_URL_CMD: \
         \"setsid\" exited, but a process it started kept its output open for 10s"
    );
    assert!(
        !running(&holding),
        "a daemon of the command outlived overseer"
    );
}

/// What Airflow would read but Overseer does not is said, once, and changes
/// nothing: a `_CMD` for an option Airflow does not run commands for (its
/// command is never run), and a `celery_config_options` dict of the
/// deployment's own (Python Overseer does not import).
#[test]
fn what_overseer_does_not_read_is_warned_about_and_ignored() {
    let dir = workdir();
    let ran = dir.path().join("ran");
    std::fs::write(
        dir.path().join("airflow.cfg"),
        "[celery]\nbroker_url = redis://127.0.0.1:6379/0\n\
         celery_config_options = my_company.celery_config.CELERY_CONFIG\n",
    )
    .unwrap();
    let out = run(overseer(dir.path())
        .env("AIRFLOW_CONFIG", dir.path().join("airflow.cfg"))
        .env("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
        .env(
            "AIRFLOW__OPERATORS__DEFAULT_QUEUE_CMD",
            format!("touch {}", ran.display()),
        )
        .arg("config"));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let config: toml::Table = out.stdout.parse().unwrap();
    let executor = &config["executors"].as_array().unwrap()[0];
    assert_eq!(
        executor["broker_url"].as_str(),
        Some("redis://127.0.0.1:6379/0")
    );
    assert_eq!(
        executor["queues"].as_array().unwrap()[0].as_str(),
        Some("default")
    );
    assert!(!ran.exists(), "the ignored command ran");
    let warnings: Vec<&str> = out.stderr.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 2, "{}", out.stderr);
    assert!(
        warnings.iter().any(|l| l.contains(
            "ignoring environment variable AIRFLOW__OPERATORS__DEFAULT_QUEUE_CMD: Airflow reads \
             _CMD and _SECRET only for sensitive options, and [operators] default_queue is not one"
        )),
        "{}",
        out.stderr
    );
    assert!(
        warnings.iter().any(|l| l.contains(
            "sets [celery] celery_config_options = my_company.celery_config.CELERY_CONFIG"
        ) && l.contains("Overseer does not import Python")),
        "{}",
        out.stderr
    );
}

/// What Overseer cannot use stops it with one line naming the variable or the
/// file, exit 2, and never what a command printed.
#[test]
fn airflows_configuration_that_cannot_be_used_is_one_line_and_exit_code_2() {
    let dir = workdir();
    let cfg = dir.path().join("airflow.cfg");
    // A FIFO's open waits for a writer and /dev/zero never ends: both once
    // held start-up for ever (or until memory ran out). Refused unread.
    let fifo = dir.path().join("airflow-fifo.cfg");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo");
    // The variables set, the airflow.cfg written first (if any), the error.
    type Case<'a> = (Vec<(&'a str, String)>, Option<&'a str>, String);
    let cases: Vec<Case> = vec![
        (
            vec![("AIRFLOW__CELERY__BROKER_URL_SECRET", "celery/broker".into())],
            None,
            "error: invalid configuration in environment variable AIRFLOW__CELERY__BROKER_URL_SECRET: \
             it names a secret of Airflow's secrets backend, which Overseer does not run: set the \
             option itself, or its _CMD, instead"
                .into(),
        ),
        (
            vec![(
                "AIRFLOW__CELERY__BROKER_URL_CMD",
                "sh -c 'echo redis://:s3cret@x; exit 4'".into(),
            )],
            None,
            "error: invalid configuration in environment variable AIRFLOW__CELERY__BROKER_URL_CMD: \
             \"sh\" exited with 4"
                .into(),
        ),
        (
            vec![("AIRFLOW_CONFIG", cfg.display().to_string())],
            Some("[core]\nexecutor = CeleryExecutor\nhunter2\n"),
            format!(
                "error: invalid configuration in {}: line 3: neither a [section], an option (key = value) nor a comment",
                cfg.display()
            ),
        ),
        (
            vec![("AIRFLOW_CONFIG", cfg.display().to_string())],
            Some("[database]\nsql_alchemy_conn = postgresql://a:50%off@db/airflow\n"),
            format!(
                "error: invalid configuration in {} [database] sql_alchemy_conn: [database] sql_alchemy_conn: \
                 '%' must be followed by '%' or '(' (write a literal % as %%)",
                cfg.display()
            ),
        ),
        (
            vec![("AIRFLOW_CONFIG", fifo.display().to_string())],
            None,
            format!(
                "error: invalid configuration in {}: cannot read it: is a FIFO, not a regular file",
                fifo.display()
            ),
        ),
        (
            vec![("AIRFLOW_CONFIG", "/dev/zero".into())],
            None,
            "error: invalid configuration in /dev/zero: cannot read it: is a character device, \
             not a regular file"
                .into(),
        ),
        (
            vec![("AIRFLOW_CONFIG", dir.path().join("missing.cfg").display().to_string())],
            None,
            format!(
                "error: invalid configuration in environment variable AIRFLOW_CONFIG: {} does not exist",
                dir.path().join("missing.cfg").display()
            ),
        ),
    ];
    for (vars, file, expected) in cases {
        if let Some(text) = file {
            std::fs::write(&cfg, text).unwrap();
        }
        let mut command = overseer(dir.path());
        for (var, value) in &vars {
            command.env(var, value);
        }
        let out = run(command.arg("config"));
        assert_eq!(out.code, Some(2), "{vars:?}: {}", out.stderr);
        assert_eq!(out.stderr.trim_end(), expected, "{vars:?}");
        assert!(!out.stderr.contains("s3cret") && !out.stderr.contains("off@"));
        assert!(out.stdout.is_empty());
    }
}

/// Airflow is the judge of its own configuration: on each layout, every option
/// Overseer reads resolves to the value the real Airflow 3.3.2 gets from
/// `conf.get(section, key)` (what `airflow config get-value` prints; one Python
/// process per layout instead of one `airflow` per option), a team's options
/// as `conf.get(..., team_name=...)` gives them to that team's executor.
#[test]
fn every_option_overseer_reads_resolves_as_airflow_resolves_it() {
    use overseer::config::airflow::conf::{OPTIONS, SQL_ALCHEMY_CONN, TEAM_OPTIONS};
    use overseer::config::airflow::{AirflowConf, AirflowOption, sqlalchemy_to_sea_orm};

    let Some(venv) = support::airflow::venv() else {
        return;
    };
    struct Layout {
        name: &'static str,
        vars: Vec<(&'static str, String)>,
        files: Vec<(&'static str, &'static str)>,
        team: Option<&'static str>,
    }
    let full_cfg = "[core]\nexecutor = CeleryExecutor\nmulti_team = True\nparallelism = 8\n\
        [database]\nsql_alchemy_conn = postgresql+psycopg2://airflow:pw@db:5432/airflow\n\
        [celery]\nbroker_url = redis://:pw@broker:6379/0\nresult_backend = redis://:pw@results:6379/1\n\
        worker_concurrency = 4\nworker_autoscale = 8,2\n\
        ssl_active = true\nssl_key = /k.pem\n\
        ssl_cert = /c.pem\nssl_cacert = /ca.pem\n\
        [operators]\ndefault_queue = airflow\n\
        [scheduler]\nscheduler_health_check_threshold = 45\n\
        [triggerer]\ntriggerer_health_check_threshold = 50.5\n\
        [dag_processor]\nhealth_check_threshold = 55\n";
    let layout = |name, vars: Vec<(&'static str, &str)>, files, team| Layout {
        name,
        vars: vars.into_iter().map(|(k, v)| (k, v.to_owned())).collect(),
        files,
        team,
    };
    let layouts = [
        layout(
            "file only",
            vec![("AIRFLOW_HOME", "{dir}/home")],
            vec![("home/airflow.cfg", full_cfg)],
            None,
        ),
        layout(
            "variable over file",
            vec![
                ("AIRFLOW_HOME", "{dir}/home"),
                (
                    "AIRFLOW__CELERY__BROKER_URL",
                    "amqp://guest:guest@mq:5672//",
                ),
                ("AIRFLOW__CORE__EXECUTOR", "LocalExecutor"),
            ],
            vec![("home/airflow.cfg", full_cfg)],
            None,
        ),
        layout(
            "_CMD in the environment",
            vec![
                ("AIRFLOW_HOME", "{dir}/home"),
                ("AIRFLOW__CELERY__BROKER_URL_CMD", "cat {dir}/broker"),
                (
                    "AIRFLOW__CELERY__RESULT_BACKEND_CMD",
                    "printf 'db+postgresql://r:s3cret@results/celery'",
                ),
                (
                    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD",
                    "printf 'postgresql://a:b@c/d'",
                ),
            ],
            vec![("broker", "redis://:s3cret@broker:6379/1\n")],
            None,
        ),
        layout(
            "_cmd in the file",
            vec![("AIRFLOW_HOME", "{dir}/home")],
            vec![
                (
                    "home/airflow.cfg",
                    "[celery]\nbroker_url_cmd = cat {dir}/broker\n[database]\nsql_alchemy_conn_cmd = echo sqlite:////tmp/x.db\n",
                ),
                ("broker", "redis://broker:6379/2"),
            ],
            None,
        ),
        layout(
            "AIRFLOW_CONFIG names another file",
            vec![
                ("AIRFLOW_HOME", "{dir}/home"),
                ("AIRFLOW_CONFIG", "{dir}/elsewhere.cfg"),
            ],
            vec![
                ("home/airflow.cfg", full_cfg),
                ("elsewhere.cfg", "[core]\nexecutor = KubernetesExecutor\n"),
            ],
            None,
        ),
        layout(
            "an empty AIRFLOW_HOME",
            vec![("AIRFLOW_HOME", "{dir}/home")],
            vec![],
            None,
        ),
        layout(
            "no AIRFLOW_HOME: ~/airflow",
            vec![],
            vec![("airflow/airflow.cfg", "[core]\nexecutor = CeleryExecutor\n")],
            None,
        ),
        layout(
            "a relative sqlite:/// path",
            vec![
                ("AIRFLOW_HOME", "{dir}/home"),
                (
                    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
                    "sqlite:///airflow.db",
                ),
            ],
            vec![],
            None,
        ),
        layout(
            "a password with % and @, in the file and in a variable",
            vec![
                ("AIRFLOW_HOME", "{dir}/home"),
                (
                    "AIRFLOW__CELERY__BROKER_URL",
                    "redis://:p%40ss%25w@rd@broker:6379/0",
                ),
            ],
            vec![(
                "home/airflow.cfg",
                "[database]\nsql_alchemy_conn = postgresql://airflow:50%%off@db/airflow\n",
            )],
            None,
        ),
        layout(
            "a team's variables and file section",
            vec![
                ("AIRFLOW_HOME", "{dir}/home"),
                ("AIRFLOW__CORE__MULTI_TEAM", "True"),
                (
                    "AIRFLOW__CORE__EXECUTOR",
                    "LocalExecutor;team_a=CeleryExecutor",
                ),
                ("AIRFLOW__CELERY__BROKER_URL", "redis://global:6379/0"),
                (
                    "AIRFLOW__TEAM_A___CELERY__BROKER_URL",
                    "redis://team-a:6379/0",
                ),
            ],
            vec![(
                "home/airflow.cfg",
                "[celery]\nssl_active = True\n[team_a=operators]\ndefault_queue = team_a_queue\n",
            )],
            Some("team_a"),
        ),
        layout(
            "deprecated [core] sql_alchemy_conn",
            vec![
                ("AIRFLOW_HOME", "{dir}/home"),
                (
                    "AIRFLOW__CORE__SQL_ALCHEMY_CONN",
                    "postgresql://old@db/airflow",
                ),
            ],
            vec![(
                "home/airflow.cfg",
                "[core]\nsql_alchemy_conn = mysql://older@db/airflow\n",
            )],
            None,
        ),
        layout(
            "$VAR and ~ expanded, [DEFAULT] and %(key)s interpolated",
            vec![
                ("AIRFLOW_HOME", "~/home"),
                ("DB_HOST", "db.internal"),
                ("AIRFLOW__CELERY__SSL_CACERT", "~/ca.pem"),
            ],
            vec![(
                "home/airflow.cfg",
                "[DEFAULT]\nport = 5432\n[database]\nsql_alchemy_conn = postgresql://a@$DB_HOST:%(port)s/${DB_NAME}\n[operators]\ndefault_queue = q-%(port)s\n",
            )],
            None,
        ),
        layout(
            "_CMD of an option that is not sensitive is ignored; an empty variable wins",
            vec![
                ("AIRFLOW_HOME", "{dir}/home"),
                ("AIRFLOW__CORE__EXECUTOR_CMD", "echo CeleryExecutor"),
                ("AIRFLOW__OPERATORS__DEFAULT_QUEUE", ""),
            ],
            vec![(
                "home/airflow.cfg",
                "[operators]\ndefault_queue = from_file\n",
            )],
            None,
        ),
    ];
    let script = r#"
import json, sys, warnings
warnings.simplefilter("ignore")
from airflow.configuration import conf
options, team, team_options = json.loads(sys.argv[1]), sys.argv[2] or None, json.loads(sys.argv[3])
values = {}
for section, key in options:
    # An option Airflow has no default for (result_backend) and nobody set: "".
    values[f"{section}.{key}"] = conf.get(section, key, fallback="")
for section, key in team_options:
    if team is not None:
        values[f"{team}:{section}.{key}"] = conf.get(section, key, team_name=team, fallback="")
print("VALUES " + json.dumps(values))
"#;
    let key = |o: &AirflowOption| format!("{}.{}", o.section, o.key);
    for layout in layouts {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().display().to_string();
        for (path, text) in &layout.files {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text.replace("{dir}", &root)).unwrap();
        }
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        let mut env: Vec<(String, String)> = vec![
            ("HOME".into(), root.clone()),
            ("PATH".into(), "/usr/bin:/bin".into()),
        ];
        env.extend(
            layout
                .vars
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.replace("{dir}", &root))),
        );

        // Overseer first: Airflow writes a default airflow.cfg where it finds none.
        let conf =
            AirflowConf::read(env.clone()).unwrap_or_else(|e| panic!("{}: {e}", layout.name));
        let mut ours = serde_json::Map::new();
        for option in &OPTIONS {
            ours.insert(key(option), conf.get(option, None).unwrap().value.into());
        }
        if let Some(team) = layout.team {
            for option in &TEAM_OPTIONS {
                ours.insert(
                    format!("{team}:{}", key(option)),
                    conf.get(option, Some(team)).unwrap().value.into(),
                );
            }
        }

        let options: Vec<(&str, &str)> = OPTIONS.iter().map(|o| (o.section, o.key)).collect();
        let team_options: Vec<(&str, &str)> =
            TEAM_OPTIONS.iter().map(|o| (o.section, o.key)).collect();
        let out = std::process::Command::new(venv.join("bin/python"))
            .current_dir(dir.path())
            .env_clear()
            .envs(env.iter().cloned())
            .args([
                "-c",
                script,
                &serde_json::to_string(&options).unwrap(),
                layout.team.unwrap_or(""),
                &serde_json::to_string(&team_options).unwrap(),
            ])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if stderr.contains("Cannot use relative path") {
            // Airflow refuses the database it was given: so does Overseer.
            let url = conf.get(&SQL_ALCHEMY_CONN, None).unwrap().value;
            assert!(
                sqlalchemy_to_sea_orm(&url).is_err(),
                "{}: {url}",
                layout.name
            );
            continue;
        }
        assert!(out.status.success(), "{}: {stderr}", layout.name);
        // Airflow logs on stdout too: the values are the marked line.
        let stdout = String::from_utf8_lossy(&out.stdout);
        let values = stdout
            .lines()
            .find_map(|l| l.strip_prefix("VALUES "))
            .unwrap_or_default();
        let airflows: serde_json::Map<String, serde_json::Value> = serde_json::from_str(values)
            .unwrap_or_else(|e| {
                panic!(
                    "{}: {e}: {}",
                    layout.name,
                    String::from_utf8_lossy(&out.stdout)
                )
            });
        for (option, airflow) in &airflows {
            assert_eq!(ours.get(option), Some(airflow), "{}: {option}", layout.name);
        }
        assert_eq!(ours.len(), airflows.len(), "{}", layout.name);
    }
}

/// Airflow 3.3's teams: `LocalExecutor;team_a=CeleryExecutor;team_b=CeleryExecutor`
/// with `[core] multi_team`. Each team's executor is supervised on its own, with
/// its team's broker (`AIRFLOW__<TEAM>___CELERY__BROKER_URL`, or the team's
/// `[<team>=celery]` section), and its name says the team, so one team's dead
/// broker is never hidden by another's.
#[test]
fn each_teams_executor_is_supervised_with_its_teams_broker() {
    let dir = workdir();
    std::fs::write(
        dir.path().join("airflow.cfg"),
        "[team_b=celery]\nbroker_url = redis://127.0.0.1:6380/0\n",
    )
    .unwrap();
    let out = run(overseer(dir.path())
        .env("AIRFLOW_CONFIG", dir.path().join("airflow.cfg"))
        .env("AIRFLOW__CORE__MULTI_TEAM", "True")
        .env(
            "AIRFLOW__CORE__EXECUTOR",
            "LocalExecutor;team_a=CeleryExecutor;team_b=CeleryExecutor",
        )
        .env("AIRFLOW__CELERY__BROKER_URL", "redis://127.0.0.1:6379/0")
        .env(
            "AIRFLOW__TEAM_A___CELERY__BROKER_URL",
            "redis://:teams3cret@127.0.0.1:6381/0",
        )
        .arg("config"));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let config: toml::Table = out.stdout.parse().unwrap();
    let executors: Vec<(&str, Option<&str>)> = config["executors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap(),
                e.get("broker_url").and_then(|b| b.as_str()),
            )
        })
        .collect();
    assert_eq!(
        executors,
        [
            ("LocalExecutor", None),
            (
                "team_a=CeleryExecutor",
                Some("redis://:***@127.0.0.1:6381/0")
            ),
            ("team_b=CeleryExecutor", Some("redis://127.0.0.1:6380/0")),
        ]
    );
    assert!(out.stdout.contains(
        "#   executors.1.broker_url <- environment variable AIRFLOW__TEAM_A___CELERY__BROKER_URL"
    ));
    assert!(!out.stdout.contains("teams3cret"));

    // Without multi_team, Airflow ignores the teams' lists, and says so: so does Overseer.
    let out = run(overseer(dir.path())
        .env(
            "AIRFLOW__CORE__EXECUTOR",
            "LocalExecutor;team_a=CeleryExecutor",
        )
        .arg("config"));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let config: toml::Table = out.stdout.parse().unwrap();
    assert_eq!(config["executors"].as_array().unwrap().len(), 1);
    assert!(
        out.stderr.contains("multi_team is not enabled"),
        "{}",
        out.stderr
    );

    // Airflow's own refusals, one line each, exit 2, naming the key: the list,
    // or the entry that is one executor twice in a list under two spellings
    // (ExecutorLoader compares module paths). The same executor in two teams'
    // lists is two executors (below).
    const TWICE: &str = "which Airflow refuses (\"Duplicate executors are not yet supported\")";
    for (list, key, problem) in [
        (
            "LocalExecutor;team_a=CeleryExecutor;team_a=LocalExecutor",
            "executors",
            "team 'team_a' appears more than once in the executor list: each team can be named once".to_owned(),
        ),
        (
            "team_a=CeleryExecutor",
            "executors",
            "at least one global executor must come first (e.g. 'CeleryExecutor;team1=LocalExecutor')".to_owned(),
        ),
        (
            "team_a=CeleryExecutor;LocalExecutor",
            "executors",
            "the global executors must come before the teams' (e.g. 'CeleryExecutor;team1=LocalExecutor')".to_owned(),
        ),
        (
            "LocalExecutor;a=CeleryExecutor",
            "executors",
            "team \"a\" is not a team name Airflow accepts (3 to 50 letters, digits, '-' and '_')".to_owned(),
        ),
        (
            "CeleryExecutor,fast:CeleryExecutor",
            "executors[1].name",
            format!(
                "\"CeleryExecutor\" and \"fast:CeleryExecutor\" are one executor \
                 (airflow.providers.celery.executors.celery_executor.CeleryExecutor) configured twice \
                 in the global list, {TWICE}"
            ),
        ),
        (
            "LocalExecutor;team_a=CeleryExecutor,fast:airflow.providers.celery.executors.celery_executor.CeleryExecutor",
            "executors[2].name",
            format!(
                "\"team_a=CeleryExecutor\" and \"team_a=fast:airflow.providers.celery.executors.celery_executor.CeleryExecutor\" \
                 are one executor (airflow.providers.celery.executors.celery_executor.CeleryExecutor) \
                 configured twice in team team_a's list, {TWICE}"
            ),
        ),
    ] {
        let out = run(overseer(dir.path())
            .env("AIRFLOW__CORE__MULTI_TEAM", "true")
            .env("AIRFLOW__CORE__EXECUTOR", list)
            .arg("config"));
        assert_eq!(out.code, Some(2), "{list}: {}", out.stderr);
        assert_eq!(
            out.stderr.trim_end(),
            format!(
                "error: invalid configuration: {key} (from environment variable AIRFLOW__CORE__EXECUTOR): {problem}"
            ),
            "{list}"
        );
    }
    let out = run(overseer(dir.path())
        .env("AIRFLOW__CORE__MULTI_TEAM", "true")
        .env(
            "AIRFLOW__TEAM_A___CELERY__BROKER_URL",
            "redis://127.0.0.1:6379/1",
        )
        .env(
            "AIRFLOW__CORE__EXECUTOR",
            "CeleryExecutor;team_a=CeleryExecutor",
        )
        .env("AIRFLOW__CELERY__BROKER_URL", "redis://127.0.0.1:6379/0")
        .arg("config"));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let config: toml::Table = out.stdout.parse().unwrap();
    assert_eq!(config["executors"].as_array().unwrap().len(), 2);
}
