//! How a Celery executor is checked, beside its broker URL: [`CheckSettings`],
//! Airflow's defaults for them, and the settings that can never work.

use std::time::Duration;

use crate::backend::ResultBackend;
use crate::error::{BrokerUrlError, Result};
use crate::ping::DEFAULT_CONTROL_EXCHANGE;
use crate::url::{BrokerUrl, TlsOptions, Transport};

/// The longest queue name AMQP can carry (a short string).
const AMQP_NAME_MAX: usize = 255;

/// Airflow's `[celery] worker_concurrency` by default.
pub const DEFAULT_WORKER_CONCURRENCY: u32 = 16;

/// Airflow's default queue (`[operators] default_queue`).
pub const AIRFLOW_DEFAULT_QUEUE: &str = "default";

/// How a Celery executor is checked, beside its broker URL.
#[derive(Debug, Clone)]
pub struct CheckSettings {
    /// Queues whose depth is reported (Airflow's default is `default`).
    pub queues: Vec<String>,
    /// Also ping the workers with Celery's remote control.
    pub worker_ping: bool,
    /// Follow the workers' own heartbeats (Celery's `worker` events): each
    /// worker's state, tasks and load in the detail, and `min_workers` counted
    /// without remote control. On by default.
    pub worker_events: bool,
    /// Fewer live workers is `unhealthy`: those answering the ping with
    /// `worker_ping`, else those whose heartbeats are heard (`worker_events`).
    pub min_workers: u32,
    /// The tasks each worker runs at once, as Airflow starts it (`[celery]
    /// worker_concurrency`, or the largest of `worker_autoscale`): against the
    /// tasks its heartbeats say it runs, its free slots.
    pub worker_concurrency: Option<u32>,
    /// The supervisor's `poll_timeout`: this check answers within it.
    pub poll_timeout: Duration,
    /// Celery's `control_exchange` (`celery`): the pidbox exchanges are named after it.
    pub control_exchange: String,
    /// Celery's `master_name` transport option, for `sentinel://` URLs that do not
    /// carry `?master_name=` themselves.
    pub sentinel_master_name: Option<String>,
    /// Celery's `broker_use_ssl` (what Airflow's `[celery] ssl_active`, `ssl_key`,
    /// `ssl_cert` and `ssl_cacert` become): TLS for every Redis, sentinel and AMQP
    /// broker of the URL, these options over the URL's own `ssl_*` ones.
    pub broker_use_ssl: Option<TlsOptions>,
    /// Airflow's `[celery] result_backend`, when it is set and can be asked
    /// ([`crate::backend`]).
    pub result_backend: Option<ResultBackend>,
}

impl Default for CheckSettings {
    fn default() -> Self {
        Self {
            queues: vec![AIRFLOW_DEFAULT_QUEUE.to_owned()],
            worker_ping: false,
            worker_events: true,
            min_workers: 0,
            worker_concurrency: Some(DEFAULT_WORKER_CONCURRENCY),
            poll_timeout: Duration::from_secs(5),
            control_exchange: DEFAULT_CONTROL_EXCHANGE.to_owned(),
            sentinel_master_name: None,
            broker_use_ssl: None,
            result_backend: None,
        }
    }
}

impl CheckSettings {
    /// Refuses the queues that can never be checked: an empty name, or one
    /// longer than AMQP can carry when a broker of `broker` speaks AMQP.
    pub(super) fn check_queues(&self, broker: &BrokerUrl) -> Result<()> {
        let has_amqp = broker
            .brokers()
            .iter()
            .any(|b| matches!(b.transport, Transport::Amqp(_)));
        for queue in &self.queues {
            if queue.is_empty() {
                return Err(BrokerUrlError::EmptyQueueName);
            }
            if has_amqp && queue.len() > AMQP_NAME_MAX {
                return Err(BrokerUrlError::QueueNameTooLong {
                    name: queue.chars().take(40).collect(),
                });
            }
        }
        Ok(())
    }
}
