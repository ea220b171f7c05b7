//! The transaction coordinator over TCP, one gateway on the memory store: InitProducerId
//! with transactional ids (fencing), AddPartitionsToTxn / AddOffsetsToTxn / EndTxn and
//! their refusal codes, transaction timeouts, TxnOffsetCommit and OffsetFetch's
//! `require_stable`, DescribeTransactions and ListTransactions, and a restart on the
//! same store.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use kafka_broker::store::memory::MemoryStore;
use kafka_broker::{BrokerConfig, TransactionSettings};
use kafka_protocol::messages::add_offsets_to_txn_request::AddOffsetsToTxnRequest;
use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kafka_protocol::messages::add_partitions_to_txn_response::AddPartitionsToTxnTopicResult;
use kafka_protocol::messages::describe_transactions_request::DescribeTransactionsRequest;
use kafka_protocol::messages::describe_transactions_response::TransactionState;
use kafka_protocol::messages::end_txn_request::EndTxnRequest;
use kafka_protocol::messages::init_producer_id_request::InitProducerIdRequest;
use kafka_protocol::messages::list_transactions_request::ListTransactionsRequest;
use kafka_protocol::messages::list_transactions_response::ListTransactionsResponse;
use kafka_protocol::messages::offset_fetch_request::{OffsetFetchRequest, OffsetFetchRequestTopic};
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequest, TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::{ApiKey, ErrorCode, ResponseBody};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

const TOPIC: &str = "t";

mod support;
use support::{Client, Gateway, bs};

async fn store() -> Arc<MemoryStore> {
    support::store_with(TOPIC, 4).await
}

async fn start(store: Arc<MemoryStore>, transactions: TransactionSettings) -> Gateway {
    let config = BrokerConfig {
        transactions,
        ..BrokerConfig::default()
    };
    Gateway::start(store, config).await
}

impl Client {
    /// InitProducerId v4 (`expected`: the producer id and epoch the client has).
    async fn init(
        &mut self,
        id: &str,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
    ) -> (i16, i64, i16) {
        let (pid, epoch) = expected.unwrap_or((-1, -1));
        let body = InitProducerIdRequest {
            transactional_id: Some(bs(id)),
            transaction_timeout_ms: timeout_ms,
            producer_id: pid,
            producer_epoch: epoch,
            ..Default::default()
        };
        match self.call(ApiKey::InitProducerId, 4, body.into()).await {
            ResponseBody::InitProducerId(r) => (r.error_code, r.producer_id, r.producer_epoch),
            other => panic!("{other:?}"),
        }
    }

