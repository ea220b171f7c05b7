//! A small Kafka SASL client for tests and the load tool, over any byte stream.
//!
//! [`SaslClient`] wraps an `AsyncRead + AsyncWrite` (a `TcpStream`, a TLS stream) and speaks
//! just enough Kafka to authenticate: ApiVersions, SaslHandshake v0/v1, SaslAuthenticate
//! v0-2, and the v0 raw-token flow of old clients (after SaslHandshake v0 the tokens travel
//! as bare size-prefixed frames). The mechanisms are PLAIN, SCRAM-SHA-256/512 and
//! OAUTHBEARER with a caller-given token.
//!
//! Outcomes are typed ([`AuthOutcome`]): what the broker said (error code, message, session
//! lifetime), or that it closed the connection. Transport trouble and broken server
//! messages are [`ClientError`]s. The client never knows the principal the broker settled
//! on; tests learn it from what the broker lets the session do.
//!
//! The SCRAM client side is also available in pieces ([`ScramClient`]), so hostile tests
//! can forge a nonce or replay a client-final message, and [`scram_salted_password`]
//! computes the salted password AlterUserScramCredentials carries.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use kafka_protocol::api::{decode_response, encode_request};
use kafka_protocol::messages::api_versions_request::ApiVersionsRequest;
use kafka_protocol::messages::api_versions_response::ApiVersionsResponse;
use kafka_protocol::messages::request_header::RequestHeader;
use kafka_protocol::messages::sasl_authenticate_request::SaslAuthenticateRequest;
use kafka_protocol::messages::sasl_handshake_request::SaslHandshakeRequest;
use kafka_protocol::{ByteString, RequestBody, ResponseBody};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest frame the client reads (a guard against a broken server, not a Kafka limit).
const MAX_FRAME: usize = 64 * 1024 * 1024;

/// What went wrong on the client side.
#[derive(Debug)]
pub enum ClientError {
    /// Reading or writing the stream failed.
    Io(std::io::Error),
    /// No answer within the client's timeout.
    Timeout,
    /// The broker closed the connection where an answer was expected.
    Closed,
    /// An answer that could not be decoded, or that does not follow the mechanism.
    Protocol(String),
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Io(e) => write!(f, "i/o: {e}"),
            ClientError::Timeout => f.write_str("timed out waiting for the broker"),
            ClientError::Closed => f.write_str("connection closed by the broker"),
            ClientError::Protocol(m) => write!(f, "protocol: {m}"),
        }
    }
}

impl std::error::Error for ClientError {}

impl From<std::io::Error> for ClientError {
    fn from(e: std::io::Error) -> Self {
        ClientError::Io(e)
    }
}

/// How the SASL tokens travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// SaslHandshake v0, then raw size-prefixed tokens (the pre-KIP-152 flow).
    Raw,
    /// SaslHandshake v1, then SaslAuthenticate at this version (0-2).
    Authenticate(i16),
}

/// The SCRAM variants the client speaks: the gateway's own type (name, Kafka id, and the
/// arithmetic both sides of an exchange share).
pub type ScramHash = kafka_sasl::ScramMechanism;

/// How an authentication attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthOutcome {
    /// Authenticated. `session_lifetime_ms` is what SaslAuthenticate v1+ said (0: no
    /// limit, and always 0 for v0 and the raw flow).
    Authenticated {
        /// KIP-368 session lifetime, 0 when none.
        session_lifetime_ms: i64,
    },
    /// SaslHandshake answered with an error (33: mechanism not offered, 34: wrong state).
    HandshakeRejected {
        /// The error code.
        error_code: i16,
        /// The mechanisms the broker offers.
        mechanisms: Vec<String>,
    },
    /// SaslAuthenticate answered with an error (58: authentication failed, ...).
    Rejected {
        /// The error code.
        error_code: i16,
        /// The broker's message.
        message: Option<String>,
    },
    /// The broker closed the connection instead of answering (the raw flow's way of
    /// failing, and what happens to requests it refuses).
    Closed,
}

impl AuthOutcome {
    /// Whether the attempt succeeded.
    pub fn is_authenticated(&self) -> bool {
        matches!(self, AuthOutcome::Authenticated { .. })
    }
}

/// One SaslAuthenticate answer (or one raw token), as it came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthReply {
    /// The error code (always 0 for a raw token).
    pub error_code: i16,
    /// The error message.
    pub error_message: Option<String>,
    /// The server's SASL bytes.
    pub auth_bytes: Vec<u8>,
    /// KIP-368 session lifetime (v1+), 0 otherwise.
    pub session_lifetime_ms: i64,
}

