//! The storage seam: what the broker needs from a backend, and nothing about Kafka framing.
//!
//! Two traits, owned here and implemented by the embedded in-memory store
//! ([`memory::MemoryStore`]) and by the Iggy bridge:
//!
//! - [`LogStore`]: topics, partitions, appending record batches, reading them back by
//!   offset, watermarks, timestamp lookups, topic configuration, record deletion.
//! - [`OffsetStore`]: committed consumer-group offsets.
//! - [`cluster::Membership`]: which gateways sharing the store are alive (several
//!   gateways in front of one Iggy).
//!
//! Batches cross this seam in Kafka's record batch v2 format as [`ValidBatch`]es: checked
//! whole once ([`check_batches`]), with their header parsed and their records
//! decompressed, so no store checks or decompresses them again. The store assigns offsets: it rewrites the base
//! offset of each appended batch, so a batch produced with base offset 0 comes back from
//! [`LogStore::read`] carrying its real offsets. Every method takes `&self`; stores are
//! shared by all connections behind an `Arc`.

mod batch;
pub mod cluster;
pub mod compaction;
pub mod memory;
#[cfg(any(test, feature = "test-suite"))]
pub mod suite;
pub mod topic_config;
pub mod txn_index;

pub use batch::{
    Prepared, RecordSink, RecordsSummary, SinkFor, ValidBatch, ValidBatches, check_batches,
    check_batches_with,
};
pub use topic_config::{
    CleanupPolicy, CompressionType, ConfigError, MessageTimestampType, TopicConfig,
};

use async_trait::async_trait;
use bytes::Bytes;
use kafka_protocol::ErrorCode;
use kafka_records::RecordBatch;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use tokio::sync::watch;

/// A topic to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTopic {
    /// Topic name (already validated by the broker).
    pub name: String,
    /// Partition count, at least 1.
    pub partitions: i32,
    /// Settings.
    pub config: TopicConfig,
}

/// A topic as the store knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    /// Topic name.
    pub name: String,
    /// Stable, non-zero topic id (Kafka's topic UUID) as a 128-bit integer.
    pub id: u128,
    /// Partition count.
    pub partitions: i32,
    /// Settings.
    pub config: TopicConfig,
}

/// Where an append landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendOutcome {
    /// Offset assigned to the first record of the first batch.
    pub base_offset: i64,
    /// Log-append time when the topic uses it, else -1.
    pub log_append_time: i64,
    /// The partition's log start offset after the append.
    pub log_start_offset: i64,
}

/// A partition's offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watermarks {
    /// First offset still stored (Kafka's log start offset).
    pub log_start_offset: i64,
    /// Offset the next appended record will get (Kafka's high watermark; there is no
    /// replication, so everything appended is committed).
    pub high_watermark: i64,
}

/// What a read returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOutcome {
    /// Offsets at the time of the read.
    pub watermarks: Watermarks,
    /// Whole record batches, in offset order, the first one containing the requested
    /// offset (it may start before it, as in Kafka; clients skip the earlier records).
    /// Their total size stays within `max_bytes`, except that the first batch is always
    /// returned whole so a consumer can make progress (KIP-74).
    pub batches: Vec<Bytes>,
}

impl ReadOutcome {
    /// Total bytes of the batches.
    pub fn len(&self) -> usize {
        self.batches.iter().map(Bytes::len).sum()
    }

    /// Whether no batch was returned.
    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }
}

/// A record found by timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampHit {
    /// The record's offset.
    pub offset: i64,
    /// Its timestamp.
    pub timestamp: i64,
}

/// A committed consumer-group offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    /// Next offset the group will read.
    pub offset: i64,
    /// Leader epoch the consumer saw, -1 when unknown.
    pub leader_epoch: i32,
    /// Free-form metadata the client attached (nullable in Kafka; `None` here).
    pub metadata: Option<String>,
    /// When it was committed, in milliseconds since the epoch.
    pub commit_timestamp: i64,
}

