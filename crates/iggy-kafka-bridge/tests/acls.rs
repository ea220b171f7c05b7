//! Kafka ACL bindings in the meta stream on a real Iggy server: added, listed and
//! deleted by filter, bounded, and found again by a reconnected bridge, after an Iggy
//! server restart, and across log snapshots.
//! Skipped (with a printed notice) without `IGGY_SERVER_BIN`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use iggy_kafka_bridge::{BridgeConfig, IggyBridge};
use kafka_authz::store::AclStore;
use kafka_authz::{
    AclBinding, AclBindingFilter, AuthzError, Operation, PatternType, Permission, ResourceType,
};
use support::Server;

fn server_for(name: &str) -> Option<Server> {
    support::server_bin(name).map(|bin| Server::start(&bin))
}

fn meta_config(server: &Server, meta_stream: &str) -> BridgeConfig {
    BridgeConfig {
        meta_stream: meta_stream.to_owned(),
        meta_snapshot_records: 100,
        ..support::config(server)
    }
}

async fn connect(server: &Server, meta: &str) -> IggyBridge {
    IggyBridge::connect(meta_config(server, meta))
        .await
        .unwrap_or_else(|e| panic!("connect: {e}; server log:\n{}", server.log_tail()))
}

fn binding(
    resource_type: ResourceType,
    name: &str,
    pattern: PatternType,
    principal: &str,
    operation: Operation,
    permission: Permission,
) -> AclBinding {
    AclBinding {
        resource_type,
        name: name.into(),
        pattern,
        principal: principal.into(),
        host: "*".into(),
        operation,
        permission,
    }
}

fn seed() -> Vec<AclBinding> {
    vec![
        binding(
            ResourceType::Topic,
            "orders",
            PatternType::Literal,
            "User:alice",
            Operation::Read,
            Permission::Allow,
        ),
        binding(
            ResourceType::Topic,
            "ord",
            PatternType::Prefixed,
            "User:bob",
            Operation::Write,
            Permission::Allow,
        ),
        binding(
            ResourceType::Topic,
            "*",
            PatternType::Literal,
            "User:carol",
            Operation::All,
            Permission::Deny,
        ),
        binding(
            ResourceType::Group,
            "g1",
            PatternType::Literal,
            "User:alice",
            Operation::Read,
            Permission::Allow,
        ),
    ]
}

fn filter_for(name: &str, pattern: PatternType) -> AclBindingFilter {
    AclBindingFilter {
        resource_type: Some(ResourceType::Topic),
        name: Some(name.into()),
        pattern: Some(pattern),
        ..AclBindingFilter::any()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_bindings_are_kept_in_iggy_and_survive_restarts() {
    let Some(mut server) = server_for("acl_bindings_are_kept_in_iggy_and_survive_restarts") else {
        return;
    };
    let meta = format!("meta-{}", support::run_id());
    let bridge = connect(&server, &meta).await;
    let store = bridge.acl_store(5);
    assert!(store.snapshot().await.unwrap().is_empty());
    store.add(seed()).await.unwrap();
    // Adding what is already there changes nothing and fits the bound.
    store.add(seed()[..2].to_vec()).await.unwrap();
    assert_eq!(store.snapshot().await.unwrap().len(), 4);

    // Listed by filter: MATCH finds the literal name, the prefix and the wildcard.
    let matched = store
        .list(&filter_for("orders", PatternType::Match))
        .await
        .unwrap();
    assert_eq!(matched.len(), 3);
    let groups = store
        .list(&AclBindingFilter {
            resource_type: Some(ResourceType::Group),
            ..AclBindingFilter::any()
        })
        .await
        .unwrap();
    assert_eq!(groups, vec![seed()[3].clone()]);

    // The bound: two more would make six.
    let more = vec![
        binding(
            ResourceType::Topic,
            "x",
            PatternType::Literal,
            "User:dave",
            Operation::Read,
            Permission::Allow,
        ),
        binding(
            ResourceType::Topic,
            "y",
            PatternType::Literal,
            "User:dave",
            Operation::Read,
            Permission::Allow,
        ),
    ];
    assert!(matches!(
        store.add(more.clone()).await,
        Err(AuthzError::Full { max: 5 })
    ));
    store.add(more[..1].to_vec()).await.unwrap();
    // An invalid binding is refused before anything is written.
    let mut bad = more[1].clone();
    bad.pattern = PatternType::Match;
    assert!(matches!(
        store.add(vec![bad]).await,
        Err(AuthzError::Invalid { index: 0, .. })
    ));

    // Deleted by filter: the prefixed one only.
    let gone = store
        .delete(&filter_for("ord", PatternType::Prefixed))
        .await
        .unwrap();
    assert_eq!(gone, vec![seed()[1].clone()]);
    let before = store.snapshot().await.unwrap();
    assert_eq!(before.len(), 4);
    drop(store);

    // A restarted gateway finds the same bindings.
    bridge.close().await;
    drop(bridge);
    let bridge = connect(&server, &meta).await;
    assert_eq!(bridge.acl_store(5).snapshot().await.unwrap(), before);
    bridge.close().await;
    drop(bridge);

    // So does one after the Iggy server restarted.
    server.restart();
    let bridge = connect(&server, &meta).await;
    let store = bridge.acl_store(5);
    assert_eq!(store.snapshot().await.unwrap(), before);
    let all = store.delete(&AclBindingFilter::any()).await.unwrap();
    assert_eq!(all, before);
    assert!(store.snapshot().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_bindings_are_snapshotted_across_generations() {
    let Some(server) = server_for("acl_bindings_are_snapshotted_across_generations") else {
        return;
    };
    let meta = format!("meta-{}", support::run_id());
    let bridge = connect(&server, &meta).await;
    let store = bridge.acl_store(10_000);
    // 300 additions and 150 deletions: the tail passes 100 several times.
    let all: Vec<AclBinding> = (0..300)
        .map(|i| {
            binding(
                ResourceType::Topic,
                &format!("t-{i}"),
                PatternType::Literal,
                "User:alice",
                Operation::Read,
                Permission::Allow,
            )
        })
        .collect();
    for chunk in all.chunks(30) {
        store.add(chunk.to_vec()).await.unwrap();
    }
    for i in (0..300).step_by(2) {
        let gone = store
            .delete(&filter_for(&format!("t-{i}"), PatternType::Literal))
            .await
            .unwrap();
        assert_eq!(gone.len(), 1);
    }
    let expected = store.snapshot().await.unwrap();
    assert_eq!(expected.len(), 150);
    bridge.close().await;
    drop(bridge);
    let bridge = connect(&server, &meta).await;
    assert_eq!(bridge.acl_store(10_000).snapshot().await.unwrap(), expected);
    let client = support::native_client(&server).await;
    let (log, _) = support::settled_generation(&client, &meta, "acls").await;
    assert_ne!(log, "acls", "no snapshot was taken");
}
