//! The partition side of transactions over TCP, one gateway on the memory store:
//! transactional produce (verified with the coordinator), WriteTxnMarkers commit and
//! abort, read_committed Fetch and ListOffsets, the LSO held by an open transaction,
//! zombie producers fenced by a marker, and the index rebuilt by a new gateway on the
//! same store.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::{Bytes, BytesMut};
use kafka_broker::BrokerConfig;
use kafka_broker::store::memory::MemoryStore;
use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnTopic,
};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
use kafka_protocol::messages::init_producer_id_request::InitProducerIdRequest;
use kafka_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
};
use kafka_protocol::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic, WriteTxnMarkersRequest,
};
use kafka_protocol::{ApiKey, ErrorCode, RecordSet, ResponseBody};
use kafka_records::{BATCH_HEADER_LEN, BatchHeader, BatchOptions, NewRecord, encode_batch};
use std::sync::Arc;
use std::time::Duration;

const TOPIC: &str = "t";

mod support;
use support::{Client, Gateway, bs};

async fn store() -> Arc<MemoryStore> {
    support::store_with(TOPIC, 2).await
}

async fn start(store: Arc<MemoryStore>) -> Gateway {
    Gateway::start(store, BrokerConfig::default()).await
}

/// A transactional producer as the client sees it.
#[derive(Clone, Copy)]
struct Producer {
    id: &'static str,
    pid: i64,
    epoch: i16,
    seq: i32,
}

