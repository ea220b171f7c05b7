use super::store::{AclStore, AuthzError, MemoryAclStore, parse_bindings};
use super::*;
use proptest::prelude::*;

const ALICE: &str = "User:alice";
const BOB: &str = "User:bob";
const HOST: &str = "10.0.0.1";

fn binding(
    resource_type: ResourceType,
    name: &str,
    pattern: PatternType,
    principal: &str,
    host: &str,
    operation: Operation,
    permission: Permission,
) -> AclBinding {
    AclBinding {
        resource_type,
        name: name.to_owned(),
        pattern,
        principal: principal.to_owned(),
        host: host.to_owned(),
        operation,
        permission,
    }
}

fn topic_allow(name: &str, pattern: PatternType, principal: &str, op: Operation) -> AclBinding {
    binding(
        ResourceType::Topic,
        name,
        pattern,
        principal,
        "*",
        op,
        Permission::Allow,
    )
}

fn topic_deny(name: &str, pattern: PatternType, principal: &str, op: Operation) -> AclBinding {
    binding(
        ResourceType::Topic,
        name,
        pattern,
        principal,
        "*",
        op,
        Permission::Deny,
    )
}

fn acls(bindings: Vec<AclBinding>) -> Acls {
    let mut a = Acls::new(Vec::<String>::new(), false);
    for b in bindings {
        a.add(b);
    }
    a
}

fn can(a: &Acls, principal: &str, op: Operation, topic: &str) -> bool {
    a.authorize(principal, HOST, op, ResourceType::Topic, topic)
}

#[test]
fn literal_allow_is_exact() {
    let a = acls(vec![topic_allow(
        "orders",
        PatternType::Literal,
        ALICE,
        Operation::Read,
    )]);
    assert!(can(&a, ALICE, Operation::Read, "orders"));
    assert!(!can(&a, ALICE, Operation::Read, "orders-eu"));
    assert!(!can(&a, ALICE, Operation::Write, "orders"));
    assert!(!can(&a, BOB, Operation::Read, "orders"));
}

#[test]
fn deny_wins_over_allow() {
    let a = acls(vec![
        topic_allow("orders", PatternType::Literal, ALICE, Operation::All),
        topic_deny("orders", PatternType::Literal, ALICE, Operation::Write),
    ]);
    assert!(!can(&a, ALICE, Operation::Write, "orders"));
    assert!(can(&a, ALICE, Operation::Read, "orders"));
    // A wildcard-principal deny applies to alice too, whatever allows her.
    let a = acls(vec![
        topic_allow("orders", PatternType::Literal, ALICE, Operation::Read),
        topic_deny(
            "ord",
            PatternType::Prefixed,
            WILDCARD_PRINCIPAL,
            Operation::Read,
        ),
    ]);
    assert!(!can(&a, ALICE, Operation::Read, "orders"));
}

#[test]
fn deny_all_denies_every_operation_but_deny_read_keeps_describe() {
    let a = acls(vec![
        topic_allow("t", PatternType::Literal, ALICE, Operation::All),
        topic_deny("t", PatternType::Literal, ALICE, Operation::Read),
    ]);
    assert!(!can(&a, ALICE, Operation::Read, "t"));
    assert!(can(&a, ALICE, Operation::Describe, "t"));
    let a = acls(vec![
        topic_allow("t", PatternType::Literal, ALICE, Operation::All),
        topic_deny("t", PatternType::Literal, ALICE, Operation::All),
    ]);
    for op in Operation::ALL {
        assert!(!can(&a, ALICE, op, "t"), "{op:?}");
    }
}

#[test]
fn prefixed_matches_names_starting_with_it() {
    let a = acls(vec![topic_allow(
        "tenant-a.",
        PatternType::Prefixed,
        ALICE,
        Operation::Write,
    )]);
    assert!(can(&a, ALICE, Operation::Write, "tenant-a.orders"));
    assert!(can(&a, ALICE, Operation::Write, "tenant-a."));
    assert!(!can(&a, ALICE, Operation::Write, "tenant-b.orders"));
    assert!(!can(&a, ALICE, Operation::Write, "tenant-a"));
    // A prefixed `*` is a literal prefix, not a wildcard.
    let a = acls(vec![topic_allow(
        "*",
        PatternType::Prefixed,
        ALICE,
        Operation::Read,
    )]);
    assert!(!can(&a, ALICE, Operation::Read, "orders"));
    assert!(can(&a, ALICE, Operation::Read, "*x"));
}

