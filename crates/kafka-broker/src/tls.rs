//! TLS for SSL and SASL_SSL listeners: a rustls acceptor whose certificate can change
//! while the gateway runs.
//!
//! [`TlsAcceptor`] holds the current server configuration behind a lock that is only
//! read on accept. [`TlsAcceptor::watch`] looks at the certificate, key and client CA
//! files every `reload_interval`: their modification time, length and a hash of their
//! content make a fingerprint, and a new fingerprint means "load again". A complete,
//! consistent new set (the key matches the certificate, the CA parses) replaces the
//! configuration for connections accepted from then on; connections already open keep
//! the session they negotiated. A new set that does not load leaves the old one in place
//! and is reported once (a warning with the reason), not on every check, until the files
//! change again.
//!
//! Only TLS 1.2 and 1.3 are offered, with the `ring` provider's cipher suites. With a
//! client CA, connections on SSL listeners must present a certificate that chains to it;
//! the subject of that certificate, written as an RFC 2253 distinguished name
//! (`CN=alice,OU=eng,O=Example`), goes through the [`PrincipalMapper`] and the result
//! becomes the session's `User:<name>` principal. SASL_SSL listeners never ask for a
//! client certificate: SASL names the principal there.
//!
//! The handshake runs in the connection's own task, under `handshake_timeout`, while the
//! connection already holds its slots under the connection caps, so a client that never
//! completes a handshake costs one slot for at most that long. A client that speaks
//! plaintext Kafka to a TLS port is recognised by its first byte (every TLS connection
//! starts with a handshake record, type 22) and closed at once. Failed handshakes are
//! counted in `kafka_gateway_tls_handshake_failures_total` by reason. One the TLS stack
//! or the principal mapping refused (a client certificate it does not accept) is logged
//! with the peer and the reason at warn level at most once per [`REFUSED_WARN_EVERY`]
//! (any client can cause them in bulk); the others (not TLS, timeouts, I/O) at debug.

use crate::error::BrokerError;
use crate::metrics::ReasonLabel;
use crate::session::{Principal, SecurityProtocol};
use kafka_sasl::PrincipalMapper;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::server::{ServerConfig, WebPkiClientVerifier};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::collections::hash_map::DefaultHasher;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_rustls::server::TlsStream;
use tracing::{debug, info, warn};

/// Largest certificate, key or CA file read, so a wrong path (a log file, a device) cannot
/// make the gateway read without bound.
pub const MAX_PEM_FILE_BYTES: u64 = 1024 * 1024;

/// The first byte of every TLS connection: a record of type handshake.
const TLS_HANDSHAKE_RECORD: u8 = 22;

/// What the TLS listeners use.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    /// The server certificate chain, PEM (`IGGY_KAFKA_TLS_CERT_FILE`; Kafka's
    /// `ssl.keystore.location`).
    pub cert_file: PathBuf,
    /// The certificate's private key, PEM: PKCS#8, PKCS#1 or SEC1 (`IGGY_KAFKA_TLS_KEY_FILE`).
    pub key_file: PathBuf,
    /// CA certificates client certificates must chain to; set, SSL listeners require a
    /// client certificate (`IGGY_KAFKA_TLS_CLIENT_CA_FILE`; Kafka's
    /// `ssl.client.auth=required` with `ssl.truststore.location`).
    pub client_ca_file: Option<PathBuf>,
    /// Turns a client certificate's subject into a principal name
    /// (`IGGY_KAFKA_TLS_PRINCIPAL_MAPPING_RULES`; Kafka's `ssl.principal.mapping.rules`).
    pub principal_mapper: PrincipalMapper,
    /// How often the files are checked for changes (`IGGY_KAFKA_TLS_RELOAD_INTERVAL_MS`).
    pub reload_interval: Duration,
    /// How long a client has to complete the TLS handshake
    /// (`IGGY_KAFKA_TLS_HANDSHAKE_TIMEOUT_MS`).
    pub handshake_timeout: Duration,
}

impl TlsSettings {
    /// Settings for `cert_file` and `key_file` with no client CA, CN mapping, and the
    /// default interval and timeout.
    pub fn new(cert_file: impl Into<PathBuf>, key_file: impl Into<PathBuf>) -> TlsSettings {
        TlsSettings {
            cert_file: cert_file.into(),
            key_file: key_file.into(),
            client_ca_file: None,
            principal_mapper: PrincipalMapper::common_name(),
            reload_interval: DEFAULT_RELOAD_INTERVAL,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
        }
    }
}

