//! # overseer-core
//!
//! The domain of Overseer: executor health as Airflow's Jobs table records it.
//! It knows no executor kind (Celery lives in `overseer-celery`) and no HTTP
//! (that is `overseer-api`).
//!
//! # Layout
//! - [`job`]: the words of the Jobs table as Rust types: [`JobState`], [`JobType`],
//!   [`ExecutorHealth`], with the strings Airflow stores for them.
//! - [`entity`]: the sea-orm entity of Airflow's `job` table plus Overseer's four
//!   executor columns.
//! - [`storage`]: plain async functions over `&DatabaseConnection` that read and
//!   write job rows; they know nothing of actors or HTTP.
//! - [`error`]: this crate's one error type and its `Result` alias.

pub mod entity;
pub mod error;
pub mod job;
pub mod storage;

pub use error::{Error, Result};
pub use job::{ExecutorHealth, JobState, JobType};
