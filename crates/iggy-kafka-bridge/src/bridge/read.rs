//! The read path: Iggy polls mapped back to Kafka records, a read answered from one
//! poll when the cached description allows ([`IggyBridge::read_fast`]), a read that
//! starts at the batch holding its offset and re-encodes runs of records as Kafka
//! batches within the byte limit, and scans of a whole partition.
//!
//! Polls are sized from the Fetch's byte limit with a running estimate of the bytes one
//! message takes, rounded to whole producer batches of the size the read last saw
//! ([`aligned_count`]) so that answers do not end inside a batch; what a read polled
//! but did not return goes to `read_ahead`.

use super::read_ahead::{PendingPoll, append_items, mapped_size};
use super::topics::Resolved;
use super::{IggyBridge, named};
use crate::convert;
use crate::errors::Op;
use crate::mapping::{self, BatchFrame, MappedRecord, MappingError};
use crate::partition::PartitionId;
use crate::polled::{self, Item, Partial, Polled};
use bytes::{Bytes, BytesMut};
use iggy::prelude::{Identifier, PolledMessages, PollingStrategy};
use kafka_records::NewRecord;
use kafka_store::{ReadOutcome, StoreError, StoreResult, Watermarks};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;

impl IggyBridge {
    /// Up to `count` (at least one) messages of one Iggy partition from Iggy offset
    /// `offset`, read without a stored consumer offset, as the SDK's messages (for the
    /// compaction's reads, which need their ids; [`polled::poll_checked`]). `name` and
    /// `kafka_partition` name the read in errors.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn poll_from(
        &self,
        stream: &Identifier,
        topic: &Identifier,
        iggy_partition: u32,
        offset: u64,
        count: u32,
        name: &str,
        kafka_partition: i32,
    ) -> StoreResult<PolledMessages> {
        self.call(
            Op::Read,
            name,
            kafka_partition,
            polled::poll_checked(
                self.any_session(),
                stream,
                topic,
                iggy_partition,
                &PollingStrategy::offset(offset),
                count,
            ),
        )
        .await
    }

    /// Polls up to `count` messages from `offset`, as records (for scans and a read's
    /// head).
    pub(super) async fn poll(
        &self,
        r: &Resolved,
        name: &str,
        partition: PartitionId,
        offset: u64,
        count: u32,
    ) -> StoreResult<Vec<MappedRecord>> {
        let polled = self
            .poll_decoded(r, name, partition, offset, count, polled::decode_poll)
            .await?;
        Ok(polled.records)
    }

    /// Polls up to `count` messages from `offset` as a read takes them (whole producer
    /// batches already written, [`polled::decode_poll_items_with`]). With `partial`, the
    /// first messages of the batch at `offset` that the poll before ended inside, only
    /// the messages after them are asked for (at least the batch's rest, at most
    /// `poll_batch_messages`), and the items start with that batch.
    pub(super) async fn poll_at(
        &self,
        r: &Resolved,
        name: &str,
        partition: PartitionId,
        offset: u64,
        count: u32,
        partial: Option<Partial>,
    ) -> StoreResult<ItemsPolled> {
        let partial = partial.filter(|p| p.head() == offset);
        let (from, count) = match &partial {
            Some(p) => {
                let held = convert::poll_count(usize::try_from(p.end() - p.head()).unwrap_or(0));
                let missing = convert::poll_count(p.missing());
                let count = count
                    .saturating_sub(held)
                    .max(missing)
                    .clamp(1, self.inner.config.poll_batch_messages);
                (p.end(), count)
            }
            None => (offset, count),
        };
        let polled = self
            .poll_decoded(r, name, partition, from, count, move |answer, from| {
                polled::decode_poll_items_with(answer, from, partial)
            })
            .await?;
        Ok(ItemsPolled {
            items: polled.records,
            current: polled.current_offset,
            partial: polled.partial,
        })
    }

    /// Iggy's answer to a poll of up to `count` messages from `offset`, read by
    /// `decode`; the poll's bytes per message go into the running estimate.
    async fn poll_decoded<T>(
        &self,
        r: &Resolved,
        name: &str,
        partition: PartitionId,
        offset: u64,
        count: u32,
        decode: impl FnOnce(Bytes, u64) -> Result<Polled<T>, MappingError>,
    ) -> StoreResult<Polled<T>> {
        let (s, t) = (
            named(&r.target.stream, name)?,
            named(&r.target.topic, name)?,
        );
        let answer = self
            .call(
                Op::Read,
                name,
                partition.kafka(),
                polled::poll_answer(
                    self.any_session(),
                    &s,
                    &t,
                    partition.iggy(),
                    &PollingStrategy::offset(offset),
                    count,
                ),
            )
            .await?;
        let polled = decode(answer, offset)
            .map_err(|e| StoreError::Internal(format!("{name}/{partition}: {e}")))?;
        self.count_message_bytes(polled.messages, polled.data_bytes);
        self.inner
            .metrics
            .record_poll(polled.messages, polled.data_bytes);
        Ok(polled)
    }

    /// Updates the running estimate of the bytes one message takes with a poll's.
    fn count_message_bytes(&self, messages: usize, data_bytes: usize) {
        // Record overhead in a Kafka batch is about 10 bytes plus the headers' names.
        if let Some(each) = data_bytes.checked_div(messages) {
            let each = each.saturating_add(16).max(16);
            let old = self.inner.message_bytes.load(Ordering::Relaxed);
            self.inner
                .message_bytes
                .store((old * 3 + each) / 4, Ordering::Relaxed);
        }
    }

    /// How many messages to ask Iggy for to fill about `max_bytes` (at most
    /// `poll_max_bytes`), never more than `poll_batch_messages`.
    pub(super) fn poll_count(&self, max_bytes: usize) -> u32 {
        let each = self.inner.message_bytes.load(Ordering::Relaxed).max(16);
        let max_bytes = max_bytes.min(self.inner.config.poll_max_bytes);
        let n = (max_bytes / each).saturating_add(1);
        convert::poll_count(n).clamp(1, self.inner.config.poll_batch_messages)
    }

    /// [`Self::poll_count`] for a poll from the first record of a producer batch, when
    /// the read's last whole batch had `batch_records` records: see [`aligned_count`].
    /// A batch larger than the count is asked for whole only as far as the estimate
    /// puts it within `poll_max_bytes` (and `poll_batch_messages`).
    pub(super) fn poll_count_after(&self, max_bytes: usize, batch_records: Option<u32>) -> u32 {
        let count = self.poll_count(max_bytes);
        let largest = self.poll_count(self.inner.config.poll_max_bytes);
        aligned_count(count, batch_records, largest)
    }

    /// One poll at `offset` with the cached description. A hit is a poll that starts
    /// exactly at `offset` (so it is inside the log) and gives the high watermark too;
    /// anything else (nothing there, or the log starts later) is a miss, and the caller
    /// asks Iggy for fresh watermarks to answer exactly.
    async fn read_fast(
        &self,
        topic: &str,
        p: PartitionId,
        offset: i64,
        max_bytes: usize,
    ) -> StoreResult<Fast> {
        let count = self.poll_count(max_bytes);
        let Ok(start) = u64::try_from(offset) else {
            return Ok(Fast::Miss);
        };
        let r = self.require_cached(topic, p).await?;
        // The log start only moves up, so below the cached one (the logical start, or
        // where retention had left the partition) is below the real one too.
        let cached = self.watermarks_of(&r, p)?;
        if offset < cached.log_start_offset {
            return Ok(Fast::Miss);
        }
        if let Some(taken) = self.take_ahead(&r.target, p, start).await {
            let w = Watermarks {
                log_start_offset: cached.log_start_offset,
                high_watermark: convert::kafka_i64(taken.high_watermark),
            };
            return Ok(Fast::Hit(r, w, taken.records, taken.pending, taken.partial));
        }
        let ItemsPolled {
            items: first,
            current,
            partial,
        } = match self.poll_at(&r, topic, p, start, count, None).await {
            Ok(polled) => polled,
            Err(e) => {
                self.forget(topic);
                return Err(e);
            }
        };
        let Some(head) = first.first() else {
            // Iggy's current offset is that of the last message, so an offset right
            // after it is the end; 0 is ambiguous (empty, or one message at 0).
            if current > 0 && current.checked_add(1) == Some(start) {
                return Ok(Fast::AtEnd(Watermarks {
                    log_start_offset: cached.log_start_offset,
                    high_watermark: offset,
                }));
            }
            return Ok(Fast::Miss);
        };
        if head.offset() != start {
            return Ok(Fast::Miss);
        }
        let last = first.last().map_or(start, Item::last_offset);
        let high_watermark = convert::kafka_i64(current.max(last).saturating_add(1));
        let w = Watermarks {
            log_start_offset: cached.log_start_offset,
            high_watermark,
        };
        Ok(Fast::Hit(r, w, first.into(), None, partial))
    }

    /// Scans the partition from its log start; `visit` returns `true` to stop.
    pub(super) async fn scan(
        &self,
        name: &str,
        p: PartitionId,
        mut visit: impl FnMut(&MappedRecord) -> bool,
    ) -> StoreResult<()> {
        let r = self.require(name, p).await?;
        let w = self.watermarks_of(&r, p)?;
        // A compacted partition's prefix is in its companion.
        let Some(from) = self
            .scan_companion(&r, name, p, w.log_start_offset, &mut visit)
            .await?
        else {
            return Ok(());
        };
        let mut offset = convert::iggy_offset(from)?;
        let end = convert::iggy_offset(w.high_watermark)?;
        while offset < end {
            let records = self
                .poll(&r, name, p, offset, self.inner.config.poll_batch_messages)
                .await?;
            let Some(last) = records.last().map(|m| m.offset) else {
                break;
            };
            for m in &records {
                if m.offset < end && visit(m) {
                    return Ok(());
                }
            }
            offset = last + 1;
        }
        Ok(())
    }

    /// What [`kafka_store::LogStore::read`] answers.
    pub(super) async fn read_partition(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_bytes: usize,
    ) -> StoreResult<ReadOutcome> {
        let p = PartitionId::of(topic, partition)?;
        // Below a compacted partition's boundary the records come from its companion.
        let offset = match self
            .read_compacted(topic, partition, offset, max_bytes)
            .await?
        {
            super::compaction::CompactedRead::Served(out) => return Ok(out),
            super::compaction::CompactedRead::Main(offset) => offset,
        };
        // A Fetch's byte limit is the client's to choose; what the bridge polls and
        // re-encodes for one partition is bounded by `poll_max_bytes` all the same.
        let max_bytes = max_bytes.min(self.inner.config.poll_max_bytes);
        let chunk = self.poll_count(max_bytes);
        let (r, w, first, mut running, mut partial) =
            match self.read_fast(topic, p, offset, max_bytes).await? {
                Fast::Hit(r, w, first, running, partial) => (r, w, first, running, partial),
                Fast::AtEnd(w) => {
                    return Ok(ReadOutcome {
                        watermarks: w,
                        batches: Vec::new(),
                    });
                }
                Fast::Miss => {
                    let r = self.require(topic, p).await?;
                    let w = self.watermarks_of(&r, p)?;
                    if offset < w.log_start_offset || offset > w.high_watermark {
                        return Err(out_of_range(offset, &w));
                    }
                    if offset == w.high_watermark {
                        return Ok(ReadOutcome {
                            watermarks: w,
                            batches: Vec::new(),
                        });
                    }
                    let start = u64::try_from(offset).map_err(|_| out_of_range(offset, &w))?;
                    let polled = self.poll_at(&r, topic, p, start, chunk, None).await?;
                    (r, w, VecDeque::from(polled.items), None, polled.partial)
                }
            };
        let mut out = ReadOutcome {
            watermarks: w,
            batches: Vec::new(),
        };
        // Both ways here checked the offset against the log start, which is not negative.
        let start = u64::try_from(offset).map_err(|_| out_of_range(offset, &w))?;
        let end = convert::iggy_offset(w.high_watermark)?;
        let mut buf: VecDeque<Item> = first;
        // A read starts with the batch holding the offset, as in Kafka.
        if let Some(Item::Record(first)) = buf.front()
            && let Some(delta) = first.offset_delta
            && delta > 0
        {
            let physical_start = end.saturating_sub(
                r.partitions
                    .iter()
                    .find(|x| x.id == p.iggy())
                    .map_or(0, |x| x.messages_count),
            );
            let base = first
                .offset
                .saturating_sub(u64::from(delta.unsigned_abs()))
                .max(physical_start);
            if base < first.offset {
                let head_len = convert::poll_count(first.offset - base);
                let head = self.poll(&r, topic, p, base, head_len).await?;
                for m in head.into_iter().rev().filter(|m| m.offset < start) {
                    buf.push_front(Item::Record(m));
                }
            }
        }
        let mut size = 0usize;
        // The record count of the last whole batch returned: the next polls ask for
        // whole batches of that size.
        let mut batch_records: Option<u32> = None;
        // The offset after the last record returned.
        let mut returned_end = 0u64;
        let mut next = buf.back().map_or(start, |m| m.last_offset() + 1);
        // A whole batch goes out as it was written from the poll. Otherwise each run is
        // found where it lies in `buf`, encoded and dropped from it; a run that does not
        // fit stays at the front for the next read.
        loop {
            let first = match buf.front() {
                Some(Item::Record(first)) => first,
                Some(Item::Batch(whole)) => {
                    let len = whole.bytes.len();
                    if !out.batches.is_empty() && size + len > max_bytes {
                        break;
                    }
                    let Some(Item::Batch(whole)) = buf.pop_front() else {
                        break;
                    };
                    size += len;
                    returned_end = whole.last_offset.saturating_add(1);
                    batch_records = whole.record_count().or(batch_records);
                    out.batches.push(whole.bytes);
                    if size >= max_bytes {
                        break;
                    }
                    continue;
                }
                None => {
                    if next >= end {
                        break;
                    }
                    let want = self.poll_count_after(
                        max_bytes.saturating_sub(size),
                        last_batch_records(&buf).or(batch_records),
                    );
                    let more = self
                        .poll_next(&r, topic, p, next, want, &mut running, partial.take())
                        .await?;
                    partial = more.partial;
                    let Some(last) = more.items.last() else { break };
                    next = last.last_offset() + 1;
                    append_items(&mut buf, more.items, 0);
                    continue;
                }
            };
            let base = first.offset_delta.map_or(first.offset, |d| {
                first.offset.saturating_sub(u64::from(d.unsigned_abs()))
            });
            let frame = first
                .batch
                .as_deref()
                .copied()
                .filter(|_| first.offset_delta == Some(0));
            let belongs = |m: &Item| match m {
                Item::Record(m) => {
                    m.offset_delta.is_some()
                        && m.batch.is_none()
                        && m.offset_delta
                            .map(|d| m.offset.saturating_sub(u64::from(d.unsigned_abs())))
                            == Some(base)
                }
                Item::Batch(_) => false,
            };
            let native = first.offset_delta.is_none();
            // A batch that will not fit is not read further: its head stays for the
            // next read, and the Iggy poll for its rest is not made now.
            if let Some(f) = &frame
                && !out.batches.is_empty()
                && usize::try_from(f.record_count).map_or(true, |n| {
                    n.saturating_mul(mapped_size(first)) > max_bytes.saturating_sub(size)
                })
            {
                break;
            }
            let mut last_offset = first.offset;
            // The run is `spilled` followed by `buf[..n]`. It moves to `spilled` only
            // when it reaches the end of `buf` and more must be polled: then `buf` can
            // take over the poll's vector instead of every polled item moving into it.
            let mut spilled: Vec<Item> = Vec::new();
            let mut n = 1usize;
            if !native {
                loop {
                    if n == buf.len() && next < end {
                        // The rest of this batch, when its frame tells how much that is.
                        let want = frame
                            .as_ref()
                            .and_then(|f| usize::try_from(f.record_count).ok())
                            .and_then(|count| count.checked_sub(spilled.len() + n))
                            .and_then(|count| u32::try_from(count).ok())
                            .filter(|count| *count > 0)
                            .map_or(chunk, |count| count.min(chunk));
                        let more = self
                            .poll_next(&r, topic, p, next, want, &mut running, partial.take())
                            .await?;
                        partial = more.partial;
                        let Some(last) = more.items.last() else { break };
                        next = last.last_offset() + 1;
                        spilled.extend(buf.drain(..));
                        n = 0;
                        append_items(&mut buf, more.items, 0);
                    }
                    match buf.get(n) {
                        Some(m) if m.offset() == last_offset + 1 && belongs(m) => {
                            last_offset = m.offset();
                            n += 1;
                        }
                        _ => break,
                    }
                }
            }
            let count = spilled.len() + n;
            // The run's records (all of them records: `belongs` takes no whole batch).
            let run: Vec<&MappedRecord> = spilled
                .iter()
                .chain(buf.range(..n))
                .filter_map(|m| match m {
                    Item::Record(m) => Some(m),
                    Item::Batch(_) => None,
                })
                .collect();
            let Some(head) = run.first() else {
                break;
            };
            // Without the whole batch (a read that starts inside it), transactional
            // records still go out as their producer's transactional batch.
            let whole = frame
                .filter(|f| usize::try_from(f.record_count).ok() == Some(count))
                .or_else(|| mapping::partial_frame(head, frame.as_ref(), count));
            let base_offset = convert::kafka_i64(head.offset);
            let bytes = encode_run(base_offset, whole.as_ref(), &run)?;
            drop(run);
            if !out.batches.is_empty() && size + bytes.len() > max_bytes {
                // The run stays for the next read of this partition.
                for m in spilled.into_iter().rev() {
                    buf.push_front(m);
                }
                break;
            }
            buf.drain(..n);
            size += bytes.len();
            returned_end = last_offset.saturating_add(1);
            out.batches.push(bytes);
            if size >= max_bytes {
                break;
            }
        }
        // Polls after the first may bring records written since the watermarks were
        // read: the high watermark covers what is returned (Iggy holds it).
        out.watermarks.high_watermark = out
            .watermarks
            .high_watermark
            .max(convert::kafka_i64(returned_end));
        let batch_records = last_batch_records(&buf).or(batch_records);
        let left = LeftOff {
            next,
            end,
            max_bytes,
            batch_records,
            running,
            partial,
        };
        self.keep_ahead(&r, topic, p, buf, left);
        Ok(out)
    }
}

