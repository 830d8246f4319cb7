//! overseer-celery's integration tests, as modules of one test binary (one link
//! instead of one per file); nextest still runs each test in a process of its
//! own. Filter a file's tests by its module: `-E 'test(/^hostile_reasons::/)'`.

mod support;
// Test certificates, also used by the root's TLS tests.
#[path = "support/certs.rs"]
mod certs;
// A relay whose broker-to-client direction can be held (the flood test).
#[path = "support/relay.rs"]
mod relay;

mod hostile_reasons;
mod no_password_leaks;
mod queues_detail;
mod rabbitmq_broker;
mod redis_broker;
mod sentinel;
mod tls;
mod tls_amqp;
mod url_forms;
mod worker_events;
mod worker_ping;
