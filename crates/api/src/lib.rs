//! # overseer-api
//!
//! The HTTP API: the Airflow-compatible health JSON, the dashboard and the
//! metrics, served from the report `overseer-core` publishes. It knows no Celery.
