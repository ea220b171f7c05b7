//! Authorization end to end over TCP: an in-process [`kafka_broker::Server`] on a
//! SASL_PLAINTEXT listener (so authorization is on by default) with ACL bindings in an
//! in-memory store, driven by test-support's SASL client as two tenants and a super
//! user.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use kafka_broker::authz::store::{MemoryAclStore, parse_bindings};
use kafka_broker::config::SaslSettings;
use kafka_broker::session::{Listener, SecurityProtocol};
use kafka_broker::store::memory::{MemoryStore, MemoryStoreConfig};
use kafka_broker::store::{LogStore, NewTopic, TopicConfig};
use kafka_broker::{BrokerConfig, Server, Stores};
use kafka_protocol::messages::join_group_request::JoinGroupRequest;
use kafka_protocol::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
use kafka_protocol::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_protocol::{ByteString, ErrorCode, RequestBody, ResponseBody};
use kafka_sasl::{Authenticator, SaslConfig, UsersFile};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use test_support::sasl_client::{AuthOutcome, Flow, SaslClient};
use tokio::net::{TcpListener, TcpStream};

const USERS: &[(&str, &str)] = &[("alice", "a-pw"), ("bob", "b-pw"), ("admin", "admin-pw")];

/// Each tenant owns the topics and groups of its prefix.
const BINDINGS: &str = r#"{"bindings": [
  {"resource_type": "TOPIC", "name": "a-", "pattern": "PREFIXED", "principal": "User:alice", "operation": "ALL"},
  {"resource_type": "GROUP", "name": "a-", "pattern": "PREFIXED", "principal": "User:alice", "operation": "ALL"},
  {"resource_type": "TOPIC", "name": "b-", "pattern": "PREFIXED", "principal": "User:bob", "operation": "ALL"},
  {"resource_type": "GROUP", "name": "b-", "pattern": "PREFIXED", "principal": "User:bob", "operation": "ALL"}
]}"#;

struct Gateway {
    addr: SocketAddr,
    store: Arc<MemoryStore>,
}

async fn start() -> Gateway {
    let users = Arc::new(UsersFile::in_memory().with_plain_iterations(4096));
    for (user, password) in USERS {
        users.set_password(user, password).unwrap();
    }
    let authenticator = Authenticator::new(SaslConfig::default(), Some(users), None, None);
    let mut config = BrokerConfig {
        sasl: SaslSettings {
            super_users: vec!["User:admin".into()],
            ..SaslSettings::default()
        },
        ..BrokerConfig::default()
    };
    config.authorization.allow_everyone_if_no_acl_found = false;
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig::default()));
    for name in ["a-orders", "b-secrets"] {
        store
            .create_topic(
                NewTopic {
                    name: name.into(),
                    partitions: 1,
                    config: TopicConfig::default(),
                },
                false,
            )
            .await
            .unwrap();
    }
    let stores = Stores {
        log: store.clone(),
        offsets: store.clone(),
    };
    let acls = MemoryAclStore::with_bindings(parse_bindings(BINDINGS).unwrap()).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = Server::new(config, stores)
        .listener(Listener::new("SASL", SecurityProtocol::SaslPlaintext))
        .authenticator(Arc::new(authenticator))
        .acl_store(Arc::new(acls));
    tokio::spawn(server.serve(listener, std::future::pending()));
    Gateway { addr, store }
}

async fn login(g: &Gateway, user: &str) -> SaslClient<TcpStream> {
    let socket = TcpStream::connect(g.addr).await.unwrap();
    let mut c = SaslClient::new(socket).with_timeout(Duration::from_secs(10));
    let password = USERS.iter().find(|(u, _)| *u == user).unwrap().1;
    let outcome = c
        .plain(Flow::Authenticate(2), user, password)
        .await
        .unwrap();
    assert!(
        matches!(outcome, AuthOutcome::Authenticated { .. }),
        "{outcome:?}"
    );
    c
}

