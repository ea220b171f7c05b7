//! Compaction of Kafka topics with `cleanup.policy=compact` on Iggy: the pass, the read
//! of the compacted prefix, and the background task. The layout and the steps of a pass
//! are described in [`crate::compaction`] and `docs/bridge.md` ("Compacted topics").
//!
//! A pass reads its records twice (the key map, then the copy), so its memory is the
//! key map (`log.cleaner.dedupe.buffer.size`) plus one poll, whatever the partition's
//! size. One pass runs at a time per bridge, and only for partitions the leader function
//! says this gateway leads; other gateways learn of a switch from the `topics` log.

use super::topics::Resolved;
use super::{IggyBridge, named};
use crate::compaction::{PassReport, PassStep};
use crate::convert;
use crate::errors::Op;
use crate::mapping::{self, MappedRecord};
use crate::meta::{CompactedPartition, TopicKey};
use crate::partition::PartitionId;
use bytes::{Bytes, BytesMut};
use iggy::prelude::{
    Identifier, IggyExpiry, IggyMessage, IggyMessageHeader, MaxTopicSize, MessageClient,
    Partitioning, SegmentClient, TopicClient, TopicCreateOptions,
};
use kafka_store::compaction::{CompactionPass, CompactionRules, KeyedRecord};
use kafka_store::txn_index::{BatchSummary, Marker, TxnIndex};
use kafka_store::{ReadOutcome, StoreError, StoreResult, Watermarks};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most entries of a companion's sparse offset index (it travels in the `topics` meta
/// record); the stride doubles to stay within it.
const MAX_INDEX_ENTRIES: usize = 1024;
/// Stride of the index to begin with.
const FIRST_STRIDE: u64 = 64;
/// Polls one companion read makes at most, past those that skip to its offset, before
/// it answers with what it has.
const MAX_COMPANION_POLLS: usize = 4;
/// How long a pass waits for Iggy to show a segment deletion it accepted.
const DELETE_SETTLE: Duration = Duration::from_secs(5);

/// Decides whether this gateway leads a partition (topic, partition): only the leader
/// compacts it.
pub type LeaderFn = Arc<dyn Fn(&str, i32) -> bool + Send + Sync>;

/// What a read below a compacted partition's boundary found.
pub(super) enum CompactedRead {
    /// Answered from the companion.
    Served(ReadOutcome),
    /// Not (or no longer) below the boundary: read the partition itself from this
    /// offset.
    Main(i64),
}

