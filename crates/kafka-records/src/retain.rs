//! Re-encoding a batch with some of its records removed, as a log cleaner does.
//!
//! The batch keeps its identity: `baseOffset`, `partitionLeaderEpoch`, attributes (so
//! the codec, timestamp type, transactional and control bits), `lastOffsetDelta` (the
//! batch still spans the offsets it was appended with, so the next batch's offsets stay
//! where they were), `baseTimestamp`, producer id, epoch and base sequence. Each kept
//! record keeps its offset delta, timestamp delta and attributes byte, so its offset and
//! timestamp do not change; removed records leave gaps in the offset deltas.
//! `recordCount` becomes the number of kept records, `maxTimestamp` the largest kept
//! record timestamp under CreateTime (the append time stays under LogAppendTime),
//! `batchLength` and the CRC-32C are computed again. Varints are written in their
//! shortest form.

use bytes::{BufMut, Bytes, BytesMut};

use crate::batch::{BATCH_HEADER_LEN, LOG_OVERHEAD, TimestampType};
use crate::codec::{self, Compression};
use crate::encode::{fields_len, len_i32, nullable_size, put_nullable};
use crate::record::Record;
use crate::varint::{put_varint, put_varlong};
use crate::{RecordBatch, Result};

/// What [`encode_retained`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retained {
    /// Records kept.
    pub kept: usize,
    /// Records removed.
    pub removed: usize,
}

/// Writes one record as it was: same deltas, same attributes byte.
fn put_record(out: &mut BytesMut, record: &Record) -> Result<()> {
    let mut headers = 0usize;
    for h in record.headers.iter() {
        headers += nullable_size("header key", Some(h.key.len()))?;
        headers += nullable_size("header value", h.value.as_ref().map(Bytes::len))?;
    }
    let body = fields_len(
        record.timestamp_delta,
        record.offset_delta,
        record.key.as_ref().map(Bytes::len),
        record.value.as_ref().map(Bytes::len),
        record.headers.len(),
        headers,
    )?;
    put_varint(out, len_i32("record", body)?);
    out.put_i8(record.attributes);
    put_varlong(out, record.timestamp_delta);
    put_varint(out, record.offset_delta);
    put_nullable(out, record.key.as_deref());
    put_nullable(out, record.value.as_deref());
    // The count was checked to fit i32 when the body was sized.
    put_varint(out, record.headers.len() as i32);
    for h in record.headers.iter() {
        put_nullable(out, Some(&h.key));
        put_nullable(out, h.value.as_deref());
    }
    Ok(())
}

/// Appends to `out` the batch `batch` holding only the records for which `keep` answers
/// `true` (see the module documentation). `section` is the batch's records section
/// uncompressed, as [`RecordBatch::records_section`] gave it. When no record is kept
/// nothing is written and `kept` is 0: the caller drops the batch. On error `out` is
/// left as it was.
pub fn encode_retained(
    batch: &RecordBatch,
    section: Bytes,
    keep: &mut dyn FnMut(&Record) -> bool,
    out: &mut BytesMut,
) -> Result<Retained> {
    let start = out.len();
    let result = encode_into(batch, section, keep, out, start);
    if !matches!(result, Ok(Retained { kept: 1.., .. })) {
        out.truncate(start);
    }
    result
}

