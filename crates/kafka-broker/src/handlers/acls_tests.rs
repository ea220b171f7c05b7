use super::*;
use crate::broker::Broker;
use crate::config::BrokerConfig;
use crate::server::Stores;
use crate::session::{Listener, Session};
use crate::store::memory::{MemoryStore, MemoryStoreConfig};
use async_trait::async_trait;
use kafka_authz::authorizer::Caller;
use kafka_authz::store::MemoryAclStore;
use kafka_authz::{AclAuthorizer, Authorizer};
use kafka_protocol::ByteString;
use std::sync::Arc;

fn broker_with(store: MemoryAclStore, sources: Vec<Arc<dyn Authorizer>>) -> Broker {
    let memory = Arc::new(MemoryStore::new(MemoryStoreConfig::default()));
    let stores = Stores {
        log: memory.clone(),
        offsets: memory,
    };
    let mut broker = Broker::new(
        BrokerConfig::default(),
        stores,
        crate::pipeline::Pipeline::default(),
    );
    broker.acls = Arc::new(AclAuthorizer::new(Arc::new(store), true));
    broker.authorizers = sources;
    broker.authorization_enabled = true;
    broker
}

/// The test's caller (`User:ANONYMOUS`) made a super user, who sees derived bindings.
fn as_super_user(mut broker: Broker) -> Broker {
    broker.config.sasl.super_users = vec!["User:ANONYMOUS".into()];
    broker
}

fn ctx(broker: &Broker) -> Ctx<'_> {
    Ctx {
        broker,
        version: 3,
        session: Arc::new(Session::new(
            1,
            Listener::plaintext(),
            "127.0.0.1:1".parse().expect("addr"),
        )),
    }
}

fn creation(rt: i8, name: &str, pattern: i8, principal: &str, op: i8, perm: i8) -> AclCreation {
    AclCreation {
        resource_type: rt,
        resource_name: ByteString::from(name),
        resource_pattern_type: pattern,
        principal: ByteString::from(principal),
        host: ByteString::from_static("*"),
        operation: op,
        permission_type: perm,
        ..AclCreation::default()
    }
}

const TOPIC: i8 = 2;
const GROUP: i8 = 3;
const LITERAL: i8 = 3;
const PREFIXED: i8 = 4;
const ANY: i8 = 1;
const MATCH: i8 = 2;
const READ: i8 = 3;
const WRITE: i8 = 4;
const ALLOW: i8 = 3;
const DENY: i8 = 2;

fn describe_req(
    rt: i8,
    name: Option<&str>,
    pattern: i8,
    principal: Option<&str>,
) -> DescribeAclsRequest {
    DescribeAclsRequest {
        resource_type_filter: rt,
        resource_name_filter: name.map(ByteString::from),
        pattern_type_filter: pattern,
        principal_filter: principal.map(ByteString::from),
        host_filter: None,
        operation: ANY,
        permission_type: ANY,
        ..DescribeAclsRequest::default()
    }
}

fn delete_filter(rt: i8, name: Option<&str>, pattern: i8) -> DeleteAclsFilter {
    DeleteAclsFilter {
        resource_type_filter: rt,
        resource_name_filter: name.map(ByteString::from),
        pattern_type_filter: pattern,
        principal_filter: None,
        host_filter: None,
        operation: ANY,
        permission_type: ANY,
        ..DeleteAclsFilter::default()
    }
}

/// (resource name, pattern code, principal, host) of every described binding.
fn listed(r: &DescribeAclsResponse) -> Vec<(String, i8, String, String)> {
    let mut out: Vec<_> = r
        .resources
        .iter()
        .flat_map(|res| {
            res.acls.iter().map(move |a| {
                (
                    res.resource_name.to_string(),
                    res.pattern_type,
                    a.principal.to_string(),
                    a.host.to_string(),
                )
            })
        })
        .collect();
    out.sort();
    out
}

