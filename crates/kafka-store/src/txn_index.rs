//! What a partition's log says about transactions: which are open, which were aborted.
//!
//! A transaction leaves two kinds of batches in each partition it writes to: data
//! batches with the transactional bit, and one control batch (the marker) that closes it
//! with a commit or an abort. The state a reader needs is a fold over those batches in
//! offset order, with no record kept:
//!
//! - the open transaction of each producer id (the offset of its first batch): the
//!   smallest of them is the first unstable offset, below which a `read_committed`
//!   consumer may read (the last stable offset is the smaller of it and the high
//!   watermark);
//! - the aborted transactions, each as (producer id, first offset, marker offset): a
//!   `read_committed` fetch lists those that overlap what it returns, and the consumer
//!   drops that producer's records from the first offset up to the marker;
//! - the last marker of each producer id (producer epoch, coordinator epoch), against
//!   which a partition leader fences markers from stale coordinators.
//!
//! [`BatchSummary::of`] reads what the fold needs from a stored batch: header fields,
//! and, for a control batch, its first record's key (version, type: 0 abort, 1 commit)
//! and value (version, coordinator epoch). [`scan_index`] rebuilds the index of a
//! partition by reading its log in windows; [`marker_batch`] builds the control batch a
//! leader appends.
//!
//! Bounds: the open map holds at most one entry per producer with a transaction open in
//! the partition. The aborted list holds the aborted transactions whose marker is still
//! at or above the log start the owner last passed to [`TxnIndex::forget_before`]: the
//! owner calls it when retention or record deletion moves the log start, so the list
//! follows the retained log. The marker map holds one entry per producer id that wrote
//! a marker while this index lived; indexes are rebuilt from the retained log when a
//! partition moves, which drops the producers whose markers are gone.

use crate::{LogStore, StoreError, StoreResult, ValidBatch};
use bytes::Bytes;
use kafka_records::{
    BatchOptions, ControlRecord, ControlRecordType, DecodeLimits, NewRecord, RecordBatch,
    RecordsError,
};
use std::collections::{BTreeSet, HashMap, VecDeque};

/// Key and value version of the markers this module writes (the only one Kafka defines).
const MARKER_VERSION: i16 = 0;

/// A commit or abort marker: the control record closing a producer's transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker {
    /// Commit (`true`) or abort.
    pub commit: bool,
    /// The epoch of the transaction coordinator that wrote it.
    pub coordinator_epoch: i32,
}

/// The facts of one stored batch the index needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSummary {
    /// Offset of the first record.
    pub base_offset: i64,
    /// Offset of the last record.
    pub last_offset: i64,
    /// Producer id, -1 for none.
    pub producer_id: i64,
    /// Producer epoch, -1 for none.
    pub producer_epoch: i16,
    /// Transactional bit. A control batch that is not a commit or abort marker (another
    /// control type, or no record) reads `false`: it opens no transaction.
    pub transactional: bool,
    /// `Some` for a commit/abort control batch; other control batches carry `None`.
    pub marker: Option<Marker>,
}

impl BatchSummary {
    /// The summary of a stored batch. A control batch's first record is parsed: its key
    /// must be a version (i16, not negative) and a type (i16), and a commit or abort
    /// marker's value a version (i16, not negative) and a coordinator epoch (i32); a
    /// malformed one is an error (Kafka's `INVALID_RECORD`), never a guess.
    pub fn of(batch: &RecordBatch) -> Result<BatchSummary, RecordsError> {
        let h = batch.header();
        let mut summary = BatchSummary {
            base_offset: h.base_offset,
            last_offset: h.last_offset(),
            producer_id: h.producer_id,
            producer_epoch: h.producer_epoch,
            transactional: batch.is_transactional(),
            marker: None,
        };
        if !batch.is_control() {
            return Ok(summary);
        }
        summary.transactional = false;
        let Some(record) = batch.records()?.next().transpose()? else {
            return Ok(summary);
        };
        let commit = match record.control.map(|c| c.kind) {
            Some(ControlRecordType::Commit) => true,
            Some(ControlRecordType::Abort) => false,
            // The records iterator refuses a control batch record without a valid key,
            // so `None` does not happen; other types are not transaction markers.
            Some(ControlRecordType::Other(_)) | None => return Ok(summary),
        };
        let coordinator_epoch = marker_value(record.value.as_deref())?;
        summary.transactional = true;
        summary.marker = Some(Marker {
            commit,
            coordinator_epoch,
        });
        Ok(summary)
    }
}

