//! A small Kafka client to the other gateways sharing the store: what the transaction
//! coordinator sends to partition leaders (WriteTxnMarkers) and leaders to coordinators
//! (AddPartitionsToTxn `verify_only`).
//!
//! One connection per node id, opened on first use to the address the member advertises
//! for the configured listener ([`cluster::address`]). Opening it connects (over TLS
//! when a CA file is configured), asks ApiVersions, and logs in with SASL (PLAIN or
//! SCRAM-SHA-256/512) when a mechanism is configured. PLAIN without TLS is refused unless
//! allowed (`allow_plain_without_tls`), and a peer's SCRAM iteration count is bounded by
//! `max_scram_iterations`. Requests are encoded with the
//! protocol crate at the newest version both sides serve.
//!
//! One request is on the wire at a time per connection: the callers of one gateway wait
//! their turn, at most `max_pending_calls` of them (a call past it fails at once). A call
//! is bounded by `request_timeout` as a whole; any failure (timeout, I/O, an answer that
//! does not decode, a member that moved or restarted) drops the connection, and the next
//! call opens a new one. Nothing is retried here: callers know which of their requests
//! are safe to repeat and retry with their own backoff.
//!
//! No error or log line carries the password or a SASL message.

use crate::cluster;
use crate::config::InterGatewayConfig;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use kafka_protocol::api::{decode_response, encode_request};
use kafka_protocol::messages::api_versions_request::ApiVersionsRequest;
use kafka_protocol::messages::request_header::RequestHeader;
use kafka_protocol::messages::sasl_authenticate_request::SaslAuthenticateRequest;
use kafka_protocol::messages::sasl_handshake_request::SaslHandshakeRequest;
use kafka_protocol::{ApiKey, ByteString, RequestBody, ResponseBody, VersionRange};
use kafka_sasl::ScramMechanism;
use kafka_store::cluster::Membership;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

/// The largest answer accepted from another gateway. Marker and verification answers
/// are a few bytes per partition; anything larger is a broken peer.
pub(crate) const MAX_RESPONSE_BYTES: usize = 16 << 20;

/// The client id the other gateways see in their logs.
const CLIENT_ID: &str = "iggy-kafka-gateway";

/// Why a call to another gateway failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PeerError {
    #[error("no address for node {0}")]
    NoAddress(i32),
    #[error("transport: {0}")]
    Transport(String),
    #[error("timed out")]
    Timeout,
}

fn transport(what: &str, e: impl std::fmt::Display) -> PeerError {
    PeerError::Transport(format!("{what}: {e}"))
}

/// Connections to the other gateways, one per node id.
pub(crate) struct PeerClient {
    config: InterGatewayConfig,
    membership: Mutex<Option<Arc<dyn Membership>>>,
    peers: Mutex<HashMap<i32, Arc<Peer>>>,
    tls: Mutex<Option<tokio_rustls::TlsConnector>>,
    correlation: AtomicI32,
}

impl std::fmt::Debug for PeerClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerClient")
            .field("listener", &self.config.listener)
            .finish()
    }
}

/// One gateway: its connection (none until the first call, or after a failure), behind
/// a lock that keeps one request on the wire, and the bound on its waiting callers.
struct Peer {
    link: tokio::sync::Mutex<Option<Link>>,
    pending: Semaphore,
}

