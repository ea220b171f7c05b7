//! The authentication layer: SASL on SASL listeners, between the client-info layer and
//! the quota layer.
//!
//! A connection on a SASL listener starts [`AuthState::Pending`]. Until it authenticates
//! only ApiVersions, SaslHandshake and SaslAuthenticate get through; anything else closes
//! the connection (logged at most once per [`REFUSAL_LOG_EVERY`] with a count, since a
//! client can trigger it at will).
//!
//! - SaslHandshake (v0/v1) names a mechanism. One the authenticator does not offer is
//!   answered `UNSUPPORTED_SASL_MECHANISM` with the offered list, then the connection
//!   closes. Otherwise the session gets an [`Exchange`] (kept in [`Session::sasl`]). After
//!   a v0 handshake the client's tokens come as raw frames: the connection loop hands them
//!   to [`Authentication::raw_token`] instead of the decoder.
//! - SaslAuthenticate (v0-2) feeds the token to the exchange. A step runs while holding one
//!   of `max_concurrent_authentications` permits (gateway-wide), and within the
//!   connection's authentication deadline. Success sets the principal (`User:<name>`) and
//!   [`AuthState::Authenticated`] with the KIP-368 deadline: the shorter of the configured
//!   session lifetime and the credential's own expiry, reported as `session_lifetime_ms`
//!   (0 when neither applies). A rejection is answered `SASL_AUTHENTICATION_FAILED` with
//!   the mechanism's message, after the peer's [`FailureBackoff`] delay (the permit is not
//!   held while waiting), and the connection closes once the answer is written.
//! - SaslHandshake or SaslAuthenticate out of order, or on a listener without SASL, is
//!   answered `ILLEGAL_SASL_STATE`; out of order during authentication it also closes.
//! - Re-authentication (KIP-368): an authenticated session may start another exchange with
//!   SaslHandshake v1 and the same mechanism; it must prove the same principal or it fails
//!   like any rejection. Once past its deadline a session may send nothing else: any other
//!   request closes the connection.
//!
//! A token step runs on a blocking thread (driving the mechanism's future there), holding
//! its concurrency permit: PBKDF2 for PLAIN hashes, SCRAM proofs and token signatures
//! cost milliseconds of CPU each and must not stall the async workers that serve every
//! other connection. A credential source that waits on the network (PLAIN against Iggy)
//! holds one blocking thread per step, at most `max_concurrent_authentications` of them.
//!
//! No token, password or proof is logged; the failure messages come from the mechanism,
//! which keeps secrets out of them.

use super::{Layer, Request, Verdict};
use crate::config::SaslSettings;
use crate::metrics::{KindLabel, ListenerLabel, Metrics, SaslLabels};
use crate::session::{AuthState, Principal, SaslExchange, Session};
use async_trait::async_trait;
use bytes::Bytes;
use bytestring::ByteString;
use kafka_protocol::messages::sasl_authenticate_response::SaslAuthenticateResponse;
use kafka_protocol::messages::sasl_handshake_response::SaslHandshakeResponse;
use kafka_protocol::{ApiKey, ErrorCode, RequestBody, ResponseBody};
use kafka_sasl::{AuthFailure, Authenticator, FailureBackoff, FailureKind, Mechanism, Step};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tracing::{debug, info, warn};

/// At most one line per this long about requests refused before authentication.
pub const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

/// SASL for the connections of SASL listeners.
#[derive(Debug)]
pub struct Authentication {
    authenticator: Arc<Authenticator>,
    settings: SaslSettings,
    permits: Arc<Semaphore>,
    backoff: Mutex<FailureBackoff>,
    metrics: Option<Arc<Metrics>>,
    refusals: Mutex<Refusals>,
}

/// How one token step ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Send the challenge, wait for the next token.
    Continue(Vec<u8>),
    /// Authenticated: send `final_message`; `lifetime_ms` is the KIP-368 session lifetime.
    Done {
        final_message: Vec<u8>,
        lifetime_ms: i64,
    },
    /// Rejected, after the failure delay: answer (if the flow can) and close.
    Failed(AuthFailure),
    /// The step did not finish within the authentication deadline: close.
    TimedOut,
}

impl Authentication {
    /// Authentication with `authenticator` under `settings`, counting into `metrics`.
    pub fn new(
        authenticator: Arc<Authenticator>,
        settings: SaslSettings,
        metrics: Option<Arc<Metrics>>,
    ) -> Authentication {
        let backoff = FailureBackoff::new(
            settings.failure_delay,
            settings.failure_delay_max,
            settings.max_failure_peers,
        );
        Authentication {
            permits: Arc::new(Semaphore::new(
                settings.max_concurrent_authentications.max(1),
            )),
            authenticator,
            settings,
            backoff: Mutex::new(backoff),
            metrics,
            refusals: Mutex::new(Refusals::default()),
        }
    }

