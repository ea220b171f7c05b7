//! Transactions: the coordinator driver ([`coordinator`]), the partition side
//! ([`partitions`]: what each led partition knows of open and aborted transactions, the
//! last stable offset, markers), and the [`Router`] that carries markers and
//! verifications to the gateway that leads each partition.

pub(crate) mod coordinator;
pub(crate) mod partitions;

use crate::broker::Broker;
use crate::peer::PeerClient;
use kafka_protocol::ErrorCode;
use std::sync::{OnceLock, Weak};

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

impl Router {
    pub(crate) fn new(peers: PeerClient) -> Router {
        Router {
            broker: OnceLock::new(),
            peers,
        }
    }

    /// Lets the router reach the broker (called once the broker is in its `Arc`).
    pub(crate) fn attach(&self, broker: Weak<Broker>) {
        let _ = self.broker.set(broker);
    }
}

#[async_trait::async_trait]
impl TxnRouter for Router {
    async fn write_markers(&self, markers: Vec<MarkerWrite>) -> Vec<ErrorCode> {
        vec![ErrorCode::NOT_LEADER_OR_FOLLOWER; markers.len()]
    }

    async fn verify(
        &self,
        _transactional_id: &str,
        _producer_id: i64,
        _producer_epoch: i16,
        _topic: &str,
        _partition: i32,
    ) -> ErrorCode {
        ErrorCode::INVALID_TXN_STATE
    }
}
