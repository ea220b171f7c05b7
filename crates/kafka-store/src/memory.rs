//! The embedded store: topics, record batches and committed offsets kept in memory.
//!
//! It lets the gateway run with no backend at all (demos, tests, CI); everything is lost
//! when the process exits. See `docs/embedded-store.md` for limits and behaviour.
//!
//! ```text
//! MemoryStore
//!   topics: RwLock<name -> Topic { id, config, partitions: Vec<Arc<Partition>>, transactional }>
//!   Partition
//!     log:  Mutex<PartitionLog { batches: VecDeque<StoredBatch>, log start, HW, size }>
//!     hw:   watch::Sender<i64>     (wakes long-polling fetches)
//!   offsets: Mutex<group -> (topic, partition) -> CommittedOffset>
//!   group_states, txn_states: Mutex<group or transactional id -> opaque blob>
//!   txn_epochs: Mutex<shard -> last claimed coordinator epoch>
//!   pending_offsets: Mutex<(group, producer id) -> offsets committed in an open transaction>
//! ```
//!
//! Transaction state is as bounded as the group state next to it: the store keeps what the
//! coordinators write (one blob per transactional id, one pending set per group and
//! producer), and the coordinators' own bounds (transactional ids, open transactions,
//! offsets per commit) cap it. Completing a pending set holds the pending and the
//! committed offsets' locks together, so its offsets become committed in the same step
//! that removes it.
//!
//! The topic map is only write-locked by admin calls; an append or read holds its read
//! lock just long enough to clone the partition's `Arc`, then takes that partition's
//! mutex alone, so producers to different partitions never wait on each other. Batches are
//! stored as immutable [`Bytes`], so a read clones reference counts, not records.
//!
//! Topics with `cleanup.policy=compact` are compacted in place by a background cleaner
//! ([`MemoryStore::start_cleaner`], design in the `cleaner` module): it rewrites batches
//! outside the partition lock and swaps them in under it.

use crate::{
    AppendOutcome, CommittedOffset, LogStore, NewTopic, OffsetStore, PendingOffsets, ReadOutcome,
    StoreError, StoreResult, TimestampHit, TopicConfig, TopicInfo, ValidBatch, Watermarks,
};
use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use kafka_records::{BatchHeader, DecodeLimits, RecordBatch, TimestampType};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

mod cleaner;

pub use cleaner::{CleanerConfig, CleanerStats, CleanerTask, PartitionDirt, SWAP_WINDOW_BYTES};

/// Bounds of the embedded store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryStoreConfig {
    /// Topics the store holds at most; creating one more answers
    /// [`StoreError::LimitReached`].
    pub max_topics: usize,
    /// Record batch bytes the store holds at most, over all partitions; an append that
    /// would go beyond answers [`StoreError::LimitReached`] until retention, record
    /// deletion or topic deletion frees room.
    pub max_total_bytes: usize,
    /// How often [`MemoryStore::spawn_retention`] applies `retention.ms` and
    /// `retention.bytes`.
    pub retention_check_interval: Duration,
    /// The log cleaner's budget (compaction of `cleanup.policy=compact` topics).
    pub cleaner: CleanerConfig,
}

impl Default for MemoryStoreConfig {
    /// 10 000 topics, 1 GiB of batches, retention checked every second, the cleaner's
    /// defaults.
    fn default() -> Self {
        Self {
            max_topics: 10_000,
            max_total_bytes: 1 << 30,
            retention_check_interval: Duration::from_secs(1),
            cleaner: CleanerConfig::default(),
        }
    }
}

/// One appended batch with its offsets already assigned.
#[derive(Debug, Clone)]
struct StoredBatch {
    base_offset: i64,
    last_offset: i64,
    /// The header's `maxTimestamp` (the append time under LogAppendTime).
    max_timestamp: i64,
    /// Largest `max_timestamp` of this batch and every batch appended before it, including
    /// batches retention dropped since. It never decreases along the log, which makes it
    /// a valid key for binary search even though record timestamps are not ordered.
    running_max_timestamp: i64,
    log_append_time: bool,
    /// When the store appended it, on the clock the append was given: the time
    /// compaction lags and tombstone horizons count from.
    append_ms: i64,
    bytes: Bytes,
}

/// The mutable state of one partition.
#[derive(Debug, Default)]
struct PartitionLog {
    batches: VecDeque<StoredBatch>,
    log_start_offset: i64,
    high_watermark: i64,
    /// Sum of the stored batch sizes.
    size: usize,
    running_max_timestamp: Option<i64>,
    /// Set when the topic is deleted, so an append that cloned the partition before the
    /// deletion does not write into (and account bytes for) a log nobody can see.
    deleted: bool,
    /// First offset the cleaner has not deduplicated (Kafka's cleaner checkpoint): the
    /// records before it hold at most one record per key.
    clean_offset: i64,
    /// Dirty bytes over cleanable bytes when the cleaner last looked.
    dirty_ratio: Option<f64>,
}

impl PartitionLog {
    fn watermarks(&self) -> Watermarks {
        Watermarks {
            log_start_offset: self.log_start_offset,
            high_watermark: self.high_watermark,
        }
    }

    fn out_of_range(&self, offset: i64) -> StoreError {
        StoreError::OffsetOutOfRange {
            offset,
            log_start_offset: self.log_start_offset,
            high_watermark: self.high_watermark,
        }
    }

    /// Drops the first batch and returns its size.
    fn pop_front(&mut self) -> usize {
        let Some(batch) = self.batches.pop_front() else {
            return 0;
        };
        let freed = batch.bytes.len();
        self.size -= freed;
        let next = self
            .batches
            .front()
            .map_or(self.high_watermark, |b| b.base_offset);
        self.log_start_offset = self.log_start_offset.max(next);
        freed
    }

    /// Applies time and size retention; returns the bytes freed.
    fn apply_retention(&mut self, config: &TopicConfig, now_ms: i64) -> usize {
        let mut freed = 0;
        if config.retention_ms >= 0 {
            let cutoff = now_ms.saturating_sub(config.retention_ms);
            // Time retention may empty the partition: Kafka also rolls and deletes an
            // expired active segment.
            while self
                .batches
                .front()
                .is_some_and(|b| b.max_timestamp < cutoff)
            {
                freed += self.pop_front();
            }
        }
        if let Ok(limit) = usize::try_from(config.retention_bytes) {
            // The last batch stands for Kafka's active segment, which size retention
            // never deletes.
            while self.size > limit && self.batches.len() > 1 {
                freed += self.pop_front();
            }
        }
        freed
    }
}

#[derive(Debug)]
struct Partition {
    log: Mutex<PartitionLog>,
    high_watermark: watch::Sender<i64>,
}

