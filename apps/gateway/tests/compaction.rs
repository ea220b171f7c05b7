//! Compaction on the embedded store seen by a real client: confluent-kafka produces keyed
//! values and tombstones to a `cleanup.policy=compact` topic, the gateway's cleaner runs
//! every 200 ms, and a consumer reading from the beginning sees the latest value of each
//! key at its original offset (see `tests/clients/compaction/confluent_compaction.py`).
//! The cleaner's counters on `/metrics` moved by what it removed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;
use support::{Backend, Client, Gateway, require, run_against, topic_prefix};

/// The `/metrics` text of the gateway whose metrics listener is `addr`.
fn metrics_text(addr: SocketAddr) -> String {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    text
}

/// The value of the unlabelled sample `name`.
fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no sample {name} in:\n{text}"))
}

#[test]
fn confluent_consumer_sees_the_latest_value_of_each_key() {
    let client = Client::Python {
        module: "confluent_kafka",
    };
    let name = "compaction_confluent";
    if !require(name, client) {
        return;
    }
    let metrics = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap();
    let metrics_addr = metrics.to_string();
    let Some(gateway) = Gateway::start_on(
        Backend::Memory,
        name,
        &[
            ("IGGY_KAFKA_METRICS_ADDR", &metrics_addr),
            ("IGGY_KAFKA_LOG_CLEANER_BACKOFF_MS", "200"),
        ],
    ) else {
        return;
    };
    let before = metrics_text(metrics);
    assert_eq!(
        sample(&before, "kafka_gateway_log_cleaner_records_removed_total"),
        0.0
    );
    run_against(
        &gateway,
        name,
        client,
        "tests/clients/compaction/confluent_compaction.py",
        &[],
        &topic_prefix(name),
        Duration::from_secs(120),
    );
    let after = metrics_text(metrics);
    // 50 values of 10 keys: the 8 latest of k2..k9 stay; k0 and k1 end in tombstones.
    assert_eq!(
        sample(&after, "kafka_gateway_log_cleaner_records_removed_total"),
        42.0,
        "{after}"
    );
    assert!(sample(&after, "kafka_gateway_log_cleaner_passes_total") >= 1.0);
    assert!(sample(&after, "kafka_gateway_log_cleaner_bytes_cleaned_total") > 0.0);
    assert!(
        after.contains("kafka_gateway_log_cleaner_dirty_ratio{topic=\""),
        "{after}"
    );
}
