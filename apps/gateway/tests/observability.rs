//! The observability endpoint of the gateway binary: `/metrics` scraped and parsed with a
//! Prometheus text parser before and after known real-client traffic, `/health`, and
//! `/ready` following the store (with a real Iggy server: not ready while it is stopped,
//! ready again once it is back).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};
use support::{Backend, Client, Gateway, require, run_against, topic_prefix};

fn free_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// `GET path` over HTTP/1.1: (status, body).
fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    (status, body.to_string())
}

/// Every sample of a scrape, parsed by `prometheus-parse`: name -> [(labels, value)].
/// Histograms are read through their `<name>_count` and `<name>_sum` samples.
struct Scrape(HashMap<String, Vec<Sample>>);

/// A sample's labels and value.
type Sample = (HashMap<String, String>, f64);

impl Scrape {
    fn take(addr: SocketAddr) -> Scrape {
        let (status, body) = get(addr, "/metrics");
        assert_eq!(status, 200, "{body}");
        let lines = body.lines().map(|l| Ok(l.to_string()));
        let parsed = prometheus_parse::Scrape::parse(lines).expect("prometheus text");
        let mut out: HashMap<String, Vec<Sample>> = HashMap::new();
        for s in parsed.samples {
            let labels: HashMap<String, String> = s
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let mut push = |name: String, v: f64| {
                out.entry(name).or_default().push((labels.clone(), v));
            };
            match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => push(s.metric, v),
                // The parser also gives each histogram's `_count` and `_sum` lines as
                // plain samples; those are what the checks read.
                prometheus_parse::Value::Histogram(_) | prometheus_parse::Value::Summary(_) => {}
            }
        }
        Scrape(out)
    }

    /// The sum of `name` over the samples whose labels include `with`.
    fn sum(&self, name: &str, with: &[(&str, &str)]) -> f64 {
        self.0
            .get(name)
            .map(|samples| {
                samples
                    .iter()
                    .filter(|(labels, _)| {
                        with.iter()
                            .all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v))
                    })
                    .map(|(_, v)| *v)
                    .sum()
            })
            .unwrap_or(0.0)
    }

    fn has(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }
}

fn start(backend: Backend, name: &str, metrics: SocketAddr) -> Option<Gateway> {
    let addr = metrics.to_string();
    Gateway::start_on(backend, name, &[("IGGY_KAFKA_METRICS_ADDR", &addr)])
}

