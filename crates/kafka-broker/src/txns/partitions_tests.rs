//! The partition side on the embedded store: LSO with appends in flight, marker checks,
//! retried markers, and an index rebuilt from a log holding markers.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use crate::config::BrokerConfig;
use crate::server::Stores;
use crate::store::memory::{MemoryStore, MemoryStoreConfig};
use crate::store::{NewTopic, TopicConfig, ValidBatch};
use bytes::{Bytes, BytesMut};
use kafka_records::{BatchOptions, NewRecord, encode_batch};
use std::sync::Arc;

const PID: i64 = 42;

async fn broker() -> Broker {
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig::default()));
    store
        .create_topic(
            NewTopic {
                name: "t".into(),
                partitions: 1,
                config: TopicConfig::default(),
            },
            false,
        )
        .await
        .unwrap();
    let stores = Stores {
        log: store.clone(),
        offsets: store,
    };
    Broker::new(
        BrokerConfig::default(),
        stores,
        crate::pipeline::Pipeline::new(vec![]),
    )
}

fn batch(producer_id: i64, epoch: i16, seq: i32, transactional: bool, n: usize) -> ValidBatch {
    batch_at(producer_id, epoch, seq, transactional, n, 1)
}

fn batch_at(
    producer_id: i64,
    epoch: i16,
    seq: i32,
    transactional: bool,
    n: usize,
    timestamp: i64,
) -> ValidBatch {
    let records: Vec<NewRecord> = (0..n)
        .map(|i| NewRecord {
            timestamp,
            key: None,
            value: Some(Bytes::from(format!("v{i}"))),
            headers: Vec::new(),
        })
        .collect();
    let mut out = BytesMut::new();
    encode_batch(
        &BatchOptions {
            transactional,
            producer_id,
            producer_epoch: epoch,
            base_sequence: seq,
            ..BatchOptions::default()
        },
        &records,
        &mut out,
    )
    .unwrap();
    ValidBatch::from_bytes(&out.freeze(), &DecodeLimits::default()).unwrap()
}

fn marker(producer_id: i64, epoch: i16, coordinator_epoch: i32, commit: bool) -> MarkerWrite {
    MarkerWrite {
        topic: "t".into(),
        partition: 0,
        producer_id,
        producer_epoch: epoch,
        coordinator_epoch,
        commit,
    }
}

/// Appends a transactional batch the way the produce handler does (verification guard,
/// begin, append, observe); returns its base offset.
async fn txn_append(b: &Broker, producer_id: i64, epoch: i16, n: usize) -> Result<i64, ErrorCode> {
    let parts = &b.txn_partitions;
    let log = b.stores.log.as_ref();
    parts
        .ensure_recovered(log, b.membership.as_ref(), "t", 0)
        .await?;
    log.mark_transactional("t").await.unwrap();
    let guard = parts
        .needs_verification("t", 0, producer_id)
        .then(|| parts.set_guard("t", 0, producer_id));
    let opens = parts.begin_append("t", 0, producer_id, epoch, guard)?;
    let out = log
        .append("t", 0, vec![batch(producer_id, epoch, 0, true, n)], 0)
        .await
        .unwrap();
    b.producers.record(
        "t",
        0,
        crate::producers::BatchId {
            producer_id,
            epoch,
            first_seq: 0,
            records: n as i32,
        },
        out.base_offset,
        0,
    );
    parts.appended(
        "t",
        0,
        &BatchSummary {
            base_offset: out.base_offset,
            last_offset: out.base_offset + n as i64 - 1,
            producer_id,
            producer_epoch: epoch,
            transactional: true,
            marker: None,
        },
        opens,
    );
    Ok(out.base_offset)
}

async fn plain_append(b: &Broker, n: usize) -> i64 {
    b.stores
        .log
        .append("t", 0, vec![batch(-1, -1, -1, false, n)], 0)
        .await
        .unwrap()
        .base_offset
}

async fn hw(b: &Broker) -> i64 {
    b.stores
        .log
        .watermarks("t", 0)
        .await
        .unwrap()
        .high_watermark
}

