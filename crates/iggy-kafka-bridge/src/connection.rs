//! Building Iggy clients: the one place the bridge configures a connection to Iggy, so
//! every connection it makes (the sessions that carry data, the metadata log and polls,
//! and the short-lived connections that check SASL/PLAIN passwords) gets the same
//! address, TLS settings and socket options.
//!
//! With `tls_enabled` the SDK wraps the TCP stream in rustls before anything else is
//! sent, credentials included. The server certificate is checked against `tls_ca_file`
//! (or the SDK's built-in web roots) for the name `tls_domain` (or the address's host).
//! The CA file is read once here, at connect, so a missing or empty file is a clear
//! start-up error instead of a failed handshake later.

use crate::config::BridgeConfig;
use crate::errors::BridgeError;
use iggy::prelude::{AutoLogin, IggyClient, IggyDuration};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

/// Longest wait for the diagnostic handshake of [`tls_failure`] (at most `call_timeout`).
const TLS_PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// How a client signs in and reconnects.
pub(crate) enum Login {
    /// Signs in on every (re)connect with these credentials, reconnecting up to
    /// `connect_retries` times: the bridge's own sessions.
    Auto { username: String, password: String },
    /// No sign-in and no reconnection: the caller logs in once (PLAIN checks).
    Manual,
}

/// A client for `config.address` with the configured TLS and socket settings; not yet
/// connected.
pub(crate) fn build_client(config: &BridgeConfig, login: Login) -> Result<IggyClient, BridgeError> {
    let builder = IggyClient::builder()
        .with_tcp()
        .with_server_address(config.address.clone());
    let builder = match login {
        Login::Auto { username, password } => builder
            .with_auto_sign_in(AutoLogin::Enabled(
                iggy::prelude::Credentials::UsernamePassword(
                    username,
                    secrecy::SecretString::from(password),
                ),
            ))
            // Bounded: the SDK's default retries forever, which would hang a Kafka
            // request (the per-call timeout still caps each call).
            .with_reconnection_max_retries(Some(config.connect_retries))
            .with_reconnection_interval(IggyDuration::new(config.retry_interval)),
        Login::Manual => builder
            .with_auto_sign_in(AutoLogin::Disabled)
            .with_reconnection_max_retries(Some(0)),
    };
    let builder = if config.tcp_nodelay {
        builder.with_no_delay()
    } else {
        builder
    };
    let builder = if config.tls_enabled {
        let builder = builder
            .with_tls_enabled(true)
            .with_tls_validate_certificate(true)
            .with_tls_domain(config.tls_host());
        match &config.tls_ca_file {
            Some(path) => builder.with_tls_ca_file(path.display().to_string()),
            None => builder,
        }
    } else {
        builder
    };
    builder
        .build()
        .map_err(|e| BridgeError::Config(format!("iggy client: {e}")))
}

/// Checks that `tls_ca_file`, when TLS is on and one is set, can be read and holds at
/// least one PEM certificate.
pub(crate) fn check_tls_files(config: &BridgeConfig) -> Result<(), BridgeError> {
    let (true, Some(path)) = (config.tls_enabled, &config.tls_ca_file) else {
        return Ok(());
    };
    let bad = |reason: String| {
        Err(BridgeError::Config(format!(
            "tls_ca_file {}: {reason}",
            path.display()
        )))
    };
    let certs = match CertificateDer::pem_file_iter(path) {
        Ok(certs) => certs,
        Err(e) => return bad(e.to_string()),
    };
    let mut count = 0usize;
    for cert in certs {
        if let Err(e) = cert {
            return bad(format!("not a PEM certificate: {e}"));
        }
        count += 1;
    }
    if count == 0 {
        return bad("holds no PEM certificate".into());
    }
    Ok(())
}

/// Why a TLS handshake with Iggy fails, found by attempting one with the same CA file and
/// name: the SDK reports any failed handshake only as "cannot establish connection".
/// `None` when TLS is off, no CA file is set, the TCP connection itself fails (that is
/// not a TLS matter) or the handshake succeeds. Bounded by `call_timeout` and
/// [`TLS_PROBE_TIMEOUT`].
pub(crate) async fn tls_failure(config: &BridgeConfig) -> Option<String> {
    let (true, Some(path)) = (config.tls_enabled, &config.tls_ca_file) else {
        return None;
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(path).ok()? {
        roots.add(cert.ok()?).ok()?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls_pki_types::ServerName::try_from(config.tls_host()).ok()?;
    let attempt = async {
        let tcp = tokio::net::TcpStream::connect(&config.address).await.ok()?;
        let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(tls));
        connector
            .connect(name, tcp)
            .await
            .err()
            .map(|e| e.to_string())
    };
    let limit = config.call_timeout.min(TLS_PROBE_TIMEOUT);
    match tokio::time::timeout(limit, attempt).await {
        Ok(reason) => reason,
        // A server without TLS reads the ClientHello as the start of a request and waits
        // for the rest.
        Err(_) => Some(format!(
            "no TLS answer within {limit:?} (is TLS on for Iggy's TCP listener?)"
        )),
    }
}

/// A hint added to a connection failure with TLS on: the SDK reports a failed
/// handshake only as "cannot establish connection". `failure` is what
/// [`tls_failure`] found, if anything.
pub(crate) fn tls_hint(config: &BridgeConfig, failure: Option<&str>) -> String {
    if !config.tls_enabled {
        return String::new();
    }
    if let Some(reason) = failure {
        return format!(
            " (TLS handshake with Iggy failed: {reason}; expected a certificate for {:?} \
             issued by a CA in {})",
            config.tls_host(),
            config.tls_ca_file.as_ref().map_or_else(
                || "the built-in web roots".into(),
                |p| p.display().to_string()
            )
        );
    }
    let ca = match &config.tls_ca_file {
        Some(path) => format!("the CA in {}", path.display()),
        None => "the built-in web roots".to_owned(),
    };
    format!(
        " (TLS is on: Iggy must have TLS on its TCP listener, and its certificate must be \
         issued by {ca} for the name {:?})",
        config.tls_host()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_empty_ca_file_is_refused() {
        let mut config = BridgeConfig::new("iggy", "secret");
        config.tls_ca_file = Some("/nonexistent/ca.pem".into());
        // Without TLS the file is not looked at (validate refuses the combination).
        check_tls_files(&config).unwrap();
        config.tls_enabled = true;
        let Err(BridgeError::Config(m)) = check_tls_files(&config) else {
            panic!("a missing file passed");
        };
        assert!(m.contains("/nonexistent/ca.pem"), "{m}");
        let dir = std::env::temp_dir().join(format!("bridge-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "no certificate here\n").unwrap();
        config.tls_ca_file = Some(empty);
        let Err(BridgeError::Config(m)) = check_tls_files(&config) else {
            panic!("an empty file passed");
        };
        assert!(m.contains("no PEM certificate"), "{m}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_hint_names_the_ca_and_host_only_with_tls() {
        let mut config = BridgeConfig::new("iggy", "secret");
        assert!(tls_hint(&config, None).is_empty());
        config.tls_enabled = true;
        config.tls_ca_file = Some("ca.pem".into());
        for failure in [None, Some("invalid peer certificate: UnknownIssuer")] {
            let hint = tls_hint(&config, failure);
            assert!(
                hint.contains("ca.pem") && hint.contains("127.0.0.1"),
                "{hint}"
            );
            assert!(!hint.contains("secret"));
            assert_eq!(hint.contains("UnknownIssuer"), failure.is_some(), "{hint}");
        }
    }
}