/// The coordinator epoch of a marker value: i16 version (not negative; later versions may
/// add fields after the epoch) and i32 coordinator epoch.
fn marker_value(value: Option<&[u8]>) -> Result<i32, RecordsError> {
    let bad = |reason| RecordsError::InvalidControlRecord {
        // The first record of the batch: it starts the records section.
        offset: 0,
        reason,
    };
    let Some(&[v0, v1, e0, e1, e2, e3, ..]) = value else {
        return Err(bad(
            "marker value is not a version i16 and a coordinator epoch i32",
        ));
    };
    if i16::from_be_bytes([v0, v1]) < 0 {
        return Err(bad("marker value version is negative"));
    }
    Ok(i32::from_be_bytes([e0, e1, e2, e3]))
}

/// One aborted transaction of one producer: its first data offset and its marker's offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    /// The producer.
    pub producer_id: i64,
    /// Offset of its first record in the transaction.
    pub first_offset: i64,
    /// Offset of the abort marker.
    pub last_offset: i64,
}

/// A fold over a partition's batches in offset order (see the module documentation).
#[derive(Debug, Clone, Default)]
pub struct TxnIndex {
    end: i64,
    /// Producer id -> first offset of its open transaction.
    open: HashMap<i64, i64>,
    /// The same, as (first offset, producer id), for the first unstable offset.
    open_by_first: BTreeSet<(i64, i64)>,
    /// Aborted transactions ordered by marker offset.
    aborted: VecDeque<AbortedTxn>,
    /// Per producer, its aborted transactions as (first, last), ordered by marker offset.
    aborted_by_producer: HashMap<i64, VecDeque<(i64, i64)>>,
    /// Producer id -> (producer epoch, coordinator epoch) of its last marker.
    markers: HashMap<i64, (i16, i32)>,
}

impl TxnIndex {
    /// An index of a log that starts (and ends) at `start_offset`.
    pub fn new(start_offset: i64) -> TxnIndex {
        TxnIndex {
            end: start_offset,
            ..TxnIndex::default()
        }
    }

    /// Folds in the next batch. A transactional data batch of a producer with no open
    /// transaction opens one at its base offset; a marker closes the producer's open
    /// transaction (an abort records it as aborted) and becomes its last marker. A marker
    /// with no open transaction only records the marker.
    pub fn observe(&mut self, batch: &BatchSummary) {
        self.end = self.end.max(batch.last_offset.saturating_add(1));
        let pid = batch.producer_id;
        if pid < 0 || !batch.transactional {
            return;
        }
        let Some(marker) = batch.marker else {
            if let std::collections::hash_map::Entry::Vacant(e) = self.open.entry(pid) {
                e.insert(batch.base_offset);
                self.open_by_first.insert((batch.base_offset, pid));
            }
            return;
        };
        self.markers
            .insert(pid, (batch.producer_epoch, marker.coordinator_epoch));
        let Some(first) = self.open.remove(&pid) else {
            return;
        };
        self.open_by_first.remove(&(first, pid));
        if marker.commit {
            return;
        }
        let txn = AbortedTxn {
            producer_id: pid,
            first_offset: first,
            last_offset: batch.last_offset,
        };
        // Markers come in offset order, so this is a push at the back; anything else is
        // still kept in order.
        let at = self
            .aborted
            .partition_point(|a| a.last_offset <= txn.last_offset);
        self.aborted.insert(at, txn);
        let own = self.aborted_by_producer.entry(pid).or_default();
        let at = own.partition_point(|&(_, last)| last <= txn.last_offset);
        own.insert(at, (first, txn.last_offset));
    }

    /// One past the last offset observed (or the start offset).
    pub fn end(&self) -> i64 {
        self.end
    }

    /// The first offset of the oldest open transaction.
    pub fn first_unstable(&self) -> Option<i64> {
        self.open_by_first.first().map(|&(first, _)| first)
    }

