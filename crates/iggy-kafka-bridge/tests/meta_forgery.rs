//! The meta stream forged by an Iggy user who is not a gateway.
//!
//! An Iggy user with a global `send_messages` grant (a common producer grant) can append
//! to the bridge's meta stream with Iggy's own SDK. Without a meta secret the bridge
//! applies what it finds there: a SCRAM credential for `iggy` (Iggy's root, for the
//! gateway) with a password the attacker chose, the deletion of a DENY binding. With a
//! secret every record must carry a gateway's proof (`iggy_kafka_bridge::proof`):
//! forged records, records in bulk, records with a made-up proof and genuine records
//! appended again later (replays) are all ignored and counted.
//!
//! Skipped (with a printed notice) without `IGGY_SERVER_BIN`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use bytes::Bytes;
use iggy::prelude::{
    Client, GlobalPermissions, HeaderKey, HeaderKind, HeaderValue, Identifier, IggyClient,
    IggyMessage, MessageClient, Partitioning, Permissions, PollingStrategy, UserClient, UserStatus,
};
use iggy_kafka_bridge::{BridgeConfig, IggyAclStore, IggyBridge, IggyScramStore};
use kafka_authz::store::AclStore;
use kafka_authz::{AclBinding, AclBindingFilter, Operation, PatternType, Permission, ResourceType};
use kafka_sasl::{ScramCredentialStore, ScramMechanism};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use support::Server;

const SECRET: &str = "the-gateways-meta-secret-0123456789abcdef";

/// A SCRAM-SHA-256 credential record for `user`, as the bridge writes them (any salt
/// and keys: the attacker computes them from a password of its choosing).
fn scram_record(user: &str) -> Vec<u8> {
    format!(
        "{{\"u\":\"{user}\",\"m\":1,\"s\":\"c2FsdHNhbHRzYWx0\",\"i\":4096,\
         \"sk\":\"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\",\
         \"vk\":\"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\"}}"
    )
    .into_bytes()
}

/// An ACL record (`deleted` removes the binding).
fn acl_record(principal: &str, topic: &str, permission: &str, deleted: bool) -> Vec<u8> {
    let tail = if deleted { ",\"deleted\":true" } else { "" };
    format!(
        "{{\"rt\":\"TOPIC\",\"n\":\"{topic}\",\"pt\":\"LITERAL\",\"p\":\"{principal}\",\
         \"h\":\"*\",\"op\":\"READ\",\"perm\":\"{permission}\"{tail}}}"
    )
    .into_bytes()
}

fn deny_mallory() -> AclBinding {
    AclBinding {
        resource_type: ResourceType::Topic,
        name: "payroll".into(),
        pattern: PatternType::Literal,
        principal: "User:mallory".into(),
        host: "*".into(),
        operation: Operation::Read,
        permission: Permission::Deny,
    }
}

/// An Iggy user that may send to every stream and nothing else, signed in.
async fn producer(server: &Server) -> IggyClient {
    let root = support::native_client(server).await;
    let send_only = Permissions {
        global: GlobalPermissions {
            send_messages: true,
            poll_messages: true,
            ..GlobalPermissions::default()
        },
        streams: None,
    };
    root.create_user(
        "producer",
        "producer-secret-1",
        UserStatus::Active,
        Some(send_only),
    )
    .await
    .unwrap();
    let client = IggyClient::builder()
        .with_tcp()
        .with_server_address(server.address.clone())
        .build()
        .unwrap();
    client.connect().await.unwrap();
    client
        .login_user("producer", "producer-secret-1")
        .await
        .unwrap();
    client
}

/// Appends `payloads` to log `log` of meta stream `meta`, each with `header` (a proof)
/// when given.
async fn forge(
    client: &IggyClient,
    meta: &str,
    log: &str,
    payloads: Vec<Vec<u8>>,
    header: Option<Vec<u8>>,
) {
    let mut messages: Vec<IggyMessage> = payloads
        .into_iter()
        .map(|p| {
            let builder = IggyMessage::builder().payload(Bytes::from(p));
            match &header {
                Some(h) => builder
                    .user_headers(BTreeMap::from([(
                        HeaderKey::try_from(iggy_kafka_bridge::proof::PROOF_HEADER).unwrap(),
                        HeaderValue::from_raw(HeaderKind::Raw, h).unwrap(),
                    )]))
                    .build()
                    .unwrap(),
                None => builder.build().unwrap(),
            }
        })
        .collect();
    client
        .send_messages(
            &Identifier::named(meta).unwrap(),
            &Identifier::named(log).unwrap(),
            &Partitioning::partition_id(0),
            &mut messages,
        )
        .await
        .unwrap();
}

fn config(server: &Server, meta: &str, secret: Option<&str>) -> BridgeConfig {
    BridgeConfig {
        meta_stream: meta.to_owned(),
        meta_secret: secret.map(str::to_owned),
        meta_max_skew: Duration::from_secs(1),
        ..support::config(server)
    }
}

