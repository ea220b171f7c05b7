//! One authentication exchange, token by token.
//!
//! The broker creates one [`Authenticator`] for the process (mechanisms enabled, credential
//! sources), and for each SaslHandshake an [`Exchange`] with [`Authenticator::start`]. Every
//! token the client sends goes to [`Exchange::step`]; the [`Step`] says what to send back
//! and whether the exchange is over.

use crate::credentials::{Identity, PlainAuthenticator, ScramCredentialStore};
use crate::error::{AuthFailure, FailureKind};
use crate::mechanism::Mechanism;
use crate::oauth::OAuthValidator;
use crate::scram::ScramBounds;
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
        Vec::new()
    }

    /// A new exchange for the mechanism named `name`, or `None` when it is not offered.
    pub fn start(&self, name: &str) -> Option<Exchange> {
        let _ = name;
        None
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

/// One exchange in progress.
#[derive(Debug, Clone)]
pub struct Exchange {
    mechanism: Mechanism,
}

impl Exchange {
    /// The mechanism.
    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    /// Takes the client's next token. After [`Step::Done`] or [`Step::Failed`] every
    /// further token fails as malformed.
    pub async fn step(&mut self, auth: &Authenticator, token: &[u8], now: SystemTime) -> Step {
        let _ = (auth, token, now);
        Step::Failed(AuthFailure::new(FailureKind::Malformed, "not implemented"))
    }
}
