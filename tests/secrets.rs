//! Passwords, the way operators give them: a broker or database password
//! reaches the server it is for, through Airflow's environment, through
//! `OVERSEER_*` and through `overseer.toml`, and appears nowhere else.
//!
//! Each password holds characters that must be percent-encoded in a URL (a
//! space, `@`, `:`, `#`, `/`), so a mangled or half-parsed one cannot pass; a
//! wrong password must make the verdict `unhealthy`, naming the broker.

use crate::support;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use overseer_testkit::rabbitmq::{VirtualHost, rabbitmqctl};
use overseer_testkit::throwaway::{ThrowawayPostgres, ThrowawayRedis, free_port};
use serde_json::Value;
use support::{Serving, get, health_until, overseer, run, workdir};

/// Quick intervals: a poll every 500 ms, writes every 200 ms, reads every 100 ms.
const QUICK: &str = "[supervisor]\npoll_interval = \"500ms\"\npoll_timeout = \"400ms\"\nheartbeat_interval = \"200ms\"\nrefresh_interval = \"100ms\"\n";

/// The Redis `requirepass` password.
const REDIS_PASSWORD: &str = "Zq9 P@ss:w#rd/+1";
/// An ACL user's name and password on the same Redis.
const REDIS_USER: &str = "airflow_acl";
const REDIS_USER_PASSWORD: &str = "Acl@Us3r:#/x";
/// A RabbitMQ user and virtual host of this test's own.
const RABBIT_PASSWORD: &str = "R@bb1t p#ss:/w";
/// A PostgreSQL role's password.
const PG_PASSWORD: &str = "Pg s3cr@t:#/x";
/// A sentinel's password (the sentinels are never reached).
const SENTINEL_PASSWORD: &str = "S3nt1nel@pw";

/// Percent-encodes everything but unreserved characters, as a URL's user
/// information needs.
fn enc(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Every form in which a password could leak: as written, percent-encoded.
fn forms(password: &str) -> [String; 3] {
    [password.to_owned(), enc(password), bytes(password)]
}

/// A password as a byte list prints it (`[0, 104, 117, ...]`: lapin's trace of
/// the SASL response it sends, `LongString(...)`), without the brackets.
fn bytes(password: &str) -> String {
    let bytes: Vec<String> = password.bytes().map(|b| b.to_string()).collect();
    bytes.join(", ")
}

/// Fails if `text` (named `what`) holds any form of any of `passwords`.
fn assert_no_password(what: &str, text: &str, passwords: &[&str]) {
    for password in passwords {
        for form in forms(password) {
            assert!(
                !text.contains(&form),
                "{what} shows the password {form:?}:\n{text}"
            );
        }
    }
}

/// `redis-server` of the test's own, with a password and an ACL user.
fn redis_with_passwords() -> Option<ThrowawayRedis> {
    let acl = format!(">{REDIS_USER_PASSWORD}");
    ThrowawayRedis::start(&[
        "--requirepass",
        REDIS_PASSWORD,
        "--user",
        REDIS_USER,
        "on",
        &acl,
        "~*",
        "&*",
        "+@all",
    ])
}

/// A RabbitMQ user and virtual host of the test's own on the machine's
/// RabbitMQ, deleted when dropped (the shared server is otherwise untouched).
struct RabbitUser {
    user: String,
    vhost: VirtualHost,
}

impl RabbitUser {
    fn create() -> Option<Self> {
        let made = VirtualHost::create("overseer_secrets_vhost").and_then(|vhost| {
            let this = Self {
                user: overseer_testkit::unique_name("overseer_secrets_user"),
                vhost,
            };
            rabbitmqctl(&["add_user", &this.user, RABBIT_PASSWORD])?;
            let vhost = &this.vhost.name;
            rabbitmqctl(&["set_permissions", "-p", vhost, &this.user, ".*", ".*", ".*"])?;
            Ok(this)
        });
        match made {
            Ok(this) => Some(this),
            Err(e) => overseer_testkit::unavailable("RabbitMQ (rabbitmqctl)", e),
        }
    }

    fn url(&self, password: &str) -> String {
        format!(
            "amqp://{}:{}@127.0.0.1:5672/{}",
            self.user,
            enc(password),
            self.vhost.name
        )
    }
}

impl Drop for RabbitUser {
    fn drop(&mut self) {
        // The virtual host goes when its field is dropped, after this.
        let _ = rabbitmqctl(&["delete_user", &self.user]);
    }
}

fn redis_url(redis: &ThrowawayRedis, user: &str, password: &str) -> String {
    format!(
        "redis://{user}:{}@127.0.0.1:{}/0",
        enc(password),
        redis.port
    )
}

/// The executor instances of a report, by executor name.
fn instance<'a>(json: &'a Value, name: &str) -> Option<&'a Value> {
    json["executor"]["instances"]
        .as_array()?
        .iter()
        .find(|i| i["executor"] == name)
}