async fn seed(broker: &Broker) {
    let resp = create(
        &ctx(broker),
        CreateAclsRequest {
            creations: vec![
                creation(TOPIC, "orders", LITERAL, "User:alice", READ, ALLOW),
                creation(TOPIC, "ord", PREFIXED, "User:bob", WRITE, ALLOW),
                creation(TOPIC, "*", LITERAL, "User:carol", READ, DENY),
                creation(GROUP, "g1", LITERAL, "User:alice", READ, ALLOW),
            ],
            ..CreateAclsRequest::default()
        },
    )
    .await;
    assert!(resp.results.iter().all(|r| r.error_code == 0), "{resp:?}");
}

#[tokio::test]
async fn created_bindings_are_described_by_filter_and_decide_at_once() {
    let broker = broker_with(MemoryAclStore::new(), Vec::new());
    seed(&broker).await;
    // The snapshot was taken again: alice may read orders, carol may not.
    let acls = broker.acls.acls();
    assert!(acls.authorize(
        "User:alice",
        "h",
        Operation::Read,
        ResourceType::Topic,
        "orders"
    ));
    assert!(!acls.authorize(
        "User:carol",
        "h",
        Operation::Read,
        ResourceType::Topic,
        "orders"
    ));

    let c = ctx(&broker);
    let all = describe(&c, describe_req(ANY, None, ANY, None)).await;
    assert_eq!(all.error_code, 0);
    assert_eq!(listed(&all).len(), 4);
    // Groups only.
    let groups = describe(&c, describe_req(GROUP, None, ANY, None)).await;
    assert_eq!(
        listed(&groups),
        vec![("g1".into(), LITERAL, "User:alice".into(), "*".into())]
    );
    // LITERAL selects only that exact pattern; MATCH also the wildcard and the prefix.
    let literal = describe(&c, describe_req(TOPIC, Some("orders"), LITERAL, None)).await;
    assert_eq!(listed(&literal).len(), 1);
    let matched = describe(&c, describe_req(TOPIC, Some("orders"), MATCH, None)).await;
    let names: Vec<String> = listed(&matched).into_iter().map(|b| b.0).collect();
    assert_eq!(names, vec!["*", "ord", "orders"]);
    // PREFIXED with the exact prefix.
    let prefixed = describe(&c, describe_req(TOPIC, Some("ord"), PREFIXED, None)).await;
    assert_eq!(
        listed(&prefixed),
        vec![("ord".into(), PREFIXED, "User:bob".into(), "*".into())]
    );
    // Principal filter.
    let bob = describe(&c, describe_req(ANY, None, ANY, Some("User:bob"))).await;
    assert_eq!(listed(&bob).len(), 1);
}

#[tokio::test]
async fn every_invalid_creation_is_refused_on_its_own() {
    let broker = broker_with(MemoryAclStore::new(), Vec::new());
    let mut read_only = creation(TOPIC, "t", LITERAL, "User:a", READ, ALLOW);
    read_only.host = ByteString::from_static(READ_ONLY_HOST);
    let mut empty_host = creation(TOPIC, "t", LITERAL, "User:a", READ, ALLOW);
    empty_host.host = ByteString::from_static("");
    let creations = vec![
        creation(TOPIC, "ok", LITERAL, "User:a", READ, ALLOW),
        creation(0, "t", LITERAL, "User:a", READ, ALLOW), // UNKNOWN type
        creation(ANY, "t", LITERAL, "User:a", READ, ALLOW), // filter-only type
        creation(TOPIC, "t", MATCH, "User:a", READ, ALLOW), // filter-only pattern
        creation(TOPIC, "t", 9, "User:a", READ, ALLOW),   // unknown pattern
        creation(TOPIC, "t", LITERAL, "User:a", ANY, ALLOW), // filter-only operation
        creation(TOPIC, "t", LITERAL, "User:a", 99, ALLOW), // unknown operation
        creation(TOPIC, "t", LITERAL, "User:a", READ, ANY), // filter-only permission
        creation(TOPIC, "", LITERAL, "User:a", READ, ALLOW), // empty name
        creation(TOPIC, "t", LITERAL, "alice", READ, ALLOW), // not Type:name
        creation(4, "other", LITERAL, "User:a", 7, ALLOW), // cluster named otherwise
        read_only,
        empty_host,
        creation(GROUP, "g", PREFIXED, "User:a", READ, ALLOW),
    ];
    let n = creations.len();
    let resp = create(
        &ctx(&broker),
        CreateAclsRequest {
            creations,
            ..CreateAclsRequest::default()
        },
    )
    .await;
    assert_eq!(resp.results.len(), n);
    assert_eq!(resp.results[0].error_code, 0);
    assert_eq!(resp.results[n - 1].error_code, 0);
    for (i, r) in resp.results.iter().enumerate().take(n - 1).skip(1) {
        assert_eq!(
            r.error_code,
            ErrorCode::INVALID_REQUEST.code(),
            "creation {i}: {r:?}"
        );
        assert!(r.error_message.as_deref().is_some_and(|m| !m.is_empty()));
    }
    assert!(
        resp.results[11]
            .error_message
            .as_deref()
            .is_some_and(|m| m.contains(READ_ONLY_HOST))
    );
    let all = describe(&ctx(&broker), describe_req(ANY, None, ANY, None)).await;
    assert_eq!(listed(&all).len(), 2, "only the two valid ones were stored");
}

