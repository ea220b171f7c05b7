//! Listeners, SASL and TLS: which sockets the gateway binds, what each expects, what it
//! advertises, and how clients prove who they are.
//!
//! Two ways to describe the listeners, never both:
//!
//! - the single-listener style of earlier versions: `bind_addr` (with `advertised_host`
//!   and `advertised_port`), turned into SASL_PLAINTEXT by `sasl_enabled`, SSL by
//!   `tls_enabled`, SASL_SSL by both;
//! - Kafka's style: `listeners` (`NAME://host:port,...`), `advertised_listeners` (same
//!   syntax, per name) and `listener_security_protocol_map` (`NAME:PROTOCOL,...`) for
//!   names that are not protocol names themselves.
//!
//! Setting `listeners` with any of `bind_addr`, `sasl_enabled` or `tls_enabled` is a
//! start-up error: one of them would silently lose. A listener that lets clients in
//! without authentication (PLAINTEXT, or SSL without a client CA) on an address other than
//! loopback is allowed, with a warning.
//!
//! The SASL settings fill the broker's [`SaslSettings`](kafka_broker::config::SaslSettings)
//! and the mechanisms' [`SaslConfig`]; the JWKS file for OAUTHBEARER is read here, once, at
//! start. The TLS settings become the [`TlsSettings`] of the acceptor; the certificate
//! files themselves are loaded when the gateway starts, and reloaded while it runs.

use super::values::{duration_ms, parsed, parsed_opt};
use super::{ConfigError, Names};
use kafka_broker::BrokerConfig;
use kafka_broker::session::SecurityProtocol;
use kafka_broker::tls::{DEFAULT_HANDSHAKE_TIMEOUT, DEFAULT_RELOAD_INTERVAL, TlsSettings};
use kafka_sasl::{Jwks, Mechanism, OAuthConfig, PrincipalMapper, SaslConfig, ScramBounds};
use serde::Deserialize;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

/// Largest JWKS file read at start.
const MAX_JWKS_FILE_BYTES: u64 = 1024 * 1024;

/// Most listeners one gateway serves.
pub const MAX_LISTENERS: usize = 16;

/// The security settings as read from the layers.
#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(default)]
pub(super) struct Raw {
    #[serde(deserialize_with = "parsed_opt")]
    listeners: Option<String>,
    #[serde(deserialize_with = "parsed_opt")]
    advertised_listeners: Option<String>,
    #[serde(deserialize_with = "parsed_opt")]
    listener_security_protocol_map: Option<String>,
    #[serde(deserialize_with = "parsed")]
    sasl_enabled: bool,
    #[serde(deserialize_with = "parsed")]
    tls_enabled: bool,
    #[serde(deserialize_with = "parsed")]
    sasl_mechanisms: String,
    #[serde(deserialize_with = "parsed_opt")]
    sasl_users_file: Option<PathBuf>,
    #[serde(deserialize_with = "parsed")]
    sasl_session_lifetime_ms: u64,
    #[serde(deserialize_with = "parsed")]
    max_concurrent_authentications: usize,
    #[serde(deserialize_with = "parsed")]
    sasl_authentication_timeout_ms: u64,
    #[serde(deserialize_with = "parsed")]
    sasl_max_receive_size: usize,
    #[serde(deserialize_with = "parsed")]
    sasl_failure_delay_ms: u64,
    #[serde(deserialize_with = "parsed")]
    sasl_failure_delay_max_ms: u64,
    #[serde(deserialize_with = "parsed")]
    sasl_scram_min_iterations: u32,
    #[serde(deserialize_with = "parsed")]
    sasl_scram_max_iterations: u32,
    #[serde(deserialize_with = "parsed")]
    sasl_max_token_bytes: usize,
    #[serde(deserialize_with = "parsed_opt")]
    super_users: Option<String>,
    #[serde(deserialize_with = "parsed_opt")]
    sasl_oauthbearer_jwks_file: Option<PathBuf>,
    #[serde(deserialize_with = "parsed_opt")]
    sasl_oauthbearer_issuer: Option<String>,
    #[serde(deserialize_with = "parsed_opt")]
    sasl_oauthbearer_audience: Option<String>,
    #[serde(deserialize_with = "parsed")]
    sasl_oauthbearer_principal_claim: String,
    #[serde(deserialize_with = "parsed")]
    sasl_oauthbearer_allow_unsecured: bool,
    #[serde(deserialize_with = "parsed")]
    sasl_oauthbearer_clock_skew_ms: u64,
    #[serde(deserialize_with = "parsed_opt")]
    tls_cert_file: Option<PathBuf>,
    #[serde(deserialize_with = "parsed_opt")]
    tls_key_file: Option<PathBuf>,
    #[serde(deserialize_with = "parsed_opt")]
    tls_client_ca_file: Option<PathBuf>,
    #[serde(deserialize_with = "parsed_opt")]
    tls_principal_mapping_rules: Option<String>,
    #[serde(deserialize_with = "parsed")]
    tls_reload_interval_ms: u64,
    #[serde(deserialize_with = "parsed")]
    tls_handshake_timeout_ms: u64,
}

