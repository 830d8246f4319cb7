//! What Overseer reads of Airflow's own tables, for the rules and the history:
//! one room, below the rules and the actors, above the storage it reads with.
//!
//! - [`routes`]: which supervised executor runs a task instance, as Airflow's
//!   scheduler decides (a task's `executor`, its DAG's team).
//! - [`queued`]: the task instances `queued`, per executor and queue, and the
//!   board the executors' actors take their share from.
//! - [`canary`]: the canary DAG's latest runs on each queue.
//! - [`capacity`]: each executor's slots taken and tasks waiting, and the live
//!   schedulers.
//! - [`reader`]: the one task that reads them all, off the report's path.
//! - [`cost`]: what an `unhealthy` span cost its executor: task instances lost.
//!
//! Nothing here imports the rules, the actors or the report: each module
//! depends on [`routes`], the detail's types and the storage's SQL helpers.

pub mod canary;
pub mod capacity;
pub mod cost;
pub mod queued;
pub mod reader;
pub mod routes;
