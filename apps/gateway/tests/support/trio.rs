//! Three gateways on one Iggy server, each named in the same `IGGY_KAFKA_BROKERS` list
//! (node ids 1 to 3), for the tests of several gateways.
//!
//! Every gateway gets fixed free loopback ports, because the list must name each one's
//! advertised address before it starts. [`Trio::start`] gives each a single PLAINTEXT
//! listener; [`Trio::start_nodes`] takes the listener settings of each gateway, the
//! address the list names and a PLAINTEXT address to probe (a SASL trio adds a PLAINTEXT
//! listener for that). Both return once every gateway accepts on every address; then
//! [`Trio::wait_live`] waits until each lists all three in Metadata, so a client's first
//! Metadata answer already spreads the partitions over the three, and until each is
//! ready (`/ready`: past its join wait, it serves what it is named for).
//!
//! The Iggy server outlives the gateways: they are stopped first when the trio drops.
//! [`call`] and [`metadata`] are single raw Kafka requests for probes and assertions.

use super::{Gateway, IggyServer, STARTUP_TIMEOUT, bridge_env};
use bytes::Bytes;
use kafka_protocol::api::{decode_response, encode_request};
use kafka_protocol::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
use kafka_protocol::messages::metadata_response::MetadataResponse;
use kafka_protocol::messages::request_header::RequestHeader;
use kafka_protocol::{ByteString, RequestBody, ResponseBody};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// The lease session timeout of the trio's gateways (short, so a lost gateway leaves the
/// view quickly in the failover tests).
pub const SESSION_TIMEOUT_MS: u64 = 3000;
/// Their heartbeat interval (under a third of the session timeout).
pub const HEARTBEAT_INTERVAL_MS: u64 = 300;
/// The default lease timings (session 10 s, heartbeat 1 s), for trios whose tests stop
/// no gateway: on a loaded machine a gateway starved of CPU for 3 s would lose a short
/// lease and stop in the middle of a test, and a first heartbeat not answered within a
/// 300 ms interval fails a gateway's start. Pass as `extra` to [`Trio::start`].
pub const DEFAULT_LEASE: &[(&str, &str)] = &[
    ("IGGY_KAFKA_CLUSTER_SESSION_TIMEOUT_MS", "10000"),
    ("IGGY_KAFKA_CLUSTER_HEARTBEAT_INTERVAL_MS", "1000"),
];
/// How long the three may take to see one another after the last one started.
pub const LIVE_TIMEOUT: Duration = Duration::from_secs(15);

/// One request to `addr` at `version`; an I/O error is returned, an undecodable answer
/// panics.
pub fn try_call(
    addr: SocketAddr,
    version: i16,
    body: RequestBody,
) -> std::io::Result<ResponseBody> {
    let key = body.api_key();
    let header = RequestHeader {
        request_api_key: key.as_i16(),
        request_api_version: version,
        correlation_id: 9,
        client_id: Some(ByteString::from_static("cluster-test")),
        ..Default::default()
    };
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    s.write_all(&encode_request(&header, &body).unwrap())?;
    let mut size = [0u8; 4];
    s.read_exact(&mut size)?;
    let mut raw = vec![0u8; usize::try_from(u32::from_be_bytes(size)).unwrap()];
    s.read_exact(&mut raw)?;
    Ok(decode_response(key, version, &Bytes::from(raw)).unwrap().1)
}

/// [`try_call`], panicking on an I/O error too.
pub fn call(addr: SocketAddr, version: i16, body: RequestBody) -> ResponseBody {
    try_call(addr, version, body).unwrap_or_else(|e| panic!("request to {addr}: {e}"))
}

/// Metadata v12 for `topic` (not auto-created); an I/O error is returned.
pub fn try_metadata(addr: SocketAddr, topic: &str) -> std::io::Result<MetadataResponse> {
    let req = MetadataRequest {
        topics: Some(vec![MetadataRequestTopic {
            name: Some(ByteString::from(topic.to_owned())),
            ..Default::default()
        }]),
        allow_auto_topic_creation: false,
        ..Default::default()
    };
    match try_call(addr, 12, req.into())? {
        ResponseBody::Metadata(m) => Ok(m),
        other => panic!("not metadata: {other:?}"),
    }
}

/// [`try_metadata`], panicking on an I/O error.
pub fn metadata(addr: SocketAddr, topic: &str) -> MetadataResponse {
    try_metadata(addr, topic).unwrap_or_else(|e| panic!("Metadata from {addr}: {e}"))
}

