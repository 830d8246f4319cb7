//! # overseer-celery
//!
//! The Celery executor's health check: the broker (Redis or RabbitMQ) is the
//! instance. It implements `overseer-core`'s health check and knows no HTTP.