#[test]
fn wildcard_resource_name_matches_every_name_of_its_type() {
    let a = acls(vec![topic_allow(
        WILDCARD_RESOURCE,
        PatternType::Literal,
        ALICE,
        Operation::Read,
    )]);
    assert!(can(&a, ALICE, Operation::Read, "anything"));
    assert!(!a.authorize(ALICE, HOST, Operation::Read, ResourceType::Group, "g"));
}

#[test]
fn wildcard_principal_and_host() {
    let a = acls(vec![topic_allow(
        "t",
        PatternType::Literal,
        WILDCARD_PRINCIPAL,
        Operation::Read,
    )]);
    assert!(can(&a, ALICE, Operation::Read, "t"));
    assert!(can(&a, BOB, Operation::Read, "t"));
    let a = acls(vec![binding(
        ResourceType::Topic,
        "t",
        PatternType::Literal,
        ALICE,
        "10.0.0.2",
        Operation::Read,
        Permission::Allow,
    )]);
    assert!(!a.authorize(ALICE, HOST, Operation::Read, ResourceType::Topic, "t"));
    assert!(a.authorize(ALICE, "10.0.0.2", Operation::Read, ResourceType::Topic, "t"));
    // A host-specific deny applies only on that host.
    let a = acls(vec![
        topic_allow("t", PatternType::Literal, ALICE, Operation::Read),
        binding(
            ResourceType::Topic,
            "t",
            PatternType::Literal,
            ALICE,
            "10.0.0.2",
            Operation::Read,
            Permission::Deny,
        ),
    ]);
    assert!(a.authorize(ALICE, HOST, Operation::Read, ResourceType::Topic, "t"));
    assert!(!a.authorize(ALICE, "10.0.0.2", Operation::Read, ResourceType::Topic, "t"));
}

#[test]
fn implied_operations() {
    for (granted, implied) in [
        (Operation::Read, Operation::Describe),
        (Operation::Write, Operation::Describe),
        (Operation::Delete, Operation::Describe),
        (Operation::Alter, Operation::Describe),
        (Operation::AlterConfigs, Operation::DescribeConfigs),
    ] {
        let a = acls(vec![topic_allow("t", PatternType::Literal, ALICE, granted)]);
        assert!(
            can(&a, ALICE, implied, "t"),
            "{granted:?} implies {implied:?}"
        );
        assert!(!can(&a, ALICE, Operation::Create, "t"));
    }
    // Not the other way round, and nothing else implies DESCRIBE_CONFIGS.
    let a = acls(vec![topic_allow(
        "t",
        PatternType::Literal,
        ALICE,
        Operation::Describe,
    )]);
    assert!(!can(&a, ALICE, Operation::Read, "t"));
    let a = acls(vec![topic_allow(
        "t",
        PatternType::Literal,
        ALICE,
        Operation::Read,
    )]);
    assert!(!can(&a, ALICE, Operation::DescribeConfigs, "t"));
    let a = acls(vec![topic_allow(
        "t",
        PatternType::Literal,
        ALICE,
        Operation::All,
    )]);
    for op in Operation::ALL.into_iter().filter(|o| *o != Operation::Any) {
        assert!(can(&a, ALICE, op, "t"), "ALL allows {op:?}");
    }
}

#[test]
fn super_users_may_do_anything() {
    let mut a = Acls::new([ALICE], false);
    a.add(topic_deny("t", PatternType::Literal, ALICE, Operation::All));
    assert!(can(&a, ALICE, Operation::Write, "t"));
    assert!(can(&a, ALICE, Operation::Read, "other"));
    assert!(!can(&a, BOB, Operation::Read, "other"));
    assert!(a.is_super_user(ALICE));
}

