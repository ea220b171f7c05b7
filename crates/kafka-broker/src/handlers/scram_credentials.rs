//! DescribeUserScramCredentials (key 50) and AlterUserScramCredentials (key 51): the SCRAM
//! credentials of the authenticator's store (the users file, or Iggy with the bridge).
//!
//! Only the principals of `sasl.super_users` may call them; anyone else gets
//! `CLUSTER_AUTHORIZATION_FAILED`, at the top level for Describe and for every user for
//! Alter. The per-user answers follow Kafka's controller:
//!
//! - Describe: no users (null or empty) lists every user with a credential; a user named
//!   twice is `DUPLICATE_RESOURCE`, one without any credential `RESOURCE_NOT_FOUND`.
//! - Alter: one result per user, in the order users first appear (deletions first). A
//!   user altered twice in one request, whatever the mechanisms, is `DUPLICATE_RESOURCE`
//!   and nothing of it changes; an empty name or an iteration count, salt or salted
//!   password the bounds refuse is `UNACCEPTABLE_CREDENTIAL`; an unknown mechanism id
//!   `UNSUPPORTED_SASL_MECHANISM`; deleting a credential that does not exist
//!   `RESOURCE_NOT_FOUND`. What is accepted is applied, deletions then upsertions.
//!
//! The request carries salted passwords, never passwords; the store keeps only the
//! derived keys. Nothing secret is logged.

use super::Ctx;
use bytestring::ByteString;
use kafka_protocol::ErrorCode;
use kafka_protocol::messages::alter_user_scram_credentials_request::AlterUserScramCredentialsRequest;
use kafka_protocol::messages::alter_user_scram_credentials_response::{
    AlterUserScramCredentialsResponse, AlterUserScramCredentialsResult,
};
use kafka_protocol::messages::describe_user_scram_credentials_request::DescribeUserScramCredentialsRequest;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResponse, DescribeUserScramCredentialsResult,
};
use kafka_sasl::{SaslError, ScramCredential, ScramCredentialStore, ScramMechanism};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use tracing::{info, warn};

const DUPLICATE_DESCRIBE: &str =
    "Cannot describe SCRAM credentials for the same user twice in a single request";
const DUPLICATE_ALTER: &str = "A user credential cannot be altered twice in the same request";
const NOT_AUTHORIZED: &str = "Only super users may manage SCRAM credentials";

/// Whether the session's principal may manage users.
fn is_super_user(ctx: &Ctx<'_>) -> bool {
    let principal = ctx.session.principal.to_string();
    ctx.broker
        .config
        .sasl
        .super_users
        .iter()
        .any(|u| u.trim() == principal)
}

fn store(ctx: &Ctx<'_>) -> Option<Arc<dyn ScramCredentialStore>> {
    ctx.broker
        .authentication
        .as_ref()
        .and_then(|a| a.authenticator().scram_store().cloned())
}

/// DescribeUserScramCredentials.
pub(crate) async fn describe(
    ctx: &Ctx<'_>,
    r: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    if !is_super_user(ctx) {
        return DescribeUserScramCredentialsResponse {
            error_code: ErrorCode::CLUSTER_AUTHORIZATION_FAILED.code(),
            error_message: Some(ByteString::from_static(NOT_AUTHORIZED)),
            ..Default::default()
        };
    }
    let asked: Option<Vec<String>> = r
        .users
        .filter(|u| !u.is_empty())
        .map(|u| u.into_iter().map(|n| n.name.to_string()).collect());
    let Some(store) = store(ctx) else {
        // No store: nobody has a credential.
        return DescribeUserScramCredentialsResponse {
            results: asked
                .map(|users| describe_missing(&users, &HashMap::new()))
                .unwrap_or_default(),
            ..Default::default()
        };
    };
    let unique: Option<Vec<String>> = asked.as_ref().map(|users| {
        let mut seen = HashSet::new();
        users
            .iter()
            .filter(|u| seen.insert(u.as_str()))
            .cloned()
            .collect()
    });
    let found = match store.describe(unique.as_deref()).await {
        Ok(found) => found,
        Err(e) => {
            warn!(error = %e, "SCRAM credential store could not describe users");
            return DescribeUserScramCredentialsResponse {
                error_code: ErrorCode::UNKNOWN_SERVER_ERROR.code(),
                error_message: Some(ByteString::from_static("credential store unavailable")),
                ..Default::default()
            };
        }
    };
    let infos: HashMap<String, Vec<CredentialInfo>> = found
        .into_iter()
        .filter(|u| !u.credentials.is_empty())
        .map(|u| {
            let infos = u
                .credentials
                .iter()
                .map(|(m, iterations)| CredentialInfo {
                    mechanism: m.id(),
                    iterations: i32::try_from(*iterations).unwrap_or(i32::MAX),
                    ..Default::default()
                })
                .collect();
            (u.user, infos)
        })
        .collect();
    let results = match asked {
        Some(users) => describe_missing(&users, &infos),
        None => {
            let mut all: Vec<_> = infos.into_iter().collect();
            all.sort_by(|a, b| a.0.cmp(&b.0));
            all.into_iter()
                .map(
                    |(user, credential_infos)| DescribeUserScramCredentialsResult {
                        user: ByteString::from(user),
                        credential_infos,
                        ..Default::default()
                    },
                )
                .collect()
        }
    };
    DescribeUserScramCredentialsResponse {
        results,
        ..Default::default()
    }
}