/// How a configuration reaches Overseer.
#[derive(Debug, Clone, Copy)]
enum Path {
    /// `AIRFLOW__CORE__EXECUTOR` and `AIRFLOW__CELERY__BROKER_URL`.
    Airflow,
    /// `OVERSEER_EXECUTORS`, a TOML array.
    OverseerEnv,
    /// `[[executors]]` in `overseer.toml`.
    File,
}

/// `overseer serve` with the named executors (each `(alias, broker URL)`), given
/// the way `path` says. Airflow's environment has one broker for every Celery
/// executor, so it takes one executor only.
fn serve(path: Path, executors: &[(&str, String)]) -> (tempfile::TempDir, Serving) {
    let dir = workdir();
    let mut toml = QUICK.to_owned();
    let mut command = overseer(dir.path());
    match path {
        Path::Airflow => {
            assert_eq!(executors.len(), 1);
            let (alias, url) = &executors[0];
            command
                .env("AIRFLOW__CORE__EXECUTOR", format!("{alias}:CeleryExecutor"))
                .env("AIRFLOW__CELERY__BROKER_URL", url);
        }
        Path::OverseerEnv => {
            let list: Vec<String> = executors
                .iter()
                .map(|(alias, url)| {
                    format!("{{name = \"{alias}:CeleryExecutor\", broker_url = \"{url}\"}}")
                })
                .collect();
            command.env("OVERSEER_EXECUTORS", format!("[{}]", list.join(", ")));
        }
        Path::File => {
            for (alias, url) in executors {
                toml.push_str(&format!(
                    "\n[[executors]]\nname = \"{alias}:CeleryExecutor\"\nbroker_url = \"{url}\"\n"
                ));
            }
        }
    }
    std::fs::write(dir.path().join("overseer.toml"), toml).unwrap();
    let serving = Serving::start(&mut command);
    (dir, serving)
}

/// Waits until every executor of `expected` has its verdict:
/// `(alias, health, text the reason must hold)`. A poll is 400 ms here, so
/// a first connection slowed by a loaded machine may time out once; the
/// verdict that follows is the one judged (the deadline fails the test
/// with the last JSON).
fn expect_verdicts(serving: &Serving, what: &str, expected: &[(&str, &str, &str)]) -> Value {
    let json = health_until(serving, what, |json| {
        expected.iter().all(|(alias, health, reason)| {
            instance(json, &format!("{alias}:CeleryExecutor")).is_some_and(|i| {
                i["health"] == *health && i["reason"].as_str().unwrap_or_default().contains(reason)
            })
        })
    });
    for (alias, health, reason) in expected {
        let instance = instance(&json, &format!("{alias}:CeleryExecutor")).unwrap();
        assert_eq!(instance["health"], *health, "{what}: {alias}: {instance}");
        let said = instance["reason"].as_str().unwrap_or_default();
        assert!(said.contains(reason), "{what}: {alias}: {said:?}");
    }
    json
}

