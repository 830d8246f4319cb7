//! What the kernel says about a process (CPU, peak memory, threads, bytes
//! written) and about the machine, read from `/proc`. Linux only, as this
//! project's machines are.

use std::path::Path;

/// Clock ticks per second in `/proc/PID/stat` (`USER_HZ`: 100 on every Linux
/// this project runs on), so CPU times have a 10 ms resolution.
const CLOCK_TICKS: f64 = 100.0;

fn read(path: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// The fields of `/proc/PID/stat` after the command name (which may hold spaces).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = read(format!("/proc/{pid}/stat"))?;
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// CPU seconds (user + system) a process has used so far.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let fields = stat_fields(pid)?;
    // After the name: state(0) ppid(1) ... utime(11) stime(12).
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / CLOCK_TICKS)
}

/// The parent of a process.
fn parent(pid: u32) -> Option<u32> {
    stat_fields(pid)?.get(1)?.parse().ok()
}

/// A line `Key:   value kB` of `/proc/PID/status`, as a number.
fn status_value(pid: u32, key: &str) -> Option<f64> {
    read(format!("/proc/{pid}/status"))?
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
}

/// Peak resident memory (`VmHWM`) of a process, in MiB.
pub fn peak_rss_mib(pid: u32) -> Option<f64> {
    status_value(pid, "VmHWM:").map(|kib| kib / 1024.0)
}

/// Resident memory (`VmRSS`) of a process now, in MiB.
pub fn rss_mib(pid: u32) -> Option<f64> {
    status_value(pid, "VmRSS:").map(|kib| kib / 1024.0)
}

/// Threads of a process now.
pub fn threads(pid: u32) -> Option<f64> {
    status_value(pid, "Threads:")
}

/// Threads of a process now whose name starts with one of `names` (names are
/// cut at 15 bytes, as `/proc/PID/task/TID/comm` keeps them).
pub fn threads_named(pid: u32, names: &[&str]) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|dir| {
            dir.filter_map(|e| read(e.ok()?.path().join("comm")))
                .filter(|comm| {
                    let comm = comm.trim_end();
                    names
                        .iter()
                        .any(|n| comm.starts_with(&n[..n.len().min(15)]))
                })
                .count()
        })
        .unwrap_or(0)
}

/// Resets a process's peak resident memory to its current size (writing 5 to
/// `clear_refs`, Linux 4.0+), so a later [`peak_rss_mib`] is the peak since now.
pub fn reset_peak_rss(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

/// Bytes a process has passed to `write()` and friends (`wchar` of `/proc/PID/io`).
pub fn bytes_written(pid: u32) -> Option<u64> {
    read(format!("/proc/{pid}/io"))?
        .lines()
        .find_map(|l| l.strip_prefix("wchar:"))
        .and_then(|v| v.trim().parse().ok())
}

/// A process and every descendant it has now (Airflow's API server forks workers).
pub fn tree(root: u32) -> Vec<u32> {
    let all: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .map(|dir| {
            dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .filter_map(|pid| Some((pid, parent(pid)?)))
                .collect()
        })
        .unwrap_or_default();
    let mut found = vec![root];
    let mut at = 0;
    while at < found.len() {
        let pid = found[at];
        found.extend(all.iter().filter(|(_, p)| *p == pid).map(|(c, _)| *c));
        at += 1;
    }
    found
}

/// CPU seconds of a process tree (the processes alive now).
pub fn tree_cpu_seconds(pids: &[u32]) -> f64 {
    pids.iter().filter_map(|p| cpu_seconds(*p)).sum()
}

/// Sum of the peak resident memory of a process tree, in MiB (shared pages
/// counted once per process: an upper bound).
pub fn tree_peak_rss_mib(pids: &[u32]) -> f64 {
    pids.iter().filter_map(|p| peak_rss_mib(*p)).sum()
}

/// Is this process still there?
pub fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Sends a signal to one process, by its id.
pub fn signal(pid: u32, signal: &str) {
    let _ = std::process::Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}

/// The machine a run happened on, for the report's first lines.
#[derive(Debug, Clone)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub memory_gib: f64,
    pub kernel: String,
    pub os: String,
}

impl Machine {
    pub fn read() -> Self {
        let cpuinfo = read("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_owned())
            .unwrap_or_else(|| "unknown CPU".into());
        let memory_gib = read("/proc/meminfo")
            .and_then(|m| {
                m.lines()
                    .find_map(|l| l.strip_prefix("MemTotal:"))
                    .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            })
            .map_or(0.0, |kib| kib / 1024.0 / 1024.0);
        let os = read("/etc/os-release")
            .and_then(|o| {
                o.lines()
                    .find_map(|l| l.strip_prefix("PRETTY_NAME="))
                    .map(|v| v.trim_matches('"').to_owned())
            })
            .unwrap_or_else(|| "Linux".into());
        Self {
            cpu,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_gib,
            kernel: read("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_owned())
                .unwrap_or_default(),
            os,
        }
    }
}

/// The 1-minute load average now: how busy the machine was besides us.
pub fn load_average() -> String {
    read("/proc/loadavg")
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

/// CPU seconds this process has used, to the microsecond (`getrusage`), where
/// `/proc` counts in 10 ms ticks: the scenarios' small CPU figures need it.
pub fn own_cpu_seconds() -> f64 {
    #[cfg(unix)]
    {
        let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
        // SAFETY: getrusage writes one `struct rusage` through a valid pointer;
        // it is read only if the call succeeded.
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) } == 0 {
            // SAFETY: getrusage succeeded, so it wrote the whole struct.
            let usage = unsafe { usage.assume_init() };
            let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
            return seconds(usage.ru_utime) + seconds(usage.ru_stime);
        }
    }
    cpu_seconds(std::process::id()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn own_cpu_seconds_count_the_work_this_process_does() {
        let before = super::own_cpu_seconds();
        // Work, a bounded amount, until the counter moves: getrusage counts to
        // the microsecond, so it moves after the first rounds.
        let mut x = 0u64;
        for _ in 0..10_000 {
            if super::own_cpu_seconds() > before {
                break;
            }
            for i in 0..100_000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
        }
        assert!(super::own_cpu_seconds() > before, "{before}");
    }
}
