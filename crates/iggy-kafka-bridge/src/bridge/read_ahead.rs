//! Read-ahead: records polled before their reader asks for them. After a read, what it
//! polled but did not return is kept for the partition's next read, and when the
//! partition holds more, one poll for the next few reads' worth starts in the
//! background, so the next Fetches find their records here instead of waiting on Iggy.
//!
//! Kept records are reused for at most `metadata_max_age`, bounded by
//! `read_ahead_bytes` over all partitions and by [`MAX_READ_AHEAD_PARTITIONS`]; a
//! `read_ahead_bytes` or `metadata_max_age` of 0 turns read-ahead off.

use super::IggyBridge;
use super::read::{ItemsPolled, LeftOff};
use super::topics::Resolved;
use crate::config::IggyTopicRef;
use crate::mapping::MappedRecord;
use crate::partition::PartitionId;
use crate::polled::{Item, Partial};
use bytes::Bytes;
use kafka_store::StoreResult;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Most partitions with records polled ahead of their reader.
const MAX_READ_AHEAD_PARTITIONS: usize = 4096;

/// How many reads' worth (of the read's byte limit) one read-ahead poll asks for.
const READ_AHEAD_READS: usize = 4;

impl IggyBridge {
    /// Keeps what a read polled but did not return (`buf`, consecutive up to `next`) for
    /// the next read of the partition, and when the partition holds more than that
    /// (`next < end`, the high watermark) starts polling the next [`READ_AHEAD_READS`]
    /// reads' worth in one call, so the next Fetches find their records here instead of
    /// waiting for Iggy; with `batch_records` (the record count of the read's last whole
    /// batch) it asks for whole batches of that size ([`super::read::aligned_count`]),
    /// and with `partial` (the first messages of the batch at `next`, from the read's
    /// last poll) only for what comes after them. A poll still running from an earlier
    /// read (`running`, for the records from `next`) is kept instead of starting
    /// another. Bounded by `read_ahead_bytes` over all partitions (without room for
    /// another poll, `buf` is still kept); nothing is kept when that is 0.
    pub(super) fn keep_ahead(
        &self,
        r: &Arc<Resolved>,
        topic: &str,
        partition: PartitionId,
        buf: VecDeque<Item>,
        left: LeftOff,
    ) {
        let LeftOff {
            next,
            end,
            max_bytes,
            batch_records,
            running,
            partial,
        } = left;
        let limit = self.inner.config.read_ahead_bytes;
        if limit == 0 || self.inner.config.metadata_max_age.is_zero() {
            return;
        }
        // A poll for other records than the next ones is not needed: aborted as it drops.
        let running = running.filter(|(from, _)| *from == next);
        // A batch's first messages are only of use to a poll from its first record.
        let partial = partial.filter(|p| running.is_none() && p.head() == next);
        // What the next reads will find, and what keeping it holds in memory (a partial
        // keeps the whole answer it lies in).
        let buffered: usize = buf.iter().map(item_size).sum();
        let ahead = buffered + partial.as_ref().map_or(0, Partial::data_bytes);
        let held = buffered + partial.as_ref().map_or(0, Partial::retained_bytes);
        // Several reads ahead: fewer, larger polls, and the one for the reads after next
        // overlaps the next.
        let depth = max_bytes.saturating_mul(READ_AHEAD_READS);
        let more = running.is_some() || (next < end && ahead < depth);
        let reserve = |bytes: usize| {
            let total = self.inner.ahead_bytes.fetch_add(bytes, Ordering::Relaxed);
            let fits = total.saturating_add(bytes) <= limit;
            if !fits {
                self.inner.ahead_bytes.fetch_sub(bytes, Ordering::Relaxed);
            }
            fits
        };
        // Without room for another poll, what is already polled is still kept.
        let (more, reserved) = if more && reserve(held.saturating_add(depth)) {
            (true, held.saturating_add(depth))
        } else if !buf.is_empty() && reserve(held) {
            (false, held)
        } else {
            return;
        };
        let Ok(mut slots) = self.inner.ahead.lock() else {
            self.inner
                .ahead_bytes
                .fetch_sub(reserved, Ordering::Relaxed);
            return;
        };
        let key = (r.target.clone(), partition);
        if slots.len() >= MAX_READ_AHEAD_PARTITIONS && !slots.contains_key(&key) {
            drop(slots);
            self.inner
                .ahead_bytes
                .fetch_sub(reserved, Ordering::Relaxed);
            return;
        }
        // The partial goes into the poll started here, or stays with the records.
        let mut partial = partial;
        let pending = more.then(|| {
            running.unwrap_or_else(|| {
                let this = self.clone();
                let (r, topic) = (r.clone(), topic.to_owned());
                let count = self.poll_count_after(depth, batch_records);
                let partial = partial.take();
                (
                    next,
                    PendingPoll::spawn(async move {
                        this.poll_at(&r, &topic, partition, next, count, partial)
                            .await
                    }),
                )
            })
        });
        let ahead = Ahead {
            start: buf.front().map_or(next, Item::offset),
            records: buf,
            high_watermark: end,
            at: std::time::Instant::now(),
            reserved,
            pending,
            partial,
        };
        if let Some(old) = slots.insert(key, ahead) {
            // The replaced slot's poll, if any, is aborted as it drops.
            self.inner
                .ahead_bytes
                .fetch_sub(old.reserved, Ordering::Relaxed);
        }
    }

