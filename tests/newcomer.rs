//! A newcomer's path, followed literally from the README on a fresh clone: the
//! run command starts the service on the embedded SQLite default, the health
//! endpoint answers, and Ctrl-C stops it cleanly. The test command is the one
//! CI runs. So the README cannot drift from the truth.
//!
//! The run command is run word for word, on a free port given through the
//! environment (`OVERSEER_API__BIND`), never on the README's 8781: a newcomer
//! runs the tests while their own `serve` holds 8781, and CI does the same
//! (`.ci/run` runs the test command beside the README's `serve`).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A first build of the clone (in a target folder of its own: the first time
/// on a machine, its dependencies too) and a start-up.
const START_DEADLINE: Duration = Duration::from_secs(1800);

/// The commands of the README's "Two commands" block, comments removed.
fn readme_commands() -> Vec<String> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let section = readme
        .split("## Two commands")
        .nth(1)
        .expect("a Two commands section");
    let block = section
        .split("```sh")
        .nth(1)
        .unwrap()
        .split("```")
        .next()
        .unwrap();
    block
        .lines()
        .map(|l| l.split('#').next().unwrap().trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn the_readme_commands_work_on_a_fresh_clone() {
    let commands = readme_commands();
    assert_eq!(commands.len(), 2, "two commands: {commands:?}");
    let (run, test) = (&commands[0], &commands[1]);

    // The test command is what CI runs.
    let ci = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/run")).unwrap();
    assert!(
        ci.lines().any(|l| l.trim() == test),
        ".ci/run runs {test:?}"
    );

    // A fresh clone of this checkout's HEAD.
    let clone = tempfile::tempdir().unwrap();
    let cloned = Command::new("git")
        .args(["clone", "--quiet", env!("CARGO_MANIFEST_DIR")])
        .arg(clone.path().join("overseer"))
        .status()
        .unwrap();
    assert!(cloned.success());
    let root = clone.path().join("overseer");

    // The run command, word for word (it needs no shell), in a process group of
    // its own, as a terminal runs it.
    // A target folder of the clone's own, kept between runs: cargo names a
    // workspace crate's artifacts by its path inside the workspace, so the
    // clone built into the shared folder overwrote this checkout's with the
    // clone's (older) sources, newer on disk, and the next `cargo build` here
    // took them as fresh: a stale build, silently.
    let target = std::env::var("CARGO_TARGET_DIR")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/target").to_owned())
        + "/newcomer";
    let bind = format!("127.0.0.1:{}", overseer_testkit::throwaway::free_port());
    let mut child = Command::new("setsid")
        .args(run.split_whitespace())
        .current_dir(&root)
        .env("CARGO_TARGET_DIR", target)
        .env("OVERSEER_API__BIND", &bind)
        .env_remove("OVERSEER_CONFIG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();

    let deadline = Instant::now() + START_DEADLINE;
    let body = loop {
        if let Ok(response) = ureq::get(&format!("http://{bind}/api/v2/monitor/health"))
            .timeout(Duration::from_secs(5))
            .call()
        {
            break response.into_string().unwrap();
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "`{run}` ended before it served"
        );
        assert!(Instant::now() < deadline, "`{run}` did not serve on {bind}");
        std::thread::sleep(Duration::from_millis(500));
    };
    let report: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(report["metadatabase"]["status"], "healthy");
    assert!(
        root.join("overseer.db").exists(),
        "the embedded SQLite default, in the working folder"
    );

    // Ctrl-C: SIGINT to the whole process group, as a terminal sends it.
    let group = format!("-{}", child.id());
    assert!(
        Command::new("kill")
            .args(["-INT", "--", &group])
            .status()
            .unwrap()
            .success()
    );
    let exit = child.wait().unwrap();
    assert!(exit.success(), "Ctrl-C ends it cleanly: {exit:?}");
}

/// The rest of a newcomer's first hour, as files say it: what to install, how
/// to put `overseer` on the PATH, an executor without a file, a design to read,
/// local files git ignores, and one readable line per `just` recipe.
#[test]
fn the_first_hour_has_no_surprise() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |file: &str| std::fs::read_to_string(root.join(file)).unwrap();
    let readme = read("README.md");
    for needed in [
        "cargo install cargo-nextest --locked",
        "cargo install just",
        "cargo install --path .",
        "OVERSEER_EXECUTORS='[{name = \"CeleryExecutor\"",
        "[docs/design.md](docs/design.md)",
        "`degraded` (some fine, some not)",
        "`unknown` never counts as dead",
        "The `executor` entry is Overseer's endpoint's alone",
    ] {
        assert!(readme.contains(needed), "the README should say {needed:?}");
    }
    assert!(root.join("docs/design.md").is_file());

    let ignored = read(".gitignore");
    for local in ["overseer.toml", "*.db"] {
        assert!(
            ignored.lines().any(|l| l.trim() == local),
            ".gitignore should list {local}"
        );
    }

    // `just --list` shows the comment line right above each recipe: one per recipe.
    let justfile = read("justfile");
    let lines: Vec<&str> = justfile.lines().collect();
    let recipes: Vec<(usize, &str)> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| !l.starts_with([' ', '\t', '#']) && l.contains(':') && !l.is_empty())
        .map(|(i, l)| (i, *l))
        .collect();
    assert!(recipes.len() >= 5, "{recipes:?}");
    for (i, recipe) in recipes {
        let doc = lines[..i].last().copied().unwrap_or_default();
        assert!(
            doc.starts_with("# ") && doc.len() <= 110,
            "recipe {recipe:?} needs one short comment line right above it, not {doc:?}"
        );
    }
}
