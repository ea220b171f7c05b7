//! Reading back the tail of a partition to rebuild its producers' state.
//!
//! The store keeps every batch with its producer header (id, epoch, base sequence,
//! record count), so the log is the record of what each producer wrote. A new leader
//! reads the last `window` bytes of the partition and keeps only those header fields.
//!
//! Stores read forwards from an offset, and nothing maps a byte position to an offset,
//! so the tail is found by steps backwards: the first read takes the last batch alone
//! (a read at the offset before the high watermark starts at the batch holding it); from
//! the bytes per offset seen so far, the next step reaches back as far as the rest of
//! the window should go (but at most [`GROWTH`] times as far back as what it covers
//! already) and reads forward until it meets what was read already. A step
//! that runs out of window before it meets it is dropped: what it read is older than
//! everything kept, and keeping it would leave a hole in some producer's sequence. So the
//! batches kept are always one unbroken run ending at the high watermark, and the bytes
//! read stay within the window plus one batch (a read always returns its first batch
//! whole). At most [`MAX_STEPS`] steps are taken.
//!
//! Transactional batches count as idempotent ones. A transaction marker (a control
//! batch) carries no sequence; its epoch is the producer's epoch from then on, so a
//! producer fenced by a marker stays fenced after the rebuild.

use super::BatchId;
use kafka_records::{BATCH_HEADER_LEN, BatchHeader};
use kafka_store::{LogStore, StoreError, StoreResult};

/// Most backward steps of one recovery (each one read loop of the store).
const MAX_STEPS: usize = 12;
/// How many times the offsets already covered a step may reach back.
const GROWTH: u64 = 4;

/// One batch found in the tail: where it starts and its producer fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TailBatch {
    pub(crate) base_offset: i64,
    pub(crate) id: BatchId,
    /// A transaction marker (control batch): it carries the producer's epoch, no
    /// sequence.
    pub(crate) marker: bool,
}

/// What a recovery read.
#[derive(Debug, Default)]
pub(crate) struct Tail {
    /// Idempotent producers' batches, oldest first, with no gap up to the high watermark.
    pub(crate) batches: Vec<TailBatch>,
    /// Bytes read from the store (including a dropped step's).
    pub(crate) bytes: usize,
}

/// One step: the batches read forward from `start` up to `end`.
struct Step {
    batches: Vec<TailBatch>,
    /// Where the first batch read starts (at or below `start`).
    first_base: Option<i64>,
    bytes: usize,
    /// Whether the read met `end` (or the end of the log) within the window.
    complete: bool,
}

/// Reads about the last `window` bytes of `topic`'s `partition` and returns the
/// idempotent batches found there.
pub(crate) async fn read_tail(
    log: &dyn LogStore,
    topic: &str,
    partition: i32,
    window: usize,
) -> StoreResult<Tail> {
    let mut tail = Tail::default();
    if window == 0 {
        return Ok(tail);
    }
    let w = log.watermarks(topic, partition).await?;
    let (log_start, high) = (w.log_start_offset, w.high_watermark);
    let mut end = high;
    // Newest step first.
    let mut steps: Vec<Vec<TailBatch>> = Vec::new();
    let mut back: i64 = 1;
    for _ in 0..MAX_STEPS {
        if end <= log_start || tail.bytes >= window {
            break;
        }
        let start = end.saturating_sub(back).max(log_start);
        let step = read_step(log, topic, partition, start, end, window - tail.bytes).await?;
        tail.bytes = tail.bytes.saturating_add(step.bytes);
        if !step.complete {
            break;
        }
        end = step.first_base.map_or(start, |b| b.min(start));
        steps.push(step.batches);
        // The next step: from the bytes per offset so far, three quarters of what the
        // rest of the window should hold, and at most GROWTH times the offsets covered
        // so far (the last batches may be much smaller than the ones before them).
        let covered = u64::try_from(high.saturating_sub(end)).unwrap_or(0).max(1);
        let per = (tail.bytes as u64 / covered).max(1);
        let left = window.saturating_sub(tail.bytes) as u64;
        let estimate = (left / per).saturating_mul(3) / 4;
        back = i64::try_from(estimate.min(covered.saturating_mul(GROWTH))).unwrap_or(i64::MAX);
        if back < 1 {
            break;
        }
    }
    tail.batches = steps.into_iter().rev().flatten().collect();
    Ok(tail)
}