/// A Kafka connection that can authenticate.
#[derive(Debug)]
pub struct SaslClient<S> {
    io: S,
    correlation_id: i32,
    client_id: String,
    timeout: Duration,
}

impl<S: AsyncRead + AsyncWrite + Unpin> SaslClient<S> {
    /// A client over `io`, with client id `sasl-client` and a 30 s answer timeout.
    pub fn new(io: S) -> SaslClient<S> {
        SaslClient {
            io,
            correlation_id: 0,
            client_id: "sasl-client".into(),
            timeout: Duration::from_secs(30),
        }
    }

    /// Sets how long the client waits for each answer.
    pub fn with_timeout(mut self, timeout: Duration) -> SaslClient<S> {
        self.timeout = timeout;
        self
    }

    /// Sets the client id sent in request headers.
    pub fn with_client_id(mut self, client_id: &str) -> SaslClient<S> {
        self.client_id = client_id.into();
        self
    }

    /// The stream.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.io
    }

    /// The stream, to go on with it after authenticating.
    pub fn into_inner(self) -> S {
        self.io
    }

    /// Writes one frame: `payload` with its size prefix.
    pub async fn send_frame(&mut self, payload: &[u8]) -> Result<(), ClientError> {
        let len = i32::try_from(payload.len())
            .map_err(|_| ClientError::Protocol("frame too large".into()))?;
        let mut out = Vec::with_capacity(4 + payload.len());
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(payload);
        self.io.write_all(&out).await?;
        self.io.flush().await?;
        Ok(())
    }

    /// Reads one frame (without its size prefix); `None` when the broker closed the
    /// connection (or reset it) before a whole frame came.
    pub async fn read_frame(&mut self) -> Result<Option<Bytes>, ClientError> {
        let timeout = self.timeout;
        match tokio::time::timeout(timeout, read_frame(&mut self.io)).await {
            Err(_) => Err(ClientError::Timeout),
            Ok(r) => r,
        }
    }

    /// Whether the broker closes the connection within the client's timeout (reading and
    /// discarding whatever frames come first).
    pub async fn closed_by_peer(&mut self) -> bool {
        loop {
            match self.read_frame().await {
                Ok(Some(_)) => continue,
                Ok(None) => return true,
                Err(ClientError::Timeout) => return false,
                Err(_) => return true,
            }
        }
    }

    /// Sends `body` at `version` and returns the answer, or `Ok(None)` when the broker
    /// closed the connection instead.
    pub async fn request(
        &mut self,
        version: i16,
        body: RequestBody,
    ) -> Result<Option<ResponseBody>, ClientError> {
        self.correlation_id = self.correlation_id.wrapping_add(1);
        let key = body.api_key();
        let header = RequestHeader {
            request_api_key: key.as_i16(),
            request_api_version: version,
            correlation_id: self.correlation_id,
            client_id: Some(ByteString::from(self.client_id.as_str())),
            ..Default::default()
        };
        let frame =
            encode_request(&header, &body).map_err(|e| ClientError::Protocol(e.to_string()))?;
        if let Err(e) = self.io.write_all(&frame).await {
            return closed_or(e);
        }
        if let Err(e) = self.io.flush().await {
            return closed_or(e);
        }
        let Some(answer) = self.read_frame().await? else {
            return Ok(None);
        };
        let (header, body) = decode_response(key, version, &answer)
            .map_err(|e| ClientError::Protocol(format!("{}: {e}", key.name())))?;
        if header.correlation_id != self.correlation_id {
            return Err(ClientError::Protocol(format!(
                "correlation id {} for request {}",
                header.correlation_id, self.correlation_id
            )));
        }
        Ok(Some(body))
    }

    /// ApiVersions v3; `None` when the broker closed the connection.
    pub async fn api_versions(&mut self) -> Result<Option<ApiVersionsResponse>, ClientError> {
        let body = ApiVersionsRequest {
            client_software_name: ByteString::from_static("test-support-sasl"),
            client_software_version: ByteString::from_static("1.0"),
            ..Default::default()
        };
        match self.request(3, RequestBody::ApiVersions(body)).await? {
            Some(ResponseBody::ApiVersions(r)) => Ok(Some(r)),
            Some(other) => Err(unexpected(&other)),
            None => Ok(None),
        }
    }

    /// SaslHandshake at `version` (0 or 1) for `mechanism`: the error code and the
    /// mechanisms offered, or `None` when the broker closed the connection.
    pub async fn handshake(
        &mut self,
        version: i16,
        mechanism: &str,
    ) -> Result<Option<(i16, Vec<String>)>, ClientError> {
        let body = SaslHandshakeRequest {
            mechanism: ByteString::from(mechanism),
        };
        match self
            .request(version, RequestBody::SaslHandshake(body))
            .await?
        {
            Some(ResponseBody::SaslHandshake(r)) => Ok(Some((
                r.error_code,
                r.mechanisms.iter().map(|m| m.to_string()).collect(),
            ))),
            Some(other) => Err(unexpected(&other)),
            None => Ok(None),
        }
    }

    /// One SaslAuthenticate at `version` carrying `auth_bytes`; `None` when the broker
    /// closed the connection.
    pub async fn authenticate(
        &mut self,
        version: i16,
        auth_bytes: &[u8],
    ) -> Result<Option<AuthReply>, ClientError> {
        let body = SaslAuthenticateRequest {
            auth_bytes: Bytes::copy_from_slice(auth_bytes),
            ..Default::default()
        };
        match self
            .request(version, RequestBody::SaslAuthenticate(body))
            .await?
        {
            Some(ResponseBody::SaslAuthenticate(r)) => Ok(Some(AuthReply {
                error_code: r.error_code,
                error_message: r.error_message.map(|m| m.to_string()),
                auth_bytes: r.auth_bytes.to_vec(),
                session_lifetime_ms: r.session_lifetime_ms,
            })),
            Some(other) => Err(unexpected(&other)),
            None => Ok(None),
        }
    }

    /// Sends one token the way `flow` carries it and reads the answer; `None` when the
    /// broker closed the connection.
    pub async fn exchange(
        &mut self,
        flow: Flow,
        token: &[u8],
    ) -> Result<Option<AuthReply>, ClientError> {
        match flow {
            Flow::Authenticate(version) => self.authenticate(version, token).await,
            Flow::Raw => {
                if let Err(e) = self.send_frame(token).await {
                    return match e {
                        ClientError::Io(e) => closed_or(e),
                        e => Err(e),
                    };
                }
                Ok(self.read_frame().await?.map(|b| AuthReply {
                    error_code: 0,
                    error_message: None,
                    auth_bytes: b.to_vec(),
                    session_lifetime_ms: 0,
                }))
            }
        }
    }

    /// SaslHandshake for `mechanism` at the version `flow` needs; `Some(outcome)` when the
    /// attempt ends there (refused, or the connection closed).
    pub async fn start(
        &mut self,
        flow: Flow,
        mechanism: &str,
    ) -> Result<Option<AuthOutcome>, ClientError> {
        let version = match flow {
            Flow::Raw => 0,
            Flow::Authenticate(_) => 1,
        };
        match self.handshake(version, mechanism).await? {
            None => Ok(Some(AuthOutcome::Closed)),
            Some((0, _)) => Ok(None),
            Some((error_code, mechanisms)) => Ok(Some(AuthOutcome::HandshakeRejected {
                error_code,
                mechanisms,
            })),
        }
    }

    /// SASL/PLAIN as `user` with `password`.
    pub async fn plain(
        &mut self,
        flow: Flow,
        user: &str,
        password: &str,
    ) -> Result<AuthOutcome, ClientError> {
        if let Some(end) = self.start(flow, "PLAIN").await? {
            return Ok(end);
        }
        self.plain_token(flow, &plain_token(user, password)).await
    }

    /// Sends a PLAIN token after a successful handshake.
    pub async fn plain_token(
        &mut self,
        flow: Flow,
        token: &[u8],
    ) -> Result<AuthOutcome, ClientError> {
        let reply = self.exchange(flow, token).await?;
        Ok(final_outcome(reply))
    }

    /// SCRAM as `user` with `password`; the server's signature is checked.
    pub async fn scram(
        &mut self,
        flow: Flow,
        hash: ScramHash,
        user: &str,
        password: &str,
    ) -> Result<AuthOutcome, ClientError> {
        if let Some(end) = self.start(flow, hash.name()).await? {
            return Ok(end);
        }
        let mut scram = ScramClient::new(hash, user, password);
        let Some(first) = self.exchange(flow, &scram.client_first()).await? else {
            return Ok(AuthOutcome::Closed);
        };
        if first.error_code != 0 {
            return Ok(rejected(first));
        }
        let client_final = scram.client_final(&first.auth_bytes)?;
        let Some(last) = self.exchange(flow, &client_final).await? else {
            return Ok(AuthOutcome::Closed);
        };
        if last.error_code != 0 {
            return Ok(rejected(last));
        }
        scram.verify_server_final(&last.auth_bytes)?;
        Ok(AuthOutcome::Authenticated {
            session_lifetime_ms: last.session_lifetime_ms,
        })
    }

    /// OAUTHBEARER with the compact JWT `token`. A rejection's JSON challenge is
    /// acknowledged (`\x01`) as the mechanism requires, and the final answer returned.
    pub async fn oauthbearer(
        &mut self,
        flow: Flow,
        token: &str,
    ) -> Result<AuthOutcome, ClientError> {
        if let Some(end) = self.start(flow, "OAUTHBEARER").await? {
            return Ok(end);
        }
        let message = format!("n,,\x01auth=Bearer {token}\x01\x01");
        let Some(reply) = self.exchange(flow, message.as_bytes()).await? else {
            return Ok(AuthOutcome::Closed);
        };
        if reply.error_code == 0 && reply.auth_bytes.first() == Some(&b'{') {
            let ack = self.exchange(flow, b"\x01").await?;
            return Ok(match final_outcome(ack) {
                // A challenge followed by success is not how OAUTHBEARER ends.
                AuthOutcome::Authenticated { .. } => {
                    return Err(ClientError::Protocol(
                        "OAUTHBEARER error challenge followed by success".into(),
                    ));
                }
                other => other,
            });
        }
        Ok(final_outcome(Some(reply)))
    }
}

