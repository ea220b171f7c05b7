//! Record batches checked once, whole, before they cross the storage seam.
//!
//! The broker decodes a produced batch once ([`check_batches`]): CRC-32C, magic 2, codec,
//! the decompressed size and record count within limits, every record well-formed, and
//! `recordCount`, `lastOffsetDelta` and every record's offset delta (its index in the
//! batch) consistent with the records. What passes is a
//! [`ValidBatch`]: the batch bytes, their parsed header, and the records section already
//! decompressed. Stores take `ValidBatch`es, so none checks or decompresses again: the
//! embedded store uses the header as is, the Iggy bridge maps the records from the kept
//! section. A store may do that work on the thread that checked the batch
//! ([`crate::LogStore::prepare`]) and carry the result with it ([`Prepared`]).
//!
//! Only [`check_batches`] makes a `ValidBatch` from outside bytes ([`ValidBatch::with_leader_epoch`]
//! and [`ValidBatch::restamped`] derive one from another, [`ValidBatch::encode`] builds the
//! gateway's own batches). The records section is held as long as the batch: a compressed batch
//! costs its decompressed size (bounded by `DecodeLimits::max_decompressed_bytes`) until
//! the store has taken it.

use bytes::{Bytes, BytesMut};
use kafka_records::{
    BATCH_HEADER_LEN, BatchHeader, BatchOptions, Compression, DecodeLimits, NewRecord, RecordBatch,
    RecordRef, Records, RecordsError, TimestampType, decode_batches, encode_batch_with_section,
    set_partition_leader_epoch,
};
use std::any::Any;
use std::sync::Arc;

/// A record batch that passed every check of [`check_batches`].
#[derive(Debug, Clone)]
pub struct ValidBatch {
    batch: RecordBatch,
    section: Bytes,
    summary: RecordsSummary,
    prepared: Option<Prepared>,
}

/// What a store made of a checked batch ahead of its append ([`crate::LogStore::prepare`]),
/// carried with the batch to the store's `append` or `submit`. Only the store that made it
/// knows its type; clones of the batch share it.
#[derive(Clone)]
pub struct Prepared(Arc<dyn Any + Send + Sync>);

impl Prepared {
    /// Wraps a store's own value.
    pub fn new<T: Any + Send + Sync>(value: T) -> Self {
        Prepared(Arc::new(value))
    }

    /// The value, when it is a `T`.
    pub fn downcast_ref<T: Any>(&self) -> Option<&T> {
        self.0.downcast_ref()
    }
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Prepared(..)")
    }
}

/// Takes a batch's records one by one as [`check_batches_with`] reads them, so a store can
/// do its work on each record ([`crate::LogStore::preparer`]) in the same pass as the
/// check, while the record is in the cache, instead of reading the records a second time.
/// The records it is given are well-formed and in offset-delta order; the batch may still
/// fail a check after them (its count, its last offset delta), and then the sink is
/// dropped unfinished.
pub trait RecordSink: Send {
    /// The next record of the batch (the first has offset delta 0, and so on).
    fn record(&mut self, record: &RecordRef<'_>);

    /// The whole batch passed the check: what goes with it ([`ValidBatch::with_prepared`]).
    fn finish(self: Box<Self>) -> Option<Prepared>;
}

/// Makes the sink for one batch, given its decoded batch and uncompressed records
/// section before its records are read; `None` leaves the batch unprepared.
pub type SinkFor<'a> = dyn FnMut(&RecordBatch, &Bytes) -> Option<Box<dyn RecordSink>> + 'a;

/// What the check's walk over a batch's records saw, for the per-record rules a topic
/// applies (keyless records on a compacted topic, timestamps out of bounds): when the
/// summary shows no record can break them, the records need not be read again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordsSummary {
    /// Records with a null key.
    pub keyless: usize,
    /// Smallest and largest record timestamp (as a consumer reads it) other than -1,
    /// `None` when every record has -1.
    pub timestamps: Option<(i64, i64)>,
}

impl RecordsSummary {
    const EMPTY: RecordsSummary = RecordsSummary {
        keyless: 0,
        timestamps: None,
    };

    fn add(&mut self, record: &RecordRef<'_>) {
        if record.key.is_none() {
            self.keyless += 1;
        }
        let ts = record.timestamp;
        if ts != -1 {
            self.timestamps = Some(match self.timestamps {
                None => (ts, ts),
                Some((lo, hi)) => (lo.min(ts), hi.max(ts)),
            });
        }
    }