/// Default of [`TlsSettings::reload_interval`].
pub const DEFAULT_RELOAD_INTERVAL: Duration = Duration::from_secs(5);
/// Least time between two warnings about refused handshakes.
pub const REFUSED_WARN_EVERY: Duration = Duration::from_secs(10);

/// Default of [`TlsSettings::handshake_timeout`].
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What a file check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reload {
    /// The files are as they were.
    Unchanged,
    /// New files were loaded; new connections use them.
    Reloaded,
    /// The files changed but do not load; the previous configuration stays.
    Rejected,
}

/// The TLS side of SSL and SASL_SSL listeners; cheap to clone (all clones share the
/// configuration and its reloads).
#[derive(Clone)]
pub struct TlsAcceptor {
    shared: Arc<Shared>,
}

struct Shared {
    settings: TlsSettings,
    provider: Arc<CryptoProvider>,
    configs: RwLock<Arc<Configs>>,
    files: Mutex<FileState>,
    failures: Family<ReasonLabel, Counter>,
    reloads: Family<ReasonLabel, Counter>,
    /// When a refused handshake was last logged at warn level, and how many since.
    refused: Mutex<(Option<std::time::Instant>, u64)>,
}

/// One loaded set of files.
struct Configs {
    /// For SASL_SSL listeners, and SSL ones without a client CA.
    server: Arc<ServerConfig>,
    /// For SSL listeners when a client CA is set.
    client_auth: Option<Arc<ServerConfig>>,
}

struct FileState {
    /// The fingerprint of the files in use.
    loaded: u64,
    /// The fingerprint of the latest set that did not load, so it is reported once.
    rejected: Option<u64>,
}

impl fmt::Debug for TlsAcceptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsAcceptor")
            .field("cert_file", &self.shared.settings.cert_file)
            .field("client_ca_file", &self.shared.settings.client_ca_file)
            .finish_non_exhaustive()
    }
}

/// A completed handshake.
pub(crate) struct Accepted {
    pub stream: TlsStream<TcpStream>,
    /// The mapped client certificate principal, when one was required.
    pub principal: Option<Principal>,
}

