//! The users file: the embedded deployment's credentials, one JSON document of users, each
//! with an optional salted PLAIN password hash (PBKDF2-HMAC-SHA-512) and SCRAM credentials.
//! Never a password in the clear. Changes (AlterUserScramCredentials) are written to a
//! temporary file and renamed over the old one, so a crash leaves the old or the new file.

use crate::credentials::{Identity, PlainAuthenticator, ScramCredentialStore, ScramUserInfo};
use crate::error::{AuthFailure, FailureKind, SaslError};
use crate::scram::{ScramCredential, ScramMechanism};
use async_trait::async_trait;
use std::path::{Path, PathBuf};

/// Users and their credentials, optionally kept in a file.
#[derive(Debug)]
pub struct UsersFile {
    path: Option<PathBuf>,
}

impl UsersFile {
    /// Reads `path`; a missing file is an empty set of users that is created on first change.
    pub fn load(path: &Path) -> Result<UsersFile, SaslError> {
        Ok(UsersFile {
            path: Some(path.to_path_buf()),
        })
    }

    /// Users kept in memory only (tests, development).
    pub fn in_memory() -> UsersFile {
        UsersFile { path: None }
    }

    /// Sets `user`'s PLAIN password (stored as a salted hash) and writes the file.
    pub fn set_password(&self, user: &str, password: &str) -> Result<(), SaslError> {
        let _ = (user, password, &self.path);
        Err(SaslError::Invalid("not implemented".into()))
    }
}

#[async_trait]
impl PlainAuthenticator for UsersFile {
    async fn authenticate(&self, username: &str, password: &str) -> Result<Identity, AuthFailure> {
        let _ = (username, password);
        Err(AuthFailure::new(FailureKind::BadCredentials, "not implemented"))
    }
}

#[async_trait]
impl ScramCredentialStore for UsersFile {
    async fn credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
    ) -> Result<Option<ScramCredential>, SaslError> {
        let _ = (user, mechanism);
        Ok(None)
    }

    async fn describe(&self, users: Option<&[String]>) -> Result<Vec<ScramUserInfo>, SaslError> {
        let _ = users;
        Ok(Vec::new())
    }

    async fn upsert(&self, user: &str, credential: ScramCredential) -> Result<(), SaslError> {
        let _ = (user, credential);
        Err(SaslError::Invalid("not implemented".into()))
    }

    async fn delete(&self, user: &str, mechanism: ScramMechanism) -> Result<bool, SaslError> {
        let _ = (user, mechanism);
        Ok(false)
    }
}
