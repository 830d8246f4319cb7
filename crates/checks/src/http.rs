//! [`HttpCheck`]: a `GET` of a URL at each poll; its status is the verdict.
//!
//! | the answer | the verdict |
//! | --- | --- |
//! | 2xx | `healthy` |
//! | any other status, 3xx included | `unhealthy: GET http://probe:8080/health answered 503 Service Unavailable` |
//! | connection refused | `unhealthy: GET http://probe:8080/health failed: connection refused` |
//! | nothing within the deadline (connect, or the status line) | `unhealthy: GET http://probe:8080/health failed: no answer within 4.5s` |
//! | no such host | `unhealthy: GET http://nope:8080/health failed: host nope not found` |
//! | an `https://` server whose certificate is not trusted, not for its name, or expired | `unhealthy: GET https://probe/health failed: the server's certificate is signed by no trusted CA (set check_cacert to the CA that issued it)`, and so on |
//!
//! # How it asks
//! - With ureq, which blocks: the check is a [`BlockingHealthCheck`], run by the
//!   actors on a thread of its own, one at most per executor.
//! - One deadline (`budget`: 90 % of `poll_timeout`) bounds connecting, sending
//!   and reading the status line and headers. Name resolution goes through the
//!   system's resolver, which ureq cannot interrupt: a resolver that hangs is
//!   caught by the supervisor's own `no reply within 5s`, and the in-flight
//!   guard keeps it to one thread.
//! - A new connection each poll (no pool), as a Kubernetes `httpGet` probe:
//!   the question is whether a client can get in now. No proxy from the
//!   environment. The body is never read.
//! - Redirects are not followed: a 3xx is `unhealthy` and names the status;
//!   point `check_url` at the final URL.
//! - A user and password in the URL are sent as HTTP Basic authentication, and
//!   the query may carry a token: the URL is held as a [`SecretUrl`], shown only
//!   redacted in reasons and logs, and the instance is the URL without its query.
//! - TLS: rustls (on ring, as the rest of Overseer), verifying the server's
//!   certificate and host name against the system's roots, or against only the
//!   CA bundle `check_cacert` gives (as `overseer health --cacert`). There is
//!   no way to skip verification: a probe worth trusting is worth a CA file.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use overseer_core::duration::short;
use overseer_core::secret::{Scrubber, SecretUrl, redact};
use overseer_core::{BlockingHealthCheck, Executor, ExecutorHealth, Reason};

use crate::budget;
use crate::error::{Error, Result};

/// Sent as `User-Agent`, so a probe's logs can tell Overseer's polls apart.
const USER_AGENT: &str = concat!("overseer/", env!("CARGO_PKG_VERSION"), " (health check)");

/// A health check that GETs a URL; cloning it is cheap.
#[derive(Clone)]
pub struct HttpCheck {
    /// The URL, with whatever token it carries; shown only redacted.
    url: SecretUrl,
    /// Its host, for the reason when it cannot be resolved.
    host: String,
    /// The URL without query or fragment, redacted: what counts as the instance.
    instance: String,
    /// How long one GET may take (`budget::deadline` of `poll_timeout`).
    deadline: Duration,
    /// No pool, no redirects, the deadline on every wait it can bound.
    agent: ureq::Agent,
}

impl std::fmt::Debug for HttpCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpCheck")
            .field("url", &self.url)
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

/// What the composition root calls: an executor named `executor_class` whose
/// check GETs `url`, answering within `poll_timeout`. The instance is the URL
/// without its query, redacted.
///
/// `cacert`: a PEM bundle that replaces the system's roots for an `https://` URL.
pub fn executor(
    executor_class: &str,
    url: &SecretUrl,
    cacert: Option<&Path>,
    poll_timeout: Duration,
) -> Result<Executor> {
    let check = HttpCheck::new(url, cacert, poll_timeout)?;
    let instance = check.instance().to_owned();
    Ok(Executor::blocking(executor_class, check).with_instance(instance))
}

