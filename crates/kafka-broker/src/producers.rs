//! Idempotent producer state (KIP-98): duplicate and ordering checks on produced batches.
//!
//! A batch from an idempotent producer carries a producer id, an epoch and the sequence
//! number of its first record. Per partition and producer the broker remembers the epoch
//! and the last five batches it appended (Kafka's `max.in.flight` bound for idempotence).
//! A batch identical in sequence range to one of those is a retry of a write that already
//! landed: it is answered with the original offset and not appended again. A sequence gap
//! is `OUT_OF_ORDER_SEQUENCE_NUMBER`; an old epoch is `INVALID_PRODUCER_EPOCH`.
//!
//! A producer the broker has no state for (first write, or state lost in a restart or
//! evicted) is accepted at any sequence, so producers survive a gateway restart. The table
//! is bounded: past [`MAX_PRODUCERS`] entries the least recently used is forgotten.

use kafka_protocol::ErrorCode;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// Producer entries kept over all partitions.
pub(crate) const MAX_PRODUCERS: usize = 100_000;
const CACHED_BATCHES: usize = 5;

/// The identity fields of one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchId {
    pub(crate) producer_id: i64,
    pub(crate) epoch: i16,
    pub(crate) first_seq: i32,
    pub(crate) records: i32,
}

impl BatchId {
    fn last_seq(&self) -> i32 {
        // Sequences wrap at i32::MAX back to 0.
        ((i64::from(self.first_seq) + i64::from(self.records) - 1) % (i64::from(i32::MAX) + 1))
            as i32
    }
}

#[derive(Debug)]
struct Entry {
    epoch: i16,
    /// (first sequence, last sequence, base offset) of recent batches, oldest first.
    recent: VecDeque<(i32, i32, i64)>,
    last_used: u64,
}

/// What to do with a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Append it.
    Append,
    /// Already appended at this base offset: answer success without appending.
    Duplicate(i64),
}

type Key = (String, i32, i64);

/// Producer state of every partition.
#[derive(Debug, Default)]
pub(crate) struct Producers {
    inner: Mutex<(HashMap<Key, Entry>, u64)>,
}

impl Producers {
    /// Checks a batch against the producer's state.
    pub(crate) fn check(
        &self,
        topic: &str,
        partition: i32,
        b: BatchId,
    ) -> Result<Verdict, ErrorCode> {
        if b.producer_id < 0 {
            return Ok(Verdict::Append);
        }
        let Ok(guard) = self.inner.lock() else {
            return Err(ErrorCode::UNKNOWN_SERVER_ERROR);
        };
        let Some(e) = guard.0.get(&(topic.to_string(), partition, b.producer_id)) else {
            return Ok(Verdict::Append);
        };
        if b.epoch < e.epoch {
            return Err(ErrorCode::INVALID_PRODUCER_EPOCH);
        }
        if b.epoch > e.epoch {
            return if b.first_seq == 0 {
                Ok(Verdict::Append)
            } else {
                Err(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER)
            };
        }
        if let Some(&(_, _, offset)) = e
            .recent
            .iter()
            .find(|(first, last, _)| *first == b.first_seq && *last == b.last_seq())
        {
            return Ok(Verdict::Duplicate(offset));
        }
        let expected =
            e.recent.back().map_or(
                b.first_seq,
                |(_, last, _)| if *last == i32::MAX { 0 } else { last + 1 },
            );
        if b.first_seq != expected {
            return Err(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER);
        }
        Ok(Verdict::Append)
    }

    /// Records an appended batch.
    pub(crate) fn record(&self, topic: &str, partition: i32, b: BatchId, base_offset: i64) {
        if b.producer_id < 0 {
            return;
        }
        let Ok(mut guard) = self.inner.lock() else {
            return;
        };
        let (map, clock) = &mut *guard;
        *clock += 1;
        let now = *clock;
        let key = (topic.to_string(), partition, b.producer_id);
        if !map.contains_key(&key) && map.len() >= MAX_PRODUCERS {
            // Forget the least recently used producer; it will be accepted afresh.
            if let Some(oldest) = map
                .iter()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(k, _)| k.clone())
            {
                map.remove(&oldest);
            }
        }
        let e = map.entry(key).or_insert_with(|| Entry {
            epoch: b.epoch,
            recent: VecDeque::with_capacity(CACHED_BATCHES),
            last_used: now,
        });
        if b.epoch != e.epoch {
            e.epoch = b.epoch;
            e.recent.clear();
        }
        if e.recent.len() == CACHED_BATCHES {
            e.recent.pop_front();
        }
        e.recent.push_back((b.first_seq, b.last_seq(), base_offset));
        e.last_used = now;
    }

    /// Forgets every producer of a topic (after it is deleted).
    pub(crate) fn forget_topic(&self, topic: &str) {
        if let Ok(mut guard) = self.inner.lock() {
            guard.0.retain(|(t, _, _), _| t != topic);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(first_seq: i32, records: i32, epoch: i16) -> BatchId {
        BatchId {
            producer_id: 7,
            epoch,
            first_seq,
            records,
        }
    }

    #[test]
    fn retries_are_duplicates_and_gaps_are_refused() {
        let p = Producers::default();
        assert_eq!(p.check("t", 0, b(0, 3, 0)), Ok(Verdict::Append));
        p.record("t", 0, b(0, 3, 0), 100);
        assert_eq!(p.check("t", 0, b(0, 3, 0)), Ok(Verdict::Duplicate(100)));
        assert_eq!(
            p.check("t", 0, b(4, 1, 0)),
            Err(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER)
        );
        assert_eq!(p.check("t", 0, b(3, 2, 0)), Ok(Verdict::Append));
        p.record("t", 0, b(3, 2, 0), 103);
        // Another partition and a non-idempotent batch are independent.
        assert_eq!(p.check("t", 1, b(9, 1, 0)), Ok(Verdict::Append));
        let plain = BatchId {
            producer_id: -1,
            ..b(9, 1, 0)
        };
        assert_eq!(p.check("t", 0, plain), Ok(Verdict::Append));
    }

    #[test]
    fn epochs_fence_and_reset() {
        let p = Producers::default();
        p.record("t", 0, b(0, 1, 2), 0);
        assert_eq!(
            p.check("t", 0, b(1, 1, 1)),
            Err(ErrorCode::INVALID_PRODUCER_EPOCH)
        );
        assert_eq!(
            p.check("t", 0, b(5, 1, 3)),
            Err(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER)
        );
        assert_eq!(p.check("t", 0, b(0, 1, 3)), Ok(Verdict::Append));
    }

    #[test]
    fn only_the_last_five_batches_are_remembered() {
        let p = Producers::default();
        for i in 0..6 {
            p.record("t", 0, b(i, 1, 0), i64::from(i));
        }
        assert_eq!(
            p.check("t", 0, b(0, 1, 0)),
            Err(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER)
        );
        assert_eq!(p.check("t", 0, b(1, 1, 0)), Ok(Verdict::Duplicate(1)));
        assert_eq!(p.check("t", 0, b(6, 1, 0)), Ok(Verdict::Append));
    }

    #[test]
    fn sequences_wrap() {
        let p = Producers::default();
        p.record("t", 0, b(i32::MAX - 1, 2, 0), 10);
        assert_eq!(p.check("t", 0, b(0, 1, 0)), Ok(Verdict::Append));
    }
}
