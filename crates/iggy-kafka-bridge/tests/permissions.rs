//! The Iggy-permissions authorization source on a real Iggy server: decisions from a
//! user's permissions as created with the Iggy SDK, a change made with the SDK seen after
//! the refresh interval and not before, one read for concurrent prepares, unknown,
//! inactive and root users, the derived bindings, and a failed read keeping the last
//! snapshot. Skipped (with a printed notice) without `IGGY_SERVER_BIN`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use iggy::prelude::{
    GlobalPermissions, Identifier, Permissions, StreamClient, StreamPermissions, TopicPermissions,
    UserClient, UserStatus,
};
use iggy_kafka_bridge::{BridgeConfig, IggyBridge};
use kafka_authz::{AclBindingFilter, Authorizer, Caller, Operation, READ_ONLY_HOST, ResourceType};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use support::Server;

const REFRESH: Duration = Duration::from_millis(1500);

fn caller(principal: &str) -> Caller<'_> {
    Caller {
        principal,
        host: "127.0.0.1",
    }
}

fn can(
    source: &dyn Authorizer,
    principal: &str,
    op: Operation,
    rt: ResourceType,
    name: &str,
) -> bool {
    source.authorize(&caller(principal), op, rt, name)
}

/// Poll (or send) on one topic of the stream with id `stream`.
fn on_topic(stream: u32, topic: u32, poll: bool, send: bool) -> Permissions {
    Permissions {
        global: GlobalPermissions::default(),
        streams: Some(BTreeMap::from([(
            stream as usize,
            StreamPermissions {
                topics: Some(BTreeMap::from([(
                    topic as usize,
                    TopicPermissions {
                        poll_messages: poll,
                        send_messages: send,
                        ..TopicPermissions::default()
                    },
                )])),
                ..StreamPermissions::default()
            },
        )])),
    }
}

struct Setup {
    server: Server,
    bridge: IggyBridge,
    stream_id: u32,
    orders_id: u32,
}

