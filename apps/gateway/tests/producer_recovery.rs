//! Idempotent producer state rebuilt from Iggy: a gateway that did not see a producer's
//! batches (here: the gateway restarted; with several gateways: the partition moved to
//! it) reads them back from the partition's tail, so a retried batch is answered with its
//! original offset and stored once. The batches' producer headers come back through the
//! bridge's `kafka.record` framing.
//!
//! Needs `IGGY_SERVER_BIN`; prints `SKIPPED:` without it. Raw Kafka requests over TCP,
//! so the test controls exactly which batch is retried.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use bytes::{Bytes, BytesMut};
use kafka_protocol::api::{decode_response, encode_request};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreateTopicsRequest};
use kafka_protocol::messages::init_producer_id_request::InitProducerIdRequest;
use kafka_protocol::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_protocol::messages::request_header::RequestHeader;
use kafka_protocol::{ByteString, ErrorCode, RequestBody, ResponseBody};
use kafka_records::{BatchOptions, NewRecord, encode_batch};
use std::io::Write;
use support::attack::{connect, read_frame};
use support::{Gateway, IggyServer, bridge_env, iggy_server_bin};

/// One round trip on a fresh connection to `gw`; the decoded response body.
fn ask(gw: &Gateway, version: i16, body: RequestBody) -> ResponseBody {
    let key = body.api_key();
    let header = RequestHeader {
        request_api_key: key.as_i16(),
        request_api_version: version,
        correlation_id: 11,
        client_id: Some(ByteString::from_static("producer-recovery")),
        ..Default::default()
    };
    let mut socket = connect(gw.addr).unwrap();
    socket
        .write_all(&encode_request(&header, &body).unwrap())
        .unwrap();
    let raw = read_frame(&mut socket, 64 << 20).expect("no answer");
    decode_response(key, version, &Bytes::from(raw)).unwrap().1
}

/// Producer `pid` at `epoch` sends `records` records from sequence `seq` to `topic`/0:
/// (error code, base offset).
fn send(gw: &Gateway, topic: &str, pid: i64, epoch: i16, seq: i32, records: i32) -> (i16, i64) {
    send_sized(gw, topic, (pid, epoch, seq), records, 0)
}

/// [`send`] with `pad` more bytes in each record's value.
fn send_sized(
    gw: &Gateway,
    topic: &str,
    (pid, epoch, seq): (i64, i16, i32),
    records: i32,
    pad: usize,
) -> (i16, i64) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let values: Vec<NewRecord> = (seq..seq + records)
        .map(|s| NewRecord {
            timestamp: now,
            key: Some(Bytes::from(format!("key-{s}"))),
            value: Some(Bytes::from(format!(
                "value of record {s}{}",
                "x".repeat(pad)
            ))),
            headers: vec![],
        })
        .collect();
    let mut batch = BytesMut::new();
    let options = BatchOptions {
        producer_id: pid,
        producer_epoch: epoch,
        base_sequence: seq,
        ..BatchOptions::default()
    };
    encode_batch(&options, &values, &mut batch).unwrap();
    let body = ProduceRequest {
        acks: -1,
        timeout_ms: 10_000,
        topic_data: vec![TopicProduceData {
            name: ByteString::from(topic.to_string()),
            partition_data: vec![PartitionProduceData {
                index: 0,
                records: Some(batch.freeze()),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let ResponseBody::Produce(r) = ask(gw, 9, body.into()) else {
        panic!("not a Produce answer")
    };
    let p = &r.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

fn gateway_on(iggy: &IggyServer) -> Gateway {
    let env = bridge_env(iggy);
    let all: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Gateway::start(&all)
}

const NONE: i16 = 0;

fn create(gw: &Gateway, topic: &str) {
    let create = CreateTopicsRequest {
        topics: vec![CreatableTopic {
            name: ByteString::from(topic.to_string()),
            num_partitions: 1,
            replication_factor: 1,
            ..Default::default()
        }],
        timeout_ms: 10_000,
        ..Default::default()
    };
    let ResponseBody::CreateTopics(r) = ask(gw, 5, create.into()) else {
        panic!("not a CreateTopics answer")
    };
    assert_eq!(r.topics[0].error_code, NONE, "{r:?}");
}

#[test]
fn a_retry_after_a_gateway_restart_is_stored_once() {
    let Some(bin) = iggy_server_bin("producer recovery") else {
        return;
    };
    let iggy = IggyServer::start(&bin);
    let topic = support::topic_prefix("recovery");
    let (pid, epoch) = {
        let first = gateway_on(&iggy);
        create(&first, &topic);
        let init = InitProducerIdRequest {
            transactional_id: None,
            transaction_timeout_ms: -1,
            producer_id: -1,
            producer_epoch: -1,
            ..Default::default()
        };
        let ResponseBody::InitProducerId(r) = ask(&first, 4, init.into()) else {
            panic!("not an InitProducerId answer")
        };
        assert_eq!(r.error_code, NONE);
        let (pid, epoch) = (r.producer_id, r.producer_epoch);
        assert_eq!(send(&first, &topic, pid, epoch, 0, 3), (NONE, 0));
        assert_eq!(send(&first, &topic, pid, epoch, 3, 2), (NONE, 3));
        (pid, epoch)
        // The gateway is killed here: its producer state is gone.
    };
    let second = gateway_on(&iggy);
    // Both batches retried: duplicates, answered with their offsets, not stored again.
    assert_eq!(send(&second, &topic, pid, epoch, 3, 2), (NONE, 3));
    assert_eq!(send(&second, &topic, pid, epoch, 0, 3), (NONE, 0));
    assert_eq!(
        send(&second, &topic, pid, epoch, 6, 1).0,
        ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER.code()
    );
    assert_eq!(send(&second, &topic, pid, epoch, 5, 1), (NONE, 5));
    // The producer's own epoch bump (librdkafka's, after a timeout) starts at 0.
    assert_eq!(send(&second, &topic, pid, epoch + 1, 0, 1), (NONE, 6));
    assert_eq!(
        send(&second, &topic, pid, epoch, 6, 1).0,
        ErrorCode::INVALID_PRODUCER_EPOCH.code()
    );
}

/// How long a gateway takes to rebuild producer state from a full default window (4 MiB
/// of 100-record batches, 6400 Iggy messages) before answering a retry; printed, not
/// asserted.
#[test]
fn recovering_a_full_window_from_iggy() {
    let Some(bin) = iggy_server_bin("producer recovery of a full window") else {
        return;
    };
    let iggy = IggyServer::start(&bin);
    let topic = support::topic_prefix("recovery-window");
    let batches = 64;
    {
        let first = gateway_on(&iggy);
        create(&first, &topic);
        for i in 0..batches {
            let seq = i * 100;
            let (code, offset) = send_sized(&first, &topic, (7, 0, seq), 100, 600);
            assert_eq!((code, offset), (NONE, i64::from(seq)));
        }
    }
    let second = gateway_on(&iggy);
    let last = (batches - 1) * 100;
    let started = std::time::Instant::now();
    let first_answer = send_sized(&second, &topic, (7, 0, last), 100, 600);
    let recovering = started.elapsed();
    let started = std::time::Instant::now();
    let next = send_sized(&second, &topic, (7, 0, last + 100), 100, 600);
    let recovered = started.elapsed();
    assert_eq!(first_answer, (NONE, i64::from(last)));
    assert_eq!(next, (NONE, i64::from(last + 100)));
    eprintln!(
        "MEASURED: retry answered after recovering {batches} batches: {recovering:?}; next produce: {recovered:?}"
    );
}
