//! Errors: configuration and store failures ([`SaslError`]) and rejected authentications
//! ([`AuthFailure`]).

use std::fmt;

/// A failure that is not the client's fault: bad configuration, an unreadable file, a store
/// that could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum SaslError {
    /// A mechanism name this crate does not implement.
    #[error("unknown SASL mechanism {0:?}")]
    UnknownMechanism(String),
    /// A JWKS document that cannot be used.
    #[error("invalid JWKS: {0}")]
    InvalidJwks(String),
    /// A users file that cannot be read, parsed or written.
    #[error("users file {path}: {reason}")]
    UsersFile {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A principal mapping rule that cannot be parsed.
    #[error("invalid principal mapping rule {rule:?}: {reason}")]
    InvalidMappingRule {
        /// The rule as written.
        rule: String,
        /// What is wrong.
        reason: String,
    },
    /// A credential store failed (the Iggy bridge could not read or write).
    #[error("credential store: {0}")]
    Store(String),
    /// A value outside its allowed range (SCRAM iterations, salt length, ...).
    #[error("{0}")]
    Invalid(String),
}

/// Why an authentication was rejected, for metrics and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// Wrong username or password, unknown user, bad proof, invalid token.
    BadCredentials,
    /// A message that does not follow the mechanism's syntax, or arrives out of order.
    Malformed,
    /// A token or message larger than allowed.
    TooLarge,
    /// The credential store could not answer.
    Unavailable,
}

/// A rejected authentication.
///
/// `message` is what the client is told (Kafka's `error_message`): it never says whether
/// the user exists and never carries a secret. `final_message` is a last server message
/// some mechanisms send before failing (SCRAM's `e=...`), if any.
#[derive(Clone, PartialEq, Eq)]
pub struct AuthFailure {
    /// Why.
    pub kind: FailureKind,
    /// For the client and the log.
    pub message: String,
    /// Bytes to send as the failed SaslAuthenticate's `auth_bytes`, if the mechanism has any.
    pub final_message: Option<Vec<u8>>,
}

impl AuthFailure {
    /// A failure of `kind` with `message` and no final bytes.
    pub fn new(kind: FailureKind, message: impl Into<String>) -> AuthFailure {
        AuthFailure {
            kind,
            message: message.into(),
            final_message: None,
        }
    }
}

impl fmt::Debug for AuthFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthFailure")
            .field("kind", &self.kind)
            .field("message", &self.message)
            .field("final_message", &self.final_message.as_ref().map(Vec::len))
            .finish()
    }
}