impl Default for Raw {
    fn default() -> Self {
        let sasl = kafka_broker::config::SaslSettings::default();
        let mechanisms = SaslConfig::default();
        Raw {
            listeners: None,
            advertised_listeners: None,
            listener_security_protocol_map: None,
            sasl_enabled: false,
            tls_enabled: false,
            sasl_mechanisms: mechanisms
                .mechanisms
                .iter()
                .map(|m| m.name())
                .collect::<Vec<_>>()
                .join(","),
            sasl_users_file: None,
            sasl_session_lifetime_ms: sasl.session_lifetime.map_or(0, duration_ms),
            max_concurrent_authentications: sasl.max_concurrent_authentications,
            sasl_authentication_timeout_ms: duration_ms(sasl.authentication_timeout),
            sasl_max_receive_size: sasl.max_receive_size,
            sasl_failure_delay_ms: duration_ms(sasl.failure_delay),
            sasl_failure_delay_max_ms: duration_ms(sasl.failure_delay_max),
            sasl_scram_min_iterations: mechanisms.scram.min_iterations,
            sasl_scram_max_iterations: mechanisms.scram.max_iterations,
            sasl_max_token_bytes: mechanisms.max_token_bytes,
            super_users: None,
            sasl_oauthbearer_jwks_file: None,
            sasl_oauthbearer_issuer: None,
            sasl_oauthbearer_audience: None,
            sasl_oauthbearer_principal_claim: "sub".into(),
            sasl_oauthbearer_allow_unsecured: false,
            sasl_oauthbearer_clock_skew_ms: 30_000,
            tls_cert_file: None,
            tls_key_file: None,
            tls_client_ca_file: None,
            tls_principal_mapping_rules: None,
            tls_reload_interval_ms: duration_ms(DEFAULT_RELOAD_INTERVAL),
            tls_handshake_timeout_ms: duration_ms(DEFAULT_HANDSHAKE_TIMEOUT),
        }
    }
}

/// What a listener tells its clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advertise {
    /// Host name or IP address.
    pub host: String,
    /// Port; `None` is the port actually bound.
    pub port: Option<u16>,
}

/// One listener to bind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerSpec {
    /// Kafka's listener name (upper case).
    pub name: String,
    /// What it expects.
    pub protocol: SecurityProtocol,
    /// Where it binds.
    pub bind: SocketAddr,
    /// What it advertises.
    pub advertise: Advertise,
}

/// The SASL mechanisms and their sources, for building the authenticator at start.
#[derive(Debug, Clone)]
pub struct SaslSetup {
    /// Mechanisms offered and their bounds.
    pub config: SaslConfig,
    /// The embedded store's credentials (`sasl_users_file`).
    pub users_file: Option<PathBuf>,
    /// OAUTHBEARER validation, when offered.
    pub oauth: Option<OAuthConfig>,
}