#[tokio::test]
async fn the_lso_stops_at_open_and_pending_transactions() {
    let b = broker().await;
    let parts = &b.txn_partitions;
    plain_append(&b, 2).await;
    parts.ensure_ready(&b, "t", 0).await.unwrap();
    assert_eq!(parts.lso("t", 0, hw(&b).await), 2);
    // Opening: counted as pending before the append lands.
    let guard = parts.set_guard("t", 0, PID);
    parts.begin_append("t", 0, PID, 0, Some(guard)).unwrap();
    plain_append(&b, 3).await; // another producer's data lands meanwhile
    assert_eq!(parts.lso("t", 0, hw(&b).await), 2);
    // An unknown outcome keeps the bound until the index is rebuilt from the log.
    parts.append_unknown("t", 0);
    assert_eq!(parts.lso("t", 0, hw(&b).await), 2);
    parts.ensure_ready(&b, "t", 0).await.unwrap();
    assert_eq!(parts.lso("t", 0, hw(&b).await), 5, "nothing of PID landed");
    let first = txn_append(&b, PID, 0, 2).await.unwrap();
    assert_eq!(first, 5);
    plain_append(&b, 1).await;
    assert_eq!(parts.lso("t", 0, hw(&b).await), 5);
    // A second batch of the same transaction needs no verification.
    assert!(!parts.needs_verification("t", 0, PID));
    txn_append(&b, PID, 0, 1).await.unwrap();
    assert_eq!(
        b.txn_partitions
            .write_marker(&b, &marker(PID, 0, 0, true))
            .await,
        ErrorCode::NONE
    );
    assert_eq!(parts.lso("t", 0, hw(&b).await), hw(&b).await);
    assert!(parts.aborted("t", 0, 0, i64::MAX).is_empty());
}

/// A summary of a transactional data batch of `PID` at `base`..=`last`.
fn data(base: i64, last: i64) -> BatchSummary {
    BatchSummary {
        base_offset: base,
        last_offset: last,
        producer_id: PID,
        producer_epoch: 0,
        transactional: true,
        marker: None,
    }
}

#[tokio::test]
async fn a_later_batch_confirmed_before_the_opener_keeps_the_transaction_unstable() {
    let b = broker().await;
    let parts = &b.txn_partitions;
    plain_append(&b, 2).await;
    parts.ensure_ready(&b, "t", 0).await.unwrap();
    // Three pipelined batches of one transaction, begun in order: only the first opens.
    let guard = parts.set_guard("t", 0, PID);
    assert_eq!(parts.begin_append("t", 0, PID, 0, Some(guard)), Ok(true));
    assert_eq!(parts.begin_append("t", 0, PID, 0, Some(guard)), Ok(false));
    assert_eq!(parts.begin_append("t", 0, PID, 0, Some(guard)), Ok(false));
    // All three are in the store (offsets 2-3, 4-5, 6); the third is confirmed first,
    // then the second: the opener's records at 2-3 are readable in the store, so the
    // LSO must stay at or below 2.
    for _ in 0..2 {
        b.stores
            .log
            .append("t", 0, vec![batch(PID, 0, 0, true, 2)], 0)
            .await
            .unwrap();
    }
    b.stores
        .log
        .append("t", 0, vec![batch(PID, 0, 0, true, 1)], 0)
        .await
        .unwrap();
    let hw = hw(&b).await;
    parts.appended("t", 0, &data(6, 6), false);
    assert_eq!(parts.lso("t", 0, hw), 2);
    parts.appended("t", 0, &data(4, 5), false);
    assert_eq!(parts.lso("t", 0, hw), 2);
    // The opener opens the transaction at its own offset.
    parts.appended("t", 0, &data(2, 3), true);
    assert_eq!(parts.lso("t", 0, hw), 2);
    assert_eq!(
        parts.write_marker(&b, &marker(PID, 0, 0, true)).await,
        ErrorCode::NONE
    );
    assert_eq!(parts.lso("t", 0, hw + 1), hw + 1);
}

#[tokio::test]
async fn an_opener_dropped_before_its_outcome_has_the_index_rebuilt_from_the_log() {
    let b = broker().await;
    let parts = &b.txn_partitions;
    plain_append(&b, 2).await;
    parts.ensure_ready(&b, "t", 0).await.unwrap();
    b.stores.log.mark_transactional("t").await.unwrap();
    let guard = parts.set_guard("t", 0, PID);
    let opener = TxnTicket::new(
        parts,
        "t",
        0,
        parts.begin_append("t", 0, PID, 0, Some(guard)).unwrap(),
    );
    let later = TxnTicket::new(
        parts,
        "t",
        0,
        parts.begin_append("t", 0, PID, 0, Some(guard)).unwrap(),
    );
    for n in [2, 1] {
        b.stores
            .log
            .append("t", 0, vec![batch(PID, 0, 0, true, n)], 0)
            .await
            .unwrap();
    }
    let hw = hw(&b).await;
    // The opener's request goes away; the later batch is confirmed.
    drop(opener);
    later.landed(&data(4, 4));
    assert_eq!(parts.lso("t", 0, hw), 2);
    // Read from the log: the transaction opens at the opener's offset.
    parts.ensure_ready(&b, "t", 0).await.unwrap();
    assert_eq!(parts.lso("t", 0, hw), 2);
    assert_eq!(
        parts.write_marker(&b, &marker(PID, 0, 0, false)).await,
        ErrorCode::NONE
    );
    let aborted = parts.aborted("t", 0, 0, i64::MAX);
    assert_eq!(aborted.len(), 1);
    assert_eq!((aborted[0].first_offset, aborted[0].last_offset), (2, 5));
}