/// One result per distinct user asked for, in request order: duplicates and users
/// without a credential are errors.
fn describe_missing(
    users: &[String],
    infos: &HashMap<String, Vec<CredentialInfo>>,
) -> Vec<DescribeUserScramCredentialsResult> {
    let mut count: HashMap<&str, usize> = HashMap::new();
    for u in users {
        *count.entry(u.as_str()).or_default() += 1;
    }
    let mut done = HashSet::new();
    users
        .iter()
        .filter(|u| done.insert(u.as_str()))
        .map(|u| {
            let (error, message, credential_infos) = if count[u.as_str()] > 1 {
                (
                    ErrorCode::DUPLICATE_RESOURCE,
                    Some(format!("{DUPLICATE_DESCRIBE}: {u}")),
                    Vec::new(),
                )
            } else if let Some(i) = infos.get(u) {
                (ErrorCode::NONE, None, i.clone())
            } else {
                (
                    ErrorCode::RESOURCE_NOT_FOUND,
                    Some(format!(
                        "Attempt to describe a user credential that does not exist: {u}"
                    )),
                    Vec::new(),
                )
            };
            DescribeUserScramCredentialsResult {
                user: ByteString::from(u.as_str()),
                error_code: error.code(),
                error_message: message.map(ByteString::from),
                credential_infos,
                ..Default::default()
            }
        })
        .collect()
}

/// What one user's alteration became.
enum Change {
    Delete(ScramMechanism),
    Upsert(ScramCredential),
    Refused(ErrorCode, String),
}

