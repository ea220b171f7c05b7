//! The server side of Kafka's SASL authentication, without I/O.
//!
//! - [`Authenticator`] runs one exchange per [`Exchange`]: the broker hands it each token the
//!   client sends (from SaslAuthenticate, or a raw v0 frame) and sends back what it returns.
//! - Mechanisms: PLAIN ([`plain`], RFC 4616), SCRAM-SHA-256 and SCRAM-SHA-512 ([`scram`],
//!   RFC 5802/7677 with Kafka's `tokenauth` extension), OAUTHBEARER ([`oauth`], RFC 7628:
//!   JWTs checked against a JWKS loaded from configuration, never fetched at run time).
//! - Credentials come through traits: [`PlainAuthenticator`] checks a username and password
//!   (the Iggy bridge logs into Iggy; [`UsersFile`] checks salted hashes), and
//!   [`ScramCredentialStore`] keeps SCRAM credentials (salt, iterations, stored key, server
//!   key; never passwords), which Kafka's AlterUserScramCredentials manages.
//! - [`FailureBackoff`] gives the delay a peer waits after each rejection.
//! - [`PrincipalMapper`] turns a client certificate's distinguished name into a principal
//!   name, with rules in the syntax of Kafka's `ssl.principal.mapping.rules`.
//!
//! Time is passed in; nothing here sleeps, reads sockets or spawns tasks. Comparisons of
//! secrets are constant-time, and no error or `Debug` output carries a secret.

pub mod backoff;
pub mod credentials;
pub mod error;
pub mod exchange;
pub mod mapping;
pub mod mechanism;
pub mod oauth;
pub mod plain;
pub mod scram;
pub mod users_file;

pub use backoff::FailureBackoff;
pub use credentials::{Identity, PlainAuthenticator, ScramCredentialStore, ScramUserInfo};
pub use error::{AuthFailure, FailureKind, SaslError};
pub use exchange::{Authenticator, Exchange, SaslConfig, Step};
pub use mapping::PrincipalMapper;
pub use mechanism::Mechanism;
pub use oauth::{Jwks, OAuthConfig, OAuthValidator};
pub use scram::{ClientProof, ScramBounds, ScramCredential, ScramMechanism};
pub use users_file::UsersFile;
