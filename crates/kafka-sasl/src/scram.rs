//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), server side, as Kafka speaks
//! them: no channel binding (`n,,` only), the `tokenauth` extension refused, usernames
//! with `=2C`/`=3D` escapes.
//!
//! A [`ScramCredential`] is what the server keeps: salt, iterations, stored key and server
//! key. It cannot be used to log in, and it is what Kafka's AlterUserScramCredentials
//! delivers (as a salted password, from which the keys are derived here).

use crate::error::SaslError;
use std::fmt;

/// The hash behind a SCRAM mechanism, with Kafka's numeric id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScramMechanism {
    /// SCRAM-SHA-256 (Kafka id 1).
    Sha256,
    /// SCRAM-SHA-512 (Kafka id 2).
    Sha512,
}

impl ScramMechanism {
    /// Kafka's id in Describe/AlterUserScramCredentials (`0` is unknown).
    pub fn id(self) -> i8 {
        match self {
            ScramMechanism::Sha256 => 1,
            ScramMechanism::Sha512 => 2,
        }
    }

    /// The mechanism with Kafka's id `id`.
    pub fn from_id(id: i8) -> Option<ScramMechanism> {
        match id {
            1 => Some(ScramMechanism::Sha256),
            2 => Some(ScramMechanism::Sha512),
            _ => None,
        }
    }

    /// The SASL mechanism name (`SCRAM-SHA-256`, `SCRAM-SHA-512`).
    pub fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    /// The hash's output length in bytes (32 or 64).
    pub fn hash_len(self) -> usize {
        match self {
            ScramMechanism::Sha256 => 32,
            ScramMechanism::Sha512 => 64,
        }
    }
}

/// Allowed iteration counts, for credentials set through AlterUserScramCredentials and
/// read from stores. Kafka's own bounds are 4096..=16384.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScramBounds {
    /// Fewest iterations accepted.
    pub min_iterations: u32,
    /// Most iterations accepted.
    pub max_iterations: u32,
}

impl Default for ScramBounds {
    fn default() -> Self {
        ScramBounds {
            min_iterations: 4096,
            max_iterations: 16384,
        }
    }
}

/// What the server keeps of a SCRAM password.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramCredential {
    /// The hash.
    pub mechanism: ScramMechanism,
    /// The salt.
    pub salt: Vec<u8>,
    /// PBKDF2 iterations.
    pub iterations: u32,
    /// `H(HMAC(SaltedPassword, "Client Key"))`.
    pub stored_key: Vec<u8>,
    /// `HMAC(SaltedPassword, "Server Key")`.
    pub server_key: Vec<u8>,
}

impl fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramCredential")
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

impl ScramCredential {
    /// The credential for a salted password (`Hi(password, salt, iterations)`), as
    /// AlterUserScramCredentials sends it. Checks the lengths and `bounds`.
    pub fn from_salted_password(
        mechanism: ScramMechanism,
        salt: &[u8],
        iterations: u32,
        salted_password: &[u8],
        bounds: &ScramBounds,
    ) -> Result<ScramCredential, SaslError> {
        let _ = (mechanism, salt, iterations, salted_password, bounds);
        Err(SaslError::Invalid("not implemented".into()))
    }

    /// A credential for `password` with a fresh random salt.
    pub fn from_password(
        mechanism: ScramMechanism,
        password: &str,
        iterations: u32,
    ) -> Result<ScramCredential, SaslError> {
        let _ = (mechanism, password, iterations);
        Err(SaslError::Invalid("not implemented".into()))
    }
}