/// Whether `url` can be asked: an `http://` or `https://` URL with a host. The
/// error never quotes it.
pub fn parse_url(url: &SecretUrl) -> Result<url::Url> {
    let parsed = url::Url::parse(url.expose_secret())?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(Error::Scheme(parsed.scheme().to_owned()));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(Error::NoHost);
    }
    Ok(parsed)
}

impl HttpCheck {
    /// A check that GETs `url` and answers within `poll_timeout`; an
    /// `https://` server is verified against `cacert`'s CAs when given, else
    /// the system's roots.
    pub fn new(url: &SecretUrl, cacert: Option<&Path>, poll_timeout: Duration) -> Result<Self> {
        let parsed = parse_url(url)?;
        let mut bare = parsed.clone();
        bare.set_query(None);
        bare.set_fragment(None);
        let deadline = budget::deadline(poll_timeout);
        let mut agent = ureq::AgentBuilder::new()
            .timeout(deadline)
            .timeout_connect(deadline)
            .redirects(0)
            .max_idle_connections(0)
            .user_agent(USER_AGENT);
        if let Some(cacert) = cacert {
            agent = agent.tls_config(tls_config(cacert)?);
        }
        Ok(Self {
            url: url.clone(),
            host: parsed.host_str().unwrap_or_default().to_owned(),
            instance: redact(bare.as_str()),
            deadline,
            agent: agent.build(),
        })
    }

    /// The URL without query or fragment, redacted: the instance.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// How long one GET may take.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// `GET <url> answered 503 Service Unavailable`.
    fn answered(&self, response: &ureq::Response) -> String {
        // Sanitised (one line, cut) with the whole reason, in `get_health`.
        let line = format!("{} {}", response.status(), response.status_text());
        format!("GET {} answered {}", self.url, line.trim_end())
    }

    /// Why no status came back, in plain words.
    fn unreachable(&self, transport: &ureq::Transport) -> String {
        let io_kind = std::error::Error::source(transport)
            .and_then(|s| s.downcast_ref::<io::Error>())
            .map(io::Error::kind);
        if let Some(tls) = find_tls_error(transport) {
            return format!("GET {} failed: {}", self.url, tls_words(&self.host, tls));
        }
        let why = match (transport.kind(), io_kind) {
            (_, Some(io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock)) => {
                format!("no answer within {}", short(self.deadline))
            }
            (_, Some(io::ErrorKind::ConnectionRefused)) => "connection refused".to_owned(),
            (_, Some(io::ErrorKind::ConnectionReset | io::ErrorKind::UnexpectedEof)) => {
                "the connection closed before an answer".to_owned()
            }
            (ureq::ErrorKind::Dns, _) => format!("host {} not found", self.host),
            (ureq::ErrorKind::BadStatus | ureq::ErrorKind::BadHeader, _) => {
                "the answer is not HTTP".to_owned()
            }
            _ => transport.to_string(),
        };
        // Never `{url}:`: a scrubber reads a URL up to white space, and would
        // take the colon for part of a masked query value.
        format!("GET {} failed: {why}", self.url)
    }
}

impl BlockingHealthCheck for HttpCheck {
    fn get_health(&self) -> ExecutorHealth {
        let reason = match self.agent.get(self.url.expose_secret()).call() {
            Ok(response) if (200..300).contains(&response.status()) => {
                return ExecutorHealth::Healthy;
            }
            Ok(response) | Err(ureq::Error::Status(_, response)) => self.answered(&response),
            Err(ureq::Error::Transport(transport)) => self.unreachable(&transport),
        };
        // The URL's own secrets, wherever the server or the transport echoed
        // them, masked before the reason is cut.
        let scrubber = Scrubber::default().with_url(&self.url);
        ExecutorHealth::unhealthy(Reason::scrubbed(&scrubber, &reason))
    }
}