#[test]
fn a_redis_password_reaches_the_broker_by_every_path() {
    let Some(redis) = redis_with_passwords() else {
        return;
    };
    // A Redis whose password is literally `***`: what a redacting round trip
    // would have sent it.
    let Some(masked) = ThrowawayRedis::start(&["--requirepass", "***"]) else {
        return;
    };
    let right = redis_url(&redis, "", REDIS_PASSWORD);
    let wrong = redis_url(&redis, "", "not the password");
    let acl_right = redis_url(&redis, REDIS_USER, REDIS_USER_PASSWORD);
    let acl_wrong = redis_url(&redis, REDIS_USER, "Acl@Us3r:#/y");
    let masked_wrong = redis_url(&masked, "", "Zq9Pw");
    let masked_right = format!("redis://:***@127.0.0.1:{}/0", masked.port);
    let identity = format!("redis://127.0.0.1:{}/0", redis.port);
    let rejected = format!("broker {identity} rejected the password");

    // All at once: each a real `serve` of its own.
    let runs = vec![
        (Path::Airflow, vec![("right", right.clone())]),
        (Path::Airflow, vec![("wrong", wrong.clone())]),
        (Path::Airflow, vec![("right", acl_right.clone())]),
        (Path::Airflow, vec![("wrong", acl_wrong.clone())]),
        (Path::Airflow, vec![("wrong", masked_wrong)]),
        (Path::Airflow, vec![("right", masked_right)]),
        (
            Path::OverseerEnv,
            vec![
                ("right", right.clone()),
                ("wrong", wrong.clone()),
                ("acl", acl_right.clone()),
                ("aclwrong", acl_wrong.clone()),
            ],
        ),
        (
            Path::File,
            vec![
                ("right", right),
                ("wrong", wrong),
                ("acl", acl_right),
                ("aclwrong", acl_wrong),
            ],
        ),
    ];
    let started: Vec<_> = runs
        .into_iter()
        .map(|(path, executors)| {
            let aliases: Vec<&str> = executors.iter().map(|(a, _)| *a).collect();
            let (dir, serving) = serve(path, &executors);
            (path, aliases, dir, serving)
        })
        .collect();
    let mut logs = Vec::new();
    for (path, aliases, _dir, serving) in started {
        let what = format!("{path:?} {aliases:?}");
        let expected: Vec<(&str, &str, &str)> = aliases
            .iter()
            .map(|alias| {
                if alias.contains("wrong") {
                    (*alias, "unhealthy", "rejected the password")
                } else {
                    (*alias, "healthy", "")
                }
            })
            .collect();
        let json = expect_verdicts(&serving, &what, &expected);
        if let Some(wrong) = instance(&json, "wrong:CeleryExecutor")
            && wrong["instance"] == identity.as_str()
        {
            assert_eq!(wrong["reason"], rejected.as_str(), "{what}");
        }
        assert_no_password(
            &what,
            &json.to_string(),
            &[REDIS_PASSWORD, REDIS_USER_PASSWORD],
        );
        let (code, lines) = serving.terminate();
        assert_eq!(code, Some(0), "{what}: {lines:?}");
        logs.push(lines.join("\n"));
    }
    assert_no_password(
        "the logs",
        &logs.join("\n"),
        &[REDIS_PASSWORD, REDIS_USER_PASSWORD],
    );
}

#[test]
fn a_rabbitmq_user_and_vhost_reach_the_broker_by_every_path() {
    let Some(rabbit) = RabbitUser::create() else {
        return;
    };
    let right = rabbit.url(RABBIT_PASSWORD);
    let wrong = rabbit.url("R@bb1t p#ss:/x");
    let runs = vec![
        (Path::Airflow, vec![("right", right.clone())]),
        (Path::Airflow, vec![("wrong", wrong.clone())]),
        (
            Path::OverseerEnv,
            vec![("right", right.clone()), ("wrong", wrong.clone())],
        ),
        (Path::File, vec![("right", right), ("wrong", wrong)]),
    ];
    let started: Vec<_> = runs
        .into_iter()
        .map(|(path, executors)| {
            let aliases: Vec<&str> = executors.iter().map(|(a, _)| *a).collect();
            let (dir, serving) = serve(path, &executors);
            (path, aliases, dir, serving)
        })
        .collect();
    let identity = format!("amqp://127.0.0.1:5672/{}", rabbit.vhost.name);
    for (path, aliases, _dir, serving) in started {
        let what = format!("{path:?} {aliases:?}");
        let expected: Vec<(&str, &str, &str)> = aliases
            .iter()
            .map(|alias| match *alias {
                "wrong" => ("wrong", "unhealthy", "refused the user name or password"),
                other => (other, "healthy", ""),
            })
            .collect();
        let json = expect_verdicts(&serving, &what, &expected);
        if let Some(wrong) = instance(&json, "wrong:CeleryExecutor") {
            assert_eq!(wrong["instance"], identity.as_str(), "{what}");
            assert!(
                wrong["reason"]
                    .as_str()
                    .unwrap()
                    .contains(&format!("broker {identity}")),
                "{what}: {wrong}"
            );
        }
        assert_no_password(&what, &json.to_string(), &[RABBIT_PASSWORD]);
        let (code, lines) = serving.terminate();
        assert_eq!(code, Some(0), "{what}: {lines:?}");
        assert_no_password(&what, &lines.join("\n"), &[RABBIT_PASSWORD]);
    }
}