impl Partition {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            log: Mutex::new(PartitionLog::default()),
            high_watermark: watch::Sender::new(0),
        })
    }

    fn lock(&self) -> StoreResult<MutexGuard<'_, PartitionLog>> {
        lock(&self.log)
    }
}

#[derive(Debug)]
struct Topic {
    id: u128,
    config: TopicConfig,
    partitions: Vec<Arc<Partition>>,
    /// Whether the topic ever held a transactional batch (sticky: config changes keep it).
    transactional: bool,
}

#[derive(Debug, Default)]
struct Topics {
    by_name: BTreeMap<String, Topic>,
    names_by_id: HashMap<u128, String>,
}

impl Topics {
    fn info(name: &str, topic: &Topic) -> TopicInfo {
        TopicInfo {
            name: name.to_owned(),
            id: topic.id,
            // The count is bounded by i32 on the way in (create and create_partitions).
            partitions: i32::try_from(topic.partitions.len()).unwrap_or(i32::MAX),
            config: topic.config.clone(),
        }
    }
}

type GroupOffsets = BTreeMap<(String, i32), CommittedOffset>;

/// Offsets committed inside open transactions, per (group, producer id).
type PendingSets = BTreeMap<(String, i64), Vec<(String, i32, CommittedOffset)>>;

/// The in-memory [`LogStore`] and [`OffsetStore`]. Share it behind an `Arc`.
#[derive(Debug)]
pub struct MemoryStore {
    config: MemoryStoreConfig,
    topics: RwLock<Topics>,
    total_bytes: AtomicUsize,
    offsets: Mutex<BTreeMap<String, GroupOffsets>>,
    cleaner: cleaner::CleanerCounters,
    /// Coordinator state per group (opaque to the store).
    group_states: Mutex<BTreeMap<String, Bytes>>,
    /// Transaction coordinator state per transactional id (opaque to the store).
    txn_states: Mutex<BTreeMap<String, Bytes>>,
    /// Last claimed transaction coordinator epoch per shard.
    txn_epochs: Mutex<HashMap<u32, i32>>,
    /// Pending transactional offsets. Locked before `offsets` when both are needed.
    pending_offsets: Mutex<PendingSets>,
    id_counter: AtomicU64,
    id_seed: u64,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new(MemoryStoreConfig::default())
    }
}

fn poisoned() -> StoreError {
    // Only a panic while a lock is held poisons it; the state behind it may be half
    // updated, so refuse to serve it rather than guess.
    StoreError::Internal("memory store lock poisoned".to_owned())
}

fn lock<T>(m: &Mutex<T>) -> StoreResult<MutexGuard<'_, T>> {
    m.lock().map_err(|_| poisoned())
}

fn unknown(topic: &str, partition: i32) -> StoreError {
    StoreError::UnknownTopicOrPartition {
        topic: topic.to_owned(),
        partition,
    }
}

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::CorruptBatch(e.to_string())
}

/// SplitMix64: a cheap, well-mixing bijection, enough to turn a counter and a clock into
/// ids that look random (Kafka tools expect topic ids to be UUID-like).
fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn system_now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Where a timestamp search in one batch should look.
struct Candidate {
    bytes: Bytes,
    base_offset: i64,
    last_offset: i64,
    max_timestamp: i64,
    log_append_time: bool,
}

impl Candidate {
    fn of(batch: &StoredBatch) -> Self {
        Self {
            bytes: batch.bytes.clone(),
            base_offset: batch.base_offset,
            last_offset: batch.last_offset,
            max_timestamp: batch.max_timestamp,
            log_append_time: batch.log_append_time,
        }
    }

    /// The first record at or after `from` satisfying `pred`, decoding the batch unless
    /// every record carries the batch's timestamp (LogAppendTime).
    fn find(&self, from: i64, pred: impl Fn(i64) -> bool) -> StoreResult<Option<TimestampHit>> {
        if self.log_append_time {
            let offset = self.base_offset.max(from);
            return Ok(
                (offset <= self.last_offset && pred(self.max_timestamp)).then_some(TimestampHit {
                    offset,
                    timestamp: self.max_timestamp,
                }),
            );
        }
        let batch = RecordBatch::decode(&self.bytes, &DecodeLimits::default()).map_err(corrupt)?;
        for record in batch.records().map_err(corrupt)? {
            let record = record.map_err(corrupt)?;
            if record.offset >= from && pred(record.timestamp) {
                return Ok(Some(TimestampHit {
                    offset: record.offset,
                    timestamp: record.timestamp,
                }));
            }
        }
        Ok(None)
    }
}

/// Owns the background retention task of a [`MemoryStore`]; dropping it stops the task
/// (its stop signal's sender goes away), [`RetentionTask::stop`] also waits for the end.
#[derive(Debug)]
#[must_use = "the retention task stops when this guard is dropped"]
pub struct RetentionTask {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl RetentionTask {
    /// Stops the task and waits until it has ended (a pass under way completes first).
    pub async fn stop(self) {
        self.stop.send_replace(true);
        // A join error means the task panicked; the panic was reported already and there
        // is nothing left to stop.
        let _ = self.task.await;
    }
}

/// A batch checked and copied, ready to get its offsets.
struct Prepared {
    buf: BytesMut,
    header: BatchHeader,
}

impl MemoryStore {
    /// An empty store with the given bounds.
    pub fn new(config: MemoryStoreConfig) -> Self {
        Self {
            config,
            topics: RwLock::new(Topics::default()),
            total_bytes: AtomicUsize::new(0),
            offsets: Mutex::new(BTreeMap::new()),
            cleaner: cleaner::CleanerCounters::default(),
            group_states: Mutex::new(BTreeMap::new()),
            txn_states: Mutex::new(BTreeMap::new()),
            txn_epochs: Mutex::new(HashMap::new()),
            pending_offsets: Mutex::new(BTreeMap::new()),
            id_counter: AtomicU64::new(0),
            id_seed: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
        }
    }

    /// The bounds the store was built with.
    pub fn config(&self) -> &MemoryStoreConfig {
        &self.config
    }

    /// Record batch bytes currently held, over all partitions.
    pub fn total_bytes(&self) -> usize {
        self.total_bytes.load(Ordering::Acquire)
    }

