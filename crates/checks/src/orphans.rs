//! Processes a probe leaves behind in a session of its own.
//!
//! A [`CommandCheck`](crate::CommandCheck)'s program runs in a process group of
//! its own, killed whole when the probe ends. A descendant that calls `setsid`
//! (`sh -c "setsid daemon & echo ok"`) leaves that group; when the probe exits
//! it is re-parented to init and runs on, one more at every poll.
//!
//! A process that [`adopt`]s (Linux's `PR_SET_CHILD_SUBREAPER`; the `overseer`
//! binary does when an executor has a `check_command`) becomes such orphans'
//! parent instead of init, and [`sweep`] ends them: every child of this process
//! that is not a probe program it started and has not reaped yet is killed with
//! `SIGKILL` (with its process group, when it leads one) and reaped. A sweep
//! runs after each probe ends (at most one per [`SWEEP_EVERY`], so an orphan
//! lives at most until the next probe of any executor ends, one poll interval)
//! and once more when the service stops ([`sweep_at_exit`]), so none outlives
//! Overseer either.
//!
//! Only for a process whose only children are its probes: a sweep would end
//! any other child too. An embedding program that starts children of its own
//! does not call [`adopt`]; its probes' orphans then escape as they would
//! anywhere.
//!
//! A probe program is told apart from an orphan by its pid and start time,
//! recorded as it is spawned (under the lock a sweep holds, so a sweep never
//! sees a probe it does not know), so a reused pid is never mistaken for it.

use std::collections::HashSet;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The least time between two sweeps after probes end.
pub const SWEEP_EVERY: Duration = Duration::from_millis(100);

/// Whether this process adopts its probes' orphans.
static ADOPTING: AtomicBool = AtomicBool::new(false);

/// The probe programs started and maybe not reaped yet, as `(pid, start time)`,
/// and when the last sweep ran.
static PROBES: Mutex<Probes> = Mutex::new(Probes {
    started: None,
    last_sweep: None,
});

struct Probes {
    started: Option<HashSet<(i32, u64)>>,
    last_sweep: Option<Instant>,
}

fn probes() -> MutexGuard<'static, Probes> {
    PROBES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Makes this process the parent of its probes' orphans (Linux's
/// `PR_SET_CHILD_SUBREAPER`), so that [`sweep`] can end them. Only for a
/// process whose only children are its probes (see the module doc).
pub fn adopt() -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl with PR_SET_CHILD_SUBREAPER reads no memory of ours.
        if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        ADOPTING.store(true, Ordering::SeqCst);
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "only Linux lets a process adopt its descendants' orphans",
        ))
    }
}

/// Whether [`adopt`] succeeded in this process.
pub fn adopting() -> bool {
    ADOPTING.load(Ordering::SeqCst)
}

/// Runs `spawn` (which starts a probe program) and records the program it
/// started, under the lock a sweep holds: a sweep never takes a probe that is
/// being started for an orphan.
pub fn spawning<T>(
    spawn: impl FnOnce() -> io::Result<T>,
    pid: impl Fn(&T) -> Option<u32>,
) -> io::Result<T> {
    if !adopting() {
        return spawn();
    }
    let mut probes = probes();
    let spawned = spawn()?;
    if let Some(pid) = pid(&spawned).and_then(|p| i32::try_from(p).ok())
        && let Some(start) = start_time(pid)
    {
        probes
            .started
            .get_or_insert_with(HashSet::new)
            .insert((pid, start));
    }
    Ok(spawned)
}

/// After a probe ended: a [`sweep`], unless one ran less than [`SWEEP_EVERY`] ago.
pub(crate) fn after_probe() {
    if !adopting() {
        return;
    }
    let mut probes = probes();
    if probes
        .last_sweep
        .is_some_and(|at| at.elapsed() < SWEEP_EVERY)
    {
        return;
    }
    sweep_locked(&mut probes);
}

/// Ends every child of this process that is not a probe program (an orphan
/// some probe left), and reaps those that ended; returns how many it killed.
/// Does nothing unless this process [`adopt`]s.
pub fn sweep() -> usize {
    if !adopting() {
        return 0;
    }
    sweep_locked(&mut probes())
}

