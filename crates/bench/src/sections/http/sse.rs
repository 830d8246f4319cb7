//! `overseer serve`'s memory while stream clients connect to
//! `/api/v2/monitor/health/stream` and never read, against a report that
//! changes at every refresh.

use std::time::Duration;

use anyhow::Result;

use crate::pg::BenchDb;
use crate::process::get;
use crate::report::table;
use crate::stats::{bytes, num};

/// SSE clients that never read, against a report that changes every refresh.
const SSE_CLIENTS: usize = 100;
/// Executor rows that make the report large (about 250 bytes of JSON each),
/// on as many hosts, heartbeating all the time so the report changes.
const SSE_FLEET: usize = 3000;

/// The server's resident memory now (`VmRSS`), MiB.
fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("VmRSS:"))?
                .split_whitespace()
                .nth(1)?
                .parse::<f64>()
                .ok()
        })
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

/// `overseer serve`'s resident memory before, with and after [`SSE_CLIENTS`]
/// stream clients that never read, while [`SSE_FLEET`] executor rows
/// heartbeat (so a report of megabytes changes at every refresh), as a table.
/// `hold` and `after`: [`crate::plan::Plan::sse_hold_s`] and
/// [`crate::plan::Plan::sse_after_s`].
pub(super) async fn sse_memory(
    db: &BenchDb,
    addr: &str,
    pid: u32,
    hold: u64,
    after: u64,
) -> Result<String> {
    use std::io::Write as _;
    db.execute(&format!(
        "INSERT INTO job (state, job_type, start_date, latest_heartbeat, executor_class, \
         hostname, unixname, executor_health, executor_instance, executor_health_checked_at) \
         SELECT 'running', 'ExecutorJob', now(), now(), 'CeleryExecutor', \
         'fleet-host-' || i, 'airflow', 'healthy', 'redis://broker-' || i || ':6379/0', now() \
         FROM generate_series(1, {SSE_FLEET}) AS i"
    ))
    .await?;
    let url = db.url();
    let beating = tokio::spawn(async move {
        let Ok(conn) = crate::pg::connect(&url).await else {
            return;
        };
        while sea_orm::ConnectionTrait::execute_unprepared(
            &conn,
            "UPDATE job SET latest_heartbeat = now() WHERE hostname LIKE 'fleet-host-%'",
        )
        .await
        .is_ok()
        {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    let health = format!("http://{addr}/api/v2/monitor/health");
    let started = std::time::Instant::now();
    let report_bytes = loop {
        let size = get(&health).map_or(0, |(_, body)| body.len());
        if size > SSE_FLEET * 100 || started.elapsed() > Duration::from_secs(30) {
            break size;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = rss_mib(pid);
    eprintln!("http: {SSE_CLIENTS} SSE clients that never read");
    let clients = (0..SSE_CLIENTS)
        .map(|_| {
            let mut client = std::net::TcpStream::connect(addr)?;
            write!(
                client,
                "GET /api/v2/monitor/health/stream HTTP/1.1\r\nHost: {addr}\r\n\r\n"
            )?;
            Ok(client)
        })
        .collect::<std::io::Result<Vec<_>>>()?;
    let mut with = f64::NAN;
    let mut peak = f64::NAN;
    let until = std::time::Instant::now() + Duration::from_secs(hold);
    while std::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_secs(1)).await;
        with = rss_mib(pid);
        peak = peak.max(with);
    }
    drop(clients);
    tokio::time::sleep(Duration::from_secs(after)).await;
    let left = rss_mib(pid);
    beating.abort();
    let answers = get(&health).is_some_and(|(status, _)| status == 200);
    Ok(format!(
        "\nMemory of `overseer serve` with {SSE_CLIENTS} SSE clients that connect to \
         `/api/v2/monitor/health/stream` and never read, while {SSE_FLEET} executor rows \
         heartbeat (a report of {} that changes at every refresh); resident memory (`VmRSS`) \
         before they come, after {} s with them, and {} s after they closed{}:\n\n{}",
        bytes(report_bytes as f64),
        hold,
        after,
        if answers {
            ""
        } else {
            " (the health endpoint did not answer afterwards!)"
        },
        table(
            &[
                "clients",
                "RSS before, MiB",
                "RSS with them, MiB (peak)",
                "RSS after they left, MiB",
            ],
            &[vec![
                SSE_CLIENTS.to_string(),
                num(before, 1),
                format!("{} ({})", num(with, 1), num(peak, 1)),
                num(left, 1),
            ]],
        )
    ))
}
