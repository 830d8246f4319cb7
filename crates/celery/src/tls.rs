//! TLS for the brokers, whatever the transport: what kombu's `ssl_*` options ask of
//! rustls ([`Verification`], [`read_pem`]), and TLS failures in plain words ([`fault`]).
//!
//! kombu's options, and what they become here (rustls, through each driver's TLS
//! feature; the system's roots unless `ssl_ca_certs` names a bundle):
//!
//! | kombu | here |
//! | --- | --- |
//! | `ssl_cert_reqs=CERT_REQUIRED` / `required` (the default) | the server's certificate is verified, host name included |
//! | `ssl_cert_reqs=CERT_OPTIONAL` / `optional` | the same: a Python client with `CERT_OPTIONAL` verifies a certificate the server sends, and a TLS server always sends one |
//! | `ssl_cert_reqs=CERT_NONE` / `none` | nothing is verified (the connection is still encrypted) |
//! | `ssl_check_hostname=false` | the chain is verified, the host name is not |
//! | `ssl_ca_certs=PATH` | the CA bundle (PEM) that replaces the system's roots (over AMQP, lapin adds it to them) |
//! | `ssl_certfile=PATH`, `ssl_keyfile=PATH` | the client certificate and its key (PEM), for servers that ask for one |
//!
//! The files are read when a connection is opened, not once at start, so a renewed
//! certificate is picked up at the next reconnect; a file that cannot be read is the
//! verdict's reason (its path is shown: paths are not secrets, contents never are).

use std::error::Error;
use std::sync::Arc;

use rustls::{AlertDescription, CertificateError};

use crate::broker::Reason;
use crate::url::{CertReqs, TlsOptions};

/// How much of the server's certificate is verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verification {
    /// The chain and the host name (the default).
    Full,
    /// The chain only (`ssl_check_hostname=false`).
    ChainOnly,
    /// Nothing (`ssl_cert_reqs=none`).
    None,
}

impl Verification {
    /// What `options` ask for.
    pub(crate) fn of(options: &TlsOptions) -> Self {
        match (options.cert_reqs, options.check_hostname) {
            (Some(CertReqs::None), _) => Self::None,
            (_, Some(false)) => Self::ChainOnly,
            _ => Self::Full,
        }
    }
}

/// The PEM file named by option `key` (`ssl_ca_certs`, ...), or why it cannot be read,
/// naming the broker.
pub(crate) fn read_pem(who: &str, key: &str, path: &str) -> Result<Vec<u8>, Reason> {
    // Read inside a poll: a file that does not come within a second is a
    // reason, not a hang.
    let (limit, deadline) = (
        overseer_core::file::MAX_CA_BUNDLE,
        std::time::Duration::from_secs(1),
    );
    overseer_core::file::read_within(std::path::Path::new(path), limit, deadline)
        .map_err(|e| format!("{who}: cannot read {key} {path}: {e}"))
}

/// A client certificate and its key, as PEM.
pub(crate) struct ClientIdentity {
    /// The certificate chain (PEM).
    pub(crate) cert: Vec<u8>,
    /// The private key (PEM).
    pub(crate) key: Vec<u8>,
}

/// The client certificate and key `options` name, read; `None` when they name none.
/// One without the other is a reason (Python's `load_cert_chain` takes the key from
/// the certificate's file when no key file is given: so does this).
pub(crate) fn client_identity(
    who: &str,
    options: &TlsOptions,
) -> Result<Option<ClientIdentity>, Reason> {
    match (&options.certfile, &options.keyfile) {
        (None, None) => Ok(None),
        (Some(cert), key) => {
            let cert_pem = read_pem(who, "ssl_certfile", cert)?;
            let key_pem = match key {
                Some(key) => read_pem(who, "ssl_keyfile", key)?,
                None => cert_pem.clone(),
            };
            Ok(Some(ClientIdentity {
                cert: cert_pem,
                key: key_pem,
            }))
        }
        (None, Some(_)) => Err(format!(
            "{who}: ssl_keyfile is set without ssl_certfile (the client certificate)"
        )),
    }
}

