//! Transactions: the coordinator driver ([`coordinator`]), the partition side
//! ([`partitions`]: what each led partition knows of open and aborted transactions, the
//! last stable offset, markers), and the [`Router`] that carries markers and
//! verifications to the gateway that leads each partition.
//!
//! The router decides with one snapshot of the membership per call ([`Route`]): a topic
//! partition's marker goes to its leader ([`leader`]), a group shard's (the offsets a
//! transaction committed, `(OFFSETS_TOPIC, shard)`) to the shard's coordinator
//! ([`shard_coordinator`]), and a verification to the coordinator of the transactional
//! id's shard. When that is this gateway (holding its lease), the work is done in
//! process; otherwise every marker for one gateway travels in one WriteTxnMarkers v1
//! request, and a verification in one AddPartitionsToTxn v4 `verify_only` request.
//!
//! A gateway that cannot be reached reads as a retriable code: NOT_LEADER_OR_FOLLOWER
//! for markers (the coordinator retries and re-routes), COORDINATOR_NOT_AVAILABLE for a
//! verification (the produce path answers it as a retriable produce error).

pub(crate) mod coordinator;
pub(crate) mod partitions;

use crate::broker::Broker;
use crate::cluster::{Route, leader, shard_coordinator};
use crate::peer::{PeerClient, PeerError};
use kafka_protocol::messages::add_partitions_to_txn_request as ap;
use kafka_protocol::messages::write_txn_markers_request as wm;
use kafka_protocol::{ErrorCode, RequestBody, ResponseBody};
use kafka_store::cluster::{GROUP_SHARDS, group_shard};
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock, Weak};
use tracing::debug;

/// One commit or abort marker to write to one partition (a topic partition, or
/// `(kafka_txn::OFFSETS_TOPIC, shard)` for the offsets a transaction committed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MarkerWrite {
    pub(crate) topic: String,
    pub(crate) partition: i32,
    pub(crate) producer_id: i64,
    pub(crate) producer_epoch: i16,
    pub(crate) coordinator_epoch: i32,
    pub(crate) commit: bool,
}

/// Where markers and verifications go: in process when this gateway leads the partition
/// (or coordinates the group shard), else to the gateway that does, over [`PeerClient`].
#[async_trait::async_trait]
pub(crate) trait TxnRouter: Send + Sync + std::fmt::Debug + 'static {
    /// Per marker the target's code; a transport failure reads `NOT_LEADER_OR_FOLLOWER`
    /// (retriable).
    async fn write_markers(&self, markers: Vec<MarkerWrite>) -> Vec<ErrorCode>;
    /// Whether `topic`/`partition` is in the ongoing transaction of `transactional_id`
    /// with this producer id and epoch (KIP-890 verification), asked of its coordinator.
    async fn verify(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        topic: &str,
        partition: i32,
    ) -> ErrorCode;
}

/// The gateway's [`TxnRouter`].
#[derive(Debug)]
pub(crate) struct Router {
    /// The broker, set once it is shared ([`Router::attach`]).
    pub(crate) broker: OnceLock<Weak<Broker>>,
    /// Connections to the other gateways.
    pub(crate) peers: PeerClient,
}

/// Where one marker or verification goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Target {
    /// This gateway.
    Here,
    /// Another gateway, by node id.
    Node(i32),
    /// Nobody (an empty view, or this gateway without its lease), or a partition that
    /// cannot exist (a group shard out of range).
    Nowhere(ErrorCode),
}

/// The gateway that writes `m`'s marker in `route`.
fn marker_target(route: &Route, m: &MarkerWrite) -> Target {
    let owner = if m.topic == kafka_txn::OFFSETS_TOPIC {
        match u32::try_from(m.partition) {
            Ok(shard) if shard < GROUP_SHARDS => shard_coordinator(&route.view, shard),
            _ => return Target::Nowhere(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION),
        }
    } else {
        leader(&route.view, &m.topic, m.partition)
    };
    target(route, owner, ErrorCode::NOT_LEADER_OR_FOLLOWER)
}

fn target(route: &Route, owner: Option<i32>, nobody: ErrorCode) -> Target {
    match owner {
        Some(n) if n == route.me && route.owner => Target::Here,
        Some(n) if n != route.me => Target::Node(n),
        _ => Target::Nowhere(nobody),
    }
}

