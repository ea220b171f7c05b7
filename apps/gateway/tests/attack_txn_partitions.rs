//! Attacks on the partition side of transactions against the gateway binary over raw
//! TCP (embedded store): control batches written by a client, markers for transactions
//! that are not open, transactional batches never added to a transaction, one producer
//! holding transactions open in many partitions, a partition with many aborted
//! transactions read back with a small fetch, and one transactional producer's batches
//! pipelined on many connections at once, some of them dropped mid-flight.
//!
//! Each test runs while a well-behaved client probes with ApiVersions, then checks that
//! the gateway still runs, answered the probes within [`ANSWER_BOUND`] and stayed under
//! [`RSS_BOUND_KIB`] of peak resident memory (debug build, 2 shared cores).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use bytes::{Bytes, BytesMut};
use kafka_protocol::api::{decode_response, encode_request};
use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnTopic,
};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreateTopicsRequest};
use kafka_protocol::messages::end_txn_request::EndTxnRequest;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
use kafka_protocol::messages::init_producer_id_request::InitProducerIdRequest;
use kafka_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
};
use kafka_protocol::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_protocol::messages::request_header::RequestHeader;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic, WriteTxnMarkersRequest,
};
use kafka_protocol::{ByteString, RequestBody, ResponseBody};
use kafka_records::{BatchOptions, NewRecord, encode_batch};
use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};
use support::Gateway;
use support::attack::{
    Prober, assert_each_batch_landed_once, connect, flood_same, peak_rss_bound_kib, peak_rss_kib,
    read_frame,
};

/// Longest a well-behaved client may wait for an answer during an attack.
const ANSWER_BOUND: Duration = Duration::from_secs(2);
/// Peak resident memory of the gateway during any of these attacks.
const RSS_BOUND_KIB: u64 = 768 * 1024;

const NONE: i16 = 0;
const INVALID_RECORD: i16 = 87;
const INVALID_TXN_STATE: i16 = 48;
const TRANSACTION_ABORTABLE: i16 = 120;
const CONCURRENT_TRANSACTIONS: i16 = 51;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn s(v: &str) -> ByteString {
    ByteString::from(v.to_string())
}

/// `body` at `version` as a request frame.
fn frame(version: i16, body: &RequestBody) -> Bytes {
    let header = RequestHeader {
        request_api_key: body.api_key().as_i16(),
        request_api_version: version,
        correlation_id: 7,
        client_id: Some(ByteString::from_static("attack-txn-partitions")),
        ..Default::default()
    };
    encode_request(&header, body).unwrap()
}

/// Reads the next answer, to a request of `key` at `version`.
fn answer(c: &mut TcpStream, key: kafka_protocol::ApiKey, version: i16) -> ResponseBody {
    let frame = read_frame(c, 256 << 20).expect("an answer");
    decode_response(key, version, &Bytes::from(frame))
        .unwrap()
        .1
}

fn call(c: &mut TcpStream, version: i16, body: RequestBody) -> ResponseBody {
    c.write_all(&frame(version, &body)).unwrap();
    answer(c, body.api_key(), version)
}

/// A topic name no other test or round uses.
fn unique(name: &str) -> String {
    support::topic_prefix(name)
}

fn create_topic(c: &mut TcpStream, name: &str, partitions: i32) {
    let body = CreateTopicsRequest {
        topics: vec![CreatableTopic {
            name: s(name),
            num_partitions: partitions,
            replication_factor: 1,
            ..Default::default()
        }],
        timeout_ms: 10_000,
        ..Default::default()
    };
    let ResponseBody::CreateTopics(r) = call(c, 5, body.into()) else {
        panic!("no CreateTopics answer")
    };
    assert_eq!(r.topics[0].error_code, NONE, "{r:?}");
}

/// A transactional producer: (transactional id, producer id, epoch).
struct Txn {
    id: String,
    pid: i64,
    epoch: i16,
    seq: i32,
}

