//! DescribeAcls (key 29), CreateAcls (key 30) and DeleteAcls (key 31): Kafka's ACL
//! management over the broker's [`AclAuthorizer`](kafka_authz::AclAuthorizer) and its
//! store.
//!
//! - CreateAcls answers per creation. A creation with an unknown code, a filter-only
//!   value (resource type ANY, pattern type ANY or MATCH, operation ANY, permission
//!   ANY), an empty resource name, a principal not of the form `Type:name`, an empty host,
//!   the read-only host [`READ_ONLY_HOST`], or a name, principal or host longer than
//!   `authorization.max_acl_field_bytes` gets `INVALID_REQUEST` with the reason. The
//!   valid ones are added to the store in one call; when that would take the store past
//!   its bound, the ones already stored and as many new ones as fit (in request order)
//!   are added in one more call, and each one that does not fit gets `POLICY_VIOLATION`
//!   naming the bound. A store that fails gets `UNKNOWN_SERVER_ERROR` on the creations
//!   it was asked to add.
//! - DeleteAcls answers per filter: a filter with an unknown code gets `INVALID_REQUEST`;
//!   any other gets the stored bindings it selected, which are removed. Bindings a
//!   source derives from elsewhere (Iggy permissions) are never stored, so never deleted.
//! - DescribeAcls answers with the stored bindings the filter selects plus those every
//!   other source derives ([`Authorizer::derived_bindings`](kafka_authz::Authorizer),
//!   marked with host [`READ_ONLY_HOST`]), grouped by resource pattern. The derived ones
//!   (every Iggy user's permissions) are shown only to a caller who may change ACLs (a
//!   super user, or ALTER on the cluster); a source that would need more lookups than
//!   one request may (`MAX_DESCRIBE_LOOKUPS` Iggy users not in its cache) answers
//!   `POLICY_VIOLATION` asking for a principal in the filter. A filter with an unknown
//!   code gets `INVALID_REQUEST`; a source that cannot answer makes the whole answer
//!   `UNKNOWN_SERVER_ERROR` (a partial list would read as complete).
//!
//! With authorization off (no listener authenticates and it is not forced on) the three
//! APIs answer `SECURITY_DISABLED` on every entry, as a Kafka broker without an
//! authorizer does: bindings would have no effect.
//!
//! After a change, the authorizer's snapshot is taken again so the change decides the
//! very next request.
//!
//! Bounds: the creations and filters of one request count against
//! `limits.max_entries_per_request` (over it, the connection is closed: these responses
//! have no top-level error code). What DeleteAcls and DescribeAcls return is bounded by
//! what the store holds (its bound on bindings, `MAX_ACL_BINDINGS`) plus what the other
//! sources derive; a binding deleted by one filter is not returned again by the next.
//! DescribeAcls additionally stops at `authorization.max_described_acl_bindings`
//! bindings and then answers `POLICY_VIOLATION` telling the client to narrow its filter,
//! rather than building an answer of unbounded size.

use super::{Ctx, bs};
use crate::authz::CLUSTER_NAME;
use crate::pipeline::authorization::{Decider, HostText};
use kafka_authz::{
    AclBinding, AclBindingFilter, AuthzError, Operation, PatternType, Permission, READ_ONLY_HOST,
    ResourceType,
};
use kafka_protocol::ErrorCode;
use kafka_protocol::messages::create_acls_request::{AclCreation, CreateAclsRequest};
use kafka_protocol::messages::create_acls_response::{AclCreationResult, CreateAclsResponse};
use kafka_protocol::messages::delete_acls_request::{DeleteAclsFilter, DeleteAclsRequest};
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl, DeleteAclsResponse,
};
use kafka_protocol::messages::describe_acls_request::DescribeAclsRequest;
use kafka_protocol::messages::describe_acls_response::{
    AclDescription, DescribeAclsResource, DescribeAclsResponse,
};
use std::collections::{BTreeMap, HashSet};
use tracing::{info, warn};

/// A filter's wire fields, common to DescribeAcls and DeleteAcls.
struct WireFilter<'a> {
    resource_type: i8,
    name: Option<&'a str>,
    pattern: i8,
    principal: Option<&'a str>,
    host: Option<&'a str>,
    operation: i8,
    permission: i8,
}

/// Reads a filter; an unknown code (including UNKNOWN, 0) is refused with the reason.
fn filter(w: WireFilter<'_>) -> Result<AclBindingFilter, String> {
    let resource_type = ResourceType::from_code(w.resource_type)
        .ok_or_else(|| format!("unknown resource type {}", w.resource_type))?;
    let pattern = PatternType::from_code(w.pattern)
        .ok_or_else(|| format!("unknown pattern type {}", w.pattern))?;
    let operation = Operation::from_code(w.operation)
        .ok_or_else(|| format!("unknown operation {}", w.operation))?;
    let permission = Permission::from_code(w.permission)
        .ok_or_else(|| format!("unknown permission type {}", w.permission))?;
    Ok(AclBindingFilter {
        resource_type: Some(resource_type),
        name: w.name.map(str::to_owned),
        pattern: Some(pattern),
        principal: w.principal.map(str::to_owned),
        host: w.host.map(str::to_owned),
        operation: Some(operation),
        permission: Some(permission),
    })
}

