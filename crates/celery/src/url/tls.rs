//! The TLS settings a broker URL asks for: `rediss://`, `amqps://`, and kombu's
//! `ssl_*` query parameters (how they become rustls settings is `crate::tls`).

use super::parts::Parts;
use crate::error::{BrokerUrlError, Position, Result};

/// `ssl_cert_reqs`: how kombu checks the server's certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CertReqs {
    /// `CERT_REQUIRED` / `required`.
    Required,
    /// `CERT_OPTIONAL` / `optional`.
    Optional,
    /// `CERT_NONE` / `none`.
    None,
}

/// The TLS settings a URL asks for (`rediss://`, `amqps://`, `ssl_*` parameters).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// `ssl_cert_reqs`.
    pub cert_reqs: Option<CertReqs>,
    /// `ssl_ca_certs`: the CA bundle's path.
    pub ca_certs: Option<String>,
    /// `ssl_certfile`: the client certificate's path.
    pub certfile: Option<String>,
    /// `ssl_keyfile`: the client key's path.
    pub keyfile: Option<String>,
    /// `ssl_check_hostname` (anything but `false` is true, as in kombu).
    pub check_hostname: Option<bool>,
}

impl TlsOptions {
    /// These options with every one `other` sets taken from `other`.
    pub fn overridden_by(self, other: &TlsOptions) -> Self {
        Self {
            cert_reqs: other.cert_reqs.or(self.cert_reqs),
            ca_certs: other.ca_certs.clone().or(self.ca_certs),
            certfile: other.certfile.clone().or(self.certfile),
            keyfile: other.keyfile.clone().or(self.keyfile),
            check_hostname: other.check_hostname.or(self.check_hostname),
        }
    }
}

/// The TLS settings of an entry: TLS is on for a secure scheme, or (as kombu does)
/// when the query carries `ssl` or any `ssl_*` parameter.
pub(super) fn tls_options(
    secure_scheme: bool,
    parts: &Parts<'_>,
    at: &Position,
) -> Result<Option<TlsOptions>> {
    let asks_tls = parts
        .query
        .iter()
        .any(|(k, _)| k == "ssl" || k.starts_with("ssl_"));
    if !secure_scheme && !asks_tls {
        return Ok(None);
    }
    let cert_reqs = match parts.query("ssl_cert_reqs") {
        None => None,
        Some("CERT_REQUIRED" | "required") => Some(CertReqs::Required),
        Some("CERT_OPTIONAL" | "optional") => Some(CertReqs::Optional),
        Some("CERT_NONE" | "none") => Some(CertReqs::None),
        Some(_) => return Err(BrokerUrlError::InvalidCertReqs { at: at.clone() }),
    };
    Ok(Some(TlsOptions {
        cert_reqs,
        ca_certs: parts.query("ssl_ca_certs").map(str::to_owned),
        certfile: parts.query("ssl_certfile").map(str::to_owned),
        keyfile: parts.query("ssl_keyfile").map(str::to_owned),
        check_hostname: parts
            .query("ssl_check_hostname")
            .map(|v| !v.eq_ignore_ascii_case("false")),
    }))
}