    /// InitProducerId until it is not CONCURRENT_TRANSACTIONS (a fence answers it first).
    async fn init_ok(&mut self, id: &str, timeout_ms: i32) -> (i64, i16) {
        for _ in 0..200 {
            let (code, pid, epoch) = self.init(id, timeout_ms, None).await;
            if code == ErrorCode::NONE.code() {
                return (pid, epoch);
            }
            assert_eq!(code, ErrorCode::CONCURRENT_TRANSACTIONS.code(), "init {id}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("InitProducerId of {id} never succeeded");
    }

    /// AddPartitionsToTxn v3: per (topic, partition) the code.
    async fn add(
        &mut self,
        id: &str,
        pid: i64,
        epoch: i16,
        parts: &[(&str, i32)],
    ) -> BTreeMap<(String, i32), i16> {
        self.add_v(3, id, pid, epoch, parts).await
    }

    async fn add_v(
        &mut self,
        version: i16,
        id: &str,
        pid: i64,
        epoch: i16,
        parts: &[(&str, i32)],
    ) -> BTreeMap<(String, i32), i16> {
        let body = AddPartitionsToTxnRequest {
            v3_and_below_transactional_id: bs(id),
            v3_and_below_producer_id: pid,
            v3_and_below_producer_epoch: epoch,
            v3_and_below_topics: topics(parts),
            ..Default::default()
        };
        match self
            .call(ApiKey::AddPartitionsToTxn, version, body.into())
            .await
        {
            ResponseBody::AddPartitionsToTxn(r) => codes(&r.results_by_topic_v3_and_below),
            other => panic!("{other:?}"),
        }
    }

    async fn add_offsets(&mut self, id: &str, pid: i64, epoch: i16, group: &str) -> i16 {
        let body = AddOffsetsToTxnRequest {
            transactional_id: bs(id),
            producer_id: pid,
            producer_epoch: epoch,
            group_id: bs(group),
            ..Default::default()
        };
        match self.call(ApiKey::AddOffsetsToTxn, 3, body.into()).await {
            ResponseBody::AddOffsetsToTxn(r) => r.error_code,
            other => panic!("{other:?}"),
        }
    }

    async fn end(&mut self, id: &str, pid: i64, epoch: i16, commit: bool) -> i16 {
        let body = EndTxnRequest {
            transactional_id: bs(id),
            producer_id: pid,
            producer_epoch: epoch,
            committed: commit,
            ..Default::default()
        };
        match self.call(ApiKey::EndTxn, 3, body.into()).await {
            ResponseBody::EndTxn(r) => r.error_code,
            other => panic!("{other:?}"),
        }
    }

    async fn describe(&mut self, id: &str) -> TransactionState {
        let body = DescribeTransactionsRequest {
            transactional_ids: vec![bs(id)],
            ..Default::default()
        };
        match self
            .call(ApiKey::DescribeTransactions, 0, body.into())
            .await
        {
            ResponseBody::DescribeTransactions(mut r) => r.transaction_states.remove(0),
            other => panic!("{other:?}"),
        }
    }

    /// Waits until `id` is in `state` (markers and timeouts complete in the background).
    async fn wait_state(&mut self, id: &str, state: &str) -> TransactionState {
        for _ in 0..250 {
            let d = self.describe(id).await;
            if *d.transaction_state == *state {
                return d;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("{id} never reached {state}: {:?}", self.describe(id).await);
    }

    async fn list(
        &mut self,
        version: i16,
        req: ListTransactionsRequest,
    ) -> ListTransactionsResponse {
        match self
            .call(ApiKey::ListTransactions, version, req.into())
            .await
        {
            ResponseBody::ListTransactions(r) => r,
            other => panic!("{other:?}"),
        }
    }

    async fn txn_commit(
        &mut self,
        version: i16,
        id: &str,
        pid: i64,
        epoch: i16,
        group: &str,
        offset: i64,
    ) -> i16 {
        let body = TxnOffsetCommitRequest {
            transactional_id: bs(id),
            group_id: bs(group),
            producer_id: pid,
            producer_epoch: epoch,
            generation_id: -1,
            member_id: bs(""),
            topics: vec![TxnOffsetCommitRequestTopic {
                name: bs(TOPIC),
                partitions: vec![TxnOffsetCommitRequestPartition {
                    partition_index: 0,
                    committed_offset: offset,
                    committed_leader_epoch: -1,
                    committed_metadata: Some(bs("")),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        match self
            .call(ApiKey::TxnOffsetCommit, version, body.into())
            .await
        {
            ResponseBody::TxnOffsetCommit(r) => r.topics[0].partitions[0].error_code,
            other => panic!("{other:?}"),
        }
    }

    /// OffsetFetch v7 of partition 0: (code, offset).
    async fn fetch_offset(&mut self, group: &str, require_stable: bool) -> (i16, i64) {
        let body = OffsetFetchRequest {
            group_id: bs(group),
            topics: Some(vec![OffsetFetchRequestTopic {
                name: bs(TOPIC),
                partition_indexes: vec![0],
                ..Default::default()
            }]),
            require_stable,
            ..Default::default()
        };
        match self.call(ApiKey::OffsetFetch, 7, body.into()).await {
            ResponseBody::OffsetFetch(r) => {
                assert_eq!(r.error_code, 0);
                let p = &r.topics[0].partitions[0];
                (p.error_code, p.committed_offset)
            }
            other => panic!("{other:?}"),
        }
    }
}

fn topics(parts: &[(&str, i32)]) -> Vec<AddPartitionsToTxnTopic> {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (t, p) in parts {
        by_topic.entry(t).or_default().push(*p);
    }
    by_topic
        .into_iter()
        .map(|(t, ps)| AddPartitionsToTxnTopic {
            name: bs(t),
            partitions: ps,
            ..Default::default()
        })
        .collect()
}

fn codes(results: &[AddPartitionsToTxnTopicResult]) -> BTreeMap<(String, i32), i16> {
    results
        .iter()
        .flat_map(|t| {
            t.results_by_partition.iter().map(move |p| {
                (
                    (t.name.to_string(), p.partition_index),
                    p.partition_error_code,
                )
            })
        })
        .collect()
}

fn all(codes: &BTreeMap<(String, i32), i16>, code: ErrorCode) -> bool {
    !codes.is_empty() && codes.values().all(|c| *c == code.code())
}

fn settings() -> TransactionSettings {
    TransactionSettings {
        marker_retry_min: Duration::from_millis(10),
        marker_retry_max: Duration::from_millis(50),
        ..TransactionSettings::default()
    }
}

#[tokio::test]
async fn init_producer_id_gives_each_id_its_producer_and_fences_older_epochs() {
    let gw = start(store().await, settings()).await;
    let mut c = gw.client().await;
    let (a, a0) = c.init_ok("a", 60_000).await;
    let (b, _) = c.init_ok("b", 60_000).await;
    assert_ne!(a, b, "two transactional ids share a producer id");
    assert_eq!(a0, 0);
    // The same id again: same producer id, next epoch; the older epoch is fenced.
    let (a_again, a1) = c.init_ok("a", 60_000).await;
    assert_eq!((a_again, a1), (a, 1));
    let old = c.add("a", a, a0, &[(TOPIC, 0)]).await;
    assert!(all(&old, ErrorCode::PRODUCER_FENCED), "{old:?}");
    let old_v1 = c.add_v(1, "a", a, a0, &[(TOPIC, 0)]).await;
    assert!(
        all(&old_v1, ErrorCode::INVALID_PRODUCER_EPOCH),
        "{old_v1:?}"
    );
    assert_eq!(
        c.end("a", a, a0, true).await,
        ErrorCode::PRODUCER_FENCED.code()
    );
    // v3+ with an epoch that is not the current one: fenced, no bump.
    let (code, ..) = c.init("a", 60_000, Some((a, a0))).await;
    assert_eq!(code, ErrorCode::PRODUCER_FENCED.code());
    // Another id's producer id is not this id's.
    let wrong = c.add("a", b, a1, &[(TOPIC, 0)]).await;
    assert!(
        all(&wrong, ErrorCode::INVALID_PRODUCER_ID_MAPPING),
        "{wrong:?}"
    );
    // Bad requests.
    let (code, ..) = c.init("", 60_000, None).await;
    assert_eq!(code, ErrorCode::INVALID_REQUEST.code());
    let (code, ..) = c.init("c", 0, None).await;
    assert_eq!(code, ErrorCode::INVALID_TRANSACTION_TIMEOUT.code());
    let (code, ..) = c.init("c", 900_001, None).await;
    assert_eq!(code, ErrorCode::INVALID_TRANSACTION_TIMEOUT.code());
    gw.stop().await;
}

#[tokio::test]
async fn add_partitions_checks_partitions_and_end_txn_follows_the_state() {
    let gw = start(store().await, settings()).await;
    let mut c = gw.client().await;
    let (pid, epoch) = c.init_ok("x", 60_000).await;
    // Nothing to end yet.
    assert_eq!(
        c.end("x", pid, epoch, true).await,
        ErrorCode::INVALID_TXN_STATE.code()
    );
    // One unknown partition: the others are not attempted, nothing is added.
    let r = c
        .add("x", pid, epoch, &[(TOPIC, 0), (TOPIC, 9), ("missing", 0)])
        .await;
    assert_eq!(
        r[&(TOPIC.to_string(), 0)],
        ErrorCode::OPERATION_NOT_ATTEMPTED.code()
    );
    assert_eq!(
        r[&(TOPIC.to_string(), 9)],
        ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.code()
    );
    assert_eq!(
        r[&("missing".to_string(), 0)],
        ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.code()
    );
    // The offsets topic cannot be added as a partition by name.
    let r = c.add("x", pid, epoch, &[("__consumer_offsets", 0)]).await;
    assert!(all(&r, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION), "{r:?}");
    assert_eq!(c.describe("x").await.transaction_state.to_string(), "Empty");

    let r = c.add("x", pid, epoch, &[(TOPIC, 0), (TOPIC, 1)]).await;
    assert!(all(&r, ErrorCode::NONE), "{r:?}");
    // Adding the same partitions again is fine.
    let r = c.add("x", pid, epoch, &[(TOPIC, 1)]).await;
    assert!(all(&r, ErrorCode::NONE), "{r:?}");
    assert_eq!(c.add_offsets("x", pid, epoch, "g").await, 0);
    let d = c.describe("x").await;
    assert_eq!(d.error_code, 0);
    assert_eq!(d.transaction_state.to_string(), "Ongoing");
    assert_eq!((d.producer_id, d.producer_epoch), (pid, epoch));
    assert_eq!(d.transaction_timeout_ms, 60_000);
    assert!(d.transaction_start_time_ms > 0);
    let described: Vec<(String, Vec<i32>)> = d
        .topics
        .iter()
        .map(|t| (t.topic.to_string(), t.partitions.clone()))
        .collect();
    assert_eq!(described.len(), 2, "{described:?}");
    assert!(described.contains(&(TOPIC.to_string(), vec![0, 1])));
    assert!(
        described
            .iter()
            .any(|(t, ps)| t == "__consumer_offsets" && ps.len() == 1)
    );

    // Unknown ids.
    let d = c.describe("nobody").await;
    assert_eq!(d.error_code, ErrorCode::TRANSACTIONAL_ID_NOT_FOUND.code());

    // List: state and producer filters, unknown state names.
    let all_listed = c.list(0, ListTransactionsRequest::default()).await;
    assert_eq!(all_listed.error_code, 0);
    assert_eq!(all_listed.transaction_states.len(), 1);
    let ongoing = c
        .list(
            0,
            ListTransactionsRequest {
                state_filters: vec![bs("Ongoing")],
                ..Default::default()
            },
        )
        .await;
    assert_eq!(ongoing.transaction_states.len(), 1);
    assert_eq!(ongoing.transaction_states[0].producer_id, pid);
    let committed = c
        .list(
            0,
            ListTransactionsRequest {
                state_filters: vec![bs("CompleteCommit")],
                ..Default::default()
            },
        )
        .await;
    assert!(committed.transaction_states.is_empty());
    let unknown = c
        .list(
            0,
            ListTransactionsRequest {
                state_filters: vec![bs("Sleeping")],
                ..Default::default()
            },
        )
        .await;
    assert!(unknown.transaction_states.is_empty());
    assert_eq!(unknown.unknown_state_filters, vec![bs("Sleeping")]);
    let other_pid = c
        .list(
            0,
            ListTransactionsRequest {
                producer_id_filters: vec![pid + 1],
                ..Default::default()
            },
        )
        .await;
    assert!(other_pid.transaction_states.is_empty());
    let long = c
        .list(
            1,
            ListTransactionsRequest {
                duration_filter: 3_600_000,
                ..Default::default()
            },
        )
        .await;
    assert!(
        long.transaction_states.is_empty(),
        "a fresh transaction is not an hour old"
    );

    // End: abort; the same end again is a retry, the other one is refused.
    assert_eq!(c.end("x", pid, epoch, false).await, 0);
    let state = c.describe("x").await.transaction_state.to_string();
    assert!(
        state == "PrepareAbort" || state == "CompleteAbort",
        "{state}"
    );
    c.wait_state("x", "CompleteAbort").await;
    assert_eq!(c.end("x", pid, epoch, false).await, 0, "a retried abort");
    assert_eq!(
        c.end("x", pid, epoch, true).await,
        ErrorCode::INVALID_TXN_STATE.code()
    );
    gw.stop().await;
}

#[tokio::test]
async fn add_partitions_v4_verifies_without_adding() {
    let gw = start(store().await, settings()).await;
    let mut c = gw.client().await;
    let (pid, epoch) = c.init_ok("v", 60_000).await;
    let r = c.add("v", pid, epoch, &[(TOPIC, 0)]).await;
    assert!(all(&r, ErrorCode::NONE), "{r:?}");
    let body = AddPartitionsToTxnRequest {
        transactions: vec![AddPartitionsToTxnTransaction {
            transactional_id: bs("v"),
            producer_id: pid,
            producer_epoch: epoch,
            verify_only: true,
            topics: topics(&[(TOPIC, 0), (TOPIC, 1)]),
            ..Default::default()
        }],
        ..Default::default()
    };
    let r = match c.call(ApiKey::AddPartitionsToTxn, 4, body.into()).await {
        ResponseBody::AddPartitionsToTxn(r) => r,
        other => panic!("{other:?}"),
    };
    assert_eq!(r.error_code, 0);
    assert_eq!(r.results_by_transaction.len(), 1);
    let got = codes(&r.results_by_transaction[0].topic_results);
    assert_eq!(got[&(TOPIC.to_string(), 0)], ErrorCode::NONE.code());
    assert_eq!(
        got[&(TOPIC.to_string(), 1)],
        ErrorCode::INVALID_TXN_STATE.code()
    );
    // Verification added nothing.
    let d = c.describe("v").await;
    assert_eq!(d.topics.len(), 1);
    assert_eq!(d.topics[0].partitions, vec![0]);
    gw.stop().await;
}

#[tokio::test]
async fn a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced() {
    let mut t = settings();
    t.coordinator.abort_check_interval_ms = 20;
    let gw = start(store().await, t).await;
    let mut c = gw.client().await;
    let (pid, epoch) = c.init_ok("slow", 100).await;
    let r = c.add("slow", pid, epoch, &[(TOPIC, 2)]).await;
    assert!(all(&r, ErrorCode::NONE), "{r:?}");
    // The abort bumps the epoch: PrepareAbort at once, then markers.
    let mut aborted = None;
    for _ in 0..250 {
        let d = c.describe("slow").await;
        if d.producer_epoch > epoch {
            aborted = Some(d);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let d = aborted.expect("the timed-out transaction was not aborted");
    let state = d.transaction_state.to_string();
    assert!(
        state == "PrepareAbort" || state == "CompleteAbort",
        "{state}"
    );
    assert_eq!(
        c.end("slow", pid, epoch, true).await,
        ErrorCode::PRODUCER_FENCED.code()
    );
    let d = c.wait_state("slow", "CompleteAbort").await;
    assert!(d.topics.is_empty());
    gw.stop().await;
}

#[tokio::test]
async fn txn_offset_commit_needs_the_group_in_the_transaction_and_stays_pending() {
    let gw = start(store().await, settings()).await;
    let mut c = gw.client().await;
    let (pid, epoch) = c.init_ok("o", 60_000).await;
    // The group was never added: refused by version.
    assert_eq!(
        c.txn_commit(3, "o", pid, epoch, "g", 5).await,
        ErrorCode::INVALID_TXN_STATE.code()
    );
    assert_eq!(
        c.txn_commit(4, "o", pid, epoch, "g", 5).await,
        ErrorCode::TRANSACTION_ABORTABLE.code()
    );
    assert_eq!(c.add_offsets("o", pid, epoch, "g").await, 0);
    // A stale epoch is fenced.
    assert_eq!(
        c.txn_commit(3, "o", pid, epoch - 1, "g", 5).await,
        ErrorCode::INVALID_PRODUCER_EPOCH.code()
    );
    assert_eq!(c.txn_commit(3, "o", pid, epoch, "g", 5).await, 0);
    // Not visible before the commit; unstable for consumers that ask.
    assert_eq!(c.fetch_offset("g", false).await, (0, -1));
    assert_eq!(
        c.fetch_offset("g", true).await.0,
        ErrorCode::UNSTABLE_OFFSET_COMMIT.code()
    );
    // A member check: a generation on an unknown group.
    let body = TxnOffsetCommitRequest {
        transactional_id: bs("o"),
        group_id: bs("g"),
        producer_id: pid,
        producer_epoch: epoch,
        generation_id: 3,
        member_id: bs("m"),
        topics: vec![TxnOffsetCommitRequestTopic {
            name: bs(TOPIC),
            partitions: vec![TxnOffsetCommitRequestPartition {
                partition_index: 1,
                committed_offset: 1,
                committed_leader_epoch: -1,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    match c.call(ApiKey::TxnOffsetCommit, 3, body.into()).await {
        ResponseBody::TxnOffsetCommit(r) => assert_eq!(
            r.topics[0].partitions[0].error_code,
            ErrorCode::ILLEGAL_GENERATION.code()
        ),
        other => panic!("{other:?}"),
    }
    gw.stop().await;
}

#[tokio::test]
async fn a_restart_on_the_same_store_keeps_transactions_and_pending_offsets() {
    let store = store().await;
    let gw = start(store.clone(), settings()).await;
    let mut c = gw.client().await;
    let (pid, epoch) = c.init_ok("r", 60_000).await;
    let (idle, idle_epoch) = c.init_ok("idle", 60_000).await;
    let r = c.add("r", pid, epoch, &[(TOPIC, 3)]).await;
    assert!(all(&r, ErrorCode::NONE), "{r:?}");
    assert_eq!(c.add_offsets("r", pid, epoch, "rg").await, 0);
    assert_eq!(c.txn_commit(3, "r", pid, epoch, "rg", 11).await, 0);
    drop(c);
    gw.stop().await;

    let gw = start(store, settings()).await;
    let mut c = gw.client().await;
    let d = c.describe("r").await;
    assert_eq!(d.transaction_state.to_string(), "Ongoing");
    assert_eq!((d.producer_id, d.producer_epoch), (pid, epoch));
    assert!(
        d.topics
            .iter()
            .any(|t| *t.topic == *TOPIC && t.partitions == vec![3])
    );
    let d = c.describe("idle").await;
    assert_eq!(d.transaction_state.to_string(), "Empty");
    assert_eq!((d.producer_id, d.producer_epoch), (idle, idle_epoch));
    // The pending offsets came back with the shard: still invisible, still unstable.
    assert_eq!(c.fetch_offset("rg", false).await, (0, -1));
    assert_eq!(
        c.fetch_offset("rg", true).await.0,
        ErrorCode::UNSTABLE_OFFSET_COMMIT.code()
    );
    // The producer carries on where it was.
    let r = c.add("r", pid, epoch, &[(TOPIC, 2)]).await;
    assert!(all(&r, ErrorCode::NONE), "{r:?}");
    gw.stop().await;
}

#[tokio::test]
async fn committed_offsets_appear_at_commit_and_aborted_ones_never() {
    let gw = start(store().await, settings()).await;
    let mut c = gw.client().await;
    let (pid, epoch) = c.init_ok("k", 60_000).await;
    // Commit: the offsets become the group's once the markers are written.
    let r = c.add("k", pid, epoch, &[(TOPIC, 0)]).await;
    assert!(all(&r, ErrorCode::NONE), "{r:?}");
    assert_eq!(c.add_offsets("k", pid, epoch, "kg").await, 0);
    assert_eq!(c.txn_commit(3, "k", pid, epoch, "kg", 17).await, 0);
    assert_eq!(c.fetch_offset("kg", false).await, (0, -1));
    assert_eq!(c.end("k", pid, epoch, true).await, 0);
    c.wait_state("k", "CompleteCommit").await;
    assert_eq!(c.fetch_offset("kg", true).await, (0, 17));
    // The same end again is a retry.
    assert_eq!(c.end("k", pid, epoch, true).await, 0);

    // Next transaction of the same producer: abort; the committed offset stays.
    assert_eq!(c.add_offsets("k", pid, epoch, "kg").await, 0);
    assert_eq!(c.txn_commit(4, "k", pid, epoch, "kg", 99).await, 0);
    assert_eq!(
        c.fetch_offset("kg", true).await.0,
        ErrorCode::UNSTABLE_OFFSET_COMMIT.code()
    );
    assert_eq!(c.end("k", pid, epoch, false).await, 0);
    c.wait_state("k", "CompleteAbort").await;
    assert_eq!(c.fetch_offset("kg", true).await, (0, 17));
    assert_eq!(
        c.end("k", pid, epoch, true).await,
        ErrorCode::INVALID_TXN_STATE.code()
    );

    // A fence while a transaction is open aborts it with a bumped epoch; the
    // InitProducerId is held until the abort is complete (`completion_wait`), then
    // answered the epoch after (Kafka answers CONCURRENT_TRANSACTIONS first, and the
    // client's retry gets that epoch).
    let r = c.add("k", pid, epoch, &[(TOPIC, 1)]).await;
    assert!(all(&r, ErrorCode::NONE), "{r:?}");
    let (code, again, bumped) = c.init("k", 60_000, None).await;
    assert_eq!(code, 0);
    assert_eq!(again, pid);
    assert_eq!(
        bumped,
        epoch + 2,
        "the fence and the new producer each bump"
    );
    let d = c.wait_state("k", "Empty").await;
    assert!(d.topics.is_empty());
    gw.stop().await;
}

#[tokio::test]
async fn a_gateway_finishes_a_commit_it_finds_prepared_in_the_store() {
    use kafka_broker::store::{CommittedOffset, OffsetStore};
    let store = store().await;
    let pid = 7_000_001;
    let shard = i32::try_from(kafka_broker::store::cluster::group_shard("pg")).unwrap();
    let prepared = kafka_txn::TxnMetadata {
        transactional_id: "p".into(),
        producer_id: pid,
        last_producer_id: -1,
        producer_epoch: 3,
        last_producer_epoch: -1,
        timeout_ms: 60_000,
        state: kafka_txn::TxnState::PrepareCommit,
        partitions: [
            (kafka_txn::OFFSETS_TOPIC.to_string(), shard),
            (TOPIC.to_string(), 0),
        ]
        .into_iter()
        .collect(),
        start_ms: 1,
        last_update_ms: 1,
    };
    store
        .put_txn_state("p", Some(kafka_txn::snapshot::encode(&prepared)))
        .await
        .unwrap();
    let offset = CommittedOffset {
        offset: 5,
        leader_epoch: -1,
        metadata: None,
        commit_timestamp: 1,
    };
    store
        .put_pending_offsets("pg", pid, vec![(TOPIC.to_string(), 0, offset)])
        .await
        .unwrap();
    // The gateway that loads the shard writes the markers and completes the commit.
    let gw = start(store, settings()).await;
    let mut c = gw.client().await;
    let d = c.wait_state("p", "CompleteCommit").await;
    assert_eq!((d.producer_id, d.producer_epoch), (pid, 3));
    assert_eq!(c.fetch_offset("pg", true).await, (0, 5));
    gw.stop().await;
}