fn init(c: &mut TcpStream, id: &str) -> Txn {
    for _ in 0..500 {
        let body = InitProducerIdRequest {
            transactional_id: Some(s(id)),
            transaction_timeout_ms: 60_000,
            producer_id: -1,
            producer_epoch: -1,
            ..Default::default()
        };
        let ResponseBody::InitProducerId(r) = call(c, 4, body.into()) else {
            panic!("no InitProducerId answer")
        };
        if r.error_code == NONE {
            return Txn {
                id: id.to_string(),
                pid: r.producer_id,
                epoch: r.producer_epoch,
                seq: 0,
            };
        }
        assert_eq!(r.error_code, CONCURRENT_TRANSACTIONS);
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("InitProducerId never succeeded")
}

/// AddPartitionsToTxn v3, retried while the previous transaction completes; the codes.
fn add(c: &mut TcpStream, t: &Txn, topic: &str, partitions: &[i32]) -> Vec<i16> {
    for _ in 0..500 {
        let body = AddPartitionsToTxnRequest {
            v3_and_below_transactional_id: s(&t.id),
            v3_and_below_producer_id: t.pid,
            v3_and_below_producer_epoch: t.epoch,
            v3_and_below_topics: vec![AddPartitionsToTxnTopic {
                name: s(topic),
                partitions: partitions.to_vec(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let ResponseBody::AddPartitionsToTxn(r) = call(c, 3, body.into()) else {
            panic!("no AddPartitionsToTxn answer")
        };
        let codes: Vec<i16> = r.results_by_topic_v3_and_below[0]
            .results_by_partition
            .iter()
            .map(|p| p.partition_error_code)
            .collect();
        if codes.iter().all(|c| *c == CONCURRENT_TRANSACTIONS) {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        return codes;
    }
    panic!("AddPartitionsToTxn stayed busy")
}

fn end(c: &mut TcpStream, t: &Txn, commit: bool) -> i16 {
    let body = EndTxnRequest {
        transactional_id: s(&t.id),
        producer_id: t.pid,
        producer_epoch: t.epoch,
        committed: commit,
        ..Default::default()
    };
    let ResponseBody::EndTxn(r) = call(c, 3, body.into()) else {
        panic!("no EndTxn answer")
    };
    r.error_code
}

fn batch(options: &BatchOptions, records: &[NewRecord]) -> Bytes {
    let mut out = BytesMut::new();
    encode_batch(options, records, &mut out).unwrap();
    out.freeze()
}

fn value(v: &str) -> NewRecord {
    NewRecord {
        timestamp: now_ms(),
        key: None,
        value: Some(Bytes::from(v.to_string())),
        headers: vec![],
    }
}

fn txn_batch(t: &Txn, values: usize) -> Bytes {
    let records: Vec<NewRecord> = (0..values).map(|i| value(&format!("v{i}"))).collect();
    batch(
        &BatchOptions {
            transactional: true,
            producer_id: t.pid,
            producer_epoch: t.epoch,
            base_sequence: t.seq,
            ..BatchOptions::default()
        },
        &records,
    )
}

/// Produce at `version` with `transactional_id`: per `(partition, records)` the code.
fn produce(
    c: &mut TcpStream,
    version: i16,
    transactional_id: Option<&str>,
    topic: &str,
    parts: Vec<(i32, Bytes)>,
) -> Vec<i16> {
    let body = produce_request(transactional_id, topic, parts);
    let ResponseBody::Produce(r) = call(c, version, body) else {
        panic!("no Produce answer")
    };
    r.responses[0]
        .partition_responses
        .iter()
        .map(|p| p.error_code)
        .collect()
}

/// A Produce request (acks=all) of `(partition, records)` to `topic`.
fn produce_request(
    transactional_id: Option<&str>,
    topic: &str,
    parts: Vec<(i32, Bytes)>,
) -> RequestBody {
    ProduceRequest {
        transactional_id: transactional_id.map(s),
        acks: -1,
        timeout_ms: 10_000,
        topic_data: vec![TopicProduceData {
            name: s(topic),
            partition_data: parts
                .into_iter()
                .map(|(index, records)| PartitionProduceData {
                    index,
                    records: Some(records),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    }
    .into()
}

/// ListOffsets v5 latest of `topic`/`partition` at `isolation`.
fn latest(c: &mut TcpStream, topic: &str, partition: i32, isolation: i8) -> i64 {
    let body = ListOffsetsRequest {
        replica_id: -1,
        isolation_level: isolation,
        topics: vec![ListOffsetsTopic {
            name: s(topic),
            partitions: vec![ListOffsetsPartition {
                partition_index: partition,
                timestamp: -1,
                current_leader_epoch: -1,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let ResponseBody::ListOffsets(r) = call(c, 5, body.into()) else {
        panic!("no ListOffsets answer")
    };
    assert_eq!(r.topics[0].partitions[0].error_code, NONE);
    r.topics[0].partitions[0].offset
}

/// Fetch v11 read_committed of `topic`/0 from offset 0, at most `max_bytes`: the
/// partition's answer (its error code checked).
fn fetch_committed(
    c: &mut TcpStream,
    topic: &str,
    max_bytes: i32,
) -> kafka_protocol::messages::fetch_response::PartitionData {
    let body = FetchRequest {
        replica_id: -1,
        max_wait_ms: 0,
        min_bytes: 1,
        max_bytes,
        isolation_level: 1,
        topics: vec![FetchTopic {
            topic: s(topic),
            partitions: vec![FetchPartition {
                partition: 0,
                fetch_offset: 0,
                partition_max_bytes: max_bytes,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let ResponseBody::Fetch(mut r) = call(c, 11, body.into()) else {
        panic!("no Fetch answer")
    };
    let p = r.responses.swap_remove(0).partitions.swap_remove(0);
    assert_eq!(p.error_code, NONE);
    p
}

fn assert_healthy(gw: &mut Gateway, report: support::attack::ProbeReport) {
    assert!(gw.is_running(), "the gateway died\n{}", gw.output(40));
    report.assert_answered_within(ANSWER_BOUND, gw);
    let peak = peak_rss_kib(gw.pid()).unwrap();
    eprintln!(
        "peak RSS {peak} KiB; probes answered {}, slowest {:?}",
        report.answered, report.max
    );
    let bound = peak_rss_bound_kib(gw, RSS_BOUND_KIB);
    assert!(peak < bound, "peak RSS {peak} KiB over {bound} KiB");
}

#[test]
fn forged_markers_and_unverified_batches_store_nothing() {
    let Some(mut gw) = Gateway::attack("attack_txn_partitions", &[]) else {
        return;
    };
    let mut c = connect(gw.addr).unwrap();
    let topic = unique("forged");
    create_topic(&mut c, &topic, 4);
    let t = init(&mut c, &unique("forger"));
    let prober = Prober::start(gw.addr, Duration::from_millis(20));
    let started = Instant::now();
    // A commit marker written by the client itself, transactional or not, with and
    // without a transactional id: refused as Kafka's log validator refuses it.
    let mut forged = value("");
    // Key: version 0, type 1 (commit); value: version 0, coordinator epoch 9.
    forged.key = Some(Bytes::from_static(&[0, 0, 0, 1]));
    forged.value = Some(Bytes::from_static(&[0, 0, 0, 0, 0, 9]));
    for transactional in [true, false] {
        let control = batch(
            &BatchOptions {
                transactional,
                control: true,
                producer_id: t.pid,
                producer_epoch: t.epoch,
                ..BatchOptions::default()
            },
            std::slice::from_ref(&forged),
        );
        for id in [Some(t.id.as_str()), None] {
            for _ in 0..200 {
                let codes = produce(&mut c, 11, id, &topic, vec![(0, control.clone())]);
                assert!(
                    codes == [INVALID_RECORD] || (id.is_none() && transactional && codes == [53]),
                    "{codes:?}"
                );
            }
        }
    }
    // Transactional batches of a producer that added no partition: refused, by version.
    for i in 0..2_000 {
        let parts: Vec<(i32, Bytes)> = (0..4).map(|p| (p, txn_batch(&t, 1))).collect();
        let version = if i % 2 == 0 { 11 } else { 9 };
        let want = if version >= 11 {
            TRANSACTION_ABORTABLE
        } else {
            INVALID_TXN_STATE
        };
        assert_eq!(
            produce(&mut c, version, Some(&t.id), &topic, parts),
            [want; 4]
        );
    }
    // Markers for transactions that are not open (without authorization, as on a Kafka
    // broker without an authorizer, anyone may send them): nothing is written.
    for pid in 0..2_000i64 {
        let body = WriteTxnMarkersRequest {
            markers: vec![WritableTxnMarker {
                producer_id: t.pid ^ pid,
                producer_epoch: 0,
                transaction_result: pid % 2 == 0,
                coordinator_epoch: i32::MAX,
                topics: vec![WritableTxnMarkerTopic {
                    name: s(&topic),
                    partition_indexes: vec![0, 1, 2, 3],
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let ResponseBody::WriteTxnMarkers(r) = call(&mut c, 1, body.into()) else {
            panic!("no WriteTxnMarkers answer")
        };
        assert!(
            r.markers[0].topics[0]
                .partitions
                .iter()
                .all(|p| p.error_code == NONE)
        );
    }
    eprintln!("attack ran for {:?}", started.elapsed());
    for p in 0..4 {
        assert_eq!(
            latest(&mut c, &topic, p, 0),
            0,
            "partition {p} holds records"
        );
        assert_eq!(latest(&mut c, &topic, p, 1), 0);
    }
    assert_healthy(&mut gw, prober.finish());
}

#[test]
fn one_producer_open_in_many_partitions_and_many_aborts_stay_bounded() {
    let Some(mut gw) = Gateway::attack("attack_txn_partitions", &[]) else {
        return;
    };
    let mut c = connect(gw.addr).unwrap();
    let wide = unique("wide");
    const PARTITIONS: i32 = 1_000;
    create_topic(&mut c, &wide, PARTITIONS);
    let aborts = unique("aborts");
    create_topic(&mut c, &aborts, 1);
    let prober = Prober::start(gw.addr, Duration::from_millis(20));
    // One producer opens a transaction in every partition of the wide topic.
    let mut t = init(&mut c, &unique("wide-producer"));
    let all: Vec<i32> = (0..PARTITIONS).collect();
    assert!(add(&mut c, &t, &wide, &all).iter().all(|c| *c == NONE));
    for chunk in all.chunks(100) {
        let parts: Vec<(i32, Bytes)> = chunk.iter().map(|p| (*p, txn_batch(&t, 1))).collect();
        assert!(
            produce(&mut c, 11, Some(&t.id), &wide, parts)
                .iter()
                .all(|c| *c == NONE)
        );
    }
    t.seq += 1;
    // Every partition's LSO is held at the open transaction.
    for p in [0, PARTITIONS / 2, PARTITIONS - 1] {
        assert_eq!(latest(&mut c, &wide, p, 1), 0);
        assert_eq!(latest(&mut c, &wide, p, 0), 1);
    }
    assert_eq!(end(&mut c, &t, false), NONE);
    // Many aborted transactions in one partition.
    let mut a = init(&mut c, &unique("aborter"));
    const ABORTS: usize = 300;
    for _ in 0..ABORTS {
        assert_eq!(add(&mut c, &a, &aborts, &[0]), [NONE]);
        assert_eq!(
            produce(
                &mut c,
                11,
                Some(&a.id),
                &aborts,
                vec![(0, txn_batch(&a, 2))]
            ),
            [NONE]
        );
        a.seq += 2;
        assert_eq!(end(&mut c, &a, false), NONE);
    }
    // Wait for the markers of the last abort.
    let deadline = Instant::now() + Duration::from_secs(30);
    while latest(&mut c, &aborts, 0, 1) < 3 * ABORTS as i64 {
        assert!(
            Instant::now() < deadline,
            "the last abort's marker never landed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // A small read_committed fetch lists only the aborted transactions it overlaps.
    let p = fetch_committed(&mut c, &aborts, 1);
    let listed = p.aborted_transactions.as_ref().map_or(0, Vec::len);
    assert!(
        (1..=2).contains(&listed),
        "{listed} aborted transactions listed"
    );
    // The wide topic's transaction was aborted: its LSO reached its end.
    let deadline = Instant::now() + Duration::from_secs(30);
    while latest(&mut c, &wide, PARTITIONS - 1, 1) < 2 {
        assert!(Instant::now() < deadline, "the wide abort never completed");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_healthy(&mut gw, prober.finish());
}

/// One transactional producer's batches on one partition, pipelined on eight connections
/// at once (the same 16 batches on each: its requests overlap, and a retry of a batch in
/// flight waits for it), then 16 more from connections that close without reading their
/// answers, so some requests go away with their appends in flight. Each batch lands
/// once, read_committed consumers never reach the open transaction, the abort lists it
/// from its first batch, and the producer goes on after a new InitProducerId.
#[test]
fn one_transactional_producers_pipelined_batches_on_many_connections_land_once() {
    let Some(mut gw) = Gateway::attack("attack_txn_partitions", &[]) else {
        return;
    };
    let mut c = connect(gw.addr).unwrap();
    let topic = unique("pipelined");
    create_topic(&mut c, &topic, 1);
    let mut t = init(&mut c, &unique("pipeliner"));
    assert_eq!(add(&mut c, &t, &topic, &[0]), [NONE]);
    let prober = Prober::start(gw.addr, Duration::from_millis(20));
    const CONNECTIONS: usize = 8;
    const BATCHES: i32 = 16;
    let pipeline = |t: &Txn, first: i32| -> Vec<u8> {
        let mut out = Vec::new();
        for seq in first..first + BATCHES {
            let one = Txn {
                id: t.id.clone(),
                seq,
                ..*t
            };
            let body = produce_request(Some(&t.id), &topic, vec![(0, txn_batch(&one, 1))]);
            out.extend_from_slice(&frame(11, &body));
        }
        out
    };
    let read = |s: &mut TcpStream| -> (i16, i64) {
        let ResponseBody::Produce(r) = answer(s, kafka_protocol::ApiKey::Produce, 11) else {
            panic!("no Produce answer")
        };
        let p = &r.responses[0].partition_responses[0];
        (p.error_code, p.base_offset)
    };
    let flood = |frames: Vec<u8>, read_them: bool| -> Vec<Vec<(i16, i64)>> {
        let answers = if read_them { BATCHES as usize } else { 0 };
        flood_same(gw.addr, CONNECTIONS, &frames, answers, read)
    };
    let answers = flood(pipeline(&t, 0), true);
    assert_each_batch_landed_once(&answers, BATCHES as usize);
    assert_eq!(
        latest(&mut c, &topic, 0, 0),
        i64::from(BATCHES),
        "each once"
    );
    assert_eq!(latest(&mut c, &topic, 0, 1), 0, "the transaction is open");
    flood(pipeline(&t, BATCHES), false);
    std::thread::sleep(Duration::from_millis(500));
    let stored = latest(&mut c, &topic, 0, 0);
    assert!(
        (i64::from(BATCHES)..=2 * i64::from(BATCHES)).contains(&stored),
        "no batch twice: {stored} records for {} batches",
        2 * BATCHES
    );
    assert_eq!(latest(&mut c, &topic, 0, 1), 0, "still open");
    // Aborted: the marker lands after everything stored, and the aborted transaction
    // is listed from its first batch.
    assert_eq!(end(&mut c, &t, false), NONE);
    let deadline = Instant::now() + Duration::from_secs(30);
    while latest(&mut c, &topic, 0, 1) < stored + 1 {
        assert!(Instant::now() < deadline, "the abort marker never landed");
        std::thread::sleep(Duration::from_millis(20));
    }
    let p = fetch_committed(&mut c, &topic, 1 << 20);
    let aborted: Vec<(i64, i64)> = p
        .aborted_transactions
        .iter()
        .flatten()
        .map(|a| (a.producer_id, a.first_offset))
        .collect();
    assert_eq!(aborted, [(t.pid, 0)]);
    // The producer goes on: a new epoch, a committed transaction after the abort.
    t = init(&mut c, &t.id);
    assert_eq!(add(&mut c, &t, &topic, &[0]), [NONE]);
    assert_eq!(
        produce(&mut c, 11, Some(&t.id), &topic, vec![(0, txn_batch(&t, 1))]),
        [NONE]
    );
    assert_eq!(end(&mut c, &t, true), NONE);
    let deadline = Instant::now() + Duration::from_secs(30);
    while latest(&mut c, &topic, 0, 1) < stored + 3 {
        assert!(Instant::now() < deadline, "the commit marker never landed");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_healthy(&mut gw, prober.finish());
}