#[test]
fn allow_everyone_if_no_acl_found() {
    let open = Acls::new(Vec::<String>::new(), true);
    assert!(can(&open, ALICE, Operation::Write, "t"));
    let closed = Acls::new(Vec::<String>::new(), false);
    assert!(!can(&closed, ALICE, Operation::Write, "t"));

    // Any binding on the resource, even for someone else, takes it out of the default.
    let mut open = Acls::new(Vec::<String>::new(), true);
    open.add(topic_allow("t", PatternType::Literal, BOB, Operation::Read));
    assert!(!can(&open, ALICE, Operation::Read, "t"));
    assert!(can(&open, BOB, Operation::Read, "t"));
    // Other resources keep the default.
    assert!(can(&open, ALICE, Operation::Read, "u"));
    // A prefix binding covers the names it prefixes.
    open.add(topic_deny(
        "sec",
        PatternType::Prefixed,
        BOB,
        Operation::Read,
    ));
    assert!(!can(&open, ALICE, Operation::Read, "secret"));
    // A binding on another resource type does not count.
    assert!(open.authorize(ALICE, HOST, Operation::Read, ResourceType::Group, "t"));
}

#[test]
fn allow_everyone_never_opens_the_clusters_management() {
    let open = Acls::new(Vec::<String>::new(), true);
    let cluster = |op| open.authorize(ALICE, HOST, op, ResourceType::Cluster, CLUSTER_NAME);
    for op in [
        Operation::Alter,
        Operation::AlterConfigs,
        Operation::ClusterAction,
        Operation::All,
    ] {
        assert!(!cluster(op), "{op:?} opened by allow-everyone");
        assert!(!open.authorize_any(ALICE, HOST, op, ResourceType::Cluster));
        assert_eq!(
            open.decide(ALICE, HOST, op, ResourceType::Cluster, CLUSTER_NAME),
            Decision::NoBinding
        );
    }
    for op in [
        Operation::Describe,
        Operation::Create,
        Operation::IdempotentWrite,
        Operation::DescribeConfigs,
    ] {
        assert!(cluster(op), "{op:?} not opened by allow-everyone");
    }
    // An explicit grant still opens it, and a super user passes.
    let mut granted = Acls::new(["User:root"], true);
    granted.add(binding(
        ResourceType::Cluster,
        CLUSTER_NAME,
        PatternType::Literal,
        ALICE,
        "*",
        Operation::Alter,
        Permission::Allow,
    ));
    assert!(granted.authorize(
        ALICE,
        HOST,
        Operation::Alter,
        ResourceType::Cluster,
        CLUSTER_NAME
    ));
    assert!(!granted.authorize(
        BOB,
        HOST,
        Operation::Alter,
        ResourceType::Cluster,
        CLUSTER_NAME
    ));
    assert!(granted.authorize(
        "User:root",
        HOST,
        Operation::ClusterAction,
        ResourceType::Cluster,
        CLUSTER_NAME
    ));
}

#[test]
fn decisions_tell_no_binding_from_a_refusal() {
    let mut a = Acls::new(Vec::<String>::new(), false);
    assert_eq!(
        a.decide(ALICE, HOST, Operation::Read, ResourceType::Topic, "t"),
        Decision::NoBinding
    );
    a.add(topic_allow("t", PatternType::Literal, BOB, Operation::Read));
    assert_eq!(
        a.decide(ALICE, HOST, Operation::Read, ResourceType::Topic, "t"),
        Decision::Denied
    );
    assert_eq!(
        a.decide(BOB, HOST, Operation::Read, ResourceType::Topic, "t"),
        Decision::Allowed
    );
    assert_eq!(
        a.decide_any(ALICE, HOST, Operation::Write, ResourceType::Topic),
        Decision::NoBinding
    );
    a.add(topic_deny(
        "*",
        PatternType::Literal,
        ALICE,
        Operation::Write,
    ));
    assert_eq!(
        a.decide_any(ALICE, HOST, Operation::Write, ResourceType::Topic),
        Decision::Denied
    );
}

#[test]
fn filter_only_values_are_never_authorized() {
    let a = Acls::new(Vec::<String>::new(), true);
    assert!(!a.authorize(ALICE, HOST, Operation::Any, ResourceType::Topic, "t"));
    assert!(!a.authorize(ALICE, HOST, Operation::Read, ResourceType::Any, "t"));
}

