//! A loaded host, made by the test itself: every core kept busy by processes
//! of its own, as a scheduler host's are, for the faults that must be judged
//! the same on a busy machine as on a quiet one.
//!
//! Each process is a Python busy loop that ends by itself after its bound (so a
//! test that dies leaves nothing running for long), and is ended by its pid
//! when the [`Saturation`] is dropped. `scripts/saturate.sh` does the same
//! around any command (a test, the whole suite, a bench section).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Busy processes, one per core, until dropped or their bound passes.
#[derive(Debug)]
pub struct Saturation {
    children: Vec<Child>,
}

impl Saturation {
    /// One busy process per core (as the machine counts them), each ending by
    /// itself after `bound`. Panics when Python cannot be started: a test that
    /// asks for load must not run unloaded and pass.
    pub fn start(bound: Duration) -> Self {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let busy = format!(
            "import time\nend = time.monotonic() + {}\nwhile time.monotonic() < end:\n    pass\n",
            bound.as_secs_f64()
        );
        let children = (0..cores)
            .map(|_| {
                Command::new("python3")
                    .args(["-c", &busy])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("python3 starts the load generator")
            })
            .collect();
        eprintln!("load: {cores} busy processes, at most {bound:?}");
        Self { children }
    }

    /// The pids of the busy processes.
    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }
}

impl Drop for Saturation {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
