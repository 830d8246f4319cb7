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

pub use overseer_testkit::procs::signal;

/// `signal` to every process of the group `pgid`.
pub fn signal_group(pgid: u32, signal: &str) {
    let _ = Command::new("kill")
        .args([format!("-{signal}"), "--".to_owned(), format!("-{pgid}")])
        .stderr(Stdio::null())
        .status();
}

/// True while a process of the group `pgid` runs (zombies aside).
pub fn in_group(pgid: u32) -> bool {
    proc_table()
        .into_iter()
        .any(|p| p.pgrp == pgid && p.state != 'Z')
}

/// Waits, at most `within`, until no process of the group `pgid` runs; whether none does.
pub fn group_gone_within(pgid: u32, within: Duration) -> bool {
    let until = Instant::now() + within;
    while in_group(pgid) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
    }
    !in_group(pgid)
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

/// A process a test started, and the file its output goes to.
pub struct Process {
    /// Names its log file, and it in failure messages.
    pub name: String,
    pub child: Child,
    pub log: std::path::PathBuf,
    /// Leads a process group of its own (its pid is the group's id), signalled as a
    /// whole: a Celery or edge worker, whose pool processes are its children.
    pub group: bool,
    /// Waited for already: its pid may belong to someone else now, never signal it.
    pub reaped: bool,
}

/// The long-running processes a run started, and every process of theirs ever
/// seen alive: what `stop_all` ends, and what must not be left behind.
pub struct Processes {
    /// The environment variable every process of the run carries, and its value.
    pub marker_var: &'static str,
    pub marker: String,
    /// In the order started.
    pub started: Vec<Process>,
    /// Every process of ours ever seen alive, by (pid, start time).
    seen: std::collections::BTreeSet<(u32, u64)>,
    /// Set once `stop_all` ran, so dropping the run does not run it again.
    pub stopped: bool,
}

impl Processes {
    /// A run whose processes carry `marker_var=marker`.
    pub fn new(marker_var: &'static str, marker: String) -> Self {
        Self {
            marker_var,
            marker,
            started: Vec::new(),
            seen: std::collections::BTreeSet::new(),
            stopped: false,
        }
    }

    /// Notes the run's processes, and fails the test (with the log's tail) when one that
    /// should run has exited.
    pub fn check_ours(&mut self, what: &str) {
        self.note_ours();
        for process in &self.started {
            if !process.reaped && !alive(process.child.id()) {
                panic!(
                    "{what}: {} exited meanwhile:\n{}",
                    process.name,
                    tail(&read(&process.log), 40)
                );
            }
        }
    }

    /// Remembers every live process of this run: the ones started, their descendants, and
    /// any carrying the run's marker (a child whose parent died is no longer a descendant).
    pub fn note_ours(&mut self) {
        let leaders: Vec<u32> = self
            .started
            .iter()
            .filter(|p| !p.reaped)
            .map(|p| p.child.id())
            .collect();
        let table = proc_table();
        let parents: std::collections::HashMap<u32, u32> =
            table.iter().map(|p| (p.pid, p.ppid)).collect();
        // Walks up the parents (at most 64 generations, in case of a cycle from pid reuse).
        let descends = |pid: u32| {
            std::iter::successors(Some(pid), |p| parents.get(p).copied())
                .take(64)
                .any(|ancestor| leaders.contains(&ancestor))
        };
        for process in &table {
            if descends(process.pid) || process.marked(self.marker_var, &self.marker) {
                self.seen.insert((process.pid, process.start));
            }
        }
    }

    /// Stops everything still running: SIGTERM to the processes the test started, SIGKILL
    /// to whatever of ours is left after `grace`. Returns the processes that outlived
    /// even that (should be none).
    pub fn stop_all(&mut self, grace: Duration) -> Vec<String> {
        self.stopped = true;
        self.note_ours();
        for process in self.started.iter().filter(|p| !p.reaped) {
            match process.group {
                true => signal_group(process.child.id(), "TERM"),
                false => signal(process.child.id(), "TERM"),
            }
        }
        let until = Instant::now() + grace;
        while Instant::now() < until && !self.still_alive().is_empty() {
            self.note_ours();
            std::thread::sleep(Duration::from_millis(100));
        }
        for (pid, _) in self.still_alive() {
            signal(pid, "KILL");
        }
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until && !self.still_alive().is_empty() {
            std::thread::sleep(Duration::from_millis(100));
        }
        for process in self.started.iter_mut().filter(|p| !p.reaped) {
            let _ = process.child.wait();
            process.reaped = true;
        }
        self.note_ours();
        let marked = proc_table()
            .into_iter()
            .filter(|p| p.marked(self.marker_var, &self.marker))
            .map(|p| format!("{} (marked): {}", p.pid, cmdline(p.pid)));
        self.still_alive()
            .into_iter()
            .map(|(pid, _)| format!("{pid}: {}", cmdline(pid)))
            .chain(marked)
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    /// The processes of ours that still run (the same pid and start time as when seen).
    pub fn still_alive(&self) -> Vec<(u32, u64)> {
        self.seen
            .iter()
            .copied()
            .filter(|&(pid, start)| {
                proc_stat(pid).is_some_and(|p| p.start == start && p.state != 'Z')
            })
            .collect()
    }

    /// The last lines of every process's log, for a failed test.
    pub fn tails(&self) -> String {
        let mut tails = String::new();
        for process in &self.started {
            let _ = writeln!(tails, "---- {} ({})", process.name, process.log.display());
            let _ = writeln!(tails, "{}", tail(&read(&process.log), 40));
        }
        tails
    }
}
