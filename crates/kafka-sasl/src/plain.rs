//! SASL/PLAIN (RFC 4616): `[authzid] NUL authcid NUL passwd`, checked by a
//! [`PlainAuthenticator`](crate::PlainAuthenticator). An authorization id, when given, must
//! equal the username (Kafka's rule).
//!
//! The whole exchange is one client message. It must hold exactly two NUL separators, valid
//! UTF-8 in each part, a non-empty username and password, and each part within its bound.
//! Anything else is malformed and never reaches the credential check; a well-formed message
//! with a wrong password fails exactly as one with an unknown username.

use crate::error::{AuthFailure, FailureKind};

/// Longest username (and authorization id) accepted, in bytes (RFC 4616's 255).
pub const MAX_USERNAME_BYTES: usize = 255;
/// Longest password accepted, in bytes. Above RFC 4616's advisory 255 so that API keys and
/// tokens used as passwords fit.
pub const MAX_PASSWORD_BYTES: usize = 1024;

/// A parsed PLAIN message.
#[derive(Clone, PartialEq, Eq)]
pub struct PlainMessage<'a> {
    /// The username (authentication id).
    pub username: &'a str,
    /// The password.
    pub password: &'a str,
}

impl std::fmt::Debug for PlainMessage<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlainMessage")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

fn malformed(message: &str) -> AuthFailure {
    AuthFailure::new(FailureKind::Malformed, message)
}

/// Splits and checks a PLAIN message.
pub fn parse(token: &[u8]) -> Result<PlainMessage<'_>, AuthFailure> {
    let mut parts = token.splitn(3, |&b| b == 0);
    let (Some(authzid), Some(username), Some(password)) =
        (parts.next(), parts.next(), parts.next())
    else {
        return Err(malformed(
            "Invalid SASL/PLAIN message: expected authzid NUL username NUL password",
        ));
    };
    if password.contains(&0) {
        return Err(malformed(
            "Invalid SASL/PLAIN message: too many NUL separators",
        ));
    }
    if authzid.len() > MAX_USERNAME_BYTES
        || username.len() > MAX_USERNAME_BYTES
        || password.len() > MAX_PASSWORD_BYTES
    {
        return Err(AuthFailure::new(
            FailureKind::TooLarge,
            "Invalid SASL/PLAIN message: a field is too long",
        ));
    }
    let (Ok(authzid), Ok(username), Ok(password)) = (
        std::str::from_utf8(authzid),
        std::str::from_utf8(username),
        std::str::from_utf8(password),
    ) else {
        return Err(malformed("Invalid SASL/PLAIN message: not UTF-8"));
    };
    if username.is_empty() {
        return Err(malformed("Invalid SASL/PLAIN message: empty username"));
    }
    if password.is_empty() {
        return Err(malformed("Invalid SASL/PLAIN message: empty password"));
    }
    if !authzid.is_empty() && authzid != username {
        return Err(AuthFailure::new(
            FailureKind::BadCredentials,
            "Authentication failed: the authorization id must be empty or equal the username",
        ));
    }
    Ok(PlainMessage { username, password })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn well_formed_messages() {
        let m = parse(b"\0alice\0secret").expect("no authzid");
        assert_eq!((m.username, m.password), ("alice", "secret"));
        let m = parse(b"alice\0alice\0pw").expect("same authzid");
        assert_eq!(m.username, "alice");
        let m = parse("\0jos\u{e9}\0p\u{e4}ss".as_bytes()).expect("utf-8");
        assert_eq!(m.password, "p\u{e4}ss");
    }

    #[test]
    fn malformed_messages() {
        let long_user = format!("\0{}\0pw", "u".repeat(256));
        let long_pw = format!("\0u\0{}", "p".repeat(1025));
        let cases: Vec<(&[u8], FailureKind)> = vec![
            (b"", FailureKind::Malformed),
            (b"alice", FailureKind::Malformed),
            (b"\0alice", FailureKind::Malformed),
            (b"\0alice\0", FailureKind::Malformed),
            (b"\0\0pw", FailureKind::Malformed),
            (b"\0a\0b\0c", FailureKind::Malformed),
            (b"\0a\xff\0pw", FailureKind::Malformed),
            (b"bob\0alice\0pw", FailureKind::BadCredentials),
            (long_user.as_bytes(), FailureKind::TooLarge),
            (long_pw.as_bytes(), FailureKind::TooLarge),
        ];
        for (token, kind) in cases {
            let err = parse(token).expect_err("refused");
            assert_eq!(err.kind, kind, "{:?}", String::from_utf8_lossy(token));
            assert!(!err.message.contains("pw"));
        }
    }
}