#[test]
fn authorize_any_topic() {
    let a = acls(vec![topic_allow(
        "x",
        PatternType::Literal,
        ALICE,
        Operation::Write,
    )]);
    assert!(a.authorize_any(ALICE, HOST, Operation::Write, ResourceType::Topic));
    assert!(!a.authorize_any(BOB, HOST, Operation::Write, ResourceType::Topic));
    let a = acls(vec![
        topic_allow("x", PatternType::Literal, ALICE, Operation::Write),
        topic_deny("x", PatternType::Prefixed, ALICE, Operation::Write),
    ]);
    assert!(!a.authorize_any(ALICE, HOST, Operation::Write, ResourceType::Topic));
    let a = acls(vec![
        topic_allow("x", PatternType::Literal, ALICE, Operation::Write),
        topic_deny("*", PatternType::Literal, ALICE, Operation::Write),
    ]);
    assert!(!a.authorize_any(ALICE, HOST, Operation::Write, ResourceType::Topic));
    // Implied operations do not count here.
    let a = acls(vec![topic_allow(
        "x",
        PatternType::Literal,
        ALICE,
        Operation::Read,
    )]);
    assert!(!a.authorize_any(ALICE, HOST, Operation::Describe, ResourceType::Topic));
    // With allow_everyone_if_no_acl_found, a name no binding covers is enough...
    let mut open = Acls::new(Vec::<String>::new(), true);
    open.add(topic_allow(
        "x",
        PatternType::Literal,
        BOB,
        Operation::Write,
    ));
    assert!(open.authorize_any(ALICE, HOST, Operation::Write, ResourceType::Topic));
    // ...unless a LITERAL `*` binding covers every name.
    open.add(topic_allow(
        "*",
        PatternType::Literal,
        BOB,
        Operation::Write,
    ));
    assert!(!open.authorize_any(ALICE, HOST, Operation::Write, ResourceType::Topic));
    assert!(open.authorize_any(BOB, HOST, Operation::Write, ResourceType::Topic));
    assert!(Acls::new(Vec::<String>::new(), true).authorize_any(
        ALICE,
        HOST,
        Operation::Write,
        ResourceType::Topic
    ));
}

fn sample() -> Vec<AclBinding> {
    vec![
        topic_allow("orders", PatternType::Literal, ALICE, Operation::Read),
        topic_allow("ord", PatternType::Prefixed, ALICE, Operation::Write),
        topic_allow("*", PatternType::Literal, BOB, Operation::Describe),
        topic_deny("orders", PatternType::Prefixed, BOB, Operation::Read),
        topic_allow("other", PatternType::Literal, BOB, Operation::Read),
        binding(
            ResourceType::Group,
            "orders",
            PatternType::Literal,
            ALICE,
            "*",
            Operation::Read,
            Permission::Allow,
        ),
    ]
}

fn names(bs: &[AclBinding]) -> Vec<(String, PatternType)> {
    bs.iter().map(|b| (b.name.clone(), b.pattern)).collect()
}

#[test]
fn filters_by_pattern_type() {
    let a = acls(sample());
    let f = |pattern, name: &str| AclBindingFilter {
        resource_type: Some(ResourceType::Topic),
        name: Some(name.to_owned()),
        pattern: Some(pattern),
        ..AclBindingFilter::any()
    };
    // LITERAL: exactly that literal binding.
    assert_eq!(
        names(&a.describe(&f(PatternType::Literal, "orders"))),
        vec![("orders".to_owned(), PatternType::Literal)]
    );
    // PREFIXED: exactly that prefixed binding.
    assert_eq!(
        names(&a.describe(&f(PatternType::Prefixed, "orders"))),
        vec![("orders".to_owned(), PatternType::Prefixed)]
    );
    // ANY: that name, either pattern type, no wildcard or prefix expansion.
    assert_eq!(a.describe(&f(PatternType::Any, "orders")).len(), 2);
    assert!(a.describe(&f(PatternType::Any, "ord")).len() == 1);
    // MATCH: everything that applies to a topic named "orders".
    let m = a.describe(&f(PatternType::Match, "orders"));
    let mut got = names(&m);
    got.sort();
    assert_eq!(
        got,
        vec![
            ("*".to_owned(), PatternType::Literal),
            ("ord".to_owned(), PatternType::Prefixed),
            ("orders".to_owned(), PatternType::Literal),
            ("orders".to_owned(), PatternType::Prefixed),
        ]
    );
    // Every binding MATCH returns is one that authorize consults for that name.
    for b in &m {
        assert!(b.covers("orders"));
    }
}