/// How many messages to poll from the first record of a producer batch: `count`
/// rounded down to a whole number of batches of `batch_records` records (the last
/// whole batch read; a producer under steady load writes batches of one size), or up
/// to one such batch, at most `largest` messages. An answer that ends inside a batch
/// leaves it for the next poll, which gets its messages from Iggy a second time
/// ([`polled::decode_poll_items`]); with batches of the size assumed it ends after the
/// last one. Without a batch size, or with batches of another size, it is `count`'s
/// answer as before, rounded down by less than one batch.
pub(super) fn aligned_count(count: u32, batch_records: Option<u32>, largest: u32) -> u32 {
    match batch_records.filter(|n| *n > 0) {
        Some(n) if n <= count => count - count % n,
        Some(n) if n <= largest => n,
        _ => count,
    }
}

/// The record count of the last whole batch in `items`.
fn last_batch_records(items: &VecDeque<Item>) -> Option<u32> {
    items.iter().rev().find_map(|m| match m {
        Item::Batch(b) => b.record_count(),
        Item::Record(_) => None,
    })
}

/// The answer to a read at `offset` outside the log.
fn out_of_range(offset: i64, w: &Watermarks) -> StoreError {
    StoreError::OffsetOutOfRange {
        offset,
        log_start_offset: w.log_start_offset,
        high_watermark: w.high_watermark,
    }
}