impl Router {
    pub(crate) fn new(peers: PeerClient) -> Router {
        Router {
            broker: OnceLock::new(),
            peers,
        }
    }

    /// Lets the router reach the broker (called once the broker is in its `Arc`).
    pub(crate) fn attach(&self, broker: Weak<Broker>) {
        if let Some(b) = broker.upgrade() {
            self.peers.follow(Arc::clone(&b.membership));
        }
        let _ = self.broker.set(broker);
    }

    fn broker(&self) -> Option<Arc<Broker>> {
        self.broker.get().and_then(Weak::upgrade)
    }

    /// This gateway's markers, one at a time.
    async fn write_here(&self, broker: &Broker, m: &MarkerWrite) -> ErrorCode {
        if m.topic == kafka_txn::OFFSETS_TOPIC {
            // Checked in range by `marker_target`.
            let shard = u32::try_from(m.partition).unwrap_or(0);
            complete_offsets_here(broker, shard, m.producer_id, m.commit).await
        } else {
            broker.txn_partitions.write_marker(broker, m).await
        }
    }

    /// One WriteTxnMarkers v1 request with every marker for `node`; per marker its code,
    /// in the order given.
    async fn write_remote(&self, node: i32, markers: &[&MarkerWrite]) -> Vec<ErrorCode> {
        let request = markers_request(markers);
        match self
            .peers
            .call(node, request.into(), self.peers.timeout())
            .await
        {
            Ok(ResponseBody::WriteTxnMarkers(r)) => {
                let mut codes: BTreeMap<(i64, &str, i32), i16> = BTreeMap::new();
                for marker in &r.markers {
                    for t in &marker.topics {
                        for p in &t.partitions {
                            codes.insert(
                                (marker.producer_id, &*t.name, p.partition_index),
                                p.error_code,
                            );
                        }
                    }
                }
                markers
                    .iter()
                    .map(|m| {
                        codes
                            .get(&(m.producer_id, m.topic.as_str(), m.partition))
                            .map_or(ErrorCode::NOT_LEADER_OR_FOLLOWER, |c| ErrorCode::from(*c))
                    })
                    .collect()
            }
            Ok(_) => vec![ErrorCode::NOT_LEADER_OR_FOLLOWER; markers.len()],
            Err(e) => {
                unreachable_peer(node, "WriteTxnMarkers", &e);
                vec![ErrorCode::NOT_LEADER_OR_FOLLOWER; markers.len()]
            }
        }
    }
}

/// One line per failed call, at debug: the caller retries and counts its retries.
fn unreachable_peer(node: i32, api: &str, e: &PeerError) {
    debug!(node, api, error = %e, "call to another gateway failed");
}

/// The WriteTxnMarkers request for `markers`: one entry per transaction outcome
/// (producer, epoch, commit or abort, coordinator epoch), its partitions by topic.
fn markers_request(markers: &[&MarkerWrite]) -> wm::WriteTxnMarkersRequest {
    // (producer id, epoch, commit, coordinator epoch) -> partitions by topic.
    type Outcome = (i64, i16, bool, i32);
    let mut by_txn: BTreeMap<Outcome, BTreeMap<&str, Vec<i32>>> = BTreeMap::new();
    for m in markers {
        by_txn
            .entry((
                m.producer_id,
                m.producer_epoch,
                m.commit,
                m.coordinator_epoch,
            ))
            .or_default()
            .entry(m.topic.as_str())
            .or_default()
            .push(m.partition);
    }
    wm::WriteTxnMarkersRequest {
        markers: by_txn
            .into_iter()
            .map(
                |((producer_id, producer_epoch, commit, coordinator_epoch), topics)| {
                    wm::WritableTxnMarker {
                        producer_id,
                        producer_epoch,
                        transaction_result: commit,
                        coordinator_epoch,
                        topics: topics
                            .into_iter()
                            .map(|(name, partition_indexes)| wm::WritableTxnMarkerTopic {
                                name: name.into(),
                                partition_indexes,
                                ..Default::default()
                            })
                            .collect(),
                        ..Default::default()
                    }
                },
            )
            .collect(),
        ..Default::default()
    }
}

/// Completes the pending transactional offsets of `producer_id` in group shard `shard`
/// (this gateway coordinates it).
async fn complete_offsets_here(
    broker: &Broker,
    shard: u32,
    producer_id: i64,
    commit: bool,
) -> ErrorCode {
    broker
        .groups
        .complete_txn_offsets(shard, producer_id, commit)
        .await
}