impl TlsAcceptor {
    /// Loads the files; any problem with them is a start-up error naming the file.
    pub fn new(settings: TlsSettings) -> Result<TlsAcceptor, BrokerError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let files = read_files(&settings)?;
        let configs = build(&settings, &provider, &files)?;
        let fingerprint = files.fingerprint;
        Ok(TlsAcceptor {
            shared: Arc::new(Shared {
                settings,
                provider,
                configs: RwLock::new(Arc::new(configs)),
                files: Mutex::new(FileState {
                    loaded: fingerprint,
                    rejected: None,
                }),
                failures: Family::default(),
                refused: Mutex::new((None, 0)),
                reloads: Family::default(),
            }),
        })
    }

    /// The settings in use.
    pub fn settings(&self) -> &TlsSettings {
        &self.shared.settings
    }

    /// Whether SSL listeners ask for (and require) client certificates.
    pub fn requires_client_certificates(&self) -> bool {
        self.shared.settings.client_ca_file.is_some()
    }

    /// Whether two acceptors share one configuration (are clones of each other).
    pub fn same_as(&self, other: &TlsAcceptor) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// Adds `kafka_gateway_tls_handshake_failures_total{reason}` and
    /// `kafka_gateway_tls_reloads_total{reason}` (`loaded`, `rejected`) to `registry`.
    pub fn register_metrics(&self, registry: &mut Registry) {
        let reg = registry.sub_registry_with_prefix("kafka_gateway");
        reg.register(
            "tls_handshake_failures",
            "TLS connections closed before or during the handshake, by reason (not_tls, timeout, handshake, no_principal, io)",
            self.shared.failures.clone(),
        );
        reg.register(
            "tls_reloads",
            "Changes of the certificate, key or client CA files seen, by outcome (loaded, rejected)",
            self.shared.reloads.clone(),
        );
    }

    /// How many handshakes failed for `reason` (the metric's count, also without a
    /// registry).
    pub fn handshake_failures(&self, reason: &'static str) -> u64 {
        self.shared
            .failures
            .get_or_create(&ReasonLabel { reason })
            .get()
    }

    /// Looks at the files once: loads them when they changed and are valid.
    pub fn check_files(&self) -> Reload {
        let shared = &self.shared;
        let mut state = shared.files.lock().unwrap_or_else(|e| e.into_inner());
        let files = match read_files(&shared.settings) {
            Ok(files) => files,
            Err(e) => {
                // The fingerprint of an unreadable set: the error text, so a different
                // failure is reported again.
                let fingerprint = hash_of(&e.to_string());
                if state.rejected != Some(fingerprint) {
                    warn!(error = %e, "TLS files changed but cannot be read; keeping the previous certificate");
                    state.rejected = Some(fingerprint);
                    shared.reloads.get_or_create(&reason("rejected")).inc();
                }
                return Reload::Rejected;
            }
        };
        if files.fingerprint == state.loaded {
            state.rejected = None;
            return Reload::Unchanged;
        }
        if state.rejected == Some(files.fingerprint) {
            return Reload::Rejected;
        }
        match build(&shared.settings, &shared.provider, &files) {
            Ok(configs) => {
                *shared.configs.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(configs);
                state.loaded = files.fingerprint;
                state.rejected = None;
                shared.reloads.get_or_create(&reason("loaded")).inc();
                info!(cert = %shared.settings.cert_file.display(), "TLS certificate reloaded; new connections use it");
                Reload::Reloaded
            }
            Err(e) => {
                warn!(error = %e, "TLS files changed but do not load; keeping the previous certificate");
                state.rejected = Some(files.fingerprint);
                shared.reloads.get_or_create(&reason("rejected")).inc();
                Reload::Rejected
            }
        }
    }

    /// Checks the files every `reload_interval` until `stop` turns true.
    pub async fn watch(self, mut stop: watch::Receiver<bool>) {
        let mut ticks = tokio::time::interval(self.shared.settings.reload_interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            tokio::select! {
                _ = ticks.tick() => {
                    // Small files, read rarely: blocking the worker for them is cheaper
                    // than a blocking-pool hop.
                    self.check_files();
                }
                changed = stop.changed() => {
                    if changed.is_err() || *stop.borrow() {
                        return;
                    }
                }
            }
        }
    }

    /// Runs the handshake on `tcp` for a listener speaking `protocol`, within the
    /// handshake timeout. `None` when the connection is to be closed (already logged at
    /// debug level and counted).
    pub(crate) async fn accept(
        &self,
        tcp: TcpStream,
        protocol: SecurityProtocol,
    ) -> Option<Accepted> {
        let timeout = self.shared.settings.handshake_timeout;
        let peer = tcp.peer_addr().ok().map(crate::session::canonical_peer);
        // Held here (not dropped inside the timeout) so that a failure is counted before
        // the connection closes: whoever sees it closed then finds it counted.
        let handshake = self.handshake(tcp, protocol);
        tokio::pin!(handshake);
        match tokio::time::timeout(timeout, &mut handshake).await {
            Ok(Ok(accepted)) => Some(accepted),
            Ok(Err(why)) => {
                self.failed(why.reason());
                if matches!(why, HandshakeError::Tls(_) | HandshakeError::NoPrincipal(_)) {
                    self.warn_refused(peer, &why);
                } else {
                    debug!(peer = ?peer, reason = why.reason(), detail = %why, "TLS handshake failed");
                }
                None
            }
            Err(_) => {
                self.failed("timeout");
                debug!(peer = ?peer, ?timeout, "TLS handshake not completed in time");
                None
            }
        }
    }

    /// A handshake the TLS stack or the principal mapping refused (a client certificate
    /// it does not accept, say): the operator needs the peer and the reason, but any
    /// client can cause it in bulk, so at warn level at most once per
    /// [`REFUSED_WARN_EVERY`], with the count since; the rest at debug.
    fn warn_refused(&self, peer: Option<std::net::SocketAddr>, why: &HandshakeError) {
        let mut last = self
            .shared
            .refused
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        last.1 += 1;
        if last.0.is_none_or(|t| t.elapsed() >= REFUSED_WARN_EVERY) {
            warn!(
                peer = ?peer,
                reason = why.reason(),
                detail = %why,
                refused = last.1,
                "TLS handshake refused (see docs/security.md for the certificates accepted); \
                 refused ones since the last such line counted"
            );
            *last = (Some(std::time::Instant::now()), 0);
        } else {
            debug!(peer = ?peer, reason = why.reason(), detail = %why, "TLS handshake refused");
        }
    }

    fn failed(&self, why: &'static str) {
        self.shared.failures.get_or_create(&reason(why)).inc();
    }

    async fn handshake(
        &self,
        tcp: TcpStream,
        protocol: SecurityProtocol,
    ) -> Result<Accepted, HandshakeError> {
        let mut first = [0u8; 1];
        let n = tcp.peek(&mut first).await.map_err(HandshakeError::Io)?;
        if n == 0 {
            return Err(HandshakeError::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
        if first[0] != TLS_HANDSHAKE_RECORD {
            return Err(HandshakeError::NotTls(first[0]));
        }
        let configs = self
            .shared
            .configs
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let (config, wants_cert) = match (&configs.client_auth, protocol) {
            (Some(client_auth), SecurityProtocol::Ssl) => (client_auth.clone(), true),
            _ => (configs.server.clone(), false),
        };
        let stream = tokio_rustls::TlsAcceptor::from(config)
            .accept(tcp)
            .await
            .map_err(HandshakeError::Tls)?;
        let principal = if wants_cert {
            let (_, conn) = stream.get_ref();
            // The verifier refuses a handshake without a certificate, so one is there.
            let cert = conn
                .peer_certificates()
                .and_then(|c| c.first())
                .ok_or(HandshakeError::NoPrincipal("no client certificate".into()))?;
            let dn = subject_dn(cert.as_ref()).map_err(HandshakeError::NoPrincipal)?;
            let name = self
                .shared
                .settings
                .principal_mapper
                .map(&dn)
                .filter(|n| !n.is_empty())
                .ok_or_else(|| {
                    HandshakeError::NoPrincipal(format!("no mapping rule matches {dn:?}"))
                })?;
            Some(Principal::user(&name))
        } else {
            None
        };
        Ok(Accepted { stream, principal })
    }
}

fn reason(reason: &'static str) -> ReasonLabel {
    ReasonLabel { reason }
}

/// Why a handshake did not give a usable connection.
#[derive(Debug, thiserror::Error)]
enum HandshakeError {
    #[error("the first byte ({0:#04x}) is not a TLS handshake record: a plaintext client?")]
    NotTls(u8),
    #[error("{0}")]
    Tls(std::io::Error),
    #[error("{0}")]
    Io(std::io::Error),
    #[error("client certificate: {0}")]
    NoPrincipal(String),
}

impl HandshakeError {
    fn reason(&self) -> &'static str {
        match self {
            HandshakeError::NotTls(_) => "not_tls",
            HandshakeError::Tls(_) => "handshake",
            HandshakeError::Io(_) => "io",
            HandshakeError::NoPrincipal(_) => "no_principal",
        }
    }
}

