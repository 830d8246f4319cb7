//! The reference: a bare actix-web route serving the health endpoint's bytes,
//! so the ratio to it is what Overseer adds per request. It runs as the
//! bench binary's `bare-route` scenario, in a process of its own.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::process::{self, Server};

/// The reference route's path: the health endpoint's, so wrk's requests are the same bytes.
pub(crate) const BARE_PATH: &str = "/api/v2/monitor/health";

/// The `bare-route` scenario: one actix-web route at [`BARE_PATH`] answering
/// the bytes of `body` (the health endpoint's JSON, saved by the section) with
/// the health endpoint's own headers, on as many workers as `overseer serve`
/// runs, and nothing else: no middleware, no extractor, no state. It prints
/// `listening on http://ADDR` and serves until stopped.
pub fn serve_bare(body: &Path) -> Result<()> {
    use actix_web::{App, HttpResponse, HttpServer, http::header, web};
    let body = web::Bytes::from(std::fs::read(body).with_context(|| body.display().to_string())?);
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    actix_web::rt::System::new().block_on(async move {
        let server = HttpServer::new(move || {
            let body = body.clone();
            App::new().route(
                BARE_PATH,
                web::get().to(move || {
                    let body = body.clone();
                    async move {
                        HttpResponse::Ok()
                            .content_type("application/json")
                            .insert_header((header::CACHE_CONTROL, "no-store"))
                            .body(body)
                    }
                }),
            )
        })
        .workers(workers)
        .disable_signals()
        .bind("127.0.0.1:0")?;
        let addr = server.addrs()[0];
        println!("listening on http://{addr}");
        let _ = std::io::Write::flush(&mut std::io::stdout());
        server.run().await
    })?;
    Ok(())
}

/// Starts the [`serve_bare`] reference serving `body`, and waits for its address.
pub(crate) fn start_bare(dir: &Path, body: &str) -> Result<(Server, String)> {
    let path = dir.join("bare-body.json");
    std::fs::write(&path, body)?;
    let mut command = process::clean_command(std::env::current_exe()?, dir);
    command
        .args(["--scenario", "bare-route"])
        .arg(format!("body={}", path.display()));
    let mut server = Server::spawn("bare actix-web route", command, dir.join("bare.log"))?;
    let addr = server.wait_for(
        "saying where it listens",
        Duration::from_secs(30),
        process::listening_addr,
    )?;
    Ok((server, addr))
}

/// The reference's label in the tables.
pub(super) const BARE_LABEL: &str = "bare actix-web route, the same bytes (the reference)";
