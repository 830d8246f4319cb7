//! # overseer-checks
//!
//! Health checks for any executor, as Consul and Kubernetes offer them: a command
//! Overseer runs ([`CommandCheck`]) and a URL it asks ([`HttpCheck`]); and the
//! check of Airflow's EdgeExecutor, which keeps everything it knows in Airflow's
//! own database ([`EdgeCheck`]). The first two cover
//! every executor that has no check of its own (the AWS executors for ECS, Batch
//! and Lambda, custom executors, KubernetesExecutor until its own check lands):
//! whatever has a health probe can be supervised. The composition root picks one
//! from an `[[executors]]` entry's `check_command` or `check_url`; the supervisor
//! runs it through the same actors as every other check.
//!
//! | check | healthy | unhealthy (with the reason) | unknown | the instance |
//! | --- | --- | --- | --- | --- |
//! | command | exit 0 | exit 1 (its first line of output); not found; timed out | any other exit, or death by a signal the check did not send | the program, without its arguments |
//! | HTTP `GET` | 2xx | any other status (the status line); refused, timed out, no such host | `https://`, until a TLS backend is chosen | the URL without its query, redacted |
//! | Edge | a connected worker takes jobs from every queue where jobs wait | no worker connected while jobs wait; a queue with waiting jobs no connected worker serves; every worker `unknown`/`offline`; the database unreadable | no `edge_worker` table | `edge_worker@host:port/db` |
//!
//! Every reason, of every check, goes through [`overseer_core::reason`]: one
//! line, at most 240 characters, lists cut with `and N more`, no credential.
//!
//! Each answers within its own deadline, a little inside the supervisor's
//! `poll_timeout` (`budget`), so the verdict carries the real reason rather
//! than the supervisor's `no reply within 5s`. Only the Edge check knows its
//! executor kind, from the tables it reads.
//!
//! ```no_run
//! use std::time::Duration;
//! use overseer_core::secret::SecretUrl;
//!
//! let argv = ["/usr/local/bin/probe".to_owned(), "--fast".to_owned()];
//! let probe = overseer_checks::command::executor("my.company.MyExecutor", &argv, Duration::from_secs(5))?;
//! assert_eq!(probe.instance.as_deref(), Some("/usr/local/bin/probe"));
//!
//! let url = SecretUrl::new("http://ecs-probe:8080/health?token=s3cret");
//! let asked = overseer_checks::http::executor("aws:EcsExecutor", &url, None, Duration::from_secs(5))?;
//! assert_eq!(asked.instance.as_deref(), Some("http://ecs-probe:8080/health"));
//! # Ok::<(), overseer_checks::Error>(())
//! ```
//!
//! # Layout
//! - [`command`]: [`CommandCheck`], a program run without a shell, its exit code
//!   the verdict; killed with its whole process group at the deadline, and reaped.
//! - [`http`]: [`HttpCheck`], a blocking `GET` (ureq), its status the verdict.
//! - [`edge`]: [`EdgeCheck`], the `edge_worker` and `edge_job` rows read (sea-orm),
//!   judged by one pure function ([`edge::judge`]).
//! - [`orphans`]: the processes a probe leaves in a session of its own
//!   (`setsid`), adopted and ended where the process may (the binary).
//! - `budget`: the deadline a check gives itself inside `poll_timeout`.
//! - [`error`]: [`Error`], this crate's one error type: a check that cannot be
//!   built from its configuration.

#![warn(missing_docs)]

mod budget;
pub mod command;
pub mod edge;
pub mod error;
pub mod http;
pub mod orphans;

pub use command::CommandCheck;
pub use edge::EdgeCheck;
pub use error::{Error, Result};
pub use http::HttpCheck;
