//! Topic settings honoured on produce and fetch, seen by a real client, on both stores.
//!
//! `tests/clients/topics/topic_behaviour_confluent.py` (confluent-kafka) creates topics
//! with `compression.type` (each codec), `message.timestamp.type=LogAppendTime` and
//! `cleanup.policy=compact`, produces with another codec and reads the records back
//! identical, sees LOG_APPEND_TIME within its produce window, a keyless record refused
//! with INVALID_RECORD and a timestamp two hours ahead refused with INVALID_TIMESTAMP
//! (see its header). Then this test fetches each codec topic raw (Fetch v12) and checks
//! that every batch the gateway returns carries the topic's codec, not the producer's.
//! `topic_behaviour_kafka_python.py` checks the same with kafka-python (one codec), on
//! the same gateway. The Iggy variant needs `IGGY_SERVER_BIN` (else `SKIPPED:`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use bytes::Bytes;
use kafka_protocol::api::{decode_response, encode_request};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
use kafka_protocol::messages::request_header::RequestHeader;
use kafka_protocol::{ApiKey, ByteString, ResponseBody};
use kafka_records::{Compression, DecodeLimits, decode_batches};
use std::io::Write;
use std::time::Duration;
use support::attack::{connect, read_frame};
use support::{Backend, Client, Gateway};

const CLIENT: Client = Client::Python {
    module: "confluent_kafka",
};
const SCRIPT: &str = "tests/clients/topics/topic_behaviour_confluent.py";
const KAFKA_PYTHON: Client = Client::Python { module: "kafka" };
const KAFKA_PYTHON_SCRIPT: &str = "tests/clients/topics/topic_behaviour_kafka_python.py";
const TIMEOUT: Duration = Duration::from_secs(180);

/// The codecs of the batches of `topic`/0 from offset 0, by a raw Fetch v12.
fn fetched_codecs(gw: &Gateway, topic: &str) -> Vec<Compression> {
    let header = RequestHeader {
        request_api_key: ApiKey::Fetch.as_i16(),
        request_api_version: 12,
        correlation_id: 3,
        client_id: Some(ByteString::from_static("topic-behaviour")),
        ..Default::default()
    };
    let body = FetchRequest {
        replica_id: -1,
        max_wait_ms: 100,
        min_bytes: 1,
        max_bytes: 16 << 20,
        topics: vec![FetchTopic {
            topic: ByteString::from(topic.to_owned()),
            partitions: vec![FetchPartition {
                partition: 0,
                fetch_offset: 0,
                partition_max_bytes: 16 << 20,
                current_leader_epoch: -1,
                last_fetched_epoch: -1,
                log_start_offset: -1,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let mut s = connect(gw.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(&encode_request(&header, &body.into()).unwrap())
        .unwrap();
    let frame = read_frame(&mut s, 64 << 20).expect("a Fetch answer");
    let (_, body) = decode_response(ApiKey::Fetch, 12, &Bytes::from(frame)).unwrap();
    let ResponseBody::Fetch(r) = body else {
        panic!("not a Fetch answer")
    };
    let p = &r.responses[0].partitions[0];
    assert_eq!(p.error_code, 0, "Fetch {topic}: {p:?}");
    let records = p.records.as_ref().map(|r| r.to_bytes()).unwrap_or_default();
    let seq = decode_batches(&records, &DecodeLimits::default()).unwrap();
    seq.batches.iter().map(|b| b.compression()).collect()
}

fn run(backend: Backend, name: &str) {
    if !support::require(name, CLIENT) {
        return;
    }
    let Some(gw) = Gateway::start_on(backend, name, &[]) else {
        return;
    };
    let prefix = support::topic_prefix(name);
    support::run_against(&gw, name, CLIENT, SCRIPT, &[], &prefix, TIMEOUT);
    if support::require("kafka-python", KAFKA_PYTHON) {
        support::run_against(
            &gw,
            name,
            KAFKA_PYTHON,
            KAFKA_PYTHON_SCRIPT,
            &[],
            &prefix,
            TIMEOUT,
        );
        let codecs = fetched_codecs(&gw, &format!("{prefix}-kp-codec-zstd"));
        assert!(
            !codecs.is_empty() && codecs.iter().all(|c| *c == Compression::Zstd),
            "kafka-python's gzip batches fetched as {codecs:?}"
        );
    }
    for (codec, want) in [
        ("gzip", Compression::Gzip),
        ("snappy", Compression::Snappy),
        ("lz4", Compression::Lz4),
        ("zstd", Compression::Zstd),
        ("uncompressed", Compression::None),
    ] {
        let topic = format!("{prefix}-codec-{codec}");
        let codecs = fetched_codecs(&gw, &topic);
        assert!(!codecs.is_empty(), "{topic}: no batch fetched");
        assert!(
            codecs.iter().all(|c| *c == want),
            "{topic}: fetched batches with {codecs:?}, want all {want:?}"
        );
    }
}

#[test]
fn confluent_kafka_topic_settings() {
    run(Backend::Memory, "topic-behaviour-confluent");
}

#[test]
fn confluent_kafka_topic_settings_on_iggy() {
    run(Backend::Iggy, "topic-behaviour-confluent-iggy");
}
