//! Where credentials come from: the traits a deployment implements (the Iggy bridge, the
//! users file) and what a successful check yields.

use crate::error::{AuthFailure, SaslError};
use crate::scram::{ScramCredential, ScramMechanism};
use async_trait::async_trait;
use std::fmt;
use std::time::SystemTime;

/// Who a successful authentication proved the client to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The principal name (`User:<name>` in Kafka's terms): the SASL username, the token's
    /// principal claim.
    pub name: String,
    /// When the credential stops being valid (an OAUTHBEARER token's `exp`), if it does.
    /// The session lifetime (KIP-368) is never longer.
    pub expires_at: Option<SystemTime>,
}

/// Checks a username and password (SASL/PLAIN).
#[async_trait]
pub trait PlainAuthenticator: Send + Sync + fmt::Debug + 'static {
    /// The identity when `password` is `username`'s, a failure otherwise. Implementations
    /// answer an unknown user exactly as a wrong password (same message, similar time).
    async fn authenticate(&self, username: &str, password: &str) -> Result<Identity, AuthFailure>;
}

/// What [`ScramCredentialStore::describe`] says of one user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramUserInfo {
    /// The user.
    pub user: String,
    /// The mechanisms the user has a credential for, with the iteration count of each.
    pub credentials: Vec<(ScramMechanism, u32)>,
}

/// The SCRAM credentials the gateway keeps (durably: in Iggy with the bridge, in the users
/// file otherwise). Kafka's DescribeUserScramCredentials and AlterUserScramCredentials
/// read and change it.
#[async_trait]
pub trait ScramCredentialStore: Send + Sync + fmt::Debug + 'static {
    /// `user`'s credential for `mechanism`, if one is set.
    async fn credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
    ) -> Result<Option<ScramCredential>, SaslError>;

    /// The users with at least one credential, or of `users` those that have one, sorted
    /// by name.
    async fn describe(&self, users: Option<&[String]>) -> Result<Vec<ScramUserInfo>, SaslError>;

    /// Sets (creates or replaces) `user`'s credential for its mechanism, durably before
    /// returning.
    async fn upsert(&self, user: &str, credential: ScramCredential) -> Result<(), SaslError>;

    /// Removes `user`'s credential for `mechanism`; `false` when there was none.
    async fn delete(&self, user: &str, mechanism: ScramMechanism) -> Result<bool, SaslError>;
}
