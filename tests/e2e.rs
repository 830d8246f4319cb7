//! Overseer's end-to-end tests: the real binary, databases, brokers, Celery
//! workers, Airflow and browsers. One test binary (one link of the whole stack
//! instead of one per file); nextest still runs every test in a process of its
//! own, so each file's tests are as isolated as when each file was a binary.
//! Filter a file's tests by its module: `-E 'test(/^tls::/)'`.

mod support;

mod abuse;
mod airflow_celery_worker;
mod airflow_health;
mod airflow_home_card;
mod airflow_plugin;
mod alerts;
mod api;
mod bounds;
mod canary;
mod celery;
mod cli;
mod config;
mod custom_checks;
mod dashboard;
mod dashboard_layout;
mod examples;
mod faults;
mod flap;
mod freshness;
mod history;
mod instances;
mod interop_airflow;
mod interop_edge;
mod limits;
mod logs;
mod lost_work;
mod newcomer;
mod no_worker;
mod package;
mod probes;
mod prometheus;
mod result_backend;
mod saturation;
mod schemathesis;
mod secrets;
mod stranded_work;
mod tls;
mod unconsumed;
mod work_flowing;
mod worker_events;