/// Reads forward from `start` until `end`, at most `budget` bytes (plus the first batch).
async fn read_step(
    log: &dyn LogStore,
    topic: &str,
    partition: i32,
    start: i64,
    end: i64,
    budget: usize,
) -> StoreResult<Step> {
    let mut step = Step {
        batches: Vec::new(),
        first_base: None,
        bytes: 0,
        complete: false,
    };
    let mut at = start;
    loop {
        if at >= end {
            step.complete = true;
            return Ok(step);
        }
        let left = budget.saturating_sub(step.bytes);
        if left == 0 {
            return Ok(step);
        }
        let read = match log.read(topic, partition, at, left).await {
            Ok(read) => read,
            // Retention moved the log start past `at`: go on from the new start.
            Err(StoreError::OffsetOutOfRange {
                log_start_offset, ..
            }) if log_start_offset > at && log_start_offset <= end => {
                at = log_start_offset;
                continue;
            }
            Err(e) => return Err(e),
        };
        if read.batches.is_empty() {
            // Nothing further in the log: the step reached its end.
            step.complete = true;
            return Ok(step);
        }
        let before = at;
        for bytes in &read.batches {
            step.bytes = step.bytes.saturating_add(bytes.len());
            let Ok(h) = BatchHeader::parse(bytes.get(..BATCH_HEADER_LEN).unwrap_or_default())
            else {
                // A stored batch too short to have a header: nothing to learn from it, and
                // no way to know where the next one starts.
                return Ok(step);
            };
            if h.base_offset >= end {
                step.complete = true;
                return Ok(step);
            }
            step.first_base.get_or_insert(h.base_offset);
            at = h.next_offset();
            if h.producer_id >= 0 {
                step.batches.push(TailBatch {
                    base_offset: h.base_offset,
                    marker: h.attributes.is_control(),
                    id: BatchId {
                        producer_id: h.producer_id,
                        epoch: h.producer_epoch,
                        first_seq: h.base_sequence,
                        records: h.record_count,
                    },
                });
            }
        }
        if at <= before {
            // The store answered batches that do not move forward: stop here rather
            // than loop; what was read is kept only if it met `end`.
            return Ok(step);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Bytes, BytesMut};
    use kafka_records::{BatchOptions, DecodeLimits, NewRecord, encode_batch};
    use kafka_store::memory::{MemoryStore, MemoryStoreConfig};
    use kafka_store::{NewTopic, TopicConfig, check_batches};

    async fn store() -> MemoryStore {
        let store = MemoryStore::new(MemoryStoreConfig::default());
        store
            .create_topic(
                NewTopic {
                    name: "t".into(),
                    partitions: 1,
                    config: TopicConfig {
                        max_message_bytes: 8 << 20,
                        ..TopicConfig::default()
                    },
                },
                false,
            )
            .await
            .unwrap();
        store
    }

    /// Appends one batch of `records` records of `value` bytes; -1 as producer: plain.
    async fn append(store: &MemoryStore, producer_id: i64, seq: i32, records: usize, value: usize) {
        let now = crate::broker::now_ms();
        let recs: Vec<NewRecord> = (0..records)
            .map(|_| NewRecord {
                timestamp: now,
                key: None,
                value: Some(Bytes::from(vec![1u8; value])),
                headers: vec![],
            })
            .collect();
        let options = BatchOptions {
            producer_id,
            producer_epoch: if producer_id < 0 { -1 } else { 0 },
            base_sequence: if producer_id < 0 { -1 } else { seq },
            ..BatchOptions::default()
        };
        let mut out = BytesMut::new();
        encode_batch(&options, &recs, &mut out).unwrap();
        let batches = check_batches(&out.freeze(), &DecodeLimits::default())
            .unwrap()
            .batches;
        store.append("t", 0, batches, now).await.unwrap();
    }

    #[tokio::test]
    async fn the_tail_is_one_unbroken_run_ending_at_the_high_watermark() {
        let s = store().await;
        assert!(
            read_tail(&s, "t", 0, 1 << 20)
                .await
                .unwrap()
                .batches
                .is_empty()
        );
        // Many small batches, plain ones in between, batches of several records.
        for i in 0..500 {
            append(
                &s,
                i % 7,
                i32::try_from(i).unwrap(),
                1 + (i as usize % 3),
                10,
            )
            .await;
            if i % 50 == 0 {
                append(&s, -1, 0, 2, 10).await;
            }
        }
        let all = read_tail(&s, "t", 0, 1 << 20).await.unwrap();
        assert_eq!(all.batches.len(), 500);
        let offsets: Vec<i64> = all.batches.iter().map(|b| b.base_offset).collect();
        assert!(offsets.windows(2).all(|w| w[0] < w[1]), "not in order");
        assert_eq!(all.batches.last().unwrap().id.first_seq, 499);
        // A window holding part of it: the newest part, without a hole.
        let part = read_tail(&s, "t", 0, 4096).await.unwrap();
        assert!(!part.batches.is_empty() && part.batches.len() < 500);
        assert!(part.bytes <= 4096 + 200, "{}", part.bytes);
        let seqs: Vec<i32> = part.batches.iter().map(|b| b.id.first_seq).collect();
        let newest = &seqs[..];
        assert_eq!(*newest.last().unwrap(), 499);
        assert!(
            newest.windows(2).all(|w| w[1] == w[0] + 1),
            "a hole: {seqs:?}"
        );
        // Recovery off reads nothing.
        let none = read_tail(&s, "t", 0, 0).await.unwrap();
        assert_eq!((none.bytes, none.batches.len()), (0, 0));
    }

    #[tokio::test]
    async fn huge_batches_stay_within_the_window_plus_one() {
        let s = store().await;
        for seq in 0..30 {
            append(&s, 3, seq, 1, 100_000).await;
        }
        append(&s, 4, 0, 1, 10).await;
        let window = 350_000;
        let tail = read_tail(&s, "t", 0, window).await.unwrap();
        assert!(tail.bytes <= window + 100_200, "{}", tail.bytes);
        let last = tail.batches.last().unwrap();
        assert_eq!((last.id.producer_id, last.base_offset), (4, 30));
        assert!(tail.batches.len() >= 2, "{:?}", tail.batches);
        assert!(
            tail.batches
                .iter()
                .rev()
                .skip(1)
                .all(|b| b.id.producer_id == 3)
        );
    }
}