    /// The authenticator.
    pub fn authenticator(&self) -> &Arc<Authenticator> {
        &self.authenticator
    }

    fn mechanism_names(&self) -> Vec<ByteString> {
        self.authenticator
            .mechanisms()
            .into_iter()
            .map(|m| ByteString::from_static(m.name()))
            .collect()
    }

    fn handshake_answer(&self, error: ErrorCode) -> ResponseBody {
        SaslHandshakeResponse {
            error_code: error.code(),
            mechanisms: self.mechanism_names(),
        }
        .into()
    }

    fn handshake(&self, session: &mut Session, version: i16, name: &str) -> Verdict {
        let now = std::time::Instant::now();
        let reauthentication = match session.auth {
            AuthState::NotRequired => {
                return Verdict::Answer(
                    SaslHandshakeResponse {
                        error_code: ErrorCode::ILLEGAL_SASL_STATE.code(),
                        mechanisms: Vec::new(),
                    }
                    .into(),
                );
            }
            AuthState::Pending => false,
            AuthState::Authenticated { .. } => true,
        };
        if session.sasl.exchange.is_some() {
            return Verdict::AnswerThenClose(
                self.handshake_answer(ErrorCode::ILLEGAL_SASL_STATE),
                "SaslHandshake during an authentication",
            );
        }
        if reauthentication && version == 0 {
            // Re-authentication needs SaslAuthenticate, so a v1 handshake.
            if session.is_expired(now) {
                return self.expired(session);
            }
            return Verdict::Answer(self.handshake_answer(ErrorCode::ILLEGAL_SASL_STATE));
        }
        let mechanism = Mechanism::from_name(name);
        if reauthentication && mechanism != session.sasl.mechanism {
            return Verdict::AnswerThenClose(
                self.handshake_answer(ErrorCode::UNSUPPORTED_SASL_MECHANISM),
                "re-authentication with another mechanism",
            );
        }
        let Some(exchange) = self.authenticator.start(name) else {
            debug!("SaslHandshake for a mechanism that is not offered");
            self.failure_metric(session, "unknown", "unsupported_mechanism");
            return Verdict::AnswerThenClose(
                self.handshake_answer(ErrorCode::UNSUPPORTED_SASL_MECHANISM),
                "SASL mechanism not offered",
            );
        };
        session.sasl.exchange = Some(Arc::new(SaslExchange {
            exchange,
            raw: version == 0,
            reauthentication,
        }));
        Verdict::Answer(self.handshake_answer(ErrorCode::NONE))
    }