/// An open, authenticated connection.
struct Link {
    io: Box<dyn Io>,
    /// The member it was opened to, by epoch and address: a restarted or moved member
    /// gets a new connection.
    epoch: u64,
    addr: (String, u16),
    /// The versions the gateway serves, by API key.
    versions: HashMap<i16, VersionRange>,
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send + Sync {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + Sync> Io for T {}

/// How the connection logs in.
#[derive(Clone, Copy)]
enum Sasl {
    Plain,
    Scram(ScramMechanism),
}

impl PeerClient {
    pub(crate) fn new(config: InterGatewayConfig) -> Self {
        PeerClient {
            config,
            membership: Mutex::new(None),
            peers: Mutex::new(HashMap::new()),
            tls: Mutex::new(None),
            correlation: AtomicI32::new(0),
        }
    }

    /// Finds gateways through `membership` from now on.
    pub(crate) fn follow(&self, membership: Arc<dyn Membership>) {
        *self
            .membership
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(membership);
    }

    /// The longest wait for one answer (`inter_gateway.request_timeout`).
    pub(crate) fn timeout(&self) -> Duration {
        self.config.request_timeout
    }

    /// Sends `body` (at its newest version both sides speak) to gateway `node_id` and
    /// waits for the answer at most `timeout`.
    pub(crate) async fn call(
        &self,
        node_id: i32,
        body: RequestBody,
        timeout: Duration,
    ) -> Result<ResponseBody, PeerError> {
        let peer = self.peer(node_id);
        let Ok(_pending) = peer.pending.try_acquire() else {
            return Err(PeerError::Transport(format!(
                "more than {} calls waiting for node {node_id}",
                self.config.max_pending_calls
            )));
        };
        let exchange = async {
            let mut slot = peer.link.lock().await;
            // Taken out while in use: a call cancelled half-way (timeout) leaves no
            // connection behind in an unknown state.
            let link = match slot.take() {
                Some(l) if self.current(node_id, &l) => l,
                _ => self.open(node_id).await?,
            };
            let mut link = link;
            let answer = self.request(&mut link, body).await?;
            *slot = Some(link);
            Ok(answer)
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(r) => r,
            Err(_) => Err(PeerError::Timeout),
        }
    }

    fn peer(&self, node_id: i32) -> Arc<Peer> {
        let mut peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(peers.entry(node_id).or_insert_with(|| {
            Arc::new(Peer {
                link: tokio::sync::Mutex::new(None),
                pending: Semaphore::new(self.config.max_pending_calls.max(1)),
            })
        }))
    }

    /// The member `node_id` as the membership sees it now, and its address.
    fn member(&self, node_id: i32) -> Result<(u64, (String, u16)), PeerError> {
        let membership = self
            .membership
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or(PeerError::NoAddress(node_id))?;
        let view = membership.view();
        let member = view
            .members
            .iter()
            .find(|m| m.node_id == node_id)
            .ok_or(PeerError::NoAddress(node_id))?;
        let (host, port) =
            cluster::address(member, &self.config.listener).ok_or(PeerError::NoAddress(node_id))?;
        Ok((member.epoch, (host.to_owned(), port)))
    }

    /// Whether `link` still goes to the member `node_id` is now.
    fn current(&self, node_id: i32, link: &Link) -> bool {
        self.member(node_id)
            .is_ok_and(|(epoch, addr)| epoch == link.epoch && addr == link.addr)
    }

    /// Connects to `node_id`, asks its versions and logs in.
    async fn open(&self, node_id: i32) -> Result<Link, PeerError> {
        let (epoch, addr) = self.member(node_id)?;
        let tcp = TcpStream::connect((addr.0.as_str(), addr.1))
            .await
            .map_err(|e| transport("connect", e))?;
        let _ = tcp.set_nodelay(true);
        let io: Box<dyn Io> = match self.tls_connector()? {
            None => Box::new(tcp),
            Some(connector) => {
                let name = self
                    .config
                    .tls_server_name
                    .clone()
                    .unwrap_or_else(|| addr.0.clone());
                let name = rustls_pki_types::ServerName::try_from(name)
                    .map_err(|e| transport("TLS server name", e))?;
                Box::new(
                    connector
                        .connect(name, tcp)
                        .await
                        .map_err(|e| transport("TLS handshake", e))?,
                )
            }
        };
        let mut link = Link {
            io,
            epoch,
            addr,
            versions: HashMap::new(),
        };
        let ResponseBody::ApiVersions(v) = self
            .exchange(
                &mut link,
                3,
                ApiVersionsRequest {
                    client_software_name: ByteString::from_static(CLIENT_ID),
                    client_software_version: ByteString::from_static(env!("CARGO_PKG_VERSION")),
                    ..Default::default()
                }
                .into(),
            )
            .await?
        else {
            return Err(PeerError::Transport(
                "ApiVersions answered otherwise".into(),
            ));
        };
        if v.error_code != 0 {
            return Err(PeerError::Transport(format!(
                "ApiVersions error {}",
                v.error_code
            )));
        }
        link.versions = v
            .api_keys
            .iter()
            .map(|k| (k.api_key, VersionRange::new(k.min_version, k.max_version)))
            .collect();
        if let Some(sasl) = self.sasl()? {
            self.login(&mut link, sasl).await?;
        }
        Ok(link)
    }

    /// The configured SASL mechanism, if any.
    fn sasl(&self) -> Result<Option<Sasl>, PeerError> {
        let Some(m) = self.config.sasl_mechanism.as_deref() else {
            return Ok(None);
        };
        Ok(Some(match m.to_ascii_uppercase().as_str() {
            "PLAIN"
                if self.config.tls_ca_file.is_none() && !self.config.allow_plain_without_tls =>
            {
                return Err(PeerError::Transport(
                    "PLAIN without TLS would send the password in clear; set a CA file \
                     (TLS) or allow it explicitly"
                        .into(),
                ));
            }
            "PLAIN" => Sasl::Plain,
            "SCRAM-SHA-256" => Sasl::Scram(ScramMechanism::Sha256),
            "SCRAM-SHA-512" => Sasl::Scram(ScramMechanism::Sha512),
            other => {
                return Err(PeerError::Transport(format!(
                    "unsupported SASL mechanism {other:?}"
                )));
            }
        }))
    }

    /// The TLS connector, built on first use from the CA file; `None` without TLS.
    fn tls_connector(&self) -> Result<Option<tokio_rustls::TlsConnector>, PeerError> {
        let Some(ca) = &self.config.tls_ca_file else {
            return Ok(None);
        };
        let mut cached = self.tls.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = cached.as_ref() {
            return Ok(Some(c.clone()));
        }
        let connector = tls_connector(ca).map_err(PeerError::Transport)?;
        *cached = Some(connector.clone());
        Ok(Some(connector))
    }

    /// SaslHandshake, then the mechanism's SaslAuthenticate rounds.
    async fn login(&self, link: &mut Link, sasl: Sasl) -> Result<(), PeerError> {
        let name = match sasl {
            Sasl::Plain => "PLAIN",
            Sasl::Scram(m) => m.name(),
        };
        let ResponseBody::SaslHandshake(h) = self
            .exchange(
                link,
                1,
                SaslHandshakeRequest {
                    mechanism: ByteString::from_static(name),
                }
                .into(),
            )
            .await?
        else {
            return Err(PeerError::Transport(
                "SaslHandshake answered otherwise".into(),
            ));
        };
        if h.error_code != 0 {
            return Err(PeerError::Transport(format!(
                "SASL mechanism {name} refused (error {})",
                h.error_code
            )));
        }
        let user = self.config.username.as_deref().unwrap_or("");
        let password = self.config.password.as_deref().unwrap_or("");
        match sasl {
            Sasl::Plain => {
                let mut token = Vec::with_capacity(2 + user.len() + password.len());
                token.push(0);
                token.extend_from_slice(user.as_bytes());
                token.push(0);
                token.extend_from_slice(password.as_bytes());
                self.authenticate(link, token).await?;
            }
            Sasl::Scram(m) => {
                let nonce = B64.encode(rand::random::<[u8; 24]>());
                let escaped = user.replace('=', "=3D").replace(',', "=2C");
                let first_bare = format!("n={escaped},r={nonce}");
                let server_first = self
                    .authenticate(link, format!("n,,{first_bare}").into_bytes())
                    .await?;
                let (final_message, expected) = scram_final(
                    m,
                    password,
                    &nonce,
                    &first_bare,
                    &server_first,
                    self.config.max_scram_iterations,
                )?;
                let server_final = self.authenticate(link, final_message).await?;
                let text = std::str::from_utf8(&server_final).unwrap_or("");
                let got = text.strip_prefix("v=").and_then(|v| B64.decode(v).ok());
                if got.as_deref() != Some(expected.as_slice()) {
                    return Err(PeerError::Transport(
                        "SCRAM server signature does not match".into(),
                    ));
                }
            }
        }
        Ok(())
    }

    /// One SaslAuthenticate round: the server's bytes.
    async fn authenticate(&self, link: &mut Link, token: Vec<u8>) -> Result<Bytes, PeerError> {
        let ResponseBody::SaslAuthenticate(a) = self
            .exchange(
                link,
                2,
                SaslAuthenticateRequest {
                    auth_bytes: Bytes::from(token),
                    ..Default::default()
                }
                .into(),
            )
            .await?
        else {
            return Err(PeerError::Transport(
                "SaslAuthenticate answered otherwise".into(),
            ));
        };
        if a.error_code != 0 {
            // The server's message names no secret; the code is enough here.
            return Err(PeerError::Transport(format!(
                "SASL authentication failed (error {})",
                a.error_code
            )));
        }
        Ok(a.auth_bytes)
    }

    /// Sends `body` at the newest version both sides serve.
    async fn request(&self, link: &mut Link, body: RequestBody) -> Result<ResponseBody, PeerError> {
        let key = body.api_key();
        let version =
            negotiate(key, link.versions.get(&key.as_i16()).copied()).ok_or_else(|| {
                PeerError::Transport(format!("node serves no common version of {}", key.name()))
            })?;
        self.exchange(link, version, body).await
    }

    /// Writes one request and reads its answer.
    async fn exchange(
        &self,
        link: &mut Link,
        version: i16,
        body: RequestBody,
    ) -> Result<ResponseBody, PeerError> {
        let key = body.api_key();
        let correlation_id = self.correlation.fetch_add(1, Ordering::Relaxed) & i32::MAX;
        let header = RequestHeader {
            request_api_key: key.as_i16(),
            request_api_version: version,
            correlation_id,
            client_id: Some(ByteString::from_static(CLIENT_ID)),
            ..Default::default()
        };
        let frame = encode_request(&header, &body).map_err(|e| transport("encode", e))?;
        link.io
            .write_all(&frame)
            .await
            .map_err(|e| transport("write", e))?;
        link.io.flush().await.map_err(|e| transport("write", e))?;
        let len = link.io.read_i32().await.map_err(|e| transport("read", e))?;
        let len = usize::try_from(len)
            .ok()
            .filter(|n| *n <= MAX_RESPONSE_BYTES)
            .ok_or_else(|| PeerError::Transport(format!("answer of {len} bytes")))?;
        let mut buf = vec![0u8; len];
        link.io
            .read_exact(&mut buf)
            .await
            .map_err(|e| transport("read", e))?;
        let (h, answer) =
            decode_response(key, version, &Bytes::from(buf)).map_err(|e| transport("decode", e))?;
        if h.correlation_id != correlation_id {
            return Err(PeerError::Transport(format!(
                "correlation id {} answered for {correlation_id}",
                h.correlation_id
            )));
        }
        if answer.api_key() != key {
            return Err(PeerError::Transport("answer of another API".into()));
        }
        Ok(answer)
    }
}

/// The newest version of `key` this gateway serves that the other one (`theirs`) serves
/// too.
fn negotiate(key: ApiKey, theirs: Option<VersionRange>) -> Option<i16> {
    let ours = crate::handlers::advertised(key).or_else(|| key.versions())?;
    let theirs = theirs?;
    let max = ours.max.min(theirs.max);
    (max >= ours.min.max(theirs.min)).then_some(max)
}

/// The SCRAM client-final message answering `server_first`, and the server signature to
/// expect in the server-final one.
fn scram_final(
    m: ScramMechanism,
    password: &str,
    nonce: &str,
    first_bare: &str,
    server_first: &[u8],
    max_iterations: u32,
) -> Result<(Vec<u8>, Vec<u8>), PeerError> {
    let bad = || PeerError::Transport("malformed SCRAM server-first message".into());
    let text = std::str::from_utf8(server_first).map_err(|_| bad())?;
    let (mut server_nonce, mut salt, mut iterations) = (None, None, None);
    for attr in text.split(',') {
        if let Some(r) = attr.strip_prefix("r=") {
            server_nonce = Some(r);
        } else if let Some(s) = attr.strip_prefix("s=") {
            salt = B64.decode(s).ok();
        } else if let Some(i) = attr.strip_prefix("i=") {
            iterations = i.parse::<u32>().ok();
        }
    }
    let (Some(server_nonce), Some(salt), Some(iterations)) = (server_nonce, salt, iterations)
    else {
        return Err(bad());
    };
    // The server's nonce extends ours; a server that would make us prove a nonce of its
    // choosing is refused. Iterations are bounded (by what this gateway accepts for its
    // own credentials) so a hostile peer cannot make us spend seconds of a worker.
    if !server_nonce.starts_with(nonce) || server_nonce.len() == nonce.len() {
        return Err(bad());
    }
    if !(4096..=max_iterations.max(4096)).contains(&iterations) {
        return Err(PeerError::Transport(format!(
            "the peer asks for {iterations} SCRAM iterations, outside 4096..={max_iterations}"
        )));
    }
    let salted = m.salted_password(password.as_bytes(), &salt, iterations);
    let without_proof = format!("c=biws,r={server_nonce}");
    let auth_message = format!("{first_bare},{text},{without_proof}");
    let computed = m.client_proof(&salted, auth_message.as_bytes());
    let message = format!("{without_proof},p={}", B64.encode(&computed.proof)).into_bytes();
    Ok((message, computed.server_signature))
}

/// A TLS client trusting the CA certificates in the PEM file at `ca`.
fn tls_connector(ca: &std::path::Path) -> Result<tokio_rustls::TlsConnector, String> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let pem = std::fs::read(ca).map_err(|e| format!("cannot read {}: {e}", ca.display()))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| format!("{}: not PEM certificates: {e}", ca.display()))?;
        roots
            .add(cert)
            .map_err(|e| format!("{}: bad CA certificate: {e}", ca.display()))?;
    }
    if roots.is_empty() {
        return Err(format!("{}: no CA certificate", ca.display()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS client: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

#[cfg(test)]
#[path = "peer_tests.rs"]
mod tests;