    /// Whether every timestamp other than -1 lies within `before` ms behind and `after`
    /// ms ahead of `now` (the two ends are the worst cases, distances saturating).
    pub fn timestamps_within(&self, now: i64, before: i64, after: i64) -> bool {
        self.timestamps.is_none_or(|(lo, hi)| {
            now.saturating_sub(lo) <= before && hi.saturating_sub(now) <= after
        })
    }

    /// The summary of `batch`'s records read from `section`.
    fn of(batch: &RecordBatch, section: &[u8]) -> Result<RecordsSummary, RecordsError> {
        let mut summary = RecordsSummary::EMPTY;
        for record in batch.record_refs_in(section) {
            summary.add(&record?);
        }
        Ok(summary)
    }
}

/// The checked batches of one partition's `records` field.
#[derive(Debug)]
pub struct ValidBatches {
    /// The whole batches, in order.
    pub batches: Vec<ValidBatch>,
    /// Bytes after the last whole batch (a partial batch), or 0.
    pub truncated_tail: usize,
}

/// Checks every whole batch of `records`: see the module documentation. The first
/// failing batch fails the call.
pub fn check_batches(records: &Bytes, limits: &DecodeLimits) -> Result<ValidBatches, RecordsError> {
    check_batches_with(records, limits, &mut |_, _| None)
}

/// [`check_batches`], handing each batch's records to the sink `sink_for` makes for it
/// (if any) during the check's own walk, and the finished sink's result to the batch.
pub fn check_batches_with(
    records: &Bytes,
    limits: &DecodeLimits,
    sink_for: &mut SinkFor<'_>,
) -> Result<ValidBatches, RecordsError> {
    let seq = decode_batches(records, limits)?;
    let mut batches = Vec::with_capacity(seq.batches.len());
    for batch in seq.batches {
        batches.push(ValidBatch::check(batch, sink_for)?);
    }
    Ok(ValidBatches {
        batches,
        truncated_tail: seq.truncated_tail,
    })
}

impl ValidBatch {
    /// Checks `bytes`, which must hold exactly one whole batch, with `limits` (see
    /// [`check_batches`]).
    pub fn from_bytes(bytes: &Bytes, limits: &DecodeLimits) -> Result<ValidBatch, RecordsError> {
        let mut v = check_batches(bytes, limits)?;
        match (v.batches.pop(), v.batches.len(), v.truncated_tail) {
            (Some(batch), 0, 0) => Ok(batch),
            (last, more, tail) => Err(RecordsError::NotOneBatch {
                batches: more + usize::from(last.is_some()),
                tail,
            }),
        }
    }

    /// Decompresses and walks the records of a CRC-verified batch, handing them to the
    /// sink `sink_for` makes for it.
    fn check(batch: RecordBatch, sink_for: &mut SinkFor<'_>) -> Result<ValidBatch, RecordsError> {
        let section = batch.records_section()?;
        let mut sink = sink_for(&batch, &section);
        let header = batch.header();
        let mut count = 0i64;
        let mut summary = RecordsSummary::EMPTY;
        // One pass, reading every record in place: its structure, its offset delta, and
        // what the topic's rules need from it.
        for record in batch.record_refs_in(&section) {
            let record = record?;
            summary.add(&record);
            if i64::from(record.offset_delta) != count {
                return Err(RecordsError::OffsetDeltaMismatch {
                    base_offset: header.base_offset,
                    index: count,
                    offset_delta: record.offset_delta,
                });
            }
            if let Some(sink) = sink.as_mut() {
                sink.record(&record);
            }
            count += 1;
        }
        if count != i64::from(header.record_count) {
            return Err(RecordsError::RecordCountMismatch {
                base_offset: header.base_offset,
                expected: header.record_count,
                found: usize::try_from(count).unwrap_or(0),
            });
        }
        if i64::from(header.last_offset_delta) != count - 1 {
            return Err(RecordsError::LastOffsetDeltaMismatch {
                base_offset: header.base_offset,
                last_offset_delta: header.last_offset_delta,
                records: header.record_count,
            });
        }
        Ok(ValidBatch {
            batch,
            section,
            summary,
            prepared: sink.and_then(RecordSink::finish),
        })
    }

    /// What the store prepared from this batch ([`crate::LogStore::prepare`]), if anything.
    pub fn prepared(&self) -> Option<&Prepared> {
        self.prepared.as_ref()
    }