async fn wait_until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !done().await {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "not within 30 s: {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What the attacker does in both tests: a SCRAM credential for `iggy`, the deletion
/// of the DENY binding on `payroll`.
async fn attack(attacker: &IggyClient, meta: &str) {
    forge(attacker, meta, "scram", vec![scram_record("iggy")], None).await;
    forge(
        attacker,
        meta,
        "acls",
        vec![acl_record("User:mallory", "payroll", "DENY", true)],
        None,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_secret_forged_meta_records_are_applied() {
    let Some(bin) = support::server_bin("without_a_secret_forged_meta_records_are_applied") else {
        return;
    };
    let server = Server::start(&bin);
    let meta = format!("meta-open-{}", support::run_id());
    let bridge = IggyBridge::connect(config(&server, &meta, None))
        .await
        .unwrap();
    let scram = IggyScramStore::new(bridge.clone());
    let acls = IggyAclStore::new(bridge.clone(), 1000);
    acls.add(vec![deny_mallory()]).await.unwrap();
    let attacker = producer(&server).await;
    attack(&attacker, &meta).await;
    // The hole, as it stands without a secret: both land.
    wait_until("the forged credential is taken", async || {
        scram
            .credential("iggy", ScramMechanism::Sha256)
            .await
            .unwrap()
            .is_some()
    })
    .await;
    wait_until("the DENY binding is gone", async || {
        acls.list(&AclBindingFilter::any())
            .await
            .unwrap()
            .is_empty()
    })
    .await;
    bridge.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_secret_forged_replayed_and_bulk_meta_records_are_ignored() {
    let Some(bin) =
        support::server_bin("with_a_secret_forged_replayed_and_bulk_meta_records_are_ignored")
    else {
        return;
    };
    let server = Server::start(&bin);
    let meta = format!("meta-proven-{}", support::run_id());
    let bridge = IggyBridge::connect(config(&server, &meta, Some(SECRET)))
        .await
        .unwrap();
    let scram = IggyScramStore::new(bridge.clone());
    let acls = IggyAclStore::new(bridge.clone(), 100_000);
    acls.add(vec![deny_mallory()]).await.unwrap();
    let attacker = producer(&server).await;
    // The start-up check names the user that can write the meta stream (and not the
    // bridge's own account).
    assert_eq!(
        bridge.meta_stream_writers(100).await.unwrap(),
        vec!["producer".to_owned()]
    );
    attack(&attacker, &meta).await;

    // A made-up proof (right length and version, wrong tag), and two thousand forged
    // bindings in bulk.
    let mut made_up = vec![1u8];
    made_up.extend_from_slice(&iggy_kafka_bridge::proof::unix_ms().to_be_bytes());
    made_up.extend_from_slice(&[0x5a; 32]);
    forge(
        &attacker,
        &meta,
        "scram",
        vec![scram_record("iggy")],
        Some(made_up),
    )
    .await;
    for chunk in 0..4 {
        let bulk = (0..500)
            .map(|i| acl_record(&format!("User:bulk-{chunk}-{i}"), "payroll", "ALLOW", false))
            .collect();
        forge(&attacker, &meta, "acls", bulk, None).await;
    }
    let forged = 2 + 1 + 2000;
    wait_until("every forged record is counted", async || {
        bridge.meta_records_refused() >= forged
    })
    .await;
    assert_eq!(bridge.meta_records_refused(), forged);
    assert!(
        scram
            .credential("iggy", ScramMechanism::Sha256)
            .await
            .unwrap()
            .is_none(),
        "a forged SCRAM credential was taken"
    );
    assert_eq!(
        acls.list(&AclBindingFilter::any()).await.unwrap(),
        vec![deny_mallory()],
        "forged ACL records changed the bindings"
    );

    // A replay: the gateway's own record binding mallory, read back with its proof,
    // appended again after the binding was deleted and the skew window (1 s) passed.
    let genuine = attacker
        .poll_messages(
            &Identifier::named(&meta).unwrap(),
            &Identifier::named("acls").unwrap(),
            Some(0),
            &iggy::prelude::Consumer::default(),
            &PollingStrategy::offset(0),
            1,
            false,
        )
        .await
        .unwrap()
        .messages
        .remove(0);
    let proof =
        iggy_kafka_bridge::proof::header_of(&genuine).expect("the gateway's record has a proof");
    acls.delete(&AclBindingFilter::any()).await.unwrap();
    assert!(
        acls.list(&AclBindingFilter::any())
            .await
            .unwrap()
            .is_empty()
    );
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    forge(
        &attacker,
        &meta,
        "acls",
        vec![genuine.payload.to_vec()],
        Some(proof),
    )
    .await;
    wait_until("the replay is counted", async || {
        bridge.meta_records_refused() > forged
    })
    .await;
    assert!(
        acls.list(&AclBindingFilter::any())
            .await
            .unwrap()
            .is_empty(),
        "a replayed record brought a deleted binding back"
    );

    // A second bridge (a restarted gateway) reading the whole log sees the same.
    let again = IggyBridge::connect(config(&server, &meta, Some(SECRET)))
        .await
        .unwrap();
    assert!(
        IggyScramStore::new(again.clone())
            .credential("iggy", ScramMechanism::Sha256)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        IggyAclStore::new(again.clone(), 100_000)
            .list(&AclBindingFilter::any())
            .await
            .unwrap()
            .is_empty()
    );
    assert!(again.meta_records_refused() > forged);
    again.close().await;
    bridge.close().await;
}
