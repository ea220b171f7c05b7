//! One authentication exchange, token by token.
//!
//! The broker creates one [`Authenticator`] for the process (mechanisms enabled, credential
//! sources), and for each SaslHandshake an [`Exchange`] with [`Authenticator::start`]. Every
//! token the client sends goes to [`Exchange::step`]; the [`Step`] says what to send back
//! and whether the exchange is over.
//!
//! An exchange is a small state machine. PLAIN takes one token. SCRAM takes two: the
//! client-first message (answered with the server-first challenge) and the client-final
//! message (answered with the server signature). OAUTHBEARER takes one token, or two when
//! the token is refused: the server answers a bad token with an error document and waits
//! for the client's one-byte acknowledgement before failing, as RFC 7628 describes. Every
//! token is checked against the size bound before it is looked at; once an exchange is over,
//! whatever comes next fails as malformed.
//!
//! The [`Authenticator`] holds a random per-process secret. SCRAM uses it to answer a user
//! it does not know with a salt and iteration count derived from the name, the same on
//! every attempt, so a client cannot tell an unknown user from a known one by the challenge.

use crate::credentials::{Identity, PlainAuthenticator, ScramCredentialStore};
use crate::error::{AuthFailure, FailureKind};
use crate::mechanism::Mechanism;
use crate::oauth::OAuthValidator;
use crate::scram::{self, ScramBounds};
use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

/// Which mechanisms are offered and how they are bounded.
#[derive(Debug, Clone)]
pub struct SaslConfig {
    /// Mechanisms offered, in order (SaslHandshake lists them).
    pub mechanisms: Vec<Mechanism>,
    /// Iteration bounds for SCRAM credentials.
    pub scram: ScramBounds,
    /// Largest token accepted from a client, in bytes (each step).
    pub max_token_bytes: usize,
}

impl Default for SaslConfig {
    fn default() -> Self {
        SaslConfig {
            mechanisms: vec![
                Mechanism::Plain,
                Mechanism::ScramSha256,
                Mechanism::ScramSha512,
            ],
            scram: ScramBounds::default(),
            max_token_bytes: 64 * 1024,
        }
    }
}

/// The mechanisms and credential sources of a gateway.
#[derive(Debug, Clone)]
pub struct Authenticator {
    config: SaslConfig,
    plain: Option<Arc<dyn PlainAuthenticator>>,
    scram: Option<Arc<dyn ScramCredentialStore>>,
    oauth: Option<Arc<OAuthValidator>>,
    secret: Arc<Secret>,
}

/// The per-process key of fake SCRAM salts.
pub(crate) struct Secret(pub(crate) [u8; 32]);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    fn generate() -> Secret {
        let mut key = [0u8; 32];
        if ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut key).is_err() {
            // The system RNG failing is not expected; fall back to a value that still differs
            // per process and per start, so fake salts stay unpredictable enough to not
            // match a real user's across restarts.
            let seed = format!(
                "{:?}{}{:p}",
                std::time::SystemTime::now(),
                std::process::id(),
                &key
            );
            key.copy_from_slice(
                ring::digest::digest(&ring::digest::SHA256, seed.as_bytes()).as_ref(),
            );
        }
        Secret(key)
    }
}

impl Authenticator {
    /// An authenticator offering `config.mechanisms` that have a source: PLAIN needs
    /// `plain`, SCRAM needs `scram`, OAUTHBEARER needs `oauth`.
    pub fn new(
        config: SaslConfig,
        plain: Option<Arc<dyn PlainAuthenticator>>,
        scram: Option<Arc<dyn ScramCredentialStore>>,
        oauth: Option<Arc<OAuthValidator>>,
    ) -> Authenticator {
        Authenticator {
            config,
            plain,
            scram,
            oauth,
            secret: Arc::new(Secret::generate()),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SaslConfig {
        &self.config
    }

    /// The SCRAM credential store, for the APIs that manage it.
    pub fn scram_store(&self) -> Option<&Arc<dyn ScramCredentialStore>> {
        self.scram.as_ref()
    }

    /// The mechanisms offered (those configured that have a credential source).
    pub fn mechanisms(&self) -> Vec<Mechanism> {
        let mut out: Vec<Mechanism> = Vec::new();
        for &m in &self.config.mechanisms {
            let available = match m {
                Mechanism::Plain => self.plain.is_some(),
                Mechanism::ScramSha256 | Mechanism::ScramSha512 => self.scram.is_some(),
                Mechanism::OAuthBearer => self.oauth.is_some(),
            };
            if available && !out.contains(&m) {
                out.push(m);
            }
        }
        out
    }

    /// The names of [`Authenticator::mechanisms`], as SaslHandshake lists them.
    pub fn mechanism_names(&self) -> Vec<&'static str> {
        self.mechanisms().into_iter().map(Mechanism::name).collect()
    }

    /// A new exchange for the mechanism named `name`, or `None` when it is not offered.
    pub fn start(&self, name: &str) -> Option<Exchange> {
        let mechanism = Mechanism::from_name(name)?;
        if !self.mechanisms().contains(&mechanism) {
            return None;
        }
        let state = match mechanism {
            Mechanism::Plain => State::Plain,
            Mechanism::ScramSha256 => State::ScramFirst(crate::ScramMechanism::Sha256),
            Mechanism::ScramSha512 => State::ScramFirst(crate::ScramMechanism::Sha512),
            Mechanism::OAuthBearer => State::OAuth,
        };
        Some(Exchange { mechanism, state })
    }
}

/// What to do after a client token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Send this challenge and wait for the client's next token.
    Continue(Vec<u8>),
    /// Authenticated: send `final_message` (possibly empty) as the last `auth_bytes`.
    Done {
        /// Who the client is.
        identity: Identity,
        /// The server's last message (SCRAM's `v=...`), empty for PLAIN and OAUTHBEARER.
        final_message: Vec<u8>,
    },
    /// Rejected: the exchange is over.
    Failed(AuthFailure),
}

