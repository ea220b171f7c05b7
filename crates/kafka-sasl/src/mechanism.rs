//! The SASL mechanisms this crate serves, by their IANA/Kafka names.

use crate::scram::ScramMechanism;
use std::fmt;

/// A SASL mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mechanism {
    /// `PLAIN` (RFC 4616).
    Plain,
    /// `SCRAM-SHA-256` (RFC 7677).
    ScramSha256,
    /// `SCRAM-SHA-512`.
    ScramSha512,
    /// `OAUTHBEARER` (RFC 7628).
    OAuthBearer,
}

impl Mechanism {
    /// Every mechanism, in the order they are offered.
    pub const ALL: [Mechanism; 4] = [
        Mechanism::Plain,
        Mechanism::ScramSha256,
        Mechanism::ScramSha512,
        Mechanism::OAuthBearer,
    ];

    /// The name clients send in SaslHandshake.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
            Mechanism::OAuthBearer => "OAUTHBEARER",
        }
    }

    /// The mechanism named `name` (exact, case-sensitive, as Kafka compares).
    pub fn from_name(name: &str) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The SCRAM variant, for the two SCRAM mechanisms.
    pub fn scram(self) -> Option<ScramMechanism> {
        match self {
            Mechanism::ScramSha256 => Some(ScramMechanism::Sha256),
            Mechanism::ScramSha512 => Some(ScramMechanism::Sha512),
            _ => None,
        }
    }
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Mechanism {
    type Err = crate::SaslError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Mechanism::from_name(s.trim()).ok_or_else(|| crate::SaslError::UnknownMechanism(s.into()))
    }
}