#[tokio::test]
async fn delete_answers_per_filter_with_the_removed_bindings() {
    let broker = broker_with(MemoryAclStore::new(), Vec::new());
    seed(&broker).await;
    let resp = delete(
        &ctx(&broker),
        DeleteAclsRequest {
            filters: vec![
                // MATCH on "orders": the literal one, the prefix and the wildcard.
                delete_filter(TOPIC, Some("orders"), MATCH),
                // Already gone: matches nothing now.
                delete_filter(TOPIC, Some("ord"), PREFIXED),
                // Unknown resource type.
                delete_filter(0, None, ANY),
            ],
            ..DeleteAclsRequest::default()
        },
    )
    .await;
    assert_eq!(resp.filter_results.len(), 3);
    assert_eq!(resp.filter_results[0].error_code, 0);
    let mut names: Vec<String> = resp.filter_results[0]
        .matching_acls
        .iter()
        .map(|m| m.resource_name.to_string())
        .collect();
    names.sort();
    assert_eq!(names, vec!["*", "ord", "orders"]);
    assert_eq!(resp.filter_results[1].error_code, 0);
    assert!(resp.filter_results[1].matching_acls.is_empty());
    assert_eq!(
        resp.filter_results[2].error_code,
        ErrorCode::INVALID_REQUEST.code()
    );
    // The group binding remains, and the deletion decides at once: no topic binding
    // is left, so carol's denial is gone.
    let left = describe(&ctx(&broker), describe_req(ANY, None, ANY, None)).await;
    assert_eq!(listed(&left).len(), 1);
    assert!(broker.acls.acls().authorize(
        "User:carol",
        "h",
        Operation::Read,
        ResourceType::Topic,
        "orders"
    ));
}

#[tokio::test]
async fn describe_refuses_bad_filters() {
    let broker = broker_with(MemoryAclStore::new(), Vec::new());
    for req in [
        describe_req(0, None, ANY, None),
        describe_req(ANY, None, 0, None),
        describe_req(ANY, None, 17, None),
        DescribeAclsRequest {
            operation: -3,
            ..describe_req(ANY, None, ANY, None)
        },
        DescribeAclsRequest {
            permission_type: 0,
            ..describe_req(ANY, None, ANY, None)
        },
    ] {
        let r = describe(&ctx(&broker), req).await;
        assert_eq!(r.error_code, ErrorCode::INVALID_REQUEST.code());
        assert!(r.error_message.is_some());
        assert!(r.resources.is_empty());
    }
}

#[tokio::test]
async fn the_store_bound_is_answered_per_creation() {
    let broker = broker_with(MemoryAclStore::new().with_max(2), Vec::new());
    let resp = create(
        &ctx(&broker),
        CreateAclsRequest {
            creations: vec![
                creation(TOPIC, "a", LITERAL, "User:x", READ, ALLOW),
                creation(TOPIC, "b", LITERAL, "User:x", READ, ALLOW),
                creation(TOPIC, "c", LITERAL, "User:x", READ, ALLOW),
                // Already stored by the first: fits.
                creation(TOPIC, "a", LITERAL, "User:x", READ, ALLOW),
            ],
            ..CreateAclsRequest::default()
        },
    )
    .await;
    let codes: Vec<i16> = resp.results.iter().map(|r| r.error_code).collect();
    let full = ErrorCode::POLICY_VIOLATION.code();
    assert_eq!(codes, vec![0, 0, full, 0]);
    assert!(
        resp.results[2]
            .error_message
            .as_deref()
            .is_some_and(|m| m.contains("at most 2"))
    );
    assert_eq!(broker.acls.acls().len(), 2);
}