    /// Starts the background retention task: every
    /// [`MemoryStoreConfig::retention_check_interval`] it calls
    /// [`MemoryStore::apply_retention`] with the system clock.
    ///
    /// The task ends when `shutdown` turns `true` or its sender is dropped, or when the
    /// store itself is dropped (the task holds only a weak reference, so it never keeps
    /// the store alive). Must be called within a tokio runtime.
    pub fn spawn_retention(
        self: &Arc<Self>,
        mut shutdown: watch::Receiver<bool>,
    ) -> JoinHandle<()> {
        let store = Arc::downgrade(self);
        let period = self
            .config
            .retention_check_interval
            .max(Duration::from_millis(1));
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(period);
            // After a stall one pass catches up with everything; a burst would only redo it.
            ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
            loop {
                if *shutdown.borrow_and_update() {
                    return;
                }
                tokio::select! {
                    _ = ticks.tick() => {
                        if !Self::retention_pass(&store) {
                            return;
                        }
                    }
                    changed = shutdown.changed() => {
                        if changed.is_err() {
                            return;
                        }
                    }
                }
            }
        })
    }

    /// Starts the background retention task (see [`MemoryStore::spawn_retention`]) owned
    /// by the returned guard: the task stops when the guard is dropped or
    /// [`RetentionTask::stop`] is awaited. Must be called within a tokio runtime.
    pub fn start_retention(self: &Arc<Self>) -> RetentionTask {
        let (stop, stopped) = watch::channel(false);
        RetentionTask {
            task: self.spawn_retention(stopped),
            stop,
        }
    }

    /// One pass of the background task; `false` once the store is gone.
    fn retention_pass(store: &Weak<Self>) -> bool {
        match store.upgrade() {
            Some(store) => {
                store.apply_retention(system_now_ms());
                true
            }
            None => false,
        }
    }

    /// Applies `retention.ms` and `retention.bytes` to every partition of the topics whose
    /// `cleanup.policy` deletes (`delete`, `compact,delete`) as of `now_ms`:
    /// whole batches are dropped from the front while their largest timestamp is older
    /// than `now_ms - retention.ms`, then while the partition is larger than
    /// `retention.bytes` (never the last batch for size). The log start offset follows.
    pub fn apply_retention(&self, now_ms: i64) {
        // Snapshot under the read lock so admin calls are not held up by the pass.
        let work: Vec<(TopicConfig, Vec<Arc<Partition>>)> = match self.topics.read() {
            Ok(topics) => topics
                .by_name
                .values()
                .filter(|t| {
                    t.config.cleanup_policy.deletes()
                        && (t.config.retention_ms >= 0 || t.config.retention_bytes >= 0)
                })
                .map(|t| (t.config.clone(), t.partitions.clone()))
                .collect(),
            Err(_) => {
                tracing::error!("memory store: topic map lock poisoned; retention skipped");
                return;
            }
        };
        for (config, partitions) in work {
            for partition in partitions {
                let Ok(mut log) = partition.lock() else {
                    tracing::error!("memory store: partition lock poisoned; retention skipped");
                    continue;
                };
                if log.deleted {
                    continue;
                }
                let freed = log.apply_retention(&config, now_ms);
                drop(log);
                self.release(freed);
            }
        }
    }

    fn release(&self, bytes: usize) {
        if bytes > 0 {
            self.total_bytes.fetch_sub(bytes, Ordering::AcqRel);
        }
    }

    /// Whether `bytes` more fit under `max_total_bytes` now.
    fn has_room(&self, bytes: usize) -> bool {
        self.total_bytes
            .load(Ordering::Acquire)
            .checked_add(bytes)
            .is_some_and(|total| total <= self.config.max_total_bytes)
    }

    /// Counts `bytes` more held, past `max_total_bytes` if need be (a compacted batch
    /// re-encoded larger than the one it replaced).
    fn grow(&self, bytes: usize) {
        if bytes > 0 {
            self.total_bytes.fetch_add(bytes, Ordering::AcqRel);
        }
    }

    fn reserve(&self, bytes: usize) -> StoreResult<()> {
        let max = self.config.max_total_bytes;
        self.total_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&total| total <= max)
            })
            .map(|_| ())
            .map_err(|used| {
                StoreError::LimitReached(format!(
                    "memory store holds {used} of {max} bytes; {bytes} more do not fit"
                ))
            })
    }

    fn read_topics(&self) -> StoreResult<RwLockReadGuard<'_, Topics>> {
        self.topics.read().map_err(|_| poisoned())
    }

    fn write_topics(&self) -> StoreResult<RwLockWriteGuard<'_, Topics>> {
        self.topics.write().map_err(|_| poisoned())
    }

    /// The partition and its topic's `max.message.bytes`.
    fn partition(&self, topic: &str, partition: i32) -> StoreResult<(Arc<Partition>, i32)> {
        let topics = self.read_topics()?;
        let t = topics
            .by_name
            .get(topic)
            .ok_or_else(|| unknown(topic, partition))?;
        let p = usize::try_from(partition)
            .ok()
            .and_then(|i| t.partitions.get(i))
            .ok_or_else(|| unknown(topic, partition))?;
        Ok((Arc::clone(p), t.config.max_message_bytes))
    }

    /// A fresh topic id: non-zero, unused, and not one Kafka reserves or tools dislike.
    fn new_topic_id(&self, topics: &Topics) -> u128 {
        loop {
            let n = self.id_counter.fetch_add(1, Ordering::Relaxed);
            // SplitMix64 is a bijection, so distinct counters give distinct low halves;
            // the clock-derived seed keeps ids from repeating across restarts.
            let hi = splitmix64(self.id_seed ^ n);
            let lo = splitmix64(self.id_seed.rotate_left(32).wrapping_add(n));
            let id = (u128::from(hi) << 64) | u128::from(lo);
            // 0 is Kafka's "no id", 1 its metadata topic id; Kafka also avoids ids whose
            // base64 form starts with '-' (top six bits 111110), which CLIs take for a flag.
            if id > 1 && (id >> 122) != 0b11_1110 && !topics.names_by_id.contains_key(&id) {
                return id;
            }
        }
    }

    /// Assigns offsets to `prepared` and stores them, all or nothing. `Err(None)` means
    /// the partition was deleted meanwhile.
    fn append_locked(
        part: &Partition,
        prepared: Vec<Prepared>,
        bytes: usize,
        now_ms: i64,
    ) -> Result<AppendOutcome, Option<StoreError>> {
        let mut log = part.lock()?;
        if log.deleted {
            return Err(None);
        }
        let base_offset = log.high_watermark;
        let mut next = base_offset;
        let mut running_max = log.running_max_timestamp;
        let mut stored = Vec::with_capacity(prepared.len());
        // Assign into a side vector first: the whole call lands or none of it does.
        for Prepared { mut buf, header } in prepared {
            kafka_records::set_base_offset(&mut buf, next).map_err(corrupt)?;
            let last_offset = next
                .checked_add(i64::from(header.last_offset_delta))
                .filter(|&last| last < i64::MAX)
                .ok_or_else(|| StoreError::LimitReached("offsets exhausted".to_owned()))?;
            let running =
                running_max.map_or(header.max_timestamp, |m: i64| m.max(header.max_timestamp));
            running_max = Some(running);
            stored.push(StoredBatch {
                base_offset: next,
                last_offset,
                max_timestamp: header.max_timestamp,
                running_max_timestamp: running,
                log_append_time: header.attributes.timestamp_type() == TimestampType::LogAppendTime,
                append_ms: now_ms,
                bytes: buf.freeze(),
            });
            next = last_offset + 1;
        }
        log.batches.extend(stored);
        log.size += bytes;
        log.high_watermark = next;
        log.running_max_timestamp = running_max;
        // Sent under the lock so concurrent appends publish watermarks in order.
        part.high_watermark.send_replace(next);
        Ok(AppendOutcome {
            base_offset,
            log_append_time: -1,
            log_start_offset: log.log_start_offset,
        })
    }

    fn validate_config(config: &TopicConfig) -> StoreResult<()> {
        // Kafka's own bounds: retention.ms at least -1, max.message.bytes at least 0;
        // any negative retention.bytes means no cap.
        if config.retention_ms < -1 {
            return Err(StoreError::InvalidConfig(format!(
                "retention.ms must be -1 or more, got {}",
                config.retention_ms
            )));
        }
        if config.max_message_bytes < 0 {
            return Err(StoreError::InvalidConfig(format!(
                "max.message.bytes must be 0 or more, got {}",
                config.max_message_bytes
            )));
        }
        Ok(())
    }

    fn prepare(batch: &ValidBatch, max_message_bytes: i32) -> StoreResult<Prepared> {
        // Magic, length, CRC, record count and offset deltas were checked when the batch
        // was made valid; only the topic's own limit is left.
        let max = usize::try_from(max_message_bytes).unwrap_or(0);
        if batch.len() > max {
            return Err(StoreError::MessageTooLarge {
                size: batch.len(),
                max,
            });
        }
        // The one copy: it detaches the batch from the request buffer it was sliced from
        // (which would otherwise stay alive as long as the batch), makes it writable and
        // carries the leader epoch the broker stamped.
        Ok(Prepared {
            buf: batch.to_bytes_mut(),
            header: *batch.header(),
        })
    }
}