/// The bytes of the files and their fingerprint.
struct Files {
    cert: Vec<u8>,
    key: Vec<u8>,
    ca: Option<Vec<u8>>,
    fingerprint: u64,
}

fn read_files(settings: &TlsSettings) -> Result<Files, BrokerError> {
    let mut hasher = DefaultHasher::new();
    let cert = read_file(&settings.cert_file, &mut hasher)?;
    let key = read_file(&settings.key_file, &mut hasher)?;
    let ca = match &settings.client_ca_file {
        Some(path) => Some(read_file(path, &mut hasher)?),
        None => None,
    };
    Ok(Files {
        cert,
        key,
        ca,
        fingerprint: hasher.finish(),
    })
}

/// Reads a file of at most [`MAX_PEM_FILE_BYTES`], adding its modification time, length
/// and content to `hasher`.
fn read_file(path: &Path, hasher: &mut DefaultHasher) -> Result<Vec<u8>, BrokerError> {
    let fail = |reason: String| BrokerError::Tls(format!("{}: {reason}", path.display()));
    let file = std::fs::File::open(path).map_err(|e| fail(e.to_string()))?;
    let meta = file.metadata().map_err(|e| fail(e.to_string()))?;
    if meta.len() > MAX_PEM_FILE_BYTES {
        return Err(fail(format!(
            "{} bytes, more than the {MAX_PEM_FILE_BYTES} a PEM file may have",
            meta.len()
        )));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(MAX_PEM_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(e.to_string()))?;
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .hash(hasher);
    meta.len().hash(hasher);
    bytes.hash(hasher);
    Ok(bytes)
}

fn hash_of(text: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    text.hash(&mut hasher);
    hasher.finish()
}

fn build(
    settings: &TlsSettings,
    provider: &Arc<CryptoProvider>,
    files: &Files,
) -> Result<Configs, BrokerError> {
    let named =
        |path: &Path, reason: String| BrokerError::Tls(format!("{}: {reason}", path.display()));
    let certs = certificates(&files.cert).map_err(|e| named(&settings.cert_file, e))?;
    let key = PrivateKeyDer::from_pem_slice(&files.key).map_err(|e| {
        named(
            &settings.key_file,
            format!("no usable private key (PKCS#8, PKCS#1 or SEC1 PEM): {e}"),
        )
    })?;
    let builder = || {
        ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| BrokerError::Tls(e.to_string()))
    };
    let with_cert = |b: rustls::ConfigBuilder<ServerConfig, rustls::server::WantsServerCert>| {
        b.with_single_cert(certs.clone(), key.clone_key())
            .map_err(|e| {
                named(
                    &settings.key_file,
                    format!("does not go with {}: {e}", settings.cert_file.display()),
                )
            })
    };
    let server = Arc::new(with_cert(builder()?.with_no_client_auth())?);
    let client_auth = match (&settings.client_ca_file, &files.ca) {
        (Some(path), Some(ca)) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates(ca).map_err(|e| named(path, e))? {
                roots
                    .add(cert)
                    .map_err(|e| named(path, format!("not a usable CA certificate: {e}")))?;
            }
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .build()
                    .map_err(|e| named(path, e.to_string()))?;
            Some(Arc::new(with_cert(
                builder()?.with_client_cert_verifier(verifier),
            )?))
        }
        _ => None,
    };
    Ok(Configs {
        server,
        client_auth,
    })
}