    /// The batch carrying `prepared` (in place of anything prepared before). Batches
    /// derived from it ([`ValidBatch::with_leader_epoch`], [`ValidBatch::restamped`]) carry
    /// nothing, as their bytes may differ.
    pub fn with_prepared(mut self, prepared: Prepared) -> ValidBatch {
        self.prepared = Some(prepared);
        self
    }

    /// What the check saw of the records (null keys, timestamp range).
    pub fn summary(&self) -> &RecordsSummary {
        &self.summary
    }

    /// The parsed header.
    pub fn header(&self) -> &BatchHeader {
        self.batch.header()
    }

    /// The decoded batch (header, codec, attributes).
    pub fn batch(&self) -> &RecordBatch {
        &self.batch
    }

    /// The whole encoded batch, as produced: its partition leader epoch is the one the
    /// producer sent even after [`ValidBatch::with_leader_epoch`]. A store that keeps
    /// or forwards the bytes takes them from [`ValidBatch::to_bytes_mut`].
    pub fn as_bytes(&self) -> &Bytes {
        self.batch.as_bytes()
    }

    /// A copy of the whole encoded batch with the header's partition leader epoch
    /// written in it (the one [`ValidBatch::with_leader_epoch`] set), writable for the
    /// store's own fields (`baseOffset`).
    pub fn to_bytes_mut(&self) -> BytesMut {
        let mut bytes = BytesMut::from(&self.as_bytes()[..]);
        // Cannot fail: a valid batch's frame is whole.
        let _ = set_partition_leader_epoch(&mut bytes, self.header().partition_leader_epoch);
        bytes
    }

    /// Bytes the batch takes on the wire.
    pub fn len(&self) -> usize {
        self.batch.encoded_len()
    }

    /// Whether the batch is empty (never: a valid batch has a header and a record).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The records, from the kept uncompressed section: no second decompression. They
    /// were all read once already, so iterating gives no error.
    pub fn records(&self) -> Records {
        self.batch.records_in(self.section.clone())
    }

    /// The uncompressed records section the records are read from (for
    /// [`RecordBatch::records_in`] and [`RecordBatch::record_refs_in`]).
    pub fn section(&self) -> &Bytes {
        &self.section
    }

    /// Bytes of the uncompressed records section (what a compressed batch inflated to).
    pub fn records_len(&self) -> usize {
        self.section.len()
    }

    /// The batch with its partition leader epoch set to `epoch` in its header
    /// ([`ValidBatch::header`], [`RecordBatch::header`]). The bytes are not copied to
    /// carry it (the field is outside the CRC): [`ValidBatch::as_bytes`] keeps the epoch
    /// produced, and [`ValidBatch::to_bytes_mut`] copies the batch with the header's.
    /// Nothing prepared is kept ([`ValidBatch::with_prepared`]).
    pub fn with_leader_epoch(self, epoch: i32) -> ValidBatch {
        if self.header().partition_leader_epoch == epoch {
            return self;
        }
        ValidBatch {
            batch: self.batch.with_header_leader_epoch(epoch),
            section: self.section,
            summary: self.summary,
            prepared: None,
        }
    }
}

impl ValidBatch {
    /// The batch as a topic stores it: records compressed with `compression` (`None`:
    /// the producer's codec, kept) and, with `log_append_time`, the LogAppendTime bit
    /// set and every record's timestamp (so also `baseTimestamp` and `maxTimestamp`)
    /// the append time; without it the batch is CreateTime (a LogAppendTime bit the
    /// producer set is cleared, as Kafka's broker does). Keys, values, headers, offset deltas, the producer id, epoch and
    /// base sequence, the leader epoch and the transactional bit are kept. The same
    /// batch is returned when nothing changes; otherwise the records are encoded again
    /// from the kept section (no second decompression), which costs about the section's
    /// size in memory plus the codec's output.
    pub fn restamped(
        self,
        compression: Option<Compression>,
        log_append_time: Option<i64>,
    ) -> Result<ValidBatch, RecordsError> {
        let current = self.batch.compression();
        let codec = compression.unwrap_or(current);
        let create_time = self.batch.timestamp_type() == TimestampType::CreateTime;
        if codec == current && log_append_time.is_none() && create_time {
            return Ok(self);
        }
        let h = *self.header();
        let mut records = Vec::with_capacity(usize::try_from(h.record_count).unwrap_or(0));
        for record in self.records() {
            let record = record?;
            // A LogAppendTime batch reads every record as its maxTimestamp; cleared, the
            // records read as base timestamp plus their own deltas again.
            let own = h.base_timestamp.wrapping_add(record.timestamp_delta);
            let mut record = NewRecord::from(record);
            record.timestamp = match log_append_time {
                Some(t) => t,
                None if !create_time => own,
                None => record.timestamp,
            };
            records.push(record);
        }
        let options = BatchOptions {
            base_offset: h.base_offset,
            partition_leader_epoch: h.partition_leader_epoch,
            compression: codec,
            timestamp_type: if log_append_time.is_some() {
                TimestampType::LogAppendTime
            } else {
                TimestampType::CreateTime
            },
            transactional: h.attributes.is_transactional(),
            control: h.attributes.is_control(),
            producer_id: h.producer_id,
            producer_epoch: h.producer_epoch,
            base_sequence: h.base_sequence,
            base_timestamp: Some(log_append_time.unwrap_or(h.base_timestamp)),
        };
        ValidBatch::encode(&options, &records)
    }