/// A TLS client that trusts only the CAs of `cacert` (a PEM bundle): for
/// `check_cacert` and `overseer health --cacert`. The error names the file,
/// which is not a secret.
pub fn tls_config(cacert: &Path) -> Result<Arc<rustls::ClientConfig>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let file = cacert.display().to_string();
    let pem = overseer_core::file::read(cacert, overseer_core::file::MAX_CA_BUNDLE)
        .map_err(|e| Error::CaFile(file.clone(), e.to_string()))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::CaFile(file.clone(), pem_problem(&e)))?;
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(Error::CaFile(file, "holds no PEM certificate".into()));
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| Error::CaFile(file, e.to_string()))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Why a PEM file could not be read, in plain words.
fn pem_problem(e: &rustls::pki_types::pem::Error) -> String {
    use rustls::pki_types::pem::Error as Pem;
    match e {
        Pem::Io(io) if io.kind() == io::ErrorKind::NotFound => "no such file".into(),
        Pem::Io(io) if io.kind() == io::ErrorKind::PermissionDenied => "permission denied".into(),
        Pem::Io(io) => io.to_string(),
        other => format!("is not a PEM file ({other:?})"),
    }
}

/// rustls's error somewhere in a transport error's chain (ureq keeps it
/// inside an `io::Error`).
fn find_tls_error(transport: &ureq::Transport) -> Option<&rustls::Error> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(transport);
    for _ in 0..16 {
        let e = next?;
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        next = match e.downcast_ref::<io::Error>().and_then(io::Error::get_ref) {
            Some(inner) => Some(inner),
            None => e.source(),
        };
    }
    None
}

/// A TLS failure, in words an operator can act on.
fn tls_words(host: &str, e: &rustls::Error) -> String {
    use rustls::{CertificateError as C, Error as E};
    match e {
        E::InvalidCertificate(C::UnknownIssuer) => "the server's certificate is signed by no \
            trusted CA (set check_cacert to the CA that issued it)"
            .into(),
        E::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => {
            format!(
                "the server's certificate is not valid for the name {host} (host name mismatch)"
            )
        }
        E::InvalidCertificate(C::Expired | C::ExpiredContext { .. }) => {
            "the server's certificate has expired".into()
        }
        E::InvalidCertificate(C::NotValidYet | C::NotValidYetContext { .. }) => {
            "the server's certificate is not valid yet (check the clocks)".into()
        }
        E::InvalidMessage(_) | E::InappropriateMessage { .. } | E::PeerSentOversizedRecord => {
            "the server did not answer in TLS (is it plain http://?)".into()
        }
        other => format!("TLS failed ({other})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_http_urls_with_a_host_are_asked() {
        for (url, problem) in [
            (
                "ftp://h/x",
                "must be an http:// or https:// URL, not ftp://",
            ),
            ("http://", "is not a URL: empty host"),
            (
                "probe:8080/health",
                "must be an http:// or https:// URL, not probe://",
            ),
            ("/health", "is not a URL: relative URL without a base"),
        ] {
            let err = parse_url(&SecretUrl::new(url)).unwrap_err();
            assert_eq!(err.to_string(), problem, "{url}");
        }
        parse_url(&SecretUrl::new("http://probe:8080/health")).unwrap();
        parse_url(&SecretUrl::new("https://probe/health")).unwrap();
    }

    #[test]
    fn the_instance_is_the_url_without_query_or_password() {
        let url = SecretUrl::new("http://ops:hunter2@probe:8080/health?token=s3cret#x");
        let check = HttpCheck::new(&url, None, Duration::from_secs(5)).unwrap();
        assert_eq!(check.instance(), "http://ops:***@probe:8080/health");
        assert!(!format!("{check:?}").contains("s3cret"));
        assert!(!format!("{check:?}").contains("hunter2"));
        assert_eq!(check.deadline(), Duration::from_millis(4500));
    }
}