#[tokio::test]
async fn opening_a_transaction_needs_a_current_guard() {
    let b = broker().await;
    let parts = &b.txn_partitions;
    parts.ensure_ready(&b, "t", 0).await.unwrap();
    assert_eq!(
        parts.begin_append("t", 0, PID, 0, None),
        Err(ErrorCode::INVALID_TXN_STATE)
    );
    // Verifications before the transaction opens share one guard (the same batch
    // verified on two connections).
    let first = parts.set_guard("t", 0, PID);
    let newer = parts.set_guard("t", 0, PID);
    assert_eq!(first, newer);
    // A guard from before a marker is stale after it.
    let stale = parts.set_guard("t", 0, 7);
    txn_append(&b, 7, 0, 1).await.unwrap();
    assert_eq!(
        parts.write_marker(&b, &marker(7, 0, 0, false)).await,
        ErrorCode::NONE
    );
    assert_eq!(
        parts.begin_append("t", 0, 7, 0, Some(stale)),
        Err(ErrorCode::INVALID_TXN_STATE)
    );
    // The next transaction's verification does not revive it.
    let next = parts.set_guard("t", 0, 7);
    assert_ne!(next, stale);
    assert_eq!(
        parts.begin_append("t", 0, 7, 0, Some(stale)),
        Err(ErrorCode::INVALID_TXN_STATE)
    );
    // Nor does a marker that finds nothing open keep one.
    let unused = parts.set_guard("t", 0, 99);
    assert_eq!(
        parts.write_marker(&b, &marker(99, 0, 0, true)).await,
        ErrorCode::NONE
    );
    assert_ne!(parts.set_guard("t", 0, 99), unused);
    parts.begin_append("t", 0, PID, 0, Some(newer)).unwrap();
}

#[tokio::test]
async fn markers_check_epochs_and_retries_write_nothing() {
    let b = broker().await;
    let parts = &b.txn_partitions;
    txn_append(&b, PID, 3, 2).await.unwrap();
    let end = hw(&b).await;
    // Stale producer epoch.
    assert_eq!(
        parts.write_marker(&b, &marker(PID, 2, 5, false)).await,
        ErrorCode::INVALID_PRODUCER_EPOCH
    );
    assert_eq!(hw(&b).await, end);
    // Abort (fencing bump to epoch 4) from coordinator epoch 5.
    assert_eq!(
        parts.write_marker(&b, &marker(PID, 4, 5, false)).await,
        ErrorCode::NONE
    );
    assert_eq!(hw(&b).await, end + 1);
    let aborted = parts.aborted("t", 0, 0, i64::MAX);
    assert_eq!(aborted.len(), 1);
    assert_eq!((aborted[0].producer_id, aborted[0].first_offset), (PID, 0));
    // Retried: nothing open, nothing written.
    assert_eq!(
        parts.write_marker(&b, &marker(PID, 4, 5, false)).await,
        ErrorCode::NONE
    );
    assert_eq!(hw(&b).await, end + 1);
    // An older coordinator is fenced.
    assert_eq!(
        parts.write_marker(&b, &marker(PID, 4, 4, true)).await,
        ErrorCode::TRANSACTION_COORDINATOR_FENCED
    );
    // The zombie at epoch 3 is refused by the producer state and by the index.
    assert_eq!(
        b.producers.check(
            "t",
            0,
            crate::producers::BatchId {
                producer_id: PID,
                epoch: 3,
                first_seq: 2,
                records: 1
            },
            0
        ),
        Err(ErrorCode::INVALID_PRODUCER_EPOCH)
    );
    let guard = parts.set_guard("t", 0, PID);
    assert_eq!(
        parts.begin_append("t", 0, PID, 3, Some(guard)),
        Err(ErrorCode::INVALID_PRODUCER_EPOCH)
    );
    // A marker for a producer never seen here: NONE, nothing written.
    assert_eq!(
        parts.write_marker(&b, &marker(99, 0, 5, true)).await,
        ErrorCode::NONE
    );
    assert_eq!(hw(&b).await, end + 1);
}

