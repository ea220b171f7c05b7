//! Certificates for TLS tests, made fresh per test with `rcgen` (ECDSA P-256 keys).
//!
//! [`TestCa`] is a throw-away certificate authority. It issues server certificates valid
//! for `127.0.0.1`, `::1` and `localhost` (or the names given) and client certificates
//! with a chosen common name, so one CA can stand for both the gateway's certificate
//! issuer and the client CA of `IGGY_KAFKA_TLS_CLIENT_CA_FILE`. Everything comes as PEM
//! text (what the gateway's settings name) and as DER (what a rustls client takes), and
//! [`TestCa::write_server_files`] puts a CA, certificate and key into a directory in one
//! call.
//!
//! Nothing here is meant to be secure: keys are written unencrypted with default file
//! permissions.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

/// A certificate and its private key.
#[derive(Clone)]
pub struct CertPair {
    /// The certificate, PEM (`-----BEGIN CERTIFICATE-----`).
    pub cert_pem: String,
    /// The private key, PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`).
    pub key_pem: String,
    /// The certificate, DER.
    pub cert_der: Vec<u8>,
    /// The private key, PKCS#8 DER.
    pub key_der: Vec<u8>,
}

impl fmt::Debug for CertPair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertPair").finish_non_exhaustive()
    }
}

impl CertPair {
    /// Writes `<stem>.crt` and `<stem>.key` into `dir` and returns their paths
    /// (certificate, key).
    pub fn write(&self, dir: &Path, stem: &str) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{stem}.crt"));
        let key = dir.join(format!("{stem}.key"));
        write(&cert, &self.cert_pem);
        write(&key, &self.key_pem);
        (cert, key)
    }
}

/// The files [`TestCa::write_server_files`] wrote.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The CA certificate (PEM): what a client trusts, or the gateway's client CA.
    pub ca: PathBuf,
    /// The server certificate (PEM).
    pub cert: PathBuf,
    /// The server's private key (PEM).
    pub key: PathBuf,
}

/// A certificate authority for one test.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    cert_der: Vec<u8>,
}

impl fmt::Debug for TestCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

impl Default for TestCa {
    fn default() -> Self {
        TestCa::new("iggy-gateway-kafka test CA")
    }
}

impl TestCa {
    /// A fresh CA whose subject is `CN=<name>`.
    pub fn new(name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new())
            .unwrap_or_else(|e| panic!("no names to check: {e}"));
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
        ];
        let key = KeyPair::generate().unwrap_or_else(|e| panic!("generate the CA key: {e}"));
        let cert = params
            .self_signed(&key)
            .unwrap_or_else(|e| panic!("self-sign the CA: {e}"));
        TestCa {
            cert_pem: cert.pem(),
            cert_der: cert.der().to_vec(),
            issuer: Issuer::new(params, key),
        }
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA certificate, DER (a root for a rustls client's `RootCertStore`).
    pub fn cert_der(&self) -> &[u8] {
        &self.cert_der
    }

    /// A server certificate for `127.0.0.1`, `::1` and `localhost`, `CN=localhost`.
    pub fn server_cert(&self) -> CertPair {
        self.server_cert_for(&["127.0.0.1", "::1", "localhost"])
    }

    /// A server certificate for `names` (IP addresses or DNS names); the CN is the first.
    pub fn server_cert_for(&self, names: &[&str]) -> CertPair {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names.clone())
            .unwrap_or_else(|e| panic!("valid server names: {e}"));
        if let Some(first) = names.first() {
            params.distinguished_name.push(DnType::CommonName, first);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.issue(params)
    }

    /// A client certificate whose subject is `CN=<cn>`.
    pub fn client_cert(&self, cn: &str) -> CertPair {
        self.client_cert_with(cn, None, None)
    }

    /// A client certificate whose subject also has an organisational unit and an
    /// organisation (RFC 2253: `CN=<cn>,OU=<ou>,O=<o>`), for principal mapping rules.
    pub fn client_cert_with(&self, cn: &str, ou: Option<&str>, o: Option<&str>) -> CertPair {
        let mut params = CertificateParams::new(Vec::<String>::new())
            .unwrap_or_else(|e| panic!("no names to check: {e}"));
        // Pushed from the most general part on: the RFC 2253 string lists them reversed.
        if let Some(o) = o {
            params.distinguished_name.push(DnType::OrganizationName, o);
        }
        if let Some(ou) = ou {
            params
                .distinguished_name
                .push(DnType::OrganizationalUnitName, ou);
        }
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(params)
    }

    /// Writes `ca.crt`, `server.crt` and `server.key` (a fresh [`TestCa::server_cert`])
    /// into `dir`.
    pub fn write_server_files(&self, dir: &Path) -> TlsFiles {
        let ca = dir.join("ca.crt");
        write(&ca, &self.cert_pem);
        let (cert, key) = self.server_cert().write(dir, "server");
        TlsFiles { ca, cert, key }
    }

    fn issue(&self, mut params: CertificateParams) -> CertPair {
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let key = KeyPair::generate().unwrap_or_else(|e| panic!("generate a key: {e}"));
        let cert = params
            .signed_by(&key, &self.issuer)
            .unwrap_or_else(|e| panic!("sign: {e}"));
        CertPair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert_der: cert.der().to_vec(),
            key_der: key.serialize_der(),
        }
    }
}

fn write(path: &Path, text: &str) {
    fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_and_der_come_out_and_files_are_written() {
        let ca = TestCa::default();
        assert!(ca.cert_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        let server = ca.server_cert();
        assert!(server.key_pem.contains("PRIVATE KEY"));
        assert_ne!(server.cert_der, ca.cert_der());
        let client = ca.client_cert("alice");
        assert_ne!(client.cert_der, server.cert_der);

        let dir = crate::scratch_dir("certs");
        let files = ca.write_server_files(&dir);
        for path in [&files.ca, &files.cert, &files.key] {
            assert!(fs::read_to_string(path).unwrap().starts_with("-----BEGIN"));
        }
    }
}
