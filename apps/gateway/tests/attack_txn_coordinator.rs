//! Hostile requests to the transaction coordinator of the gateway binary over raw TCP:
//! floods of new transactional ids, AddPartitionsToTxn with huge partition counts,
//! spoofed producer ids and epochs, EndTxn spam, TxnOffsetCommit for groups never added
//! to the transaction.
//!
//! Each test checks the codes a Kafka coordinator would answer, that a victim's
//! transaction is untouched, that the gateway is still running, that its peak resident
//! memory stayed under [`PEAK_RSS_BOUND_KIB`], and that a well-behaved client was
//! answered within [`PROBE_BOUND`] throughout.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use bytes::Bytes;
use kafka_protocol::api::{decode_response, encode_request};
use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnTopic,
};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreateTopicsRequest};
use kafka_protocol::messages::describe_transactions_request::DescribeTransactionsRequest;
use kafka_protocol::messages::describe_transactions_response::TransactionState;
use kafka_protocol::messages::end_txn_request::EndTxnRequest;
use kafka_protocol::messages::init_producer_id_request::InitProducerIdRequest;
use kafka_protocol::messages::offset_fetch_request::{OffsetFetchRequest, OffsetFetchRequestTopic};
use kafka_protocol::messages::request_header::RequestHeader;
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequest, TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::{ApiKey, ByteString, RequestBody, ResponseBody};
use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;
use support::Gateway;
use support::attack::{Prober, connect, peak_rss_bound_kib, peak_rss_kib, read_frame};

/// Peak RSS the gateway may reach during any of these attacks (debug build, embedded
/// store).
const PEAK_RSS_BOUND_KIB: u64 = 256 * 1024;
/// Slowest answer the well-behaved client may get during an attack.
const PROBE_BOUND: Duration = Duration::from_secs(2);
/// Requests written before their answers are read.
const PIPELINE: usize = 100;

const NONE: i16 = 0;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;
const INVALID_REQUEST: i16 = 42;
const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
const INVALID_TXN_STATE: i16 = 48;
const PRODUCER_FENCED: i16 = 90;
const TRANSACTION_ABORTABLE: i16 = 120;

fn bs(s: &str) -> ByteString {
    ByteString::from(s.to_owned())
}

fn request(corr: i32, version: i16, body: &RequestBody) -> Bytes {
    let header = RequestHeader {
        request_api_key: body.api_key().as_i16(),
        request_api_version: version,
        correlation_id: corr,
        client_id: Some(ByteString::from_static("attack-txn")),
        ..Default::default()
    };
    encode_request(&header, body).unwrap()
}

/// Sends every request (`PIPELINE` at a time) and returns the answers in order; `None`
/// where the connection closed.
fn pipelined(
    addr: SocketAddr,
    key: ApiKey,
    version: i16,
    bodies: Vec<RequestBody>,
) -> Vec<Option<ResponseBody>> {
    let mut s = connect(addr).unwrap();
    let mut out = Vec::with_capacity(bodies.len());
    for chunk in bodies.chunks(PIPELINE) {
        let mut buf = Vec::new();
        for (i, b) in chunk.iter().enumerate() {
            buf.extend_from_slice(&request(i32::try_from(i).unwrap(), version, b));
        }
        if s.write_all(&buf).is_err() {
            out.extend(chunk.iter().map(|_| None));
            continue;
        }
        for _ in chunk {
            out.push(
                read_frame(&mut s, 64 << 20)
                    .and_then(|f| decode_response(key, version, &Bytes::from(f)).ok())
                    .map(|(_, b)| b),
            );
        }
    }
    out
}

fn call(addr: SocketAddr, key: ApiKey, version: i16, body: RequestBody) -> ResponseBody {
    pipelined(addr, key, version, vec![body])
        .pop()
        .flatten()
        .expect("no answer")
}

fn unique(name: &str) -> String {
    support::topic_prefix(name)
}