#[async_trait]
impl LogStore for MemoryStore {
    fn name(&self) -> &'static str {
        "memory"
    }

    async fn create_topic(&self, topic: NewTopic, validate_only: bool) -> StoreResult<TopicInfo> {
        if topic.partitions < 1 {
            return Err(StoreError::InvalidPartitions(format!(
                "a topic needs at least one partition, got {}",
                topic.partitions
            )));
        }
        Self::validate_config(&topic.config)?;
        let mut topics = self.write_topics()?;
        if topics.by_name.contains_key(&topic.name) {
            return Err(StoreError::TopicAlreadyExists(topic.name));
        }
        if topics.by_name.len() >= self.config.max_topics {
            return Err(StoreError::LimitReached(format!(
                "the memory store holds at most {} topics",
                self.config.max_topics
            )));
        }
        let id = self.new_topic_id(&topics);
        let info = TopicInfo {
            name: topic.name,
            id,
            partitions: topic.partitions,
            config: topic.config,
        };
        if validate_only {
            return Ok(info);
        }
        let partitions = (0..topic.partitions).map(|_| Partition::new()).collect();
        topics.names_by_id.insert(id, info.name.clone());
        topics.by_name.insert(
            info.name.clone(),
            Topic {
                id,
                config: info.config.clone(),
                partitions,
                transactional: false,
            },
        );
        tracing::debug!(topic = %info.name, partitions = info.partitions, "memory store: topic created");
        Ok(info)
    }

    async fn delete_topic(&self, name: &str) -> StoreResult<()> {
        let topic = {
            let mut topics = self.write_topics()?;
            let topic = topics
                .by_name
                .remove(name)
                .ok_or_else(|| unknown(name, -1))?;
            topics.names_by_id.remove(&topic.id);
            topic
        };
        for partition in &topic.partitions {
            let mut log = partition.lock()?;
            log.deleted = true;
            let freed = log.size;
            log.batches.clear();
            log.size = 0;
            drop(log);
            self.release(freed);
        }
        // Dropping the partitions drops their watch senders, which wakes any long poll
        // still waiting on them (unless an in-flight call briefly holds one).
        Ok(())
    }

    async fn topic(&self, name: &str) -> StoreResult<Option<TopicInfo>> {
        let topics = self.read_topics()?;
        Ok(topics.by_name.get(name).map(|t| Topics::info(name, t)))
    }

    async fn topic_by_id(&self, id: u128) -> StoreResult<Option<TopicInfo>> {
        let topics = self.read_topics()?;
        Ok(topics
            .names_by_id
            .get(&id)
            .and_then(|name| topics.by_name.get(name).map(|t| Topics::info(name, t))))
    }

    async fn topics(&self) -> StoreResult<Vec<TopicInfo>> {
        let topics = self.read_topics()?;
        // BTreeMap iteration is already sorted by name.
        Ok(topics
            .by_name
            .iter()
            .map(|(name, t)| Topics::info(name, t))
            .collect())
    }

    async fn create_partitions(
        &self,
        name: &str,
        total: i32,
        validate_only: bool,
    ) -> StoreResult<()> {
        let mut topics = self.write_topics()?;
        let topic = topics
            .by_name
            .get_mut(name)
            .ok_or_else(|| unknown(name, -1))?;
        let current = topic.partitions.len();
        let wanted = usize::try_from(total).unwrap_or(0);
        if wanted <= current {
            return Err(StoreError::InvalidPartitions(format!(
                "topic {name} has {current} partitions; the new total {total} must be larger"
            )));
        }
        if !validate_only {
            topic.partitions.resize_with(wanted, Partition::new);
        }
        Ok(())
    }

    async fn set_topic_config(&self, name: &str, config: TopicConfig) -> StoreResult<()> {
        Self::validate_config(&config)?;
        let mut topics = self.write_topics()?;
        let topic = topics
            .by_name
            .get_mut(name)
            .ok_or_else(|| unknown(name, -1))?;
        topic.config = config;
        Ok(())
    }

    async fn append(
        &self,
        topic: &str,
        partition: i32,
        batches: Vec<ValidBatch>,
        now_ms: i64,
    ) -> StoreResult<AppendOutcome> {
        let (part, max_message_bytes) = self.partition(topic, partition)?;
        if batches.is_empty() {
            return Err(corrupt("no record batch to append"));
        }
        // Check and copy everything before taking the partition lock, so the lock covers
        // only offset assignment and the push.
        let prepared = batches
            .iter()
            .map(|b| Self::prepare(b, max_message_bytes))
            .collect::<StoreResult<Vec<_>>>()?;
        let bytes: usize = prepared.iter().map(|p| p.buf.len()).sum();
        self.reserve(bytes)?;

        let result = Self::append_locked(&part, prepared, bytes, now_ms)
            .map_err(|e| e.unwrap_or_else(|| unknown(topic, partition)));
        if result.is_err() {
            self.release(bytes);
        }
        result
    }

    async fn read(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_bytes: usize,
    ) -> StoreResult<ReadOutcome> {
        let (part, _) = self.partition(topic, partition)?;
        let log = part.lock()?;
        if offset < log.log_start_offset || offset > log.high_watermark {
            return Err(log.out_of_range(offset));
        }
        let first = log.batches.partition_point(|b| b.last_offset < offset);
        let mut total = 0usize;
        let mut batches = Vec::new();
        for batch in log.batches.range(first..) {
            let size = batch.bytes.len();
            // The first batch goes out whatever its size, so a consumer always progresses.
            if !batches.is_empty() && total.saturating_add(size) > max_bytes {
                break;
            }
            total += size;
            batches.push(batch.bytes.clone());
        }
        Ok(ReadOutcome {
            watermarks: log.watermarks(),
            batches,
        })
    }

    async fn watermarks(&self, topic: &str, partition: i32) -> StoreResult<Watermarks> {
        let (part, _) = self.partition(topic, partition)?;
        let log = part.lock()?;
        Ok(log.watermarks())
    }

    async fn offset_for_timestamp(
        &self,
        topic: &str,
        partition: i32,
        timestamp: i64,
    ) -> StoreResult<Option<TimestampHit>> {
        let (part, _) = self.partition(topic, partition)?;
        let mut from = i64::MIN;
        // Each round looks at one batch outside the lock (decoding may decompress). A
        // batch whose header promises a record but whose matching records all lie below
        // the log start sends the search on to the next batch.
        loop {
            let candidate = {
                let log = part.lock()?;
                from = from.max(log.log_start_offset);
                let i = log.batches.partition_point(|b| {
                    b.last_offset < from || b.running_max_timestamp < timestamp
                });
                // Batches before `i` all end before `from` or hold only older records;
                // the running maximum may come from a batch since dropped, so step on to
                // the first batch that itself reaches the timestamp.
                match log
                    .batches
                    .range(i..)
                    .find(|b| b.max_timestamp >= timestamp)
                {
                    Some(batch) => Candidate::of(batch),
                    None => return Ok(None),
                }
            };
            if let Some(hit) = candidate.find(from, |ts| ts >= timestamp)? {
                return Ok(Some(hit));
            }
            from = candidate.last_offset + 1;
        }
    }

    async fn max_timestamp(
        &self,
        topic: &str,
        partition: i32,
    ) -> StoreResult<Option<TimestampHit>> {
        let (part, _) = self.partition(topic, partition)?;
        let (log_start, straddling, best) = {
            let log = part.lock()?;
            let log_start = log.log_start_offset;
            let mut batches = log.batches.iter().peekable();
            // After delete_records the first batch may start below the log start; its
            // header maximum may then belong to a deleted record, so it is decoded.
            let straddling = batches
                .next_if(|b| b.base_offset < log_start)
                .map(Candidate::of);
            let mut best: Option<&StoredBatch> = None;
            for batch in batches {
                if best.is_none_or(|b| batch.max_timestamp > b.max_timestamp) {
                    best = Some(batch);
                }
            }
            (log_start, straddling, best.map(Candidate::of))
        };
        let mut head: Option<TimestampHit> = None;
        if let Some(first) = straddling {
            if first.log_append_time {
                head = first.find(log_start, |_| true)?;
            } else {
                let batch =
                    RecordBatch::decode(&first.bytes, &DecodeLimits::default()).map_err(corrupt)?;
                for record in batch.records().map_err(corrupt)? {
                    let record = record.map_err(corrupt)?;
                    if record.offset >= log_start
                        && head.is_none_or(|h| record.timestamp > h.timestamp)
                    {
                        head = Some(TimestampHit {
                            offset: record.offset,
                            timestamp: record.timestamp,
                        });
                    }
                }
            }
        }
        match best {
            // Ties go to the earlier record, which is the straddling batch's.
            Some(best) if head.is_none_or(|h| best.max_timestamp > h.timestamp) => {
                let target = best.max_timestamp;
                Ok(best.find(log_start, |ts| ts == target)?.or(head))
            }
            _ => Ok(head),
        }
    }

    async fn delete_records(
        &self,
        topic: &str,
        partition: i32,
        before_offset: i64,
    ) -> StoreResult<i64> {
        let (part, _) = self.partition(topic, partition)?;
        let mut log = part.lock()?;
        let target = if before_offset == -1 {
            log.high_watermark
        } else {
            before_offset
        };
        if target < 0 || target > log.high_watermark {
            return Err(log.out_of_range(before_offset));
        }
        // Kafka's log start only moves forward; asking for less is not an error.
        if target <= log.log_start_offset {
            return Ok(log.log_start_offset);
        }
        let mut freed = 0;
        while log.batches.front().is_some_and(|b| b.last_offset < target) {
            freed += log.pop_front();
        }
        // Kafka semantics: the log start may fall inside a batch, which stays stored.
        log.log_start_offset = target;
        let start = log.log_start_offset;
        drop(log);
        self.release(freed);
        Ok(start)
    }

    fn watch(&self, topic: &str, partition: i32) -> Option<watch::Receiver<i64>> {
        self.partition(topic, partition)
            .ok()
            .map(|(p, _)| p.high_watermark.subscribe())
    }

    async fn is_transactional(&self, topic: &str) -> StoreResult<bool> {
        let topics = self.read_topics()?;
        topics
            .by_name
            .get(topic)
            .map(|t| t.transactional)
            .ok_or_else(|| unknown(topic, -1))
    }

    async fn mark_transactional(&self, topic: &str) -> StoreResult<()> {
        // Already set is the common case: a read lock answers it.
        if self.is_transactional(topic).await? {
            return Ok(());
        }
        let mut topics = self.write_topics()?;
        let t = topics
            .by_name
            .get_mut(topic)
            .ok_or_else(|| unknown(topic, -1))?;
        t.transactional = true;
        Ok(())
    }
}

