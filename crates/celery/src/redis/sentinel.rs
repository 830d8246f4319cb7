//! A Redis master found through its sentinels, as kombu's sentinel transport finds
//! it: each sentinel in turn is asked for the master by name
//! (`SENTINEL get-master-addr-by-name`), and the first address given is the broker.
//! With TLS (`ssl_*` options, or Celery's `broker_use_ssl`), the master is reached
//! over TLS and the sentinels in plain TCP, as kombu does without `sentinel_kwargs`.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo};
use tokio::time::{Instant, timeout_at};

use super::RedisCheck;
use crate::broker::{Reason, timed_out};
use crate::tls::Verification;

impl RedisCheck {
    /// Opens a connection to the master named `master_name`, as `sentinels` know
    /// it, with the master's `settings`; all before `deadline`.
    pub(super) async fn through_sentinels(
        &self,
        sentinels: &[(String, u16)],
        master_name: &str,
        settings: &RedisConnectionInfo,
        deadline: Instant,
        budget: Duration,
        push: Option<super::subscription::EventSink>,
    ) -> Result<MultiplexedConnection, Reason> {
        let mut failures = Vec::new();
        let mut answered = false;
        for (i, (host, port)) in sentinels.iter().enumerate() {
            let sentinel = ConnectionAddr::Tcp(host.clone(), *port)
                .into_connection_info()
                .expect("an address is always connection info");
            let who = format!("sentinel {host}:{port}");
            // Each sentinel asked in turn gets an equal share of the time left, so
            // one that hangs cannot use up the poll before the next is asked.
            let left = deadline.saturating_duration_since(Instant::now());
            let share = left / u32::try_from(sentinels.len() - i).unwrap_or(u32::MAX);
            let (ask_by, ask_budget) = (Instant::now() + share, share);
            let asked = async {
                let mut conn = self.open(&who, sentinel, ask_by, ask_budget, None).await?;
                timeout_at(
                    ask_by,
                    redis::cmd("SENTINEL")
                        .arg("get-master-addr-by-name")
                        .arg(master_name)
                        .query_async::<Option<(String, u16)>>(&mut conn),
                )
                .await
                .map_err(|_| timed_out(&who, ask_budget))?
                .map_err(|e| self.describe_for(&who, e, ask_budget))
            };
            match asked.await {
                Ok(Some((master_host, master_port))) => {
                    // Over TLS, only the master is: kombu reaches the sentinels with
                    // their own settings (`sentinel_kwargs`), plain by default.
                    let addr = match &self.tls {
                        Some(options) => ConnectionAddr::TcpTls {
                            host: master_host,
                            port: master_port,
                            insecure: Verification::of(options) == Verification::None,
                            tls_params: None,
                        },
                        None => ConnectionAddr::Tcp(master_host, master_port),
                    };
                    let info = addr
                        .into_connection_info()
                        .expect("an address is always connection info")
                        .set_redis_settings(settings.clone());
                    return self
                        .open(&self.broker(), info, deadline, budget, push)
                        .await;
                }
                Ok(None) => answered = true,
                Err(reason) => failures.push(reason),
            }
        }
        Err(if answered {
            format!(
                "the sentinels of broker {} know no master named {master_name:?}",
                self.identity
            )
        } else {
            format!(
                "no sentinel of broker {} answered: {}",
                self.identity,
                failures.join("; ")
            )
        })
    }
}
