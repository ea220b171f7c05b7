//! Kafka's transaction coordinator as a sans-IO state machine.
//!
//! (Skeleton: the transitions are filled in by the coordinator work.)

#![allow(clippy::todo)] // skeleton: filled in by the coordinator work

use kafka_protocol::ErrorCode;
use std::collections::BTreeSet;

/// Milliseconds since the Unix epoch.
pub type Millis = i64;
/// A topic partition.
pub type TopicPartition = (String, i32);
/// The topic name standing for a group-coordinator shard: `(OFFSETS_TOPIC, shard)` is the
/// "partition" a transaction adds with AddOffsetsToTxn.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// Bounds and timers of the coordinator.
#[derive(Debug, Clone)]
pub struct TxnConfig {
    /// Largest transaction timeout a producer may ask for (`transaction.max.timeout.ms`).
    pub max_timeout_ms: i32,
    /// Idle transactional ids are forgotten after this (`transactional.id.expiration.ms`).
    pub id_expiration_ms: Millis,
    /// How often timed-out transactions are looked for
    /// (`transaction.abort.timed.out.transaction.cleanup.interval.ms`).
    pub abort_check_interval_ms: Millis,
    /// Partitions one transaction may hold.
    pub max_partitions_per_txn: usize,
    /// Transactional ids this coordinator keeps.
    pub max_transactional_ids: usize,
    /// Transactions open at once on this coordinator.
    pub max_open_txns: usize,
}

impl Default for TxnConfig {
    fn default() -> Self {
        TxnConfig {
            max_timeout_ms: 900_000,
            id_expiration_ms: 604_800_000,
            abort_check_interval_ms: 10_000,
            max_partitions_per_txn: 10_000,
            max_transactional_ids: 100_000,
            max_open_txns: 10_000,
        }
    }
}

/// Where a transactional id's current transaction stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnState {
    /// No transaction yet in this epoch.
    Empty,
    /// Partitions added, not ended.
    Ongoing,
    /// Committing: markers being written.
    PrepareCommit,
    /// Aborting: markers being written.
    PrepareAbort,
    /// Committed.
    CompleteCommit,
    /// Aborted.
    CompleteAbort,
    /// Expired, being removed.
    Dead,
}

impl TxnState {
    /// Kafka's name of the state ("Ongoing", "PrepareCommit", ...).
    pub fn name(self) -> &'static str {
        todo!("kafka-txn")
    }
    /// The state named `name` (Kafka's names).
    pub fn parse(name: &str) -> Option<TxnState> {
        let _ = name;
        todo!("kafka-txn")
    }
}

/// A transactional id's durable state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMetadata {
    /// The id.
    pub transactional_id: String,
    /// Current producer id.
    pub producer_id: i64,
    /// The producer id before the last one was handed out (epoch exhaustion), or -1.
    pub last_producer_id: i64,
    /// Current epoch.
    pub producer_epoch: i16,
    /// The epoch before the last bump, or -1.
    pub last_producer_epoch: i16,
    /// Transaction timeout asked by the producer.
    pub timeout_ms: i32,
    /// State.
    pub state: TxnState,
    /// Partitions of the current transaction.
    pub partitions: BTreeSet<TopicPartition>,
    /// When the current transaction started (first partition added), or -1.
    pub start_ms: Millis,
    /// Last state change.
    pub last_update_ms: Millis,
}

/// Identifies a request waiting for its reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RequestId(pub u64);
/// Identifies a state write in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WriteId(pub u64);
/// Identifies a marker job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct JobId(pub u64);

/// InitProducerId with a transactional id.
#[derive(Debug, Clone)]
pub struct InitProducerId {
    /// Reply to.
    pub request: RequestId,
    /// The id.
    pub transactional_id: String,
    /// Transaction timeout asked.
    pub timeout_ms: i32,
    /// v3+: the producer id and epoch the client has, if any.
    pub expected: Option<(i64, i16)>,
    /// Request version.
    pub version: i16,
    /// A producer id the machine may hand out if it needs a new one.
    pub fresh_producer_id: i64,
}

/// AddPartitionsToTxn (client versions) or AddOffsetsToTxn (one `(OFFSETS_TOPIC, shard)`).
#[derive(Debug, Clone)]
pub struct AddPartitions {
    /// Reply to.
    pub request: RequestId,
    /// The id.
    pub transactional_id: String,
    /// Producer id.
    pub producer_id: i64,
    /// Producer epoch.
    pub producer_epoch: i16,
    /// Partitions to add.
    pub partitions: Vec<TopicPartition>,
    /// Request version.
    pub version: i16,
}

/// EndTxn.
#[derive(Debug, Clone)]
pub struct EndTxn {
    /// Reply to.
    pub request: RequestId,
    /// The id.
    pub transactional_id: String,
    /// Producer id.
    pub producer_id: i64,
    /// Producer epoch.
    pub producer_epoch: i16,
    /// Commit (`true`) or abort.
    pub commit: bool,
    /// Request version.
    pub version: i16,
}

/// An answer to a waiting request.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// InitProducerId: the producer id and epoch, or why not.
    ProducerId(Result<(i64, i16), ErrorCode>),
    /// Other requests: one code (AddPartitions: for every partition).
    Code(ErrorCode),
}