/// Every certificate in a PEM file; at least one.
fn certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not PEM certificates: {e}"))?;
    if certs.is_empty() {
        return Err("no PEM certificate (-----BEGIN CERTIFICATE-----) in the file".into());
    }
    Ok(certs)
}

/// The subject of a DER certificate as an RFC 2253 string: the most specific part first
/// (`CN=alice,OU=eng,O=Example`), multi-valued parts joined with `+`, attribute types by
/// their usual short name or dotted OID, special characters escaped with `\`.
pub fn subject_dn(der: &[u8]) -> Result<String, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| format!("cannot parse the certificate: {e}"))?;
    let mut parts: Vec<String> = cert
        .subject()
        .iter()
        .map(|rdn| {
            rdn.iter()
                .map(|atv| {
                    let oid = atv.attr_type().to_id_string();
                    let value = match atv.as_str() {
                        Ok(s) => escape(s),
                        Err(_) => format!("#{}", hex(atv.attr_value().data)),
                    };
                    format!("{}={value}", short_name(&oid).unwrap_or(&oid))
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    parts.reverse();
    Ok(parts.join(","))
}

/// RFC 2253's names for the common attribute types.
fn short_name(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "STREET",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        _ => return None,
    })
}

/// RFC 2253 escaping: `,+"\<>;` anywhere, `#` or a space first, a space last.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinguished_names_are_escaped_like_rfc_2253() {
        assert_eq!(escape("alice"), "alice");
        assert_eq!(escape("a,b+c"), "a\\,b\\+c");
        assert_eq!(escape("#x "), "\\#x\\ ");
        assert_eq!(escape(" "), "\\ ");
        assert_eq!(escape(""), "");
    }

    #[test]
    fn short_names_cover_the_usual_types() {
        assert_eq!(short_name("2.5.4.3"), Some("CN"));
        assert_eq!(short_name("2.5.4.11"), Some("OU"));
        assert_eq!(short_name("1.2.840.113549.1.9.1"), None);
    }

    #[test]
    fn a_missing_file_is_an_error_naming_it() {
        let settings = TlsSettings::new("/nonexistent/cert.pem", "/nonexistent/key.pem");
        let err = TlsAcceptor::new(settings).unwrap_err().to_string();
        assert!(err.contains("/nonexistent/cert.pem"), "{err}");
    }
}