/// The node ids Metadata lists, in its order.
pub fn broker_ids(m: &MetadataResponse) -> Vec<i32> {
    m.brokers.iter().map(|b| b.node_id).collect()
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

/// The settings of one gateway in a broker list: the bridge to `iggy`, its node id (also
/// its instance id, so producer ids differ), the list, the trio's lease timings and no
/// initial rebalance delay.
pub fn cluster_env(iggy: &IggyServer, node_id: i32, brokers: &str) -> Vec<(&'static str, String)> {
    let mut env = bridge_env(iggy);
    env.extend([
        ("IGGY_KAFKA_NODE_ID", node_id.to_string()),
        ("IGGY_KAFKA_INSTANCE_ID", node_id.to_string()),
        ("IGGY_KAFKA_BROKERS", brokers.to_owned()),
        (
            "IGGY_KAFKA_CLUSTER_SESSION_TIMEOUT_MS",
            SESSION_TIMEOUT_MS.to_string(),
        ),
        (
            "IGGY_KAFKA_CLUSTER_HEARTBEAT_INTERVAL_MS",
            HEARTBEAT_INTERVAL_MS.to_string(),
        ),
        ("IGGY_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS", "0".into()),
    ]);
    env
}

/// `1@host:port,2@...` for the addresses, node ids from 1 in order.
pub fn brokers_list(listed: &[SocketAddr]) -> String {
    listed
        .iter()
        .enumerate()
        .map(|(i, a)| format!("{}@{a}", i + 1))
        .collect::<Vec<_>>()
        .join(",")
}

/// How one gateway of a trio listens.
pub struct Node {
    /// Its listener settings (`IGGY_KAFKA_BIND_ADDR`, or `IGGY_KAFKA_LISTENERS` and what
    /// the listeners need).
    pub env: Vec<(&'static str, String)>,
    /// The address `IGGY_KAFKA_BROKERS` names for it; also `Gateway::addr`, so it is the
    /// bootstrap address clients get.
    pub listed: SocketAddr,
    /// Every address it must accept on before it counts as started.
    pub accepts: Vec<SocketAddr>,
    /// A PLAINTEXT address of it for Metadata probes.
    pub probe: SocketAddr,
}

impl Node {
    /// One PLAINTEXT listener on a free loopback port.
    pub fn plaintext() -> Node {
        let addr = SocketAddr::from(([127, 0, 0, 1], test_support::free_port()));
        Node {
            env: vec![("IGGY_KAFKA_BIND_ADDR", addr.to_string())],
            listed: addr,
            accepts: vec![addr],
            probe: addr,
        }
    }
}

/// Three running gateways (node ids 1, 2, 3) on one Iggy server.
pub struct Trio {
    /// Declared first: the gateways stop before the server does.
    pub gateways: Vec<Gateway>,
    /// Each gateway's PLAINTEXT probe address.
    pub probes: Vec<SocketAddr>,
    /// Each gateway's HTTP endpoint (`/ready`).
    pub http: Vec<SocketAddr>,
    pub iggy: IggyServer,
}

impl Trio {
    /// Three gateways with one PLAINTEXT listener each, and `extra` settings on all (they
    /// win over the trio's own, such as the lease timings).
    pub fn start(iggy: IggyServer, extra: &[(&str, &str)]) -> Trio {
        Trio::start_nodes(iggy, (0..3).map(|_| Node::plaintext()).collect(), extra)
    }

    /// Gateways listening as `nodes` say (node ids from 1 in order), with `extra` settings
    /// on all; started one after the other, each once the previous accepts on all its addresses.
    pub fn start_nodes(iggy: IggyServer, nodes: Vec<Node>, extra: &[(&str, &str)]) -> Trio {
        let listed: Vec<SocketAddr> = nodes.iter().map(|n| n.listed).collect();
        let brokers = brokers_list(&listed);
        let mut gateways = Vec::with_capacity(nodes.len());
        let http: Vec<SocketAddr> = nodes
            .iter()
            .map(|_| SocketAddr::from(([127, 0, 0, 1], test_support::free_port())))
            .collect();
        for (i, node) in nodes.iter().enumerate() {
            let node_id = i32::try_from(i).unwrap() + 1;
            let mut cluster = cluster_env(&iggy, node_id, &brokers);
            cluster.push(("IGGY_KAFKA_METRICS_ADDR", http[i].to_string()));
            let mut env: Vec<(&str, &str)> = cluster
                .iter()
                .chain(&node.env)
                .map(|(k, v)| (*k, v.as_str()))
                .collect();
            env.extend_from_slice(extra);
            // One after the other, as an operator rolls them out.
            let mut gateway = Gateway::spawn(&env, false);
            for addr in &node.accepts {
                gateway.wait_for(STARTUP_TIMEOUT, &format!("accept on {addr}"), |_| {
                    TcpStream::connect_timeout(addr, Duration::from_millis(500)).is_ok()
                });
            }
            gateway.addr = node.listed;
            gateways.push(gateway);
        }
        Trio {
            gateways,
            probes: nodes.iter().map(|n| n.probe).collect(),
            http,
            iggy,
        }
    }

    /// Waits until every gateway lists all of them in Metadata; returns how long that took.
    /// A probe that fails (a connection closed under it) counts as not yet; a gateway that
    /// exits, or no agreement within [`LIVE_TIMEOUT`], fails with every gateway's log.
    pub fn wait_live(&mut self) -> Duration {
        let all: Vec<i32> = (1..=i32::try_from(self.gateways.len()).unwrap()).collect();
        let start = Instant::now();
        loop {
            let last = self
                .probes
                .iter()
                .map(|p| try_metadata(*p, "trio-live-probe").map(|m| broker_ids(&m)))
                .map(|r| r.map_err(|e| e.to_string()))
                .collect::<Vec<_>>();
            if last.iter().all(|r| r.as_ref().is_ok_and(|ids| *ids == all))
                && self
                    .http
                    .iter()
                    .all(|a| http_status(*a, "/ready") == Some(200))
            {
                return start.elapsed();
            }
            let exited = self.gateways.iter_mut().any(|g| !g.is_running());
            if exited || start.elapsed() > LIVE_TIMEOUT {
                let logs: Vec<String> = self.gateways.iter().map(|g| g.output(60)).collect();
                panic!(
                    "the gateways did not all list one another within {LIVE_TIMEOUT:?} \
                     (a gateway exited: {exited}); last probes {last:?}\n{}",
                    logs.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The gateways, for `run_against_all`.
    pub fn refs(&self) -> Vec<&Gateway> {
        self.gateways.iter().collect()
    }
}

/// The status of one HTTP GET, `None` when the endpoint does not answer.
pub fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).ok()?;
    raw.split(' ').nth(1)?.parse().ok()
}
