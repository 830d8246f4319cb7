//! Overseer embedded in an actix-web application: the app serves its own routes
//! and, at `/health`, the report Overseer publishes. Handlers read the latest
//! report; none touches the database.
//!
//! ```sh
//! cargo run --example actix_web_app                  # http://127.0.0.1:8090/health, until Ctrl-C
//! EXAMPLE_BIND=127.0.0.1:0 EXAMPLE_RUN_FOR=5s cargo run --example actix_web_app
//! ```

use std::time::Duration;

use actix_web::{App, HttpResponse, HttpServer, get, web};
use overseer_core::{Executor, Overseer};
use overseer_migration::{Migrator, MigratorTrait};

#[get("/health")]
async fn health(overseer: web::Data<Overseer>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(overseer.report().json().to_owned())
}

#[get("/")]
async fn index() -> &'static str {
    "an application that embeds Overseer: see /health\n"
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

    let overseer = web::Data::new(
        Overseer::builder()
            .database(&url)
            .executor(Executor::unchecked("LocalExecutor"))
            .poll_interval(Duration::from_secs(1))
            .poll_timeout(Duration::from_millis(500))
            .heartbeat_interval(Duration::from_secs(1))
            .refresh_interval(Duration::from_millis(200))
            .start()
            .await?,
    );

    let app_state = overseer.clone();
    let server = HttpServer::new(move || {
        App::new()
            .app_data(app_state.clone())
            .service(health)
            .service(index)
    })
    .workers(1)
    .bind(&bind)?;
    for address in server.addrs() {
        println!("listening on http://{address}");
    }
    let server = server.run();
    let handle = server.handle();
    if let Some(run_for) = run_for {
        actix_web::rt::spawn(async move {
            actix_web::rt::time::sleep(run_for).await;
            handle.stop(true).await;
        });
    }
    server.await?;

    // The server is gone: this is the last reference, so Overseer can end its rows.
    match std::sync::Arc::try_unwrap(overseer.into_inner()) {
        Ok(overseer) => overseer.shutdown().await?,
        Err(_) => eprintln!("overseer still shared; its rows end in the background"),
    }
    Ok(())
}