/// The security part of the configuration.
#[derive(Debug, Clone)]
pub struct Security {
    /// The listeners, at least one.
    pub listeners: Vec<ListenerSpec>,
    /// Set when a listener uses SASL.
    pub sasl: Option<SaslSetup>,
    /// Set when a listener uses TLS.
    pub tls: Option<TlsSettings>,
    /// Start-up warnings.
    pub warnings: Vec<String>,
}

/// The single-listener settings, as validated by the listener section.
pub(super) struct Single {
    pub bind: SocketAddr,
    pub advertised_host: String,
    pub advertised_port: Option<u16>,
    /// `advertised_host` was given (a wildcard bind needs it).
    pub advertised_host_set: bool,
}

impl Raw {
    /// Checks the settings; `single` is the listener of the single-listener style, and
    /// `bridge` whether the Iggy bridge supplies credentials.
    pub(super) fn validate(
        self,
        names: &Names<'_>,
        single: Single,
        bridge: bool,
        broker: &mut BrokerConfig,
    ) -> Result<Security, ConfigError> {
        let mut warnings = Vec::new();
        let listeners = match &self.listeners {
            None => {
                let protocol = match (self.sasl_enabled, self.tls_enabled) {
                    (false, false) => SecurityProtocol::Plaintext,
                    (true, false) => SecurityProtocol::SaslPlaintext,
                    (false, true) => SecurityProtocol::Ssl,
                    (true, true) => SecurityProtocol::SaslSsl,
                };
                for key in ["advertised_listeners", "listener_security_protocol_map"] {
                    if names.is_set(key) {
                        warnings.push(format!(
                            "{} has no effect without IGGY_KAFKA_LISTENERS",
                            names.ignored_name(key)
                        ));
                    }
                }
                vec![ListenerSpec {
                    name: protocol.name().to_owned(),
                    protocol,
                    bind: single.bind,
                    advertise: Advertise {
                        host: single.advertised_host,
                        port: single.advertised_port,
                    },
                }]
            }
            Some(text) => {
                for key in ["bind_addr", "sasl_enabled", "tls_enabled"] {
                    if names.is_set(key) {
                        return Err(names.invalid(
                            key,
                            "cannot be combined with IGGY_KAFKA_LISTENERS: describe every listener there (and drop BIND_ADDR, SASL_ENABLED, TLS_ENABLED)",
                        ));
                    }
                }
                let listeners = self.listeners(text, names, &single)?;
                // The broker's own advertised address is the first listener's.
                if let Some(first) = listeners.first() {
                    broker.advertised_host.clone_from(&first.advertise.host);
                    if let Some(port) = first.advertise.port {
                        broker.advertised_port = port;
                    }
                }
                listeners
            }
        };

        let uses_sasl = listeners.iter().any(|l| l.protocol.uses_sasl());
        let uses_tls = listeners.iter().any(|l| l.protocol.uses_tls());
        let ssl = listeners
            .iter()
            .any(|l| l.protocol == SecurityProtocol::Ssl);
        let tls = if uses_tls {
            Some(self.tls(names)?)
        } else {
            for key in [
                "tls_cert_file",
                "tls_key_file",
                "tls_client_ca_file",
                "tls_principal_mapping_rules",
            ] {
                if names.is_set(key) {
                    warnings.push(format!(
                        "{} has no effect: no listener uses TLS",
                        names.ignored_name(key)
                    ));
                }
            }
            None
        };
        if tls.is_some() && !ssl && names.is_set("tls_client_ca_file") {
            warnings.push(format!(
                "{} has no effect: only SSL listeners ask for client certificates",
                names.ignored_name("tls_client_ca_file")
            ));
        }
        let client_certs = tls.as_ref().is_some_and(|t| t.client_ca_file.is_some());
        for l in &listeners {
            let authenticates =
                l.protocol.uses_sasl() || (l.protocol == SecurityProtocol::Ssl && client_certs);
            if !authenticates && !l.bind.ip().is_loopback() {
                warnings.push(format!(
                    "listener {} ({}) on {} lets any client in without authentication",
                    l.name, l.protocol, l.bind
                ));
            }
        }

        self.sasl_settings(names, broker)?;
        let sasl = if uses_sasl {
            Some(self.sasl(names, bridge, &mut warnings)?)
        } else {
            None
        };
        Ok(Security {
            listeners,
            sasl,
            tls,
            warnings,
        })
    }

