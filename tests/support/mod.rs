//! Running the real `overseer` binary in a folder of its own, with a clean environment.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// The binary under test, built by cargo for this test run.
pub const OVERSEER: &str = env!("CARGO_BIN_EXE_overseer");

/// `overseer` run in `dir` with none of the caller's `OVERSEER_*` or `AIRFLOW__*`
/// variables, so only what the test sets is configuration.
pub fn overseer(dir: &Path) -> Command {
    let mut command = Command::new(OVERSEER);
    command.current_dir(dir).env_clear();
    for var in ["PATH", "HOME", "TMPDIR", "LANG"] {
        if let Ok(value) = std::env::var(var) {
            command.env(var, value);
        }
    }
    command.env("RUST_LOG", "info");
    command
}

/// What a finished run printed, and how it ended.
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

pub fn run(command: &mut Command) -> Run {
    let Output {
        status,
        stdout,
        stderr,
    } = command.output().expect("overseer runs");
    Run {
        code: status.code(),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

/// A folder of its own for one run.
pub fn workdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temporary folder")
}