/// The TLS failure inside `err` (a driver's error, with rustls's somewhere in its
/// chain), in words an operator can act on, naming `who` and its `host`; `None`
/// when the failure is not about TLS.
pub(crate) fn fault(who: &str, host: &str, err: &(dyn Error + 'static)) -> Option<Reason> {
    let tls = find::<rustls::Error>(err)?;
    Some(describe(who, host, tls))
}

/// rustls's error, in plain words.
pub(crate) fn describe(who: &str, host: &str, e: &rustls::Error) -> Reason {
    use rustls::Error as E;
    match e {
        E::InvalidCertificate(cert) => match cert {
            CertificateError::UnknownIssuer => format!(
                "{who} presented a certificate that no trusted CA signed (untrusted certificate): \
                 set ssl_ca_certs to the CA bundle that issued it"
            ),
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                format!(
                    "{who} presented a certificate that is not valid for the name {host} \
                     (host name mismatch): connect by a name the certificate lists"
                )
            }
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                format!("{who} presented an expired certificate")
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                format!("{who} presented a certificate that is not valid yet (check the clocks)")
            }
            CertificateError::Revoked => format!("{who} presented a revoked certificate"),
            other => format!("{who} presented a certificate that was rejected ({other:?})"),
        },
        E::AlertReceived(alert) => match alert {
            AlertDescription::CertificateRequired => {
                format!("{who} requires a client certificate: set ssl_certfile and ssl_keyfile")
            }
            AlertDescription::BadCertificate
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateUnknown
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::CertificateRevoked
            | AlertDescription::CertificateExpired
            | AlertDescription::AccessDenied => format!(
                "{who} refused the client certificate (TLS alert {alert:?}): \
                 it must be signed by a CA the broker trusts"
            ),
            AlertDescription::HandshakeFailure => format!(
                "{who} ended the TLS handshake (handshake failure): \
                 it may require a client certificate, or share no cipher with this client"
            ),
            other => format!("{who} ended the TLS connection (TLS alert {other:?})"),
        },
        E::InvalidMessage(_) | E::InappropriateMessage { .. } | E::PeerSentOversizedRecord => {
            format!(
                "{who} did not answer in TLS (is this port plain TCP? then the URL's scheme \
                 should not ask for TLS)"
            )
        }
        other => format!("{who}: TLS failed ({other})"),
    }
}

/// The first `T` in `err`'s chain, looking inside the wrappers drivers use
/// (`std::io::Error` holding a custom error, `Arc<dyn Error>`), which
/// `Error::source` does not always step into.
pub(crate) fn find<'a, T: Error + 'static>(err: &'a (dyn Error + 'static)) -> Option<&'a T> {
    let mut stack: Vec<&'a (dyn Error + 'static)> = vec![err];
    // A bound on the walk: error chains are short; a cycle would otherwise be endless.
    let mut steps = 0;
    while let Some(e) = stack.pop() {
        steps += 1;
        if steps > 32 {
            return None;
        }
        if let Some(found) = e.downcast_ref::<T>() {
            return Some(found);
        }
        if let Some(arc) = e.downcast_ref::<Arc<dyn Error + Send + Sync>>() {
            stack.push(arc.as_ref());
        }
        if let Some(inner) = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            stack.push(inner);
        }
        if let Some(source) = e.source() {
            stack.push(source);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rustls_errors_are_found_inside_io_errors_and_arcs() {
        let tls = rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer);
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, tls);
        let arc: Arc<dyn Error + Send + Sync> = Arc::new(io);
        let reason = fault("broker rediss://b:6380/0", "b", &arc).expect("a TLS fault");
        assert!(reason.contains("untrusted certificate"), "{reason}");
        let plain = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(fault("broker", "b", &plain), None);
    }

    #[test]
    fn cert_reqs_and_check_hostname_choose_the_verification() {
        let with = |cert_reqs, check_hostname| {
            Verification::of(&TlsOptions {
                cert_reqs,
                check_hostname,
                ..TlsOptions::default()
            })
        };
        assert_eq!(with(None, None), Verification::Full);
        assert_eq!(with(Some(CertReqs::Optional), None), Verification::Full);
        assert_eq!(
            with(Some(CertReqs::Required), Some(false)),
            Verification::ChainOnly
        );
        assert_eq!(with(Some(CertReqs::None), Some(true)), Verification::None);
    }
}