async fn setup(name: &str, config: impl FnOnce(BridgeConfig) -> BridgeConfig) -> Option<Setup> {
    let bin = support::server_bin(name)?;
    let server = Server::start(&bin);
    let bridge = IggyBridge::connect(config(BridgeConfig {
        permissions_refresh: REFRESH,
        ..support::config(&server)
    }))
    .await
    .unwrap_or_else(|e| panic!("connect: {e}; server log:\n{}", server.log_tail()));
    support::create(&bridge, "orders", 1).await;
    support::create(&bridge, "audit", 1).await;
    let root = support::native_client(&server).await;
    let stream = root
        .get_stream(&Identifier::named("kafka").unwrap())
        .await
        .unwrap()
        .expect("the bridge's stream");
    let orders_id = stream
        .topics
        .iter()
        .find(|t| t.name == "orders")
        .expect("orders")
        .id;
    Some(Setup {
        server,
        bridge,
        stream_id: stream.id,
        orders_id,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_follow_the_users_iggy_permissions_after_the_refresh_interval() {
    let Some(s) = setup(
        "decisions_follow_the_users_iggy_permissions_after_the_refresh_interval",
        |c| c,
    )
    .await
    else {
        return;
    };
    let root = support::native_client(&s.server).await;
    root.create_user(
        "kafka-alice",
        "alice-secret-1",
        UserStatus::Active,
        Some(on_topic(s.stream_id, s.orders_id, true, false)),
    )
    .await
    .unwrap();
    let source = s.bridge.permissions();
    let alice = "User:kafka-alice";
    source.prepare(alice).await.unwrap();
    let topic = ResourceType::Topic;
    assert!(can(&*source, alice, Operation::Read, topic, "orders"));
    assert!(can(&*source, alice, Operation::Describe, topic, "orders"));
    assert!(!can(&*source, alice, Operation::Write, topic, "orders"));
    assert!(!can(&*source, alice, Operation::Read, topic, "audit"));
    assert!(!can(&*source, alice, Operation::Delete, topic, "orders"));
    assert!(!can(
        &*source,
        alice,
        Operation::Create,
        ResourceType::Cluster,
        "kafka-cluster"
    ));
    assert!(can(
        &*source,
        alice,
        Operation::Read,
        ResourceType::Group,
        "any-group"
    ));
    assert!(source.authorize_any(&caller(alice), Operation::Read, topic));
    assert!(!source.authorize_any(&caller(alice), Operation::Write, topic));
    assert_eq!(source.user_reads(), 1);

    // Cached: no second read within the interval.
    source.prepare(alice).await.unwrap();
    assert_eq!(source.user_reads(), 1);

    // Poll revoked, send granted, with the Iggy SDK.
    root.update_permissions(
        &Identifier::named("kafka-alice").unwrap(),
        Some(on_topic(s.stream_id, s.orders_id, false, true)),
    )
    .await
    .unwrap();
    // Not seen before a refresh is due ...
    source.prepare(alice).await.unwrap();
    assert!(can(&*source, alice, Operation::Read, topic, "orders"));
    assert!(!can(&*source, alice, Operation::Write, topic, "orders"));
    // ... and seen once it is.
    tokio::time::sleep(REFRESH + Duration::from_millis(100)).await;
    source.prepare(alice).await.unwrap();
    assert!(!can(&*source, alice, Operation::Read, topic, "orders"));
    assert!(can(&*source, alice, Operation::Write, topic, "orders"));
    assert!(can(
        &*source,
        alice,
        Operation::IdempotentWrite,
        ResourceType::Cluster,
        "kafka-cluster"
    ));
    assert_eq!(source.user_reads(), 2);

    // The derived bindings show what she has now, on the Kafka topic's name.
    let filter = AclBindingFilter {
        principal: Some(alice.into()),
        ..AclBindingFilter::any()
    };
    let bindings = source.derived_bindings(&filter).await.unwrap();
    let mut topic_ops: Vec<Operation> = bindings
        .iter()
        .filter(|b| b.resource_type == topic)
        .inspect(|b| {
            assert_eq!(b.name, "orders");
            assert_eq!(b.host, READ_ONLY_HOST);
        })
        .map(|b| b.operation)
        .collect();
    topic_ops.sort();
    assert_eq!(
        topic_ops,
        vec![
            Operation::Write,
            Operation::Describe,
            Operation::DescribeConfigs
        ]
    );
    // Without a principal: every Iggy user, root included.
    let all = source
        .derived_bindings(&AclBindingFilter::any())
        .await
        .unwrap();
    assert!(all.iter().any(|b| b.principal == alice));
    assert!(
        all.iter()
            .any(|b| b.principal == format!("User:{}", support::USER)
                && b.operation == Operation::All)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_inactive_root_and_concurrent_principals() {
    let Some(s) = setup("unknown_inactive_root_and_concurrent_principals", |c| c).await else {
        return;
    };
    let root = support::native_client(&s.server).await;
    let everything = Permissions {
        global: GlobalPermissions {
            manage_streams: true,
            poll_messages: true,
            send_messages: true,
            ..GlobalPermissions::default()
        },
        streams: None,
    };
    root.create_user(
        "kafka-idle",
        "idle-secret-1",
        UserStatus::Inactive,
        Some(everything.clone()),
    )
    .await
    .unwrap();
    // An Iggy user named like Kafka's anonymous principal lends it nothing.
    root.create_user(
        "ANONYMOUS",
        "anonymous-secret-1",
        UserStatus::Active,
        Some(everything.clone()),
    )
    .await
    .unwrap();
    root.create_user(
        "kafka-bob",
        "bob-secret-1",
        UserStatus::Active,
        Some(everything),
    )
    .await
    .unwrap();
    let source = s.bridge.permissions();
    let topic = ResourceType::Topic;
    for refused in [
        "User:kafka-nobody",
        "User:kafka-idle",
        "User:",
        "Group:kafka-bob",
        "User:ANONYMOUS",
    ] {
        source.prepare(refused).await.unwrap();
        assert!(
            !can(&*source, refused, Operation::Read, topic, "orders"),
            "{refused}"
        );
        assert!(
            !can(
                &*source,
                refused,
                Operation::Describe,
                ResourceType::Cluster,
                "kafka-cluster"
            ),
            "{refused}"
        );
        assert!(
            can(&*source, refused, Operation::Read, ResourceType::Group, "g"),
            "{refused}"
        );
    }

    // Iggy's root is user id 0 (what the source recognises it by) and may do everything.
    let root_user = root
        .get_user(&Identifier::named(support::USER).unwrap())
        .await
        .unwrap()
        .expect("root");
    assert_eq!(root_user.id, 0);
    let root_principal = format!("User:{}", support::USER);
    source.prepare(&root_principal).await.unwrap();
    for op in [
        Operation::Alter,
        Operation::ClusterAction,
        Operation::Create,
    ] {
        assert!(can(
            &*source,
            &root_principal,
            op,
            ResourceType::Cluster,
            "kafka-cluster"
        ));
    }
    assert!(can(
        &*source,
        &root_principal,
        Operation::Delete,
        topic,
        "orders"
    ));

    // Many prepares of one principal at once: one read.
    let before = source.user_reads();
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let source = Arc::clone(&source);
        tasks.push(tokio::spawn(async move {
            source.prepare("User:kafka-bob").await
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    assert_eq!(source.user_reads(), before + 1);
    assert!(can(
        &*source,
        "User:kafka-bob",
        Operation::Create,
        topic,
        "new-topic"
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_read_keeps_the_last_snapshot_and_the_cache_is_bounded() {
    let Some(mut s) = setup(
        "a_failed_read_keeps_the_last_snapshot_and_the_cache_is_bounded",
        |c| BridgeConfig {
            permissions_cache_entries: 2,
            call_timeout: Duration::from_secs(2),
            ..c
        },
    )
    .await
    else {
        return;
    };
    let root = support::native_client(&s.server).await;
    for user in ["kafka-u1", "kafka-u2", "kafka-u3"] {
        root.create_user(
            user,
            "user-secret-1",
            UserStatus::Active,
            Some(on_topic(s.stream_id, s.orders_id, true, false)),
        )
        .await
        .unwrap();
    }
    let source = s.bridge.permissions();
    for user in ["User:kafka-u1", "User:kafka-u2", "User:kafka-u3"] {
        source.prepare(user).await.unwrap();
    }
    // Bounded: the oldest went first.
    assert_eq!(source.cached_principals(), 2);
    assert!(!can(
        &*source,
        "User:kafka-u1",
        Operation::Read,
        ResourceType::Topic,
        "orders"
    ));
    assert!(can(
        &*source,
        "User:kafka-u3",
        Operation::Read,
        ResourceType::Topic,
        "orders"
    ));

    // Iggy gone: a due refresh keeps the last snapshot; a principal never read fails.
    s.server.kill();
    tokio::time::sleep(REFRESH + Duration::from_millis(100)).await;
    source.prepare("User:kafka-u3").await.unwrap();
    assert!(can(
        &*source,
        "User:kafka-u3",
        Operation::Read,
        ResourceType::Topic,
        "orders"
    ));
    let err = source.prepare("User:kafka-u1").await.unwrap_err();
    assert!(
        matches!(err, kafka_authz::AuthzError::Unavailable(_)),
        "{err}"
    );
    assert!(!err.to_string().contains("secret"), "{err}");
}
