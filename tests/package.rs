//! The Debian package, as an operator installs it on an Airflow host: built
//! with `cargo deb` from the binary under test, installed by the README's own
//! commands (its "Install on an Airflow host" section, run word for word),
//! its files, conffile, user and unit checked (`systemd-analyze verify`), the
//! unit's own `ExecStart` run as the unit would run it, reading an Airflow
//! environment file (a fresh Postgres database, a throwaway Redis broker), the
//! executor seen healthy on the health endpoint; then `dpkg -r` keeps the data
//! and configuration, and `dpkg -P` removes everything.
//!
//! Needs root, `dpkg`, `cargo deb` (`cargo install cargo-deb`), `systemd-analyze`,
//! `setpriv`, `unshare` and overlayfs, Postgres and `redis-server`; without one,
//! it says SKIPPED (and fails under `CI`).
//!
//! The machine is left as it was found: the test runs again, alone, in a mount
//! namespace of its own (`unshare --mount`) where `/etc`, `/usr` and `/var` are
//! overlays whose writes land in the test's folder. dpkg's database, the
//! package's files, its user and the enabled unit exist only there, and vanish
//! with the namespace; the services on loopback are the machine's own.
//!
//! No systemd runs as this machine's init (`systemctl start` says "System has
//! not been booted with systemd"): `systemctl enable --now` enables the unit,
//! which is checked, and the test then starts the unit's `ExecStart` itself, as
//! systemd would: as its `User=`, in its `WorkingDirectory=`, with its
//! `Environment=` and `EnvironmentFile=`s. Those files are the test's own (in
//! place of `/etc/sysconfig/airflow` and `/etc/default/overseer`), so the
//! machine's `/etc` is left alone.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use support::{Serving, get, workdir};

/// The package's name, and the file `cargo deb` writes.
const PACKAGE: &str = "overseer";
/// Where the unit is installed.
const UNIT: &str = "/lib/systemd/system/overseer.service";
/// The README, whose install section the test follows.
const README: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/README.md");

/// Runs `program` with `args`; its exit status and output, stdout then stderr.
fn output(program: &str, args: &[&str]) -> (bool, String) {
    match Command::new(program).args(args).output() {
        Ok(out) => (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        ),
        Err(e) => (false, format!("{program}: {e}")),
    }
}

/// Like [`output`], and it must succeed.
fn must(program: &str, args: &[&str]) -> String {
    let (ok, text) = output(program, args);
    assert!(ok, "{program} {args:?}: {text}");
    text
}

/// The test's own name, which its copy in a root of its own runs.
const TEST: &str =
    "the_package_installs_from_the_readme_runs_on_airflows_environment_and_removes_cleanly";
/// A test of this file as the test binary names it (`package::TEST`: the
/// module path less the crate).
fn harness_name(test: &str) -> String {
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    format!("{module}::{test}")
}
/// Set, to the folder holding the overlays' writes, in that copy.
const OWN_ROOT: &str = "OVERSEER_PACKAGE_TEST_ROOT";
/// What dpkg, the package's scripts and `systemctl enable` write to.
const OVERLAID: [&str; 3] = ["/etc", "/usr", "/var"];

/// What the test needs beyond the services: the tools, and root.
fn tools_missing() -> Option<String> {
    let root = output("id", &["-u"]).1.trim() == "0";
    if !root {
        return Some("root (dpkg and a mount namespace of the test's own)".into());
    }
    for (program, args) in [
        ("dpkg", &["--version"][..]),
        ("cargo", &["deb", "--version"]),
        ("systemd-analyze", &["--version"]),
        ("setpriv", &["--version"]),
        ("unshare", &["--version"]),
    ] {
        if !output(program, args).0 {
            return Some(format!("{program} {}", args.join(" ")));
        }
    }
    let overlays = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    if !overlays.lines().any(|l| l.trim_end().ends_with("overlay")) {
        return Some("overlayfs (modprobe overlay)".into());
    }
    None
}