/// AlterUserScramCredentials.
pub(crate) async fn alter(
    ctx: &Ctx<'_>,
    r: AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    let mut order: Vec<String> = Vec::new();
    let mut changes: HashMap<String, Change> = HashMap::new();
    let authorized = is_super_user(ctx);
    let store = store(ctx);
    let bounds = ctx
        .broker
        .authentication
        .as_ref()
        .map(|a| a.authenticator().config().scram)
        .unwrap_or_default();
    let deletions = r
        .deletions
        .into_iter()
        .map(|d| (d.name.to_string(), d.mechanism, None));
    let upsertions = r.upsertions.into_iter().map(|u| {
        let name = u.name.to_string();
        (
            name,
            u.mechanism,
            Some((u.iterations, u.salt, u.salted_password)),
        )
    });
    for (user, mechanism, upsert) in deletions.chain(upsertions) {
        if let Some(previous) = changes.get(&user) {
            // Altered twice; an earlier refusal of the user stands.
            if !matches!(previous, Change::Refused(..)) {
                changes.insert(
                    user,
                    Change::Refused(ErrorCode::DUPLICATE_RESOURCE, DUPLICATE_ALTER.into()),
                );
            }
            continue;
        }
        order.push(user.clone());
        let change = if !authorized {
            Change::Refused(
                ErrorCode::CLUSTER_AUTHORIZATION_FAILED,
                NOT_AUTHORIZED.into(),
            )
        } else if user.is_empty() {
            Change::Refused(
                ErrorCode::UNACCEPTABLE_CREDENTIAL,
                "Username must not be empty".into(),
            )
        } else if let Some(m) = ScramMechanism::from_id(mechanism) {
            match upsert {
                None => Change::Delete(m),
                Some((iterations, salt, salted)) => {
                    if iterations < 0 || (iterations as u32) < bounds.min_iterations {
                        Change::Refused(
                            ErrorCode::UNACCEPTABLE_CREDENTIAL,
                            "Too few iterations".into(),
                        )
                    } else if iterations as u32 > bounds.max_iterations {
                        Change::Refused(
                            ErrorCode::UNACCEPTABLE_CREDENTIAL,
                            "Too many iterations".into(),
                        )
                    } else {
                        match ScramCredential::from_salted_password(
                            m,
                            &salt,
                            iterations as u32,
                            &salted,
                            &bounds,
                        ) {
                            Ok(c) => Change::Upsert(c),
                            Err(SaslError::Invalid(message)) => {
                                Change::Refused(ErrorCode::UNACCEPTABLE_CREDENTIAL, message)
                            }
                            Err(e) => {
                                Change::Refused(ErrorCode::UNACCEPTABLE_CREDENTIAL, e.to_string())
                            }
                        }
                    }
                }
            }
        } else {
            Change::Refused(
                ErrorCode::UNSUPPORTED_SASL_MECHANISM,
                "Unknown SCRAM mechanism".into(),
            )
        };
        changes.insert(user, change);
    }
    let mut results = Vec::with_capacity(order.len());
    let (mut deleted, mut upserted, mut refused) = (0usize, 0usize, 0usize);
    // Deletions first, then upsertions, each in request order.
    let mut outcome: HashMap<&str, (ErrorCode, Option<String>)> = HashMap::new();
    for pass in [true, false] {
        for user in &order {
            let Some(change) = changes.get(user) else {
                continue;
            };
            let result = match (change, pass) {
                (Change::Delete(m), true) => Some(match &store {
                    None => not_found_delete(),
                    Some(s) => match s.delete(user, *m).await {
                        Ok(true) => {
                            deleted += 1;
                            (ErrorCode::NONE, None)
                        }
                        Ok(false) => not_found_delete(),
                        Err(e) => store_failed(&e),
                    },
                }),
                (Change::Upsert(c), false) => Some(match &store {
                    None => (
                        ErrorCode::UNSUPPORTED_SASL_MECHANISM,
                        Some("SCRAM is not enabled on this gateway".into()),
                    ),
                    Some(s) => match s.upsert(user, c.clone()).await {
                        Ok(()) => {
                            upserted += 1;
                            (ErrorCode::NONE, None)
                        }
                        Err(e) => store_failed(&e),
                    },
                }),
                (Change::Refused(code, message), true) => {
                    refused += 1;
                    Some((*code, Some(message.clone())))
                }
                _ => None,
            };
            if let Some(r) = result {
                outcome.insert(user.as_str(), r);
            }
        }
    }
    for user in &order {
        let (code, message) = outcome
            .remove(user.as_str())
            .unwrap_or((ErrorCode::UNKNOWN_SERVER_ERROR, None));
        results.push(AlterUserScramCredentialsResult {
            user: ByteString::from(user.as_str()),
            error_code: code.code(),
            error_message: message.map(ByteString::from),
            ..Default::default()
        });
    }
    if deleted + upserted > 0 || refused > 0 {
        info!(
            principal = %ctx.session.principal,
            deleted, upserted, refused,
            "AlterUserScramCredentials"
        );
    }
    AlterUserScramCredentialsResponse {
        results,
        ..Default::default()
    }
}

fn not_found_delete() -> (ErrorCode, Option<String>) {
    (
        ErrorCode::RESOURCE_NOT_FOUND,
        Some("Attempt to delete a user credential that does not exist".into()),
    )
}

fn store_failed(e: &SaslError) -> (ErrorCode, Option<String>) {
    warn!(error = %e, "SCRAM credential store could not apply a change");
    (
        ErrorCode::UNKNOWN_SERVER_ERROR,
        Some("credential store unavailable".into()),
    )
}