    /// The first offset of `producer_id`'s open transaction.
    pub fn open_txn(&self, producer_id: i64) -> Option<i64> {
        self.open.get(&producer_id).copied()
    }

    /// Aborted transactions with `last_offset >= from && first_offset < to`, by first offset.
    pub fn aborted(&self, from: i64, to: i64) -> Vec<AbortedTxn> {
        let start = self.aborted.partition_point(|a| a.last_offset < from);
        let mut out: Vec<AbortedTxn> = self
            .aborted
            .range(start..)
            .filter(|a| a.first_offset < to)
            .copied()
            .collect();
        out.sort_by_key(|a| (a.first_offset, a.producer_id));
        out
    }

    /// Whether the record at `offset` of `producer_id` belongs to an aborted transaction
    /// (its first offset and its marker's offset included).
    pub fn is_aborted(&self, producer_id: i64, offset: i64) -> bool {
        let Some(own) = self.aborted_by_producer.get(&producer_id) else {
            return false;
        };
        // A producer's transactions do not overlap: only the first one ending at or
        // after `offset` can hold it.
        let at = own.partition_point(|&(_, last)| last < offset);
        own.get(at).is_some_and(|&(first, _)| first <= offset)
    }

    /// `(producer epoch, coordinator epoch)` of `producer_id`'s last marker.
    pub fn last_marker(&self, producer_id: i64) -> Option<(i16, i32)> {
        self.markers.get(&producer_id).copied()
    }

    /// Forgets aborted transactions whose marker lies before `log_start` (nothing of them
    /// is readable any more). Open transactions are kept: they still hold the first
    /// unstable offset until their marker comes.
    pub fn forget_before(&mut self, log_start: i64) {
        while self
            .aborted
            .front()
            .is_some_and(|a| a.last_offset < log_start)
        {
            let Some(gone) = self.aborted.pop_front() else {
                break;
            };
            if let Some(own) = self.aborted_by_producer.get_mut(&gone.producer_id) {
                own.pop_front();
                if own.is_empty() {
                    self.aborted_by_producer.remove(&gone.producer_id);
                }
            }
        }
        self.end = self.end.max(log_start);
    }

    /// Producers with an open transaction.
    pub fn open_count(&self) -> usize {
        self.open.len()
    }

    /// Aborted transactions held.
    pub fn aborted_count(&self) -> usize {
        self.aborted.len()
    }
}

/// The control batch a partition leader appends to close a transaction: a v2 batch with
/// the transactional and control bits, the producer's id and epoch, base sequence -1
/// (markers take no sequence number), and one record whose key is version 0 and type
/// (1 commit, 0 abort) and whose value is version 0 and the coordinator epoch.
pub fn marker_batch(
    producer_id: i64,
    producer_epoch: i16,
    marker: Marker,
    now_ms: i64,
) -> ValidBatch {
    let kind = if marker.commit {
        ControlRecordType::Commit
    } else {
        ControlRecordType::Abort
    };
    let key = ControlRecord {
        version: MARKER_VERSION,
        kind,
    }
    .to_key();
    let mut value = [0u8; 6];
    value[..2].copy_from_slice(&MARKER_VERSION.to_be_bytes());
    value[2..].copy_from_slice(&marker.coordinator_epoch.to_be_bytes());
    let record = NewRecord {
        timestamp: now_ms,
        key: Some(Bytes::copy_from_slice(&key)),
        value: Some(Bytes::copy_from_slice(&value)),
        headers: Vec::new(),
    };
    let options = BatchOptions {
        transactional: true,
        control: true,
        producer_id,
        producer_epoch,
        base_sequence: -1,
        base_timestamp: Some(now_ms),
        ..BatchOptions::default()
    };
    // Invariant: one uncompressed record of 4 key and 6 value bytes, no headers and a
    // zero timestamp delta fits every field of the format whatever the arguments
    // (checked for extreme values in the tests), and bytes just encoded decode again.
    #[allow(clippy::expect_used)]
    ValidBatch::encode(&options, &[record]).expect("a marker batch always encodes")
}

