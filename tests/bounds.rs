//! Extreme values, as a hostile or careless operator writes them: every duration
//! key and every threshold variable of Airflow's that Overseer reads, at zero,
//! just past its floor and ceiling, and at values no duration can hold. Each is
//! one line naming the key and exit code 2, never a panic; and a service run at
//! the floors still stops on SIGTERM.

use crate::support;

use std::time::{Duration, Instant};

use support::{Serving, overseer, run, workdir};

/// A duration key, the TOML that sets it (`{}` is the value, written as TOML),
/// its floor minus one and its ceiling plus one (`None`: no floor above zero).
struct Key {
    key: &'static str,
    toml: &'static str,
    below_floor: Option<&'static str>,
    above_ceiling: &'static str,
}

const KEYS: [Key; 12] = [
    Key {
        key: "supervisor.poll_interval",
        toml: "[supervisor]\npoll_interval = {}\n",
        below_floor: Some("\"99ms\""),
        above_ceiling: "\"1h 1s\"",
    },
    Key {
        key: "supervisor.poll_timeout",
        toml: "[supervisor]\npoll_timeout = {}\n",
        below_floor: Some("\"9ms\""),
        above_ceiling: "\"1h 1s\"",
    },
    Key {
        key: "supervisor.heartbeat_interval",
        toml: "[supervisor]\nheartbeat_interval = {}\n",
        below_floor: Some("\"99ms\""),
        above_ceiling: "\"1h 1s\"",
    },
    Key {
        key: "supervisor.refresh_interval",
        toml: "[supervisor]\nrefresh_interval = {}\n",
        below_floor: Some("\"99ms\""),
        above_ceiling: "\"1h 1s\"",
    },
    Key {
        key: "thresholds.scheduler",
        toml: "[thresholds]\nscheduler = {}\n",
        below_floor: Some("\"999ms\""),
        above_ceiling: "\"7days 1s\"",
    },
    Key {
        key: "thresholds.triggerer",
        toml: "[thresholds]\ntriggerer = {}\n",
        below_floor: Some("\"999ms\""),
        above_ceiling: "\"7days 1s\"",
    },
    Key {
        key: "thresholds.dag_processor",
        toml: "[thresholds]\ndag_processor = {}\n",
        below_floor: Some("\"999ms\""),
        above_ceiling: "\"7days 1s\"",
    },
    Key {
        key: "thresholds.executor",
        toml: "[supervisor]\nheartbeat_interval = \"100ms\"\n\n[thresholds]\nexecutor = {}\n",
        below_floor: Some("\"999ms\""),
        above_ceiling: "\"7days 1s\"",
    },
    Key {
        key: "history.retention",
        toml: "[history]\nretention = {}\n",
        below_floor: Some("\"59m 59s\""),
        above_ceiling: "\"10years 1s\"",
    },
    Key {
        key: "executors[0].max_queued_age",
        toml: "[[executors]]\nname = \"LocalExecutor\"\nmax_queued_age = {}\n",
        below_floor: Some("\"999ms\""),
        above_ceiling: "\"7days 1s\"",
    },
    Key {
        key: "alerts[0].min_duration",
        toml: "[[alerts]]\nurl = \"http://127.0.0.1:9/hook\"\nmin_duration = {}\n",
        below_floor: None,
        above_ceiling: "\"7days 1s\"",
    },
    Key {
        key: "alerts[0].retry_for",
        toml: "[[alerts]]\nurl = \"http://127.0.0.1:9/hook\"\nretry_for = {}\n",
        below_floor: None,
        above_ceiling: "\"7days 1s\"",
    },
];

/// Values no duration key takes, as TOML: unitless, not numbers of a duration,
/// negative, or longer than any ceiling (`1000000years` overflowed a timestamp,
/// `18446744073709551615s` a multiplication).
const EXTREMES: [&str; 9] = [
    "\"0\"",
    "0",
    "1e20",
    "nan",
    "inf",
    "-5",
    "\"1e20\"",
    "\"18446744073709551615s\"",
    "\"1000000years\"",
];

/// One run of `subcommand` in a fresh folder: exit code 2, a single line naming
/// `key` on stderr, nothing on stdout, no panic and nothing written.
fn refused(
    subcommand: &[&str],
    toml: Option<&str>,
    env: &[(&str, &str)],
    key: &str,
    origin: &str,
    what: &str,
) {
    let dir = workdir();
    if let Some(toml) = toml {
        std::fs::write(dir.path().join("overseer.toml"), toml).unwrap();
    }
    let out = run(overseer(dir.path())
        .args(subcommand)
        .envs(env.iter().copied()));
    assert_eq!(out.code, Some(2), "{what}: {}", out.stderr);
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{what}: one line, got {lines:?}");
    let start = format!("error: invalid configuration: {key} (from {origin}): ");
    assert!(lines[0].starts_with(&start), "{what}: {:?}", lines[0]);
    assert!(!out.stderr.contains("panicked"), "{what}: {}", out.stderr);
    assert!(out.stdout.is_empty(), "{what}: nothing on stdout");
    assert!(
        !dir.path().join("overseer.db").exists(),
        "{what}: nothing written"
    );
}