#[async_trait]
impl OffsetStore for MemoryStore {
    async fn commit(
        &self,
        group: &str,
        offsets: Vec<(String, i32, CommittedOffset)>,
    ) -> StoreResult<()> {
        if offsets.is_empty() {
            // An empty commit must not make the group show up in `groups`.
            return Ok(());
        }
        // One lock for the whole call: it lands entirely or, on poisoning, not at all.
        let mut all = lock(&self.offsets)?;
        let entry = all.entry(group.to_owned()).or_default();
        for (topic, partition, offset) in offsets {
            entry.insert((topic, partition), offset);
        }
        Ok(())
    }

    async fn fetch(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
    ) -> StoreResult<Option<CommittedOffset>> {
        let all = lock(&self.offsets)?;
        Ok(all
            .get(group)
            .and_then(|g| g.get(&(topic.to_owned(), partition)))
            .cloned())
    }

    async fn fetch_all(&self, group: &str) -> StoreResult<Vec<(String, i32, CommittedOffset)>> {
        let all = lock(&self.offsets)?;
        Ok(all
            .get(group)
            .map(|g| {
                g.iter()
                    .map(|((t, p), o)| (t.clone(), *p, o.clone()))
                    .collect()
            })
            .unwrap_or_default())
    }

    async fn delete(&self, group: &str, partitions: &[(String, i32)]) -> StoreResult<()> {
        let mut all = lock(&self.offsets)?;
        if let Some(g) = all.get_mut(group) {
            for key in partitions {
                g.remove(key);
            }
            if g.is_empty() {
                all.remove(group);
            }
        }
        Ok(())
    }