    fn listeners(
        &self,
        text: &str,
        names: &Names<'_>,
        single: &Single,
    ) -> Result<Vec<ListenerSpec>, ConfigError> {
        let map = match &self.listener_security_protocol_map {
            Some(m) => protocol_map(m)
                .map_err(|why| names.invalid("listener_security_protocol_map", &why))?,
            None => Vec::new(),
        };
        let parsed = endpoints(text).map_err(|why| names.invalid("listeners", &why))?;
        if parsed.len() > MAX_LISTENERS {
            return Err(names.invalid("listeners", &format!("at most {MAX_LISTENERS} listeners")));
        }
        let advertised = match &self.advertised_listeners {
            Some(a) => endpoints(a).map_err(|why| names.invalid("advertised_listeners", &why))?,
            None => Vec::new(),
        };
        for (name, _, _) in &advertised {
            if !parsed.iter().any(|(n, _, _)| n == name) {
                return Err(names.invalid(
                    "advertised_listeners",
                    &format!("{name} is not one of IGGY_KAFKA_LISTENERS"),
                ));
            }
        }
        let mut out: Vec<ListenerSpec> = Vec::new();
        for (name, host, port) in parsed {
            let protocol = match map.iter().find(|(n, _)| *n == name) {
                Some((_, p)) => *p,
                None => protocol_named(&name).ok_or_else(|| {
                    names.invalid(
                        "listeners",
                        &format!(
                            "listener {name} is not a protocol name; give its protocol in IGGY_KAFKA_LISTENER_SECURITY_PROTOCOL_MAP ({name}:SASL_SSL, ...)"
                        ),
                    )
                })?,
            };
            let ip: IpAddr = if host.is_empty() {
                IpAddr::from([0, 0, 0, 0])
            } else if let Ok(ip) = host.parse() {
                ip
            } else {
                // A host name binds the first address it resolves to (IPv4 first), as
                // Kafka binds `PLAINTEXT://localhost:9092`.
                resolve(&host, port).ok_or_else(|| {
                    names.invalid(
                        "listeners",
                        &format!("{name}: {host:?} is neither an IP address nor a host name that resolves (leave it empty for every interface)"),
                    )
                })?
            };
            let bind = SocketAddr::new(ip, port);
            if out.iter().any(|l| l.name == name) {
                return Err(names.invalid("listeners", &format!("{name} is named twice")));
            }
            if let Some(other) = out.iter().find(|l| super::listener::overlaps(l.bind, bind)) {
                return Err(names.invalid(
                    "listeners",
                    &format!("{name} and {} both take port {port}", other.name),
                ));
            }
            let advertise = match advertised.iter().find(|(n, _, _)| *n == name) {
                Some((_, host, port)) => {
                    if host.is_empty() || *port == 0 {
                        return Err(names.invalid(
                            "advertised_listeners",
                            &format!("{name} needs a host and a port other than 0"),
                        ));
                    }
                    Advertise {
                        host: host.clone(),
                        port: Some(*port),
                    }
                }
                None if ip.is_unspecified() => {
                    if !single.advertised_host_set {
                        return Err(names.invalid(
                            "listeners",
                            &format!("{name} binds every interface: give its address in IGGY_KAFKA_ADVERTISED_LISTENERS (or IGGY_KAFKA_ADVERTISED_HOST)"),
                        ));
                    }
                    Advertise {
                        host: single.advertised_host.clone(),
                        port: None,
                    }
                }
                None => Advertise {
                    host: ip.to_string(),
                    port: None,
                },
            };
            out.push(ListenerSpec {
                name,
                protocol,
                bind,
                advertise,
            });
        }
        if out.is_empty() {
            return Err(names.invalid("listeners", "names no listener"));
        }
        Ok(out)
    }