fn closed_or<T>(e: std::io::Error) -> Result<Option<T>, ClientError> {
    use std::io::ErrorKind::*;
    match e.kind() {
        BrokenPipe | ConnectionReset | ConnectionAborted | UnexpectedEof => Ok(None),
        _ => Err(ClientError::Io(e)),
    }
}

fn unexpected(body: &ResponseBody) -> ClientError {
    ClientError::Protocol(format!("unexpected answer {}", body.api_key().name()))
}

fn rejected(reply: AuthReply) -> AuthOutcome {
    AuthOutcome::Rejected {
        error_code: reply.error_code,
        message: reply.error_message,
    }
}

fn final_outcome(reply: Option<AuthReply>) -> AuthOutcome {
    match reply {
        None => AuthOutcome::Closed,
        Some(r) if r.error_code == 0 => AuthOutcome::Authenticated {
            session_lifetime_ms: r.session_lifetime_ms,
        },
        Some(r) => rejected(r),
    }
}

async fn read_frame<S: AsyncRead + Unpin>(io: &mut S) -> Result<Option<Bytes>, ClientError> {
    let mut len = [0u8; 4];
    if let Err(e) = io.read_exact(&mut len).await {
        return closed_or(e);
    }
    let len = i32::from_be_bytes(len);
    let len = usize::try_from(len)
        .ok()
        .filter(|l| *l <= MAX_FRAME)
        .ok_or_else(|| ClientError::Protocol(format!("frame size {len}")))?;
    let mut buf = vec![0u8; len];
    if let Err(e) = io.read_exact(&mut buf).await {
        return closed_or(e);
    }
    Ok(Some(Bytes::from(buf)))
}