/// Where an exchange stands.
#[derive(Debug, Clone)]
enum State {
    Plain,
    ScramFirst(crate::ScramMechanism),
    ScramFinal(Box<scram::Pending>),
    OAuth,
    /// The error document was sent; the client's acknowledgement ends the exchange.
    OAuthRefused(AuthFailure),
    Over,
}

/// One exchange in progress.
#[derive(Debug, Clone)]
pub struct Exchange {
    mechanism: Mechanism,
    state: State,
}

impl Exchange {
    /// The mechanism.
    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    /// Takes the client's next token. After [`Step::Done`] or [`Step::Failed`] every
    /// further token fails as malformed.
    pub async fn step(&mut self, auth: &Authenticator, token: &[u8], now: SystemTime) -> Step {
        let state = std::mem::replace(&mut self.state, State::Over);
        if token.len() > auth.config.max_token_bytes {
            return Step::Failed(AuthFailure::new(
                FailureKind::TooLarge,
                format!(
                    "SASL token of {} bytes is larger than the limit of {} bytes",
                    token.len(),
                    auth.config.max_token_bytes
                ),
            ));
        }
        match state {
            State::Plain => self.plain(auth, token).await,
            State::ScramFirst(mechanism) => {
                let Some(store) = &auth.scram else {
                    return unavailable(self.mechanism);
                };
                match scram::server_first(
                    mechanism,
                    store.as_ref(),
                    &auth.config.scram,
                    &auth.secret.0,
                    token,
                )
                .await
                {
                    Ok((pending, challenge)) => {
                        self.state = State::ScramFinal(Box::new(pending));
                        Step::Continue(challenge)
                    }
                    Err(failure) => Step::Failed(failure),
                }
            }
            State::ScramFinal(pending) => match pending.verify_final(token) {
                Ok((identity, final_message)) => Step::Done {
                    identity,
                    final_message,
                },
                Err(failure) => Step::Failed(failure),
            },
            State::OAuth => {
                let Some(validator) = &auth.oauth else {
                    return unavailable(self.mechanism);
                };
                match crate::oauth::server_step(validator, token, now) {
                    Ok(identity) => Step::Done {
                        identity,
                        final_message: Vec::new(),
                    },
                    Err(crate::oauth::Refusal::Challenge(document, failure)) => {
                        self.state = State::OAuthRefused(failure);
                        Step::Continue(document)
                    }
                    Err(crate::oauth::Refusal::Fail(failure)) => Step::Failed(failure),
                }
            }
            State::OAuthRefused(failure) => {
                if token == [crate::oauth::KVSEP] {
                    Step::Failed(failure)
                } else {
                    Step::Failed(AuthFailure::new(
                        FailureKind::Malformed,
                        "OAUTHBEARER: expected the client's acknowledgement of the error",
                    ))
                }
            }
            State::Over => Step::Failed(AuthFailure::new(
                FailureKind::Malformed,
                "SASL exchange already finished",
            )),
        }
    }

    /// Whether the exchange is over (done or failed).
    pub fn is_over(&self) -> bool {
        matches!(self.state, State::Over)
    }

    async fn plain(&mut self, auth: &Authenticator, token: &[u8]) -> Step {
        let Some(checker) = &auth.plain else {
            return unavailable(self.mechanism);
        };
        let message = match crate::plain::parse(token) {
            Ok(m) => m,
            Err(failure) => return Step::Failed(failure),
        };
        match checker
            .authenticate(message.username, message.password)
            .await
        {
            Ok(identity) => Step::Done {
                identity,
                final_message: Vec::new(),
            },
            Err(failure) => Step::Failed(failure),
        }
    }
}

fn unavailable(mechanism: Mechanism) -> Step {
    Step::Failed(AuthFailure::new(
        FailureKind::Unavailable,
        format!("SASL mechanism {mechanism} has no credential source"),
    ))
}

#[cfg(test)]
mod tests;