fn encode_into(
    batch: &RecordBatch,
    section: Bytes,
    keep: &mut dyn FnMut(&Record) -> bool,
    out: &mut BytesMut,
    start: usize,
) -> Result<Retained> {
    let header = *batch.header();
    let mut plain = BytesMut::with_capacity(section.len());
    let mut kept = 0usize;
    let mut removed = 0usize;
    let mut max_timestamp: Option<i64> = None;
    for record in batch.records_in(section) {
        let record = record?;
        if keep(&record) {
            put_record(&mut plain, &record)?;
            kept += 1;
            max_timestamp =
                Some(max_timestamp.map_or(record.timestamp, |m| m.max(record.timestamp)));
        } else {
            removed += 1;
        }
    }
    if kept == 0 {
        return Ok(Retained { kept, removed });
    }
    let compression = batch.compression();
    out.put_bytes(0, BATCH_HEADER_LEN);
    match compression {
        Compression::None => out.put_slice(&plain),
        codec => codec::compress(codec, &plain, out)?,
    }
    let max_timestamp = match batch.timestamp_type() {
        TimestampType::LogAppendTime => header.max_timestamp,
        TimestampType::CreateTime => max_timestamp.unwrap_or(header.max_timestamp),
    };
    let batch_length = len_i32("batch", out.len() - start - LOG_OVERHEAD)?;
    let mut h = &mut out[start..start + BATCH_HEADER_LEN];
    h.put_i64(header.base_offset);
    h.put_i32(batch_length);
    h.put_i32(header.partition_leader_epoch);
    h.put_i8(2);
    h.put_u32(0);
    h.put_i16(header.attributes.0);
    h.put_i32(header.last_offset_delta);
    h.put_i64(header.base_timestamp);
    h.put_i64(max_timestamp);
    h.put_i64(header.producer_id);
    h.put_i16(header.producer_epoch);
    h.put_i32(header.base_sequence);
    h.put_i32(len_i32("record count", kept)?);
    let crc = crc32c::crc32c(&out[start + 21..]);
    out[start + 17..start + 21].copy_from_slice(&crc.to_be_bytes());
    Ok(Retained { kept, removed })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BatchOptions, DecodeLimits, Header, NewRecord, encode_batch};

    fn source(options: &BatchOptions) -> RecordBatch {
        let records: Vec<NewRecord> = (0..5)
            .map(|i| NewRecord {
                timestamp: 1_000 + 10 * i,
                key: Some(Bytes::from(format!("k{}", i % 2))),
                value: (i != 3).then(|| Bytes::from(format!("v{i}"))),
                headers: vec![Header::new(format!("h{i}"), Some(Bytes::from_static(b"x")))],
            })
            .collect();
        let mut out = BytesMut::new();
        encode_batch(options, &records, &mut out).unwrap();
        RecordBatch::decode(&out.freeze(), &DecodeLimits::default()).unwrap()
    }

    fn rewrite(batch: &RecordBatch, keep: &[i64]) -> (Retained, BytesMut) {
        let mut out = BytesMut::from(&b"prefix"[..]);
        let section = batch.records_section().unwrap();
        let r = encode_retained(
            batch,
            section,
            &mut |rec| keep.contains(&rec.offset),
            &mut out,
        )
        .unwrap();
        (r, out)
    }

    #[test]
    fn kept_records_keep_their_offsets_timestamps_and_the_batch_its_identity() {
        for compression in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let options = BatchOptions {
                base_offset: 100,
                partition_leader_epoch: 3,
                compression,
                transactional: true,
                producer_id: 42,
                producer_epoch: 7,
                base_sequence: 11,
                ..BatchOptions::default()
            };
            let batch = source(&options);
            let (r, out) = rewrite(&batch, &[101, 103]);
            assert_eq!(
                r,
                Retained {
                    kept: 2,
                    removed: 3
                }
            );
            assert_eq!(&out[..6], b"prefix");
            let bytes = Bytes::copy_from_slice(&out[6..]);
            // decode_verified checks the CRC.
            let again = RecordBatch::decode_verified(&bytes, &DecodeLimits::default()).unwrap();
            let (h, old) = (again.header(), batch.header());
            assert_eq!(again.compression(), compression);
            assert_eq!(h.base_offset, 100);
            assert_eq!(h.partition_leader_epoch, 3);
            assert_eq!(h.attributes, old.attributes);
            assert_eq!(h.last_offset_delta, 4, "the batch keeps its offset span");
            assert_eq!(h.base_timestamp, old.base_timestamp);
            assert_eq!(h.max_timestamp, 1_030);
            assert_eq!(
                (h.producer_id, h.producer_epoch, h.base_sequence),
                (42, 7, 11)
            );
            assert_eq!(h.record_count, 2);
            let records: Vec<Record> = again.records().unwrap().map(Result::unwrap).collect();
            let old: Vec<Record> = batch.records().unwrap().map(Result::unwrap).collect();
            assert_eq!(records, [old[1].clone(), old[3].clone()]);
            assert_eq!(records[1].value, None, "a tombstone stays a tombstone");
        }
    }

    #[test]
    fn log_append_time_is_kept() {
        let options = BatchOptions {
            timestamp_type: TimestampType::LogAppendTime,
            ..BatchOptions::default()
        };
        let batch = source(&options);
        let (_, out) = rewrite(&batch, &[0]);
        let again = RecordBatch::decode_verified(
            &Bytes::copy_from_slice(&out[6..]),
            &DecodeLimits::default(),
        )
        .unwrap();
        assert_eq!(again.header().max_timestamp, batch.header().max_timestamp);
        assert_eq!(again.timestamp_type(), TimestampType::LogAppendTime);
    }

    #[test]
    fn nothing_kept_writes_nothing() {
        let batch = source(&BatchOptions::default());
        let (r, out) = rewrite(&batch, &[]);
        assert_eq!(
            r,
            Retained {
                kept: 0,
                removed: 5
            }
        );
        assert_eq!(&out[..], b"prefix");
    }

    #[test]
    fn keeping_everything_gives_an_equivalent_batch() {
        let batch = source(&BatchOptions::default());
        let (r, out) = rewrite(&batch, &[0, 1, 2, 3, 4]);
        assert_eq!(r.kept, 5);
        // The encoder writes shortest varints too, so the bytes are the same.
        assert_eq!(&out[6..], &batch.as_bytes()[..]);
    }
}
