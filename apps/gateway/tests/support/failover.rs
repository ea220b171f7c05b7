//! What the failover tests (`failover.rs`) do to a [`Trio`] beyond starting it: ask any
//! gateway who leads a topic's partitions and who coordinates a group, create a topic,
//! signal one gateway (SIGKILL, SIGSTOP, SIGCONT) and start one again at the address and
//! node id it had.

use super::Gateway;
use super::trio::{Trio, brokers_list, call, cluster_env, metadata};
use kafka_protocol::ByteString;
use kafka_protocol::ResponseBody;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreateTopicsRequest};
use kafka_protocol::messages::find_coordinator_request::FindCoordinatorRequest;
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The leader of each partition of `topic` in `addr`'s Metadata, by partition index.
pub fn leaders(addr: SocketAddr, topic: &str) -> Vec<i32> {
    let m = metadata(addr, topic);
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

/// Sends `signal` (a name `kill` knows: `STOP`, `CONT`, `KILL`) to `gateway`'s process.
pub fn signal(gateway: &Gateway, signal: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{signal}"), &gateway.pid().to_string()])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill -{signal} {}", gateway.pid());
}

/// Starts gateway `node_id` of a trio of single-PLAINTEXT-listener gateways
/// ([`Trio::start`]) again, as its supervisor would: same address, node id and settings
/// plus `extra`; the process it replaces must have exited. Returns once it accepts.
pub fn restart(trio: &mut Trio, node_id: i32, extra: &[(&str, &str)]) {
    let i = usize::try_from(node_id - 1).unwrap();
    assert!(
        !trio.gateways[i].is_running(),
        "gateway {node_id} still runs"
    );
    let listed: Vec<SocketAddr> = trio.gateways.iter().map(|g| g.addr).collect();
    let addr = listed[i];
    let mut cluster = cluster_env(&trio.iggy, node_id, &brokers_list(&listed));
    if let Some(http) = trio.http.get(i) {
        cluster.push(("IGGY_KAFKA_METRICS_ADDR", http.to_string()));
    }
    let bind = addr.to_string();
    let mut env: Vec<(&str, &str)> = cluster.iter().map(|(k, v)| (*k, v.as_str())).collect();
    env.push(("IGGY_KAFKA_BIND_ADDR", &bind));
    env.extend_from_slice(extra);
    let mut gateway = Gateway::spawn(&env, false);
    gateway.wait_for(
        Duration::from_secs(30),
        &format!("accept on {addr}"),
        |_| TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok(),
    );
    gateway.addr = addr;
    trio.gateways[i] = gateway;
}
