//! Routing through the public [`kafka_broker::Server`] over TCP: with
//! [`Server::membership`] the broker lists the live gateways and refuses what another
//! leads; without it, it is alone at its listeners' advertised addresses.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use kafka_broker::session::Listener;
use kafka_broker::store::cluster::{Member, MemberListener, SingleMember};
use kafka_broker::store::memory::{MemoryStore, MemoryStoreConfig};
use kafka_broker::store::{LogStore, NewTopic, TopicConfig};
use kafka_broker::{BrokerConfig, BrokerError, Server, Stores};
use kafka_protocol::api::{decode_response, encode_request};
use kafka_protocol::messages::metadata_request::MetadataRequest;
use kafka_protocol::messages::metadata_response::MetadataResponse;
use kafka_protocol::messages::request_header::RequestHeader;
use kafka_protocol::{ApiKey, ByteString, ResponseBody};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn server(config: BrokerConfig) -> Server {
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig::default()));
    store
        .create_topic(
            NewTopic {
                name: "t".into(),
                partitions: 8,
                config: TopicConfig::default(),
            },
            false,
        )
        .await
        .unwrap();
    Server::new(
        config,
        Stores {
            log: store.clone(),
            offsets: store,
        },
    )
}

/// One Metadata v12 round trip for every topic.
async fn metadata(addr: std::net::SocketAddr) -> MetadataResponse {
    let mut socket = TcpStream::connect(addr).await.unwrap();
    let header = RequestHeader {
        request_api_key: ApiKey::Metadata.as_i16(),
        request_api_version: 12,
        correlation_id: 5,
        client_id: Some(ByteString::from_static("routing-test")),
        ..Default::default()
    };
    let body = MetadataRequest {
        topics: None,
        ..Default::default()
    };
    socket
        .write_all(&encode_request(&header, &body.into()).unwrap())
        .await
        .unwrap();
    let len = usize::try_from(socket.read_u32().await.unwrap()).unwrap();
    let mut raw = vec![0u8; len];
    socket.read_exact(&mut raw).await.unwrap();
    match decode_response(ApiKey::Metadata, 12, &raw.into())
        .unwrap()
        .1
    {
        ResponseBody::Metadata(m) => m,
        other => panic!("not metadata: {other:?}"),
    }
}

fn member(node_id: i32, host: &str, port: u16) -> Member {
    Member {
        node_id,
        epoch: 1,
        listeners: vec![MemberListener {
            name: "PLAINTEXT".into(),
            host: host.into(),
            port,
        }],
    }
}

#[tokio::test]
async fn alone_the_gateway_is_its_listeners_advertised_address() {
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let server = server(BrokerConfig {
        node_id: 4,
        ..BrokerConfig::default()
    })
    .await
    .listener(Listener::plaintext().advertising("gw.example", 19092));
    tokio::spawn(server.serve(tcp, std::future::pending()));
    let m = metadata(addr).await;
    let brokers: Vec<(i32, String, i32)> = m
        .brokers
        .iter()
        .map(|b| (b.node_id, b.host.to_string(), b.port))
        .collect();
    assert_eq!(brokers, vec![(4, "gw.example".into(), 19092)]);
    assert_eq!(m.controller_id, 4);
    assert!(m.topics[0].partitions.iter().all(|p| p.leader_id == 4));
}

/// A membership of several gateways; this one (node 1) with its lease, the view fixed.
#[derive(Debug)]
struct Three(SingleMember, Arc<kafka_broker::store::cluster::LiveView>);

impl kafka_broker::store::cluster::Membership for Three {
    fn me(&self) -> &Member {
        self.0.me()
    }
    fn view(&self) -> Arc<kafka_broker::store::cluster::LiveView> {
        self.1.clone()
    }
    fn subscribe(
        &self,
    ) -> tokio::sync::watch::Receiver<Arc<kafka_broker::store::cluster::LiveView>> {
        tokio::sync::watch::channel(self.1.clone()).1
    }
    fn holds_lease(&self) -> bool {
        true
    }
}

#[tokio::test]
async fn with_a_membership_metadata_lists_every_live_gateway() {
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let members = vec![
        member(1, "gw1", 9092),
        member(2, "gw2", 9092),
        member(3, "gw3", 9092),
    ];
    let view = Arc::new(kafka_broker::store::cluster::LiveView {
        members: members.clone(),
        version: 1,
    });
    let membership = Arc::new(Three(SingleMember::new(members[0].clone()), view.clone()));
    let server = server(BrokerConfig::default())
        .await
        .listener(Listener::plaintext().advertising("gw1", 9092))
        .membership(membership);
    tokio::spawn(server.serve(tcp, std::future::pending()));
    let m = metadata(addr).await;
    let ids: Vec<i32> = m.brokers.iter().map(|b| b.node_id).collect();
    assert_eq!(ids, vec![1, 2, 3]);
    assert_eq!(m.controller_id, 1);
    for p in &m.topics[0].partitions {
        assert_eq!(
            Some(p.leader_id),
            kafka_broker::cluster::leader(&view, "t", p.partition_index)
        );
    }
}

#[tokio::test]
async fn a_membership_of_another_node_id_is_refused() {
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = server(BrokerConfig::default())
        .await
        .membership(Arc::new(SingleMember::new(member(9, "gw9", 9092))));
    let err = server.serve(tcp, std::future::pending()).await.unwrap_err();
    assert!(
        matches!(err, BrokerError::Config(ref m) if m.contains("node 9")),
        "{err}"
    );
}
