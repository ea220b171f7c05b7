//! The embedded store's log cleaner: compaction of `cleanup.policy=compact` partitions in
//! place, in the background, within its own budget.
//!
//! # What a pass does to one partition
//! ```text
//! batches:  [ clean section | dirty section | too young | last batch ]
//!            ^ log start     ^ clean_offset  ^ min.compaction.lag.ms boundary
//! ```
//! - **Cleanable range**: every batch but the last one (the embedded equivalent of
//!   Kafka's active segment: the batch appends go after is never rewritten), up to the
//!   first batch appended less than `min.compaction.lag.ms` ago. A batch's time is its
//!   append time on the store's clock, so producer timestamps cannot hold records back
//!   or let them go early.
//! - **Choice**: the partition is cleaned when its dirty section (batches at or after
//!   `clean_offset`, Kafka's cleaner checkpoint) is at least `min.cleanable.dirty.ratio`
//!   of the cleanable range's bytes, or when its oldest dirty batch was appended more
//!   than `max.compaction.lag.ms` ago.
//! - **Key map**: the dirty section's records go through a
//!   [`CompactionPass`](crate::compaction::CompactionPass) bounded by
//!   `log.cleaner.dedupe.buffer.size`; more distinct keys than fit clean only a prefix.
//! - **Rewrite**: the clean and dirty sections are read again, one batch at a time
//!   outside the partition lock; a batch that loses records is re-encoded with
//!   [`kafka_records::encode_retained`] (same base offset, offset span, producer fields,
//!   codec), one that loses all of them is dropped. The high watermark and the log start
//!   offset never move; removed records leave offset gaps. Control batches (transaction
//!   markers) are kept whole.
//! - **Transactions**: on a topic that ever held a transactional batch (the store's
//!   sticky flag), the pass folds the whole log's batch summaries into a
//!   [`TxnIndex`](crate::txn_index::TxnIndex) first. The cleanable range then also ends
//!   before the first unstable offset (the oldest open transaction's first batch), so
//!   nothing a transaction may still abort or commit is cleaned or supersedes anything;
//!   records of aborted transactions are neither put in the key map (they never
//!   supersede a committed record of their key) nor kept (their batch goes whole); a
//!   partially kept transactional batch keeps its attributes and producer fields.
//! - **Swap**: rewritten batches replace the old ones under the partition lock, a window
//!   of at most [`SWAP_WINDOW_BYTES`] at a time, so a read sees every batch either old or
//!   new. A batch that retention or `DeleteRecords` removed meanwhile is left alone. The
//!   store's byte accounting follows. A re-encoding can come out larger than the batch it
//!   replaces (fewer records, but the producer compressed at a higher level than the
//!   store does). Up to [`GROWTH_SLACK_BYTES`] larger it is swapped in and counted
//!   always (the store may then hold that much past `max_total_bytes`, which bounds
//!   appends); larger still, only while the store has room for the growth under
//!   `max_total_bytes`. Without room the batch is kept whole, and the clean offset does
//!   not move past it: the records that supersede its records stay in the dirty
//!   section, so every later pass has their keys in its key map and tries again, and no
//!   pass takes the superseded records for the latest of their keys (or removes a
//!   tombstone that still has to hide them).
//!
//! # Budget
//! The background task ([`MemoryStore::start_cleaner`]) runs one pass every
//! `log.cleaner.backoff.ms` on a blocking thread (one cleaner: Kafka's
//! `log.cleaner.threads` has no counterpart), reading at most
//! `log.cleaner.io.max.bytes.per.second`. Memory per pass: the key map (bounded by the
//! dedupe buffer), one decoded batch, and one swap window of rewritten batches.

use super::{MemoryStore, Partition, PartitionLog, StoredBatch, system_now_ms};
use crate::TopicConfig;
use crate::compaction::{CompactionPass, CompactionRules, KeyedRecord};
use crate::txn_index::{BatchSummary, TxnIndex};
use bytes::{Bytes, BytesMut};
use kafka_records::{DecodeLimits, RecordBatch};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

/// Rewritten batch bytes a pass holds before swapping them in.
pub const SWAP_WINDOW_BYTES: usize = 8 << 20;

/// How much larger than the batch it replaces a re-encoding may be and still be swapped
/// in when the store is full. A codec can encode fewer records in a few more bytes;
/// keeping such a batch as it was would hold the partition's clean offset below it until
/// the store has room.
pub const GROWTH_SLACK_BYTES: usize = 64;

/// The cleaner's budget (Kafka's `log.cleaner.*` broker settings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CleanerConfig {
    /// `log.cleaner.enable`: whether [`MemoryStore::start_cleaner`] compacts at all.
    pub enable: bool,
    /// `log.cleaner.backoff.ms`: the pause between two passes.
    pub backoff: Duration,
    /// `log.cleaner.io.max.bytes.per.second`: batch bytes a pass reads per second at
    /// most; `None` reads as fast as it can.
    pub io_max_bytes_per_second: Option<u64>,
    /// `log.cleaner.dedupe.buffer.size`: bytes of the key map of one partition's pass
    /// (divided by [`crate::compaction::KEY_MAP_ENTRY_BYTES`] per distinct key).
    pub dedupe_buffer_size: usize,
}

impl Default for CleanerConfig {
    /// Enabled, a pass every 15 s (Kafka's defaults), unthrottled, a 128 MiB key map.
    fn default() -> Self {
        Self {
            enable: true,
            backoff: Duration::from_secs(15),
            io_max_bytes_per_second: None,
            dedupe_buffer_size: 128 << 20,
        }
    }
}

/// Cumulative counters of the cleaner.
#[derive(Debug, Default)]
pub(super) struct CleanerCounters {
    bytes_cleaned: AtomicU64,
    records_removed: AtomicU64,
    passes: AtomicU64,
}

/// The dirty ratio of one compacted partition, as of the cleaner's last look.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionDirt {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// Dirty bytes over cleanable bytes, 0 to 1.
    pub dirty_ratio: f64,
}

/// What the cleaner did so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CleanerStats {
    /// Batch bytes read by completed partition passes.
    pub bytes_cleaned: u64,
    /// Records removed.
    pub records_removed: u64,
    /// Partition passes completed.
    pub passes: u64,
    /// Per compacted partition the cleaner looked at, at most the number asked for.
    pub partitions: Vec<PartitionDirt>,
}

/// Owns the background cleaner of a [`MemoryStore`]; dropping it stops the task,
/// [`CleanerTask::stop`] also waits for the end (a pass under way stops at its next
/// batch).
#[derive(Debug)]
#[must_use = "the cleaner stops when this guard is dropped"]
pub struct CleanerTask {
    stop: watch::Sender<bool>,
    abort: Arc<AtomicBool>,
    task: Option<JoinHandle<()>>,
}

impl CleanerTask {
    /// Stops the task and waits until it has ended.
    pub async fn stop(mut self) {
        self.abort.store(true, Ordering::Release);
        self.stop.send_replace(true);
        if let Some(task) = self.task.take() {
            // A join error means the task panicked; it was reported already.
            let _ = task.await;
        }
    }
}

impl Drop for CleanerTask {
    fn drop(&mut self) {
        self.abort.store(true, Ordering::Release);
    }
}