    fn tls(&self, names: &Names<'_>) -> Result<TlsSettings, ConfigError> {
        let (Some(cert), Some(key)) = (&self.tls_cert_file, &self.tls_key_file) else {
            let missing = if self.tls_cert_file.is_none() {
                "tls_cert_file"
            } else {
                "tls_key_file"
            };
            return Err(names.invalid(
                missing,
                "SSL and SASL_SSL listeners need IGGY_KAFKA_TLS_CERT_FILE and IGGY_KAFKA_TLS_KEY_FILE",
            ));
        };
        let mut tls = TlsSettings::new(cert, key);
        tls.client_ca_file.clone_from(&self.tls_client_ca_file);
        if let Some(rules) = &self.tls_principal_mapping_rules {
            tls.principal_mapper = PrincipalMapper::parse(rules)
                .map_err(|e| names.invalid("tls_principal_mapping_rules", &e.to_string()))?;
        }
        if self.tls_reload_interval_ms == 0 {
            return Err(names.invalid("tls_reload_interval_ms", "must be at least 1"));
        }
        if self.tls_handshake_timeout_ms == 0 {
            return Err(names.invalid("tls_handshake_timeout_ms", "must be at least 1"));
        }
        tls.reload_interval = Duration::from_millis(self.tls_reload_interval_ms);
        tls.handshake_timeout = Duration::from_millis(self.tls_handshake_timeout_ms);
        Ok(tls)
    }

    /// Fills the broker's SASL settings (checked whether or not a listener uses SASL, so
    /// a bad value is found before it matters).
    fn sasl_settings(
        &self,
        names: &Names<'_>,
        broker: &mut BrokerConfig,
    ) -> Result<(), ConfigError> {
        let s = &mut broker.sasl;
        s.session_lifetime = match self.sasl_session_lifetime_ms {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        };
        if self.max_concurrent_authentications == 0 {
            return Err(names.invalid("max_concurrent_authentications", "must be at least 1"));
        }
        s.max_concurrent_authentications = self.max_concurrent_authentications;
        if self.sasl_authentication_timeout_ms == 0 {
            return Err(names.invalid("sasl_authentication_timeout_ms", "must be at least 1"));
        }
        s.authentication_timeout = Duration::from_millis(self.sasl_authentication_timeout_ms);
        if self.sasl_max_receive_size < 1024 {
            return Err(names.invalid("sasl_max_receive_size", "must be at least 1024"));
        }
        s.max_receive_size = self.sasl_max_receive_size;
        if self.sasl_failure_delay_max_ms < self.sasl_failure_delay_ms {
            return Err(names.invalid(
                "sasl_failure_delay_max_ms",
                "must be at least IGGY_KAFKA_SASL_FAILURE_DELAY_MS",
            ));
        }
        s.failure_delay = Duration::from_millis(self.sasl_failure_delay_ms);
        s.failure_delay_max = Duration::from_millis(self.sasl_failure_delay_max_ms);
        s.super_users = match &self.super_users {
            Some(text) => super_users(text).map_err(|why| names.invalid("super_users", &why))?,
            None => Vec::new(),
        };
        Ok(())
    }