impl Client {
    /// InitProducerId v4 for `id`, retried while a fence is in progress.
    async fn init(&mut self, id: &'static str) -> Producer {
        for _ in 0..250 {
            let body = InitProducerIdRequest {
                transactional_id: Some(bs(id)),
                transaction_timeout_ms: 60_000,
                producer_id: -1,
                producer_epoch: -1,
                ..Default::default()
            };
            let ResponseBody::InitProducerId(r) =
                self.call(ApiKey::InitProducerId, 4, body.into()).await
            else {
                panic!("not an InitProducerId response")
            };
            if r.error_code == 0 {
                return Producer {
                    id,
                    pid: r.producer_id,
                    epoch: r.producer_epoch,
                    seq: 0,
                };
            }
            assert_eq!(r.error_code, ErrorCode::CONCURRENT_TRANSACTIONS.code());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("InitProducerId of {id} never succeeded")
    }

    /// AddPartitionsToTxn v3 of `t`/`partition`: its code.
    async fn add(&mut self, p: &Producer, partition: i32) -> i16 {
        let body = AddPartitionsToTxnRequest {
            v3_and_below_transactional_id: bs(p.id),
            v3_and_below_producer_id: p.pid,
            v3_and_below_producer_epoch: p.epoch,
            v3_and_below_topics: vec![AddPartitionsToTxnTopic {
                name: bs(TOPIC),
                partitions: vec![partition],
                ..Default::default()
            }],
            ..Default::default()
        };
        let ResponseBody::AddPartitionsToTxn(r) =
            self.call(ApiKey::AddPartitionsToTxn, 3, body.into()).await
        else {
            panic!("not an AddPartitionsToTxn response")
        };
        r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
    }

    /// Produce at `version` of one batch of `values` to `t`/`partition`: (code, base offset).
    async fn produce(
        &mut self,
        version: i16,
        transactional_id: Option<&str>,
        partition: i32,
        records: Bytes,
    ) -> (i16, i64) {
        let body = ProduceRequest {
            transactional_id: transactional_id.map(bs),
            acks: -1,
            timeout_ms: 5000,
            topic_data: vec![TopicProduceData {
                name: bs(TOPIC),
                partition_data: vec![PartitionProduceData {
                    index: partition,
                    records: Some(records),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let ResponseBody::Produce(r) = self.call(ApiKey::Produce, version, body.into()).await
        else {
            panic!("not a produce response")
        };
        let p = &r.responses[0].partition_responses[0];
        (p.error_code, p.base_offset)
    }

    /// A transactional batch of `values` from `p` (its sequence moves on when accepted).
    async fn send(&mut self, p: &mut Producer, version: i16, values: &[&str]) -> (i16, i64) {
        let records = txn_batch(p, values);
        let out = self.produce(version, Some(p.id), 0, records).await;
        if out.0 == 0 {
            p.seq += i32::try_from(values.len()).unwrap();
        }
        out
    }

    async fn plain(&mut self, values: &[&str]) -> i64 {
        let out = self
            .produce(9, None, 0, batch(BatchOptions::default(), values))
            .await;
        assert_eq!(out.0, 0);
        out.1
    }

    /// WriteTxnMarkers v1 for `t`/0: the partition's code.
    async fn marker(
        &mut self,
        p: &Producer,
        epoch: i16,
        coordinator_epoch: i32,
        commit: bool,
    ) -> i16 {
        let body = WriteTxnMarkersRequest {
            markers: vec![WritableTxnMarker {
                producer_id: p.pid,
                producer_epoch: epoch,
                transaction_result: commit,
                coordinator_epoch,
                topics: vec![WritableTxnMarkerTopic {
                    name: bs(TOPIC),
                    partition_indexes: vec![0],
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let ResponseBody::WriteTxnMarkers(r) =
            self.call(ApiKey::WriteTxnMarkers, 1, body.into()).await
        else {
            panic!("not a WriteTxnMarkers response")
        };
        r.markers[0].topics[0].partitions[0].error_code
    }

    /// Fetch v11 of `t`/0 from `offset`: (LSO, aborted (pid, first offset), values).
    async fn fetch(
        &mut self,
        offset: i64,
        isolation: i8,
    ) -> (i64, Option<Vec<(i64, i64)>>, Vec<String>) {
        let body = FetchRequest {
            replica_id: -1,
            max_wait_ms: 0,
            min_bytes: 1,
            max_bytes: 1 << 20,
            isolation_level: isolation,
            topics: vec![FetchTopic {
                topic: bs(TOPIC),
                partitions: vec![FetchPartition {
                    partition: 0,
                    fetch_offset: offset,
                    partition_max_bytes: 1 << 20,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let ResponseBody::Fetch(r) = self.call(ApiKey::Fetch, 11, body.into()).await else {
            panic!("not a fetch response")
        };
        let p = &r.responses[0].partitions[0];
        assert_eq!(p.error_code, 0);
        let aborted = p
            .aborted_transactions
            .as_ref()
            .map(|a| a.iter().map(|a| (a.producer_id, a.first_offset)).collect());
        (
            p.last_stable_offset,
            aborted,
            committed_values(
                p.records
                    .as_ref()
                    .map(RecordSet::to_bytes)
                    .unwrap_or_default(),
                p.aborted_transactions.is_some().then(|| aborted_set(p)),
            ),
        )
    }

    /// ListOffsets v5 of `t`/0 at `timestamp`: the offset.
    async fn latest(&mut self, isolation: i8) -> i64 {
        let body = ListOffsetsRequest {
            replica_id: -1,
            isolation_level: isolation,
            topics: vec![ListOffsetsTopic {
                name: bs(TOPIC),
                partitions: vec![ListOffsetsPartition {
                    partition_index: 0,
                    timestamp: -1,
                    current_leader_epoch: -1,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let ResponseBody::ListOffsets(r) = self.call(ApiKey::ListOffsets, 5, body.into()).await
        else {
            panic!("not a list offsets response")
        };
        let p = &r.topics[0].partitions[0];
        assert_eq!(p.error_code, 0);
        p.offset
    }
}

fn aborted_set(p: &kafka_protocol::messages::fetch_response::PartitionData) -> Vec<(i64, i64)> {
    p.aborted_transactions
        .iter()
        .flatten()
        .map(|a| (a.producer_id, a.first_offset))
        .collect()
}

/// The values a consumer keeps from `records`: all of them for read_uncommitted
/// (`aborted` None); for read_committed, control batches and the aborted producers'
/// batches from their first offset up to their abort marker are dropped, as clients do.
fn committed_values(mut records: Bytes, aborted: Option<Vec<(i64, i64)>>) -> Vec<String> {
    let mut out = Vec::new();
    // Per producer: the first offset of an aborted transaction being skipped.
    let mut skipping: Vec<i64> = Vec::new();
    let mut pending = aborted.clone().unwrap_or_default();
    pending.sort_by_key(|(_, first)| *first);
    while records.len() >= BATCH_HEADER_LEN {
        let h = BatchHeader::parse(&records[..BATCH_HEADER_LEN]).unwrap();
        let raw = records.slice(..h.total_len());
        records = records.slice(h.total_len()..);
        let batch =
            kafka_records::RecordBatch::decode(&raw, &kafka_records::DecodeLimits::default())
                .unwrap();
        if aborted.is_some() {
            while let Some(&(pid, first)) = pending.first() {
                if first > h.base_offset {
                    break;
                }
                skipping.push(pid);
                pending.remove(0);
            }
            if batch.is_control() {
                skipping.retain(|pid| *pid != h.producer_id);
                continue;
            }
            if batch.is_transactional() && skipping.contains(&h.producer_id) {
                continue;
            }
        } else if batch.is_control() {
            continue;
        }
        for r in batch.records().unwrap() {
            let r = r.unwrap();
            out.push(String::from_utf8(r.value.unwrap().to_vec()).unwrap());
        }
    }
    out
}

fn batch(options: BatchOptions, values: &[&str]) -> Bytes {
    let records: Vec<NewRecord> = values
        .iter()
        .map(|v| NewRecord {
            timestamp: kafka_broker_now(),
            key: None,
            value: Some(Bytes::from(v.to_string())),
            headers: Vec::new(),
        })
        .collect();
    let mut out = BytesMut::new();
    encode_batch(&options, &records, &mut out).unwrap();
    out.freeze()
}

fn kafka_broker_now() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

fn txn_batch(p: &Producer, values: &[&str]) -> Bytes {
    batch(
        BatchOptions {
            transactional: true,
            producer_id: p.pid,
            producer_epoch: p.epoch,
            base_sequence: p.seq,
            ..BatchOptions::default()
        },
        values,
    )
}

#[tokio::test]
async fn commit_and_abort_reach_read_committed_consumers() {
    let gw = start(store().await).await;
    let mut c = gw.client().await;
    let mut a = c.init("a").await;
    assert_eq!(c.add(&a, 0).await, 0);
    assert_eq!(c.plain(&["p0"]).await, 0);
    let (code, first) = c.send(&mut a, 11, &["a1", "a2"]).await;
    assert_eq!((code, first), (0, 1));
    assert_eq!(c.plain(&["p1"]).await, 3);
    // Open: read_committed stops at the transaction's first offset.
    assert_eq!(
        c.fetch(0, 1).await,
        (1, Some(vec![]), vec!["p0".to_string()])
    );
    assert_eq!(c.latest(1).await, 1);
    assert_eq!(c.latest(0).await, 4);
    let (lso, aborted, values) = c.fetch(0, 0).await;
    assert_eq!((lso, aborted), (1, None));
    assert_eq!(values, ["p0", "a1", "a2", "p1"]);
    // Commit (the marker takes offset 4).
    assert_eq!(c.marker(&a, a.epoch, 0, true).await, 0);
    assert_eq!(c.latest(1).await, 5);
    let (lso, aborted, values) = c.fetch(0, 1).await;
    assert_eq!((lso, aborted), (5, Some(vec![])));
    assert_eq!(values, ["p0", "a1", "a2", "p1"]);
    // A retried commit marker writes nothing.
    assert_eq!(c.marker(&a, a.epoch, 0, true).await, 0);
    assert_eq!(c.latest(0).await, 5);
    // Next transaction, aborted (marker at 7).
    assert_eq!(c.add(&a, 0).await, 0);
    let (code, second) = c.send(&mut a, 11, &["x1"]).await;
    assert_eq!((code, second), (0, 5));
    assert_eq!(c.plain(&["p2"]).await, 6);
    assert_eq!(c.fetch(0, 1).await.0, 5);
    assert_eq!(c.marker(&a, a.epoch, 0, false).await, 0);
    let (lso, aborted, values) = c.fetch(0, 1).await;
    assert_eq!(lso, 8);
    assert_eq!(aborted, Some(vec![(a.pid, 5)]));
    assert_eq!(values, ["p0", "a1", "a2", "p1", "p2"]);
    // read_uncommitted sees the aborted record.
    assert_eq!(c.fetch(0, 0).await.2, ["p0", "a1", "a2", "p1", "x1", "p2"]);
    // From past the aborted transaction it is not listed.
    assert_eq!(
        c.fetch(6, 1).await,
        (8, Some(vec![(a.pid, 5)]), vec!["p2".to_string()])
    );
    assert_eq!(c.fetch(8, 1).await, (8, Some(vec![]), vec![]));
    gw.stop().await;
}

#[tokio::test]
async fn unverified_and_anonymous_transactional_batches_are_refused() {
    let gw = start(store().await).await;
    let mut c = gw.client().await;
    let mut a = c.init("b").await;
    // Not added to the transaction: 48 before Produce v11, 120 from it. Nothing stored.
    assert_eq!(
        c.send(&mut a, 9, &["v"]).await.0,
        ErrorCode::INVALID_TXN_STATE.code()
    );
    assert_eq!(
        c.send(&mut a, 11, &["v"]).await.0,
        ErrorCode::TRANSACTION_ABORTABLE.code()
    );
    // Transactional records with no transactional id.
    let records = txn_batch(&a, &["v"]);
    assert_eq!(
        c.produce(11, None, 0, records).await.0,
        ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED.code()
    );
    assert_eq!(c.latest(0).await, 0);
    gw.stop().await;
}

#[tokio::test]
async fn a_fenced_producer_gets_invalid_producer_epoch_and_a_new_gateway_rebuilds_the_index() {
    let store = store().await;
    let gw = start(store.clone()).await;
    let mut c = gw.client().await;
    let mut a = c.init("z").await;
    assert_eq!(c.add(&a, 0).await, 0);
    assert_eq!(c.send(&mut a, 11, &["z1"]).await, (0, 0));
    // The coordinator aborts with a bumped epoch (as a fencing InitProducerId does).
    assert_eq!(c.marker(&a, a.epoch + 1, 1, false).await, 0);
    assert_eq!(
        c.send(&mut a, 11, &["z2"]).await.0,
        ErrorCode::INVALID_PRODUCER_EPOCH.code()
    );
    // A stale coordinator epoch is fenced.
    assert_eq!(
        c.marker(&a, a.epoch + 1, 0, true).await,
        ErrorCode::TRANSACTION_COORDINATOR_FENCED.code()
    );
    // Another producer leaves a transaction open.
    let mut b = c.init("y").await;
    assert_eq!(c.add(&b, 0).await, 0);
    assert_eq!(c.send(&mut b, 11, &["y1"]).await, (0, 2));
    let before = c.fetch(0, 1).await;
    assert_eq!(before.0, 2);
    assert_eq!(before.1, Some(vec![(a.pid, 0)]));
    gw.stop().await;

    let gw = start(store).await;
    let mut c = gw.client().await;
    assert_eq!(c.fetch(0, 1).await, before);
    assert_eq!(c.latest(1).await, 2);
    // The rebuilt state still fences the zombie (its batch is refused, not appended).
    let end = c.latest(0).await;
    let zombie = txn_batch(&a, &["z3"]);
    assert_ne!(c.produce(11, Some(a.id), 0, zombie).await.0, 0);
    assert_eq!(c.latest(0).await, end);
    gw.stop().await;
}

#[tokio::test]
async fn end_txn_markers_close_the_transaction_and_wake_a_waiting_fetch() {
    use kafka_protocol::messages::end_txn_request::EndTxnRequest;
    let gw = start(store().await).await;
    let mut c = gw.client().await;
    let mut a = c.init("e").await;
    assert_eq!(c.add(&a, 0).await, 0);
    assert_eq!(c.send(&mut a, 11, &["e1", "e2"]).await, (0, 0));
    // A read_committed fetch waiting for data below the LSO, on its own connection.
    let mut waiter = gw.client().await;
    let waiting = tokio::spawn(async move {
        let body = FetchRequest {
            replica_id: -1,
            max_wait_ms: 10_000,
            min_bytes: 1,
            max_bytes: 1 << 20,
            isolation_level: 1,
            topics: vec![FetchTopic {
                topic: bs(TOPIC),
                partitions: vec![FetchPartition {
                    partition: 0,
                    fetch_offset: 0,
                    partition_max_bytes: 1 << 20,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let started = std::time::Instant::now();
        let ResponseBody::Fetch(r) = waiter.call(ApiKey::Fetch, 11, body.into()).await else {
            panic!("not a fetch response")
        };
        let p = &r.responses[0].partitions[0];
        let values = committed_values(
            p.records
                .as_ref()
                .map(RecordSet::to_bytes)
                .unwrap_or_default(),
            Some(aborted_set(p)),
        );
        (p.last_stable_offset, values, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished(), "a fetch at the LSO must wait");
    let body = EndTxnRequest {
        transactional_id: bs(a.id),
        producer_id: a.pid,
        producer_epoch: a.epoch,
        committed: true,
        ..Default::default()
    };
    let ResponseBody::EndTxn(r) = c.call(ApiKey::EndTxn, 3, body.into()).await else {
        panic!("not an EndTxn response")
    };
    assert_eq!(r.error_code, 0);
    let (lso, values, waited) = waiting.await.unwrap();
    assert_eq!(lso, 3);
    assert_eq!(values, ["e1", "e2"]);
    assert!(
        waited < Duration::from_secs(10),
        "woken by the marker, not the timeout"
    );
    gw.stop().await;
}
