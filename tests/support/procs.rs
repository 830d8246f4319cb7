//! Processes as the tests that run Airflow watch them: read from `/proc`,
//! signalled by pid or group, waited on with a deadline; their logs' tails; and
//! the phases' timings. Shared by `interop_airflow.rs` and `interop_edge.rs`.

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// One line of `/proc/<pid>/stat`, the fields these tests need.
pub struct ProcStat {
    pub pid: u32,
    pub ppid: u32,
    /// Its process group.
    pub pgrp: u32,
    pub state: char,
    /// Clock ticks after boot: with the pid, names a process even after pid reuse.
    pub start: u64,
}

impl ProcStat {
    /// True when the process runs with `var=marker` in its environment (a run
    /// marks every process it starts, so that none is left behind unseen).
    pub fn marked(&self, var: &str, marker: &str) -> bool {
        let needle = format!("{var}={marker}");
        self.state != 'Z'
            && std::fs::read(format!("/proc/{}/environ", self.pid))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|var| var == needle.as_bytes()))
    }
}

pub fn proc_stat(pid: u32) -> Option<ProcStat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: fields start after the last ')'.
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(ProcStat {
        pid,
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        pgrp: fields.get(2)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

pub fn proc_table() -> Vec<ProcStat> {
    std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .filter_map(proc_stat)
                .collect()
        })
        .unwrap_or_default()
}

/// True while `pid` runs (a zombie waiting to be reaped has stopped running).
pub fn alive(pid: u32) -> bool {
    proc_stat(pid).is_some_and(|p| p.state != 'Z')
}

pub fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| {
            String::from_utf8_lossy(&c)
                .replace('\0', " ")
                .trim()
                .to_owned()
        })
        .unwrap_or_default()
}

pub fn signal(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

/// `signal` to every process of the group `pgid`.
pub fn signal_group(pgid: u32, signal: &str) {
    let _ = Command::new("kill")
        .args([format!("-{signal}"), "--".to_owned(), format!("-{pgid}")])
        .stderr(Stdio::null())
        .status();
}

/// Waits for `child` until `deadline`; kills it and answers `None` when it is late.
pub fn wait_deadline(child: &mut Child, deadline: Duration) -> Option<ExitStatus> {
    let until = Instant::now() + deadline;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// How long each phase took, said as it ends and printed at the end.
pub struct Timings {
    /// The test's name in the lines it says (`interop`).
    test: &'static str,
    phases: Vec<(String, Duration)>,
}

impl Timings {
    pub fn new(test: &'static str) -> Self {
        Self {
            test,
            phases: Vec::new(),
        }
    }

    pub fn add(&mut self, phase: &str, took: Duration) {
        eprintln!("{}: {phase}: {took:.1?}", self.test);
        self.phases.push((phase.to_owned(), took));
    }

    pub fn render(&self) -> String {
        let total: Duration = self.phases.iter().map(|(_, d)| *d).sum();
        let mut text = String::new();
        for (phase, took) in &self.phases {
            let _ = writeln!(text, "  {phase:<45} {took:>8.1?}");
        }
        let _ = write!(text, "  {:<45} {total:>8.1?}", "total");
        text
    }
}
