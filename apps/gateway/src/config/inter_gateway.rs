//! How this gateway calls the others that share its store (transaction markers and
//! verifications): which of their listeners, the SASL login, TLS, and the bounds on
//! those calls. Kafka's equivalents are `inter.broker.listener.name` and the
//! inter-broker `sasl.*` / `ssl.truststore.*` settings.
//!
//! The password is read verbatim (spaces kept) and never shown in errors.

use super::values::{duration_ms, parsed, parsed_opt, verbatim_opt};
use super::{ConfigError, Names};
use kafka_broker::InterGatewayConfig;
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;

/// The inter-gateway settings as read from the layers.
#[derive(Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(default)]
pub(super) struct Raw {
    #[serde(deserialize_with = "parsed")]
    inter_gateway_listener: String,
    #[serde(deserialize_with = "parsed_opt")]
    inter_gateway_sasl_mechanism: Option<String>,
    #[serde(deserialize_with = "parsed_opt")]
    inter_gateway_username: Option<String>,
    #[serde(deserialize_with = "verbatim_opt")]
    inter_gateway_password: Option<String>,
    #[serde(deserialize_with = "parsed")]
    inter_gateway_request_timeout_ms: u64,
    #[serde(deserialize_with = "parsed_opt")]
    inter_gateway_tls_ca_file: Option<PathBuf>,
    #[serde(deserialize_with = "parsed_opt")]
    inter_gateway_tls_server_name: Option<String>,
    #[serde(deserialize_with = "parsed")]
    inter_gateway_max_pending_calls: usize,
    #[serde(deserialize_with = "parsed")]
    inter_gateway_allow_plain_without_tls: bool,
}

impl Default for Raw {
    fn default() -> Self {
        let c = InterGatewayConfig::default();
        Raw {
            inter_gateway_listener: c.listener,
            inter_gateway_sasl_mechanism: c.sasl_mechanism,
            inter_gateway_username: c.username,
            inter_gateway_password: c.password,
            inter_gateway_request_timeout_ms: duration_ms(c.request_timeout),
            inter_gateway_tls_ca_file: c.tls_ca_file,
            inter_gateway_tls_server_name: c.tls_server_name,
            inter_gateway_max_pending_calls: c.max_pending_calls,
            inter_gateway_allow_plain_without_tls: c.allow_plain_without_tls,
        }
    }
}

/// The mechanisms the client side speaks.
const MECHANISMS: &[&str] = &["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];

impl Raw {
    /// Checks the values and writes them into the broker's inter-gateway settings.
    pub(super) fn validate(
        self,
        names: &Names<'_>,
        into: &mut InterGatewayConfig,
    ) -> Result<(), ConfigError> {
        if self.inter_gateway_listener.trim().is_empty() {
            return Err(names.invalid("inter_gateway_listener", "must name a listener"));
        }
        let mechanism = match self.inter_gateway_sasl_mechanism {
            None => None,
            Some(m) => {
                let upper = m.trim().to_ascii_uppercase();
                if !MECHANISMS.contains(&upper.as_str()) {
                    return Err(names.invalid(
                        "inter_gateway_sasl_mechanism",
                        "must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512",
                    ));
                }
                Some(upper)
            }
        };
        if mechanism.is_some()
            && (self.inter_gateway_username.is_none() || self.inter_gateway_password.is_none())
        {
            return Err(names.invalid(
                "inter_gateway_sasl_mechanism",
                "needs inter_gateway_username and inter_gateway_password",
            ));
        }
        if mechanism.as_deref() == Some("PLAIN")
            && self.inter_gateway_tls_ca_file.is_none()
            && !self.inter_gateway_allow_plain_without_tls
        {
            return Err(names.invalid(
                "inter_gateway_sasl_mechanism",
                "PLAIN without inter_gateway_tls_ca_file sends the password in clear to the \
                 other gateways; use SCRAM, give a CA file (TLS), or set \
                 inter_gateway_allow_plain_without_tls=true to accept that",
            ));
        }
        if !(1..=300_000).contains(&self.inter_gateway_request_timeout_ms) {
            return Err(names.invalid("inter_gateway_request_timeout_ms", "must be 1 to 300000"));
        }
        if self.inter_gateway_max_pending_calls == 0 {
            return Err(names.invalid("inter_gateway_max_pending_calls", "must be at least 1"));
        }
        if let Some(ca) = &self.inter_gateway_tls_ca_file
            && !ca.is_file()
        {
            return Err(names.invalid("inter_gateway_tls_ca_file", "is not a readable file"));
        }
        *into = InterGatewayConfig {
            listener: self.inter_gateway_listener.trim().to_owned(),
            sasl_mechanism: mechanism,
            username: self.inter_gateway_username,
            password: self.inter_gateway_password,
            request_timeout: Duration::from_millis(self.inter_gateway_request_timeout_ms),
            tls_ca_file: self.inter_gateway_tls_ca_file,
            tls_server_name: self.inter_gateway_tls_server_name,
            max_pending_calls: self.inter_gateway_max_pending_calls,
            allow_plain_without_tls: self.inter_gateway_allow_plain_without_tls,
            // Set from the SCRAM bounds once the security settings are read.
            max_scram_iterations: into.max_scram_iterations,
        };
        Ok(())
    }
}