    /// The records kept by [`Self::keep_ahead`] when they start at `start` and are
    /// younger than `metadata_max_age`, with the high watermark last seen. The poll
    /// started for the records after them comes back as it is (finished or still
    /// running), for the read to take its answer over once it has used the kept ones; it
    /// is waited for here only when nothing was kept.
    pub(super) async fn take_ahead(
        &self,
        target: &IggyTopicRef,
        partition: PartitionId,
        start: u64,
    ) -> Option<Taken> {
        let ahead = {
            let mut slots = self.inner.ahead.lock().ok()?;
            let key = (target.clone(), partition);
            let slot = slots.get(&key)?;
            let fresh = slot.at.elapsed() < self.inner.config.metadata_max_age;
            if fresh && slot.start != start {
                // Another reader's position; leave it.
                return None;
            }
            let ahead = slots.remove(&key)?;
            self.inner
                .ahead_bytes
                .fetch_sub(ahead.reserved, Ordering::Relaxed);
            if !fresh {
                return None;
            }
            ahead
        };
        let mut records = ahead.records;
        let mut high_watermark = ahead.high_watermark;
        let mut running = None;
        let mut partial = ahead.partial;
        if let Some((from, handle)) = ahead.pending {
            let expected = records.back().map_or(start, |m| m.last_offset() + 1);
            // With records kept, the poll goes to the read as it is (finished or not):
            // the read takes its answer over when it gets to it, instead of every polled
            // record moving behind the kept ones here.
            if from == expected && !records.is_empty() {
                running = Some((from, handle));
            } else if let Ok(Ok(Ok(more))) =
                tokio::time::timeout(self.inner.config.call_timeout, handle).await
                && from == expected
            {
                if !more.items.is_empty() {
                    high_watermark = high_watermark.max(more.current.saturating_add(1));
                }
                append_items(&mut records, more.items, expected);
                partial = more.partial;
            }
        }
        if records.front().map(Item::offset) != Some(start) {
            return None;
        }
        let last = records.back().map_or(start, Item::last_offset);
        Some(Taken {
            records,
            high_watermark: high_watermark.max(last.saturating_add(1)),
            pending: running,
            partial,
        })
    }

    /// The records from `next`: the answer of `running` when it polls from there (it is
    /// consumed either way), else a new poll of `count` (after `partial`, the first
    /// messages of the batch at `next`, when there are some).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn poll_next(
        &self,
        r: &Resolved,
        topic: &str,
        partition: PartitionId,
        next: u64,
        count: u32,
        running: &mut Option<(u64, PendingPoll)>,
        partial: Option<Partial>,
    ) -> StoreResult<ItemsPolled> {
        if let Some((from, handle)) = running.take()
            && from == next
            && let Ok(Ok(Ok(more))) =
                tokio::time::timeout(self.inner.config.call_timeout, handle).await
            && more.items.first().is_none_or(|m| m.offset() >= next)
        {
            return Ok(more);
        }
        self.poll_at(r, topic, partition, next, count, partial)
            .await
    }

    /// Drops what was polled ahead for the partitions of a deleted topic.
    pub(super) fn forget_read_ahead(&self, target: &IggyTopicRef) {
        if let Ok(mut slots) = self.inner.ahead.lock() {
            slots.retain(|(t, _), ahead| {
                let keep = t != target;
                if !keep {
                    self.inner
                        .ahead_bytes
                        .fetch_sub(ahead.reserved, Ordering::Relaxed);
                }
                keep
            });
        }
    }
}