/// Verifies in this gateway's coordinator.
async fn verify_here(
    broker: &Broker,
    transactional_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    topic: &str,
    partition: i32,
) -> ErrorCode {
    broker
        .txns
        .verify(
            transactional_id,
            producer_id,
            producer_epoch,
            topic,
            partition,
        )
        .await
}

#[async_trait::async_trait]
impl TxnRouter for Router {
    async fn write_markers(&self, markers: Vec<MarkerWrite>) -> Vec<ErrorCode> {
        let Some(broker) = self.broker() else {
            return vec![ErrorCode::NOT_LEADER_OR_FOLLOWER; markers.len()];
        };
        let route = broker.route();
        let mut codes = vec![ErrorCode::NONE; markers.len()];
        let mut remote: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
        for (i, m) in markers.iter().enumerate() {
            match marker_target(&route, m) {
                Target::Here => codes[i] = self.write_here(&broker, m).await,
                Target::Node(n) => remote.entry(n).or_default().push(i),
                Target::Nowhere(code) => codes[i] = code,
            }
        }
        let calls = remote.into_iter().map(|(node, idx)| {
            let ms: Vec<&MarkerWrite> = idx.iter().map(|i| &markers[*i]).collect();
            async move { (idx, self.write_remote(node, &ms).await) }
        });
        for (idx, got) in futures_util::future::join_all(calls).await {
            for (i, code) in idx.into_iter().zip(got) {
                codes[i] = code;
            }
        }
        codes
    }

    async fn verify(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        topic: &str,
        partition: i32,
    ) -> ErrorCode {
        let Some(broker) = self.broker() else {
            return ErrorCode::COORDINATOR_NOT_AVAILABLE;
        };
        let route = broker.route();
        let owner = shard_coordinator(&route.view, group_shard(transactional_id));
        match target(&route, owner, ErrorCode::COORDINATOR_NOT_AVAILABLE) {
            Target::Here => {
                verify_here(
                    &broker,
                    transactional_id,
                    producer_id,
                    producer_epoch,
                    topic,
                    partition,
                )
                .await
            }
            Target::Nowhere(code) => code,
            Target::Node(node) => {
                let request = ap::AddPartitionsToTxnRequest {
                    transactions: vec![ap::AddPartitionsToTxnTransaction {
                        transactional_id: transactional_id.into(),
                        producer_id,
                        producer_epoch,
                        verify_only: true,
                        topics: vec![ap::AddPartitionsToTxnTopic {
                            name: topic.into(),
                            partitions: vec![partition],
                            ..Default::default()
                        }],
                        ..Default::default()
                    }],
                    ..Default::default()
                };
                match self
                    .peers
                    .call(node, RequestBody::from(request), self.peers.timeout())
                    .await
                {
                    Ok(ResponseBody::AddPartitionsToTxn(r)) => verified(&r, topic, partition),
                    Ok(_) => ErrorCode::COORDINATOR_NOT_AVAILABLE,
                    Err(e) => {
                        unreachable_peer(node, "AddPartitionsToTxn", &e);
                        ErrorCode::COORDINATOR_NOT_AVAILABLE
                    }
                }
            }
        }
    }
}