    async fn delete_group(&self, group: &str) -> StoreResult<()> {
        lock(&self.offsets)?.remove(group);
        Ok(())
    }

    async fn groups(&self) -> StoreResult<Vec<String>> {
        Ok(lock(&self.offsets)?.keys().cloned().collect())
    }

    async fn acquire_shard(&self, _shard: u32) -> StoreResult<()> {
        // One process holds the whole store: what it knows is always current.
        Ok(())
    }

    async fn release_shard(&self, _shard: u32) {}

    async fn put_group_state(&self, group: &str, state: Option<Bytes>) -> StoreResult<()> {
        put_blob(&self.group_states, group, state)
    }

    async fn group_states(&self, shard: u32) -> StoreResult<Vec<(String, Bytes)>> {
        blobs_of_shard(&self.group_states, shard)
    }

    async fn put_txn_state(&self, transactional_id: &str, state: Option<Bytes>) -> StoreResult<()> {
        put_blob(&self.txn_states, transactional_id, state)
    }

    async fn txn_states(&self, shard: u32) -> StoreResult<Vec<(String, Bytes)>> {
        blobs_of_shard(&self.txn_states, shard)
    }

    async fn claim_txn_epoch(&self, shard: u32) -> StoreResult<i32> {
        let mut epochs = lock(&self.txn_epochs)?;
        let next = match epochs.get(&shard) {
            None => 0,
            Some(&last) => last.checked_add(1).ok_or_else(|| {
                StoreError::LimitReached(format!(
                    "transaction coordinator epochs of shard {shard} exhausted"
                ))
            })?,
        };
        epochs.insert(shard, next);
        Ok(next)
    }

    async fn put_pending_offsets(
        &self,
        group: &str,
        producer_id: i64,
        offsets: Vec<(String, i32, CommittedOffset)>,
    ) -> StoreResult<()> {
        let mut pending = lock(&self.pending_offsets)?;
        let key = (group.to_owned(), producer_id);
        if offsets.is_empty() {
            pending.remove(&key);
        } else {
            pending.insert(key, offsets);
        }
        Ok(())
    }

    async fn complete_pending_offsets(
        &self,
        group: &str,
        producer_id: i64,
        commit: bool,
    ) -> StoreResult<()> {
        // Both locks are held while anything changes (pending first, as everywhere), so
        // no reader sees the offsets committed while still pending, or neither.
        let mut pending = lock(&self.pending_offsets)?;
        let key = (group.to_owned(), producer_id);
        if !pending.contains_key(&key) {
            return Ok(());
        }
        let mut all = lock(&self.offsets)?;
        let Some(offsets) = pending.remove(&key) else {
            return Ok(());
        };
        if commit && !offsets.is_empty() {
            let entry = all.entry(group.to_owned()).or_default();
            for (topic, partition, offset) in offsets {
                entry.insert((topic, partition), offset);
            }
        }
        Ok(())
    }

    async fn pending_offsets(&self, shard: u32) -> StoreResult<Vec<PendingOffsets>> {
        Ok(lock(&self.pending_offsets)?
            .iter()
            .filter(|((group, _), _)| crate::cluster::group_shard(group) == shard)
            .map(|((group, producer_id), offsets)| PendingOffsets {
                group: group.clone(),
                producer_id: *producer_id,
                offsets: offsets.clone(),
            })
            .collect())
    }
}

/// Stores (`Some`) or deletes (`None`) the opaque blob of `name`.
fn put_blob(
    map: &Mutex<BTreeMap<String, Bytes>>,
    name: &str,
    blob: Option<Bytes>,
) -> StoreResult<()> {
    let mut all = lock(map)?;
    match blob {
        Some(blob) => {
            all.insert(name.to_owned(), blob);
        }
        None => {
            all.remove(name);
        }
    }
    Ok(())
}

