//! What a partition's log says about transactions: which are open, which were aborted.
//!
//! (Skeleton: the fold, the marker batch and the scan are filled in by the store layer.)

#![allow(clippy::todo)] // skeleton: filled in by the store layer

use crate::{LogStore, StoreResult, ValidBatch};

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
    /// Transactional bit.
    pub transactional: bool,
    /// `Some` for a commit/abort control batch; other control batches carry `None`.
    pub marker: Option<Marker>,
}

impl BatchSummary {
    /// The summary of a stored batch (a control batch's first record is parsed).
    pub fn of(
        batch: &kafka_records::RecordBatch,
    ) -> Result<BatchSummary, kafka_records::RecordsError> {
        let _ = batch;
        todo!("txn_index: BatchSummary::of")
    }
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

/// A fold over a partition's batches in offset order.
#[derive(Debug, Clone, Default)]
pub struct TxnIndex {}

impl TxnIndex {
    /// An index of a log that starts (and ends) at `start_offset`.
    pub fn new(start_offset: i64) -> TxnIndex {
        let _ = start_offset;
        todo!("txn_index")
    }
    /// Folds in the next batch.
    pub fn observe(&mut self, batch: &BatchSummary) {
        let _ = batch;
        todo!("txn_index")
    }
    /// One past the last offset observed.
    pub fn end(&self) -> i64 {
        todo!("txn_index")
    }
    /// The first offset of the oldest open transaction.
    pub fn first_unstable(&self) -> Option<i64> {
        todo!("txn_index")
    }
    /// The first offset of `producer_id`'s open transaction.
    pub fn open_txn(&self, producer_id: i64) -> Option<i64> {
        let _ = producer_id;
        todo!("txn_index")
    }
    /// Aborted transactions with `last_offset >= from && first_offset < to`, by first offset.
    pub fn aborted(&self, from: i64, to: i64) -> Vec<AbortedTxn> {
        let _ = (from, to);
        todo!("txn_index")
    }
    /// Whether the record at `offset` of `producer_id` belongs to an aborted transaction.
    pub fn is_aborted(&self, producer_id: i64, offset: i64) -> bool {
        let _ = (producer_id, offset);
        todo!("txn_index")
    }
    /// `(producer epoch, coordinator epoch)` of `producer_id`'s last marker.
    pub fn last_marker(&self, producer_id: i64) -> Option<(i16, i32)> {
        let _ = producer_id;
        todo!("txn_index")
    }
    /// Forgets aborted transactions that end before `log_start`.
    pub fn forget_before(&mut self, log_start: i64) {
        let _ = log_start;
        todo!("txn_index")
    }
}

/// The control batch a partition leader appends to close a transaction.
pub fn marker_batch(
    producer_id: i64,
    producer_epoch: i16,
    marker: Marker,
    now_ms: i64,
) -> ValidBatch {
    let _ = (producer_id, producer_epoch, marker, now_ms);
    todo!("txn_index: marker_batch")
}

/// Builds the index of `[from, to)` of a partition by reading its batches in windows of
/// `window` bytes; also returns the bytes read.
pub async fn scan_index(
    log: &dyn LogStore,
    topic: &str,
    partition: i32,
    from: i64,
    to: i64,
    window: usize,
) -> StoreResult<(TxnIndex, usize)> {
    let _ = (log, topic, partition, from, to, window);
    todo!("txn_index: scan_index")
}
