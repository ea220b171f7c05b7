//! DescribeClientQuotas (key 48) and AlterClientQuotas (key 49): the client quotas set
//! on this gateway (see [`crate::quotas`]).
//!
//! Entities: `client-id` with a name, or with a null name for the default client-id
//! entity. `user` and `ip` entities are valid in Kafka but have nothing to apply to here
//! yet (no authenticated principals; connection rates per IP are not quotas here):
//! AlterClientQuotas refuses them with `INVALID_REQUEST`, and filters on them match
//! nothing.
//!
//! AlterClientQuotas checks every entry as Kafka does: an empty entity, an unknown or
//! repeated entity type, an unknown quota key, a value that is not finite, zero or less,
//! or fractional for a byte rate are `INVALID_REQUEST`; a new entity beyond
//! `quotas.max_entities` is `POLICY_VIOLATION`. With `validate_only` nothing changes.
//! With `quotas.alter_enabled` off, every entry is `CLUSTER_AUTHORIZATION_FAILED`.

use super::{Ctx, bs};
use crate::quotas::{EntityName, QuotaEntity, QuotaKey, QuotaValues};
use bytestring::ByteString;
use kafka_protocol::ErrorCode;
use kafka_protocol::messages::alter_client_quotas_request::{AlterClientQuotasRequest, EntryData};
use kafka_protocol::messages::alter_client_quotas_response::{
    AlterClientQuotasResponse, EntityData as AlterEntity, EntryData as AlterEntry,
};
use kafka_protocol::messages::describe_client_quotas_request::{
    ComponentData, DescribeClientQuotasRequest,
};
use kafka_protocol::messages::describe_client_quotas_response::{
    DescribeClientQuotasResponse, EntityData, EntryData as DescribeEntry, ValueData,
};
use std::collections::BTreeSet;
use std::sync::Arc;
use tracing::{info, warn};

const USER: &str = "user";
const CLIENT_ID: &str = "client-id";
const IP: &str = "ip";

/// DescribeClientQuotas match types.
const MATCH_EXACT: i8 = 0;
const MATCH_DEFAULT: i8 = 1;
const MATCH_SPECIFIED: i8 = 2;

/// A filter component, checked.
#[derive(Debug)]
enum Match {
    Exact(String),
    Default,
    Specified,
}

impl Match {
    fn accepts(&self, name: &EntityName) -> bool {
        match (self, name) {
            (Match::Exact(want), EntityName::Named(n)) => **n == **want,
            (Match::Default, EntityName::Default) => true,
            (Match::Specified, EntityName::Named(_)) => true,
            _ => false,
        }
    }
}

fn invalid(msg: impl Into<String>) -> DescribeClientQuotasResponse {
    DescribeClientQuotasResponse {
        error_code: ErrorCode::INVALID_REQUEST.code(),
        error_message: Some(bs(msg)),
        entries: None,
        ..DescribeClientQuotasResponse::default()
    }
}

/// Reads the filter: `(entity type, match)` per component.
fn filter(components: &[ComponentData]) -> Result<Vec<(String, Match)>, String> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(components.len().min(3));
    for c in components {
        let kind = &*c.entity_type;
        if ![USER, CLIENT_ID, IP].contains(&kind) {
            return Err(format!("Custom entity type '{kind}' not supported"));
        }
        if !seen.insert(kind.to_string()) {
            return Err(format!(
                "Entity type {kind} cannot appear more than once in the filter"
            ));
        }
        let m = match (c.match_type, c.match_.as_deref()) {
            (MATCH_EXACT, Some(name)) => Match::Exact(name.to_string()),
            (MATCH_EXACT, None) => {
                return Err(
                    "Request specified MATCH_TYPE_EXACT, but set match string to null".into(),
                );
            }
            (MATCH_DEFAULT, None) => Match::Default,
            (MATCH_SPECIFIED, None) => Match::Specified,
            (MATCH_DEFAULT | MATCH_SPECIFIED, Some(_)) => {
                return Err(
                    "Request specified a default or specified match type, but also a match string"
                        .into(),
                );
            }
            (other, _) => return Err(format!("Unknown match type {other}")),
        };
        out.push((kind.to_string(), m));
    }
    if seen.contains(IP) && seen.len() > 1 {
        return Err("Ip filters cannot be combined with user or client-id filters".into());
    }
    Ok(out)
}

/// Whether `entity` passes the filter.
fn matches(entity: &QuotaEntity, filter: &[(String, Match)], strict: bool) -> bool {
    let component = |kind: &str| match kind {
        USER => entity.user.as_ref(),
        CLIENT_ID => entity.client_id.as_ref(),
        _ => None,
    };
    let all_match = filter.iter().all(|(kind, m)| match component(kind) {
        Some(name) => m.accepts(name),
        None => false,
    });
    if !all_match {
        return false;
    }
    // Strict: the entity has no component the filter does not name.
    !strict
        || entity
            .components()
            .iter()
            .all(|(kind, _)| filter.iter().any(|(k, _)| k == kind))
}