async fn topics_seen(c: &mut SaslClient<TcpStream>) -> Vec<String> {
    let all = MetadataRequest {
        topics: None,
        ..Default::default()
    };
    let Some(ResponseBody::Metadata(m)) = c.request(9, RequestBody::Metadata(all)).await.unwrap()
    else {
        panic!("no metadata")
    };
    let mut names: Vec<String> = m
        .topics
        .iter()
        .filter_map(|t| t.name.as_deref().map(str::to_owned))
        .collect();
    names.sort();
    names
}

fn batch() -> bytes::Bytes {
    let records = vec![kafka_records::NewRecord {
        timestamp: 1_700_000_000_000,
        key: None,
        value: Some(bytes::Bytes::from_static(b"v")),
        headers: vec![],
    }];
    let mut out = bytes::BytesMut::new();
    kafka_records::encode_batch(&kafka_records::BatchOptions::default(), &records, &mut out)
        .unwrap();
    out.freeze()
}

fn produce(topic: &'static str) -> RequestBody {
    RequestBody::Produce(ProduceRequest {
        acks: 1,
        timeout_ms: 1000,
        topic_data: vec![TopicProduceData {
            name: ByteString::from_static(topic),
            partition_data: vec![PartitionProduceData {
                index: 0,
                records: Some(batch()),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    })
}

async fn produce_code(c: &mut SaslClient<TcpStream>, topic: &'static str) -> i16 {
    let Some(ResponseBody::Produce(p)) = c.request(9, produce(topic)).await.unwrap() else {
        panic!("no produce answer")
    };
    p.responses[0].partition_responses[0].error_code
}

#[tokio::test]
async fn tenants_see_and_write_only_their_own_topics() {
    let g = start().await;
    let mut alice = login(&g, "alice").await;
    let mut bob = login(&g, "bob").await;
    let mut admin = login(&g, "admin").await;
    assert_eq!(topics_seen(&mut alice).await, ["a-orders"]);
    assert_eq!(topics_seen(&mut bob).await, ["b-secrets"]);
    assert_eq!(topics_seen(&mut admin).await, ["a-orders", "b-secrets"]);

    assert_eq!(produce_code(&mut alice, "a-orders").await, 0);
    assert_eq!(
        produce_code(&mut alice, "b-secrets").await,
        ErrorCode::TOPIC_AUTHORIZATION_FAILED.code()
    );
    let high = |t: &'static str| {
        let store = g.store.clone();
        async move { store.watermarks(t, 0).await.unwrap().high_watermark }
    };
    assert_eq!(high("a-orders").await, 1);
    assert_eq!(high("b-secrets").await, 0);

    // Naming bob's topic does not create it nor say whether it exists.
    for name in ["b-secrets", "b-new"] {
        let named = MetadataRequest {
            topics: Some(vec![MetadataRequestTopic {
                name: Some(ByteString::from(name)),
                ..Default::default()
            }]),
            allow_auto_topic_creation: true,
            ..Default::default()
        };
        let Some(ResponseBody::Metadata(m)) = alice
            .request(9, RequestBody::Metadata(named))
            .await
            .unwrap()
        else {
            panic!("no metadata")
        };
        assert_eq!(
            m.topics[0].error_code,
            ErrorCode::TOPIC_AUTHORIZATION_FAILED.code()
        );
        assert!(m.topics[0].partitions.is_empty());
    }
    assert!(g.store.topic("b-new").await.unwrap().is_none());
}

#[tokio::test]
async fn a_flood_of_refused_requests_keeps_the_connection_answering() {
    let g = start().await;
    let mut alice = login(&g, "alice").await;
    let join = JoinGroupRequest {
        group_id: ByteString::from_static("b-group"),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 10_000,
        member_id: ByteString::new(),
        protocol_type: ByteString::from_static("consumer"),
        ..Default::default()
    };
    for _ in 0..2000 {
        let Some(ResponseBody::JoinGroup(j)) = alice
            .request(5, RequestBody::JoinGroup(join.clone()))
            .await
            .unwrap()
        else {
            panic!("no answer")
        };
        assert_eq!(j.error_code, ErrorCode::GROUP_AUTHORIZATION_FAILED.code());
    }
    // Still served normally afterwards.
    assert_eq!(produce_code(&mut alice, "a-orders").await, 0);
}
