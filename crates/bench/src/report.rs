//! BENCHMARKS.md: the intro (machine, date, one run, how to rerun), one section
//! per benchmark with its table, chart and a line for operators, and how each
//! figure was measured.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::plan::Plan;
use crate::system::Machine;

/// Where the report and its charts go.
pub struct Out {
    pub root: PathBuf,
}

impl Out {
    /// The charts' folder, relative to the report.
    pub const CHARTS: &'static str = "docs/bench";

    pub fn new(root: PathBuf) -> Result<Self> {
        std::fs::create_dir_all(root.join(Self::CHARTS))
            .with_context(|| format!("while creating {}", root.join(Self::CHARTS).display()))?;
        Ok(Self { root })
    }

    pub fn chart(&self, file: &str) -> PathBuf {
        self.root.join(Self::CHARTS).join(file)
    }

    /// The Markdown that shows a chart.
    pub fn image(file: &str, alt: &str) -> String {
        format!("![{alt}]({}/{file})", Self::CHARTS)
    }
}

/// What a section wrote, and what it could not measure.
#[derive(Debug, Default)]
pub struct Body {
    /// Markdown under the heading.
    pub text: String,
    /// Parts that failed or could not run (the rest was measured).
    pub problems: Vec<String>,
}

impl From<String> for Body {
    fn from(text: String) -> Self {
        Self {
            text,
            problems: Vec::new(),
        }
    }
}

/// How a section ended.
#[derive(Debug, Clone)]
pub enum Outcome {
    Ran,
    /// Measured, except for these parts.
    Partial(Vec<String>),
    /// Something it needs is missing here: why, and what would have run.
    Skipped(String),
    Failed(String),
}

/// One section of the report.
pub struct Section {
    pub title: String,
    /// Markdown under the heading.
    pub body: String,
    pub outcome: Outcome,
    /// Wall-clock seconds it took.
    pub seconds: f64,
}

impl Section {
    pub fn markdown(&self) -> String {
        let mut text = format!("## {}\n\n", self.title);
        match &self.outcome {
            Outcome::Ran => {}
            Outcome::Partial(problems) => {
                let _ = writeln!(text, "**Partly measured in this run**:\n");
                for problem in problems {
                    let _ = writeln!(text, "- {}", problem.replace('\n', " "));
                }
                text.push('\n');
            }
            Outcome::Skipped(why) => {
                let _ = writeln!(text, "**Skipped in this run**: {why}\n");
            }
            Outcome::Failed(why) => {
                let _ = writeln!(text, "**Failed in this run**:\n\n```\n{why}\n```\n");
            }
        }
        text.push_str(&self.body);
        if !text.ends_with('\n') {
            text.push('\n');
        }
        let _ = writeln!(
            text,
            "\n<sub>This section took {:.0} s.</sub>\n",
            self.seconds
        );
        text
    }
}

/// A Markdown table.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut text = format!("| {} |\n", header.join(" | "));
    let _ = writeln!(
        text,
        "|{}",
        header.iter().map(|_| " --- |").collect::<String>()
    );
    for row in rows {
        let _ = writeln!(text, "| {} |", row.join(" | "));
    }
    text
}

/// The commit the run measured, read-only (`git rev-parse`, `git status`):
/// read when the run starts, before it writes its charts and this file into
/// the tree (read at the end, they made every run "with uncommitted changes").
pub fn commit(workspace: &Path) -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(workspace)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    match git(&["rev-parse", "--short", "HEAD"]) {
        Some(sha) => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("`{sha}` with uncommitted changes")
            } else {
                format!("`{sha}`")
            }
        }
        None => "an unknown commit".into(),
    }
}

/// What the intro says about this run.
pub struct RunInfo {
    pub machine: Machine,
    /// [`commit`], read at the start.
    pub commit: String,
    pub started: chrono::DateTime<chrono::Utc>,
    pub load_start: String,
    pub load_end: String,
    pub seconds: f64,
    pub versions: Vec<(String, String)>,
    pub notes: Vec<String>,
}

pub fn document(plan: &Plan, info: &RunInfo, sections: &[Section]) -> String {
    let m = &info.machine;
    let mut text = String::from("# Benchmarks\n\n");
    if plan.smoke {
        text.push_str(
            "> **Smoke run** (`--smoke`): tiny sizes and one run of each, to keep the harness \
             working. These figures mean nothing; the real report is `just bench`'s.\n\n",
        );
    }
    text.push_str(
        "Overseer beside what an operator would otherwise use or compare it with: every figure \
         next to its reference, measured in the same run on the same machine. The harness is the \
         `overseer-bench` crate (`crates/bench`); `just bench` builds it in release mode, runs it, \
         prints the tables and rewrites this file and its charts in `docs/bench/`.\n\n",
    );
    let _ = writeln!(
        text,
        "**This run**: {} UTC, commit {}, {} build, {:.1} minutes in all (building excluded).  ",
        info.started.format("%Y-%m-%d %H:%M"),
        info.commit,
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        info.seconds / 60.0
    );
    let _ = writeln!(
        text,
        "**Machine**: {}, {} cores, {:.0} GiB of memory, {} (Linux {}); load average {} at the \
         start and {} at the end.  ",
        m.cpu, m.cores, m.memory_gib, m.os, m.kernel, info.load_start, info.load_end
    );
    text.push_str(
        "**One run** of the harness, on a machine that other engineers' builds and tests were \
         using at the same time: the absolute figures are noisy, the ratios between a figure and \
         its reference (measured minutes apart, under the same noise) are what to read.  \n",
    );
    let _ = writeln!(
        text,
        "**Method**: warm-ups first, then {} of each scenario, interleaved; a cell reads \
         `median (min–max)` over the runs, or `median (p10–p90)` where it says so (many samples). \
         Each Overseer scenario runs in a process of its own, so its CPU time and peak memory are \
         its own.\n",
        crate::stats::count(plan.runs, "run")
    );
    if !info.versions.is_empty() {
        text.push_str("**Versions**: ");
        text.push_str(
            &info
                .versions
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", "),
        );
        text.push_str(".\n\n");
    }
    for note in &info.notes {
        let _ = writeln!(text, "> {note}\n");
    }
    text.push_str(
        "Rerun: `just bench` (or `cargo run --release -p overseer-bench`; `-- --only scale,http` \
         runs some sections and `-- --smoke` is CI's quick pass, both written to a temporary \
         folder, `-- --out DIR` elsewhere). \
         It needs the loopback Postgres, Redis and RabbitMQ, `redis-server`, `wrk` and \
         `python3`; the Celery venv is built on first use, Airflow's is used when the interop \
         test has made it.\n\n",
    );
    text.push_str("Contents: ");
    text.push_str(
        &sections
            .iter()
            .map(|s| {
                let anchor: String = s
                    .title
                    .to_lowercase()
                    .chars()
                    .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-')
                    .map(|c| if c == ' ' { '-' } else { c })
                    .collect();
                format!("[{}](#{anchor})", s.title)
            })
            .collect::<Vec<_>>()
            .join(" · "),
    );
    text.push_str("\n\n");
    for section in sections {
        text.push_str(&section.markdown());
    }
    text
}

/// An error that means "cannot run here" (a tool or service missing), not "broke".
#[derive(Debug)]
pub struct Skip(pub String);

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Skip {}
