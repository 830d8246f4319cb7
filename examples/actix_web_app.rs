//! Overseer embedded in an actix-web application: the app serves its own routes
//! beside Overseer's (the dashboard at `/`, `/api/v2/monitor/health`, its stream,
//! `/metrics`, `/openapi.json`), and mounts Overseer's health handler at a path
//! of its own, `/health`. Handlers read the latest report; none touches the
//! database.
//!
//! ```sh
//! cargo run --example actix_web_app                  # http://127.0.0.1:8090/, until Ctrl-C
//! EXAMPLE_BIND=127.0.0.1:0 EXAMPLE_RUN_FOR=5s cargo run --example actix_web_app
//! ```

use std::time::Duration;

use actix_web::{App, HttpServer, get, web};
use overseer_api::ApiState;
use overseer_core::{Executor, Overseer};
use overseer_migration::{Migrator, MigratorTrait};
use tokio::sync::watch;

/// The most SSE clients this app serves at once.
const MAX_STREAM_CLIENTS: usize = 16;

#[get("/hello")]
async fn hello() -> &'static str {
    "an application that embeds Overseer: see / and /health\n"
}

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    let bind = std::env::var("EXAMPLE_BIND").unwrap_or_else(|_| "127.0.0.1:8090".into());
    let run_for = std::env::var("EXAMPLE_RUN_FOR")
        .ok()
        .map(|s| humantime::parse_duration(&s))
        .transpose()?;

    let dir = tempfile::tempdir()?;
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("app.db").display());
    let db = sea_orm::Database::connect(&url).await?;
    Migrator::up(&db, None).await?;
    db.close().await?;

    let overseer = Overseer::builder()
        .database(&url)
        .executor(Executor::unchecked("LocalExecutor"))
        .poll_interval(Duration::from_secs(1))
        .poll_timeout(Duration::from_millis(500))
        .heartbeat_interval(Duration::from_secs(1))
        .refresh_interval(Duration::from_millis(200))
        .start()
        .await?;

    // Everything Overseer's routes read; `stopping` ends their SSE streams.
    let (stopping, stopping_rx) = watch::channel(false);
    let state = web::Data::new(ApiState::new(&overseer, stopping_rx, MAX_STREAM_CLIENTS));
    let server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .service(hello)
            .route("/health", web::get().to(overseer_api::health::health))
            .configure(overseer_api::routes)
    })
    .workers(1)
    // On Ctrl-C actix stops the server itself, without `stopping`: open SSE
    // streams are cut after this long instead of its default 30 s.
    .shutdown_timeout(overseer_api::SHUTDOWN_TIMEOUT.as_secs())
    .bind(&bind)?;
    for address in server.addrs() {
        println!("listening on http://{address}");
    }
    let server = server.run();
    let handle = server.handle();
    if let Some(run_for) = run_for {
        actix_web::rt::spawn(async move {
            actix_web::rt::time::sleep(run_for).await;
            let _ = stopping.send(true);
            handle.stop(true).await;
        });
    }
    server.await?;

    // The server is gone: Overseer writes its last verdicts and ends its rows.
    overseer.shutdown().await?;
    Ok(())
}