/// Failures a store reports; each maps to the Kafka error code a broker would answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The topic or partition does not exist.
    #[error("unknown topic or partition: {topic}/{partition}")]
    UnknownTopicOrPartition { topic: String, partition: i32 },
    /// The topic id does not exist.
    #[error("unknown topic id {id:032x}")]
    UnknownTopicId { id: u128 },
    /// The topic exists already.
    #[error("topic {0} already exists")]
    TopicAlreadyExists(String),
    /// A partition count that is not allowed (not above the current one, or over a limit).
    #[error("invalid partitions: {0}")]
    InvalidPartitions(String),
    /// A configuration value out of range or not supported.
    #[error("invalid config: {0}")]
    InvalidConfig(String),
    /// The requested offset is outside the stored range.
    #[error("offset {offset} out of range [{log_start_offset}, {high_watermark}]")]
    OffsetOutOfRange {
        offset: i64,
        log_start_offset: i64,
        high_watermark: i64,
    },
    /// A batch larger than the topic's `max.message.bytes`.
    #[error("batch of {size} bytes exceeds max.message.bytes {max}")]
    MessageTooLarge { size: usize, max: usize },
    /// The batch bytes are not a valid record batch.
    #[error("corrupt batch: {0}")]
    CorruptBatch(String),
    /// A bound of the store is reached (topics, partitions, memory); retry later or
    /// raise the limit.
    #[error("store limit reached: {0}")]
    LimitReached(String),
    /// The backend is unreachable or busy; the client should retry.
    #[error("backend unavailable: {0}")]
    Unavailable(String),
    /// The backend did not answer in time; the write may or may not have landed.
    #[error("backend timed out: {0}")]
    Timeout(String),
    /// The backend refused the credentials or the operation.
    #[error("not authorized: {0}")]
    Unauthorized(String),
    /// Anything else.
    #[error("internal store error: {0}")]
    Internal(String),
}

impl StoreError {
    /// The Kafka error code for this failure.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            StoreError::UnknownTopicOrPartition { .. } => ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            StoreError::UnknownTopicId { .. } => ErrorCode::UNKNOWN_TOPIC_ID,
            StoreError::TopicAlreadyExists(_) => ErrorCode::TOPIC_ALREADY_EXISTS,
            StoreError::InvalidPartitions(_) => ErrorCode::INVALID_PARTITIONS,
            StoreError::InvalidConfig(_) => ErrorCode::INVALID_CONFIG,
            StoreError::OffsetOutOfRange { .. } => ErrorCode::OFFSET_OUT_OF_RANGE,
            StoreError::MessageTooLarge { .. } => ErrorCode::MESSAGE_TOO_LARGE,
            StoreError::CorruptBatch(_) => ErrorCode::CORRUPT_MESSAGE,
            StoreError::LimitReached(_) => ErrorCode::POLICY_VIOLATION,
            StoreError::Unavailable(_) => ErrorCode::LEADER_NOT_AVAILABLE,
            StoreError::Timeout(_) => ErrorCode::REQUEST_TIMED_OUT,
            StoreError::Unauthorized(_) => ErrorCode::TOPIC_AUTHORIZATION_FAILED,
            StoreError::Internal(_) => ErrorCode::UNKNOWN_SERVER_ERROR,
        }
    }
}

/// Result alias for store calls.
pub type StoreResult<T> = Result<T, StoreError>;

/// An append that holds its place in its partition's order and is confirmed later
/// (see [`LogStore::submit`]). It owns everything it needs, so it can be awaited after
/// the call that made it, or dropped: a dropped one may still land.
pub type PendingAppend = Pin<Box<dyn Future<Output = StoreResult<AppendOutcome>> + Send>>;