/// Runs this test again in a mount namespace of its own, its output shown with
/// this one's; the package must then be unknown to the machine's dpkg.
fn in_a_root_of_its_own() {
    let installed_before = output("dpkg-query", &["-W", PACKAGE]).0;
    let user_before = output("getent", &["passwd", "overseer"]).0;
    let scratch = workdir();
    let status = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--"])
        .arg(std::env::current_exe().unwrap())
        .args([
            &harness_name(TEST),
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(OWN_ROOT, scratch.path())
        .status()
        .unwrap();
    assert!(
        status.success(),
        "the package test in its own root failed ({status}): its output is above"
    );
    if !installed_before {
        assert!(
            !output("dpkg-query", &["-W", PACKAGE]).0,
            "the machine's dpkg knows the package"
        );
        assert!(!Path::new("/usr/bin/overseer").exists());
        assert!(!Path::new("/etc/overseer").exists());
    }
    if !user_before {
        assert!(
            !output("getent", &["passwd", "overseer"]).0,
            "the package's user reached the machine's /etc/passwd"
        );
    }
}

/// In the namespace: `/etc`, `/usr` and `/var` overlaid, their writes in `scratch`.
fn overlay_the_system(scratch: &Path) {
    for dir in OVERLAID {
        let own = scratch.join(dir.trim_start_matches('/'));
        let (upper, work) = (own.join("upper"), own.join("work"));
        std::fs::create_dir_all(&upper).unwrap();
        std::fs::create_dir_all(&work).unwrap();
        let options = format!(
            "lowerdir={dir},upperdir={},workdir={}",
            upper.display(),
            work.display()
        );
        must("mount", &["-t", "overlay", "overlay", "-o", &options, dir]);
    }
}

/// The commands of the README's "Install on an Airflow host": its first `sh` block.
fn readme_install_commands() -> Vec<String> {
    let readme = std::fs::read_to_string(README).unwrap();
    let section = readme
        .split("\n## Install on an Airflow host\n")
        .nth(1)
        .expect("the README has an install section");
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the install section has an sh block");
    block
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A unit's `Key=value` lines, in order (a key may repeat).
fn unit_settings(unit: &str) -> Vec<(String, String)> {
    unit.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.starts_with('['))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// An environment file as systemd reads it: `KEY=value` lines, `#` comments.
fn environment_file(path: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.trim_matches('"').to_owned()))
        .collect()
}

/// Purges the package (and disables its unit) when the test ends, however it
/// ends: within the namespace, for the steps after a failure.
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = output("systemctl", &["disable", "overseer.service"]);
        let _ = output("dpkg", &["--purge", PACKAGE]);
    }
}

/// Builds the package from the binary under test, into `dir`: the file the
/// README names.
fn build_package(dir: &Path, file: &str) -> PathBuf {
    // `--no-build --profile dev`: the debug binary cargo built for this test run,
    // packaged as a release build would be (CI builds the release one too).
    let out = must(
        "cargo",
        &[
            "deb",
            "-p",
            PACKAGE,
            "--no-build",
            "--profile",
            "dev",
            "--fast",
            "--no-strip",
            "--output",
            &dir.join(file).display().to_string(),
        ],
    );
    let deb = dir.join(file);
    assert!(deb.is_file(), "cargo deb wrote {}: {out}", deb.display());
    deb
}