#[test]
fn filters_without_a_name_and_on_other_fields() {
    let a = acls(sample());
    assert_eq!(a.describe(&AclBindingFilter::any()).len(), sample().len());
    let by_type = AclBindingFilter {
        resource_type: Some(ResourceType::Group),
        ..AclBindingFilter::any()
    };
    assert_eq!(a.describe(&by_type).len(), 1);
    let prefixed_only = AclBindingFilter {
        pattern: Some(PatternType::Prefixed),
        ..AclBindingFilter::any()
    };
    assert_eq!(a.describe(&prefixed_only).len(), 2);
    let bob_deny = AclBindingFilter {
        principal: Some(BOB.to_owned()),
        permission: Some(Permission::Deny),
        ..AclBindingFilter::any()
    };
    assert_eq!(a.describe(&bob_deny).len(), 1);
    let alice_write = AclBindingFilter {
        principal: Some(ALICE.to_owned()),
        operation: Some(Operation::Write),
        host: Some("*".to_owned()),
        ..AclBindingFilter::any()
    };
    assert_eq!(a.describe(&alice_write).len(), 1);
    // A principal filter does not expand wildcards.
    let wildcard = AclBindingFilter {
        principal: Some(WILDCARD_PRINCIPAL.to_owned()),
        ..AclBindingFilter::any()
    };
    assert!(a.describe(&wildcard).is_empty());
}

#[test]
fn delete_by_filter_returns_what_it_removed() {
    let mut a = acls(sample());
    let f = AclBindingFilter {
        resource_type: Some(ResourceType::Topic),
        name: Some("orders".to_owned()),
        pattern: Some(PatternType::Match),
        principal: Some(ALICE.to_owned()),
        ..AclBindingFilter::any()
    };
    let removed = a.remove_matching(&f);
    assert_eq!(removed.len(), 2);
    assert_eq!(a.len(), sample().len() - 2);
    assert!(a.describe(&f).is_empty());
    assert!(a.remove_matching(&f).is_empty());
}

#[test]
fn validation_refuses_filter_values_and_bad_fields() {
    let ok = topic_allow("t", PatternType::Literal, ALICE, Operation::Read);
    assert_eq!(ok.validate(), Ok(()));
    let mut b = ok.clone();
    b.pattern = PatternType::Match;
    assert!(matches!(b.validate(), Err(InvalidBinding::FilterOnly(_))));
    let mut b = ok.clone();
    b.operation = Operation::Any;
    assert!(b.validate().is_err());
    let mut b = ok.clone();
    b.principal = "alice".to_owned();
    assert_eq!(b.validate(), Err(InvalidBinding::Principal));
    let mut b = ok.clone();
    b.name.clear();
    assert_eq!(b.validate(), Err(InvalidBinding::EmptyName));
    let mut b = ok.clone();
    b.resource_type = ResourceType::Cluster;
    assert_eq!(b.validate(), Err(InvalidBinding::ClusterName));
    b.name = CLUSTER_NAME.to_owned();
    assert_eq!(b.validate(), Ok(()));
    let mut b = ok;
    b.host.clear();
    assert_eq!(b.validate(), Err(InvalidBinding::EmptyHost));
}

#[test]
fn codes_and_names_round_trip() {
    for t in ResourceType::ALL {
        assert_eq!(ResourceType::from_code(t.code()), Some(t));
        assert_eq!(ResourceType::from_name(&t.name().to_lowercase()), Some(t));
    }
    for o in Operation::ALL {
        assert_eq!(Operation::from_code(o.code()), Some(o));
        assert_eq!(Operation::from_name(o.name()), Some(o));
    }
    for p in [
        PatternType::Any,
        PatternType::Match,
        PatternType::Literal,
        PatternType::Prefixed,
    ] {
        assert_eq!(PatternType::from_code(p.code()), Some(p));
        assert_eq!(PatternType::from_name(p.name()), Some(p));
    }
    for p in [Permission::Any, Permission::Deny, Permission::Allow] {
        assert_eq!(Permission::from_code(p.code()), Some(p));
        assert_eq!(Permission::from_name(p.name()), Some(p));
    }
    // Kafka's codes for the common values.
    assert_eq!(ResourceType::Topic.code(), 2);
    assert_eq!(ResourceType::TransactionalId.code(), 5);
    assert_eq!(Operation::IdempotentWrite.code(), 12);
    assert_eq!(PatternType::Prefixed.code(), 4);
    assert_eq!(Permission::Allow.code(), 3);
    assert_eq!(Operation::from_code(0), None);
    assert_eq!(ResourceType::from_code(7), None);
}

