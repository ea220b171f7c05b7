//! Encoding records into one batch: record lengths and deltas, the codec, `batchLength`
//! and the CRC-32C are all computed here.
//!
//! ```text
//! out: ... [61-byte header][records, or the records compressed]
//!           ^ written last: batchLength and the CRC depend on what follows
//! ```
//!
//! Offset deltas are 0, 1, 2, ... as producers write them. `baseTimestamp` is the first
//! record's timestamp (as the Java producer does) unless the options fix it, so later
//! records may have negative deltas; `maxTimestamp` is the largest record timestamp.
//! Deltas are computed with wrapping arithmetic, which the decoder undoes exactly.

use bytes::{BufMut, Bytes, BytesMut};

use crate::batch::{Attributes, BATCH_HEADER_LEN, LOG_OVERHEAD, TimestampType};
use crate::codec::{self, Compression};
use crate::record::{Header, Record};
use crate::varint::{put_varint, put_varlong, varint_len, varlong_len};
use crate::{RecordsError, Result};

/// Batch-level settings for [`encode_batch`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchOptions {
    /// `baseOffset`; a broker rewrites it on append anyway.
    pub base_offset: i64,
    /// `partitionLeaderEpoch`, -1 when unknown.
    pub partition_leader_epoch: i32,
    /// Codec for the records section.
    pub compression: Compression,
    /// Timestamp type bit.
    pub timestamp_type: TimestampType,
    /// Transactional bit.
    pub transactional: bool,
    /// Control bit (records should then carry [`crate::ControlRecord`] keys).
    pub control: bool,
    /// `producerId`, -1 for none.
    pub producer_id: i64,
    /// `producerEpoch`, -1 for none.
    pub producer_epoch: i16,
    /// `baseSequence`, -1 for none.
    pub base_sequence: i32,
    /// `baseTimestamp`; `None` takes the first record's timestamp.
    pub base_timestamp: Option<i64>,
}

impl Default for BatchOptions {
    fn default() -> Self {
        Self {
            base_offset: 0,
            partition_leader_epoch: -1,
            compression: Compression::None,
            timestamp_type: TimestampType::CreateTime,
            transactional: false,
            control: false,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            base_timestamp: None,
        }
    }
}

/// A record to encode.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct NewRecord {
    /// Absolute timestamp in milliseconds.
    pub timestamp: i64,
    /// Key; `None` encodes as null (-1).
    pub key: Option<Bytes>,
    /// Value; `None` encodes as null, a tombstone.
    pub value: Option<Bytes>,
    /// Headers in order; names may repeat, values may be null.
    pub headers: Vec<Header>,
}

impl From<Record> for NewRecord {
    fn from(record: Record) -> Self {
        Self {
            timestamp: record.timestamp,
            key: record.key,
            value: record.value,
            headers: record.headers.to_vec(),
        }
    }
}

/// Kafka timestamps use -1 for "none".
const NO_TIMESTAMP: i64 = -1;

fn len_i32(what: &'static str, len: usize) -> Result<i32> {
    i32::try_from(len).map_err(|_| RecordsError::EncodeOverflow { what, found: len })
}

fn nullable_size(what: &'static str, field: Option<&[u8]>) -> Result<usize> {
    Ok(match field {
        None => varint_len(-1),
        Some(b) => varint_len(len_i32(what, b.len())?) + b.len(),
    })
}

fn put_nullable(out: &mut impl BufMut, field: Option<&[u8]>) {
    match field {
        // Lengths were checked to fit i32 when the record was sized.
        Some(b) => {
            put_varint(out, b.len() as i32);
            out.put_slice(b);
        }
        None => put_varint(out, -1),
    }
}

/// The size of a record's body (everything after its length varint).
fn body_len(record: &NewRecord, offset_delta: i32, base_timestamp: i64) -> Result<usize> {
    let timestamp_delta = record.timestamp.wrapping_sub(base_timestamp);
    let header_count = len_i32("header count", record.headers.len())?;
    let mut body = 1
        + varlong_len(timestamp_delta)
        + varint_len(offset_delta)
        + nullable_size("key", record.key.as_deref())?
        + nullable_size("value", record.value.as_deref())?
        + varint_len(header_count);
    for header in &record.headers {
        body += varint_len(len_i32("header key", header.key.len())?) + header.key.len();
        body += nullable_size("header value", header.value.as_deref())?;
    }
    Ok(body)
}

fn put_record(
    out: &mut impl BufMut,
    record: &NewRecord,
    offset_delta: i32,
    base_timestamp: i64,
    body: usize,
) -> Result<()> {
    let timestamp_delta = record.timestamp.wrapping_sub(base_timestamp);
    put_varint(out, len_i32("record", body)?);
    out.put_i8(0);
    put_varlong(out, timestamp_delta);
    put_varint(out, offset_delta);
    put_nullable(out, record.key.as_deref());
    put_nullable(out, record.value.as_deref());
    // The count was checked to fit i32 when the body was sized.
    put_varint(out, record.headers.len() as i32);
    for header in &record.headers {
        put_nullable(out, Some(&header.key));
        put_nullable(out, header.value.as_deref());
    }
    Ok(())
}