/// A PostgreSQL server that asks for passwords, with a role of the test's own.
fn postgres_with_a_password() -> Option<ThrowawayPostgres> {
    let server = match ThrowawayPostgres::start_with_passwords() {
        Ok(server) => server,
        Err(e) => return overseer_testkit::unavailable("a throwaway PostgreSQL server", e),
    };
    server.create_role("overseer_pw", PG_PASSWORD).unwrap();
    Some(server)
}

#[test]
fn a_database_password_reaches_postgres_by_every_path() {
    let Some(pg) = postgres_with_a_password() else {
        return;
    };
    let port = pg.port;
    let userinfo = |password: &str| {
        format!(
            "postgresql+psycopg2://overseer_pw:{}@127.0.0.1:{port}/postgres",
            enc(password)
        )
    };
    let query = |password: &str| {
        format!(
            "postgresql://overseer_pw@127.0.0.1:{port}/postgres?password={}",
            enc(password)
        )
    };
    let native = |url: String| {
        url.replace("postgresql+psycopg2://", "postgres://")
            .replace("postgresql://", "postgres://")
    };
    let bad = "Pg s3cr@t:#/y";
    // Each form, through each variable, with the right password and a wrong one.
    let userinfo: &dyn Fn(&str) -> String = &userinfo;
    let query: &dyn Fn(&str) -> String = &query;
    let mut cases = Vec::new();
    for (form, url) in [("user information", userinfo), ("?password=", query)] {
        for (password, ok) in [(PG_PASSWORD, true), (bad, false)] {
            let sqlalchemy = url(password);
            cases.push((
                format!("SQLAlchemy, {form}"),
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
                sqlalchemy.clone(),
                ok,
            ));
            cases.push((
                format!("Overseer, {form}"),
                "OVERSEER_DATABASE__URL",
                native(sqlalchemy),
                ok,
            ));
        }
    }
    for (what, var, url, ok) in cases {
        let what = what.as_str();
        let dir = workdir();
        let done = run(overseer(dir.path()).env(var, &url).args(["migrate", "up"]));
        let output = format!("{}\n{}", done.stdout, done.stderr);
        assert_no_password(what, &output, &[PG_PASSWORD, bad]);
        if ok {
            assert_eq!(done.code, Some(0), "{what} {var}: {output}");
        } else {
            assert_eq!(done.code, Some(1), "{what} {var}: {output}");
            assert!(
                done.stderr.contains("password authentication failed"),
                "{what} {var}: {output}"
            );
            assert!(
                done.stderr.contains(&format!("127.0.0.1:{port}/postgres")),
                "{what} {var}: the error names the database: {output}"
            );
        }
    }
    // The same through overseer.toml, and `serve` on it.
    let dir = workdir();
    std::fs::write(
        dir.path().join("overseer.toml"),
        format!(
            "{QUICK}\n[database]\nurl = \"{}\"\n",
            native(userinfo(PG_PASSWORD))
        ),
    )
    .unwrap();
    let serving = Serving::start(&mut overseer(dir.path()));
    let json = health_until(&serving, "the database answers", |j| {
        j["metadatabase"]["status"] == "healthy"
    });
    assert_no_password("the report", &json.to_string(), &[PG_PASSWORD]);
    let (code, lines) = serving.terminate();
    assert_eq!(code, Some(0), "{lines:?}");
}