#[tokio::test]
async fn memory_store_add_list_delete() {
    let store = MemoryAclStore::new();
    store.add(sample()).await.expect("valid");
    store.add(sample()).await.expect("duplicates are kept once");
    assert_eq!(store.snapshot().await.expect("list").len(), sample().len());
    let mut bad = sample();
    bad.push(topic_allow("t", PatternType::Match, ALICE, Operation::Read));
    let err = store.add(bad).await.expect_err("invalid");
    assert!(matches!(err, AuthzError::Invalid { index: 6, .. }));
    let f = AclBindingFilter {
        principal: Some(BOB.to_owned()),
        ..AclBindingFilter::any()
    };
    let deleted = store.delete(&f).await.expect("delete");
    assert_eq!(deleted.len(), 3);
    assert!(store.list(&f).await.expect("list").is_empty());
    assert_eq!(store.snapshot().await.expect("list").len(), 3);
}

#[tokio::test]
async fn memory_store_is_bounded() {
    let store = MemoryAclStore::new().with_max(3);
    let bs = sample();
    store.add(bs[..3].to_vec()).await.expect("fits");
    // Re-adding present bindings does not count against the bound.
    store.add(bs[..3].to_vec()).await.expect("already present");
    let err = store
        .add(bs[3..4].to_vec())
        .await
        .expect_err("over the bound");
    assert!(matches!(err, AuthzError::Full { max: 3 }));
    assert_eq!(store.snapshot().await.expect("list").len(), 3);
    store
        .delete(&AclBindingFilter {
            principal: Some(BOB.to_owned()),
            ..AclBindingFilter::any()
        })
        .await
        .expect("delete");
    store.add(bs[3..4].to_vec()).await.expect("room again");
}