#[test]
fn every_duration_key_past_its_bounds_is_one_line_and_exit_code_2() {
    for key in &KEYS {
        let values = EXTREMES
            .iter()
            .copied()
            .chain(key.below_floor)
            // The interval that spun a core, wherever there is a floor to refuse it.
            .chain(key.below_floor.map(|_| "\"1ns\""))
            .chain([key.above_ceiling]);
        for value in values {
            let toml = key.toml.replace("{}", value);
            let what = format!("{} = {value}", key.key);
            refused(
                &["config"],
                Some(&toml),
                &[],
                key.key,
                "overseer.toml",
                &what,
            );
        }
        // Zero is refused where it is no word of its own.
        if key.below_floor.is_some()
            && !matches!(key.key, "history.retention")
            && !key.key.ends_with("max_queued_age")
        {
            let toml = key.toml.replace("{}", "\"0s\"");
            refused(
                &["config"],
                Some(&toml),
                &[],
                key.key,
                "overseer.toml",
                key.key,
            );
        }
    }
}

#[test]
fn extreme_values_stop_serve_and_migrate_before_anything_is_written() {
    for subcommand in [&["serve"][..], &["migrate", "up"]] {
        for (key, toml) in [
            (
                "supervisor.heartbeat_interval",
                "[supervisor]\nheartbeat_interval = \"18446744073709551615s\"\n",
            ),
            (
                "supervisor.refresh_interval",
                "[supervisor]\nrefresh_interval = \"1ns\"\n",
            ),
            (
                "thresholds.scheduler",
                "[thresholds]\nscheduler = \"200000y\"\n",
            ),
            (
                "thresholds.executor",
                "[thresholds]\nexecutor = \"1000000years\"\n",
            ),
        ] {
            refused(subcommand, Some(toml), &[], key, "overseer.toml", toml);
        }
    }
}

#[test]
fn overseer_variables_past_their_bounds_are_refused_too() {
    for (var, key) in [
        (
            "OVERSEER_SUPERVISOR__POLL_INTERVAL",
            "supervisor.poll_interval",
        ),
        (
            "OVERSEER_SUPERVISOR__HEARTBEAT_INTERVAL",
            "supervisor.heartbeat_interval",
        ),
        ("OVERSEER_THRESHOLDS__SCHEDULER", "thresholds.scheduler"),
        ("OVERSEER_HISTORY__RETENTION", "history.retention"),
    ] {
        for value in [
            "0",
            "1e20",
            "nan",
            "inf",
            "-5",
            "18446744073709551615s",
            "1ns",
        ] {
            let origin = format!("environment variable {var}");
            refused(
                &["config"],
                None,
                &[(var, value)],
                key,
                &origin,
                &format!("{var}={value}"),
            );
        }
    }
}

#[test]
fn airflows_threshold_variables_past_their_bounds_are_refused() {
    for (var, key) in [
        (
            "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD",
            "thresholds.scheduler",
        ),
        (
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD",
            "thresholds.triggerer",
        ),
        (
            "AIRFLOW__DAG_PROCESSOR__HEALTH_CHECK_THRESHOLD",
            "thresholds.dag_processor",
        ),
    ] {
        for value in [
            "0",
            "0.999",
            "604801",
            "1e15",
            "1e20",
            "1e308",
            "nan",
            "inf",
            "-5",
            "18446744073709551615s",
        ] {
            let origin = format!("environment variable {var}");
            let what = format!("{var}={value}");
            refused(&["config"], None, &[(var, value)], key, &origin, &what);
        }
    }
    // At the bounds, Airflow's values are taken as they are.
    let dir = workdir();
    let out = run(overseer(dir.path()).arg("config").envs([
        ("AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD", "1"),
        (
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD",
            "604800",
        ),
    ]));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("scheduler = \"1s\""), "{}", out.stdout);
    assert!(
        out.stdout.contains("triggerer = \"7days\""),
        "{}",
        out.stdout
    );
}

/// At every interval's floor, with executors that answer and one that hangs,
/// the service still heeds SIGTERM at once (at `1ns` it spun and ignored it).
#[test]
fn serve_at_the_floors_stops_on_sigterm() {
    let dir = workdir();
    std::fs::write(
        dir.path().join("overseer.toml"),
        "[supervisor]\npoll_interval = \"100ms\"\npoll_timeout = \"10ms\"\nheartbeat_interval = \"100ms\"\nrefresh_interval = \"100ms\"\n\n\
         [thresholds]\nscheduler = \"1s\"\ntriggerer = \"1s\"\ndag_processor = \"1s\"\n\n\
         [[executors]]\nname = \"LocalExecutor\"\n\n\
         [[executors]]\nname = \"KubernetesExecutor\"\ncheck_command = [\"sleep\", \"60\"]\n",
    )
    .unwrap();
    let mut serving = Serving::start(&mut overseer(dir.path()));
    // Long enough for hundreds of ticks, flushes and refreshes, and timed-out polls.
    std::thread::sleep(Duration::from_secs(2));
    let pid = serving.child.id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    // Not a speed claim: a stop that takes longer than this did not heed the signal.
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = serving.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "serve at the floors ignored SIGTERM: {:?}",
            serving.seen
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0), "a clean stop: {:?}", serving.seen);
}
