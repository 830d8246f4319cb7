//! wrk, the load generator: run against one URL, its output read into a [`Load`].

use std::process::Command;

use anyhow::{Context, Result, anyhow};

/// wrk's threads: one per core of this 2-core machine (wrk and the server share them).
pub(crate) const WRK_THREADS: u32 = 2;
/// wrk's request timeout: long enough that a slow server's latencies are counted, not dropped.
pub(crate) const WRK_TIMEOUT: &str = "10s";

/// What one wrk run measured.
#[derive(Debug, Clone)]
pub(crate) struct Load {
    pub(crate) rps: f64,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) requests: f64,
    pub(crate) errors: Option<String>,
}

fn latency_ms(text: &str) -> Option<f64> {
    let text = text.trim();
    let split = text.find(|c: char| c.is_ascii_alphabetic())?;
    let (value, unit) = text.split_at(split);
    let value: f64 = value.parse().ok()?;
    Some(match unit {
        "us" => value / 1000.0,
        "ms" => value,
        "s" => value * 1000.0,
        "m" => value * 60_000.0,
        _ => return None,
    })
}

pub(crate) fn wrk(url: &str, connections: u32, seconds: u32) -> Result<Load> {
    let out = Command::new("wrk")
        .arg(format!("-t{WRK_THREADS}"))
        .arg(format!("-c{connections}"))
        .arg(format!("-d{seconds}s"))
        .args(["--timeout", WRK_TIMEOUT, "--latency", url])
        .output()
        .context("while running wrk")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let find = |prefix: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(prefix).map(str::trim))
    };
    let rps = find("Requests/sec:")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow!("no Requests/sec in wrk's output:\n{text}"))?;
    let requests = text
        .lines()
        .find(|l| l.contains(" requests in "))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    let errors: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("Non-2xx") || l.contains("Socket errors"))
        .map(str::trim)
        .collect();
    Ok(Load {
        rps,
        p50_ms: find("50%").and_then(latency_ms).unwrap_or(f64::NAN),
        p99_ms: find("99%").and_then(latency_ms).unwrap_or(f64::NAN),
        requests,
        errors: (!errors.is_empty()).then(|| errors.join("; ")),
    })
}