/// The log: topics, partitions and their record batches.
#[async_trait]
pub trait LogStore: Send + Sync + 'static {
    /// A short name for logs ("memory", "iggy").
    fn name(&self) -> &'static str;

    /// Creates a topic; with `validate_only` checks everything and changes nothing.
    async fn create_topic(&self, topic: NewTopic, validate_only: bool) -> StoreResult<TopicInfo>;

    /// Deletes a topic and its records.
    async fn delete_topic(&self, name: &str) -> StoreResult<()>;

    /// Looks a topic up by name.
    async fn topic(&self, name: &str) -> StoreResult<Option<TopicInfo>>;

    /// Looks a topic up by id.
    async fn topic_by_id(&self, id: u128) -> StoreResult<Option<TopicInfo>>;

    /// Every topic, sorted by name.
    async fn topics(&self) -> StoreResult<Vec<TopicInfo>>;

    /// Raises the partition count to `total`; with `validate_only` changes nothing.
    async fn create_partitions(
        &self,
        name: &str,
        total: i32,
        validate_only: bool,
    ) -> StoreResult<()>;

    /// Replaces a topic's settings.
    async fn set_topic_config(&self, name: &str, config: TopicConfig) -> StoreResult<()>;

    /// Appends whole record batches, checked by [`check_batches`], to one partition, in
    /// order, assigning consecutive offsets. `now_ms` is the broker's clock, used for
    /// retention and log-append time.
    async fn append(
        &self,
        topic: &str,
        partition: i32,
        batches: Vec<ValidBatch>,
        now_ms: i64,
    ) -> StoreResult<AppendOutcome>;

    /// Work on a checked batch of `topic`'s `partition` that can be done before its
    /// append, on the thread that checked it (the broker's validation threads for large
    /// or compressed requests, where the records are still in the cache), kept with the
    /// batch ([`ValidBatch::with_prepared`]) for [`LogStore::append`] or
    /// [`LogStore::submit`] to use. An append must have the same outcome with or without
    /// it (a clone of the batch, a batch prepared by another store, a failed
    /// preparation). The default prepares nothing.
    /// The default feeds the batch's records to [`LogStore::preparer`]'s sink.
    fn prepare(&self, topic: &str, partition: i32, batch: &ValidBatch) -> Option<Prepared> {
        let epoch = batch.header().partition_leader_epoch;
        let mut sink = self.preparer(topic, partition, batch.batch(), batch.section(), epoch)?;
        for record in batch.batch().record_refs_in(batch.section()) {
            sink.record(&record.ok()?);
        }
        sink.finish()
    }

    /// The per-record form of [`LogStore::prepare`], for a batch being checked: a sink
    /// that takes the batch's records during the check's own walk
    /// ([`check_batches_with`]), so the records are read once for both. `batch` and
    /// `section` are the decoded batch and its uncompressed records, before they are
    /// read; the batch's own checks are not all done yet. `leader_epoch` is the
    /// partition leader epoch the batch is appended with, which may differ from the one
    /// `batch` carries: the broker stamps its own ([`ValidBatch::with_leader_epoch`]) and
    /// keeps what the sink prepared on the stamped batch, so a preparation that records
    /// the epoch must record this one. The default prepares nothing.
    fn preparer(
        &self,
        topic: &str,
        partition: i32,
        batch: &RecordBatch,
        section: &Bytes,
        leader_epoch: i32,
    ) -> Option<Box<dyn RecordSink>> {
        let _ = (topic, partition, batch, section, leader_epoch);
        None
    }

    /// Starts an append (same arguments and checks as [`LogStore::append`]) and returns
    /// once the batches hold their place in the partition's order: any append or submit
    /// to the same partition that starts after this returns lands after them. The
    /// returned future gives what `append` would have returned. An error from this call
    /// means nothing was appended and no place was taken.
    ///
    /// When the returned future fails, the later submits of the same idempotent
    /// producer (producer id and epoch) to the partition that are still waiting fail
    /// too: the broker has a producer's next batches in flight behind one that may have
    /// failed, and none of them may land after a gap.
    ///
    /// This lets the broker overlap a connection's consecutive Produce requests with a
    /// backend that answers over the network, without reordering them. The default
    /// appends at once, which keeps the order trivially.
    async fn submit(
        &self,
        topic: &str,
        partition: i32,
        batches: Vec<ValidBatch>,
        now_ms: i64,
    ) -> StoreResult<PendingAppend> {
        let outcome = self.append(topic, partition, batches, now_ms).await?;
        Ok(Box::pin(std::future::ready(Ok(outcome))))
    }

    /// Reads whole batches from `offset` (which must be within
    /// `[log_start_offset, high_watermark]`; at the high watermark the result is empty),
    /// up to about `max_bytes` (see [`ReadOutcome::batches`]).
    async fn read(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_bytes: usize,
    ) -> StoreResult<ReadOutcome>;

    /// The partition's log start offset and high watermark.
    async fn watermarks(&self, topic: &str, partition: i32) -> StoreResult<Watermarks>;

    /// The first record whose timestamp is at least `timestamp`, if any.
    async fn offset_for_timestamp(
        &self,
        topic: &str,
        partition: i32,
        timestamp: i64,
    ) -> StoreResult<Option<TimestampHit>>;

    /// The record with the largest timestamp (the first such one), if any.
    async fn max_timestamp(&self, topic: &str, partition: i32)
    -> StoreResult<Option<TimestampHit>>;

    /// Deletes records below `before_offset` (-1: up to the high watermark) and returns
    /// the new log start offset.
    async fn delete_records(
        &self,
        topic: &str,
        partition: i32,
        before_offset: i64,
    ) -> StoreResult<i64>;

    /// A receiver of the partition's high watermark, changed on every append, for long
    /// polls. `None` when the backend cannot notify; the broker then re-reads at
    /// [`LogStore::poll_interval`].
    fn watch(&self, topic: &str, partition: i32) -> Option<watch::Receiver<i64>>;

    /// How often a waiting fetch re-reads a backend that cannot notify, or whose
    /// notifications miss some appends (see [`LogStore::notifies_every_append`]).
    fn poll_interval(&self) -> Duration {
        Duration::from_millis(50)
    }

    /// Whether [`LogStore::watch`] fires for every append. A backend that other
    /// writers share (the Iggy bridge: native Iggy producers write to the same
    /// partitions) returns `false`; a waiting fetch then also re-reads every
    /// [`LogStore::poll_interval`].
    fn notifies_every_append(&self) -> bool {
        true
    }

    /// Whether `topic` ever held a transactional batch (a sticky flag: kept when the topic's
    /// settings change or partitions are added, gone with the topic). Stores that do not
    /// keep the flag answer `true`, so callers look for transactions everywhere. Stores
    /// that keep it answer [`StoreError::UnknownTopicOrPartition`] for an unknown topic.
    async fn is_transactional(&self, _topic: &str) -> StoreResult<bool> {
        Ok(true)
    }

    /// Sets the sticky transactional flag of `topic`, before its first transactional batch.
    async fn mark_transactional(&self, _topic: &str) -> StoreResult<()> {
        Ok(())
    }

    /// Whether the backend can serve requests now: a round trip to a remote store, a
    /// no-op for an in-process one. The gateway's readiness endpoint reports it.
    async fn ping(&self) -> StoreResult<()> {
        Ok(())
    }
}

