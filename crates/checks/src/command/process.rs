//! The started program's life, for [`super::CommandCheck`]: its output read
//! as it comes, up to [`MAX_OUTPUT`] of each stream, while it runs
//! ([`run_to_exit`]); its exit and its pipes' end awaited, with
//! [`PIPE_GRACE`] for a process it left holding them; and its process
//! group ([`Group`]), killed whole at the deadline, at a flood, and on drop
//! while the program is unreaped.

use std::io;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Child;

/// The most output kept of each of standard output and standard error: the
/// reason needs one line, and a probe that prints megabytes costs no memory.
pub const MAX_OUTPUT: usize = 64 * 1024;

/// How long the output pipes may stay open once the program has exited (a
/// process it left in the background may hold them); then what was read is used.
pub const PIPE_GRACE: Duration = Duration::from_millis(100);

/// How [`run_to_exit`] ended.
pub(super) enum Ended {
    /// The program exited.
    Exited(Exit),
    /// It wrote more than [`MAX_OUTPUT`] to a stream while it ran; it is still
    /// unreaped, for its caller to kill.
    Flooded,
}

/// How the program ended, once it has.
pub(super) struct Exit {
    pub(super) status: ExitStatus,
    /// Both pipes reached their end (no process it left behind holds them).
    pub(super) pipes_closed: bool,
}

/// Reads the program's output while it runs, until it has exited and its pipes
/// have closed (or [`PIPE_GRACE`] after it exited), or until a stream has
/// given more than [`MAX_OUTPUT`]. Unbounded in time: the caller holds the
/// deadline.
pub(super) async fn run_to_exit(
    child: &mut Child,
    group: &Group,
    stdout: Option<impl AsyncRead + Unpin>,
    stderr: Option<impl AsyncRead + Unpin>,
    out: &mut Vec<u8>,
    err: &mut Vec<u8>,
) -> io::Result<Ended> {
    // Ends at the first stream to flood, without waiting for the other.
    let reading = async {
        tokio::try_join!(read_up_to_max(stdout, out), read_up_to_max(stderr, err)).map(|_| ())
    };
    let exiting = async {
        let status = child.wait().await;
        // In the same poll as the reaping: the guard never kills a reaped group.
        group.leader_reaped();
        status
    };
    tokio::pin!(reading, exiting);
    let status = tokio::select! {
        status = &mut exiting => status?,
        read = &mut reading => {
            if read.is_err() {
                return Ok(Ended::Flooded);
            }
            let status = exiting.await?;
            return Ok(Ended::Exited(Exit { status, pipes_closed: true }));
        }
    };
    // A process it left behind that still writes (floods) holds the pipes too.
    let pipes_closed = matches!(
        tokio::time::timeout(PIPE_GRACE, &mut reading).await,
        Ok(Ok(()))
    );
    Ok(Ended::Exited(Exit {
        status,
        pipes_closed,
    }))
}

/// A stream gave more than [`MAX_OUTPUT`]: reading stopped there.
#[derive(Debug)]
struct Flooded;

/// Reads `pipe` to its end, keeping what it gives in `kept`; stops with
/// [`Flooded`] at the first byte past [`MAX_OUTPUT`], reading nothing more.
/// What it read stays in `kept` even if it is dropped before the end.
async fn read_up_to_max(
    pipe: Option<impl AsyncRead + Unpin>,
    kept: &mut Vec<u8>,
) -> std::result::Result<(), Flooded> {
    let Some(mut pipe) = pipe else {
        return Ok(());
    };
    let mut chunk = [0u8; 8 * 1024];
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) | Err(_) => return Ok(()),
            Ok(n) => {
                let room = MAX_OUTPUT.saturating_sub(kept.len());
                kept.extend_from_slice(&chunk[..n.min(room)]);
                if n > room {
                    return Err(Flooded);
                }
            }
        }
    }
}

/// The program's process group (its id is the program's pid): killed whole at
/// the deadline, and on drop while the program is still unreaped, so a check
/// dropped mid-run leaves no process behind.
pub(super) struct Group {
    /// The group's id; `None` when the system gave no pid (never on Unix).
    id: Option<i32>,
    /// The program has been reaped: its id may be reused, so only a group that
    /// still has members may be killed (see [`Group::kill`]'s callers).
    reaped: AtomicBool,
}

impl Group {
    pub(super) fn of(child: &Child) -> Self {
        Self {
            // Never 0 or 1: `killpg(0)` is our own group, and 1 is init's.
            id: child
                .id()
                .and_then(|id| i32::try_from(id).ok())
                .filter(|id| *id > 1),
            reaped: AtomicBool::new(false),
        }
    }

    pub(super) fn leader_reaped(&self) {
        self.reaped.store(true, Ordering::Release);
    }

    /// Sends `SIGKILL` to every process of the group. Only while the program is
    /// unreaped, or while another member lives: either keeps the id from reuse.
    pub(super) fn kill(&self) {
        #[cfg(unix)]
        if let Some(id) = self.id {
            // SAFETY: killpg has no memory effects; a group that is gone is ESRCH.
            unsafe {
                libc::killpg(id, libc::SIGKILL);
            }
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if !self.reaped.load(Ordering::Acquire) {
            self.kill();
        }
    }
}