/// The code of `topic`/`partition` in a verification answer: the top-level error when
/// there is one, else the partition's (missing: INVALID_TXN_STATE, it was not verified).
fn verified(
    r: &kafka_protocol::messages::add_partitions_to_txn_response::AddPartitionsToTxnResponse,
    topic: &str,
    partition: i32,
) -> ErrorCode {
    if r.error_code != 0 {
        return ErrorCode::from(r.error_code);
    }
    r.results_by_transaction
        .iter()
        .flat_map(|t| &t.topic_results)
        .filter(|t| t.name == topic)
        .flat_map(|t| &t.results_by_partition)
        .find(|p| p.partition_index == partition)
        .map_or(ErrorCode::INVALID_TXN_STATE, |p| {
            ErrorCode::from(p.partition_error_code)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_store::cluster::{LiveView, Member};

    fn route(me: i32, ids: &[i32], owner: bool) -> Route {
        let members = ids
            .iter()
            .map(|&node_id| Member {
                node_id,
                epoch: 1,
                listeners: Vec::new(),
            })
            .collect();
        Route {
            view: Arc::new(LiveView {
                members,
                version: 1,
            }),
            me,
            owner,
        }
    }

    fn marker(topic: &str, partition: i32, pid: i64, commit: bool) -> MarkerWrite {
        MarkerWrite {
            topic: topic.into(),
            partition,
            producer_id: pid,
            producer_epoch: 3,
            coordinator_epoch: 7,
            commit,
        }
    }

    #[test]
    fn markers_go_to_the_leader_and_offsets_to_the_shard_coordinator() {
        let r = route(1, &[1, 2, 3], true);
        for p in 0..32 {
            let m = marker("t", p, 1, true);
            let expected = match leader(&r.view, "t", p) {
                Some(1) => Target::Here,
                Some(n) => Target::Node(n),
                None => unreachable!("three members"),
            };
            assert_eq!(marker_target(&r, &m), expected);
        }
        for shard in 0..GROUP_SHARDS {
            let m = marker(kafka_txn::OFFSETS_TOPIC, shard as i32, 1, true);
            let expected = match shard_coordinator(&r.view, shard) {
                Some(1) => Target::Here,
                Some(n) => Target::Node(n),
                None => unreachable!("three members"),
            };
            assert_eq!(marker_target(&r, &m), expected);
        }
        let out_of_range = marker(kafka_txn::OFFSETS_TOPIC, GROUP_SHARDS as i32, 1, true);
        assert_eq!(
            marker_target(&r, &out_of_range),
            Target::Nowhere(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
        );
        // Without its lease this gateway writes nothing; an empty view has no leader.
        let lost = route(1, &[1], false);
        assert_eq!(
            marker_target(&lost, &marker("t", 0, 1, true)),
            Target::Nowhere(ErrorCode::NOT_LEADER_OR_FOLLOWER)
        );
        let empty = route(1, &[], true);
        assert_eq!(
            marker_target(&empty, &marker("t", 0, 1, true)),
            Target::Nowhere(ErrorCode::NOT_LEADER_OR_FOLLOWER)
        );
    }

    #[test]
    fn one_request_carries_every_marker_grouped_by_transaction_and_topic() {
        let ms = [
            marker("a", 0, 1, true),
            marker("b", 2, 1, true),
            marker("a", 1, 1, true),
            marker("a", 0, 2, false),
        ];
        let refs: Vec<&MarkerWrite> = ms.iter().collect();
        let r = markers_request(&refs);
        assert_eq!(r.markers.len(), 2);
        let first = &r.markers[0];
        assert_eq!(
            (
                first.producer_id,
                first.producer_epoch,
                first.transaction_result
            ),
            (1, 3, true)
        );
        assert_eq!(first.coordinator_epoch, 7);
        let topics: Vec<(&str, &[i32])> = first
            .topics
            .iter()
            .map(|t| (&*t.name, t.partition_indexes.as_slice()))
            .collect();
        assert_eq!(topics, [("a", &[0, 1][..]), ("b", &[2][..])]);
        assert!(!r.markers[1].transaction_result);
    }

    #[test]
    fn a_verification_answer_reads_its_partition() {
        use kafka_protocol::messages::add_partitions_to_txn_response as r;
        let answer = |top: i16, code: i16| r::AddPartitionsToTxnResponse {
            error_code: top,
            results_by_transaction: vec![r::AddPartitionsToTxnResult {
                transactional_id: "tx".into(),
                topic_results: vec![r::AddPartitionsToTxnTopicResult {
                    name: "t".into(),
                    results_by_partition: vec![r::AddPartitionsToTxnPartitionResult {
                        partition_index: 4,
                        partition_error_code: code,
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(verified(&answer(0, 0), "t", 4), ErrorCode::NONE);
        assert_eq!(
            verified(&answer(0, ErrorCode::PRODUCER_FENCED.code()), "t", 4),
            ErrorCode::PRODUCER_FENCED
        );
        assert_eq!(
            verified(
                &answer(ErrorCode::CLUSTER_AUTHORIZATION_FAILED.code(), 0),
                "t",
                4
            ),
            ErrorCode::CLUSTER_AUTHORIZATION_FAILED
        );
        assert_eq!(
            verified(&answer(0, 0), "t", 5),
            ErrorCode::INVALID_TXN_STATE
        );
    }
}