/// Committed consumer-group offsets. Offsets outlive group membership.
#[async_trait]
pub trait OffsetStore: Send + Sync + 'static {
    /// Stores offsets for one group (all or nothing for one call).
    async fn commit(
        &self,
        group: &str,
        offsets: Vec<(String, i32, CommittedOffset)>,
    ) -> StoreResult<()>;

    /// The committed offset of one partition.
    async fn fetch(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
    ) -> StoreResult<Option<CommittedOffset>>;

    /// Every committed offset of a group, sorted by topic and partition.
    async fn fetch_all(&self, group: &str) -> StoreResult<Vec<(String, i32, CommittedOffset)>>;

    /// Deletes the committed offsets of the given partitions.
    async fn delete(&self, group: &str, partitions: &[(String, i32)]) -> StoreResult<()>;

    /// Deletes every offset of a group.
    async fn delete_group(&self, group: &str) -> StoreResult<()>;

    /// Groups that have committed offsets, sorted.
    async fn groups(&self) -> StoreResult<Vec<String>>;

    /// Makes what this gateway knows of coordinator shard `shard` (see
    /// [`cluster::group_shard`]) current: reads what other gateways sharing the store
    /// wrote to it (offsets and group states). The broker calls it when this gateway
    /// becomes the coordinator of the shard, before it serves any group of the shard;
    /// afterwards this gateway is the shard's only writer until it calls
    /// [`OffsetStore::release_shard`].
    async fn acquire_shard(&self, shard: u32) -> StoreResult<()>;

    /// This gateway is no longer the coordinator of `shard`; the store may forget what
    /// it cached of it (the next [`OffsetStore::acquire_shard`] reads it again).
    async fn release_shard(&self, shard: u32);

    /// Stores the coordinator's state of `group` (an opaque blob the broker encodes), or
    /// deletes it with `None`, in the group's shard. Last write per group wins.
    async fn put_group_state(&self, group: &str, state: Option<Bytes>) -> StoreResult<()>;

    /// Every stored group state of `shard`, sorted by group.
    async fn group_states(&self, shard: u32) -> StoreResult<Vec<(String, Bytes)>>;

    /// Stores the transaction coordinator's state of `transactional_id` (an opaque blob), or
    /// deletes it with `None`, in shard [`cluster::group_shard`]`(transactional_id)`. Durable
    /// when it returns. Last write per id wins.
    async fn put_txn_state(
        &self,
        _transactional_id: &str,
        _state: Option<Bytes>,
    ) -> StoreResult<()> {
        Err(txn_unsupported())
    }

    /// Every stored transaction state of `shard`, sorted by transactional id.
    async fn txn_states(&self, _shard: u32) -> StoreResult<Vec<(String, Bytes)>> {
        Ok(Vec::new())
    }

    /// Claims the next transaction-coordinator epoch of `shard` (one more than any claimed
    /// before, durably), called by a gateway that starts coordinating the shard.
    async fn claim_txn_epoch(&self, _shard: u32) -> StoreResult<i32> {
        Ok(0)
    }

    /// Replaces the offsets `producer_id` committed for `group` inside its open transaction.
    async fn put_pending_offsets(
        &self,
        _group: &str,
        _producer_id: i64,
        _offsets: Vec<(String, i32, CommittedOffset)>,
    ) -> StoreResult<()> {
        Err(txn_unsupported())
    }

    /// Ends `producer_id`'s transaction for `group` in one write: on commit its pending
    /// offsets become committed, and the pending set is gone either way. Nothing pending:
    /// nothing happens.
    async fn complete_pending_offsets(
        &self,
        _group: &str,
        _producer_id: i64,
        _commit: bool,
    ) -> StoreResult<()> {
        Err(txn_unsupported())
    }

    /// Every pending offset set of the groups of `shard`.
    async fn pending_offsets(&self, _shard: u32) -> StoreResult<Vec<PendingOffsets>> {
        Ok(Vec::new())
    }
}

/// Offsets committed inside an open transaction, not yet visible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingOffsets {
    /// The consumer group.
    pub group: String,
    /// The transactional producer.
    pub producer_id: i64,
    /// Topic, partition and offset, as a commit would store them.
    pub offsets: Vec<(String, i32, CommittedOffset)>,
}

fn txn_unsupported() -> StoreError {
    StoreError::Internal("transactions are not supported by this store".into())
}