/// Reads one creation into a storable binding, or the reason it is not one.
fn binding(c: &AclCreation, max_field: usize) -> Result<AclBinding, String> {
    let resource_type = ResourceType::from_code(c.resource_type)
        .ok_or_else(|| format!("unknown resource type {}", c.resource_type))?;
    let pattern = PatternType::from_code(c.resource_pattern_type)
        .ok_or_else(|| format!("unknown pattern type {}", c.resource_pattern_type))?;
    let operation = Operation::from_code(c.operation)
        .ok_or_else(|| format!("unknown operation {}", c.operation))?;
    let permission = Permission::from_code(c.permission_type)
        .ok_or_else(|| format!("unknown permission type {}", c.permission_type))?;
    for (what, v) in [
        ("resource name", &c.resource_name),
        ("principal", &c.principal),
        ("host", &c.host),
    ] {
        if v.len() > max_field {
            return Err(format!("the {what} is longer than {max_field} bytes"));
        }
    }
    if &*c.host == READ_ONLY_HOST {
        return Err(format!(
            "the host {READ_ONLY_HOST} marks bindings derived from Iggy permissions and cannot be used"
        ));
    }
    let b = AclBinding {
        resource_type,
        name: c.resource_name.to_string(),
        pattern,
        principal: c.principal.to_string(),
        host: c.host.to_string(),
        operation,
        permission,
    };
    b.validate().map_err(|e| e.to_string())?;
    Ok(b)
}

/// Takes the authorizer's snapshot again after a change; a failure leaves the old one
/// (the periodic reload retries) and is logged once for the request.
async fn reload(ctx: &Ctx<'_>, api: &'static str) {
    if let Err(e) = ctx.broker.acls.reload().await {
        warn!(api, error = %e, "ACL change stored, but the bindings could not be read back; the next refresh retries");
    }
}

fn store_error(e: &AuthzError) -> (ErrorCode, String) {
    match e {
        AuthzError::Full { max } => (
            ErrorCode::POLICY_VIOLATION,
            format!("the ACL store holds at most {max} bindings"),
        ),
        AuthzError::Invalid { reason, .. } => (ErrorCode::INVALID_REQUEST, reason.to_string()),
        other => (ErrorCode::UNKNOWN_SERVER_ERROR, other.to_string()),
    }
}

fn result(code: ErrorCode, message: Option<String>) -> AclCreationResult {
    AclCreationResult {
        error_code: code.code(),
        error_message: message.map(bs),
        ..AclCreationResult::default()
    }
}

/// The message of a `SECURITY_DISABLED` answer.
const DISABLED: &str = "authorization is off on this gateway (IGGY_KAFKA_AUTHORIZATION_ENABLED), so ACL bindings have no effect";

/// CreateAcls: validates each creation, stores the valid ones.
pub(crate) async fn create(ctx: &Ctx<'_>, req: CreateAclsRequest) -> CreateAclsResponse {
    if !ctx.broker.authorization_enabled {
        return CreateAclsResponse {
            results: req
                .creations
                .iter()
                .map(|_| result(ErrorCode::SECURITY_DISABLED, Some(DISABLED.to_owned())))
                .collect(),
            ..CreateAclsResponse::default()
        };
    }
    let mut results: Vec<AclCreationResult> = Vec::with_capacity(req.creations.len());
    let mut valid: Vec<(usize, AclBinding)> = Vec::new();
    let mut invalid = 0usize;
    let max_field = ctx.broker.config.authorization.max_acl_field_bytes;
    for (i, c) in req.creations.iter().enumerate() {
        match binding(c, max_field) {
            Ok(b) => {
                results.push(result(ErrorCode::NONE, None));
                valid.push((i, b));
            }
            Err(reason) => {
                invalid += 1;
                results.push(result(ErrorCode::INVALID_REQUEST, Some(reason)));
            }
        }
    }
    let store = ctx.broker.acls.store();
    let mut added = 0usize;
    if !valid.is_empty() {
        let all: Vec<AclBinding> = valid.iter().map(|(_, b)| b.clone()).collect();
        match store.add(all).await {
            Ok(()) => added = valid.len(),
            Err(AuthzError::Full { max }) => {
                added = add_what_fits(store.as_ref(), valid, max, &mut results).await;
            }
            Err(e) => {
                warn!(error = %e, creations = valid.len(), "CreateAcls: the ACL store failed");
                let (code, msg) = store_error(&e);
                for (i, _) in valid {
                    results[i] = result(code, Some(msg.clone()));
                }
            }
        }
    }
    if added > 0 {
        reload(ctx, "CreateAcls").await;
        info!(
            user = %ctx.session.principal.name,
            added,
            refused = results.len() - added,
            "ACL bindings created"
        );
    } else if invalid > 0 {
        tracing::debug!(invalid, "CreateAcls: every creation refused");
    }
    CreateAclsResponse {
        results,
        ..CreateAclsResponse::default()
    }
}

