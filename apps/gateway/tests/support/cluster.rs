//! Several gateways on one Iggy, for the tests of `IGGY_KAFKA_BROKERS` (`cluster.rs`,
//! `failover.rs`): start three with one broker list, start one again at its address and
//! node id, signal one (SIGSTOP, SIGCONT), and send raw Kafka requests to any of them
//! (Metadata, FindCoordinator, CreateTopics) to see what it answers.

use super::{Gateway, IggyServer, bridge_env};
use bytes::Bytes;
use kafka_protocol::api::{decode_response, encode_request};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreateTopicsRequest};
use kafka_protocol::messages::find_coordinator_request::FindCoordinatorRequest;
use kafka_protocol::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
use kafka_protocol::messages::metadata_response::MetadataResponse;
use kafka_protocol::messages::request_header::RequestHeader;
use kafka_protocol::{ByteString, RequestBody, ResponseBody};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The heartbeat interval of the gateways started here.
pub const HEARTBEAT_INTERVAL_MS: u64 = 300;

/// Sends `body` at `version` on a fresh connection and decodes the answer.
pub fn call(addr: SocketAddr, version: i16, body: RequestBody) -> ResponseBody {
    let key = body.api_key();
    let header = RequestHeader {
        request_api_key: key.as_i16(),
        request_api_version: version,
        correlation_id: 9,
        client_id: Some(ByteString::from_static("cluster-test")),
        ..Default::default()
    };
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(&encode_request(&header, &body).unwrap())
        .unwrap();
    let mut size = [0u8; 4];
    s.read_exact(&mut size).unwrap();
    let mut raw = vec![0u8; usize::try_from(u32::from_be_bytes(size)).unwrap()];
    s.read_exact(&mut raw).unwrap();
    decode_response(key, version, &Bytes::from(raw)).unwrap().1
}

/// Metadata v12 for `topic` (which need not exist).
pub fn metadata(addr: SocketAddr, topic: &str) -> MetadataResponse {
    let req = MetadataRequest {
        topics: Some(vec![MetadataRequestTopic {
            name: Some(ByteString::from(topic.to_owned())),
            ..Default::default()
        }]),
        ..Default::default()
    };
    match call(addr, 12, req.into()) {
        ResponseBody::Metadata(m) => m,
        other => panic!("not metadata: {other:?}"),
    }
}

/// The node ids Metadata lists, in its order.
pub fn broker_ids(m: &MetadataResponse) -> Vec<i32> {
    m.brokers.iter().map(|b| b.node_id).collect()
}

/// The leader of each partition of the first topic, by partition index.
pub fn leaders(m: &MetadataResponse) -> Vec<i32> {
    m.topics[0].partitions.iter().map(|p| p.leader_id).collect()
}

/// The node id FindCoordinator (v3, group) answers on `addr` for `group`; `None` with
/// an error code.
pub fn coordinator(addr: SocketAddr, group: &str) -> Option<i32> {
    let req = FindCoordinatorRequest {
        key: ByteString::from(group.to_owned()),
        ..Default::default()
    };
    match call(addr, 3, req.into()) {
        ResponseBody::FindCoordinator(f) => (f.error_code == 0).then_some(f.node_id),
        other => panic!("not find coordinator: {other:?}"),
    }
}

/// Creates `topic` with `partitions` through `addr`; panics unless it succeeds.
pub fn create_topic(addr: SocketAddr, topic: &str, partitions: i32) {
    let create = CreateTopicsRequest {
        topics: vec![CreatableTopic {
            name: ByteString::from(topic.to_owned()),
            num_partitions: partitions,
            replication_factor: 1,
            ..Default::default()
        }],
        timeout_ms: 10_000,
        ..Default::default()
    };
    let ResponseBody::CreateTopics(c) = call(addr, 5, create.into()) else {
        panic!("not create topics");
    };
    assert_eq!(c.topics[0].error_code, 0, "{c:?}");
}

/// Polls `check` every 100 ms for up to `within`; returns how long it took.
pub fn until(within: Duration, what: &str, mut check: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < within, "{what} not within {within:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    start.elapsed()
}

/// `IGGY_KAFKA_BROKERS` for gateways 1, 2, ... on loopback `ports`.
pub fn broker_list(ports: &[u16]) -> String {
    ports
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{}@127.0.0.1:{p}", i + 1))
        .collect::<Vec<_>>()
        .join(",")
}

/// Gateway `node_id` on `iggy` at `127.0.0.1:port`, with `brokers` and a session timeout
/// of `session_ms` (heartbeat every [`HEARTBEAT_INTERVAL_MS`]).
pub fn gateway(
    iggy: &IggyServer,
    node_id: i32,
    port: u16,
    brokers: &str,
    session_ms: u64,
) -> Gateway {
    let bind = format!("127.0.0.1:{port}");
    let id = node_id.to_string();
    let session = session_ms.to_string();
    let heartbeat = HEARTBEAT_INTERVAL_MS.to_string();
    let env = bridge_env(iggy);
    let mut all: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    all.extend([
        ("IGGY_KAFKA_BIND_ADDR", bind.as_str()),
        ("IGGY_KAFKA_NODE_ID", id.as_str()),
        ("IGGY_KAFKA_INSTANCE_ID", id.as_str()),
        ("IGGY_KAFKA_BROKERS", brokers),
        ("IGGY_KAFKA_CLUSTER_SESSION_TIMEOUT_MS", session.as_str()),
        (
            "IGGY_KAFKA_CLUSTER_HEARTBEAT_INTERVAL_MS",
            heartbeat.as_str(),
        ),
        ("IGGY_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS", "0"),
    ]);
    Gateway::start(&all)
}

/// Three gateways on `iggy`, nodes 1 to 3, each listed in the same `IGGY_KAFKA_BROKERS`;
/// their ports by node id - 1.
pub fn trio(iggy: &IggyServer, session_ms: u64) -> (Vec<Gateway>, Vec<u16>) {
    let ports: Vec<u16> = (0..3).map(|_| test_support::free_port()).collect();
    let brokers = broker_list(&ports);
    let gateways = (0..3)
        .map(|i| gateway(iggy, i + 1, ports[i as usize], &brokers, session_ms))
        .collect();
    (gateways, ports)
}

/// Sends `signal` (a name `kill` knows: `STOP`, `CONT`, `KILL`) to `gateway`'s process.
pub fn signal(gateway: &Gateway, signal: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{signal}"), &gateway.pid().to_string()])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill -{signal} {}", gateway.pid());
}