/// Records of one partition polled ahead of its reader (see `IggyBridge::keep_ahead`).
pub(super) struct Ahead {
    /// Offset of the first record (or of the pending poll when there is none).
    start: u64,
    records: VecDeque<Item>,
    /// The partition's high watermark when the records were kept.
    high_watermark: u64,
    at: std::time::Instant,
    /// Bytes counted against `read_ahead_bytes` for this slot.
    reserved: usize,
    /// A poll of the records after `records`: from which offset, and its task.
    pending: Option<(u64, PendingPoll)>,
    /// Without `pending`: the first messages of the batch after `records`.
    partial: Option<Partial>,
}

/// A read-ahead poll running as its own task. Dropped unread (its slot replaced by
/// another reader's, gone stale, or its topic deleted), it is aborted, so polls nobody
/// will read do not pile up outside the `read_ahead_bytes` count. Aborting is safe: the
/// SDK does the connection's I/O in a task of its own, which finishes the exchange and
/// drops the answer.
pub(super) struct PendingPoll(tokio::task::JoinHandle<StoreResult<ItemsPolled>>);

impl PendingPoll {
    fn spawn(poll: impl Future<Output = StoreResult<ItemsPolled>> + Send + 'static) -> PendingPoll {
        PendingPoll(tokio::spawn(poll))
    }
}

impl Future for PendingPoll {
    type Output = Result<StoreResult<ItemsPolled>, tokio::task::JoinError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0).poll(cx)
    }
}

impl Drop for PendingPoll {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What [`IggyBridge::take_ahead`] hands a read.
pub(super) struct Taken {
    pub(super) records: VecDeque<Item>,
    pub(super) high_watermark: u64,
    pub(super) pending: Option<(u64, PendingPoll)>,
    /// The first messages of the batch after `records`, from a finished poll.
    pub(super) partial: Option<Partial>,
}

/// Appends the items of `more` from offset `from` on (a whole batch that holds `from`
/// stays whole) to `items` (a poll's items go up in offset, so those before `from` are
/// its front): an empty deque takes over the vector's buffer, a non-empty one grows
/// once and each item moves once.
pub(super) fn append_items(items: &mut VecDeque<Item>, more: Vec<Item>, from: u64) {
    let mut more = VecDeque::from(more);
    while more.front().is_some_and(|m| m.last_offset() < from) {
        more.pop_front();
    }
    if items.is_empty() {
        *items = more;
    } else {
        items.reserve(more.len());
        items.extend(more);
    }
}

/// About the bytes one item takes in memory and in a Kafka batch.
pub(super) fn item_size(item: &Item) -> usize {
    match item {
        Item::Record(m) => mapped_size(m),
        Item::Batch(b) => b.bytes.len(),
    }
}

/// About the bytes one record takes in memory and in a Kafka batch.
pub(super) fn mapped_size(m: &MappedRecord) -> usize {
    let r = &m.record;
    r.key.as_ref().map_or(0, Bytes::len)
        + r.value.as_ref().map_or(0, Bytes::len)
        + r.headers
            .iter()
            .map(|h| h.key.len() + h.value.as_ref().map_or(0, Bytes::len))
            .sum::<usize>()
        + 16
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::polled::WholeBatch;
    use kafka_records::NewRecord;

    #[test]
    fn appended_items_start_where_asked_and_keep_their_order() {
        let at = |offset: u64| {
            Item::Record(MappedRecord {
                offset,
                record: NewRecord::default(),
                offset_delta: None,
                batch: None,
                envelope: false,
                txn: None,
            })
        };
        let whole = |base_offset: u64, last_offset: u64| {
            Item::Batch(WholeBatch {
                base_offset,
                last_offset,
                bytes: Bytes::from_static(b"batch"),
            })
        };
        let offsets = |d: &VecDeque<Item>| {
            d.iter()
                .map(|m| (m.offset(), m.last_offset()))
                .collect::<Vec<_>>()
        };
        let mut items = VecDeque::from(vec![at(1), at(2)]);
        append_items(&mut items, vec![at(2), at(3), at(4)], 3);
        assert_eq!(offsets(&items), [(1, 1), (2, 2), (3, 3), (4, 4)]);
        let mut empty = VecDeque::new();
        append_items(&mut empty, vec![at(5), at(6), at(7)], 6);
        assert_eq!(offsets(&empty), [(6, 6), (7, 7)]);
        append_items(&mut empty, Vec::new(), 0);
        assert_eq!(offsets(&empty), [(6, 6), (7, 7)]);
        // A whole batch holding `from` stays whole; one before it goes.
        let mut items = VecDeque::new();
        append_items(&mut items, vec![whole(10, 19), whole(20, 29), at(30)], 21);
        assert_eq!(offsets(&items), [(20, 29), (30, 30)]);
        assert_eq!(item_size(&items[0]), 5);
    }
}