/// Markers to write to the partitions of a transaction that is ending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerJob {
    /// The job.
    pub job: JobId,
    /// The id.
    pub transactional_id: String,
    /// Producer id.
    pub producer_id: i64,
    /// Producer epoch the markers carry.
    pub producer_epoch: i16,
    /// Coordinator epoch of the shard.
    pub coordinator_epoch: i32,
    /// Commit or abort.
    pub commit: bool,
    /// Where to write them.
    pub partitions: Vec<TopicPartition>,
}

/// What the driver must do.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Answer a request.
    Reply {
        /// The request.
        request: RequestId,
        /// The answer.
        reply: Reply,
    },
    /// Write a state durably, then call [`TxnCoordinator::written`].
    Persist {
        /// The write.
        write: WriteId,
        /// The id.
        transactional_id: String,
        /// The state, `None` to delete.
        state: Option<TxnMetadata>,
    },
    /// Write markers, then call [`TxnCoordinator::markers_done`].
    WriteMarkers(MarkerJob),
    /// Stop a marker job (the shard was unloaded).
    CancelMarkers(JobId),
}

/// The coordinator of the transactional ids of the loaded shards.
#[derive(Debug)]
pub struct TxnCoordinator {
    config: TxnConfig,
}

impl TxnCoordinator {
    /// A coordinator with no shard loaded.
    pub fn new(config: TxnConfig) -> Self {
        TxnCoordinator { config }
    }
    /// The configuration.
    pub fn config(&self) -> &TxnConfig {
        &self.config
    }
    /// InitProducerId with a transactional id.
    pub fn init_producer_id(&mut self, now: Millis, req: InitProducerId) -> Vec<Effect> {
        let _ = (now, req);
        todo!("kafka-txn")
    }
    /// AddPartitionsToTxn / AddOffsetsToTxn.
    pub fn add_partitions(&mut self, now: Millis, req: AddPartitions) -> Vec<Effect> {
        let _ = (now, req);
        todo!("kafka-txn")
    }
    /// EndTxn.
    pub fn end_txn(&mut self, now: Millis, req: EndTxn) -> Vec<Effect> {
        let _ = (now, req);
        todo!("kafka-txn")
    }
    /// Whether `tp` is in `id`'s ongoing transaction of that producer id and epoch.
    pub fn verify(
        &self,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
        tp: &TopicPartition,
    ) -> ErrorCode {
        let _ = (id, producer_id, producer_epoch, tp);
        todo!("kafka-txn")
    }
    /// A [`Effect::Persist`] finished.
    pub fn written(&mut self, now: Millis, write: WriteId, ok: bool) -> Vec<Effect> {
        let _ = (now, write, ok);
        todo!("kafka-txn")
    }
    /// Every marker of a job is written.
    pub fn markers_done(&mut self, now: Millis, job: JobId) -> Vec<Effect> {
        let _ = (now, job);
        todo!("kafka-txn")
    }
    /// Timers: timed-out transactions, expired ids.
    pub fn tick(&mut self, now: Millis) -> Vec<Effect> {
        let _ = now;
        todo!("kafka-txn")
    }
    /// When [`TxnCoordinator::tick`] has something to do next.
    pub fn next_deadline(&self) -> Option<Millis> {
        todo!("kafka-txn")
    }
    /// Takes over `shard` with its stored states.
    pub fn load(
        &mut self,
        now: Millis,
        shard: u32,
        coordinator_epoch: i32,
        states: Vec<TxnMetadata>,
    ) -> Vec<Effect> {
        let _ = (now, shard, coordinator_epoch, states);
        todo!("kafka-txn")
    }
    /// Lets go of `shard`.
    pub fn unload(&mut self, shard: u32) -> Vec<Effect> {
        let _ = shard;
        todo!("kafka-txn")
    }
    /// The state of `id`.
    pub fn describe(&self, id: &str) -> Result<&TxnMetadata, ErrorCode> {
        let _ = id;
        todo!("kafka-txn")
    }
    /// Transactional ids matching the filters (empty filter: any).
    pub fn list(
        &self,
        now: Millis,
        states: &[TxnState],
        producer_ids: &[i64],
        min_duration_ms: i64,
    ) -> Vec<&TxnMetadata> {
        let _ = (now, states, producer_ids, min_duration_ms);
        todo!("kafka-txn")
    }
}

/// A stored state that does not decode.
#[derive(Debug, thiserror::Error)]
#[error("bad transaction state: {0}")]
pub struct SnapshotError(pub String);

/// The stored form of [`TxnMetadata`].
pub mod snapshot {
    use super::{SnapshotError, TxnMetadata};
    use bytes::Bytes;

    /// Encodes a state.
    pub fn encode(m: &TxnMetadata) -> Bytes {
        let _ = m;
        todo!("kafka-txn")
    }
    /// Decodes a state (hostile input: never panics).
    pub fn decode(b: &[u8]) -> Result<TxnMetadata, SnapshotError> {
        let _ = b;
        todo!("kafka-txn")
    }
}