/// The blobs whose names fall in coordinator shard `shard`, sorted by name.
fn blobs_of_shard(
    map: &Mutex<BTreeMap<String, Bytes>>,
    shard: u32,
) -> StoreResult<Vec<(String, Bytes)>> {
    Ok(lock(map)?
        .iter()
        .filter(|(name, _)| crate::cluster::group_shard(name) == shard)
        .map(|(name, blob)| (name.clone(), blob.clone()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::{self, Harness};
    use kafka_protocol::ErrorCode;
    use kafka_records::{BatchOptions, NewRecord, encode_batch};

    fn valid(batches: Vec<Bytes>) -> Vec<ValidBatch> {
        suite::valid(batches).unwrap()
    }

    async fn harness(test: &'static str) -> Harness {
        let store = Arc::new(MemoryStore::default());
        Harness::new(Arc::clone(&store), test)
            .with_retention(store.clone())
            .with_compaction(store)
    }

    // Every check of the shared suite, one test each.
    crate::store_suite!(harness);

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn whole_suite_shares_one_store() {
        // Checks must not trip over each other's topics and groups on a shared backend.
        let store = Arc::new(MemoryStore::default());
        let h = Harness::new(Arc::clone(&store), "shared")
            .with_retention(store.clone())
            .with_compaction(store);
        suite::run_all(&h).await.unwrap();
    }

    fn now() -> i64 {
        system_now_ms()
    }

    fn batch_at(timestamp: i64, value_len: usize) -> Bytes {
        let mut out = BytesMut::new();
        let record = NewRecord {
            timestamp,
            key: None,
            value: Some(Bytes::from(vec![b'v'; value_len])),
            headers: vec![],
        };
        encode_batch(&BatchOptions::default(), &[record], &mut out).unwrap();
        out.freeze()
    }

    async fn topic(store: &MemoryStore, name: &str, config: TopicConfig) {
        let new = NewTopic {
            name: name.to_owned(),
            partitions: 1,
            config,
        };
        store.create_topic(new, false).await.unwrap();
    }

    fn config(retention_ms: i64, retention_bytes: i64) -> TopicConfig {
        TopicConfig {
            retention_ms,
            retention_bytes,
            ..TopicConfig::KAFKA_DEFAULT
        }
    }

    async fn bounds(store: &MemoryStore, name: &str) -> (i64, i64) {
        let w = store.watermarks(name, 0).await.unwrap();
        (w.log_start_offset, w.high_watermark)
    }

    #[test]
    fn config_defaults() {
        let c = MemoryStoreConfig::default();
        assert_eq!(c.max_topics, 10_000);
        assert_eq!(c.max_total_bytes, 1024 * 1024 * 1024);
        assert_eq!(c.retention_check_interval, Duration::from_secs(1));
    }

    #[tokio::test]
    async fn size_retention_drops_down_to_the_limit() {
        let store = MemoryStore::default();
        let one = batch_at(now(), 100);
        let size = one.len();
        let limit = 2 * size + size / 2;
        topic(&store, "t", config(-1, limit as i64)).await;
        store
            .append("t", 0, valid(vec![one; 5]), now())
            .await
            .unwrap();
        assert_eq!(store.total_bytes(), 5 * size);
        store.apply_retention(now());
        // 5 -> 4 -> 3 -> 2 batches: 2 * size is the first total within the limit.
        assert_eq!(bounds(&store, "t").await, (3, 5));
        assert_eq!(store.total_bytes(), 2 * size);
        // Nothing more to drop on a second pass.
        store.apply_retention(now());
        assert_eq!(bounds(&store, "t").await, (3, 5));
    }

    #[tokio::test]
    async fn time_retention_keeps_a_batch_exactly_at_the_cutoff() {
        let store = MemoryStore::default();
        topic(&store, "t", config(1_000, -1)).await;
        let t = 1_700_000_000_000;
        let batches = vec![batch_at(t - 1, 10), batch_at(t, 10), batch_at(t + 1, 10)];
        store.append("t", 0, valid(batches), t).await.unwrap();
        store.apply_retention(t + 1_000);
        assert_eq!(bounds(&store, "t").await, (1, 3));
        store.apply_retention(t + 1_001);
        assert_eq!(bounds(&store, "t").await, (2, 3));
        // Time retention may take the last batch too, as Kafka deletes an expired active
        // segment after rolling it.
        store.apply_retention(t + 1_002);
        assert_eq!(bounds(&store, "t").await, (3, 3));
        assert_eq!(store.total_bytes(), 0);
    }

    #[tokio::test]
    async fn retention_after_delete_records_inside_a_batch_keeps_the_log_start() {
        let store = MemoryStore::default();
        topic(&store, "t", config(-1, 0)).await;
        let two = |ts| {
            let mut out = BytesMut::new();
            let r = NewRecord {
                timestamp: ts,
                ..NewRecord::default()
            };
            encode_batch(&BatchOptions::default(), &[r.clone(), r], &mut out).unwrap();
            out.freeze()
        };
        store
            .append("t", 0, valid(vec![two(now()), two(now())]), now())
            .await
            .unwrap();
        store.delete_records("t", 0, 3).await.unwrap();
        // Size retention drops the first batch; the log start must not move back to 2.
        store.apply_retention(now());
        assert_eq!(bounds(&store, "t").await, (3, 4));
    }

    #[tokio::test]
    async fn max_total_bytes_is_enforced_and_freed() {
        let one = batch_at(now(), 100);
        let size = one.len();
        let store = MemoryStore::new(MemoryStoreConfig {
            max_total_bytes: 3 * size,
            ..MemoryStoreConfig::default()
        });
        topic(&store, "a", config(-1, -1)).await;
        topic(&store, "b", config(-1, -1)).await;
        store
            .append("a", 0, valid(vec![one.clone(); 2]), now())
            .await
            .unwrap();
        store
            .append("b", 0, valid(vec![one.clone()]), now())
            .await
            .unwrap();
        let err = store
            .append("b", 0, valid(vec![one.clone()]), now())
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::LimitReached(_)), "{err:?}");
        assert_eq!(err.error_code(), ErrorCode::POLICY_VIOLATION);
        assert_eq!(
            bounds(&store, "b").await,
            (0, 1),
            "a refused append leaves no trace"
        );

        store.delete_records("a", 0, 1).await.unwrap();
        assert_eq!(store.total_bytes(), 2 * size);
        store
            .append("b", 0, valid(vec![one.clone()]), now())
            .await
            .unwrap();
        store.delete_topic("a").await.unwrap();
        assert_eq!(store.total_bytes(), 2 * size);
        store.append("b", 0, valid(vec![one]), now()).await.unwrap();
        assert_eq!(store.total_bytes(), 3 * size);
    }

    #[tokio::test]
    async fn max_topics_is_enforced() {
        let store = MemoryStore::new(MemoryStoreConfig {
            max_topics: 2,
            ..MemoryStoreConfig::default()
        });
        topic(&store, "a", TopicConfig::default()).await;
        topic(&store, "b", TopicConfig::default()).await;
        for validate_only in [true, false] {
            let new = NewTopic {
                name: "c".to_owned(),
                partitions: 1,
                config: TopicConfig::default(),
            };
            let err = store.create_topic(new, validate_only).await.unwrap_err();
            assert!(matches!(err, StoreError::LimitReached(_)), "{err:?}");
        }
        store.delete_topic("a").await.unwrap();
        topic(&store, "c", TopicConfig::default()).await;
    }

    #[tokio::test]
    async fn invalid_configs_are_refused() {
        let store = MemoryStore::default();
        for bad in [
            config(-2, -1),
            TopicConfig {
                max_message_bytes: -1,
                ..TopicConfig::default()
            },
        ] {
            let new = NewTopic {
                name: "t".to_owned(),
                partitions: 1,
                config: bad.clone(),
            };
            let err = store.create_topic(new, false).await.unwrap_err();
            assert!(matches!(err, StoreError::InvalidConfig(_)), "{err:?}");
            topic(&store, "ok", TopicConfig::default()).await;
            let err = store.set_topic_config("ok", bad).await.unwrap_err();
            assert!(matches!(err, StoreError::InvalidConfig(_)), "{err:?}");
            store.delete_topic("ok").await.unwrap();
        }
        // Any negative retention.bytes means no cap, as in Kafka.
        topic(&store, "t", config(-1, -7)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn background_retention_applies_and_stops() {
        let store = Arc::new(MemoryStore::new(MemoryStoreConfig {
            retention_check_interval: Duration::from_millis(10),
            ..MemoryStoreConfig::default()
        }));
        topic(&store, "t", config(1_000, -1)).await;
        let old = now() - 3_600_000;
        store
            .append(
                "t",
                0,
                valid(vec![batch_at(old, 10), batch_at(old, 10)]),
                now(),
            )
            .await
            .unwrap();
        let (stop, stopped) = watch::channel(false);
        let task = store.spawn_retention(stopped);
        // Paused time: the sleep only lets the runtime run the interval's ticks.
        tokio::time::sleep(Duration::from_millis(25)).await;
        assert_eq!(bounds(&store, "t").await, (2, 2));
        stop.send_replace(true);
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap();

        // Dropping the shutdown sender stops the task too.
        let (stop, stopped) = watch::channel(false);
        let task = store.spawn_retention(stopped);
        drop(stop);
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap();

        // And so does dropping the store: the task does not keep it alive.
        let (_stop, stopped) = watch::channel(false);
        let task = store.spawn_retention(stopped);
        drop(store);
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn the_retention_guard_stops_its_task() {
        let store = Arc::new(MemoryStore::new(MemoryStoreConfig {
            retention_check_interval: Duration::from_millis(10),
            ..MemoryStoreConfig::default()
        }));
        topic(&store, "t", config(1_000, -1)).await;
        let old = now() - 3_600_000;
        store
            .append(
                "t",
                0,
                valid(vec![batch_at(old, 10), batch_at(old, 10)]),
                now(),
            )
            .await
            .unwrap();
        let guard = store.start_retention();
        tokio::time::sleep(Duration::from_millis(25)).await;
        assert_eq!(bounds(&store, "t").await, (2, 2));
        tokio::time::timeout(Duration::from_secs(5), guard.stop())
            .await
            .unwrap();

        let guard = store.start_retention();
        let task = guard.task.abort_handle();
        drop(guard);
        tokio::time::timeout(Duration::from_secs(5), async {
            while !task.is_finished() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await
        .unwrap();
    }

    #[tokio::test]
    async fn log_append_time_batches_use_the_batch_timestamp() {
        let store = MemoryStore::default();
        topic(&store, "t", config(-1, -1)).await;
        let append_time = 1_700_000_000_000;
        let records: Vec<NewRecord> = (0..3)
            .map(|i| NewRecord {
                timestamp: 5 + i,
                ..NewRecord::default()
            })
            .collect();
        let options = BatchOptions {
            timestamp_type: TimestampType::LogAppendTime,
            ..BatchOptions::default()
        };
        let mut out = BytesMut::new();
        encode_batch(&options, &records, &mut out).unwrap();
        kafka_records::set_log_append_time(&mut out, append_time).unwrap();
        store
            .append(
                "t",
                0,
                valid(vec![batch_at(1, 1), out.freeze()]),
                append_time,
            )
            .await
            .unwrap();
        let hit = |offset, timestamp| Some(TimestampHit { offset, timestamp });
        let found = store.offset_for_timestamp("t", 0, 2).await.unwrap();
        assert_eq!(found, hit(1, append_time));
        let found = store
            .offset_for_timestamp("t", 0, append_time)
            .await
            .unwrap();
        assert_eq!(found, hit(1, append_time));
        let found = store
            .offset_for_timestamp("t", 0, append_time + 1)
            .await
            .unwrap();
        assert_eq!(found, None);
        assert_eq!(
            store.max_timestamp("t", 0).await.unwrap(),
            hit(1, append_time)
        );
        store.delete_records("t", 0, 2).await.unwrap();
        assert_eq!(
            store.max_timestamp("t", 0).await.unwrap(),
            hit(2, append_time)
        );
        let found = store.offset_for_timestamp("t", 0, 0).await.unwrap();
        assert_eq!(found, hit(2, append_time));
    }

    #[tokio::test]
    async fn corrupt_batches_cannot_reach_the_store() {
        let store = MemoryStore::default();
        topic(&store, "t", config(-1, -1)).await;
        let good = batch_at(now(), 10);
        let mut two = BytesMut::from(&good[..]);
        two.extend_from_slice(&good);
        let mut bad_magic = BytesMut::from(&good[..]);
        bad_magic[16] = 1;
        // What the store used to check itself is refused before a ValidBatch exists.
        for bad in [
            Bytes::from_static(b"short"),
            good.slice(..good.len() - 1),
            two.freeze(),
            bad_magic.freeze(),
        ] {
            assert!(
                ValidBatch::from_bytes(&bad, &DecodeLimits::default()).is_err(),
                "{bad:?}"
            );
        }
        let err = store
            .append("t", 0, valid(vec![]), now())
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::CorruptBatch(_)), "{err:?}");
        assert_eq!(bounds(&store, "t").await, (0, 0));
        assert_eq!(store.total_bytes(), 0);
    }

    #[tokio::test]
    async fn reads_share_the_stored_bytes() {
        let store = MemoryStore::default();
        topic(&store, "t", config(-1, -1)).await;
        store
            .append("t", 0, valid(vec![batch_at(now(), 10)]), now())
            .await
            .unwrap();
        let a = store.read("t", 0, 0, 1 << 20).await.unwrap();
        let b = store.read("t", 0, 0, 1 << 20).await.unwrap();
        assert_eq!(a.batches[0].as_ptr(), b.batches[0].as_ptr());
    }

    #[tokio::test]
    async fn deleting_a_topic_closes_its_watches() {
        let store = MemoryStore::default();
        topic(&store, "t", config(-1, -1)).await;
        let mut rx = store.watch("t", 0).unwrap();
        store.delete_topic("t").await.unwrap();
        let changed = tokio::time::timeout(Duration::from_secs(5), rx.changed())
            .await
            .unwrap();
        assert!(changed.is_err(), "the sender must be gone");
    }

    #[tokio::test]
    async fn topic_ids_are_unique_and_well_formed() {
        let store = MemoryStore::default();
        let mut ids = std::collections::HashSet::new();
        for i in 0..2_000 {
            let new = NewTopic {
                name: format!("t{i}"),
                partitions: 1,
                config: TopicConfig::default(),
            };
            let id = store.create_topic(new, false).await.unwrap().id;
            assert!(id > 1 && id >> 122 != 0b11_1110, "{id:032x}");
            assert!(ids.insert(id), "duplicate id {id:032x}");
        }
    }

    #[tokio::test]
    async fn empty_offset_changes_leave_no_group_behind() {
        let store = MemoryStore::default();
        store.commit("g", vec![]).await.unwrap();
        assert!(store.groups().await.unwrap().is_empty());
        let offset = CommittedOffset {
            offset: 1,
            leader_epoch: -1,
            metadata: None,
            commit_timestamp: 0,
        };
        store
            .commit("g", vec![("t".to_owned(), 0, offset)])
            .await
            .unwrap();
        store.delete("g", &[("t".to_owned(), 0)]).await.unwrap();
        assert!(store.groups().await.unwrap().is_empty());
    }
}