/// The first `report` event of the SSE stream.
fn first_stream_event(serving: &Serving) -> String {
    let mut stream = TcpStream::connect(&serving.address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET /api/v2/monitor/health/stream HTTP/1.1\r\nHost: {}\r\n\r\n",
        serving.address
    )
    .unwrap();
    let mut reader = BufReader::new(stream);
    let mut text = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        text.push_str(&line);
        if line.starts_with("data:") {
            break;
        }
    }
    text
}

/// Every job row, as JSON text, read with the role's password.
fn job_rows(url: &str) -> String {
    use sea_orm::{ConnectionTrait, Database, Statement};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let db = Database::connect(url).await.unwrap();
        let rows = db
            .query_all_raw(Statement::from_string(
                db.get_database_backend(),
                "SELECT row_to_json(job)::text AS row FROM job",
            ))
            .await
            .unwrap();
        let text: Vec<String> = rows
            .iter()
            .map(|r| r.try_get::<String>("", "row").unwrap())
            .collect();
        db.close().await.unwrap();
        assert!(!text.is_empty(), "no job rows");
        text.join("\n")
    })
}

/// Everything a running `overseer serve` shows at `OVERSEER_LOG=trace`, in both
/// log formats, and every error a bad password or a bad URL causes: none of it
/// holds any form of any password.
#[test]
fn no_password_is_shown_anywhere_at_any_log_level() {
    let Some(redis) = redis_with_passwords() else {
        return;
    };
    let Some(rabbit) = RabbitUser::create() else {
        return;
    };
    let Some(pg) = postgres_with_a_password() else {
        return;
    };
    let passwords = [
        REDIS_PASSWORD,
        REDIS_USER_PASSWORD,
        RABBIT_PASSWORD,
        PG_PASSWORD,
        SENTINEL_PASSWORD,
    ];
    let closed = free_port();
    let database = format!(
        "postgresql://overseer_pw@127.0.0.1:{}/postgres?password={}",
        pg.port,
        enc(PG_PASSWORD)
    );
    let executors = [
        ("redis", redis_url(&redis, "", REDIS_PASSWORD)),
        ("acl", redis_url(&redis, REDIS_USER, REDIS_USER_PASSWORD)),
        ("rabbit", rabbit.url(RABBIT_PASSWORD)),
        ("rabbitwrong", rabbit.url("R@bb1t p#ss:/x")),
        (
            "failover",
            format!(
                "redis://:{pw}@127.0.0.1:{closed}/0;redis://:{pw}@127.0.0.1:{}/0",
                redis.port,
                pw = enc(REDIS_PASSWORD)
            ),
        ),
        (
            "sentinel",
            format!(
                "sentinel://:{pw}@127.0.0.1:{closed}/0;sentinel://:{pw}@127.0.0.1:{closed}/0?master_name=mymaster",
                pw = enc(SENTINEL_PASSWORD)
            ),
        ),
    ];
    let list: Vec<String> = executors
        .iter()
        .map(|(alias, url)| {
            format!("{{name = \"{alias}:CeleryExecutor\", broker_url = \"{url}\"}}")
        })
        .collect();
    let configure = |command: &mut Command| {
        command
            .env("OVERSEER_LOG", "trace")
            .env("RUST_LOG", "trace")
            .env("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", &database)
            .env("OVERSEER_EXECUTORS", format!("[{}]", list.join(", ")));
    };

    let mut shown = String::new();
    let dir = workdir();
    std::fs::write(dir.path().join("overseer.toml"), QUICK).unwrap();
    let mut config = overseer(dir.path());
    configure(&mut config);
    let printed = run(config.arg("config"));
    assert_eq!(printed.code, Some(0), "{}", printed.stderr);
    assert!(
        printed.stdout.contains("overseer_pw:***@") || printed.stdout.contains("password=***"),
        "{}",
        printed.stdout
    );
    shown.push_str(&printed.stdout);
    shown.push_str(&printed.stderr);

    for format in ["plain", "json"] {
        let dir = workdir();
        std::fs::write(dir.path().join("overseer.toml"), QUICK).unwrap();
        let mut command = overseer(dir.path());
        configure(&mut command);
        command.args(["--log-format", format]);
        let serving = Serving::start(&mut command);
        // Every verdict made, and the right passwords' healthy (a 400 ms
        // poll's first connection may time out once on a loaded machine).
        let json = health_until(&serving, "every verdict made", |json| {
            executors.iter().all(|(alias, _)| {
                instance(json, &format!("{alias}:CeleryExecutor"))
                    .is_some_and(|i| i["health"] != "unknown")
            }) && ["redis", "acl", "rabbit"].iter().all(|alias| {
                instance(json, &format!("{alias}:CeleryExecutor"))
                    .is_some_and(|i| i["health"] == "healthy")
            })
        });
        assert_eq!(
            instance(&json, "redis:CeleryExecutor").unwrap()["health"],
            "healthy"
        );
        assert_eq!(
            instance(&json, "acl:CeleryExecutor").unwrap()["health"],
            "healthy"
        );
        assert_eq!(
            instance(&json, "rabbit:CeleryExecutor").unwrap()["health"],
            "healthy"
        );
        assert_eq!(
            instance(&json, "rabbitwrong:CeleryExecutor").unwrap()["health"],
            "unhealthy"
        );
        shown.push_str(&json.to_string());
        for path in [
            "/api/v2/monitor/health?strict=true",
            "/metrics",
            "/",
            "/openapi.json",
        ] {
            let (_, body) = get(&serving.url(path));
            shown.push_str(&body);
        }
        shown.push_str(&first_stream_event(&serving));
        let probe = run(overseer(dir.path()).args(["health", "--json", "--url", &serving.url("")]));
        shown.push_str(&probe.stdout);
        shown.push_str(&probe.stderr);
        let (code, lines) = serving.terminate();
        assert_eq!(code, Some(0));
        assert!(
            lines
                .iter()
                .any(|l| l.contains("TRACE") || l.contains("\"TRACE\"")),
            "the log is at trace level"
        );
        shown.push_str(&lines.join("\n"));
    }
    let native = database.replace("postgresql://", "postgres://");
    shown.push_str(&job_rows(&native));

    // Errors: a wrong database password, malformed URLs holding a password.
    let dir = workdir();
    for (var, value) in [
        (
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
            database.replace(&enc(PG_PASSWORD), &enc("x")),
        ),
        (
            "OVERSEER_DATABASE__URL",
            format!(
                "postgres://overseer_pw:{}@127.0.0.1:notaport/postgres",
                enc(PG_PASSWORD)
            ),
        ),
        (
            "OVERSEER_DATABASE__URL",
            format!(
                "postgres//overseer_pw:{}@127.0.0.1/postgres",
                enc(PG_PASSWORD)
            ),
        ),
        (
            "AIRFLOW__CELERY__BROKER_URL",
            format!("redis://:{}@127.0.0.1:99999/0", enc(REDIS_PASSWORD)),
        ),
        (
            "AIRFLOW__CELERY__BROKER_URL",
            format!("redis://:{}@127.0.0.1:{closed}/x", REDIS_PASSWORD),
        ),
    ] {
        let mut command = overseer(dir.path());
        command
            .env("OVERSEER_LOG", "trace")
            .env("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
            .env(var, &value)
            .args(["migrate", "status"]);
        let done = run(&mut command);
        assert_ne!(done.code, Some(0), "{var}={value} should fail");
        assert!(done.stderr.contains("error"), "{}", done.stderr);
        shown.push_str(&done.stdout);
        shown.push_str(&done.stderr);
    }

    assert_no_password("what overseer showed", &shown, &passwords);
    eprintln!(
        "scanned {} bytes of output for {} passwords in 2 forms each",
        shown.len(),
        passwords.len()
    );
}
