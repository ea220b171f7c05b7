//! OAUTHBEARER (RFC 7628) with JWTs: the client's `n,,\x01auth=Bearer <jwt>\x01\x01`
//! message, the token's signature checked against a JWKS loaded from configuration (RS256,
//! RS384, RS512, PS256, PS384, PS512, ES256, ES384), `exp`/`nbf`/`iat` with a clock skew,
//! issuer and audience when configured, and the principal from a configurable claim.
//! Unsecured tokens (`alg: none`) only when [`OAuthConfig::allow_unsecured`] is set.

use crate::credentials::Identity;
use crate::error::{AuthFailure, FailureKind, SaslError};
use std::time::{Duration, SystemTime};

/// Public keys that may sign tokens, from a JWKS document (RFC 7517).
#[derive(Debug, Clone, Default)]
pub struct Jwks {
    _private: (),
}

impl Jwks {
    /// Parses a JWKS document. Keys of unsupported types are skipped (with their `kid` in
    /// [`Jwks::skipped`]); a document with no usable key is an error.
    pub fn from_json(json: &[u8]) -> Result<Jwks, SaslError> {
        let _ = json;
        Err(SaslError::InvalidJwks("not implemented".into()))
    }

    /// How many usable keys the document had.
    pub fn len(&self) -> usize {
        0
    }

    /// Whether the document had no usable key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// How tokens are checked.
#[derive(Debug, Clone)]
pub struct OAuthConfig {
    /// Keys that may sign tokens.
    pub jwks: Jwks,
    /// Required `iss`, if any.
    pub issuer: Option<String>,
    /// Required `aud` (one of the token's audiences), if any.
    pub audience: Option<String>,
    /// The claim that names the principal (`sub` by default).
    pub principal_claim: String,
    /// Accept unsigned (`alg: none`) tokens: for development only.
    pub allow_unsecured: bool,
    /// Tolerance for `exp`, `nbf` and `iat`.
    pub clock_skew: Duration,
}

/// Checks bearer tokens against an [`OAuthConfig`].
#[derive(Debug, Clone)]
pub struct OAuthValidator {
    config: OAuthConfig,
}

impl OAuthValidator {
    /// A validator for `config`.
    pub fn new(config: OAuthConfig) -> OAuthValidator {
        OAuthValidator { config }
    }

    /// The configuration.
    pub fn config(&self) -> &OAuthConfig {
        &self.config
    }

    /// The identity a compact JWT proves at `now` (with `expires_at` from `exp`).
    pub fn validate(&self, token: &str, now: SystemTime) -> Result<Identity, AuthFailure> {
        let _ = (token, now);
        Err(AuthFailure::new(
            FailureKind::BadCredentials,
            "not implemented",
        ))
    }
}

/// The separator of OAUTHBEARER's key/value pairs (and the client's acknowledgement).
pub(crate) const KVSEP: u8 = 0x01;

/// Why a client message was not accepted.
#[allow(dead_code)] // constructed once token checks land
pub(crate) enum Refusal {
    /// Send this error document and fail after the client's acknowledgement.
    Challenge(Vec<u8>, AuthFailure),
    /// Fail now.
    Fail(AuthFailure),
}

/// Handles the client's message.
pub(crate) fn server_step(
    validator: &OAuthValidator,
    token: &[u8],
    now: SystemTime,
) -> Result<Identity, Refusal> {
    let _ = (validator, token, now);
    Err(Refusal::Fail(AuthFailure::new(
        FailureKind::Malformed,
        "not implemented",
    )))
}
