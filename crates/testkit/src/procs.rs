//! Processes and sockets as the kernel sees them: signals sent by process id,
//! and the TCP connections open to a port (read from `/proc/net/tcp`).

use std::process::{Command, Stdio};

/// Sends `signal` (`STOP`, `CONT`, `KILL`, ...) to the process `pid`, as
/// `kill -SIGNAL pid`; a process already gone is not an error.
pub fn signal(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

/// How many IPv4 TCP connections on this host are established to local `port`
/// from the client side (the remote end is `port`): a client's attempt the
/// kernel completed, whether or not the server has accepted it yet.
pub fn established_to(port: u16) -> usize {
    const ESTABLISHED: &str = "01";
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.len() > 3
                && fields[3] == ESTABLISHED
                && fields[2]
                    .rsplit(':')
                    .next()
                    .and_then(|hex| u16::from_str_radix(hex, 16).ok())
                    == Some(port)
        })
        .count()
}
