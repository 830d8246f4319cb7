//! sea-orm entities. There is one table: Airflow's `job`.

pub mod job;