#[tokio::test]
async fn the_index_is_rebuilt_from_a_log_with_markers() {
    let b = broker().await;
    let parts = &b.txn_partitions;
    plain_append(&b, 1).await; // 0
    txn_append(&b, 1, 0, 2).await.unwrap(); // 1-2
    txn_append(&b, 2, 0, 1).await.unwrap(); // 3
    assert_eq!(
        parts.write_marker(&b, &marker(1, 0, 1, false)).await,
        ErrorCode::NONE
    ); // 4
    txn_append(&b, 3, 0, 1).await.unwrap(); // 5
    assert_eq!(
        parts.write_marker(&b, &marker(2, 0, 1, true)).await,
        ErrorCode::NONE
    ); // 6
    let before = (
        parts.lso("t", 0, hw(&b).await),
        parts.aborted("t", 0, 0, i64::MAX),
    );
    assert_eq!(before.0, 5);
    // A fresh gateway on the same store (same view: its own first).
    let fresh = Broker::new(
        BrokerConfig::default(),
        Stores {
            log: b.stores.log.clone(),
            offsets: b.stores.offsets.clone(),
        },
        crate::pipeline::Pipeline::new(vec![]),
    );
    let again = &fresh.txn_partitions;
    assert!(!again.is_ready(fresh.membership.as_ref(), "t", 0));
    again.ensure_ready(&fresh, "t", 0).await.unwrap();
    let after = (
        again.lso("t", 0, hw(&fresh).await),
        again.aborted("t", 0, 0, i64::MAX),
    );
    assert_eq!(before, after);
    assert!(again.stats.rebuild_bytes.load(Ordering::Relaxed) > 0);
    // The rebuilt index fences the old coordinator epoch and closes producer 3.
    assert_eq!(
        again.write_marker(&fresh, &marker(1, 0, 0, true)).await,
        ErrorCode::TRANSACTION_COORDINATOR_FENCED
    );
    assert_eq!(
        again.write_marker(&fresh, &marker(3, 0, 1, true)).await,
        ErrorCode::NONE
    );
    assert_eq!(again.lso("t", 0, hw(&fresh).await), hw(&fresh).await);
    // Producer state rebuilt from the tail also knows the marker's epoch.
    assert_eq!(fresh.producers.epoch("t", 0, 3), Some(0));
}

#[tokio::test]
async fn a_rebuild_past_its_byte_bound_is_refused() {
    let b = broker().await;
    txn_append(&b, PID, 0, 50).await.unwrap();
    let small = TxnPartitions::with_limits(TxnPartitionLimits::new(64));
    assert_eq!(
        small.ensure_ready(&b, "t", 0).await,
        Err(ErrorCode::NOT_LEADER_OR_FOLLOWER)
    );
    assert_eq!(small.stats.rebuild_failures.load(Ordering::Relaxed), 1);
}

#[tokio::test]
async fn partitions_and_guards_are_capped() {
    let b = broker().await;
    let small = TxnPartitions::with_limits(TxnPartitionLimits {
        max_partitions: 1,
        max_guards: 3,
        ..TxnPartitionLimits::new(1 << 20)
    });
    for pid in 0..50 {
        small.set_guard("t", 0, pid);
    }
    assert!(small.len().1 <= 3, "{:?}", small.len());
    small.ensure_ready(&b, "t", 0).await.unwrap();
    assert_eq!(small.len().0, 1);
    small.forget_topic("t");
    assert_eq!(small.len(), (0, 0));
}

/// One request through the whole request path.
async fn call(
    b: &Broker,
    key: kafka_protocol::ApiKey,
    version: i16,
    body: kafka_protocol::RequestBody,
) -> kafka_protocol::ResponseBody {
    use kafka_protocol::api::{decode_response, encode_request};
    let header = kafka_protocol::messages::request_header::RequestHeader {
        request_api_key: key.as_i16(),
        request_api_version: version,
        correlation_id: 1,
        ..Default::default()
    };
    let frame = encode_request(&header, &body).unwrap().slice(4..);
    let peer = "127.0.0.1:1".parse().unwrap();
    let crate::dispatch::Outcome::Respond(r) = crate::dispatch::handle(b, peer, frame).await else {
        panic!("no response")
    };
    decode_response(key, version, &r.to_bytes().slice(4..))
        .unwrap()
        .1
}