    async fn authenticate(&self, session: &mut Session, version: i16, token: &Bytes) -> Verdict {
        let illegal = |message: &'static str| SaslAuthenticateResponse {
            error_code: ErrorCode::ILLEGAL_SASL_STATE.code(),
            error_message: Some(ByteString::from_static(message)),
            ..Default::default()
        };
        match session.auth {
            AuthState::NotRequired => {
                return Verdict::Answer(illegal("this listener does not use SASL").into());
            }
            _ if session.sasl.exchange.as_ref().is_none_or(|e| e.raw) => {
                if session.is_authenticated() && !session.is_expired(std::time::Instant::now()) {
                    return Verdict::Answer(
                        illegal("SaslAuthenticate without a SaslHandshake").into(),
                    );
                }
                return Verdict::AnswerThenClose(
                    illegal("SaslAuthenticate without a SaslHandshake").into(),
                    "SaslAuthenticate out of order",
                );
            }
            _ => {}
        }
        match self.step(session, token).await {
            Outcome::Continue(challenge) => Verdict::Answer(
                SaslAuthenticateResponse {
                    auth_bytes: Bytes::from(challenge),
                    ..Default::default()
                }
                .into(),
            ),
            Outcome::Done {
                final_message,
                lifetime_ms,
            } => Verdict::Answer(
                SaslAuthenticateResponse {
                    auth_bytes: Bytes::from(final_message),
                    session_lifetime_ms: if version >= 1 { lifetime_ms } else { 0 },
                    ..Default::default()
                }
                .into(),
            ),
            Outcome::Failed(failure) => Verdict::AnswerThenClose(
                SaslAuthenticateResponse {
                    error_code: ErrorCode::SASL_AUTHENTICATION_FAILED.code(),
                    error_message: Some(ByteString::from(failure.message)),
                    auth_bytes: failure.final_message.map(Bytes::from).unwrap_or_default(),
                    ..Default::default()
                }
                .into(),
                "SASL authentication failed",
            ),
            Outcome::TimedOut => Verdict::Close("authentication timeout"),
        }
    }

    /// A raw token (the frames after a SaslHandshake v0): the bytes to send back as a raw
    /// frame, or `None` to close the connection (a rejection, after its delay).
    pub(crate) async fn raw_token(&self, session: &mut Session, token: &[u8]) -> Option<Vec<u8>> {
        match self.step(session, token).await {
            Outcome::Continue(challenge) => Some(challenge),
            Outcome::Done { final_message, .. } => Some(final_message),
            Outcome::Failed(_) | Outcome::TimedOut => None,
        }
    }

    /// Runs one token through the session's exchange. The exchange is put back only while
    /// it goes on.
    pub(crate) async fn step(&self, session: &mut Session, token: &[u8]) -> Outcome {
        let Some(progress) = session.sasl.exchange.take() else {
            return Outcome::Failed(AuthFailure::new(
                FailureKind::Malformed,
                "no SASL exchange in progress",
            ));
        };
        let SaslExchange {
            exchange,
            raw,
            reauthentication,
        } = Arc::unwrap_or_clone(progress);
        let mechanism = exchange.mechanism();
        // Pending sessions must finish by the connection's deadline; a re-authentication
        // gets a full authentication timeout from its first token.
        let deadline = match session.auth {
            AuthState::Pending => {
                Instant::from_std(session.opened) + self.settings.authentication_timeout
            }
            _ => Instant::now() + self.settings.authentication_timeout,
        };
        let (exchange, step) = if token.len() > self.authenticator.config().max_token_bytes {
            (
                None,
                Step::Failed(AuthFailure::new(
                    FailureKind::TooLarge,
                    "SASL token larger than the maximum",
                )),
            )
        } else {
            let run = async {
                // The semaphore is never closed; a failure to acquire would be a bug.
                let Ok(permit) = self.permits.clone().acquire_owned().await else {
                    return None;
                };
                // A step can be CPU-heavy (PBKDF2 for PLAIN hashes, signature checks):
                // it runs on a blocking thread, never on the connections' async
                // workers. The permit goes with it, so at most
                // `max_concurrent_authentications` such threads are busy, even when a
                // timed-out step is still finishing.
                let mut exchange = exchange;
                let authenticator = self.authenticator.clone();
                let token = token.to_vec();
                let runtime = tokio::runtime::Handle::current();
                let job = tokio::task::spawn_blocking(move || {
                    let _permit = permit;
                    let step =
                        runtime.block_on(exchange.step(&authenticator, &token, SystemTime::now()));
                    (exchange, step)
                });
                job.await.ok()
            };
            match tokio::time::timeout_at(deadline, run).await {
                Ok(Some((exchange, step))) => (Some(exchange), step),
                Ok(None) => (
                    None,
                    Step::Failed(AuthFailure::new(
                        FailureKind::Unavailable,
                        "authentication unavailable",
                    )),
                ),
                Err(_) => {
                    info!(mechanism = mechanism.name(), timeout = ?self.settings.authentication_timeout, "authentication not completed in time, closing connection");
                    self.failure_metric(session, mechanism.name(), "timeout");
                    return Outcome::TimedOut;
                }
            }
        };
        let step = match step {
            Step::Done { identity, .. }
                if reauthentication && *session.principal.name != *identity.name =>
            {
                Step::Failed(AuthFailure::new(
                    FailureKind::BadCredentials,
                    "re-authentication must prove the same principal",
                ))
            }
            other => other,
        };
        match step {
            Step::Continue(challenge) => {
                let Some(exchange) = exchange else {
                    // Only a step that ran can continue.
                    return Outcome::Failed(AuthFailure::new(
                        FailureKind::Malformed,
                        "SASL exchange lost",
                    ));
                };
                session.sasl.exchange = Some(Arc::new(SaslExchange {
                    exchange,
                    raw,
                    reauthentication,
                }));
                Outcome::Continue(challenge)
            }
            Step::Done {
                identity,
                final_message,
            } => {
                let now = SystemTime::now();
                let token_left = identity
                    .expires_at
                    .map(|t| t.duration_since(now).unwrap_or(Duration::ZERO));
                let lifetime = match (self.settings.session_lifetime, token_left) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                session.auth = AuthState::Authenticated {
                    expires: lifetime.map(|l| std::time::Instant::now() + l),
                };
                if !reauthentication {
                    session.principal = Principal::user(&identity.name);
                }
                session.sasl.mechanism = Some(mechanism);
                // A success does not clear the peer's delay: a client holding one valid
                // account could otherwise interleave logins with guesses at other accounts
                // and never be slowed. Successes are never delayed; the delay of a peer
                // that stops failing is forgotten after the quiet period.
                if let Some(m) = &self.metrics {
                    m.sasl_authentications
                        .get_or_create(&SaslLabels {
                            listener: session.listener.name.to_string(),
                            mechanism: mechanism.name(),
                            outcome: "success",
                        })
                        .inc();
                    if reauthentication {
                        m.sasl_reauthentications
                            .get_or_create(&ListenerLabel {
                                listener: session.listener.name.to_string(),
                            })
                            .inc();
                    }
                }
                debug!(
                    mechanism = mechanism.name(),
                    principal = %session.principal,
                    reauthentication,
                    lifetime_ms = lifetime.map(|l| l.as_millis()),
                    "authenticated"
                );
                Outcome::Done {
                    final_message,
                    lifetime_ms: lifetime
                        .map(|l| i64::try_from(l.as_millis()).unwrap_or(i64::MAX).max(1))
                        .unwrap_or(0),
                }
            }
            Step::Failed(failure) => {
                let delay = self
                    .lock_backoff()
                    .failed(session.peer.ip(), std::time::Instant::now());
                let kind = kind_name(failure.kind);
                self.failure_metric(session, mechanism.name(), kind);
                info!(
                    mechanism = mechanism.name(),
                    kind,
                    reason = %failure.message,
                    delay_ms = delay.as_millis(),
                    "SASL authentication failed, closing connection after the delay"
                );
                // The permit is already released: waiting costs only this connection.
                tokio::time::sleep(delay).await;
                Outcome::Failed(failure)
            }
        }
    }

    fn lock_backoff(&self) -> std::sync::MutexGuard<'_, FailureBackoff> {
        // The backoff table has no invariant a panic could break half-way.
        self.backoff.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn failure_metric(&self, session: &Session, mechanism: &'static str, kind: &'static str) {
        if let Some(m) = &self.metrics {
            m.sasl_authentications
                .get_or_create(&SaslLabels {
                    listener: session.listener.name.to_string(),
                    mechanism,
                    outcome: "failure",
                })
                .inc();
            m.sasl_failures.get_or_create(&KindLabel { kind }).inc();
        }
    }

    fn expired(&self, session: &Session) -> Verdict {
        if let Some(m) = &self.metrics {
            m.sasl_expired_closes
                .get_or_create(&ListenerLabel {
                    listener: session.listener.name.to_string(),
                })
                .inc();
        }
        debug!(principal = %session.principal, "session past its lifetime without re-authentication, closing connection");
        Verdict::Close("session expired")
    }

    fn refuse(&self, session: &Session, api: ApiKey) -> Verdict {
        let mut r = self.refusals.lock().unwrap_or_else(|e| e.into_inner());
        r.count += 1;
        let now = Instant::now();
        if r.last
            .is_none_or(|t| now.duration_since(t) >= REFUSAL_LOG_EVERY)
        {
            warn!(
                api = api.name(),
                peer = %session.peer,
                refused = r.count,
                "request before SASL authentication, closing connection (count since the last such line)"
            );
            r.last = Some(now);
            r.count = 0;
        }
        Verdict::Close("request before authentication")
    }
}