#[tokio::test]
async fn the_package_installs_from_the_readme_runs_on_airflows_environment_and_removes_cleanly() {
    match std::env::var_os(OWN_ROOT) {
        Some(scratch) => overlay_the_system(Path::new(&scratch)),
        None => {
            if let Some(missing) = tools_missing() {
                overseer_testkit::unavailable::<()>("the packaging tools", missing);
            } else {
                in_a_root_of_its_own();
            }
            return;
        }
    }
    let Some(db) = overseer_testkit::postgres().await else {
        return;
    };
    let Some(broker) = overseer_testkit::throwaway::ThrowawayRedis::start(&[]) else {
        return;
    };
    let dir = workdir();
    let commands = readme_install_commands();
    assert_eq!(commands.len(), 2, "install, then enable: {commands:?}");
    let file = commands[0]
        .split_whitespace()
        .find_map(|word| word.strip_prefix("./"))
        .expect("the install command names the package file")
        .to_owned();
    let arch = must("dpkg", &["--print-architecture"]);
    assert_eq!(
        file,
        format!(
            "{PACKAGE}_{}-1_{}.deb",
            env!("CARGO_PKG_VERSION"),
            arch.trim()
        ),
        "the README names the file cargo deb writes"
    );
    let deb = build_package(dir.path(), &file);

    // What the package holds, before it is installed.
    let contents = must("dpkg-deb", &["--contents", &deb.display().to_string()]);
    for path in [
        "./usr/bin/overseer",
        "./lib/systemd/system/overseer.service",
        "./etc/overseer/overseer.toml",
        "./usr/share/doc/overseer/README.md",
        "./usr/share/doc/overseer/copyright",
    ] {
        assert!(contents.contains(path), "{path} in the package: {contents}");
    }
    let conffiles = must(
        "dpkg-deb",
        &["--info", &deb.display().to_string(), "conffiles"],
    );
    assert_eq!(conffiles.trim(), "/etc/overseer/overseer.toml");

    // The README's commands, word for word, in the folder holding the package.
    let installed = Installed;
    let (ok, text) = {
        let out = Command::new("sh")
            .args(["-c", &commands[0]])
            .current_dir(dir.path())
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert!(ok, "{}: {text}", commands[0]);
    let status = must("dpkg-query", &["-W", "-f=${Status} ${Version}", PACKAGE]);
    assert_eq!(status, "install ok installed 0.1.0-1");
    let (started, text) = output("sh", &["-c", &commands[1]]);
    let booted_with_systemd = Path::new("/run/systemd/system").is_dir();
    assert!(started || !booted_with_systemd, "{}: {text}", commands[1]);
    assert!(
        Path::new("/etc/systemd/system/multi-user.target.wants/overseer.service").exists(),
        "the unit is enabled: {text}"
    );

    // What the installed package made.
    must("getent", &["passwd", "overseer"]);
    let owner = must("stat", &["-c", "%U:%G %a", "/var/lib/overseer"]);
    assert_eq!(owner.trim(), "overseer:overseer 750");
    let conf = must("stat", &["-c", "%U:%G %a", "/etc/overseer/overseer.toml"]);
    assert_eq!(
        conf.trim(),
        "root:overseer 640",
        "the configuration may hold a password"
    );
    must("systemd-analyze", &["verify", UNIT]);

    // The unit's own ExecStart, as systemd runs it, on an Airflow environment.
    let unit = std::fs::read_to_string(UNIT).unwrap();
    let settings = unit_settings(&unit);
    let setting = |key: &str| -> Vec<&str> {
        settings
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    };
    assert_eq!(setting("User"), ["overseer"]);
    assert_eq!(setting("Restart"), ["always"]);
    assert_eq!(setting("NoNewPrivileges"), ["yes"]);
    assert_eq!(
        setting("EnvironmentFile"),
        ["-/etc/sysconfig/airflow", "-/etc/default/overseer"],
        "Airflow's environment file, then Overseer's"
    );
    let sqlalchemy = db.url.replacen("postgres://", "postgresql+psycopg2://", 1);
    let port = overseer_testkit::throwaway::free_port();
    let airflow_env = dir.path().join("sysconfig-airflow");
    std::fs::write(
        &airflow_env,
        format!(
            "# as Airflow's own units read it\n\
             AIRFLOW_HOME=/opt/airflow\n\
             AIRFLOW__DATABASE__SQL_ALCHEMY_CONN={sqlalchemy}\n\
             AIRFLOW__CORE__EXECUTOR=CeleryExecutor\n\
             AIRFLOW__CELERY__BROKER_URL=redis://127.0.0.1:{}/0\n",
            broker.port
        ),
    )
    .unwrap();
    let default_env = dir.path().join("default-overseer");
    std::fs::write(
        &default_env,
        format!(
            "OVERSEER_API__BIND=127.0.0.1:{port}\n\
             OVERSEER_SUPERVISOR__POLL_INTERVAL=1s\n\
             OVERSEER_SUPERVISOR__POLL_TIMEOUT=500ms\n"
        ),
    )
    .unwrap();
    let mut command = Command::new("setpriv");
    command
        .args([
            "--reuid=overseer",
            "--regid=overseer",
            "--init-groups",
            "--",
        ])
        .args(setting("ExecStart")[0].split_whitespace())
        .current_dir(setting("WorkingDirectory")[0])
        .env_clear()
        .env("PATH", "/usr/bin:/bin");
    for value in setting("Environment") {
        let (key, value) = value.split_once('=').unwrap();
        command.env(key, value);
    }
    for (file, ours) in setting("EnvironmentFile")
        .into_iter()
        .zip([&airflow_env, &default_env])
    {
        assert!(file.starts_with('-'), "{file}: optional");
        command.envs(environment_file(ours));
    }
    let mut serving = Serving::attach(&mut command);
    let health_url = format!("http://127.0.0.1:{port}/api/v2/monitor/health");
    let deadline = Instant::now() + support::START_DEADLINE;
    let json = loop {
        let (status, body) = get(&health_url);
        assert_eq!(status, 200, "{body}");
        let json: serde_json::Value = serde_json::from_str(&body).unwrap();
        if json["executor"]["status"] == "healthy" {
            break json;
        }
        assert!(Instant::now() < deadline, "never healthy: {json}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let instance = &json["executor"]["instances"][0];
    assert_eq!(instance["executor"], "CeleryExecutor", "{json}");
    assert_eq!(
        instance["instance"],
        format!("redis://127.0.0.1:{}/0", broker.port),
        "the broker from Airflow's environment file: {json}"
    );
    let stop = setting("TimeoutStopSec")[0]
        .trim_end_matches('s')
        .parse()
        .unwrap();
    let pid = serving.child.id();
    support::procs::signal(pid, "TERM");
    let exit = support::procs::wait_deadline(&mut serving.child, Duration::from_secs(stop))
        .expect("stops within TimeoutStopSec after SIGTERM");
    assert!(exit.success(), "a clean stop: {:?}", serving.seen);
    // Its rows went to Airflow's database, not to the state directory.
    assert!(!Path::new("/var/lib/overseer/overseer.db").exists());

    // Remove: the binary and unit go, the data and configuration stay.
    must("systemctl", &["disable", "overseer.service"]);
    must("dpkg", &["--remove", PACKAGE]);
    assert!(!Path::new("/usr/bin/overseer").exists());
    assert!(!Path::new(UNIT).exists());
    assert!(Path::new("/etc/overseer/overseer.toml").exists());
    assert!(Path::new("/var/lib/overseer").is_dir());
    // Purge: nothing left.
    must("dpkg", &["--purge", PACKAGE]);
    assert!(!Path::new("/etc/overseer").exists());
    assert!(!Path::new("/var/lib/overseer").exists());
    let (known, _) = output("dpkg-query", &["-W", PACKAGE]);
    assert!(!known, "purged");
    drop(installed);
}
