//! `[api] tls_cert` and `tls_key`: read and checked here, once, into the
//! server's TLS settings. A problem is a [`TlsError`] that names its key, so
//! validation blames the right one and serving states the same problem.

use std::fmt;
use std::path::{Path, PathBuf};

use super::ApiConfig;

/// What is wrong with the API's TLS settings, and which key it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsError {
    /// `api.tls_cert` or `api.tls_key`.
    pub key: &'static str,
    /// The file the key names, when the problem is with that file.
    pub file: Option<PathBuf>,
    /// What is wrong.
    pub problem: String,
}

impl TlsError {
    fn new(key: &'static str, problem: impl Into<String>) -> Self {
        Self {
            key,
            file: None,
            problem: problem.into(),
        }
    }

    fn in_file(key: &'static str, file: &Path, problem: impl Into<String>) -> Self {
        Self {
            key,
            file: Some(file.to_owned()),
            problem: problem.into(),
        }
    }
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.file {
            Some(file) => write!(f, "{} {}: {}", self.key, file.display(), self.problem),
            None => write!(f, "{}: {}", self.key, self.problem),
        }
    }
}

impl std::error::Error for TlsError {}

/// How large a PEM file may be: a chain of a dozen certificates is 20 KiB.
const MAX_PEM: u64 = 1024 * 1024;

/// The server's TLS settings from `tls_cert` (a PEM certificate chain) and
/// `tls_key` (its private key, PEM), or `None` when neither is set. Both or
/// neither must be set, and each must be a readable file that, together,
/// make a TLS server.
pub fn server_config(api: &ApiConfig) -> Result<Option<rustls::ServerConfig>, TlsError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let (cert, key) = match (&api.tls_cert, &api.tls_key) {
        (None, None) => return Ok(None),
        (Some(_), None) => {
            return Err(TlsError::new(
                "api.tls_cert",
                "is set without api.tls_key (the certificate's private key)",
            ));
        }
        (None, Some(_)) => {
            return Err(TlsError::new(
                "api.tls_key",
                "is set without api.tls_cert (the certificate it belongs to)",
            ));
        }
        (Some(cert), Some(key)) => (cert, key),
    };
    let read = |name: &'static str, path: &std::path::Path| {
        overseer_core::file::read(path, MAX_PEM)
            .map_err(|e| TlsError::new(name, format!("cannot read {}: {e}", path.display())))
    };
    let (cert_pem, key_pem) = (read("api.tls_cert", cert)?, read("api.tls_key", key)?);
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::in_file("api.tls_cert", cert, e.to_string()))?;
    if chain.is_empty() {
        return Err(TlsError::in_file(
            "api.tls_cert",
            cert,
            "holds no PEM certificate",
        ));
    }
    let private_key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| TlsError::in_file("api.tls_key", key, e.to_string()))?;
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, private_key)
        .map_err(|e| {
            TlsError::new(
                "api.tls_cert",
                format!("does not make a TLS server with api.tls_key: {e}"),
            )
        })?;
    Ok(Some(config))
}
