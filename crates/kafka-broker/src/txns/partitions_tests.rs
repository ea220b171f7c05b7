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
    let records: Vec<NewRecord> = (0..n)
        .map(|i| NewRecord {
            timestamp: 1,
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
    parts.begin_append("t", 0, producer_id, epoch, guard)?;
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
    b.stores.log.watermarks("t", 0).await.unwrap().high_watermark
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
    assert_eq!(b.txn_partitions.write_marker(&b, &marker(PID, 0, 0, true)).await, ErrorCode::NONE);
    assert_eq!(parts.lso("t", 0, hw(&b).await), hw(&b).await);
    assert!(parts.aborted("t", 0, 0, i64::MAX).is_empty());
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
    // A guard from before a marker is stale after it.
    let old = parts.set_guard("t", 0, PID);
    let newer = parts.set_guard("t", 0, PID);
    assert_eq!(
        parts.begin_append("t", 0, PID, 0, Some(old)),
        Err(ErrorCode::INVALID_TXN_STATE)
    );
    let stale = parts.set_guard("t", 0, 7);
    txn_append(&b, 7, 0, 1).await.unwrap();
    assert_eq!(parts.write_marker(&b, &marker(7, 0, 0, false)).await, ErrorCode::NONE);
    assert_eq!(
        parts.begin_append("t", 0, 7, 0, Some(stale)),
        Err(ErrorCode::INVALID_TXN_STATE)
    );
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
    assert_eq!(parts.write_marker(&b, &marker(PID, 4, 5, false)).await, ErrorCode::NONE);
    assert_eq!(hw(&b).await, end + 1);
    let aborted = parts.aborted("t", 0, 0, i64::MAX);
    assert_eq!(aborted.len(), 1);
    assert_eq!((aborted[0].producer_id, aborted[0].first_offset), (PID, 0));
    // Retried: nothing open, nothing written.
    assert_eq!(parts.write_marker(&b, &marker(PID, 4, 5, false)).await, ErrorCode::NONE);
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
    assert_eq!(parts.write_marker(&b, &marker(99, 0, 5, true)).await, ErrorCode::NONE);
    assert_eq!(hw(&b).await, end + 1);
}

#[tokio::test]
async fn the_index_is_rebuilt_from_a_log_with_markers() {
    let b = broker().await;
    let parts = &b.txn_partitions;
    plain_append(&b, 1).await; // 0
    txn_append(&b, 1, 0, 2).await.unwrap(); // 1-2
    txn_append(&b, 2, 0, 1).await.unwrap(); // 3
    assert_eq!(parts.write_marker(&b, &marker(1, 0, 1, false)).await, ErrorCode::NONE); // 4
    txn_append(&b, 3, 0, 1).await.unwrap(); // 5
    assert_eq!(parts.write_marker(&b, &marker(2, 0, 1, true)).await, ErrorCode::NONE); // 6
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
    assert_eq!(again.write_marker(&fresh, &marker(3, 0, 1, true)).await, ErrorCode::NONE);
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