/// A read's poll (see [`IggyBridge::poll_at`]).
#[derive(Debug)]
pub(super) struct ItemsPolled {
    /// The items from the offset polled.
    pub(super) items: Vec<Item>,
    /// Iggy's current offset of the partition (that of its last message) as the poll
    /// saw it.
    pub(super) current: u64,
    /// The first messages of a batch the answer ended inside, after the items: for the
    /// next poll, from the offset after the items.
    pub(super) partial: Option<Partial>,
}

/// Where a read left off, for [`IggyBridge::keep_ahead`].
pub(super) struct LeftOff {
    /// The offset after the records kept.
    pub(super) next: u64,
    /// The high watermark the read saw.
    pub(super) end: u64,
    /// The read's byte limit.
    pub(super) max_bytes: usize,
    /// The record count of the read's last whole batch.
    pub(super) batch_records: Option<u32>,
    /// A read-ahead poll from `next`, still running.
    pub(super) running: Option<(u64, PendingPoll)>,
    /// The first messages of the batch at `next` that a poll ended inside.
    pub(super) partial: Option<Partial>,
}

/// What [`IggyBridge::read_fast`] found.
enum Fast {
    /// The topic, the watermarks, the records from the offset read, a read-ahead poll
    /// still running for the records after them, and the first messages of a batch a
    /// poll ended inside after them.
    Hit(
        Arc<Resolved>,
        Watermarks,
        VecDeque<Item>,
        Option<(u64, PendingPoll)>,
        Option<Partial>,
    ),
    AtEnd(Watermarks),
    Miss,
}