    fn sasl(
        &self,
        names: &Names<'_>,
        bridge: bool,
        warnings: &mut Vec<String>,
    ) -> Result<SaslSetup, ConfigError> {
        let mut mechanisms = Vec::new();
        for name in self.sasl_mechanisms.split(',').map(str::trim) {
            if name.is_empty() {
                continue;
            }
            let m = Mechanism::from_name(&name.to_ascii_uppercase()).ok_or_else(|| {
                names.invalid(
                    "sasl_mechanisms",
                    &format!(
                        "unknown mechanism {name:?} (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER)"
                    ),
                )
            })?;
            if !mechanisms.contains(&m) {
                mechanisms.push(m);
            }
        }
        if self.sasl_oauthbearer_jwks_file.is_some()
            && !mechanisms.contains(&Mechanism::OAuthBearer)
        {
            mechanisms.push(Mechanism::OAuthBearer);
        }
        if mechanisms.is_empty() {
            return Err(names.invalid("sasl_mechanisms", "names no mechanism"));
        }
        let (min, max) = (
            self.sasl_scram_min_iterations,
            self.sasl_scram_max_iterations,
        );
        if min < 4096 {
            return Err(names.invalid(
                "sasl_scram_min_iterations",
                "must be at least 4096 (RFC 7677)",
            ));
        }
        if max < min {
            return Err(names.invalid(
                "sasl_scram_max_iterations",
                "must be at least IGGY_KAFKA_SASL_SCRAM_MIN_ITERATIONS",
            ));
        }
        if self.sasl_max_token_bytes == 0 {
            return Err(names.invalid("sasl_max_token_bytes", "must be at least 1"));
        }
        let needs_store = mechanisms
            .iter()
            .any(|m| matches!(m, Mechanism::Plain) || m.scram().is_some());
        if needs_store && !bridge && self.sasl_users_file.is_none() {
            return Err(names.invalid(
                "sasl_users_file",
                "a SASL listener with PLAIN or SCRAM needs a users file with the embedded store (create one with `iggy-gateway-kafka users set-password --file FILE USER`), or the Iggy bridge",
            ));
        }
        if bridge && self.sasl_users_file.is_some() {
            warnings.push(format!(
                "{} has no effect: with the Iggy bridge, PLAIN checks Iggy users and SCRAM credentials live in Iggy",
                names.ignored_name("sasl_users_file")
            ));
        }
        let oauth = if mechanisms.contains(&Mechanism::OAuthBearer) {
            Some(self.oauth(names, warnings)?)
        } else {
            None
        };
        Ok(SaslSetup {
            config: SaslConfig {
                mechanisms,
                scram: ScramBounds {
                    min_iterations: min,
                    max_iterations: max,
                },
                max_token_bytes: self.sasl_max_token_bytes,
            },
            users_file: if bridge {
                None
            } else {
                self.sasl_users_file.clone()
            },
            oauth,
        })
    }

    fn oauth(
        &self,
        names: &Names<'_>,
        warnings: &mut Vec<String>,
    ) -> Result<OAuthConfig, ConfigError> {
        let jwks = match &self.sasl_oauthbearer_jwks_file {
            Some(path) => {
                let key = "sasl_oauthbearer_jwks_file";
                let bytes = read_small(path, MAX_JWKS_FILE_BYTES)
                    .map_err(|why| names.invalid(key, &format!("{}: {why}", path.display())))?;
                Jwks::from_json(&bytes).map_err(|e| names.invalid(key, &e.to_string()))?
            }
            None if self.sasl_oauthbearer_allow_unsecured => Jwks::default(),
            None => {
                return Err(names.invalid(
                    "sasl_oauthbearer_jwks_file",
                    "OAUTHBEARER needs the keys tokens are signed with (a JWKS file)",
                ));
            }
        };
        if self.sasl_oauthbearer_allow_unsecured {
            warnings.push(
                "IGGY_KAFKA_SASL_OAUTHBEARER_ALLOW_UNSECURED is on: unsigned OAUTHBEARER tokens (alg none) are accepted, so anyone can claim any principal; for development only"
                    .to_owned(),
            );
        }
        let claim = self.sasl_oauthbearer_principal_claim.trim();
        if claim.is_empty() {
            return Err(names.invalid("sasl_oauthbearer_principal_claim", "must not be empty"));
        }
        Ok(OAuthConfig {
            jwks,
            issuer: self.sasl_oauthbearer_issuer.clone(),
            audience: self.sasl_oauthbearer_audience.clone(),
            principal_claim: claim.to_owned(),
            allow_unsecured: self.sasl_oauthbearer_allow_unsecured,
            clock_skew: Duration::from_millis(self.sasl_oauthbearer_clock_skew_ms),
        })
    }
}