/// A last [`sweep`] as the service stops, then the orphans it killed reaped
/// (for at most a second): none outlives the service, none is left a zombie.
pub fn sweep_at_exit() {
    if !adopting() {
        return;
    }
    let killed = sweep();
    if killed > 0 {
        tracing::info!(killed, "stopping: ended the processes probes left behind");
    }
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until && sweep() > 0 {
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn sweep_locked(probes: &mut Probes) -> usize {
    probes.last_sweep = Some(Instant::now());
    let started = probes.started.get_or_insert_with(HashSet::new);
    // Probes that were reaped (by their check, or by tokio's reaper for one
    // whose check was dropped) are known no more.
    started.retain(|&(pid, start)| start_time(pid) == Some(start));
    let own_group = own_group();
    let mut killed = 0;
    for pid in children() {
        let Some(start) = start_time(pid) else {
            continue;
        };
        if started.contains(&(pid, start)) {
            continue;
        }
        if !is_zombie(pid) {
            killed += 1;
            tracing::debug!(pid, "ending a process a probe left behind");
            #[cfg(unix)]
            // SAFETY: getpgid, killpg and kill have no memory effects; a
            // process or group that is gone is ESRCH. Our own group is never
            // signalled, nor a group id of 0 or 1.
            unsafe {
                let group = libc::getpgid(pid);
                if group == pid && group > 1 && Some(group) != own_group {
                    libc::killpg(group, libc::SIGKILL);
                }
                libc::kill(pid, libc::SIGKILL);
            }
        }
        #[cfg(unix)]
        // SAFETY: waitpid on a child of ours that is not a probe (whose
        // reaping belongs to its check); WNOHANG never blocks. One not dead
        // yet is reaped by a later sweep.
        unsafe {
            let mut status = 0;
            libc::waitpid(pid, &mut status, libc::WNOHANG);
        }
    }
    killed
}

#[cfg(unix)]
fn own_group() -> Option<i32> {
    // SAFETY: getpgrp has no memory effects and cannot fail.
    Some(unsafe { libc::getpgrp() })
}

#[cfg(not(unix))]
fn own_group() -> Option<i32> {
    None
}

/// This process's children: from each thread's `/proc/self/task/*/children`
/// (an orphan is re-parented to any thread of ours), else from every
/// process's parent in `/proc`.
fn children() -> Vec<i32> {
    let mut pids = Vec::new();
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        let mut any = false;
        for task in tasks.flatten() {
            if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
                any = true;
                pids.extend(
                    text.split_whitespace()
                        .filter_map(|p| p.parse::<i32>().ok()),
                );
            }
        }
        if any {
            pids.sort_unstable();
            pids.dedup();
            return pids;
        }
    }
    let me = std::process::id() as i32;
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            if stat_fields(pid).and_then(|f| f.get(1).and_then(|p| p.parse::<i32>().ok()))
                == Some(me)
            {
                pids.push(pid);
            }
        }
    }
    pids
}

/// The fields of `/proc/PID/stat` after the command name, from `state` on.
fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    Some(after.split_whitespace().map(str::to_owned).collect())
}

/// When process `pid` started (clock ticks since boot): with the pid, what
/// tells one process from a later one with the same pid.
fn start_time(pid: i32) -> Option<u64> {
    // `starttime` is the 22nd field; the list starts at the 3rd.
    stat_fields(pid)?.get(19)?.parse().ok()
}

fn is_zombie(pid: i32) -> bool {
    stat_fields(pid).is_some_and(|f| f.first().is_some_and(|s| s == "Z" || s == "X"))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_told_apart_by_its_start_time() {
        let me = std::process::id() as i32;
        let start = start_time(me).expect("our own start time");
        assert_eq!(start_time(me), Some(start));
        assert!(!is_zombie(me));
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        assert!(
            children().contains(&pid),
            "{pid} not among {:?}",
            children()
        );
        assert!(start_time(pid).is_some_and(|s| s >= start));
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(start_time(pid), None);
    }
}