fn create_topic(addr: SocketAddr, name: &str, partitions: i32) {
    let body = CreateTopicsRequest {
        topics: vec![CreatableTopic {
            name: bs(name),
            num_partitions: partitions,
            replication_factor: 1,
            ..Default::default()
        }],
        timeout_ms: 10_000,
        ..Default::default()
    };
    let ResponseBody::CreateTopics(r) = call(addr, ApiKey::CreateTopics, 5, body.into()) else {
        panic!("no CreateTopics answer")
    };
    assert_eq!(r.topics[0].error_code, NONE, "{r:?}");
}

fn init_body(id: &str) -> RequestBody {
    InitProducerIdRequest {
        transactional_id: Some(bs(id)),
        transaction_timeout_ms: 60_000,
        producer_id: -1,
        producer_epoch: -1,
        ..Default::default()
    }
    .into()
}

/// InitProducerId v4 of a new id: (producer id, epoch).
fn init(addr: SocketAddr, id: &str) -> (i64, i16) {
    for _ in 0..100 {
        let ResponseBody::InitProducerId(r) = call(addr, ApiKey::InitProducerId, 4, init_body(id))
        else {
            panic!("no InitProducerId answer")
        };
        if r.error_code == NONE {
            return (r.producer_id, r.producer_epoch);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("InitProducerId of {id} never succeeded");
}

fn add_body(id: &str, pid: i64, epoch: i16, topic: &str, partitions: Vec<i32>) -> RequestBody {
    AddPartitionsToTxnRequest {
        v3_and_below_transactional_id: bs(id),
        v3_and_below_producer_id: pid,
        v3_and_below_producer_epoch: epoch,
        v3_and_below_topics: vec![AddPartitionsToTxnTopic {
            name: bs(topic),
            partitions,
            ..Default::default()
        }],
        ..Default::default()
    }
    .into()
}

/// The partition codes of an AddPartitionsToTxn v3 answer.
fn add_codes(r: &ResponseBody) -> Vec<i16> {
    let ResponseBody::AddPartitionsToTxn(r) = r else {
        panic!("not AddPartitionsToTxn: {r:?}")
    };
    r.results_by_topic_v3_and_below
        .iter()
        .flat_map(|t| {
            t.results_by_partition
                .iter()
                .map(|p| p.partition_error_code)
        })
        .collect()
}

fn end_body(id: &str, pid: i64, epoch: i16, commit: bool) -> RequestBody {
    EndTxnRequest {
        transactional_id: bs(id),
        producer_id: pid,
        producer_epoch: epoch,
        committed: commit,
        ..Default::default()
    }
    .into()
}

fn describe(addr: SocketAddr, id: &str) -> TransactionState {
    let body = DescribeTransactionsRequest {
        transactional_ids: vec![bs(id)],
        ..Default::default()
    };
    let ResponseBody::DescribeTransactions(mut r) =
        call(addr, ApiKey::DescribeTransactions, 0, body.into())
    else {
        panic!("no DescribeTransactions answer")
    };
    r.transaction_states.remove(0)
}

/// A victim with an ongoing transaction on `topic` partition 0: (id, pid, epoch).
fn victim(addr: SocketAddr, topic: &str) -> (String, i64, i16) {
    let id = unique("victim");
    let (pid, epoch) = init(addr, &id);
    let r = call(
        addr,
        ApiKey::AddPartitionsToTxn,
        3,
        add_body(&id, pid, epoch, topic, vec![0]),
    );
    assert_eq!(add_codes(&r), vec![NONE]);
    (id, pid, epoch)
}

fn assert_untouched(addr: SocketAddr, id: &str, pid: i64, epoch: i16) {
    let d = describe(addr, id);
    assert_eq!(d.error_code, NONE);
    assert_eq!(&*d.transaction_state, "Ongoing", "{d:?}");
    assert_eq!((d.producer_id, d.producer_epoch), (pid, epoch));
}

fn histogram(codes: impl IntoIterator<Item = i16>) -> BTreeMap<i16, usize> {
    let mut h = BTreeMap::new();
    for c in codes {
        *h.entry(c).or_insert(0) += 1;
    }
    h
}

fn finish(mut gw: Gateway, prober: Prober) {
    prober.finish().assert_answered_within(PROBE_BOUND, &gw);
    assert!(gw.is_running(), "the gateway died");
    let peak = peak_rss_kib(gw.pid()).unwrap_or(0);
    let bound = peak_rss_bound_kib(&gw, PEAK_RSS_BOUND_KIB);
    assert!(peak <= bound, "peak RSS {peak} KiB over {bound} KiB");
}

#[test]
fn a_flood_of_new_transactional_ids_stops_at_the_bound() {
    const MAX_IDS: usize = 500;
    let Some(gw) = Gateway::attack(
        "attack_txn_coordinator",
        &[("IGGY_KAFKA_TRANSACTION_MAX_TRANSACTIONAL_IDS", "500")],
    ) else {
        return;
    };
    let prober = Prober::start(gw.addr, Duration::from_millis(50));
    let prefix = unique("flood");
    let bodies = (0..3 * MAX_IDS)
        .map(|i| init_body(&format!("{prefix}-{i}")))
        .collect();
    let answers = pipelined(gw.addr, ApiKey::InitProducerId, 4, bodies);
    let codes = histogram(answers.into_iter().map(|a| match a {
        Some(ResponseBody::InitProducerId(r)) => r.error_code,
        other => panic!("{other:?}"),
    }));
    let accepted = codes.get(&NONE).copied().unwrap_or(0);
    assert!(accepted <= MAX_IDS, "{codes:?}");
    assert!(
        codes
            .keys()
            .all(|c| *c == NONE || *c == COORDINATOR_NOT_AVAILABLE),
        "{codes:?}"
    );
    assert!(codes.get(&COORDINATOR_NOT_AVAILABLE).copied().unwrap_or(0) >= 2 * MAX_IDS);
    finish(gw, prober);
}

#[test]
fn add_partitions_with_huge_partition_counts_adds_nothing() {
    let Some(gw) = Gateway::attack(
        "attack_txn_coordinator",
        &[("IGGY_KAFKA_TRANSACTION_MAX_PARTITIONS_PER_TXN", "2")],
    ) else {
        return;
    };
    let topic = unique("huge");
    create_topic(gw.addr, &topic, 4);
    let prober = Prober::start(gw.addr, Duration::from_millis(50));
    let id = unique("huge-id");
    let (pid, epoch) = init(gw.addr, &id);
    // A million partitions (mostly out of range): refused whole or per partition.
    let huge = (0..1_000_000).collect();
    let answer = pipelined(
        gw.addr,
        ApiKey::AddPartitionsToTxn,
        3,
        vec![add_body(&id, pid, epoch, &topic, huge)],
    )
    .pop()
    .flatten();
    if let Some(r) = &answer {
        assert!(add_codes(r).iter().all(|c| *c != NONE));
    }
    // Over the partitions-per-transaction bound: INVALID_REQUEST, nothing added.
    let r = call(
        gw.addr,
        ApiKey::AddPartitionsToTxn,
        3,
        add_body(&id, pid, epoch, &topic, vec![0, 1, 2, 3]),
    );
    assert!(add_codes(&r).iter().all(|c| *c == INVALID_REQUEST), "{r:?}");
    let d = describe(gw.addr, &id);
    assert!(d.topics.is_empty(), "{d:?}");
    finish(gw, prober);
}

#[test]
fn spoofed_producer_ids_and_epochs_do_not_touch_a_transaction() {
    let Some(gw) = Gateway::attack("attack_txn_coordinator", &[]) else {
        return;
    };
    let topic = unique("spoof");
    create_topic(gw.addr, &topic, 2);
    let (id, pid, epoch) = victim(gw.addr, &topic);
    let prober = Prober::start(gw.addr, Duration::from_millis(50));
    let mut bodies = Vec::new();
    for i in 0..1000i64 {
        // Someone else's producer id, then the right id with other epochs.
        bodies.push(add_body(&id, pid ^ (i + 1), epoch, &topic, vec![1]));
        let e = i16::try_from(i % 200).unwrap() - 100;
        if e != epoch {
            bodies.push(add_body(&id, pid, e, &topic, vec![1]));
        }
    }
    let answers = pipelined(gw.addr, ApiKey::AddPartitionsToTxn, 3, bodies);
    let codes = histogram(answers.iter().flat_map(|a| add_codes(a.as_ref().unwrap())));
    assert!(!codes.contains_key(&NONE), "{codes:?}");
    assert!(
        codes.contains_key(&INVALID_PRODUCER_ID_MAPPING),
        "{codes:?}"
    );
    assert!(codes.contains_key(&PRODUCER_FENCED), "{codes:?}");
    // (InitProducerId with the transactional id fences the victim whatever producer id
    // and epoch it names: that is how a new incarnation takes over, as in Kafka; only
    // WRITE on the transactional id guards it.)
    assert_untouched(gw.addr, &id, pid, epoch);
    finish(gw, prober);
}

#[test]
fn end_txn_spam_is_refused_and_ends_nothing() {
    let Some(gw) = Gateway::attack("attack_txn_coordinator", &[]) else {
        return;
    };
    let topic = unique("endspam");
    create_topic(gw.addr, &topic, 1);
    let (id, pid, epoch) = victim(gw.addr, &topic);
    let prober = Prober::start(gw.addr, Duration::from_millis(50));
    let prefix = unique("never");
    let mut bodies = Vec::new();
    for i in 0..5000i64 {
        bodies.push(end_body(&format!("{prefix}-{}", i % 50), i, 0, i % 2 == 0));
        bodies.push(end_body(&id, pid + 1 + i, epoch, true));
        bodies.push(end_body(&id, pid, epoch.wrapping_add(1), false));
    }
    let answers = pipelined(gw.addr, ApiKey::EndTxn, 3, bodies);
    let codes = histogram(answers.into_iter().map(|a| match a {
        Some(ResponseBody::EndTxn(r)) => r.error_code,
        other => panic!("{other:?}"),
    }));
    assert!(!codes.contains_key(&NONE), "{codes:?}");
    assert_untouched(gw.addr, &id, pid, epoch);
    finish(gw, prober);
}

#[test]
fn txn_offset_commits_for_groups_never_added_are_refused_and_not_stored() {
    let Some(gw) = Gateway::attack("attack_txn_coordinator", &[]) else {
        return;
    };
    let topic = unique("offsets");
    create_topic(gw.addr, &topic, 1);
    let (id, pid, epoch) = victim(gw.addr, &topic);
    let prober = Prober::start(gw.addr, Duration::from_millis(50));
    let prefix = unique("group");
    let commit = |group: &str| -> RequestBody {
        TxnOffsetCommitRequest {
            transactional_id: bs(&id),
            group_id: bs(group),
            producer_id: pid,
            producer_epoch: epoch,
            generation_id: -1,
            member_id: bs(""),
            topics: vec![TxnOffsetCommitRequestTopic {
                name: bs(&topic),
                partitions: vec![TxnOffsetCommitRequestPartition {
                    partition_index: 0,
                    committed_offset: 42,
                    committed_leader_epoch: -1,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }
        .into()
    };
    for (version, expected) in [(3, INVALID_TXN_STATE), (4, TRANSACTION_ABORTABLE)] {
        let bodies = (0..1000)
            .map(|i| commit(&format!("{prefix}-{i}")))
            .collect();
        let answers = pipelined(gw.addr, ApiKey::TxnOffsetCommit, version, bodies);
        let codes = histogram(answers.into_iter().map(|a| match a {
            Some(ResponseBody::TxnOffsetCommit(r)) => r.topics[0].partitions[0].error_code,
            other => panic!("{other:?}"),
        }));
        assert_eq!(codes, BTreeMap::from([(expected, 1000)]));
    }
    let fetch = OffsetFetchRequest {
        group_id: bs(&format!("{prefix}-7")),
        topics: Some(vec![OffsetFetchRequestTopic {
            name: bs(&topic),
            partition_indexes: vec![0],
            ..Default::default()
        }]),
        require_stable: true,
        ..Default::default()
    };
    let ResponseBody::OffsetFetch(r) = call(gw.addr, ApiKey::OffsetFetch, 7, fetch.into()) else {
        panic!("no answer")
    };
    let p = &r.topics[0].partitions[0];
    assert_eq!((p.error_code, p.committed_offset), (NONE, -1));
    assert_untouched(gw.addr, &id, pid, epoch);
    finish(gw, prober);
}