/// Fetch v11 of `t`/0 from `offset`: (lso, aborted (pid, first), base offsets returned).
async fn fetch(b: &Broker, offset: i64, isolation: i8) -> (i64, Option<Vec<(i64, i64)>>, Vec<i64>) {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
    let req = FetchRequest {
        replica_id: -1,
        max_wait_ms: 0,
        min_bytes: 1,
        max_bytes: 1 << 20,
        isolation_level: isolation,
        topics: vec![FetchTopic {
            topic: "t".into(),
            partitions: vec![FetchPartition {
                partition: 0,
                fetch_offset: offset,
                partition_max_bytes: 1 << 20,
                ..FetchPartition::default()
            }],
            ..FetchTopic::default()
        }],
        ..FetchRequest::default()
    };
    let kafka_protocol::ResponseBody::Fetch(mut r) =
        call(b, kafka_protocol::ApiKey::Fetch, 11, req.into()).await
    else {
        panic!("not a fetch response")
    };
    let p = r.responses.remove(0).partitions.remove(0);
    assert_eq!(p.error_code, 0);
    let mut bases = Vec::new();
    let mut records = p.records.map(|r| r.to_bytes()).unwrap_or_default();
    while records.len() >= BATCH_HEADER_LEN {
        let h = BatchHeader::parse(&records[..BATCH_HEADER_LEN]).unwrap();
        bases.push(h.base_offset);
        records = records.slice(h.total_len()..);
    }
    (
        p.last_stable_offset,
        p.aborted_transactions
            .map(|a| a.iter().map(|a| (a.producer_id, a.first_offset)).collect()),
        bases,
    )
}

/// ListOffsets v5 of `t`/0: (timestamp, offset).
async fn list_offsets(b: &Broker, timestamp: i64, isolation: i8) -> (i64, i64) {
    use kafka_protocol::messages::list_offsets_request::{
        ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
    };
    let req = ListOffsetsRequest {
        replica_id: -1,
        isolation_level: isolation,
        topics: vec![ListOffsetsTopic {
            name: "t".into(),
            partitions: vec![ListOffsetsPartition {
                partition_index: 0,
                timestamp,
                current_leader_epoch: -1,
                ..ListOffsetsPartition::default()
            }],
            ..ListOffsetsTopic::default()
        }],
        ..ListOffsetsRequest::default()
    };
    let kafka_protocol::ResponseBody::ListOffsets(mut r) =
        call(b, kafka_protocol::ApiKey::ListOffsets, 5, req.into()).await
    else {
        panic!("not a list offsets response")
    };
    let p = r.topics.remove(0).partitions.remove(0);
    assert_eq!(p.error_code, 0);
    (p.timestamp, p.offset)
}

#[tokio::test]
async fn read_committed_fetch_and_list_offsets_stop_at_the_lso() {
    let b = broker().await;
    plain_append(&b, 1).await; // 0
    txn_append(&b, 1, 0, 2).await.unwrap(); // 1-2, aborted below
    txn_append(&b, 2, 0, 1).await.unwrap(); // 3, committed below
    assert_eq!(
        b.txn_partitions
            .write_marker(&b, &marker(1, 0, 0, false))
            .await,
        ErrorCode::NONE
    ); // 4
    txn_append(&b, 3, 0, 1).await.unwrap(); // 5, stays open
    assert_eq!(
        b.txn_partitions
            .write_marker(&b, &marker(2, 0, 0, true))
            .await,
        ErrorCode::NONE
    ); // 6
    let late = i64::MAX / 2;
    b.stores
        .log
        .append("t", 0, vec![batch_at(-1, -1, -1, false, 1, late)], 0)
        .await
        .unwrap(); // 7
    // read_committed: up to the LSO (5, producer 3's open transaction), aborted listed.
    assert_eq!(
        fetch(&b, 0, 1).await,
        (5, Some(vec![(1, 1)]), vec![0, 1, 3, 4])
    );
    // From past the aborted transaction: not listed; at the LSO: nothing, no error.
    assert_eq!(fetch(&b, 5, 1).await, (5, Some(vec![]), vec![]));
    // read_uncommitted: everything, no aborted list, the LSO all the same.
    assert_eq!(fetch(&b, 0, 0).await, (5, None, vec![0, 1, 3, 4, 5, 6, 7]));
    assert_eq!(list_offsets(&b, -1, 1).await, (-1, 5));
    assert_eq!(list_offsets(&b, -1, 0).await, (-1, 8));
    assert_eq!(list_offsets(&b, -2, 1).await, (-1, 0));
    // The largest timestamp is at 7, past the LSO: nothing for read_committed.
    assert_eq!(list_offsets(&b, -3, 0).await, (late, 7));
    assert_eq!(list_offsets(&b, -3, 1).await, (-1, -1));
    assert_eq!(list_offsets(&b, late, 0).await, (late, 7));
    assert_eq!(list_offsets(&b, late, 1).await, (-1, -1));
    assert_eq!(list_offsets(&b, 1, 1).await, (1, 0));
    // Producer 3 commits: the LSO reaches the high watermark.
    assert_eq!(
        b.txn_partitions
            .write_marker(&b, &marker(3, 0, 0, true))
            .await,
        ErrorCode::NONE
    );
    assert_eq!(fetch(&b, 5, 1).await, (9, Some(vec![]), vec![5, 6, 7, 8]));
    assert_eq!(list_offsets(&b, -1, 1).await, (-1, 9));
}

