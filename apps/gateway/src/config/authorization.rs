//! Authorization: whether requests are checked, Kafka's `allow.everyone.if.no.acl.found`,
//! where the ACL bindings come from and how often they are read again, and the bound on
//! how many are kept.
//!
//! - `authorization_enabled`: unset checks requests when some listener authenticates its
//!   clients (SASL, or SSL with client certificates); `true` or `false` force it. Off
//!   while a listener authenticates is allowed but warned about at start: principals are
//!   then proven and ignored.
//! - `acl_file`: the embedded store's bindings, loaded at start (JSON, format in
//!   `kafka_authz::store`). With the bridge the bindings live in Iggy (the meta stream's
//!   `acls` log) and are managed with CreateAcls/DeleteAcls, so a file is refused.
//! - `acl_refresh_interval_ms`, `max_acl_bindings`, `max_acl_field_bytes`,
//!   `max_described_acl_bindings`: the broker's and the stores' bounds; the rules of the
//!   broker's fields are the broker's
//!   ([`BrokerConfig::check`](kafka_broker::BrokerConfig::check)).

use super::security::ListenerSpec;
use super::values::{duration_ms, parsed, parsed_opt};
use super::{ConfigError, Names};
use kafka_authz::store::DEFAULT_MAX_ACL_BINDINGS;
use kafka_broker::config::AuthorizationSettings;
use kafka_broker::session::SecurityProtocol;
use kafka_broker::tls::TlsSettings;
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;

/// The authorization settings as read from the layers.
#[derive(Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(default)]
pub(super) struct Raw {
    #[serde(deserialize_with = "parsed_opt")]
    authorization_enabled: Option<bool>,
    #[serde(deserialize_with = "parsed")]
    allow_everyone_if_no_acl_found: bool,
    #[serde(deserialize_with = "parsed_opt")]
    acl_file: Option<PathBuf>,
    #[serde(deserialize_with = "parsed")]
    acl_refresh_interval_ms: u64,
    #[serde(deserialize_with = "parsed")]
    max_acl_bindings: usize,
    #[serde(deserialize_with = "parsed")]
    max_acl_field_bytes: usize,
    #[serde(deserialize_with = "parsed")]
    max_described_acl_bindings: usize,
}

impl Default for Raw {
    fn default() -> Self {
        let AuthorizationSettings {
            enabled,
            allow_everyone_if_no_acl_found,
            acl_refresh_interval,
            max_acl_field_bytes,
            max_described_acl_bindings,
        } = AuthorizationSettings::default();
        Raw {
            authorization_enabled: enabled,
            allow_everyone_if_no_acl_found,
            acl_file: None,
            acl_refresh_interval_ms: duration_ms(acl_refresh_interval),
            max_acl_bindings: DEFAULT_MAX_ACL_BINDINGS,
            max_acl_field_bytes,
            max_described_acl_bindings,
        }
    }
}

/// Broker fields this section fills, and the key each comes from.
pub(super) const BROKER_FIELDS: &[(&str, &str)] = &[
    ("authorization.enabled", "authorization_enabled"),
    (
        "authorization.allow_everyone_if_no_acl_found",
        "allow_everyone_if_no_acl_found",
    ),
    (
        "authorization.acl_refresh_interval",
        "acl_refresh_interval_ms",
    ),
    ("authorization.max_acl_field_bytes", "max_acl_field_bytes"),
    (
        "authorization.max_described_acl_bindings",
        "max_described_acl_bindings",
    ),
];

/// Where the ACL bindings come from, for the gateway to build the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclSetup {
    /// The embedded store's file of bindings, read at start.
    pub file: Option<PathBuf>,
    /// The most bindings the store keeps (CreateAcls past it gets `POLICY_VIOLATION`).
    pub max_bindings: usize,
    /// Whether requests are checked, as decided from the settings and the listeners.
    pub enabled: bool,
}

/// Whether some listener proves who its clients are: SASL, or SSL asking for client
/// certificates.
pub(super) fn authenticates(listeners: &[ListenerSpec], tls: Option<&TlsSettings>) -> bool {
    let client_certs = tls.is_some_and(|t| t.client_ca_file.is_some());
    listeners
        .iter()
        .any(|l| l.protocol.uses_sasl() || (l.protocol == SecurityProtocol::Ssl && client_certs))
}

impl Raw {
    /// Checks the settings and writes the broker's part. `bridge` is whether Iggy keeps
    /// the bindings; `authenticating` whether some listener authenticates.
    pub(super) fn validate(
        self,
        names: &Names<'_>,
        bridge: bool,
        authenticating: bool,
        authorization: &mut AuthorizationSettings,
        warnings: &mut Vec<String>,
    ) -> Result<AclSetup, ConfigError> {
        if self.max_acl_bindings == 0 {
            return Err(names.invalid("max_acl_bindings", "must be at least 1"));
        }
        if bridge && self.acl_file.is_some() {
            return Err(names.invalid(
                "acl_file",
                "with the Iggy bridge the ACL bindings are kept in Iggy; manage them with \
                 CreateAcls and DeleteAcls (kafka-acls, an admin client) instead of a file",
            ));
        }
        if self.authorization_enabled == Some(false) && authenticating {
            warnings.push(format!(
                "{} turns authorization off although a listener authenticates its clients: \
                 every authenticated principal may do everything",
                names.ignored_name("authorization_enabled")
            ));
        }
        *authorization = AuthorizationSettings {
            enabled: self.authorization_enabled,
            allow_everyone_if_no_acl_found: self.allow_everyone_if_no_acl_found,
            acl_refresh_interval: Duration::from_millis(self.acl_refresh_interval_ms),
            max_acl_field_bytes: self.max_acl_field_bytes,
            max_described_acl_bindings: self.max_described_acl_bindings,
        };
        Ok(AclSetup {
            file: self.acl_file,
            max_bindings: self.max_acl_bindings,
            enabled: self.authorization_enabled.unwrap_or(authenticating),
        })
    }
}