pub(crate) fn describe(
    ctx: &Ctx<'_>,
    req: DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    let filter = match filter(&req.components) {
        Ok(f) => f,
        Err(msg) => return invalid(msg),
    };
    let mut found: Vec<(QuotaEntity, QuotaValues)> = ctx
        .broker
        .quotas
        .entities()
        .into_iter()
        .filter(|(e, _)| matches(e, &filter, req.strict))
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    let entries = found
        .into_iter()
        .map(|(entity, values)| DescribeEntry {
            entity: entity
                .components()
                .into_iter()
                .map(|(kind, name)| EntityData {
                    entity_type: ByteString::from_static(kind),
                    entity_name: name.map(bs),
                    ..EntityData::default()
                })
                .collect(),
            values: values
                .into_iter()
                .map(|(key, value)| ValueData {
                    key: ByteString::from_static(key.name()),
                    value,
                    ..ValueData::default()
                })
                .collect(),
            ..DescribeEntry::default()
        })
        .collect();
    DescribeClientQuotasResponse {
        error_code: ErrorCode::NONE.code(),
        error_message: None,
        entries: Some(entries),
        ..DescribeClientQuotasResponse::default()
    }
}

/// The entity an entry names, checked.
fn entity(entry: &EntryData) -> Result<QuotaEntity, String> {
    if entry.entity.is_empty() {
        return Err("Invalid empty client quota entity".into());
    }
    let mut seen = BTreeSet::new();
    let mut client_id = None;
    for e in &entry.entity {
        let kind = &*e.entity_type;
        if !seen.insert(kind) {
            return Err(format!(
                "Duplicate {kind} entity in the client quota entity"
            ));
        }
        match kind {
            CLIENT_ID => {
                client_id = Some(match e.entity_name.as_deref() {
                    None => EntityName::Default,
                    Some(n) => EntityName::Named(Arc::from(n)),
                });
            }
            USER | IP => {
                return Err(format!(
                    "{kind} quotas are not supported by this gateway; use client-id entities"
                ));
            }
            other => return Err(format!("Unhandled client quota entity type: {other}")),
        }
    }
    Ok(QuotaEntity {
        user: None,
        client_id,
    })
}

/// The entity's values after the entry's operations.
fn apply(entry: &EntryData, mut values: QuotaValues) -> Result<QuotaValues, String> {
    let mut seen = BTreeSet::new();
    for op in &entry.ops {
        let Some(key) = QuotaKey::parse(&op.key) else {
            return Err(format!("Invalid configuration key {}", &*op.key));
        };
        if !seen.insert(key) {
            return Err(format!("Duplicate quota key {}", key.name()));
        }
        if op.remove {
            values.remove(&key);
        } else {
            key.check(op.value)?;
            values.insert(key, op.value);
        }
    }
    Ok(values)
}

pub(crate) fn alter(ctx: &Ctx<'_>, req: AlterClientQuotasRequest) -> AlterClientQuotasResponse {
    let quotas = &ctx.broker.quotas;
    let mut failed = 0usize;
    let mut changed = 0usize;
    let entries = req
        .entries
        .iter()
        .map(|entry| {
            let outcome = entity(entry).and_then(|e| {
                let current = quotas.get(&e);
                let is_new = current.is_none();
                let values = apply(entry, current.unwrap_or_default())?;
                Ok((e, values, is_new))
            });
            let (code, message) = match outcome {
                _ if !quotas.config().alter_enabled => (
                    ErrorCode::CLUSTER_AUTHORIZATION_FAILED,
                    Some("changing client quotas is disabled on this gateway".to_string()),
                ),
                Err(msg) => (ErrorCode::INVALID_REQUEST, Some(msg)),
                Ok((_, values, true)) if !values.is_empty() && !quotas.has_room() => (
                    ErrorCode::POLICY_VIOLATION,
                    Some(format!(
                        "at most {} client quota entities can be set",
                        quotas.config().max_entities
                    )),
                ),
                Ok(_) if req.validate_only => (ErrorCode::NONE, None),
                Ok((e, values, _)) => match quotas.set(e, values) {
                    Ok(()) => {
                        changed += 1;
                        (ErrorCode::NONE, None)
                    }
                    Err(err) => {
                        warn!(error = %err, "client quota could not be kept");
                        (ErrorCode::UNKNOWN_SERVER_ERROR, Some(err.to_string()))
                    }
                },
            };
            if code != ErrorCode::NONE {
                failed += 1;
            }
            AlterEntry {
                error_code: code.code(),
                error_message: message.map(bs),
                entity: entry
                    .entity
                    .iter()
                    .map(|e| AlterEntity {
                        entity_type: e.entity_type.clone(),
                        entity_name: e.entity_name.clone(),
                        ..AlterEntity::default()
                    })
                    .collect(),
                ..AlterEntry::default()
            }
        })
        .collect();
    if changed > 0 || failed > 0 {
        info!(
            entries = req.entries.len(),
            changed,
            failed,
            validate_only = req.validate_only,
            "AlterClientQuotas"
        );
    }
    AlterClientQuotasResponse {
        entries,
        ..AlterClientQuotasResponse::default()
    }
}