/// Requests refused before authentication since the last log line.
#[derive(Debug, Default)]
struct Refusals {
    last: Option<Instant>,
    count: u64,
}

fn kind_name(kind: FailureKind) -> &'static str {
    match kind {
        FailureKind::BadCredentials => "bad_credentials",
        FailureKind::Malformed => "malformed",
        FailureKind::TooLarge => "too_large",
        FailureKind::Unavailable => "unavailable",
    }
}

#[async_trait]
impl Layer for Authentication {
    fn name(&self) -> &'static str {
        "authentication"
    }

    async fn on_request(&self, session: &mut Session, request: &mut Request) -> Verdict {
        match &request.body {
            RequestBody::SaslHandshake(h) => {
                let name = h.mechanism.clone();
                self.handshake(session, request.version, &name)
            }
            RequestBody::SaslAuthenticate(a) => {
                let token = a.auth_bytes.clone();
                self.authenticate(session, request.version, &token).await
            }
            _ => match session.auth {
                AuthState::NotRequired => Verdict::Pass,
                AuthState::Pending if request.api == ApiKey::ApiVersions => Verdict::Pass,
                AuthState::Pending => self.refuse(session, request.api),
                AuthState::Authenticated { .. }
                    if session.is_expired(std::time::Instant::now()) =>
                {
                    self.expired(session)
                }
                AuthState::Authenticated { .. } => Verdict::Pass,
            },
        }
    }
}