/// Writes the records; `out` is first grown once to their exact size.
fn put_records(out: &mut BytesMut, records: &[NewRecord], base_timestamp: i64) -> Result<()> {
    let mut bodies = Vec::with_capacity(records.len());
    let mut total = 0usize;
    for (i, record) in records.iter().enumerate() {
        // The record count was checked to fit i32, so every index does too.
        let body = body_len(record, i as i32, base_timestamp)?;
        total = total.saturating_add(varint_len(len_i32("record", body)?) + body);
        bodies.push(body);
    }
    out.reserve(total);
    for (i, (record, body)) in records.iter().zip(bodies).enumerate() {
        put_record(out, record, i as i32, base_timestamp, body)?;
    }
    Ok(())
}

/// Encodes `records` as one batch appended to `out`.
///
/// On error, `out` is left as it was.
pub fn encode_batch(
    options: &BatchOptions,
    records: &[NewRecord],
    out: &mut BytesMut,
) -> Result<()> {
    let start = out.len();
    let result = encode_into(options, records, out, start);
    if result.is_err() {
        out.truncate(start);
    }
    result
}

fn encode_into(
    options: &BatchOptions,
    records: &[NewRecord],
    out: &mut BytesMut,
    start: usize,
) -> Result<()> {
    let count = len_i32("record count", records.len())?;
    let base_timestamp = options
        .base_timestamp
        .or(records.first().map(|r| r.timestamp))
        .unwrap_or(NO_TIMESTAMP);
    let max_timestamp = records
        .iter()
        .map(|r| r.timestamp)
        .max()
        .unwrap_or(NO_TIMESTAMP);

    out.put_bytes(0, BATCH_HEADER_LEN);
    match options.compression {
        Compression::None => put_records(out, records, base_timestamp)?,
        codec => {
            let mut plain = BytesMut::new();
            put_records(&mut plain, records, base_timestamp)?;
            codec::compress(codec, &plain, out)?;
        }
    }

    let batch_length = len_i32("batch", out.len() - start - LOG_OVERHEAD)?;
    let mut attributes = i16::from(options.compression.id());
    if options.timestamp_type == TimestampType::LogAppendTime {
        attributes |= Attributes::LOG_APPEND_TIME;
    }
    if options.transactional {
        attributes |= Attributes::TRANSACTIONAL;
    }
    if options.control {
        attributes |= Attributes::CONTROL;
    }

    let mut header = [0u8; BATCH_HEADER_LEN];
    {
        let mut h = &mut header[..];
        h.put_i64(options.base_offset);
        h.put_i32(batch_length);
        h.put_i32(options.partition_leader_epoch);
        h.put_i8(2);
        h.put_u32(0);
        h.put_i16(attributes);
        h.put_i32((count - 1).max(0));
        h.put_i64(base_timestamp);
        h.put_i64(max_timestamp);
        h.put_i64(options.producer_id);
        h.put_i16(options.producer_epoch);
        h.put_i32(options.base_sequence);
        h.put_i32(count);
    }
    out[start..start + BATCH_HEADER_LEN].copy_from_slice(&header);
    let crc = crc32c::crc32c(&out[start + 21..]);
    out[start + 17..start + 21].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DecodeLimits, RecordBatch};

    #[test]
    fn empty_batch_round_trips() {
        let mut out = BytesMut::new();
        encode_batch(&BatchOptions::default(), &[], &mut out).unwrap();
        assert_eq!(out.len(), BATCH_HEADER_LEN);
        let batch = RecordBatch::decode(&out.freeze(), &DecodeLimits::default()).unwrap();
        assert_eq!(batch.header().record_count, 0);
        assert_eq!(batch.header().max_timestamp, NO_TIMESTAMP);
        assert_eq!(batch.records().unwrap().count(), 0);
    }

    #[test]
    fn appends_after_existing_bytes() {
        let mut out = BytesMut::from(&b"prefix"[..]);
        encode_batch(&BatchOptions::default(), &[NewRecord::default()], &mut out).unwrap();
        assert!(out.starts_with(b"prefix"));
        let batch =
            RecordBatch::decode(&out.split_off(6).freeze(), &DecodeLimits::default()).unwrap();
        assert_eq!(batch.header().record_count, 1);
    }

    #[test]
    fn explicit_base_timestamp_and_extreme_deltas() {
        let records = vec![
            NewRecord {
                timestamp: i64::MAX,
                ..NewRecord::default()
            },
            NewRecord {
                timestamp: i64::MIN,
                ..NewRecord::default()
            },
        ];
        let options = BatchOptions {
            base_timestamp: Some(0),
            ..BatchOptions::default()
        };
        let mut out = BytesMut::new();
        encode_batch(&options, &records, &mut out).unwrap();
        let batch = RecordBatch::decode(&out.freeze(), &DecodeLimits::default()).unwrap();
        assert_eq!(batch.header().base_timestamp, 0);
        assert_eq!(batch.header().max_timestamp, i64::MAX);
        let ts: Vec<i64> = batch
            .records()
            .unwrap()
            .map(|r| r.unwrap().timestamp)
            .collect();
        assert_eq!(ts, vec![i64::MAX, i64::MIN]);
    }
}
