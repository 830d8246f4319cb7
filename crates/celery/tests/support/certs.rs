//! Certificates made at run time for the TLS tests: a CA, servers and clients it
//! signs (valid, expired, for another name), each written as PEM into a folder of
//! the test's own. Shared with the binary's tests (`tests/tls.rs` includes this file).
#![allow(dead_code)] // each test file uses its own part of this module

use std::path::PathBuf;

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose,
    date_time_ymd,
};

/// A certificate and its key, as PEM files.
#[derive(Debug, Clone)]
pub struct Issued {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM, PKCS#8).
    pub key: PathBuf,
}

/// A certificate authority of the test's own, and the folder its files live in.
pub struct Pki {
    dir: tempfile::TempDir,
    name: String,
    ca: Certificate,
    ca_key: KeyPair,
}

impl Pki {
    /// A new CA called `name`, its certificate written to `ca.pem`.
    pub fn new(name: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("overseer-pki-")
            .tempdir()
            .expect("a temporary folder");
        let ca_key = KeyPair::generate().expect("a key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} CA"));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = params.self_signed(&ca_key).expect("a CA certificate");
        let pki = Self {
            dir,
            name: name.to_owned(),
            ca,
            ca_key,
        };
        std::fs::write(pki.ca_pem(), pki.ca.pem()).expect("ca.pem written");
        pki
    }

    /// The CA's certificate (PEM).
    pub fn ca_pem(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// A server certificate for `names` (host names or IP addresses), valid now.
    pub fn server(&self, file: &str, names: &[&str]) -> Issued {
        self.issue(file, names, false)
    }

    /// A server certificate for `names` that expired in 2021.
    pub fn expired_server(&self, file: &str, names: &[&str]) -> Issued {
        self.issue(file, names, true)
    }

    /// A client certificate.
    pub fn client(&self, file: &str) -> Issued {
        self.issue(file, &["overseer-client"], false)
    }

    fn issue(&self, file: &str, names: &[&str], expired: bool) -> Issued {
        let key = KeyPair::generate().expect("a key");
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).expect("params");
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{} {file}", self.name));
        if expired {
            params.not_before = date_time_ymd(2020, 1, 1);
            params.not_after = date_time_ymd(2021, 1, 1);
        }
        let cert = params
            .signed_by(&key, &self.ca, &self.ca_key)
            .expect("a signed certificate");
        let issued = Issued {
            cert: self.dir.path().join(format!("{file}.pem")),
            key: self.dir.path().join(format!("{file}-key.pem")),
        };
        std::fs::write(&issued.cert, cert.pem()).expect("certificate written");
        std::fs::write(&issued.key, key.serialize_pem()).expect("key written");
        issued
    }
}