/// Paces reads to a byte rate.
struct Throttle {
    rate: Option<u64>,
    start: Instant,
    bytes: u64,
}

impl Throttle {
    fn new(rate: Option<u64>) -> Self {
        Self {
            rate: rate.filter(|&r| r > 0),
            start: Instant::now(),
            bytes: 0,
        }
    }

    /// Counts `bytes` read and sleeps until the rate allows them.
    fn take(&mut self, bytes: usize, abort: &AtomicBool) {
        let Some(rate) = self.rate else {
            return;
        };
        self.bytes = self.bytes.saturating_add(bytes as u64);
        let due = Duration::from_secs_f64(self.bytes as f64 / rate as f64);
        // Sleep in short steps so a stop request is seen soon.
        while !abort.load(Ordering::Acquire) {
            let elapsed = self.start.elapsed();
            if elapsed >= due {
                return;
            }
            std::thread::sleep((due - elapsed).min(Duration::from_millis(50)));
        }
    }
}

/// Where a partition stands, read under its lock.
struct Plan {
    /// The cleanable batches (everything before the lag boundary, never the last batch).
    batches: Vec<StoredBatch>,
    /// The batches after them, when the pass needs the whole log (transactions).
    rest: Vec<StoredBatch>,
    clean_offset: i64,
}

/// The topic a partition pass works for.
struct TopicRef<'a> {
    name: &'a str,
    /// The sticky transactional flag when the pass began.
    transactional: bool,
    config: &'a TopicConfig,
}

/// One batch's replacement: `None` drops it.
struct Replacement {
    old: Bytes,
    new: Option<StoredBatch>,
    removed: usize,
}

fn same(a: &Bytes, b: &Bytes) -> bool {
    a.as_ptr() == b.as_ptr() && a.len() == b.len()
}

/// Dirty bytes over cleanable bytes, and when the oldest dirty batch was appended.
fn dirt<'a>(
    batches: impl Iterator<Item = &'a StoredBatch>,
    clean_offset: i64,
) -> (f64, Option<i64>) {
    let mut total = 0usize;
    let mut dirty = 0usize;
    let mut oldest = None;
    for b in batches {
        total += b.bytes.len();
        if b.last_offset >= clean_offset {
            dirty += b.bytes.len();
            oldest = Some(oldest.map_or(b.append_ms, |o: i64| o.min(b.append_ms)));
        }
    }
    let ratio = if total == 0 {
        0.0
    } else {
        dirty as f64 / total as f64
    };
    (ratio, oldest)
}

impl PartitionLog {
    /// The cleanable batches and whether the partition is due for cleaning; with
    /// `whole_log` the plan also holds the batches after the cleanable ones.
    fn plan(&mut self, config: &TopicConfig, now_ms: i64, whole_log: bool) -> Option<Plan> {
        let rules = CompactionRules::for_topic(config, now_ms, 0);
        let n = self.batches.len().saturating_sub(1);
        let end = self
            .batches
            .range(..n)
            .position(|b| !rules.cleanable(b.append_ms))
            .unwrap_or(n);
        let (ratio, oldest) = dirt(self.batches.range(..end), self.clean_offset);
        self.dirty_ratio = Some(ratio);
        let overdue = config.max_compaction_lag_ms >= 0
            && oldest.is_some_and(|t| t <= now_ms.saturating_sub(config.max_compaction_lag_ms));
        let due = oldest.is_some() && (ratio >= config.min_cleanable_dirty_ratio || overdue);
        // Cloning shares the batch bytes; only a due partition pays for it.
        due.then(|| Plan {
            batches: self.batches.range(..end).cloned().collect(),
            rest: if whole_log {
                self.batches.range(end..).cloned().collect()
            } else {
                Vec::new()
            },
            clean_offset: self.clean_offset,
        })
    }

    /// Swaps in what is still current; returns (bytes freed, bytes grown, records
    /// removed).
    fn swap(&mut self, mut window: HashMap<i64, Replacement>) -> (usize, usize, u64) {
        let mut freed = 0usize;
        let mut grown = 0usize;
        let mut removed = 0u64;
        self.batches.retain_mut(|b| {
            let Some(r) = window.remove(&b.base_offset) else {
                return true;
            };
            if !same(&b.bytes, &r.old) {
                return true;
            }
            removed += r.removed as u64;
            match r.new {
                Some(new) => {
                    let (old, now) = (b.bytes.len(), new.bytes.len());
                    freed += old.saturating_sub(now);
                    grown += now.saturating_sub(old);
                    *b = new;
                    true
                }
                None => {
                    freed += b.bytes.len();
                    false
                }
            }
        });
        self.size = self.size - freed + grown;
        (freed, grown, removed)
    }
}

/// The transaction index of a whole log: batch headers, and the first record of control
/// batches.
fn txn_index<'a>(
    batches: impl Iterator<Item = &'a StoredBatch>,
) -> Result<TxnIndex, kafka_records::RecordsError> {
    let mut index = TxnIndex::new(0);
    for b in batches {
        let batch = RecordBatch::decode_verified(&b.bytes, &limits())?;
        index.observe(&BatchSummary::of(&batch)?);
    }
    Ok(index)
}

fn limits() -> DecodeLimits {
    // The batches were checked within the produce limits when they were appended.
    DecodeLimits {
        max_decompressed_bytes: usize::MAX,
        max_records_per_batch: usize::MAX,
    }
}

impl MemoryStore {
    /// Compacts every partition of every compacted topic that is due, as of `now_ms`,
    /// without throttling (tests drive it; the background task calls the same with its
    /// budget). Returns the number of partitions cleaned.
    pub fn apply_compaction(&self, now_ms: i64) -> usize {
        self.compaction_pass(now_ms, None, &AtomicBool::new(false))
    }