/// The PLAIN message for `user` and `password` (no authorization id).
pub fn plain_token(user: &str, password: &str) -> Vec<u8> {
    let mut t = Vec::with_capacity(2 + user.len() + password.len());
    t.push(0);
    t.extend_from_slice(user.as_bytes());
    t.push(0);
    t.extend_from_slice(password.as_bytes());
    t
}

/// `Hi(password, salt, iterations)`: the salted password of SCRAM, as
/// AlterUserScramCredentials sends it.
pub fn scram_salted_password(
    hash: ScramHash,
    password: &str,
    salt: &[u8],
    iterations: u32,
) -> Vec<u8> {
    hash.salted_password(password.as_bytes(), salt, iterations)
}

/// The client side of one SCRAM exchange, message by message.
#[derive(Debug)]
pub struct ScramClient {
    hash: ScramHash,
    user: String,
    password: String,
    nonce: String,
    client_first_bare: String,
    server_signature: Option<Vec<u8>>,
}

impl ScramClient {
    /// An exchange for `user` with a fresh random nonce.
    pub fn new(hash: ScramHash, user: &str, password: &str) -> ScramClient {
        let mut raw = [0u8; 24];
        // The system RNG failing would leave a zero nonce: still a valid test exchange.
        let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut raw);
        ScramClient::with_nonce(hash, user, password, &B64.encode(raw))
    }

    /// An exchange with the given client nonce.
    pub fn with_nonce(hash: ScramHash, user: &str, password: &str, nonce: &str) -> ScramClient {
        let escaped = user.replace('=', "=3D").replace(',', "=2C");
        ScramClient {
            hash,
            user: user.into(),
            password: password.into(),
            nonce: nonce.into(),
            client_first_bare: format!("n={escaped},r={nonce}"),
            server_signature: None,
        }
    }

    /// The user.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The hash.
    pub fn hash(&self) -> ScramHash {
        self.hash
    }

    /// `n,,n=<user>,r=<nonce>`.
    pub fn client_first(&self) -> Vec<u8> {
        format!("n,,{}", self.client_first_bare).into_bytes()
    }

    /// The client-final message answering `server_first`, with the nonce the server sent.
    pub fn client_final(&mut self, server_first: &[u8]) -> Result<Vec<u8>, ClientError> {
        let nonce = server_nonce(server_first)?;
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err(ClientError::Protocol(
                "server nonce does not extend the client nonce".into(),
            ));
        }
        self.client_final_with_nonce(server_first, &nonce)
    }

    /// The client-final message answering `server_first`, claiming `nonce` (a forged one,
    /// for tests) and with a proof over that claim.
    pub fn client_final_with_nonce(
        &mut self,
        server_first: &[u8],
        nonce: &str,
    ) -> Result<Vec<u8>, ClientError> {
        let text = std::str::from_utf8(server_first)
            .map_err(|_| ClientError::Protocol("server-first is not UTF-8".into()))?;
        let (mut salt, mut iterations) = (None, None);
        for attr in text.split(',') {
            if let Some(s) = attr.strip_prefix("s=") {
                salt = B64.decode(s).ok();
            } else if let Some(i) = attr.strip_prefix("i=") {
                iterations = i.parse::<u32>().ok();
            }
        }
        let (Some(salt), Some(iterations)) = (salt, iterations) else {
            return Err(ClientError::Protocol(format!(
                "server-first without salt or iterations: {text:?}"
            )));
        };
        let salted = scram_salted_password(self.hash, &self.password, &salt, iterations);
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{text},{without_proof}", self.client_first_bare);
        let computed = self.hash.client_proof(&salted, auth_message.as_bytes());
        self.server_signature = Some(computed.server_signature);
        let proof = computed.proof;
        Ok(format!("{without_proof},p={}", B64.encode(proof)).into_bytes())
    }

    /// Checks the server-final message (`v=<signature>`).
    pub fn verify_server_final(&self, server_final: &[u8]) -> Result<(), ClientError> {
        let text = std::str::from_utf8(server_final)
            .map_err(|_| ClientError::Protocol("server-final is not UTF-8".into()))?;
        if let Some(e) = text.strip_prefix("e=") {
            return Err(ClientError::Protocol(format!("server-final error {e:?}")));
        }
        let got = text
            .strip_prefix("v=")
            .and_then(|v| B64.decode(v).ok())
            .ok_or_else(|| ClientError::Protocol(format!("bad server-final {text:?}")))?;
        match &self.server_signature {
            Some(expected) if *expected == got => Ok(()),
            _ => Err(ClientError::Protocol(
                "server signature does not match".into(),
            )),
        }
    }
}

fn server_nonce(server_first: &[u8]) -> Result<String, ClientError> {
    std::str::from_utf8(server_first)
        .ok()
        .and_then(|t| t.split(',').find_map(|a| a.strip_prefix("r=")))
        .map(str::to_owned)
        .ok_or_else(|| ClientError::Protocol("server-first without nonce".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677's SCRAM-SHA-256 example: the client's messages and the server signature.
    #[test]
    fn rfc7677_example() {
        let mut c =
            ScramClient::with_nonce(ScramHash::Sha256, "user", "pencil", "rOprNGfwEbeRWgbNEkqO");
        assert_eq!(c.client_first(), b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let server_first =
            b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let fin = c.client_final(server_first).unwrap();
        assert_eq!(
            String::from_utf8(fin).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        c.verify_server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .unwrap();
        assert!(c.verify_server_final(b"v=AAAA").is_err());
    }

    #[test]
    fn plain_token_layout() {
        assert_eq!(plain_token("a", "b"), b"\0a\0b");
    }

    #[test]
    fn usernames_are_escaped() {
        let c = ScramClient::with_nonce(ScramHash::Sha512, "a=b,c", "p", "n");
        assert_eq!(c.client_first(), b"n,,n=a=3Db=2Cc,r=n");
    }
}
