//! Compaction on Iggy through the gateway: a confluent-kafka producer and consumer see a
//! compacted topic's latest record per key at the offsets they were produced at, after
//! the bridge's log cleaner (run every 200 ms here) has compacted it; and the embedded
//! store's client check passes on Iggy too.
//!
//! Needs `IGGY_SERVER_BIN` and confluent-kafka from `scripts/install-clients.sh`; prints
//! `SKIPPED:` without them (a missing client fails when `KAFKA_CLIENTS_REQUIRED=1`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;
use support::{Backend, Client, run_script_on};

#[test]
fn a_kafka_consumer_sees_a_topic_compacted_on_iggy() {
    run_script_on(
        Backend::Iggy,
        "compaction on Iggy",
        Client::Python {
            module: "confluent_kafka",
        },
        "tests/clients/compaction/bridge_compaction.py",
        &[("IGGY_KAFKA_LOG_CLEANER_BACKOFF_MS", "200")],
        Duration::from_secs(240),
    );
}

/// The embedded store's client check (`tests/compaction.rs`: keyed rounds, tombstones, a
/// last record) on Iggy: the same view through the bridge's cleaner.
#[test]
fn the_embedded_store_compaction_script_passes_on_iggy() {
    run_script_on(
        Backend::Iggy,
        "compaction script on Iggy",
        Client::Python {
            module: "confluent_kafka",
        },
        "tests/clients/compaction/confluent_compaction.py",
        &[("IGGY_KAFKA_LOG_CLEANER_BACKOFF_MS", "200")],
        Duration::from_secs(240),
    );
}