    fn compaction_pass(&self, now_ms: i64, rate: Option<u64>, abort: &AtomicBool) -> usize {
        type Work = (String, bool, TopicConfig, Vec<Arc<Partition>>);
        let work: Vec<Work> = match self.topics.read() {
            Ok(topics) => topics
                .by_name
                .iter()
                .filter(|(_, t)| t.config.cleanup_policy.compacts())
                .map(|(name, t)| {
                    (
                        name.clone(),
                        t.transactional,
                        t.config.clone(),
                        t.partitions.clone(),
                    )
                })
                .collect(),
            Err(_) => {
                tracing::error!("memory store: topic map lock poisoned; compaction skipped");
                return 0;
            }
        };
        let mut throttle = Throttle::new(rate);
        let mut cleaned = 0;
        for (name, transactional, config, partitions) in work {
            for partition in partitions {
                if abort.load(Ordering::Acquire) {
                    return cleaned;
                }
                let topic = TopicRef {
                    name: &name,
                    transactional,
                    config: &config,
                };
                match self.compact_partition(&partition, &topic, now_ms, &mut throttle, abort) {
                    Ok(true) => cleaned += 1,
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "memory store: compaction of a partition failed");
                    }
                }
            }
        }
        cleaned
    }

    /// Whether `topic` is flagged transactional now (`true` when unsure).
    fn flagged_transactional(&self, topic: &str) -> bool {
        self.topics.read().map_or(true, |t| {
            t.by_name.get(topic).is_none_or(|t| t.transactional)
        })
    }

    /// One partition's pass; `Ok(true)` when it completed.
    fn compact_partition(
        &self,
        partition: &Partition,
        topic: &TopicRef<'_>,
        now_ms: i64,
        throttle: &mut Throttle,
        abort: &AtomicBool,
    ) -> Result<bool, kafka_records::RecordsError> {
        let config = topic.config;
        let mut plan = {
            let Ok(mut log) = partition.lock() else {
                return Ok(false);
            };
            if log.deleted {
                return Ok(false);
            }
            match log.plan(config, now_ms, topic.transactional) {
                Some(plan) => plan,
                None => return Ok(false),
            }
        };
        // The flag is set before a topic's first transactional append: still unset after
        // the snapshot, the snapshot holds no transactional batch. Set meanwhile, the
        // next pass sees it.
        if !topic.transactional && self.flagged_transactional(topic.name) {
            return Ok(false);
        }
        let index = if topic.transactional {
            let index = txn_index(plan.batches.iter().chain(&plan.rest))?;
            plan.rest = Vec::new();
            if let Some(unstable) = index.first_unstable() {
                // A transaction's first offset is its first batch's base offset.
                plan.batches.retain(|b| b.base_offset < unstable);
                if !plan
                    .batches
                    .iter()
                    .any(|b| b.last_offset >= plan.clean_offset)
                {
                    return Ok(false);
                }
            }
            Some(index)
        } else {
            None
        };
        // A transactional batch lies in one transaction: aborted as a whole or not at all.
        let aborted = |batch: &RecordBatch| {
            batch.is_transactional()
                && index.as_ref().is_some_and(|i| {
                    i.is_aborted(batch.header().producer_id, batch.header().base_offset)
                })
        };
        let rules =
            CompactionRules::for_topic(config, now_ms, self.config.cleaner.dedupe_buffer_size);
        let mut pass = CompactionPass::new(rules);
        let mut read = 0usize;

        // Phase 1: the dirty section into the key map.
        let mut end = plan
            .batches
            .last()
            .map_or(plan.clean_offset, |b| b.last_offset + 1);
        'observe: for b in plan
            .batches
            .iter()
            .filter(|b| b.last_offset >= plan.clean_offset)
        {
            if abort.load(Ordering::Acquire) {
                return Ok(false);
            }
            throttle.take(b.bytes.len(), abort);
            read += b.bytes.len();
            let batch = RecordBatch::decode(&b.bytes, &limits())?;
            if batch.is_control() || aborted(&batch) {
                continue;
            }
            for record in batch.records()? {
                let record = record?;
                if record.offset < plan.clean_offset {
                    continue;
                }
                let keyed = KeyedRecord {
                    offset: record.offset,
                    key: record.key.as_deref(),
                    tombstone: record.value.is_none(),
                    timestamp_ms: b.append_ms,
                };
                if !pass.observe(&keyed) {
                    end = pass.end_offset().unwrap_or(record.offset);
                    break 'observe;
                }
            }
        }

        // Phase 2: rewrite everything before `end`, a window at a time.
        let mut window: HashMap<i64, Replacement> = HashMap::new();
        let mut window_bytes = 0usize;
        // Growth past the slack the window's re-encodings take from the store's room.
        let mut window_growth = 0usize;
        // The first batch kept whole for want of room: the clean offset stays below it.
        let mut deferred: Option<i64> = None;
        let mut removed_total = 0u64;
        for b in plan.batches.iter().filter(|b| b.base_offset < end) {
            if abort.load(Ordering::Acquire) {
                return Ok(false);
            }
            if b.last_offset < plan.clean_offset {
                // The dirty section was read in phase 1 already.
                throttle.take(b.bytes.len(), abort);
                read += b.bytes.len();
            }
            let batch = RecordBatch::decode(&b.bytes, &limits())?;
            if batch.is_control() {
                continue;
            }
            if aborted(&batch) {
                window.insert(
                    b.base_offset,
                    Replacement {
                        old: b.bytes.clone(),
                        new: None,
                        removed: usize::try_from(batch.header().record_count).unwrap_or(0),
                    },
                );
                continue;
            }
            let section = batch.records_section()?;
            let keep = |r: &kafka_records::Record| {
                pass.keep(&KeyedRecord {
                    offset: r.offset,
                    key: r.key.as_deref(),
                    tombstone: r.value.is_none(),
                    timestamp_ms: b.append_ms,
                })
            };
            // Most batches of the clean section lose nothing: find out before encoding.
            let mut all_kept = true;
            for r in batch.records_in(section.clone()) {
                if !keep(&r?) {
                    all_kept = false;
                    break;
                }
            }
            if all_kept {
                continue;
            }
            let mut out = BytesMut::new();
            let outcome =
                kafka_records::encode_retained(&batch, section, &mut |r| keep(r), &mut out)?;
            if outcome.removed == 0 {
                continue;
            }
            let new = if outcome.kept == 0 {
                None
            } else {
                let growth = out.len().saturating_sub(b.bytes.len());
                if growth > GROWTH_SLACK_BYTES {
                    if !self.has_room(window_growth + growth) {
                        // Kept whole for now; its superseded records must not become
                        // the clean section's, so what supersedes them stays dirty.
                        deferred.get_or_insert(b.base_offset);
                        continue;
                    }
                    window_growth += growth;
                }
                let bytes = out.freeze();
                let header = RecordBatch::decode(&bytes, &limits())?;
                Some(StoredBatch {
                    max_timestamp: header.header().max_timestamp,
                    bytes,
                    ..b.clone()
                })
            };
            window_bytes += new.as_ref().map_or(0, |n| n.bytes.len());
            window.insert(
                b.base_offset,
                Replacement {
                    old: b.bytes.clone(),
                    new,
                    removed: outcome.removed,
                },
            );
            if window_bytes >= SWAP_WINDOW_BYTES {
                window_bytes = 0;
                window_growth = 0;
                match self.swap(partition, std::mem::take(&mut window)) {
                    Some(removed) => removed_total += removed,
                    None => return Ok(false),
                }
            }
        }
        let Some(removed) = self.swap(partition, window) else {
            return Ok(false);
        };
        removed_total += removed;
        let end = deferred.map_or(end, |at| end.min(at));
        if let Ok(mut log) = partition.lock() {
            log.clean_offset = log.clean_offset.max(end);
        }
        let counters = &self.cleaner;
        counters
            .bytes_cleaned
            .fetch_add(read as u64, Ordering::Relaxed);
        counters
            .records_removed
            .fetch_add(removed_total, Ordering::Relaxed);
        counters.passes.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }

    /// Swaps a window in; `None` when the partition is gone.
    fn swap(&self, partition: &Partition, window: HashMap<i64, Replacement>) -> Option<u64> {
        if window.is_empty() {
            return Some(0);
        }
        let mut log = partition.lock().ok()?;
        if log.deleted {
            return None;
        }
        let (freed, grown, removed) = log.swap(window);
        drop(log);
        self.release(freed);
        self.grow(grown);
        Some(removed)
    }

    /// The cleaner's counters, with the dirty ratio of at most `max_partitions`
    /// compacted partitions (in topic name and partition order).
    pub fn cleaner_stats(&self, max_partitions: usize) -> CleanerStats {
        let c = &self.cleaner;
        let mut stats = CleanerStats {
            bytes_cleaned: c.bytes_cleaned.load(Ordering::Relaxed),
            records_removed: c.records_removed.load(Ordering::Relaxed),
            passes: c.passes.load(Ordering::Relaxed),
            partitions: Vec::new(),
        };
        let Ok(topics) = self.topics.read() else {
            return stats;
        };
        'topics: for (name, topic) in &topics.by_name {
            if !topic.config.cleanup_policy.compacts() {
                continue;
            }
            for (i, p) in topic.partitions.iter().enumerate() {
                if stats.partitions.len() >= max_partitions {
                    break 'topics;
                }
                let Ok(log) = p.lock() else { continue };
                if let Some(ratio) = log.dirty_ratio {
                    stats.partitions.push(PartitionDirt {
                        topic: name.clone(),
                        partition: i32::try_from(i).unwrap_or(i32::MAX),
                        dirty_ratio: ratio,
                    });
                }
            }
        }
        stats
    }

    /// Starts the background cleaner (see the module documentation), owned by the
    /// returned guard. With `log.cleaner.enable=false` the task only waits to be
    /// stopped. The task holds the store weakly. Must be called within a tokio runtime.
    pub fn start_cleaner(self: &Arc<Self>) -> CleanerTask {
        let (stop, mut stopped) = watch::channel(false);
        let abort = Arc::new(AtomicBool::new(false));
        let store: Weak<Self> = Arc::downgrade(self);
        let cfg = self.config.cleaner.clone();
        let task_abort = Arc::clone(&abort);
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(cfg.backoff.max(Duration::from_millis(1)));
            ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
            loop {
                if *stopped.borrow_and_update() {
                    return;
                }
                tokio::select! {
                    _ = ticks.tick(), if cfg.enable => {
                        let Some(store) = store.upgrade() else { return };
                        let abort = Arc::clone(&task_abort);
                        let rate = cfg.io_max_bytes_per_second;
                        let pass = tokio::task::spawn_blocking(move || {
                            store.compaction_pass(system_now_ms(), rate, &abort)
                        });
                        if let Err(e) = pass.await {
                            tracing::error!(error = %e, "memory store: cleaner pass panicked");
                        }
                    }
                    changed = stopped.changed() => {
                        if changed.is_err() {
                            return;
                        }
                    }
                }
            }
        });
        CleanerTask {
            stop,
            abort,
            task: Some(task),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compaction::KEY_MAP_ENTRY_BYTES;
    use crate::{CleanupPolicy, LogStore, NewTopic, ValidBatch};
    use kafka_records::{BATCH_HEADER_LEN, BatchOptions, Compression, NewRecord, encode_batch};
    use proptest::prelude::*;

    const T0: i64 = 1_700_000_000_000;

    fn store(dedupe_keys: usize) -> MemoryStore {
        MemoryStore::new(super::super::MemoryStoreConfig {
            cleaner: CleanerConfig {
                dedupe_buffer_size: dedupe_keys * KEY_MAP_ENTRY_BYTES,
                ..CleanerConfig::default()
            },
            ..super::super::MemoryStoreConfig::default()
        })
    }

    fn compacted(lag: i64, delete_retention: i64, ratio: f64) -> TopicConfig {
        TopicConfig {
            cleanup_policy: CleanupPolicy::Compact,
            min_compaction_lag_ms: lag,
            delete_retention_ms: delete_retention,
            min_cleanable_dirty_ratio: ratio,
            ..TopicConfig::KAFKA_DEFAULT
        }
    }

    /// A batch of (key, value) records; the value `None` is a tombstone.
    fn batch(records: &[(Option<String>, Option<String>)], compression: Compression) -> ValidBatch {
        let records: Vec<NewRecord> = records
            .iter()
            .map(|(k, v)| NewRecord {
                timestamp: T0,
                key: k.clone().map(Bytes::from),
                value: v.clone().map(Bytes::from),
                headers: vec![],
            })
            .collect();
        let mut out = BytesMut::new();
        let options = BatchOptions {
            compression,
            producer_id: 9,
            producer_epoch: 2,
            base_sequence: 0,
            ..BatchOptions::default()
        };
        encode_batch(&options, &records, &mut out).unwrap();
        ValidBatch::from_bytes(&out.freeze(), &DecodeLimits::default()).unwrap()
    }

    /// (offset, key, value) of every stored record, and every stored batch checks out.
    async fn view(store: &MemoryStore, topic: &str) -> Vec<(i64, Option<String>, Option<String>)> {
        let read = store.read(topic, 0, 0, usize::MAX).await.unwrap();
        let mut out = Vec::new();
        for bytes in read.batches {
            // CRC verified, offsets and counts consistent.
            let valid = RecordBatch::decode_verified(&bytes, &DecodeLimits::default()).unwrap();
            assert_eq!(valid.header().producer_id, 9);
            for r in valid.records().unwrap() {
                let r = r.unwrap();
                let text = |b: Bytes| String::from_utf8(b.to_vec()).unwrap();
                out.push((r.offset, r.key.map(text), r.value.map(text)));
            }
        }
        out
    }

    async fn create(store: &MemoryStore, name: &str, config: TopicConfig) {
        let topic = NewTopic {
            name: name.to_owned(),
            partitions: 1,
            config,
        };
        store.create_topic(topic, false).await.unwrap();
    }

    /// Appends one batch of `records` at store time `at`.
    async fn put(
        store: &MemoryStore,
        topic: &str,
        records: &[(Option<String>, Option<String>)],
        compression: Compression,
        at: i64,
    ) {
        store
            .append(topic, 0, vec![batch(records, compression)], at)
            .await
            .unwrap();
    }

    /// Runs passes as of `now` until one finds nothing to do; returns how many cleaned.
    fn passes_until_clean(store: &MemoryStore, now: i64, most: usize) -> usize {
        let mut passes = 0;
        while store.apply_compaction(now) > 0 {
            passes += 1;
            assert!(passes <= most, "more than {most} passes");
        }
        passes
    }

    fn kv(k: &str, v: Option<&str>) -> (Option<String>, Option<String>) {
        (Some(k.to_owned()), v.map(str::to_owned))
    }

    #[tokio::test]
    async fn compaction_rewrites_in_place_and_accounts_bytes() {
        let store = store(1_000);
        create(&store, "t", compacted(0, 0, 0.0)).await;
        for (i, codec) in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ]
        .into_iter()
        .enumerate()
        {
            let v = i.to_string();
            let b = batch(
                &[
                    kv("a", Some(&v)),
                    kv("b", Some(&v)),
                    kv(&format!("u{i}"), Some(&v)),
                ],
                codec,
            );
            store.append("t", 0, vec![b], T0).await.unwrap();
        }
        let before = store.total_bytes();
        assert_eq!(store.apply_compaction(T0 + 1), 1);
        let after = store.total_bytes();
        assert!(after < before, "{after} < {before}");
        let seen = view(&store, "t").await;
        let offsets: Vec<i64> = seen.iter().map(|r| r.0).collect();
        // u0..u4 kept where they were; a and b of the last cleanable batch survive (the
        // last batch, which holds them too, is not cleanable and so supersedes nothing).
        assert_eq!(offsets, [2, 5, 8, 9, 10, 11, 12, 13, 14]);
        let stats = store.cleaner_stats(10);
        assert_eq!(stats.passes, 1);
        assert_eq!(stats.records_removed, 6);
        assert!(stats.bytes_cleaned > 0);
        assert_eq!(stats.partitions.len(), 1);
        assert_eq!(stats.partitions[0].dirty_ratio, 1.0);
        // The rewritten batches kept their codecs and spans.
        let read = store.read("t", 0, 0, usize::MAX).await.unwrap();
        let codecs: Vec<Compression> = read
            .batches
            .iter()
            .map(|b| RecordBatch::decode(b, &limits()).unwrap().compression())
            .collect();
        assert_eq!(
            codecs,
            [
                Compression::None,
                Compression::Gzip,
                Compression::Snappy,
                Compression::Lz4,
                Compression::Zstd
            ]
        );
        for (i, b) in read.batches.iter().enumerate() {
            let h = RecordBatch::decode(b, &limits()).unwrap();
            assert_eq!(h.header().base_offset, 3 * i as i64);
            assert_eq!(h.header().last_offset_delta, 2);
        }
        // Nothing left to do: the clean section holds one record per key.
        assert_eq!(store.apply_compaction(T0 + 2), 0);
        assert_eq!(store.cleaner_stats(10).passes, 1);
    }

    /// A zstd batch of `records` compressed at level 19, as a producer configured with a
    /// high `compression.zstd.level` sends it (the store re-encodes at level 3).
    fn dense_zstd(records: &[(Option<String>, Option<String>)]) -> ValidBatch {
        let plain = batch(records, Compression::None);
        let zstd = batch(records, Compression::Zstd);
        let section = &plain.as_bytes()[BATCH_HEADER_LEN..];
        let packed = zstd::bulk::compress(section, 19).unwrap();
        let mut out = BytesMut::from(&zstd.as_bytes()[..BATCH_HEADER_LEN]);
        out.extend_from_slice(&packed);
        let batch_length = i32::try_from(out.len() - 12).unwrap();
        out[8..12].copy_from_slice(&batch_length.to_be_bytes());
        let crc = kafka_records::crc32c(&out[21..]);
        out[17..21].copy_from_slice(&crc.to_be_bytes());
        ValidBatch::from_bytes(&out.freeze(), &DecodeLimits::default()).unwrap()
    }

    /// Log-like text: words from a small vocabulary picked by a xorshift generator.
    fn text(seed: u64, words: usize) -> String {
        const VOCABULARY: [&str; 12] = [
            "request",
            "partition",
            "offset",
            "GET",
            "/api/v1/orders",
            "200",
            "latency",
            "ms",
            "user",
            "session",
            "cache",
            "miss",
        ];
        let mut x = seed.max(1);
        let mut out = String::new();
        for _ in 0..words {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            out.push_str(VOCABULARY[(x % 12) as usize]);
            out.push_str(if x.is_multiple_of(7) { "\n" } else { " " });
            out.push_str(&(x % 1000).to_string());
        }
        out
    }

    #[tokio::test]
    async fn a_reencoding_larger_than_its_batch_waits_for_room_below_the_clean_offset() {
        let records: Vec<_> = (0..100)
            .map(|i| kv(&format!("k{i}"), Some(&text(i + 1, 300))))
            .collect();
        let dense = dense_zstd(&records);
        // The same records but the first at the store's level: what a rewrite gives.
        let rewritten = batch(&records[1..], Compression::Zstd).as_bytes().len();
        let growth = rewritten - dense.as_bytes().len();
        assert!(growth > 1000, "the rewrite grows by {growth} bytes");
        for room in [true, false] {
            let appended = dense.as_bytes().len() + 2_000;
            let store = MemoryStore::new(super::super::MemoryStoreConfig {
                // Without room: what is appended below, plus a filler freed later.
                max_total_bytes: if room { usize::MAX } else { appended + 10_000 },
                ..super::super::MemoryStoreConfig::default()
            });
            create(&store, "t", compacted(0, 0, 0.0)).await;
            create(&store, "filler", TopicConfig::KAFKA_DEFAULT).await;
            store.append("t", 0, vec![dense.clone()], T0).await.unwrap();
            // Supersedes k0; the last batch is never cleaned.
            put(&store, "t", &[kv("k0", Some("new"))], Compression::None, T0).await;
            put(&store, "t", &[kv("z", Some("z"))], Compression::None, T0).await;
            if !room {
                let free = 10_000 + appended - store.total_bytes();
                let filler = "f".repeat(free - 200);
                put(
                    &store,
                    "filler",
                    &[kv("f", Some(&filler))],
                    Compression::None,
                    T0,
                )
                .await;
            }
            let before = store.total_bytes();
            store.apply_compaction(T0 + 1);
            let old_k0 =
                |seen: &[(i64, Option<String>, Option<String>)]| seen.iter().any(|r| r.0 == 0);
            if room {
                // Swapped in, and the growth counted.
                assert!(!old_k0(&view(&store, "t").await));
                assert!(
                    store.total_bytes() > before,
                    "{} > {before}",
                    store.total_bytes()
                );
                continue;
            }
            // No room: kept whole, and k0's new record stays dirty, so the passes that
            // follow still have k0 in their key map.
            assert!(old_k0(&view(&store, "t").await));
            assert_eq!(store.total_bytes(), before);
            store.apply_compaction(T0 + 2);
            assert!(old_k0(&view(&store, "t").await));
            // Room again: the next pass rewrites it.
            store.delete_topic("filler").await.unwrap();
            store.apply_compaction(T0 + 3);
            let seen = view(&store, "t").await;
            assert!(!old_k0(&seen), "the superseded record is gone");
            assert_eq!(seen.len(), 101);
        }
    }

    #[tokio::test]
    async fn deleting_topics_are_not_compacted_and_compacting_ones_not_expired() {
        let store = store(1_000);
        create(
            &store,
            "d",
            TopicConfig {
                retention_ms: 1,
                ..TopicConfig::KAFKA_DEFAULT
            },
        )
        .await;
        create(
            &store,
            "c",
            TopicConfig {
                retention_ms: 1,
                ..compacted(0, 0, 0.0)
            },
        )
        .await;
        create(
            &store,
            "cd",
            TopicConfig {
                retention_ms: 1,
                cleanup_policy: CleanupPolicy::CompactDelete,
                ..compacted(0, 0, 0.0)
            },
        )
        .await;
        for t in ["d", "c", "cd"] {
            for _ in 0..3 {
                put(&store, t, &[kv("a", Some("x"))], Compression::None, T0).await;
            }
        }
        store.apply_compaction(T0 + 10);
        assert_eq!(view(&store, "d").await.len(), 3);
        // The last batch is not cleanable: one a before it, one in it.
        assert_eq!(view(&store, "c").await.len(), 2);
        assert_eq!(view(&store, "cd").await.len(), 2);
        store.apply_retention(T0 + 10);
        let w = store.watermarks("cd", 0).await.unwrap();
        assert_eq!(
            (w.log_start_offset, w.high_watermark),
            (3, 3),
            "compact,delete also expires"
        );
        let w = store.watermarks("d", 0).await.unwrap();
        assert_eq!((w.log_start_offset, w.high_watermark), (3, 3));
        assert_eq!(
            view(&store, "c").await.len(),
            2,
            "cleanup.policy=compact does not expire"
        );
        assert_eq!(store.watermarks("c", 0).await.unwrap().log_start_offset, 0);
    }

    #[tokio::test]
    async fn the_dirty_ratio_and_max_lag_choose_partitions() {
        let store = store(1_000);
        create(
            &store,
            "t",
            TopicConfig {
                max_compaction_lag_ms: 60_000,
                ..compacted(0, 0, 0.9)
            },
        )
        .await;
        for v in ["1", "2"] {
            put(&store, "t", &[kv("a", Some(v))], Compression::None, T0).await;
        }
        put(&store, "t", &[kv("z", Some("1"))], Compression::None, T0).await;
        assert_eq!(
            store.apply_compaction(T0 + 1),
            1,
            "everything dirty: ratio 1"
        );
        put(
            &store,
            "t",
            &[kv("a", Some("3"))],
            Compression::None,
            T0 + 2,
        )
        .await;
        // Dirty now: the z batch alone out of two cleanable batches.
        assert_eq!(store.apply_compaction(T0 + 3), 0, "below the dirty ratio");
        assert!(store.cleaner_stats(10).partitions[0].dirty_ratio < 0.9);
        assert_eq!(
            store.apply_compaction(T0 + 60_000),
            1,
            "max.compaction.lag.ms overdue"
        );
    }

    #[tokio::test]
    async fn a_key_map_smaller_than_the_keys_cleans_a_prefix_per_pass() {
        let store = store(2);
        create(&store, "t", compacted(0, 0, 0.0)).await;
        for round in 0..3 {
            let v = round.to_string();
            let records: Vec<_> = (0..10).map(|k| kv(&format!("k{k}"), Some(&v))).collect();
            put(&store, "t", &records, Compression::Lz4, T0).await;
        }
        put(&store, "t", &[kv("end", Some("1"))], Compression::None, T0).await;
        let passes = passes_until_clean(&store, T0 + 1, 100);
        assert!(
            passes >= 10,
            "two keys per pass over 10 keys took {passes} passes"
        );
        let seen = view(&store, "t").await;
        let offsets: Vec<i64> = seen.iter().map(|r| r.0).collect();
        assert_eq!(offsets, (20..31).collect::<Vec<i64>>());
    }

    /// A batch of `producer_id`'s transaction (`None`: no producer, not transactional).
    fn txn_batch(producer_id: Option<i64>, records: &[(&str, &str)]) -> ValidBatch {
        let records: Vec<NewRecord> = records
            .iter()
            .map(|(k, v)| NewRecord {
                timestamp: T0,
                key: Some(Bytes::from(k.to_string())),
                value: Some(Bytes::from(v.to_string())),
                headers: vec![],
            })
            .collect();
        let mut out = BytesMut::new();
        let options = BatchOptions {
            transactional: producer_id.is_some(),
            producer_id: producer_id.unwrap_or(-1),
            producer_epoch: if producer_id.is_some() { 0 } else { -1 },
            base_sequence: if producer_id.is_some() { 0 } else { -1 },
            ..BatchOptions::default()
        };
        encode_batch(&options, &records, &mut out).unwrap();
        ValidBatch::from_bytes(&out.freeze(), &DecodeLimits::default()).unwrap()
    }

    fn end_txn(producer_id: i64, commit: bool) -> ValidBatch {
        crate::txn_index::marker_batch(
            producer_id,
            0,
            crate::txn_index::Marker {
                commit,
                coordinator_epoch: 0,
            },
            T0,
        )
    }

    /// Data records as (offset, key, value), and the offsets of control batches.
    async fn txn_view(store: &MemoryStore, topic: &str) -> (Vec<(i64, String, String)>, Vec<i64>) {
        let read = store.read(topic, 0, 0, usize::MAX).await.unwrap();
        let (mut data, mut control) = (Vec::new(), Vec::new());
        for bytes in read.batches {
            let batch = RecordBatch::decode(&bytes, &DecodeLimits::default()).unwrap();
            if batch.is_control() {
                control.push(batch.header().base_offset);
                continue;
            }
            for r in batch.records().unwrap() {
                let r = r.unwrap();
                let text = |b: Option<Bytes>| String::from_utf8(b.unwrap().to_vec()).unwrap();
                data.push((r.offset, text(r.key), text(r.value)));
            }
        }
        (data, control)
    }

    /// A store with one compacted topic "t" flagged transactional.
    async fn txn_topic() -> MemoryStore {
        let store = store(1_000);
        create(&store, "t", compacted(0, 0, 0.0)).await;
        store.mark_transactional("t").await.unwrap();
        store
    }

    async fn append_all(store: &MemoryStore, topic: &str, batches: Vec<ValidBatch>) {
        for b in batches {
            store.append(topic, 0, vec![b], T0).await.unwrap();
        }
    }

    #[tokio::test]
    async fn aborted_records_never_supersede_committed_ones_and_go() {
        let store = txn_topic().await;
        append_all(
            &store,
            "t",
            vec![
                txn_batch(None, &[("a", "1"), ("b", "1")]),     // 0-1
                txn_batch(Some(20), &[("a", "x"), ("b", "x")]), // 2-3 aborted
                txn_batch(Some(21), &[("c", "1")]),             // 4 committed
                txn_batch(Some(20), &[("c", "x")]),             // 5 aborted
                end_txn(20, false),                             // 6
                end_txn(21, true),                              // 7
                txn_batch(Some(22), &[("b", "2")]),             // 8 committed
                end_txn(22, true),                              // 9
                txn_batch(None, &[("z", "1")]),                 // 10, never cleanable
            ],
        )
        .await;
        assert_eq!(store.apply_compaction(T0 + 1), 1);
        let (data, control) = txn_view(&store, "t").await;
        let kept: Vec<(i64, &str, &str)> = data
            .iter()
            .map(|(o, k, v)| (*o, k.as_str(), v.as_str()))
            .collect();
        // a=1 survives the aborted a=x; b=1 goes for the committed b=2; c=1 survives the
        // aborted c=x written after it.
        assert_eq!(
            kept,
            [(0, "a", "1"), (4, "c", "1"), (8, "b", "2"), (10, "z", "1")]
        );
        assert_eq!(control, [6, 7, 9], "markers are kept");
        assert_eq!(store.apply_compaction(T0 + 2), 0);
        let read = store.read("t", 0, 0, usize::MAX).await.unwrap();
        assert_eq!(store.total_bytes(), read.len());
    }

    #[tokio::test]
    async fn an_open_transaction_stops_the_cleaner_until_it_ends() {
        let store = txn_topic().await;
        append_all(
            &store,
            "t",
            vec![
                txn_batch(None, &[("a", "1")]),    // 0
                txn_batch(None, &[("a", "2")]),    // 1
                txn_batch(Some(5), &[("a", "x")]), // 2: open
                txn_batch(None, &[("a", "3")]),    // 3
                txn_batch(None, &[("a", "4")]),    // 4
                txn_batch(None, &[("end", "1")]),  // 5
            ],
        )
        .await;
        store.apply_compaction(T0 + 1);
        let offsets = |d: &[(i64, String, String)]| d.iter().map(|r| r.0).collect::<Vec<_>>();
        // Only [0, 2) was cleanable: a=1 goes for a=2, and nothing at or after the open
        // transaction supersedes anything.
        let (data, _) = txn_view(&store, "t").await;
        assert_eq!(offsets(&data), [1, 2, 3, 4, 5]);
        assert_eq!(store.apply_compaction(T0 + 2), 0, "nothing cleanable left");
        append_all(
            &store,
            "t",
            vec![end_txn(5, false), txn_batch(None, &[("end", "2")])],
        )
        .await;
        passes_until_clean(&store, T0 + 3, 5);
        let (data, control) = txn_view(&store, "t").await;
        // The aborted a=x went without superseding anything; a=4 is the latest a (end=1
        // stays: the last batch, end=2, is not cleanable and supersedes nothing).
        assert_eq!(offsets(&data), [4, 5, 7]);
        assert_eq!(control, [6]);
    }

    #[tokio::test]
    async fn a_topic_flagged_after_the_pass_began_is_left_for_the_next_one() {
        let store = store(1_000);
        create(&store, "t", compacted(0, 0, 0.0)).await;
        append_all(
            &store,
            "t",
            vec![
                txn_batch(None, &[("a", "1")]),
                txn_batch(None, &[("a", "2")]),
                txn_batch(None, &[("end", "1")]),
            ],
        )
        .await;
        let partition = store.partition("t", 0).unwrap().0;
        let config = compacted(0, 0, 0.0);
        let topic = TopicRef {
            name: "t",
            transactional: false,
            config: &config,
        };
        store.mark_transactional("t").await.unwrap();
        let mut throttle = Throttle::new(None);
        let done = store
            .compact_partition(
                &partition,
                &topic,
                T0 + 1,
                &mut throttle,
                &AtomicBool::new(false),
            )
            .unwrap();
        assert!(!done);
        assert_eq!(txn_view(&store, "t").await.0.len(), 3);
        assert_eq!(store.apply_compaction(T0 + 1), 1);
        assert_eq!(txn_view(&store, "t").await.0.len(), 2);
    }

    #[tokio::test]
    async fn a_flood_of_tombstones_goes_after_the_horizon() {
        let store = store(100_000);
        create(&store, "t", compacted(0, 1_000, 0.0)).await;
        for chunk in 0..20 {
            let records: Vec<_> = (0..500)
                .map(|k| kv(&format!("k{chunk}-{k}"), None))
                .collect();
            put(&store, "t", &records, Compression::Zstd, T0).await;
        }
        put(&store, "t", &[kv("end", Some("1"))], Compression::None, T0).await;
        store.apply_compaction(T0 + 999);
        assert_eq!(
            view(&store, "t").await.len(),
            10_001,
            "tombstones kept within delete.retention.ms"
        );
        // Nothing dirty any more: a new batch makes the partition due again.
        put(
            &store,
            "t",
            &[kv("end", Some("2"))],
            Compression::None,
            T0 + 1_000,
        )
        .await;
        store.apply_compaction(T0 + 1_000);
        // The superseded "end" stays: the last batch is not cleanable yet.
        let offsets: Vec<i64> = view(&store, "t").await.iter().map(|r| r.0).collect();
        assert_eq!(offsets, [10_000, 10_001]);
        let bytes = store.total_bytes();
        let read = store.read("t", 0, 0, usize::MAX).await.unwrap();
        assert_eq!(bytes, read.len(), "accounting matches what is stored");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn readers_never_see_a_torn_log_while_the_cleaner_runs() {
        let store = Arc::new(store(10_000));
        create(&store, "t", compacted(0, 0, 0.0)).await;
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (store, stop) = (Arc::clone(&store), Arc::clone(&stop));
            tokio::task::spawn_blocking(move || {
                let rt = tokio::runtime::Handle::current();
                let mut reads = 0u64;
                while !stop.load(Ordering::Acquire) || reads == 0 {
                    // Every batch decodes with a valid CRC, offsets increase, and each
                    // key written so far has a record: its latest is never removed. The
                    // high watermark is read first: every key below it was written
                    // before the view is taken.
                    let hw = rt
                        .block_on(store.watermarks("t", 0))
                        .unwrap()
                        .high_watermark;
                    let seen = rt.block_on(view(&store, "t"));
                    let offsets: Vec<i64> = seen.iter().map(|r| r.0).collect();
                    assert!(offsets.windows(2).all(|w| w[0] < w[1]), "{offsets:?}");
                    let keys: std::collections::HashSet<_> =
                        seen.iter().filter_map(|r| r.1.clone()).collect();
                    assert!(hw < 20 || keys.len() == 20, "{} keys at {hw}", keys.len());
                    reads += 1;
                }
                reads
            })
        };
        for round in 0..200 {
            let v = round.to_string();
            let records: Vec<_> = (0..20).map(|k| kv(&format!("k{k}"), Some(&v))).collect();
            put(&store, "t", &records, Compression::Snappy, T0).await;
            if round % 3 == 0 {
                let s = Arc::clone(&store);
                tokio::task::spawn_blocking(move || s.apply_compaction(T0 + 1))
                    .await
                    .unwrap();
            }
        }
        stop.store(true, Ordering::Release);
        assert!(reader.await.unwrap() > 0);
        assert!(store.cleaner_stats(1).records_removed > 0);
    }

    #[test]
    fn a_million_distinct_keys_stay_within_the_key_map_bound() {
        let rules =
            CompactionRules::for_topic(&compacted(0, 0, 0.0), T0, 1_000 * KEY_MAP_ENTRY_BYTES);
        let mut pass = CompactionPass::new(rules);
        let mut observed = 0i64;
        for i in 0..1_000_000i64 {
            let key = i.to_be_bytes();
            let r = KeyedRecord {
                offset: i,
                key: Some(&key),
                tombstone: false,
                timestamp_ms: T0,
            };
            if !pass.observe(&r) {
                break;
            }
            observed += 1;
        }
        assert_eq!(pass.keys(), 1_000);
        assert_eq!(observed, 1_000);
        assert_eq!(pass.end_offset(), Some(1_000));
    }

    #[tokio::test]
    async fn many_distinct_keys_are_cleaned_a_map_at_a_time() {
        // 50 000 distinct keys, a map of 5 000: every pass covers 5 000 more, nothing is
        // removed, and the passes end once the clean section reaches the last batch.
        let store = store(5_000);
        create(&store, "t", compacted(0, 0, 0.0)).await;
        for chunk in 0..50 {
            let records: Vec<_> = (0..1_000)
                .map(|k| kv(&format!("k{chunk}-{k}"), Some("v")))
                .collect();
            put(&store, "t", &records, Compression::Lz4, T0).await;
        }
        put(&store, "t", &[kv("end", Some("1"))], Compression::None, T0).await;
        let passes = passes_until_clean(&store, T0 + 1, 10);
        assert_eq!(passes, 10);
        let stats = store.cleaner_stats(1);
        assert_eq!(stats.records_removed, 0);
        assert_eq!(view(&store, "t").await.len(), 50_001);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn background_cleaner_compacts_and_stops() {
        let store = Arc::new(MemoryStore::new(super::super::MemoryStoreConfig {
            cleaner: CleanerConfig {
                backoff: Duration::from_millis(10),
                io_max_bytes_per_second: Some(1 << 30),
                ..CleanerConfig::default()
            },
            ..super::super::MemoryStoreConfig::default()
        }));
        create(&store, "t", compacted(0, 0, 0.0)).await;
        let now = system_now_ms();
        for v in ["1", "2", "3"] {
            put(&store, "t", &[kv("a", Some(v))], Compression::None, now).await;
        }
        let task = store.start_cleaner();
        let mut waited = 0;
        while view(&store, "t").await.len() > 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            waited += 1;
            assert!(waited < 1_000, "the background cleaner never compacted");
        }
        task.stop().await;
        assert!(store.cleaner_stats(0).passes >= 1);
    }

    /// One step of the property test.
    #[derive(Debug, Clone)]
    enum Op {
        /// Appends a batch: (key index, tombstone) per record, and a codec.
        Write(Vec<(u8, bool)>, u8),
        /// Advances the clock.
        Advance(i64),
        /// Runs the cleaner.
        Compact,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (prop::collection::vec((0u8..8, prop::bool::weighted(0.2)), 1..5), 0u8..5)
                .prop_map(|(r, c)| Op::Write(r, c)),
            2 => (0i64..3_000).prop_map(Op::Advance),
            2 => Just(Op::Compact),
        ]
    }

    /// A record as the model keeps it.
    #[derive(Debug, Clone)]
    struct Rec {
        offset: i64,
        key: String,
        value: Option<String>,
        append_ms: i64,
        batch: usize,
        /// Whether its batch was written with a codec.
        compressed: bool,
    }

    /// Checks the store's view at `now` against the model, after a compaction.
    fn check(
        seen: &[(i64, Option<String>, Option<String>)],
        model: &[Rec],
        batches: usize,
        now: i64,
        lag: i64,
        delete_retention: i64,
        exact: bool,
    ) -> Result<(), TestCaseError> {
        let offsets: Vec<i64> = seen.iter().map(|r| r.0).collect();
        prop_assert!(
            offsets.windows(2).all(|w| w[0] < w[1]),
            "offsets increase: {offsets:?}"
        );
        // The first batch not cleanable: too young, or the last one.
        let boundary_batch = model
            .iter()
            .find(|r| r.append_ms > now - lag)
            .map_or(batches.saturating_sub(1), |r| {
                r.batch.min(batches.saturating_sub(1))
            });
        let boundary = model
            .iter()
            .find(|r| r.batch >= boundary_batch)
            .map_or(i64::MAX, |r| r.offset);
        let present: HashMap<i64, &(i64, Option<String>, Option<String>)> =
            seen.iter().map(|r| (r.0, r)).collect();
        for r in model {
            let shown = present.get(&r.offset);
            if let Some(s) = shown {
                prop_assert_eq!(
                    s.1.as_deref(),
                    Some(r.key.as_str()),
                    "record {} key",
                    r.offset
                );
                prop_assert_eq!(&s.2, &r.value, "record {} value", r.offset);
            }
            if r.offset >= boundary {
                prop_assert!(
                    shown.is_some(),
                    "record {} at or after the boundary {boundary} removed",
                    r.offset
                );
                continue;
            }
            let latest = model
                .iter()
                .filter(|o| o.offset < boundary && o.key == r.key)
                .map(|o| o.offset)
                .max()
                == Some(r.offset);
            let horizon = r.append_ms + lag + delete_retention;
            match (latest, r.value.is_some()) {
                (true, true) => prop_assert!(
                    shown.is_some(),
                    "latest of {} at {} removed",
                    r.key,
                    r.offset
                ),
                (true, false) if now < horizon => {
                    prop_assert!(
                        shown.is_some(),
                        "tombstone at {} removed before its horizon",
                        r.offset
                    )
                }
                (true, false) => {}
                (false, _) if exact => {
                    // A compressed batch whose re-encoding would be larger than the
                    // original stays whole (see the module documentation): its
                    // superseded records are still shown, as Kafka allows.
                    let kept_whole = r.compressed
                        && model
                            .iter()
                            .filter(|o| o.batch == r.batch)
                            .all(|o| present.contains_key(&o.offset));
                    prop_assert!(
                        shown.is_none() || kept_whole,
                        "superseded record {} still shown",
                        r.offset
                    )
                }
                (false, _) => {}
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn compaction_matches_the_model(
            ops in prop::collection::vec(op(), 1..60),
            lag in prop::sample::select(vec![0i64, 1_000, 4_000]),
            delete_retention in prop::sample::select(vec![0i64, 2_000, 10_000]),
            small_map in any::<bool>(),
        ) {
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            rt.block_on(async {
                let store = store(if small_map { 3 } else { 10_000 });
                create(&store, "p", compacted(lag, delete_retention, 0.0)).await;
                let mut model: Vec<Rec> = Vec::new();
                let mut batches = 0usize;
                let mut now = T0;
                let codecs = [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd];
                for op in &ops {
                    match op {
                        Op::Write(records, codec) => {
                            let base = model.len() as i64;
                            let recs: Vec<_> = records
                                .iter()
                                .enumerate()
                                .map(|(i, (k, tomb))| {
                                    let value = (!tomb).then(|| format!("v{}", base + i as i64));
                                    (Some(format!("k{k}")), value)
                                })
                                .collect();
                            let b = batch(&recs, codecs[usize::from(*codec) % codecs.len()]);
                            store.append("p", 0, vec![b], now).await.unwrap();
                            for (i, (k, v)) in recs.into_iter().enumerate() {
                                model.push(Rec {
                                    offset: base + i as i64,
                                    key: k.unwrap_or_default(),
                                    value: v,
                                    append_ms: now,
                                    batch: batches,
                                    compressed: *codec % 5 != 0,
                                });
                            }
                            batches += 1;
                        }
                        Op::Advance(ms) => now += ms,
                        Op::Compact => {
                            store.apply_compaction(now);
                            let seen = view(&store, "p").await;
                            check(&seen, &model, batches, now, lag, delete_retention, !small_map)?;
                        }
                    }
                }
                // Enough passes make a small key map catch up.
                for _ in 0..=model.len() {
                    if store.apply_compaction(now) == 0 {
                        break;
                    }
                }
                let seen = view(&store, "p").await;
                check(&seen, &model, batches, now, lag, delete_retention, true)?;
                let w = store.watermarks("p", 0).await.unwrap();
                prop_assert_eq!((w.log_start_offset, w.high_watermark), (0, model.len() as i64));
                let read = store.read("p", 0, 0, usize::MAX).await.unwrap();
                prop_assert_eq!(store.total_bytes(), read.len());
                Ok(())
            })?;
        }
    }
}