/// Builds the index of `[from, to)` of a partition by reading its batches in windows of
/// `window` bytes (at least one batch per read); also returns the bytes read. Only one
/// window is held at a time and no record is kept. A `from` below the log start starts
/// at the log start; when retention moves the log start past the scan, the scan jumps
/// to it. The index's end is at least `to` capped at the high watermark: everything
/// below it was seen.
pub async fn scan_index(
    log: &dyn LogStore,
    topic: &str,
    partition: i32,
    from: i64,
    to: i64,
    window: usize,
) -> StoreResult<(TxnIndex, usize)> {
    let marks = log.watermarks(topic, partition).await?;
    let mut offset = from.max(marks.log_start_offset);
    let mut index = TxnIndex::new(offset);
    let mut hw = marks.high_watermark;
    let mut read_bytes = 0usize;
    let limits = DecodeLimits::default();
    while offset < to.min(hw) {
        let outcome = match log.read(topic, partition, offset, window.max(1)).await {
            Ok(outcome) => outcome,
            Err(StoreError::OffsetOutOfRange {
                log_start_offset,
                high_watermark,
                ..
            }) if log_start_offset > offset => {
                index.forget_before(log_start_offset);
                offset = log_start_offset;
                hw = high_watermark;
                continue;
            }
            Err(e) => return Err(e),
        };
        hw = outcome.watermarks.high_watermark;
        read_bytes = read_bytes.saturating_add(outcome.len());
        let mut next = offset;
        for bytes in &outcome.batches {
            let batch = RecordBatch::decode_verified(bytes, &limits)
                .map_err(|e| StoreError::CorruptBatch(e.to_string()))?;
            let summary =
                BatchSummary::of(&batch).map_err(|e| StoreError::CorruptBatch(e.to_string()))?;
            if summary.base_offset >= to {
                next = i64::MAX;
                break;
            }
            if summary.last_offset < offset {
                continue;
            }
            index.observe(&summary);
            next = next.max(summary.last_offset.saturating_add(1));
        }
        if next <= offset {
            // Nothing at or after `offset` came back: the readable log ends here.
            break;
        }
        offset = next;
    }
    // Everything readable below `to` (and the high watermark) was seen, even where
    // compaction left no batch.
    index.end = index.end.max(to.min(hw));
    Ok((index, read_bytes))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::memory::MemoryStore;
    use crate::{NewTopic, TopicConfig};
    use bytes::BytesMut;
    use kafka_records::{Compression, encode_batch};

    fn data(base: i64, count: i64, pid: i64, transactional: bool) -> BatchSummary {
        BatchSummary {
            base_offset: base,
            last_offset: base + count - 1,
            producer_id: pid,
            producer_epoch: 0,
            transactional,
            marker: None,
        }
    }

    fn marker(at: i64, pid: i64, commit: bool, epoch: i16, coordinator_epoch: i32) -> BatchSummary {
        BatchSummary {
            base_offset: at,
            last_offset: at,
            producer_id: pid,
            producer_epoch: epoch,
            transactional: true,
            marker: Some(Marker {
                commit,
                coordinator_epoch,
            }),
        }
    }

    fn fold(batches: &[BatchSummary]) -> TxnIndex {
        let mut index = TxnIndex::new(0);
        for b in batches {
            index.observe(b);
        }
        index
    }

    #[test]
    fn an_open_transaction_holds_the_first_unstable_offset() {
        let mut index = fold(&[data(0, 5, -1, false), data(5, 3, 7, true)]);
        assert_eq!(index.end(), 8);
        assert_eq!(index.first_unstable(), Some(5));
        assert_eq!(index.open_txn(7), Some(5));
        // Later batches of the same transaction do not move its first offset.
        index.observe(&data(8, 2, 7, true));
        assert_eq!(index.first_unstable(), Some(5));
        index.observe(&marker(10, 7, true, 0, 3));
        assert_eq!(index.first_unstable(), None);
        assert_eq!(index.open_txn(7), None);
        assert_eq!(index.end(), 11);
        assert!(index.aborted(0, 100).is_empty());
        assert_eq!(index.last_marker(7), Some((0, 3)));
    }

    #[test]
    fn interleaved_producers_keep_the_oldest_open_first() {
        let mut index = fold(&[
            data(0, 2, 1, true),
            data(2, 2, 2, true),
            data(4, 1, 3, false),
            data(5, 2, 1, true),
        ]);
        assert_eq!(index.first_unstable(), Some(0));
        index.observe(&marker(7, 1, false, 0, 0));
        // Producer 2's transaction, begun at 2, is now the oldest.
        assert_eq!(index.first_unstable(), Some(2));
        assert_eq!(
            index.aborted(0, 100),
            vec![AbortedTxn {
                producer_id: 1,
                first_offset: 0,
                last_offset: 7
            }]
        );
        // Records of producer 2 inside producer 1's aborted range are not aborted.
        assert!(!index.is_aborted(2, 2));
        assert!(index.is_aborted(1, 5));
        index.observe(&marker(8, 2, true, 0, 0));
        assert_eq!(index.first_unstable(), None);
        assert_eq!(index.aborted(0, 100).len(), 1);
    }

    #[test]
    fn abort_then_a_new_transaction_of_the_same_producer() {
        let index = fold(&[
            data(0, 3, 9, true),
            marker(3, 9, false, 0, 1),
            data(4, 2, 9, true),
            marker(6, 9, false, 0, 1),
            data(7, 1, 9, true),
        ]);
        assert_eq!(index.first_unstable(), Some(7));
        let aborted = index.aborted(0, 100);
        assert_eq!(
            aborted,
            vec![
                AbortedTxn {
                    producer_id: 9,
                    first_offset: 0,
                    last_offset: 3
                },
                AbortedTxn {
                    producer_id: 9,
                    first_offset: 4,
                    last_offset: 6
                },
            ]
        );
        // Edges: first offset and marker offset belong, the next transaction does not.
        for (offset, want) in [(0, true), (3, true), (4, true), (6, true), (7, false)] {
            assert_eq!(index.is_aborted(9, offset), want, "offset {offset}");
        }
        assert!(!index.is_aborted(9, -1));
        assert!(!index.is_aborted(8, 1));
    }

    #[test]
    fn aborted_ranges_are_selected_by_overlap() {
        let index = fold(&[
            data(0, 2, 1, true),
            data(2, 2, 2, true),
            marker(4, 2, false, 0, 0),
            marker(5, 1, false, 0, 0),
            data(6, 4, 3, true),
            marker(10, 3, false, 0, 0),
        ]);
        let pids = |from, to| -> Vec<(i64, i64)> {
            index
                .aborted(from, to)
                .iter()
                .map(|a| (a.producer_id, a.first_offset))
                .collect()
        };
        // Sorted by first offset although producer 2's marker came first.
        assert_eq!(pids(0, 11), [(1, 0), (2, 2), (3, 6)]);
        assert_eq!(pids(5, 6), [(1, 0)]);
        assert_eq!(pids(4, 5), [(1, 0), (2, 2)]);
        assert_eq!(pids(6, 7), [(3, 6)]);
        assert_eq!(pids(11, 20), Vec::<(i64, i64)>::new());
        // `to` is exclusive: a transaction starting at `to` is left out.
        assert_eq!(pids(0, 6), [(1, 0), (2, 2)]);
    }

    #[test]
    fn a_marker_with_no_open_transaction_only_records_the_marker() {
        let mut index = fold(&[data(0, 1, -1, false), marker(1, 4, false, 2, 5)]);
        assert!(index.aborted(0, 100).is_empty());
        assert_eq!(index.first_unstable(), None);
        assert_eq!(index.last_marker(4), Some((2, 5)));
        assert_eq!(index.end(), 2);
        // A retried marker (same producer) leaves the state as it is.
        index.observe(&marker(2, 4, false, 2, 5));
        assert!(index.aborted(0, 100).is_empty());
        assert_eq!(index.last_marker(4), Some((2, 5)));
    }

    #[test]
    fn non_transactional_batches_only_move_the_end() {
        let index = fold(&[data(0, 4, 3, false), data(10, 1, -1, true)]);
        assert_eq!(index.first_unstable(), None);
        assert_eq!(index.end(), 11);
    }

    #[test]
    fn forgetting_drops_aborted_transactions_before_the_log_start() {
        let mut index = fold(&[
            data(0, 2, 1, true),
            marker(2, 1, false, 0, 0),
            data(3, 2, 2, true),
            marker(5, 2, false, 0, 0),
            data(6, 1, 5, true),
        ]);
        index.forget_before(3);
        assert_eq!(index.aborted_count(), 1);
        assert!(!index.is_aborted(1, 1));
        assert!(index.is_aborted(2, 4));
        // The marker at 5 is still readable from log start 5.
        index.forget_before(5);
        assert_eq!(index.aborted_count(), 1);
        index.forget_before(6);
        assert_eq!(index.aborted_count(), 0);
        // The open transaction stays.
        index.forget_before(100);
        assert_eq!(index.first_unstable(), Some(6));
        assert_eq!(index.end(), 100);
    }

    fn encoded(options: &BatchOptions, records: &[NewRecord]) -> RecordBatch {
        let mut out = BytesMut::new();
        encode_batch(options, records, &mut out).unwrap();
        RecordBatch::decode(&out.freeze(), &DecodeLimits::default()).unwrap()
    }

    fn control(key: &[u8], value: Option<&[u8]>) -> RecordBatch {
        encoded(
            &BatchOptions {
                transactional: true,
                control: true,
                producer_id: 11,
                producer_epoch: 2,
                base_offset: 40,
                ..BatchOptions::default()
            },
            &[NewRecord {
                timestamp: 1,
                key: Some(Bytes::copy_from_slice(key)),
                value: value.map(Bytes::copy_from_slice),
                headers: vec![],
            }],
        )
    }

    #[test]
    fn summaries_of_data_and_control_batches() {
        let records: Vec<NewRecord> = (0..3)
            .map(|i| NewRecord {
                timestamp: 1 + i,
                value: Some(Bytes::from_static(b"v")),
                ..NewRecord::default()
            })
            .collect();
        let b = encoded(
            &BatchOptions {
                base_offset: 10,
                transactional: true,
                producer_id: 5,
                producer_epoch: 1,
                base_sequence: 0,
                compression: Compression::Gzip,
                ..BatchOptions::default()
            },
            &records,
        );
        assert_eq!(
            BatchSummary::of(&b).unwrap(),
            BatchSummary {
                base_offset: 10,
                last_offset: 12,
                producer_id: 5,
                producer_epoch: 1,
                transactional: true,
                marker: None
            }
        );
        let commit = control(&[0, 0, 0, 1], Some(&[0, 0, 0, 0, 0, 9]));
        let s = BatchSummary::of(&commit).unwrap();
        assert_eq!(
            s.marker,
            Some(Marker {
                commit: true,
                coordinator_epoch: 9
            })
        );
        assert_eq!((s.base_offset, s.last_offset, s.producer_id), (40, 40, 11));
        // A later value version with more bytes is read for its epoch.
        let abort = control(&[0, 1, 0, 0], Some(&[0, 1, 0, 0, 1, 0, 7, 7]));
        assert_eq!(
            BatchSummary::of(&abort).unwrap().marker,
            Some(Marker {
                commit: false,
                coordinator_epoch: 256
            })
        );
        // Another control type is no marker and opens nothing.
        let other = control(&[0, 0, 0, 3], Some(&[1, 2, 3]));
        let s = BatchSummary::of(&other).unwrap();
        assert_eq!((s.marker, s.transactional), (None, false));
    }

    #[test]
    fn malformed_markers_are_errors() {
        for value in [
            None,
            Some(&[0u8, 0, 0][..]),
            Some(&[0xff, 0xff, 0, 0, 0, 1][..]),
        ] {
            let b = control(&[0, 0, 0, 0], value);
            let err = BatchSummary::of(&b).unwrap_err();
            assert!(
                matches!(err, RecordsError::InvalidControlRecord { .. }),
                "{value:?}: {err}"
            );
        }
        // A key too short for a type.
        let b = control(&[0, 0], Some(&[0, 0, 0, 0, 0, 1]));
        assert!(BatchSummary::of(&b).is_err());
    }

    #[test]
    fn marker_batches_read_back_as_markers() {
        for (pid, epoch, commit, ce, now) in [
            (42, 3, true, 7, 1_700_000_000_000),
            (i64::MAX, i16::MAX, false, i32::MAX, i64::MAX),
            (0, 0, true, i32::MIN, i64::MIN),
            (-1, -1, false, -1, 0),
        ] {
            let b = marker_batch(
                pid,
                epoch,
                Marker {
                    commit,
                    coordinator_epoch: ce,
                },
                now,
            );
            let h = *b.header();
            assert!(h.attributes.is_transactional() && h.attributes.is_control());
            assert_eq!(
                (h.producer_id, h.producer_epoch, h.base_sequence),
                (pid, epoch, -1)
            );
            assert_eq!(h.record_count, 1);
            // What a store reads back is a valid batch with the same marker.
            let again = ValidBatch::from_bytes(b.as_bytes(), &DecodeLimits::default()).unwrap();
            let s = BatchSummary::of(again.batch()).unwrap();
            assert_eq!(
                s.marker,
                Some(Marker {
                    commit,
                    coordinator_epoch: ce
                })
            );
            assert!(s.transactional);
            let record = again.records().next().unwrap().unwrap();
            assert_eq!(record.timestamp, now);
        }
    }

    fn txn_data(pid: i64, n: usize) -> ValidBatch {
        let records: Vec<NewRecord> = (0..n)
            .map(|i| NewRecord {
                timestamp: 1_700_000_000_000,
                key: Some(Bytes::from(format!("k{i}"))),
                value: Some(Bytes::from(vec![b'x'; 50])),
                headers: vec![],
            })
            .collect();
        let mut out = BytesMut::new();
        encode_batch(
            &BatchOptions {
                transactional: pid >= 0,
                producer_id: pid,
                producer_epoch: if pid >= 0 { 0 } else { -1 },
                base_sequence: if pid >= 0 { 0 } else { -1 },
                ..BatchOptions::default()
            },
            &records,
            &mut out,
        )
        .unwrap();
        ValidBatch::from_bytes(&out.freeze(), &DecodeLimits::default()).unwrap()
    }

    #[tokio::test]
    async fn scanning_a_log_in_small_windows_gives_the_fold() {
        let store = MemoryStore::default();
        store
            .create_topic(
                NewTopic {
                    name: "t".into(),
                    partitions: 1,
                    config: TopicConfig::KAFKA_DEFAULT,
                },
                false,
            )
            .await
            .unwrap();
        let abort = Marker {
            commit: false,
            coordinator_epoch: 4,
        };
        let commit = Marker {
            commit: true,
            coordinator_epoch: 4,
        };
        let batches = vec![
            txn_data(-1, 2),               // 0-1
            txn_data(1, 3),                // 2-4
            txn_data(2, 2),                // 5-6
            marker_batch(1, 0, abort, 1),  // 7
            txn_data(-1, 1),               // 8
            marker_batch(2, 0, commit, 1), // 9
            txn_data(3, 2),                // 10-11
            marker_batch(3, 0, abort, 1),  // 12
            txn_data(1, 1),                // 13
        ];
        for b in batches {
            store.append("t", 0, vec![b], 0).await.unwrap();
        }
        let whole = store.read("t", 0, 0, usize::MAX).await.unwrap();
        let (index, bytes) = scan_index(&store, "t", 0, 0, 14, 1).await.unwrap();
        assert_eq!(bytes, whole.len());
        assert_eq!(index.end(), 14);
        assert_eq!(index.first_unstable(), Some(13));
        let ranges: Vec<(i64, i64, i64)> = index
            .aborted(0, 14)
            .iter()
            .map(|a| (a.producer_id, a.first_offset, a.last_offset))
            .collect();
        assert_eq!(ranges, [(1, 2, 7), (3, 10, 12)]);
        assert_eq!(index.last_marker(2), Some((0, 4)));

        // A prefix stops at `to`; a start below the log start begins at it.
        let (prefix, _) = scan_index(&store, "t", 0, 0, 7, 200).await.unwrap();
        assert_eq!(prefix.end(), 7);
        assert_eq!(prefix.first_unstable(), Some(2));
        store.delete_records("t", 0, 8).await.unwrap();
        let (tail, _) = scan_index(&store, "t", 0, 0, 100, 64).await.unwrap();
        assert_eq!(tail.end(), 14);
        assert_eq!(tail.aborted(0, 14).len(), 1);
        assert_eq!(tail.first_unstable(), Some(13));
        // Producer 2's data was deleted; its commit marker at 9 closes nothing.
        assert_eq!(tail.open_txn(2), None);
    }

    /// The index against a model that recomputes everything from the list of batches.
    mod model {
        use super::*;
        use proptest::prelude::*;

        #[derive(Debug, Clone)]
        enum Op {
            /// Producer, transactional, record count.
            Data(i64, bool, i64),
            /// Producer, commit.
            End(i64, bool),
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                3 => (0i64..4, any::<bool>(), 1i64..4).prop_map(|(p, t, n)| Op::Data(p, t, n)),
                1 => (0i64..4, any::<bool>()).prop_map(|(p, c)| Op::End(p, c)),
            ]
        }

        /// (first, last, producer, aborted) of a closed transaction.
        type Closed = (i64, i64, i64, bool);

        /// Every closed transaction, and the open ones as (producer, first).
        fn replay(batches: &[BatchSummary]) -> (Vec<Closed>, Vec<(i64, i64)>) {
            let mut closed = Vec::new();
            let mut open: Vec<(i64, i64)> = Vec::new();
            for b in batches {
                if !b.transactional {
                    continue;
                }
                let at = open.iter().position(|&(p, _)| p == b.producer_id);
                match (b.marker, at) {
                    (None, None) => open.push((b.producer_id, b.base_offset)),
                    (None, Some(_)) => {}
                    (Some(m), Some(i)) => {
                        let (p, first) = open.remove(i);
                        closed.push((first, b.last_offset, p, !m.commit));
                    }
                    (Some(_), None) => {}
                }
            }
            (closed, open)
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            #[test]
            fn the_fold_matches_a_replay(
                ops in prop::collection::vec(op(), 0..40),
                log_start in 0i64..60,
            ) {
                let mut batches = Vec::new();
                let mut next = 0i64;
                for op in ops {
                    let b = match op {
                        Op::Data(p, t, n) => data(next, n, p, t),
                        Op::End(p, c) => marker(next, p, c, 0, 1),
                    };
                    next = b.last_offset + 1;
                    batches.push(b);
                }
                let index = fold(&batches);
                let (closed, open) = replay(&batches);
                prop_assert_eq!(index.end(), next);
                prop_assert_eq!(
                    index.first_unstable(),
                    open.iter().map(|&(_, f)| f).min()
                );
                for p in 0..4 {
                    prop_assert_eq!(
                        index.open_txn(p),
                        open.iter().find(|&&(q, _)| q == p).map(|&(_, f)| f)
                    );
                }
                for offset in -1..=next {
                    for p in 0..4 {
                        let want = closed
                            .iter()
                            .any(|&(f, l, q, a)| a && q == p && f <= offset && offset <= l);
                        prop_assert_eq!(index.is_aborted(p, offset), want, "{} at {}", p, offset);
                    }
                }
                for from in 0..=next {
                    for to in [from, from + 1, from + 5, next + 1] {
                        let mut want: Vec<(i64, i64, i64)> = closed
                            .iter()
                            .filter(|&&(f, l, _, a)| a && l >= from && f < to)
                            .map(|&(f, l, p, _)| (f, p, l))
                            .collect();
                        want.sort();
                        let got: Vec<(i64, i64, i64)> = index
                            .aborted(from, to)
                            .iter()
                            .map(|a| (a.first_offset, a.producer_id, a.last_offset))
                            .collect();
                        prop_assert_eq!(got, want, "[{}, {})", from, to);
                    }
                }
                // Forgetting keeps exactly the aborted transactions whose marker is at or
                // after the log start, and nothing else changes.
                let mut forgot = index.clone();
                forgot.forget_before(log_start);
                let kept = closed.iter().filter(|&&(_, l, _, a)| a && l >= log_start).count();
                prop_assert_eq!(forgot.aborted_count(), kept);
                prop_assert_eq!(forgot.first_unstable(), index.first_unstable());
                for offset in log_start..next {
                    for p in 0..4 {
                        prop_assert_eq!(forgot.is_aborted(p, offset), index.is_aborted(p, offset));
                    }
                }
            }
        }
    }
}