/// The name of a companion topic (in the meta stream): the Kafka topic id in hex, the
/// partition, the generation.
pub(crate) fn companion_name(key: &TopicKey, partition: u32, generation: u64) -> String {
    format!(
        "compacted.{:032x}.{partition}.{generation}",
        super::topics::topic_id(key)
    )
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Follows the producer batches of a partition read in offset order, so each record
/// can be told which batch (producer, transactional, control) it belongs to: only the
/// first record of a batch carries its fields.
#[derive(Default)]
struct Batches {
    /// Producer id, transactional and control bits, and last offset of the batch being
    /// read.
    current: Option<(i64, bool, bool, i64)>,
}

impl Batches {
    /// Takes in the record at `offset`; returns the summary of the batch it starts,
    /// if it starts one.
    fn step(&mut self, offset: i64, m: &MappedRecord) -> Option<BatchSummary> {
        let Some(frame) = &m.batch else {
            if m.offset_delta.is_none() || self.current.is_some_and(|(.., last)| offset > last) {
                // A native Iggy message, or a record past its batch's end: a one-record
                // batch outside any transaction.
                self.current = None;
                return Some(BatchSummary {
                    base_offset: offset,
                    last_offset: offset,
                    producer_id: -1,
                    producer_epoch: -1,
                    transactional: false,
                    marker: None,
                });
            }
            return None;
        };
        let last = offset.saturating_add(i64::from(frame.record_count.max(1)) - 1);
        let marker = if frame.is_control() {
            mapping::control_marker(&m.record).map(|(commit, coordinator_epoch)| Marker {
                commit,
                coordinator_epoch,
            })
        } else {
            None
        };
        self.current = Some((
            frame.producer_id,
            frame.is_transactional(),
            frame.is_control(),
            last,
        ));
        Some(BatchSummary {
            base_offset: offset,
            last_offset: last,
            producer_id: frame.producer_id,
            producer_epoch: frame.producer_epoch,
            transactional: frame.is_transactional(),
            marker,
        })
    }

    /// Whether the record just taken in is a control record (a transaction marker).
    fn control(&self) -> bool {
        self.current.is_some_and(|(_, _, control, _)| control)
    }

    /// Whether the record just taken in, at `offset`, is data of an aborted
    /// transaction.
    fn aborted(&self, index: Option<&TxnIndex>, offset: i64) -> bool {
        match (index, self.current) {
            (Some(index), Some((producer_id, true, false, _))) => {
                index.is_aborted(producer_id, offset)
            }
            _ => false,
        }
    }
}

/// Bytes an Iggy message takes in the cleaner's accounting.
fn message_bytes(m: &IggyMessage) -> u64 {
    (m.payload.len() + m.user_headers.as_ref().map_or(0, Bytes::len) + 64) as u64
}

/// Paces a pass to `log.cleaner.io.max.bytes.per.second`.
struct Throttle {
    rate: Option<u64>,
    started: Instant,
    bytes: u64,
}

impl Throttle {
    fn new(rate: Option<u64>) -> Throttle {
        Throttle {
            rate,
            started: Instant::now(),
            bytes: 0,
        }
    }

    async fn account(&mut self, bytes: u64) {
        self.bytes = self.bytes.saturating_add(bytes);
        if let Some(rate) = self.rate.filter(|r| *r > 0) {
            let due = Duration::from_secs_f64(self.bytes as f64 / rate as f64);
            let spent = self.started.elapsed();
            if due > spent {
                tokio::time::sleep(due - spent).await;
            }
        }
    }
}

/// The sparse index of a companion being written: (Kafka offset, companion offset) of
/// every `stride`-th message, at most `MAX_INDEX_ENTRIES`; when full, every other entry
/// goes and the stride doubles.
struct SparseIndex {
    entries: Vec<(i64, u64)>,
    stride: u64,
}

impl Default for SparseIndex {
    fn default() -> Self {
        SparseIndex {
            entries: Vec::new(),
            stride: FIRST_STRIDE,
        }
    }
}

impl SparseIndex {
    /// Notes that companion message `position` holds Kafka offset `offset`.
    fn add(&mut self, offset: i64, position: u64) {
        if !position.is_multiple_of(self.stride) {
            return;
        }
        if self.entries.len() >= MAX_INDEX_ENTRIES {
            self.entries = self.entries.iter().copied().step_by(2).collect();
            self.stride *= 2;
        }
        if position.is_multiple_of(self.stride) {
            self.entries.push((offset, position));
        }
    }
}

/// Where in a companion a read of Kafka offset `offset` starts polling: the indexed
/// message at or before it (0 when none is).
fn lookup(index: &[(i64, u64)], offset: i64) -> u64 {
    index
        .partition_point(|(k, _)| *k <= offset)
        .checked_sub(1)
        .map_or(0, |i| index[i].1)
}

/// A source of the records a pass looks at, in offset order: the previous companion,
/// then the partition from the previous boundary to `end`.
struct Source {
    stream: Identifier,
    topic: Identifier,
    partition: u32,
    /// Next Iggy offset to poll.
    next: u64,
    /// Kafka offsets at or above this are not part of the pass.
    end: i64,
    /// Messages of a companion carry their Kafka offset in the id.
    companion: bool,
    done: bool,
}

impl IggyBridge {
    async fn poll_raw(
        &self,
        src: &Source,
        count: u32,
        name: &str,
    ) -> StoreResult<Vec<IggyMessage>> {
        let polled = self
            .poll_from(
                &src.stream,
                &src.topic,
                src.partition,
                src.next,
                count,
                name,
                -1,
            )
            .await?;
        Ok(polled.messages)
    }

    /// The next page of `src`: (Kafka offset, message) pairs below its end.
    async fn next_page(
        &self,
        src: &mut Source,
        name: &str,
    ) -> StoreResult<Vec<(i64, IggyMessage)>> {
        if src.done {
            return Ok(Vec::new());
        }
        let messages = self
            .poll_raw(src, self.inner.config.poll_batch_messages, name)
            .await?;
        let asked = src.next;
        let Some(last) = messages.last().map(|m| m.header.offset) else {
            src.done = true;
            return Ok(Vec::new());
        };
        src.next = last + 1;
        let mut out = Vec::with_capacity(messages.len());
        for m in messages {
            if m.header.offset < asked {
                continue;
            }
            let offset = if src.companion {
                convert::kafka_i64(u64::try_from(m.header.id.saturating_sub(1)).unwrap_or(0))
            } else {
                convert::kafka_i64(m.header.offset)
            };
            if offset >= src.end {
                src.done = true;
                break;
            }
            out.push((offset, m));
        }
        Ok(out)
    }

    /// The compaction state of a partition as this gateway knows it.
    fn compacted_of(
        &self,
        key: &TopicKey,
        p: PartitionId,
    ) -> StoreResult<Option<CompactedPartition>> {
        Ok(self
            .inner
            .meta
            .topic(key)?
            .and_then(|m| m.compacted.get(&p.iggy()).cloned()))
    }

    /// The companion of generation `c` as a source, from companion offset `next`.
    fn companion_source(
        &self,
        r: &Resolved,
        name: &str,
        p: PartitionId,
        c: &CompactedPartition,
        next: u64,
    ) -> StoreResult<Source> {
        Ok(Source {
            stream: named(&self.inner.config.meta_stream, name)?,
            topic: named(&companion_name(&r.key, p.iggy(), c.g), name)?,
            partition: PartitionId::FIRST.iggy(),
            next,
            end: c.end,
            companion: true,
            done: c.n == 0,
        })
    }

    /// The sources of a pass over a partition whose state is `old` (if compacted
    /// before) and whose new part runs from `from` to `end`.
    fn sources(
        &self,
        r: &Resolved,
        name: &str,
        p: PartitionId,
        old: Option<&CompactedPartition>,
        from: i64,
        end: i64,
    ) -> StoreResult<Vec<Source>> {
        let mut out = Vec::new();
        if let Some(old) = old {
            out.push(self.companion_source(r, name, p, old, 0)?);
        }
        out.push(Source {
            stream: named(&r.target.stream, name)?,
            topic: named(&r.target.topic, name)?,
            partition: p.iggy(),
            next: convert::iggy_offset(from)?,
            end,
            companion: false,
            done: from >= end,
        });
        Ok(out)
    }

    /// Size in bytes Iggy reports for a one-partition topic of the meta stream, or
    /// `None` when it does not exist.
    async fn companion_size(&self, topic: &str) -> StoreResult<Option<u64>> {
        let s = named(&self.inner.config.meta_stream, topic)?;
        let t = named(topic, topic)?;
        let found = self
            .call(Op::Read, topic, -1, self.any_session().get_topic(&s, &t))
            .await;
        match found {
            Ok(d) => Ok(d.map(|d| d.size.as_bytes_u64())),
            Err(StoreError::UnknownTopicOrPartition { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn drop_companion(&self, topic: &str) -> StoreResult<u64> {
        let Some(size) = self.companion_size(topic).await? else {
            return Ok(0);
        };
        let s = named(&self.inner.config.meta_stream, topic)?;
        let t = named(topic, topic)?;
        match self
            .call(
                Op::Admin,
                topic,
                -1,
                self.any_session().delete_topic(&s, &t),
            )
            .await
        {
            Ok(()) | Err(StoreError::UnknownTopicOrPartition { .. }) => Ok(size),
            Err(e) => Err(e),
        }
    }

    async fn create_companion(&self, topic: &str) -> StoreResult<()> {
        let s = named(&self.inner.config.meta_stream, topic)?;
        let options = TopicCreateOptions {
            partitions_count: Some(1),
            message_expiry: Some(IggyExpiry::NeverExpire),
            max_topic_size: Some(MaxTopicSize::Unlimited),
            ..TopicCreateOptions::default()
        };
        self.call(
            Op::Admin,
            topic,
            -1,
            self.any_session().create_topic(&s, topic, &options),
        )
        .await
        .map(|_| ())
    }

    async fn send_companion(
        &self,
        topic: &str,
        messages: &mut Vec<IggyMessage>,
    ) -> StoreResult<()> {
        if messages.is_empty() {
            return Ok(());
        }
        let s = named(&self.inner.config.meta_stream, topic)?;
        let t = named(topic, topic)?;
        self.call(
            Op::Write,
            topic,
            -1,
            self.any_session().send_messages(
                &s,
                &t,
                &Partitioning::partition_id(PartitionId::FIRST.iggy()),
                messages,
            ),
        )
        .await?;
        messages.clear();
        Ok(())
    }

    /// Compacts one partition now if it is due (`force`: whatever its dirty ratio),
    /// stopping after `stop` when given (crash tests).
    #[doc(hidden)]
    pub async fn compact_partition(
        &self,
        topic: &str,
        partition: i32,
        force: bool,
        stop: Option<PassStep>,
    ) -> StoreResult<PassReport> {
        self.compact_at(topic, partition, force, stop, now_ms())
            .await
    }

    /// Compacts every partition of every compacted topic that is due as of `now_ms`
    /// (the clock `min.compaction.lag.ms`, `max.compaction.lag.ms` and
    /// `delete.retention.ms` are applied on), whoever leads it: the store suite's
    /// compaction driver.
    #[doc(hidden)]
    pub async fn compact_due(&self, now_ms: i64) -> StoreResult<Vec<PassReport>> {
        let mut out = Vec::new();
        let topics = kafka_store::LogStore::topics(self).await?;
        for t in topics.iter().filter(|t| t.config.cleanup_policy.compacts()) {
            for partition in 0..t.partitions {
                match self
                    .compact_at(&t.name, partition, false, None, now_ms)
                    .await
                {
                    Ok(report) => out.push(report),
                    // Deleted meanwhile.
                    Err(StoreError::UnknownTopicOrPartition { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(out)
    }

    /// The Kafka timestamp of the record at `offset` of the partition, and the start of
    /// the producer batch it belongs to.
    async fn record_at(
        &self,
        r: &Resolved,
        topic: &str,
        p: PartitionId,
        offset: i64,
    ) -> StoreResult<Option<(i64, i64)>> {
        let at = convert::iggy_offset(offset)?;
        let found = self.poll(r, topic, p, at, 1).await?;
        Ok(found.first().filter(|m| m.offset == at).map(|m| {
            let delta = i64::from(m.offset_delta.unwrap_or(0).max(0));
            (m.record.timestamp, offset - delta)
        }))
    }

    /// The transactions of a partition from `start` to `high`: the companion, then the
    /// partition from `from` (a third read of the records, for topics that ever held a
    /// transactional batch only).
    #[allow(clippy::too_many_arguments)]
    async fn txn_index(
        &self,
        r: &Resolved,
        topic: &str,
        p: PartitionId,
        old: Option<&CompactedPartition>,
        start: i64,
        from: i64,
        high: i64,
        throttle: &mut Throttle,
    ) -> StoreResult<TxnIndex> {
        let mut index = TxnIndex::new(start);
        let mut batches = Batches::default();
        for mut src in self.sources(r, topic, p, old, from, high)? {
            while !src.done {
                let page = self.next_page(&mut src, topic).await?;
                let mut bytes = 0;
                for (offset, m) in &page {
                    bytes += message_bytes(m);
                    if *offset < start {
                        continue;
                    }
                    let mapped = mapping::from_message(m).map_err(|e| {
                        StoreError::Internal(format!("{topic}/{p} offset {offset}: {e}"))
                    })?;
                    if let Some(summary) = batches.step(*offset, &mapped) {
                        index.observe(&summary);
                    }
                }
                throttle.account(bytes).await;
            }
        }
        Ok(index)
    }

    async fn compact_at(
        &self,
        topic: &str,
        partition: i32,
        force: bool,
        stop: Option<PassStep>,
        now_ms: i64,
    ) -> StoreResult<PassReport> {
        let _one_at_a_time = self.inner.compaction_lock.lock().await;
        let p = PartitionId::of(topic, partition)?;
        let r = self.require(topic, p).await?;
        let meta = self.meta_of(&r)?;
        let mut report = PassReport::default();
        if !meta.config.cleanup_policy.compacts() {
            return Ok(report);
        }
        let part = r
            .partitions
            .iter()
            .find(|x| x.id == p.iggy())
            .ok_or_else(|| StoreError::UnknownTopicOrPartition {
                topic: topic.to_owned(),
                partition,
            })?;
        let w = self.watermarks_of(&r, p)?;
        let high = w.high_watermark;
        let physical = high - convert::kafka_i64(part.messages_count);
        let sealed = part.segments_count.saturating_sub(1);
        let old = meta.compacted.get(&p.iggy()).cloned();
        let start = old.as_ref().map_or(w.log_start_offset, |o| o.start);
        let from = old
            .as_ref()
            .map_or(w.log_start_offset, |o| o.end.max(physical));
        let generation = old.as_ref().map_or(1, |o| o.g + 1);
        let next_name = companion_name(&r.key, p.iggy(), generation);
        // Leftovers of a pass that died: the generation after the current one (written
        // before its switch) and the one before it (after its switch).
        self.drop_companion(&next_name).await?;
        if let Some(o) = &old
            && o.g > 1
        {
            self.drop_companion(&companion_name(&r.key, p.iggy(), o.g - 1))
                .await?;
        }
        if high <= from {
            // Nothing new; segments a pass that died did not delete go now (every
            // sealed one ends below `high`, the boundary).
            if old.as_ref().is_some_and(|o| o.end == high) {
                (report.reclaimed_bytes, report.segments_deleted) =
                    self.delete_sealed(topic, &r, p, sealed, physical).await?;
                self.inner
                    .metrics
                    .compaction
                    .record_reclaimed(report.reclaimed_bytes);
            }
            return Ok(report);
        }
        // Bytes of the part after the previous boundary, from Iggy's average message
        // size; the companion's bytes as clean.
        let avg = part.size.as_bytes_u64() / part.messages_count.max(1);
        let dirty = avg.saturating_mul(u64::try_from(high - from).unwrap_or(0));
        let clean = match &old {
            Some(o) => self
                .companion_size(&companion_name(&r.key, p.iggy(), o.g))
                .await?
                .unwrap_or(0),
            None => 0,
        };
        report.dirty_ratio = dirty as f64 / (dirty + clean).max(1) as f64;
        self.inner
            .metrics
            .compaction
            .observe_dirty_ratio(report.dirty_ratio);
        if !force && report.dirty_ratio < meta.config.min_cleanable_dirty_ratio {
            // `max.compaction.lag.ms`: a record dirty for that long makes the partition
            // due whatever its ratio.
            let lag = meta.config.max_compaction_lag_ms;
            let overdue = lag < i64::MAX
                && self
                    .record_at(&r, topic, p, from)
                    .await?
                    .is_some_and(|(ts, _)| ts <= now_ms.saturating_sub(lag));
            if !overdue {
                return Ok(report);
            }
        }
        // The producer batch holding the last record is the active part of the log:
        // never cleaned (as Kafka does not clean the active segment).
        let active = self
            .record_at(&r, topic, p, high - 1)
            .await?
            .map_or(high - 1, |(_, base)| base)
            .max(from);
        let clean_end = old.as_ref().map_or(start, |o| o.c);
        let cleaner = self.inner.config.cleaner.clone();
        let mut throttle = Throttle::new(cleaner.io_max_bytes_per_second);
        // Transactions: the pass stops at the first offset of the oldest open one, and
        // drops aborted records without letting them supersede anything.
        let txns = if meta.transactional {
            Some(
                self.txn_index(&r, topic, p, old.as_ref(), start, from, high, &mut throttle)
                    .await?,
            )
        } else {
            None
        };
        let active = txns
            .as_ref()
            .and_then(TxnIndex::first_unstable)
            .map_or(active, |unstable| active.min(unstable));
        let rules = CompactionRules::for_topic(&meta.config, now_ms, cleaner.dedupe_buffer_size);
        let mut pass = CompactionPass::new(rules);
        // Phase 1: the key map over the dirty section (after the clean one, before the
        // active batch), in offset order.
        let mut observing = true;
        let mut batches = Batches::default();
        for mut src in self.sources(&r, topic, p, old.as_ref(), from, active)? {
            while observing && !src.done {
                let page = self.next_page(&mut src, topic).await?;
                let mut bytes = 0;
                for (offset, m) in &page {
                    if *offset < clean_end {
                        // Followed still, for a transactional batch that straddles the
                        // clean end.
                        if txns.is_some()
                            && let Ok(mapped) = mapping::from_message(m)
                        {
                            batches.step(*offset, &mapped);
                        }
                        continue;
                    }
                    if *offset >= active {
                        // The companion's unclean section reaches past an open
                        // transaction's start.
                        observing = false;
                        break;
                    }
                    bytes += message_bytes(m);
                    report.records_read += 1;
                    let mapped = mapping::from_message(m).map_err(|e| {
                        StoreError::Internal(format!("{topic}/{p} offset {offset}: {e}"))
                    })?;
                    batches.step(*offset, &mapped);
                    if batches.control() || batches.aborted(txns.as_ref(), *offset) {
                        continue;
                    }
                    let keyed = KeyedRecord {
                        offset: *offset,
                        key: mapped.record.key.as_deref(),
                        tombstone: mapped.record.value.is_none(),
                        timestamp_ms: mapped.record.timestamp,
                    };
                    if !pass.observe(&keyed) {
                        observing = false;
                        break;
                    }
                }
                report.bytes_read += bytes;
                throttle.account(bytes).await;
            }
        }
        let cleaned_to = pass.end_offset().unwrap_or(active).min(active);
        // Phase 2: the survivors into the new generation.
        self.create_companion(&next_name).await?;
        let logical_start = meta.log_start.get(&p.iggy()).copied().unwrap_or(0);
        // With `cleanup.policy=compact,delete`, `retention.ms` removes the oldest part of
        // the compacted prefix too: the leading records older than it (never the
        // active batch), and the log start moves past them, as Kafka's retention
        // deletes whole old segments.
        let expire_before = Some(meta.config.retention_ms)
            .filter(|ms| meta.config.cleanup_policy.deletes() && *ms > 0)
            .map(|ms| now_ms.saturating_sub(ms));
        let mut expiring = expire_before.is_some();
        let mut new_start = start;
        let mut index = SparseIndex::default();
        let mut written: u64 = 0;
        let mut batch: Vec<IggyMessage> = Vec::new();
        let mut batch_bytes = 0usize;
        let mut batches = Batches::default();
        for mut src in self.sources(&r, topic, p, old.as_ref(), from, high)? {
            while !src.done {
                let page = self.next_page(&mut src, topic).await?;
                let mut bytes = 0;
                for (offset, m) in page {
                    bytes += message_bytes(&m);
                    let mapped = mapping::from_message(&m).map_err(|e| {
                        StoreError::Internal(format!("{topic}/{p} offset {offset}: {e}"))
                    })?;
                    batches.step(offset, &mapped);
                    if offset < logical_start {
                        report.records_removed += 1;
                        continue;
                    }
                    // Markers stay (readers of the compacted view still learn where
                    // transactions end); aborted records in the cleaned section go.
                    let control = batches.control();
                    if offset < cleaned_to && batches.aborted(txns.as_ref(), offset) {
                        report.records_removed += 1;
                        continue;
                    }
                    let keyed = KeyedRecord {
                        offset,
                        key: mapped.record.key.as_deref(),
                        tombstone: mapped.record.value.is_none(),
                        timestamp_ms: mapped.record.timestamp,
                    };
                    if expiring {
                        if offset < cleaned_to
                            && expire_before.is_some_and(|cut| keyed.timestamp_ms < cut)
                        {
                            new_start = new_start.max(offset + 1);
                            report.records_removed += 1;
                            continue;
                        }
                        expiring = false;
                    }
                    if offset < cleaned_to && !control && !pass.keep(&keyed) {
                        report.records_removed += 1;
                        continue;
                    }
                    index.add(offset, written);
                    batch_bytes += m.payload.len() + m.user_headers.as_ref().map_or(0, Bytes::len);
                    batch.push(companion_message(offset, m));
                    written += 1;
                    if batch_bytes >= self.inner.config.send_batch_bytes {
                        self.send_companion(&next_name, &mut batch).await?;
                        batch_bytes = 0;
                    }
                }
                throttle.account(bytes.saturating_mul(2)).await;
            }
        }
        self.send_companion(&next_name, &mut batch).await?;
        report.records_kept = written;
        report.generation = generation;
        report.end = high;
        report.cleaned_to = cleaned_to;
        report.ran = true;
        report.companion_bytes = self.companion_size(&next_name).await?.unwrap_or(0);
        let metrics = &self.inner.metrics.compaction;
        metrics.record_pass(report.bytes_read, report.records_removed);
        if stop == Some(PassStep::CompanionWritten) {
            return Ok(report);
        }
        // The switch: one record of the `topics` log.
        let state = CompactedPartition {
            g: generation,
            start: new_start,
            c: cleaned_to,
            end: high,
            n: written,
            idx: index.entries,
        };
        let mut fresh = self.meta_of(&r)?;
        fresh.compacted.insert(p.iggy(), state);
        self.inner
            .meta
            .put_topic(self.any_session(), &r.key, fresh)
            .await?;
        let now = self
            .inner
            .meta
            .topic(&r.key)?
            .and_then(|m| m.compacted.get(&p.iggy()).map(|c| c.g));
        if now != Some(generation) {
            return Err(StoreError::Internal(format!(
                "{topic}/{p}: compaction generation {generation} lost to {now:?}"
            )));
        }
        if stop == Some(PassStep::Switched) {
            return Ok(report);
        }
        // The segments sealed when the pass began hold offsets below `high` only.
        (report.reclaimed_bytes, report.segments_deleted) =
            self.delete_sealed(topic, &r, p, sealed, physical).await?;
        if stop == Some(PassStep::SegmentsDeleted) {
            metrics.record_reclaimed(report.reclaimed_bytes);
            return Ok(report);
        }
        if let Some(o) = &old {
            report.reclaimed_bytes += self
                .drop_companion(&companion_name(&r.key, p.iggy(), o.g))
                .await?;
        }
        metrics.record_reclaimed(report.reclaimed_bytes);
        self.forget(topic);
        Ok(report)
    }

    /// Deletes the `sealed` oldest segments of the partition when its first offset is
    /// still `physical` (Iggy retention removing segments meanwhile would make "the
    /// oldest `sealed`" reach further). Returns the bytes Iggy gave back and the
    /// segments that went, as Iggy reports them once the deletion shows (it is applied
    /// after the call returns; waited for at most `DELETE_SETTLE`).
    async fn delete_sealed(
        &self,
        topic: &str,
        r: &Resolved,
        p: PartitionId,
        sealed: u32,
        physical: i64,
    ) -> StoreResult<(u64, u32)> {
        if sealed == 0 {
            return Ok((0, 0));
        }
        let Some(before) = self.partition_now(topic, p).await? else {
            return Ok((0, 0));
        };
        let physical_now = convert::kafka_i64(before.current_offset + 1)
            - convert::kafka_i64(before.messages_count);
        if physical_now != physical || before.messages_count == 0 {
            tracing::info!(
                topic,
                partition = p.kafka(),
                "partition start moved during compaction; its segments are deleted by the next pass"
            );
            return Ok((0, 0));
        }
        let (s, t) = (
            named(&r.target.stream, topic)?,
            named(&r.target.topic, topic)?,
        );
        self.call(
            Op::Admin,
            topic,
            p.kafka(),
            self.any_session().delete_segments(&s, &t, p.iggy(), sealed),
        )
        .await?;
        let deadline = Instant::now() + DELETE_SETTLE;
        let mut after = before.clone();
        while Instant::now() < deadline {
            if let Some(now) = self.partition_now(topic, p).await? {
                after = now;
            }
            if after.segments_count + sealed <= before.segments_count {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok((
            before
                .size
                .as_bytes_u64()
                .saturating_sub(after.size.as_bytes_u64()),
            before.segments_count.saturating_sub(after.segments_count),
        ))
    }

    /// Iggy's fresh description of one partition.
    async fn partition_now(
        &self,
        topic: &str,
        p: PartitionId,
    ) -> StoreResult<Option<iggy::prelude::Partition>> {
        Ok(self
            .require(topic, p)
            .await?
            .partitions
            .iter()
            .find(|x| x.id == p.iggy())
            .cloned())
    }

    /// A read at `offset` of a partition that may be compacted: below its boundary the
    /// records come from the companion, one single-record batch each.
    pub(super) async fn read_compacted(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_bytes: usize,
    ) -> StoreResult<CompactedRead> {
        match self
            .read_companion(topic, partition, offset, max_bytes)
            .await
        {
            // The generation this gateway knows was replaced (and deleted) by another
            // gateway's pass: read the `topics` log again and retry once.
            Err(StoreError::UnknownTopicOrPartition { .. }) => {
                self.inner.meta.refresh(self.meta_session()).await;
                self.read_companion(topic, partition, offset, max_bytes)
                    .await
            }
            other => other,
        }
    }

    async fn read_companion(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_bytes: usize,
    ) -> StoreResult<CompactedRead> {
        let p = PartitionId::of(topic, partition)?;
        let r = self.require_cached(topic, p).await?;
        let Some(c) = self.compacted_of(&r.key, p)? else {
            return Ok(CompactedRead::Main(offset));
        };
        if offset >= c.end {
            return Ok(CompactedRead::Main(offset));
        }
        let w = self.watermarks_of(&r, p)?;
        if offset < w.log_start_offset || offset > w.high_watermark {
            return Err(StoreError::OffsetOutOfRange {
                offset,
                log_start_offset: w.log_start_offset,
                high_watermark: w.high_watermark,
            });
        }
        let at = lookup(&c.idx, offset);
        let mut src = self.companion_source(&r, topic, p, &c, at)?;
        let mut out = ReadOutcome {
            watermarks: Watermarks {
                log_start_offset: w.log_start_offset,
                high_watermark: w.high_watermark,
            },
            batches: Vec::new(),
        };
        let mut size = 0usize;
        let want = self.poll_count(max_bytes);
        // The messages between the indexed one and `offset` are skipped: up to the next
        // index entry, which may take more polls than the records themselves.
        let skip = c
            .idx
            .iter()
            .map(|e| e.1)
            .find(|pos| *pos > at)
            .unwrap_or(c.n)
            .saturating_sub(at);
        let polls = MAX_COMPANION_POLLS
            + usize::try_from(skip / u64::from(want.max(1))).unwrap_or(usize::MAX);
        // The frame of the last batch whose first record this read saw.
        let mut seen: Option<mapping::BatchFrame> = None;
        for _ in 0..polls {
            if src.done {
                break;
            }
            let messages = self.poll_raw(&src, want, topic).await?;
            let Some(last) = messages.last().map(|m| m.header.offset) else {
                if src.next < c.n {
                    // The generation holds more than that: it is gone (replaced by
                    // another gateway's pass), whatever Iggy answered.
                    return Err(StoreError::UnknownTopicOrPartition {
                        topic: topic.to_owned(),
                        partition,
                    });
                }
                src.done = true;
                break;
            };
            src.next = last + 1;
            for m in messages {
                let k =
                    convert::kafka_i64(u64::try_from(m.header.id.saturating_sub(1)).unwrap_or(0));
                if k < offset {
                    continue;
                }
                if k >= c.end {
                    src.done = true;
                    break;
                }
                let mut mapped = mapping::from_message(&m)
                    .map_err(|e| StoreError::Internal(format!("{topic}/{p} offset {k}: {e}")))?;
                // Transactional records and markers keep their producer and bits.
                let single = mapping::partial_frame(&mapped, seen.as_ref(), 1);
                if mapped.batch.is_some() {
                    seen = mapped.batch.as_deref().copied();
                }
                let record = std::mem::take(&mut mapped.record);
                let mut bytes = BytesMut::new();
                mapping::encode_run(
                    k,
                    single.as_ref(),
                    std::slice::from_ref(&record),
                    &mut bytes,
                )
                .map_err(|e| StoreError::Internal(format!("re-encoding the record at {k}: {e}")))?;
                if !out.batches.is_empty() && size + bytes.len() > max_bytes {
                    return Ok(CompactedRead::Served(out));
                }
                size += bytes.len();
                out.batches.push(bytes.freeze());
                if size >= max_bytes {
                    return Ok(CompactedRead::Served(out));
                }
            }
        }
        if out.batches.is_empty() && src.done {
            // Nothing survives from `offset` to the boundary.
            return Ok(CompactedRead::Main(c.end));
        }
        Ok(CompactedRead::Served(out))
    }

    /// For scans of a compacted partition: visits the companion's records (the view
    /// below the boundary) and returns where the scan goes on in the partition, or
    /// `None` when `visit` stopped it (or the partition is not compacted: `Some(from)`).
    pub(super) async fn scan_companion(
        &self,
        r: &Resolved,
        name: &str,
        p: PartitionId,
        from: i64,
        visit: &mut impl FnMut(&MappedRecord) -> bool,
    ) -> StoreResult<Option<i64>> {
        let Some(c) = self.compacted_of(&r.key, p)? else {
            return Ok(Some(from));
        };
        if from >= c.end {
            return Ok(Some(from));
        }
        let mut src = self.companion_source(r, name, p, &c, 0)?;
        while !src.done {
            for (offset, m) in self.next_page(&mut src, name).await? {
                if offset < from {
                    continue;
                }
                let mut mapped = mapping::from_message(&m).map_err(|e| {
                    StoreError::Internal(format!("{name}/{p} offset {offset}: {e}"))
                })?;
                mapped.offset = u64::try_from(offset).unwrap_or(0);
                if visit(&mapped) {
                    return Ok(None);
                }
            }
        }
        if src.next < c.n {
            // Fewer messages than the generation holds: it is gone (another gateway's
            // pass replaced it); a retriable error, this gateway's refresh catches up.
            return Err(StoreError::UnknownTopicOrPartition {
                topic: name.to_owned(),
                partition: p.kafka(),
            });
        }
        Ok(Some(c.end))
    }

    /// Deletes the companions of a topic being deleted (current generation and its
    /// neighbours a crashed pass may have left).
    pub(super) async fn drop_companions(&self, r: &Resolved) {
        let Ok(Some(meta)) = self.inner.meta.topic(&r.key) else {
            return;
        };
        for (p, c) in &meta.compacted {
            for g in [c.g.saturating_sub(1), c.g, c.g + 1] {
                if g == 0 {
                    continue;
                }
                if let Err(e) = self.drop_companion(&companion_name(&r.key, *p, g)).await {
                    tracing::warn!(topic = %r.target.topic, partition = p, error = %e, "cannot delete a compaction companion topic");
                }
            }
        }
    }

    /// Starts the background cleaner (unless `log.cleaner.enable` is off): every
    /// `log.cleaner.backoff.ms` it looks at every topic with `cleanup.policy` compact and
    /// compacts the partitions `leads` says this gateway leads, one at a time, when their
    /// dirty ratio reaches `min.cleanable.dirty.ratio`. It stops when the bridge is
    /// closed or dropped.
    pub fn start_compaction(&self, leads: LeaderFn) -> Option<tokio::task::JoinHandle<()>> {
        if !self.inner.config.cleaner.enable {
            return None;
        }
        let weak = Arc::downgrade(&self.inner);
        Some(tokio::spawn(async move {
            let every = match weak.upgrade() {
                Some(inner) => inner.config.cleaner.backoff,
                None => return,
            };
            loop {
                tokio::time::sleep(every).await;
                let Some(inner) = weak.upgrade() else { return };
                if inner.closed.load(std::sync::atomic::Ordering::Relaxed) {
                    return;
                }
                let bridge = IggyBridge { inner };
                bridge.compaction_round(&leads).await;
            }
        }))
    }

    /// One round of the background cleaner; failures are counted and logged once.
    async fn compaction_round(&self, leads: &LeaderFn) {
        let topics = match kafka_store::LogStore::topics(self).await {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, "compaction: cannot list topics");
                return;
            }
        };
        let (mut failed, mut last_error) = (0u32, None);
        for t in topics.iter().filter(|t| t.config.cleanup_policy.compacts()) {
            for partition in 0..t.partitions {
                if !leads(&t.name, partition) {
                    continue;
                }
                if let Err(e) = self
                    .compact_partition(&t.name, partition, false, None)
                    .await
                {
                    failed += 1;
                    last_error = Some(format!("{}/{partition}: {e}", t.name));
                }
            }
        }
        if let Some(e) = last_error {
            self.inner.metrics.compaction.record_failures(failed);
            tracing::warn!(failed, last = %e, "compaction passes failed; retried next round");
        }
    }
}

/// The companion copy of a partition's message: same payload and user headers, id =
/// Kafka offset + 1 (Iggy gives id 0 a random id), origin timestamp kept.
fn companion_message(offset: i64, m: IggyMessage) -> IggyMessage {
    let id = u128::from(u64::try_from(offset).unwrap_or(0)) + 1;
    IggyMessage {
        header: IggyMessageHeader {
            checksum: 0,
            id,
            offset: 0,
            timestamp: 0,
            origin_timestamp: m.header.origin_timestamp,
            user_headers_length: m.header.user_headers_length,
            payload_length: m.header.payload_length,
            reserved: 0,
        },
        payload: m.payload,
        user_headers: m.user_headers,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_stays_bounded_and_points_at_or_before_every_offset() {
        let mut index = SparseIndex::default();
        // Kafka offsets with gaps: message i holds offset 3 * i + 1.
        let n: u64 = 200_000;
        for i in 0..n {
            index.add(3 * i as i64 + 1, i);
        }
        assert!(index.entries.len() <= MAX_INDEX_ENTRIES);
        assert!(index.entries.len() > MAX_INDEX_ENTRIES / 2);
        assert!(
            index
                .entries
                .windows(2)
                .all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1)
        );
        for probe in [0, 1, 2, 4, 3000, 299_999, 599_998, 10_000_000] {
            let at = lookup(&index.entries, probe);
            // The message at `at` holds an offset at or below the probe (or it is the
            // first), and the read skips at most one stride.
            let held = 3 * at as i64 + 1;
            assert!(held <= probe.max(1), "probe {probe}: starts at {held}");
            let wanted = ((probe - 1).max(0) / 3).min(n as i64 - 1) as u64;
            assert!(
                wanted - at < index.stride,
                "probe {probe}: {at} for {wanted}"
            );
        }
    }

    #[test]
    fn companion_messages_carry_the_kafka_offset_in_their_id() {
        let message = IggyMessage {
            header: IggyMessageHeader {
                id: 99,
                offset: 12,
                timestamp: 5,
                origin_timestamp: 7,
                payload_length: 1,
                ..IggyMessageHeader::default()
            },
            payload: Bytes::from_static(b"v"),
            user_headers: None,
        };
        let copy = companion_message(41, message);
        assert_eq!(copy.header.id, 42);
        assert_eq!(copy.header.origin_timestamp, 7);
        assert_eq!((copy.header.offset, copy.header.timestamp), (0, 0));
        assert_eq!(copy.payload.as_ref(), b"v");
        let key = TopicKey {
            stream: "kafka".into(),
            topic: "t".into(),
            created_at: 1,
        };
        let name = companion_name(&key, 3, 2);
        assert!(name.starts_with("compacted.") && name.ends_with(".3.2"));
        assert_eq!(name.len(), "compacted.".len() + 32 + ".3.2".len());
    }
}