/// A source deriving one ALLOW binding per call, or failing.
#[derive(Debug)]
struct Derived {
    fail: bool,
}

#[async_trait]
impl Authorizer for Derived {
    fn name(&self) -> &'static str {
        "derived"
    }
    fn authorize(&self, _: &Caller<'_>, _: Operation, _: ResourceType, _: &str) -> bool {
        true
    }
    fn authorize_any(&self, _: &Caller<'_>, _: Operation, _: ResourceType) -> bool {
        true
    }
    async fn derived_bindings(
        &self,
        filter: &AclBindingFilter,
    ) -> Result<Vec<AclBinding>, AuthzError> {
        if self.fail {
            return Err(AuthzError::Unavailable("iggy down".into()));
        }
        let b = AclBinding {
            resource_type: ResourceType::Topic,
            name: "iggy-topic".into(),
            pattern: PatternType::Literal,
            principal: "User:dave".into(),
            host: READ_ONLY_HOST.into(),
            operation: Operation::Read,
            permission: Permission::Allow,
        };
        Ok(filter.matches(&b).then_some(b).into_iter().collect())
    }
}

#[tokio::test]
async fn derived_bindings_are_shown_read_only_and_never_deleted() {
    let broker = as_super_user(broker_with(
        MemoryAclStore::new(),
        vec![Arc::new(Derived { fail: false })],
    ));
    seed(&broker).await;
    let c = ctx(&broker);
    let all = describe(&c, describe_req(ANY, None, ANY, None)).await;
    let rows = listed(&all);
    assert_eq!(rows.len(), 5);
    assert!(rows.contains(&(
        "iggy-topic".into(),
        LITERAL,
        "User:dave".into(),
        READ_ONLY_HOST.into()
    )));
    let del = delete(
        &c,
        DeleteAclsRequest {
            filters: vec![delete_filter(ANY, None, ANY)],
            ..DeleteAclsRequest::default()
        },
    )
    .await;
    assert_eq!(del.filter_results[0].matching_acls.len(), 4);
    assert!(
        del.filter_results[0]
            .matching_acls
            .iter()
            .all(|m| &*m.host != READ_ONLY_HOST)
    );
    let after = describe(&c, describe_req(ANY, None, ANY, None)).await;
    assert_eq!(
        listed(&after),
        vec![(
            "iggy-topic".into(),
            LITERAL,
            "User:dave".into(),
            READ_ONLY_HOST.into()
        )]
    );
}

#[tokio::test]
async fn derived_bindings_need_alter_on_the_cluster() {
    // Without a grant (allow-everyone never opens ALTER on the cluster): the stored
    // bindings only, and the source is not asked.
    let broker = broker_with(
        MemoryAclStore::new(),
        vec![Arc::new(Derived { fail: true })],
    );
    seed(&broker).await;
    let r = describe(&ctx(&broker), describe_req(ANY, None, ANY, None)).await;
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    let rows = listed(&r);
    assert_eq!(rows.len(), 4);
    assert!(rows.iter().all(|row| row.3 != READ_ONLY_HOST));
    // ALTER on the cluster granted to the caller: the derived ones too.
    let broker = broker_with(
        MemoryAclStore::new(),
        vec![Arc::new(Derived { fail: false })],
    );
    seed(&broker).await;
    let c = ctx(&broker);
    let granted = create(
        &c,
        CreateAclsRequest {
            creations: vec![creation(
                4,
                "kafka-cluster",
                LITERAL,
                "User:ANONYMOUS",
                7,
                ALLOW,
            )],
            ..CreateAclsRequest::default()
        },
    )
    .await;
    assert_eq!(granted.results[0].error_code, 0);
    let r = describe(&c, describe_req(ANY, None, ANY, None)).await;
    assert!(listed(&r).iter().any(|row| row.3 == READ_ONLY_HOST));
}

