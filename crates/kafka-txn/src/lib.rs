//! Kafka's transaction coordinator as a deterministic state machine, with no I/O and no
//! clock of its own: the caller passes `now` and carries out the [`Effect`]s it returns.
//!
//! # The model
//!
//! A transactional id lives in one shard (the shard function is given to
//! [`TxnCoordinator::new`]); a process coordinates the ids of the shards it has loaded
//! ([`TxnCoordinator::load`]) and answers NOT_COORDINATOR for the rest. Per id the machine
//! keeps a [`TxnMetadata`]: the producer id and epoch handed out, the transaction timeout,
//! the partitions of the current transaction and its [`TxnState`]:
//!
//! ```text
//! (new) -> Empty -> Ongoing -> PrepareCommit -> CompleteCommit -> Ongoing -> ...
//!                          \-> PrepareAbort  -> CompleteAbort  /
//! Empty / Complete* idle past the expiration -> deleted (Dead)
//! ```
//!
//! InitProducerId hands out the id's producer id with epoch 0, then a bumped epoch on
//! each call (a new producer id once the epoch is exhausted); on an Ongoing transaction it
//! fences instead: epoch bump, PrepareAbort, markers with the bumped epoch, and the
//! retriable CONCURRENT_TRANSACTIONS so the producer comes back for the epoch after. The
//! first AddPartitionsToTxn/AddOffsetsToTxn (the latter as the partition
//! `(OFFSETS_TOPIC, group shard)`) opens the transaction; EndTxn moves it to Prepare*.
//! A transaction older than its timeout is aborted the same way a fence aborts it.
//! The error codes follow Kafka's coordinator; see each method.
//!
//! # What the driver does
//!
//! 1. Feeds requests ([`TxnCoordinator::init_producer_id`], `add_partitions`, `end_txn`),
//!    reads ([`TxnCoordinator::describe`], `list`, `verify`), shard moves (`load`,
//!    `unload`) and the clock ([`TxnCoordinator::tick`] at
//!    [`TxnCoordinator::next_deadline`], read again after every call), and carries out
//!    the returned effects in order.
//! 2. [`Effect::Persist`]: writes the state (its [`snapshot`] encoding; `None` deletes the
//!    id) to the id's shard, then calls [`TxnCoordinator::written`] with the outcome. A
//!    state is applied only once written, and an id has at most one write in flight: every
//!    other request for it answers CONCURRENT_TRANSACTIONS meanwhile (after the producer
//!    id and epoch checks, in Kafka's order). Complete* states and deletions must be
//!    retried by the driver until they succeed or the shard is unloaded (a failure
//!    reported for them keeps them pending); a failed write of a request's transition
//!    answers that request COORDINATOR_NOT_AVAILABLE and leaves the durable state
//!    unchanged; a failed abort of a timed-out transaction is tried again at a later
//!    tick.
//! 3. [`Effect::Reply`]: answers the request. Every request is answered exactly once:
//!    at once in the returned effects, or when its write finishes, or NOT_COORDINATOR
//!    when its shard is unloaded first.
//! 4. [`Effect::WriteMarkers`]: writes a commit or abort marker to every partition of the
//!    job (retrying until each partition has it, or the partition is gone), then calls
//!    [`TxnCoordinator::markers_done`]; the machine then persists the Complete* state.
//!    [`Effect::CancelMarkers`]: stops a job (its shard was unloaded; the next owner
//!    restarts it from the stored Prepare* state with its own coordinator epoch).
//!
//! # Bounds
//!
//! [`TxnConfig`]: ids held (a new id beyond `max_transactional_ids` gets the retriable
//! COORDINATOR_NOT_AVAILABLE while expired ids are deleted), transactions open at once
//! (`max_open_txns`: opening one more gets CONCURRENT_TRANSACTIONS), partitions per
//! transaction (`max_partitions_per_txn`: INVALID_REQUEST; Kafka has no such bound). The
//! machine's other maps hold at most one write and one marker job per id. States brought
//! by [`TxnCoordinator::load`] are always taken (they are durable transactions), so the
//! id count may exceed its bound after a takeover; new ids are refused until it is back
//! under.

use kafka_protocol::ErrorCode;
use std::collections::BTreeSet;

mod coordinator;
pub use coordinator::TxnCoordinator;

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
    /// Largest transaction timeout a producer may ask for (Kafka's
    /// `transaction.max.timeout.ms`, default 900 000); above it, or at 0 or below,
    /// InitProducerId answers INVALID_TRANSACTION_TIMEOUT.
    pub max_timeout_ms: i32,
    /// Idle (Empty or Complete*) transactional ids are deleted after this (Kafka's
    /// `transactional.id.expiration.ms`, default 7 days).
    pub id_expiration_ms: Millis,
    /// How often timers are looked at: timed-out transactions and expired ids (Kafka's
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`, default 10 000).
    pub abort_check_interval_ms: Millis,
    /// Partitions one transaction may hold (default 10 000; Kafka has no such bound). An
    /// add beyond it answers INVALID_REQUEST for the request's partitions.
    pub max_partitions_per_txn: usize,
    /// Transactional ids this coordinator keeps (default 100 000). A new id beyond it
    /// answers COORDINATOR_NOT_AVAILABLE (retriable) while expired ids are deleted.
    pub max_transactional_ids: usize,
    /// Transactions open (Ongoing or ending) at once on this coordinator (default
    /// 10 000). An add that would open one more answers CONCURRENT_TRANSACTIONS
    /// (retriable).
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
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
        }
    }

    /// The state named `name` (Kafka's names, exact case).
    pub fn parse(name: &str) -> Option<TxnState> {
        TxnState::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Every state.
    pub const ALL: [TxnState; 7] = [
        TxnState::Empty,
        TxnState::Ongoing,
        TxnState::PrepareCommit,
        TxnState::PrepareAbort,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
        TxnState::Dead,
    ];
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
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

/// A stored state that does not decode.
#[derive(Debug, thiserror::Error)]
#[error("bad transaction state: {0}")]
pub struct SnapshotError(pub String);

pub mod snapshot;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
