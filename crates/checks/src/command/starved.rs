//! Whether a probe that missed its deadline was starved by Overseer's own
//! host rather than slow of its own: what the kernel says of it (Linux's
//! `/proc`), read while it is still unreaped.
//!
//! A probe was starved when, at the deadline, it had already exited (its exit
//! was there to be seen; this host's threads did not get to see it in time),
//! or it spent at least half its deadline waiting on a run queue for a CPU
//! (`/proc/<pid>/schedstat`'s second field), or it took this host half the
//! deadline just to start it. A probe that ran and did not finish (a `curl`
//! to a broker that does not answer, a script waiting on a child) was not: it
//! is the executor's fault, as before. Where `/proc` cannot be read, nothing
//! is said to be starved.

use std::time::Duration;

/// What this host did to a probe that missed its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Starved {
    /// It had exited: this host was late to see it.
    Exited,
    /// It waited this long for a CPU.
    Waited(Duration),
    /// Starting it took this long.
    SlowStart(Duration),
}

impl Starved {
    /// What the reason says of it.
    pub(super) fn said(self) -> String {
        let ms = |d: Duration| format!("{}ms", d.as_millis());
        match self {
            Self::Exited => "it had exited, but this host did not see it in time".into(),
            Self::Waited(waited) => format!("it waited {} for a CPU", ms(waited)),
            Self::SlowStart(took) => format!("starting it took {}", ms(took)),
        }
    }
}

/// Whether the probe `pid`, started in `spawn` and given `deadline`, was
/// starved by this host; `None` when it was not (or it cannot be told).
pub(super) fn starved(pid: u32, spawn: Duration, deadline: Duration) -> Option<Starved> {
    let half = deadline / 2;
    if spawn >= half {
        return Some(Starved::SlowStart(spawn));
    }
    if state(pid) == Some('Z') {
        return Some(Starved::Exited);
    }
    let waited = run_queue_wait(pid)?;
    (waited >= half).then_some(Starved::Waited(waited))
}

/// The process's state letter (`R`, `S`, `Z`, ...), from `/proc/<pid>/stat`.
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name, in parentheses, may hold anything: the state follows the last `)`.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// How long the process has waited on a run queue, from `/proc/<pid>/schedstat`.
fn run_queue_wait(pid: u32) -> Option<Duration> {
    let schedstat = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
    let waited: u64 = schedstat.split_whitespace().nth(1)?.parse().ok()?;
    Some(Duration::from_nanos(waited))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_that_exited_unseen_was_starved_and_one_that_runs_on_was_not() {
        let deadline = Duration::from_millis(450);
        let mut sleeping = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let mut exited = std::process::Command::new("true").spawn().unwrap();
        // Not reaped yet: a zombie, its exit there to be seen.
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while state(exited.id()) != Some('Z') {
            assert!(
                std::time::Instant::now() < until,
                "{:?}",
                state(exited.id())
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(
            starved(exited.id(), Duration::ZERO, deadline),
            Some(Starved::Exited)
        );
        // Asleep, it waits on nothing but itself: the executor's own time.
        assert!(
            run_queue_wait(sleeping.id()).is_some(),
            "schedstat is readable here"
        );
        assert_eq!(starved(sleeping.id(), Duration::ZERO, deadline), None);
        sleeping.kill().unwrap();
        sleeping.wait().unwrap();
        exited.wait().unwrap();
    }

    #[test]
    fn a_slow_start_is_the_host_s_and_a_process_gone_is_nobody_s() {
        let deadline = Duration::from_millis(450);
        assert_eq!(
            starved(1, Duration::from_millis(300), deadline),
            Some(Starved::SlowStart(Duration::from_millis(300)))
        );
        assert_eq!(starved(u32::MAX, Duration::ZERO, deadline), None);
    }
}