#[tokio::test]
async fn a_source_that_cannot_answer_fails_the_description() {
    let broker = as_super_user(broker_with(
        MemoryAclStore::new(),
        vec![Arc::new(Derived { fail: true })],
    ));
    seed(&broker).await;
    let r = describe(&ctx(&broker), describe_req(ANY, None, ANY, None)).await;
    assert_eq!(r.error_code, ErrorCode::UNKNOWN_SERVER_ERROR.code());
    assert!(r.resources.is_empty());
    assert!(
        r.error_message
            .as_deref()
            .is_some_and(|m| !m.contains("iggy down"))
    );
}

#[tokio::test]
async fn without_authorization_every_entry_is_security_disabled() {
    let mut broker = broker_with(MemoryAclStore::new(), Vec::new());
    broker.authorization_enabled = false;
    let disabled = ErrorCode::SECURITY_DISABLED.code();
    let c = ctx(&broker);
    let created = create(
        &c,
        CreateAclsRequest {
            creations: vec![creation(TOPIC, "t", LITERAL, "User:a", READ, ALLOW); 2],
            ..CreateAclsRequest::default()
        },
    )
    .await;
    assert_eq!(
        created
            .results
            .iter()
            .map(|r| r.error_code)
            .collect::<Vec<_>>(),
        vec![disabled, disabled]
    );
    assert!(broker.acls.store().snapshot().await.unwrap().is_empty());
    let deleted = delete(
        &c,
        DeleteAclsRequest {
            filters: vec![delete_filter(ANY, None, ANY)],
            ..DeleteAclsRequest::default()
        },
    )
    .await;
    assert_eq!(deleted.filter_results[0].error_code, disabled);
    let described = describe(&c, describe_req(ANY, None, ANY, None)).await;
    assert_eq!(described.error_code, disabled);
}

#[tokio::test]
async fn describe_and_create_bounds_come_from_the_settings() {
    let mut broker = broker_with(
        MemoryAclStore::new(),
        vec![Arc::new(Derived { fail: false })],
    );
    broker.config.authorization.max_described_acl_bindings = 4;
    broker.config.authorization.max_acl_field_bytes = 8;
    broker.config.sasl.super_users = vec!["User:ANONYMOUS".into()];
    let c = ctx(&broker);
    let long = create(
        &c,
        CreateAclsRequest {
            creations: vec![
                creation(TOPIC, "123456789", LITERAL, "User:a", READ, ALLOW),
                creation(TOPIC, "12345678", LITERAL, "User:a", READ, ALLOW),
            ],
            ..CreateAclsRequest::default()
        },
    )
    .await;
    assert_eq!(
        long.results[0].error_code,
        ErrorCode::INVALID_REQUEST.code()
    );
    assert_eq!(long.results[1].error_code, 0);
    // One stored plus one derived fit; four stored plus one derived do not.
    assert_eq!(
        describe(&c, describe_req(ANY, None, ANY, None))
            .await
            .error_code,
        0
    );
    seed_short(&broker).await;
    let r = describe(&c, describe_req(ANY, None, ANY, None)).await;
    assert_eq!(r.error_code, ErrorCode::POLICY_VIOLATION.code());
    assert!(r.resources.is_empty());
    // A narrower filter is answered.
    let r = describe(&c, describe_req(GROUP, None, ANY, None)).await;
    assert_eq!(r.error_code, 0);
}

async fn seed_short(broker: &Broker) {
    let resp = create(
        &ctx(broker),
        CreateAclsRequest {
            creations: vec![
                creation(TOPIC, "a", LITERAL, "User:a", READ, ALLOW),
                creation(TOPIC, "b", LITERAL, "User:a", READ, ALLOW),
                creation(GROUP, "g", LITERAL, "User:a", READ, ALLOW),
            ],
            ..CreateAclsRequest::default()
        },
    )
    .await;
    assert!(resp.results.iter().all(|r| r.error_code == 0));
}