fn metrics_after_real_client_traffic(backend: Backend, name: &str) {
    if !require(
        name,
        Client::Python {
            module: "confluent_kafka",
        },
    ) {
        return;
    }
    let http = free_addr();
    let Some(gateway) = start(backend, name, http) else {
        return;
    };
    assert_eq!(get(http, "/health").0, 200);
    let (status, body) = get(http, "/ready");
    assert_eq!(status, 200, "{body}");
    assert_eq!(get(http, "/nope").0, 404);

    let before = Scrape::take(http);
    let prefix = topic_prefix(name);
    run_against(
        &gateway,
        name,
        Client::Python {
            module: "confluent_kafka",
        },
        "tests/clients/groups/confluent_metrics.py",
        &[],
        &prefix,
        Duration::from_secs(120),
    );
    let topic = format!("{prefix}-metrics");
    let group = format!("{prefix}-metrics-group");
    let after = Scrape::take(http);
    let delta = |name: &str, with: &[(&str, &str)]| after.sum(name, with) - before.sum(name, with);

    // Requests by API, and the latency histogram counting the same requests.
    let produce = delta("kafka_gateway_requests_total", &[("api", "Produce")]);
    assert!(produce >= 2.0, "Produce requests counted: {produce}");
    assert_eq!(
        delta(
            "kafka_gateway_request_duration_seconds_count",
            &[("api", "Produce")]
        ),
        produce,
        "one latency observation per Produce request"
    );
    for api in [
        "Fetch",
        "OffsetCommit",
        "JoinGroup",
        "SyncGroup",
        "CreateTopics",
        "Metadata",
    ] {
        assert!(
            delta("kafka_gateway_requests_total", &[("api", api)]) >= 1.0,
            "{api} requests counted"
        );
    }
    // Exactly the one refused CreateTopics.
    assert_eq!(
        delta(
            "kafka_gateway_response_errors_total",
            &[("api", "CreateTopics"), ("error", "TOPIC_ALREADY_EXISTS")]
        ),
        1.0
    );
    // Per-partition records: 30 + 7 and 20 appended; at least the 50 read back.
    let t = topic.as_str();
    assert_eq!(
        after.sum(
            "kafka_gateway_partition_produced_records_total",
            &[("topic", t), ("partition", "0")]
        ),
        37.0
    );
    assert_eq!(
        after.sum(
            "kafka_gateway_partition_produced_records_total",
            &[("topic", t), ("partition", "1")]
        ),
        20.0
    );
    assert!(
        after.sum(
            "kafka_gateway_partition_produced_bytes_total",
            &[("topic", t)]
        ) > 57.0 * 4.0
    );
    let fetched = after.sum(
        "kafka_gateway_partition_fetched_records_total",
        &[("topic", t)],
    );
    assert!(fetched >= 50.0, "fetched records {fetched}");
    // Offsets and the lag gauge: committed 30 and 20, ends 37 and 20.
    let g = group.as_str();
    let lag = |p: &str| {
        after.sum(
            "kafka_gateway_consumer_group_lag",
            &[("group", g), ("topic", t), ("partition", p)],
        )
    };
    assert_eq!((lag("0"), lag("1")), (7.0, 0.0));
    assert_eq!(
        after.sum(
            "kafka_gateway_consumer_group_committed_offset",
            &[("group", g), ("topic", t)]
        ),
        50.0
    );
    assert_eq!(
        after.sum(
            "kafka_gateway_partition_log_end_offset",
            &[("topic", t), ("partition", "0")]
        ),
        37.0
    );
    // Bytes, connections, groups, process.
    assert!(delta("kafka_gateway_received_bytes_total", &[]) > 0.0);
    assert!(delta("kafka_gateway_sent_bytes_total", &[]) > 0.0);
    assert!(delta("kafka_gateway_connections_accepted_total", &[]) >= 3.0);
    assert!(after.sum("kafka_gateway_consumer_group_rebalances_total", &[]) >= 1.0);
    assert!(after.has("kafka_gateway_consumer_groups"));
    assert!(after.sum("kafka_gateway_request_memory_budget_bytes", &[]) > 0.0);
    assert!(after.sum("process_resident_memory_bytes", &[]) > 0.0);
    assert!(after.sum("process_cpu_seconds_total", &[]) > 0.0);
    assert_eq!(after.sum("kafka_gateway_store_up", &[]), 1.0);
}

#[test]
fn metrics_after_real_client_traffic_on_memory() {
    metrics_after_real_client_traffic(Backend::Memory, "metrics");
}

#[test]
fn metrics_after_real_client_traffic_on_iggy() {
    metrics_after_real_client_traffic(Backend::Iggy, "metrics_on_iggy");
}

/// Polls `/ready` until it answers `want` (within `within`).
fn ready_becomes(http: SocketAddr, want: u16, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        let (status, body) = get(http, "/ready");
        if status == want {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "/ready stayed {status} ({body}) instead of {want}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn ready_follows_the_iggy_server() {
    let http = free_addr();
    let Some(mut gateway) = start(Backend::Iggy, "ready_follows_iggy", http) else {
        return;
    };
    ready_becomes(http, 200, Duration::from_secs(10));
    let iggy = gateway
        .iggy_mut()
        .expect("a gateway on Iggy has its server");
    iggy.stop();
    let why = ready_becomes(http, 503, Duration::from_secs(20));
    assert!(why.contains("not ready"), "{why}");
    assert_eq!(get(http, "/health").0, 200, "alive while the store is down");
    gateway.iggy_mut().expect("server").restart();
    ready_becomes(http, 200, Duration::from_secs(60));
}
