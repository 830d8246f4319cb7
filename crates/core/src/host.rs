//! Overseer's own host, as the kernel tells it: how long its tasks have
//! waited for a CPU. What the supervisor needs to tell a check this host
//! starved from one the executor left unanswered.
//!
//! Linux's pressure stall information (`/proc/pressure/cpu`, 4.20 and later,
//! when the kernel has it on): `some ... total=` counts the microseconds in
//! which at least one task waited on a run queue. Between two readings, its
//! growth is the part of that time the host had no CPU for someone, Overseer's
//! checks and probes among them. Where it cannot be read, nothing is stalled.

use std::time::Duration;

/// The host's CPU stall so far (`some total`), or `None` where the kernel
/// does not say.
pub fn cpu_stall() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/pressure/cpu").ok()?;
    let some = text.lines().find(|line| line.starts_with("some "))?;
    let total = some
        .split_whitespace()
        .find_map(|field| field.strip_prefix("total="))?;
    total.parse().ok().map(Duration::from_micros)
}

/// The host's load, for a log line: `load 7.93 on 2 cores` (`/proc/loadavg`),
/// or `load not known`.
pub fn load() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next().map(str::to_owned))
        .map_or_else(
            || "load not known".to_owned(),
            |one| format!("load {one} on {cores} cores"),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stall_only_grows_and_the_load_names_the_cores() {
        let Some(before) = cpu_stall() else {
            eprintln!("SKIPPED: this kernel has no /proc/pressure/cpu");
            return;
        };
        let after = cpu_stall().unwrap();
        assert!(after >= before);
        assert!(load().ends_with(" cores"), "{}", load());
    }
}