#[tokio::test]
async fn a_fenced_producer_is_refused_before_its_coordinator_is_asked() {
    use kafka_protocol::messages::produce_request::{
        PartitionProduceData, ProduceRequest, TopicProduceData,
    };
    let b = broker().await;
    txn_append(&b, PID, 0, 1).await.unwrap();
    // The coordinator fences epoch 0 (abort at epoch 1).
    assert_eq!(
        b.txn_partitions
            .write_marker(&b, &marker(PID, 1, 0, false))
            .await,
        ErrorCode::NONE
    );
    let mut out = BytesMut::new();
    encode_batch(
        &BatchOptions {
            transactional: true,
            producer_id: PID,
            producer_epoch: 0,
            base_sequence: 1,
            ..BatchOptions::default()
        },
        &[NewRecord {
            timestamp: crate::broker::now_ms(),
            key: None,
            value: Some(Bytes::from_static(b"zombie")),
            headers: Vec::new(),
        }],
        &mut out,
    )
    .unwrap();
    let req = ProduceRequest {
        transactional_id: Some("tx".into()),
        acks: -1,
        timeout_ms: 5000,
        topic_data: vec![TopicProduceData {
            name: "t".into(),
            partition_data: vec![PartitionProduceData {
                index: 0,
                records: Some(out.freeze()),
                ..PartitionProduceData::default()
            }],
            ..TopicProduceData::default()
        }],
        ..ProduceRequest::default()
    };
    let end = hw(&b).await;
    let kafka_protocol::ResponseBody::Produce(mut r) =
        call(&b, kafka_protocol::ApiKey::Produce, 9, req.into()).await
    else {
        panic!("not a produce response")
    };
    let p = r.responses.remove(0).partition_responses.remove(0);
    assert_eq!(p.error_code, ErrorCode::INVALID_PRODUCER_EPOCH.code());
    assert_eq!(hw(&b).await, end);
}

#[tokio::test]
async fn a_read_committed_answer_needs_the_index_it_was_checked_against() {
    let b = broker().await;
    let parts = &b.txn_partitions;
    plain_append(&b, 2).await;
    parts.ensure_ready(&b, "t", 0).await.unwrap();
    let first = txn_append(&b, PID, 0, 2).await.unwrap();
    let high = hw(&b).await;
    let (lso, aborted) = parts
        .stable_read("t", 0, high, 0, Some)
        .expect("the index is held");
    assert_eq!((lso, aborted.len()), (first, 0));
    assert_eq!(parts.lso_held("t", 0, high), Some(first));
    // The view moves on while a read is under way (another request saw it first): the
    // index goes, and the read gets no LSO rather than the high watermark.
    let moved = Route {
        view: Arc::new(kafka_store::cluster::LiveView {
            members: Vec::new(),
            version: 99,
        }),
        me: 1,
        owner: false,
    };
    parts.with_state(|s| s.observe(&moved)).unwrap();
    assert_eq!(parts.stable_read("t", 0, high, 0, Some), None);
    assert_eq!(parts.lso_held("t", 0, high), None);
    assert_eq!(
        parts.lso("t", 0, high),
        high,
        "the unchecked LSO, for read_uncommitted"
    );
}
