//! sea-orm entities: Airflow's `job` table, and Overseer's own history table.

pub mod history;
pub mod job;