/// After the store refused `valid` as a whole for its bound `max`: stores, in request
/// order, the creations already present and as many new ones as there is room for, in
/// one more call, and answers the others `POLICY_VIOLATION`. Returns how many were
/// stored. Two store calls whatever the number of creations (a concurrent change
/// between them makes the second one fail, answered on every creation it held).
async fn add_what_fits(
    store: &dyn kafka_authz::store::AclStore,
    valid: Vec<(usize, AclBinding)>,
    max: usize,
    results: &mut [AclCreationResult],
) -> usize {
    let existing: HashSet<AclBinding> = match store.list(&AclBindingFilter::any()).await {
        Ok(all) => all.into_iter().collect(),
        Err(e) => {
            let (code, msg) = store_error(&e);
            for (i, _) in valid {
                results[i] = result(code, Some(msg.clone()));
            }
            return 0;
        }
    };
    let mut room = max.saturating_sub(existing.len());
    let mut new = HashSet::new();
    let mut fit = Vec::new();
    for (i, b) in valid {
        if existing.contains(&b) || new.contains(&b) {
            fit.push((i, b));
        } else if room > 0 {
            room -= 1;
            new.insert(b.clone());
            fit.push((i, b));
        } else {
            let (code, msg) = store_error(&AuthzError::Full { max });
            results[i] = result(code, Some(msg));
        }
    }
    if fit.is_empty() {
        return 0;
    }
    match store
        .add(fit.iter().map(|(_, b)| b.clone()).collect())
        .await
    {
        Ok(()) => fit.len(),
        Err(e) => {
            let (code, msg) = store_error(&e);
            for (i, _) in fit {
                results[i] = result(code, Some(msg.clone()));
            }
            0
        }
    }
}

fn matching(b: AclBinding) -> DeleteAclsMatchingAcl {
    DeleteAclsMatchingAcl {
        error_code: 0,
        error_message: None,
        resource_type: b.resource_type.code(),
        resource_name: bs(b.name),
        pattern_type: b.pattern.code(),
        principal: bs(b.principal),
        host: bs(b.host),
        operation: b.operation.code(),
        permission_type: b.permission.code(),
        ..DeleteAclsMatchingAcl::default()
    }
}

fn filter_result(code: ErrorCode, message: String) -> DeleteAclsFilterResult {
    DeleteAclsFilterResult {
        error_code: code.code(),
        error_message: Some(bs(message)),
        ..DeleteAclsFilterResult::default()
    }
}

fn delete_filter(f: &DeleteAclsFilter) -> Result<AclBindingFilter, String> {
    filter(WireFilter {
        resource_type: f.resource_type_filter,
        name: f.resource_name_filter.as_deref(),
        pattern: f.pattern_type_filter,
        principal: f.principal_filter.as_deref(),
        host: f.host_filter.as_deref(),
        operation: f.operation,
        permission: f.permission_type,
    })
}

/// DeleteAcls: removes what each filter selects, answering per filter.
pub(crate) async fn delete(ctx: &Ctx<'_>, req: DeleteAclsRequest) -> DeleteAclsResponse {
    if !ctx.broker.authorization_enabled {
        return DeleteAclsResponse {
            filter_results: req
                .filters
                .iter()
                .map(|_| filter_result(ErrorCode::SECURITY_DISABLED, DISABLED.to_owned()))
                .collect(),
            ..DeleteAclsResponse::default()
        };
    }
    let store = ctx.broker.acls.store();
    let mut filter_results = Vec::with_capacity(req.filters.len());
    let mut deleted = 0usize;
    for f in &req.filters {
        let parsed = match delete_filter(f) {
            Ok(p) => p,
            Err(reason) => {
                filter_results.push(filter_result(ErrorCode::INVALID_REQUEST, reason));
                continue;
            }
        };
        match store.delete(&parsed).await {
            Ok(removed) => {
                deleted += removed.len();
                filter_results.push(DeleteAclsFilterResult {
                    matching_acls: removed.into_iter().map(matching).collect(),
                    ..DeleteAclsFilterResult::default()
                });
            }
            Err(e) => {
                warn!(error = %e, "DeleteAcls: the ACL store failed");
                let (code, msg) = store_error(&e);
                filter_results.push(filter_result(code, msg));
            }
        }
    }
    if deleted > 0 {
        reload(ctx, "DeleteAcls").await;
        info!(user = %ctx.session.principal.name, deleted, "ACL bindings deleted");
    }
    DeleteAclsResponse {
        filter_results,
        ..DeleteAclsResponse::default()
    }
}