/// One run of consecutive records read back, encoded as one Kafka batch at
/// `base_offset`, in a buffer sized once for it.
fn encode_run<R: AsRef<NewRecord>>(
    base_offset: i64,
    frame: Option<&BatchFrame>,
    run: &[R],
) -> StoreResult<Bytes> {
    let mut out = BytesMut::new();
    mapping::encode_run(base_offset, frame, run, &mut out).map_err(|e| {
        StoreError::Internal(format!("re-encoding the batch at {base_offset}: {e}"))
    })?;
    Ok(out.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_counts_are_whole_batches_of_the_size_last_seen() {
        // No batch seen, or a batch size of 0: the estimate as it is.
        assert_eq!(aligned_count(1030, None, 10_000), 1030);
        assert_eq!(aligned_count(1030, Some(0), 10_000), 1030);
        // Rounded down to whole batches, never to none.
        assert_eq!(aligned_count(1030, Some(200), 10_000), 1000);
        assert_eq!(aligned_count(1000, Some(200), 10_000), 1000);
        assert_eq!(aligned_count(250, Some(200), 10_000), 200);
        assert_eq!(aligned_count(1, Some(1), 10_000), 1);
        // A batch larger than the estimate is asked for whole when a poll may take it.
        assert_eq!(aligned_count(300, Some(9_200), 10_000), 9_200);
        assert_eq!(aligned_count(300, Some(10_000), 10_000), 10_000);
        assert_eq!(aligned_count(300, Some(10_001), 10_000), 300);
        // Every count asked for is at least one and at most the larger of the estimate
        // and `largest`.
        for count in 1..300u32 {
            for n in 0..300u32 {
                let c = aligned_count(count, Some(n), 150);
                assert!(c >= 1 && c <= count.max(150), "{count} {n} -> {c}");
                if n > 0 && n <= count {
                    assert_eq!(c % n, 0, "{count} {n} -> {c}");
                    assert!(count - c < n, "{count} {n} -> {c}");
                }
            }
        }
    }
}