fn read_small(path: &std::path::Path, max: u64) -> Result<Vec<u8>, String> {
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if meta.len() > max {
        return Err(format!("larger than {max} bytes"));
    }
    std::fs::read(path).map_err(|e| e.to_string())
}

/// The protocol whose name `name` is.
fn protocol_named(name: &str) -> Option<SecurityProtocol> {
    [
        SecurityProtocol::Plaintext,
        SecurityProtocol::Ssl,
        SecurityProtocol::SaslPlaintext,
        SecurityProtocol::SaslSsl,
    ]
    .into_iter()
    .find(|p| p.name() == name)
}

/// A listener name: letters, digits, `_` and `-`, kept in upper case.
fn listener_name(name: &str) -> Result<String, String> {
    let name = name.trim();
    if name.is_empty()
        || name.len() > 64
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(format!(
            "{name:?} is not a listener name (letters, digits, _ and -)"
        ));
    }
    Ok(name.to_ascii_uppercase())
}

/// `NAME://host:port,...` into (name, host, port); the host may be empty, an IPv6 literal
/// is in brackets.
pub(super) fn endpoints(text: &str) -> Result<Vec<(String, String, u16)>, String> {
    let mut out = Vec::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, rest) = entry
            .split_once("://")
            .ok_or_else(|| format!("{entry:?} is not NAME://HOST:PORT"))?;
        let name = listener_name(name)?;
        let (host, port) = rest
            .rsplit_once(':')
            .ok_or_else(|| format!("{entry:?} has no port"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| format!("{entry:?}: {port:?} is not a port"))?;
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if host.contains(['/', ' ', '@']) {
            return Err(format!("{entry:?}: {host:?} is not a host"));
        }
        out.push((name, host.to_owned(), port));
    }
    Ok(out)
}

/// `NAME:PROTOCOL,...`.
pub(super) fn protocol_map(text: &str) -> Result<Vec<(String, SecurityProtocol)>, String> {
    let mut out: Vec<(String, SecurityProtocol)> = Vec::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, protocol) = entry
            .split_once(':')
            .ok_or_else(|| format!("{entry:?} is not NAME:PROTOCOL"))?;
        let name = listener_name(name)?;
        let protocol = protocol_named(&protocol.trim().to_ascii_uppercase()).ok_or_else(|| {
            format!("{entry:?}: the protocol is one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL")
        })?;
        if out.iter().any(|(n, _)| *n == name) {
            return Err(format!("{name} is mapped twice"));
        }
        out.push((name, protocol));
    }
    Ok(out)
}

/// `User:a;User:b` into the principals, checked.
pub(super) fn super_users(text: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for entry in text.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        match entry.split_once(':') {
            Some(("User", name)) if !name.trim().is_empty() => {
                out.push(format!("User:{}", name.trim()));
            }
            _ => return Err(format!("{entry:?} is not a principal like User:alice")),
        }
    }
    Ok(out)
}

/// The address `host` resolves to, IPv4 preferred.
fn resolve(host: &str, port: u16) -> Option<IpAddr> {
    use std::net::ToSocketAddrs;
    let addrs: Vec<SocketAddr> = (host, port).to_socket_addrs().ok()?.collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or_else(|| addrs.first())
        .map(|a| a.ip())
}