fn describe_error(code: ErrorCode, message: String) -> DescribeAclsResponse {
    DescribeAclsResponse {
        error_code: code.code(),
        error_message: Some(bs(message)),
        ..DescribeAclsResponse::default()
    }
}

/// DescribeAcls: the stored bindings the filter selects and every source's derived ones.
pub(crate) async fn describe(ctx: &Ctx<'_>, req: DescribeAclsRequest) -> DescribeAclsResponse {
    if !ctx.broker.authorization_enabled {
        return describe_error(ErrorCode::SECURITY_DISABLED, DISABLED.to_owned());
    }
    let parsed = match filter(WireFilter {
        resource_type: req.resource_type_filter,
        name: req.resource_name_filter.as_deref(),
        pattern: req.pattern_type_filter,
        principal: req.principal_filter.as_deref(),
        host: req.host_filter.as_deref(),
        operation: req.operation,
        permission: req.permission_type,
    }) {
        Ok(p) => p,
        Err(reason) => return describe_error(ErrorCode::INVALID_REQUEST, reason),
    };
    let mut bindings = match ctx.broker.acls.store().list(&parsed).await {
        Ok(b) => b,
        Err(e) => {
            warn!(error = %e, "DescribeAcls: the ACL store failed");
            let (code, msg) = store_error(&e);
            return describe_error(code, msg);
        }
    };
    let max = ctx.broker.config.authorization.max_described_acl_bindings;
    // What the other sources derive (every Iggy user's permissions) is shown only to
    // whoever may change ACLs; they cost the source lookups too.
    let derived = may_alter_cluster(ctx);
    for source in ctx.broker.authorizers.iter().filter(|_| derived) {
        if bindings.len() > max {
            break;
        }
        match source.derived_bindings(&parsed).await {
            Ok(derived) => bindings.extend(
                derived
                    .into_iter()
                    // Only what the source marks as derived, whatever it returns.
                    .map(|mut b| {
                        READ_ONLY_HOST.clone_into(&mut b.host);
                        b
                    }),
            ),
            Err(AuthzError::TooBroad(why)) => {
                return describe_error(ErrorCode::POLICY_VIOLATION, why);
            }
            Err(e) => {
                warn!(source = source.name(), error = %e, "DescribeAcls: a permission source cannot list its bindings");
                return describe_error(
                    ErrorCode::UNKNOWN_SERVER_ERROR,
                    format!("the {} permission source cannot answer now", source.name()),
                );
            }
        }
    }
    if bindings.len() > max {
        return describe_error(
            ErrorCode::POLICY_VIOLATION,
            format!("more than {max} bindings match; narrow the filter"),
        );
    }
    DescribeAclsResponse {
        resources: group(bindings),
        ..DescribeAclsResponse::default()
    }
}

/// Whether the caller may change ACLs: a super user, or ALTER on the cluster from every
/// source of decisions (the rule Kafka applies to CreateAcls and DeleteAcls).
fn may_alter_cluster(ctx: &Ctx<'_>) -> bool {
    let principal = ctx.session.principal.to_string();
    if ctx
        .broker
        .config
        .sasl
        .super_users
        .iter()
        .any(|u| u.trim() == principal)
    {
        return true;
    }
    let mut host = HostText::default();
    let host = host.of(&ctx.session);
    Decider::for_caller(
        ctx.broker.acls.acls(),
        &ctx.broker.authorizers,
        &principal,
        host,
    )
    .allows(Operation::Alter, ResourceType::Cluster, CLUSTER_NAME)
}

/// Groups bindings by resource pattern (type, name, pattern type), in a stable order.
fn group(bindings: Vec<AclBinding>) -> Vec<DescribeAclsResource> {
    let mut by_resource: BTreeMap<(i8, String, i8), Vec<AclDescription>> = BTreeMap::new();
    for b in bindings {
        by_resource
            .entry((b.resource_type.code(), b.name, b.pattern.code()))
            .or_default()
            .push(AclDescription {
                principal: bs(b.principal),
                host: bs(b.host),
                operation: b.operation.code(),
                permission_type: b.permission.code(),
                ..AclDescription::default()
            });
    }
    by_resource
        .into_iter()
        .map(
            |((resource_type, name, pattern_type), acls)| DescribeAclsResource {
                resource_type,
                resource_name: bs(name),
                pattern_type,
                acls,
                ..DescribeAclsResource::default()
            },
        )
        .collect()
}

#[cfg(test)]
#[path = "acls_tests.rs"]
mod tests;