#[test]
fn json_file_format() {
    let text = r#"{ "bindings": [
        { "resource_type": "TOPIC", "name": "orders-", "pattern": "PREFIXED",
          "principal": "User:alice", "operation": "read" },
        { "resource_type": "group", "name": "*", "principal": "User:*",
          "host": "10.0.0.1", "operation": "DESCRIBE", "permission": "DENY" }
    ] }"#;
    let bs = parse_bindings(text).expect("valid file");
    assert_eq!(bs.len(), 2);
    assert_eq!(bs[0].pattern, PatternType::Prefixed);
    assert_eq!(bs[0].host, "*");
    assert_eq!(bs[0].permission, Permission::Allow);
    assert_eq!(bs[0].operation, Operation::Read);
    assert_eq!(bs[1].resource_type, ResourceType::Group);
    assert_eq!(bs[1].permission, Permission::Deny);

    assert!(parse_bindings(r#"{"bindings":[{"resource_type":"TOPIK","name":"t","principal":"User:a","operation":"READ"}]}"#).is_err());
    assert!(parse_bindings(r#"{"bindings":[], "extra": 1}"#).is_err());
    assert!(parse_bindings("not json").is_err());

    let dir = std::env::temp_dir().join(format!("authz-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("acls.json");
    std::fs::write(&path, text).expect("write");
    let store = MemoryAclStore::load(&path).expect("load");
    let n = futures_util::FutureExt::now_or_never(store.snapshot())
        .expect("memory store is immediate")
        .expect("list")
        .len();
    assert_eq!(n, 2);
    std::fs::write(&path, r#"{"bindings":[{"resource_type":"CLUSTER","name":"x","principal":"User:a","operation":"ALTER"}]}"#).expect("write");
    assert!(matches!(
        MemoryAclStore::load(&path),
        Err(AuthzError::Invalid { index: 0, .. })
    ));
    assert!(matches!(
        MemoryAclStore::load(&dir.join("missing.json")),
        Err(AuthzError::Read { .. })
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

fn arb_binding() -> impl Strategy<Value = AclBinding> {
    (
        prop::sample::select(vec![ResourceType::Topic, ResourceType::Group]),
        prop::sample::select(vec!["a", "ab", "abc", "b", "*", ""]),
        prop::sample::select(vec![PatternType::Literal, PatternType::Prefixed]),
        prop::sample::select(vec![ALICE, BOB, WILDCARD_PRINCIPAL]),
        prop::sample::select(vec![HOST, "*", "10.0.0.2"]),
        prop::sample::select(Operation::ALL.to_vec()),
        prop::sample::select(vec![Permission::Allow, Permission::Deny]),
    )
        .prop_map(|(t, n, p, pr, h, o, perm)| binding(t, n, p, pr, h, o, perm))
}

proptest! {
    #[test]
    fn authorize_never_panics_and_deny_wins(
        bindings in prop::collection::vec(arb_binding(), 0..12),
        default in any::<bool>(),
        name in "[ab*]{0,4}",
        op in prop::sample::select(Operation::ALL.to_vec()),
        rt in prop::sample::select(ResourceType::ALL.to_vec()),
        deny_op in prop::sample::select(vec![Operation::All, Operation::Read, Operation::Write, Operation::Describe]),
        deny_host in prop::sample::select(vec![HOST, "*"]),
        deny_principal in prop::sample::select(vec![ALICE, WILDCARD_PRINCIPAL]),
    ) {
        let mut a = Acls::new(Vec::<String>::new(), default);
        for b in &bindings {
            a.add(b.clone());
        }
        let _ = a.authorize(ALICE, HOST, op, rt, &name);
        let _ = a.authorize_any(ALICE, HOST, op, rt);
        // A DENY that covers the resource, the principal and the host always wins.
        if rt != ResourceType::Any && !name.is_empty() {
            a.add(binding(rt, &name, PatternType::Literal, deny_principal, deny_host, deny_op, Permission::Deny));
            for requested in Operation::ALL {
                if deny_op.denies(requested) {
                    prop_assert!(!a.authorize(ALICE, HOST, requested, rt, &name));
                }
            }
        }
    }
}

/// Kafka's decision by a scan of every binding: what the index must agree with.
fn authorize_by_scan(
    bindings: &[AclBinding],
    default: bool,
    principal: &str,
    host: &str,
    op: Operation,
    rt: ResourceType,
    name: &str,
) -> bool {
    if op == Operation::Any || rt == ResourceType::Any {
        return false;
    }
    let covering: Vec<&AclBinding> = bindings
        .iter()
        .filter(|b| b.resource_type == rt && b.covers(name))
        .collect();
    if covering.is_empty() {
        return default;
    }
    let mine = covering.iter().filter(|b| b.applies_to(principal, host));
    let mut allowed = false;
    for b in mine {
        match b.permission {
            Permission::Deny if b.operation.denies(op) => return false,
            Permission::Allow if b.operation.allows(op) => allowed = true,
            _ => {}
        }
    }
    allowed
}

proptest! {
    #[test]
    fn the_index_decides_as_a_scan_of_every_binding(
        bindings in prop::collection::vec(arb_binding(), 0..24),
        removed in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
        default in any::<bool>(),
        name in "[ab*]{0,4}",
        op in prop::sample::select(Operation::ALL.to_vec()),
        rt in prop::sample::select(vec![ResourceType::Topic, ResourceType::Group]),
        principal in prop::sample::select(vec![ALICE, BOB]),
        host in prop::sample::select(vec![HOST, "10.0.0.2"]),
    ) {
        let mut a = Acls::new(Vec::<String>::new(), default);
        for b in &bindings {
            a.add(b.clone());
        }
        // Remove some again, by a filter naming every field of one of them (a filter may
        // select more than that one: ANY values).
        let mut kept: Vec<AclBinding> = bindings.clone();
        if !bindings.is_empty() {
            for i in &removed {
                let gone = bindings[i.index(bindings.len())].clone();
                let filter = AclBindingFilter {
                    resource_type: Some(gone.resource_type),
                    name: Some(gone.name.clone()),
                    pattern: Some(gone.pattern),
                    principal: Some(gone.principal.clone()),
                    host: Some(gone.host.clone()),
                    operation: Some(gone.operation),
                    permission: Some(gone.permission),
                };
                a.remove_matching(&filter);
                kept.retain(|b| !filter.matches(b));
            }
        }
        prop_assert_eq!(a.len(), kept.iter().collect::<HashSet<_>>().len());
        prop_assert_eq!(
            a.authorize(principal, host, op, rt, &name),
            authorize_by_scan(&kept, default, principal, host, op, rt, &name)
        );
    }
}
