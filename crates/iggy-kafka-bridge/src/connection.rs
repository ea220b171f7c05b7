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

/// A hint added to a connection failure with TLS on: the SDK reports a failed
/// handshake only as "cannot establish connection".
pub(crate) fn tls_hint(config: &BridgeConfig) -> String {
    if !config.tls_enabled {
        return String::new();
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
        assert!(tls_hint(&config).is_empty());
        config.tls_enabled = true;
        config.tls_ca_file = Some("ca.pem".into());
        let hint = tls_hint(&config);
        assert!(
            hint.contains("ca.pem") && hint.contains("127.0.0.1"),
            "{hint}"
        );
        assert!(!hint.contains("secret"));
    }
}