    /// A batch the gateway writes itself (a transaction marker): `records` encoded with
    /// `options`. Records built in process are well-formed by construction, so the
    /// batch is not walked again; only the header is read back from the new bytes.
    pub fn encode(
        options: &BatchOptions,
        records: &[NewRecord],
    ) -> Result<ValidBatch, RecordsError> {
        let mut out = BytesMut::new();
        let section = encode_batch_with_section(options, records, &mut out)?;
        let bytes = out.freeze();
        let section = section.unwrap_or_else(|| bytes.slice(BATCH_HEADER_LEN..));
        // Just encoded: the header and the CRC are right, and the section is what the
        // records section inflates to.
        let limits = DecodeLimits {
            max_decompressed_bytes: usize::MAX,
            max_records_per_batch: usize::MAX,
        };
        let batch = RecordBatch::decode_verified(&bytes, &limits)?;
        let summary = RecordsSummary::of(&batch, &section)?;
        Ok(ValidBatch {
            batch,
            section,
            summary,
            prepared: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_records::{BatchOptions, Compression, NewRecord, encode_batch};

    fn encoded(n: usize, compression: Compression) -> Bytes {
        let records: Vec<NewRecord> = (0..n)
            .map(|i| NewRecord {
                timestamp: 1_700_000_000_000 + i as i64,
                key: Some(Bytes::from(format!("k{i}"))),
                value: Some(Bytes::from(vec![b'v'; 100])),
                headers: vec![],
            })
            .collect();
        let mut out = BytesMut::new();
        encode_batch(
            &BatchOptions {
                compression,
                ..BatchOptions::default()
            },
            &records,
            &mut out,
        )
        .unwrap();
        out.freeze()
    }

    #[test]
    fn checks_every_batch_and_keeps_the_records_section() {
        let mut both = encoded(3, Compression::None).to_vec();
        both.extend_from_slice(&encoded(4, Compression::Zstd));
        both.extend_from_slice(&[0, 0, 0]);
        let v = check_batches(&Bytes::from(both), &DecodeLimits::default()).unwrap();
        assert_eq!(v.truncated_tail, 3);
        assert_eq!(v.batches.len(), 2);
        let counts: Vec<usize> = v.batches.iter().map(|b| b.records().count()).collect();
        assert_eq!(counts, [3, 4]);
        let keys: Vec<Bytes> = v.batches[1]
            .records()
            .map(|r| r.unwrap().key.unwrap())
            .collect();
        assert_eq!(keys, [&b"k0"[..], b"k1", b"k2", b"k3"]);
    }

    #[test]
    fn the_summary_counts_keyless_records_and_bounds_the_timestamps() {
        let at = |i: i64| 1_700_000_000_000 + i * 1000;
        let records: Vec<NewRecord> = [(0, true), (5, false), (-3, true), (2, false)]
            .into_iter()
            .map(|(t, keyed)| NewRecord {
                timestamp: at(t),
                key: keyed.then(|| Bytes::from_static(b"k")),
                value: Some(Bytes::from_static(b"v")),
                headers: vec![],
            })
            .collect();
        for compression in [Compression::None, Compression::Lz4] {
            let mut out = BytesMut::new();
            let options = BatchOptions {
                compression,
                ..BatchOptions::default()
            };
            encode_batch(&options, &records, &mut out).unwrap();
            let v = ValidBatch::from_bytes(&out.freeze(), &DecodeLimits::default()).unwrap();
            let s = *v.summary();
            assert_eq!(s.keyless, 2);
            assert_eq!(s.timestamps, Some((at(-3), at(5))));
            let now = at(0);
            assert!(s.timestamps_within(now, 3000, 5000));
            assert!(!s.timestamps_within(now, 2999, 5000));
            assert!(!s.timestamps_within(now, 3000, 4999));
            // Stamped with the append time, every record reads that time.
            let stamped = v.restamped(None, Some(at(9))).unwrap();
            assert_eq!(stamped.summary().timestamps, Some((at(9), at(9))));
            assert_eq!(stamped.summary().keyless, 2);
        }
        // -1 (no timestamp) is left out of the range.
        let mut out = BytesMut::new();
        let none = NewRecord {
            timestamp: -1,
            key: None,
            value: None,
            headers: vec![],
        };
        let options = BatchOptions {
            base_timestamp: Some(-1),
            ..BatchOptions::default()
        };
        encode_batch(&options, &[none.clone(), none], &mut out).unwrap();
        let v = ValidBatch::from_bytes(&out.freeze(), &DecodeLimits::default()).unwrap();
        assert_eq!(v.summary().timestamps, None);
        assert!(v.summary().timestamps_within(0, 0, 0));
    }

    #[test]
    fn a_count_that_does_not_match_the_records_is_refused() {
        let mut b = encoded(3, Compression::None).to_vec();
        // lastOffsetDelta (offset 23) says 5 records.
        b[23..27].copy_from_slice(&4i32.to_be_bytes());
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        let err = check_batches(&Bytes::from(b), &DecodeLimits::default()).unwrap_err();
        assert!(
            matches!(err, RecordsError::LastOffsetDeltaMismatch { .. }),
            "{err}"
        );
    }

    #[test]
    fn an_offset_delta_that_is_not_the_record_index_is_refused() {
        let records: Vec<NewRecord> = (0..2)
            .map(|_| NewRecord {
                timestamp: 1_700_000_000_000,
                key: None,
                value: Some(Bytes::from_static(b"v")),
                headers: vec![],
            })
            .collect();
        let mut out = BytesMut::new();
        encode_batch(&BatchOptions::default(), &records, &mut out).unwrap();
        let mut b = out.to_vec();
        // Record 0 at 61: length, attributes, timestamp delta, offset delta, key (-1),
        // value length, value, header count: 8 bytes. Record 1's offset delta is at 72.
        assert_eq!(b[72], 0x02, "zigzag 1");
        b[72] = 0x04;
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        let err = check_batches(&Bytes::from(b), &DecodeLimits::default()).unwrap_err();
        assert!(
            matches!(
                err,
                RecordsError::OffsetDeltaMismatch {
                    index: 1,
                    offset_delta: 2,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(
            err.kafka_error_code(),
            kafka_protocol::ErrorCode::INVALID_RECORD
        );
    }

    #[test]
    fn a_bad_crc_or_record_is_refused() {
        let mut b = encoded(2, Compression::None).to_vec();
        let last = b.len() - 1;
        b[last] ^= 0xff;
        assert!(check_batches(&Bytes::from(b), &DecodeLimits::default()).is_err());
    }

    #[test]
    fn stamping_the_leader_epoch_keeps_the_records() {
        let mut b = encoded(2, Compression::Lz4).to_vec();
        b[12..16].copy_from_slice(&7i32.to_be_bytes());
        let v = check_batches(&Bytes::from(b), &DecodeLimits::default()).unwrap();
        let batch = v.batches.into_iter().next().unwrap();
        assert_eq!(batch.header().partition_leader_epoch, 7);
        let sent = batch.as_bytes().clone();
        let stamped = batch.with_leader_epoch(0);
        assert_eq!(stamped.header().partition_leader_epoch, 0);
        assert_eq!(stamped.batch().header().partition_leader_epoch, 0);
        assert_eq!(stamped.records().count(), 2);
        // The bytes as produced are not copied for the stamp; the copy out carries it
        // and nothing else changes.
        assert_eq!(stamped.as_bytes(), &sent);
        assert_eq!(stamped.as_bytes().as_ptr(), sent.as_ptr());
        let copied = stamped.to_bytes_mut().freeze();
        assert_eq!(copied[12..16], 0i32.to_be_bytes());
        assert_eq!(copied[..12], sent[..12]);
        assert_eq!(copied[16..], sent[16..]);
        // Still a valid batch: the CRC does not cover the epoch. It reads back with the
        // stamped header, and stamping it again changes nothing.
        let again = check_batches(&copied, &DecodeLimits::default()).unwrap();
        assert_eq!(again.batches.len(), 1);
        let same = again.batches.into_iter().next().unwrap();
        assert_eq!(same.header(), stamped.header());
        let same = same.with_leader_epoch(0);
        assert_eq!(same.to_bytes_mut(), copied);
        // A batch already at the epoch is the same batch.
        assert_eq!(same.as_bytes().as_ptr(), copied.as_ptr());
    }

    fn idempotent(n: usize, compression: Compression) -> ValidBatch {
        let records: Vec<NewRecord> = (0..n)
            .map(|i| NewRecord {
                timestamp: 1_700_000_000_000 + i as i64 * 7,
                key: (i % 2 == 0).then(|| Bytes::from(format!("k{i}"))),
                value: Some(Bytes::from(vec![b'a' + (i % 26) as u8; 300])),
                headers: vec![kafka_records::Header::new(
                    format!("h{i}"),
                    Some(Bytes::from_static(b"x")),
                )],
            })
            .collect();
        let mut out = BytesMut::new();
        encode_batch(
            &BatchOptions {
                compression,
                producer_id: 42,
                producer_epoch: 3,
                base_sequence: 17,
                partition_leader_epoch: 0,
                ..BatchOptions::default()
            },
            &records,
            &mut out,
        )
        .unwrap();
        ValidBatch::from_bytes(&out.freeze(), &DecodeLimits::default()).unwrap()
    }

    fn plain(b: &ValidBatch) -> Vec<NewRecord> {
        b.records().map(|r| NewRecord::from(r.unwrap())).collect()
    }

    #[test]
    fn restamping_changes_the_codec_and_keeps_the_records() {
        for from in [Compression::None, Compression::Gzip, Compression::Zstd] {
            for to in [
                Compression::None,
                Compression::Gzip,
                Compression::Snappy,
                Compression::Lz4,
                Compression::Zstd,
            ] {
                let original = idempotent(20, from);
                let before = plain(&original);
                let h = *original.header();
                let stored = original.restamped(Some(to), None).unwrap();
                assert_eq!(stored.batch().compression(), to, "{from:?} -> {to:?}");
                assert_eq!(plain(&stored), before, "{from:?} -> {to:?}");
                let s = *stored.header();
                assert_eq!(
                    (
                        s.producer_id,
                        s.producer_epoch,
                        s.base_sequence,
                        s.record_count
                    ),
                    (
                        h.producer_id,
                        h.producer_epoch,
                        h.base_sequence,
                        h.record_count
                    )
                );
                assert_eq!(s.max_timestamp, h.max_timestamp);
                // What a reader decodes from the stored bytes is the same again.
                let again =
                    ValidBatch::from_bytes(stored.as_bytes(), &DecodeLimits::default()).unwrap();
                assert_eq!(plain(&again), before);
                assert_eq!(again.records_len(), stored.records_len());
            }
        }
    }

    #[test]
    fn the_producers_codec_keeps_the_batch_as_sent() {
        let original = idempotent(3, Compression::Lz4);
        let bytes = original.as_bytes().clone();
        let kept = original.restamped(None, None).unwrap();
        assert_eq!(kept.as_bytes(), &bytes);
        let same = kept.restamped(Some(Compression::Lz4), None).unwrap();
        assert_eq!(same.as_bytes(), &bytes);
    }

    #[test]
    fn log_append_time_stamps_the_batch_and_every_record() {
        let original = idempotent(5, Compression::Snappy);
        let before = plain(&original);
        let t = 1_800_000_000_123;
        let stored = original.restamped(None, Some(t)).unwrap();
        let h = *stored.header();
        assert_eq!(h.attributes.timestamp_type(), TimestampType::LogAppendTime);
        assert_eq!((h.base_timestamp, h.max_timestamp), (t, t));
        assert_eq!(stored.batch().compression(), Compression::Snappy);
        let after = plain(&stored);
        assert!(after.iter().all(|r| r.timestamp == t));
        let strip = |v: Vec<NewRecord>| -> Vec<NewRecord> {
            v.into_iter()
                .map(|r| NewRecord { timestamp: 0, ..r })
                .collect()
        };
        assert_eq!(strip(after), strip(before));
    }
}
