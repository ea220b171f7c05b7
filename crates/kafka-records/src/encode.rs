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
use crate::record::{Header, Record, RecordRef, shortest_headers_len};
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

impl AsRef<NewRecord> for NewRecord {
    fn as_ref(&self) -> &NewRecord {
        self
    }
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

pub(crate) fn len_i32(what: &'static str, len: usize) -> Result<i32> {
    i32::try_from(len).map_err(|_| RecordsError::EncodeOverflow { what, found: len })
}

/// The size of a nullable field of `len` bytes (`None`: null) with its length varint.
pub(crate) fn nullable_size(what: &'static str, len: Option<usize>) -> Result<usize> {
    Ok(match len {
        None => varint_len(-1),
        Some(n) => varint_len(len_i32(what, n)?) + n,
    })
}

pub(crate) fn put_nullable(out: &mut impl BufMut, field: Option<&[u8]>) {
    match field {
        // Lengths were checked to fit i32 when the record was sized.
        Some(b) => {
            put_varint(out, b.len() as i32);
            out.put_slice(b);
        }
        None => put_varint(out, -1),
    }
}

/// A record's headers as names and values.
fn header_parts(record: &NewRecord) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> + Clone {
    record
        .headers
        .iter()
        .map(|h| (&h.key[..], h.value.as_deref()))
}

/// The size of a record's body (everything after its length varint) and its header count,
/// from its deltas, the lengths of its key and value (`None` for null) and its headers.
fn parts_len<'h>(
    timestamp_delta: i64,
    offset_delta: i32,
    key: Option<usize>,
    value: Option<usize>,
    headers: impl Iterator<Item = (&'h [u8], Option<&'h [u8]>)>,
) -> Result<(usize, usize)> {
    let (mut count, mut bytes) = (0usize, 0usize);
    for (name, value) in headers {
        count += 1;
        bytes += nullable_size("header key", Some(name.len()))?;
        bytes += nullable_size("header value", value.map(<[u8]>::len))?;
    }
    let body = fields_len(timestamp_delta, offset_delta, key, value, count, bytes)?;
    Ok((body, count))
}

/// The size of a record body, as [`put_parts`] writes it, from its deltas, the lengths
/// of its key and value (`None` for null), its header count and the bytes its headers
/// take after that count.
pub(crate) fn fields_len(
    timestamp_delta: i64,
    offset_delta: i32,
    key: Option<usize>,
    value: Option<usize>,
    header_count: usize,
    headers: usize,
) -> Result<usize> {
    Ok(1 + varlong_len(timestamp_delta)
        + varint_len(offset_delta)
        + nullable_size("key", key)?
        + nullable_size("value", value)?
        + varint_len(len_i32("header count", header_count)?)
        + headers)
}

/// Writes one record from its parts: `body` and `header_count` as [`parts_len`] gave
/// them (both were checked to fit i32 there).
#[allow(clippy::too_many_arguments)]
fn put_parts<'h>(
    out: &mut impl BufMut,
    body: usize,
    timestamp_delta: i64,
    offset_delta: i32,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    header_count: usize,
    headers: impl Iterator<Item = (&'h [u8], Option<&'h [u8]>)>,
) {
    put_varint(out, body as i32);
    out.put_i8(0);
    put_varlong(out, timestamp_delta);
    put_varint(out, offset_delta);
    put_nullable(out, key);
    put_nullable(out, value);
    put_varint(out, header_count as i32);
    for (name, value) in headers {
        put_nullable(out, Some(name));
        put_nullable(out, value);
    }
}

/// Writes `zeros` zero bytes (room for a header written later) and the records; `out`
/// is first grown once to their exact size.
fn put_records<R: AsRef<NewRecord>>(
    out: &mut BytesMut,
    records: &[R],
    base_timestamp: i64,
    zeros: usize,
) -> Result<()> {
    let mut bodies = Vec::with_capacity(records.len());
    let mut total = 0usize;
    for (i, record) in records.iter().enumerate() {
        let r = record.as_ref();
        // The record count was checked to fit i32, so every index does too.
        let (body, _) = parts_len(
            r.timestamp.wrapping_sub(base_timestamp),
            i as i32,
            r.key.as_ref().map(Bytes::len),
            r.value.as_ref().map(Bytes::len),
            header_parts(r),
        )?;
        total = total.saturating_add(varint_len(len_i32("record", body)?) + body);
        bodies.push(body);
    }
    out.reserve(total.saturating_add(zeros));
    out.put_bytes(0, zeros);
    for (i, (record, body)) in records.iter().zip(bodies).enumerate() {
        let r = record.as_ref();
        put_parts(
            out,
            body,
            r.timestamp.wrapping_sub(base_timestamp),
            i as i32,
            r.key.as_deref(),
            r.value.as_deref(),
            r.headers.len(),
            header_parts(r),
        );
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
    encode_checked(options, records, None, out)
}

/// [`encode_batch`] writing `crc` as the batch's CRC-32C instead of computing it.
///
/// Only for a batch known to come out byte for byte as the one `crc` was computed over:
/// a producer's batch for which [`ExactReencoding::crc`] gave `crc`, re-encoded from the
/// same records with the same header fields. Anything else gets a batch that consumers
/// reject as corrupt.
pub fn encode_batch_with_crc(
    options: &BatchOptions,
    records: &[NewRecord],
    crc: u32,
    out: &mut BytesMut,
) -> Result<()> {
    encode_checked(options, records, Some(crc), out)
}

/// [`encode_batch`] that also returns the records section as it was before compression
/// (what a reader inflates a compressed batch to), so a caller that keeps the decoded
/// records next to the batch need not decompress what was just compressed. `None` for
/// an uncompressed batch: its section is the batch's own bytes after the header.
///
/// On error, `out` is left as it was.
pub fn encode_batch_with_section(
    options: &BatchOptions,
    records: &[NewRecord],
    out: &mut BytesMut,
) -> Result<Option<Bytes>> {
    let start = out.len();
    let mut section = None;
    match encode_into(options, records, None, out, start, Some(&mut section)) {
        Ok(()) => Ok(section),
        Err(e) => {
            out.truncate(start);
            Err(e)
        }
    }
}

/// [`encode_batch`] (or, with `crc`, [`encode_batch_with_crc`]) for records held inside
/// other values: anything that lends a [`NewRecord`], so a caller that keeps its records
/// wrapped with bookkeeping of its own need not move them into a vector first.
///
/// On error, `out` is left as it was.
pub fn encode_batch_of<R: AsRef<NewRecord>>(
    options: &BatchOptions,
    records: &[R],
    crc: Option<u32>,
    out: &mut BytesMut,
) -> Result<()> {
    encode_checked(options, records, crc, out)
}

fn encode_checked<R: AsRef<NewRecord>>(
    options: &BatchOptions,
    records: &[R],
    crc: Option<u32>,
    out: &mut BytesMut,
) -> Result<()> {
    let start = out.len();
    let result = encode_into(options, records, crc, out, start, None);
    if result.is_err() {
        out.truncate(start);
    }
    result
}

fn encode_into<R: AsRef<NewRecord>>(
    options: &BatchOptions,
    records: &[R],
    known_crc: Option<u32>,
    out: &mut BytesMut,
    start: usize,
    keep_section: Option<&mut Option<Bytes>>,
) -> Result<()> {
    let count = len_i32("record count", records.len())?;
    let base_timestamp = options
        .base_timestamp
        .or(records.first().map(|r| r.as_ref().timestamp))
        .unwrap_or(NO_TIMESTAMP);
    let max_timestamp = records
        .iter()
        .map(|r| r.as_ref().timestamp)
        .max()
        .unwrap_or(NO_TIMESTAMP);

    match options.compression {
        Compression::None => put_records(out, records, base_timestamp, BATCH_HEADER_LEN)?,
        codec => {
            out.put_bytes(0, BATCH_HEADER_LEN);
            let mut plain = BytesMut::new();
            put_records(&mut plain, records, base_timestamp, 0)?;
            codec::compress(codec, &plain, out)?;
            if let Some(keep) = keep_section {
                *keep = Some(plain.freeze());
            }
        }
    }

    put_header(
        options,
        count,
        base_timestamp,
        max_timestamp,
        known_crc,
        out,
        start,
    )
}

/// Writes the 61-byte header of the batch that starts at `out[start]` (its records
/// follow it up to the end of `out`) and its CRC-32C (`known_crc`, or computed).
fn put_header(
    options: &BatchOptions,
    count: i32,
    base_timestamp: i64,
    max_timestamp: i64,
    known_crc: Option<u32>,
    out: &mut BytesMut,
    start: usize,
) -> Result<()> {
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
    let crc = known_crc.unwrap_or_else(|| crate::batch::crc32c(&out[start + 21..]));
    out[start + 17..start + 21].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

/// Writes one uncompressed batch record by record from the records' parts, for records
/// not held as [`NewRecord`]s (read straight out of another wire form): the bytes are
/// the ones [`encode_batch_of`] writes for the same records and options. The batch
/// starts at the end of `out`; the caller reserves room for it.
///
/// After an error, `out` is cut back to where the batch started and [`Self::finish`]
/// fails.
#[derive(Debug)]
pub struct BatchWriter<'a> {
    out: &'a mut BytesMut,
    start: usize,
    options: BatchOptions,
    base_timestamp: Option<i64>,
    max_timestamp: i64,
    count: i32,
    failed: bool,
}

impl<'a> BatchWriter<'a> {
    /// Starts a batch with `options` (whose codec must be none) at the end of `out`.
    pub fn new(options: &BatchOptions, out: &'a mut BytesMut) -> Result<Self> {
        if options.compression != Compression::None {
            return Err(RecordsError::Unwritable(
                "a batch written record by record is uncompressed",
            ));
        }
        let start = out.len();
        out.put_bytes(0, BATCH_HEADER_LEN);
        Ok(Self {
            out,
            start,
            options: *options,
            base_timestamp: options.base_timestamp,
            max_timestamp: NO_TIMESTAMP,
            count: 0,
            failed: false,
        })
    }

    /// Appends the next record (its offset delta is its place in the batch). `headers`
    /// is walked twice: to size the record, then to write it.
    pub fn record<'h, H>(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: H,
    ) -> Result<()>
    where
        H: Iterator<Item = (&'h [u8], Option<&'h [u8]>)> + Clone,
    {
        if self.failed {
            return Err(RecordsError::Unwritable("the batch failed earlier"));
        }
        let offset_delta = self.count;
        let base = self.base_timestamp.unwrap_or(timestamp);
        let delta = timestamp.wrapping_sub(base);
        // Everything that can fail is checked before anything is written.
        let sized =
            len_i32("record count", (offset_delta as usize).saturating_add(1)).and_then(|count| {
                let (body, headers) = parts_len(
                    delta,
                    offset_delta,
                    key.map(<[u8]>::len),
                    value.map(<[u8]>::len),
                    headers.clone(),
                )?;
                len_i32("record", body)?;
                Ok((count, body, headers))
            });
        let (count, body, header_count) = match sized {
            Ok(sized) => sized,
            Err(e) => {
                self.out.truncate(self.start);
                self.failed = true;
                return Err(e);
            }
        };
        put_parts(
            self.out,
            body,
            delta,
            offset_delta,
            key,
            value,
            header_count,
            headers,
        );
        self.base_timestamp = Some(base);
        self.count = count;
        self.max_timestamp = if offset_delta == 0 {
            timestamp
        } else {
            self.max_timestamp.max(timestamp)
        };
        Ok(())
    }

    /// Records written so far.
    pub fn count(&self) -> i32 {
        self.count
    }

    /// Writes the batch header: `known_crc` as its CRC-32C (see
    /// [`encode_batch_with_crc`] for when that is right), or the one computed.
    pub fn finish(self, known_crc: Option<u32>) -> Result<()> {
        if self.failed {
            return Err(RecordsError::Unwritable("the batch failed earlier"));
        }
        let base_timestamp = self.base_timestamp.unwrap_or(NO_TIMESTAMP);
        let written = put_header(
            &self.options,
            self.count,
            base_timestamp,
            self.max_timestamp,
            known_crc,
            self.out,
            self.start,
        );
        if written.is_err() {
            self.out.truncate(self.start);
        }
        written
    }
}

/// Whether a producer's batch, decoded and encoded again by [`encode_batch`] from its
/// records (as [`NewRecord`]s) and header fields, comes out byte for byte as it came in
/// from `attributes` on, the part its CRC-32C covers; if so [`ExactReencoding::crc`] is
/// that CRC, which [`encode_batch_with_crc`] can then write instead of computing it.
///
/// It does when the batch is uncompressed, CreateTime and not a control batch, has no
/// attribute bit but the transactional one, numbers its records 0, 1, 2, ... with
/// record attributes 0, states the largest record timestamp as `maxTimestamp`, and writes
/// every varint in its shortest form. The last is checked by size: the same values in
/// any longer form take more bytes, so the records section is exact when it is as long as
/// the shortest forms add up to. Feed every record, in order, to
/// [`ExactReencoding::record`].
#[derive(Clone, Debug)]
pub struct ExactReencoding {
    crc: u32,
    base_timestamp: i64,
    max_timestamp: i64,
    record_count: i32,
    section_len: usize,
    records: i32,
    size: usize,
    largest: Option<i64>,
    exact: bool,
}

/// What [`ExactReencoding`] reads of one record; `headers` gives the headers' shortest
/// length, computed only when the other fields leave the batch exact.
struct Taken<H> {
    timestamp: i64,
    offset_delta: i32,
    timestamp_delta: i64,
    attributes: i8,
    control: bool,
    key: Option<usize>,
    value: Option<usize>,
    header_count: usize,
    headers: H,
}

impl ExactReencoding {
    /// Starts the check with the header of `batch`.
    pub fn new(batch: &crate::RecordBatch) -> Self {
        let h = batch.header();
        let exact = batch.compression() == Compression::None
            && h.attributes.0 & !Attributes::TRANSACTIONAL == 0
            && h.record_count >= 1
            && h.last_offset_delta == h.record_count - 1;
        Self {
            crc: h.crc,
            base_timestamp: h.base_timestamp,
            max_timestamp: h.max_timestamp,
            record_count: h.record_count,
            section_len: batch.encoded_len().saturating_sub(BATCH_HEADER_LEN),
            records: 0,
            size: 0,
            largest: None,
            exact,
        }
    }

    /// Takes the next record of the batch.
    pub fn record(&mut self, record: &Record) {
        if self.exact {
            self.take(Taken {
                timestamp: record.timestamp,
                offset_delta: record.offset_delta,
                timestamp_delta: record.timestamp_delta,
                attributes: record.attributes,
                control: record.control.is_some(),
                key: record.key.as_ref().map(Bytes::len),
                value: record.value.as_ref().map(Bytes::len),
                header_count: record.headers.len(),
                headers: || record.headers.shortest_len(),
            });
        }
    }

    /// Takes the next record of the batch, read in place: the same check as
    /// [`ExactReencoding::record`].
    pub fn record_ref(&mut self, record: &RecordRef<'_>) {
        if self.exact {
            self.take(Taken {
                timestamp: record.timestamp,
                offset_delta: record.offset_delta,
                timestamp_delta: record.timestamp_delta,
                attributes: record.attributes,
                control: record.control.is_some(),
                key: record.key.map(<[u8]>::len),
                value: record.value.map(<[u8]>::len),
                header_count: record.header_count,
                headers: || shortest_headers_len(record.raw_headers, record.header_count),
            });
        }
    }

    fn take(&mut self, r: Taken<impl FnOnce() -> Option<usize>>) {
        let index = self.records;
        self.records = self.records.saturating_add(1);
        let delta = r.timestamp.wrapping_sub(self.base_timestamp);
        if r.attributes != 0 || r.offset_delta != index || delta != r.timestamp_delta || r.control {
            self.exact = false;
            return;
        }
        let len = (r.headers)().and_then(|headers| {
            let body = fields_len(delta, index, r.key, r.value, r.header_count, headers).ok()?;
            Some(varint_len(len_i32("record", body).ok()?) + body)
        });
        match len {
            Some(len) => self.size = self.size.saturating_add(len),
            None => self.exact = false,
        }
        self.largest = Some(self.largest.map_or(r.timestamp, |t| t.max(r.timestamp)));
    }

    /// The batch's CRC when every record was taken and the batch re-encodes exactly.
    pub fn crc(&self) -> Option<u32> {
        (self.exact
            && self.records == self.record_count
            && self.size == self.section_len
            && self.largest == Some(self.max_timestamp))
        .then_some(self.crc)
    }
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
    fn batch_writer_refuses_a_codec_and_stops_after_a_failure() {
        let mut out = BytesMut::from(&b"keep"[..]);
        let gzip = BatchOptions {
            compression: Compression::Gzip,
            ..BatchOptions::default()
        };
        assert!(matches!(
            BatchWriter::new(&gzip, &mut out),
            Err(RecordsError::Unwritable(_))
        ));
        assert_eq!(&out[..], b"keep");
        let mut writer = BatchWriter::new(&BatchOptions::default(), &mut out).unwrap();
        writer
            .record(1, None, Some(b"v"), std::iter::empty())
            .unwrap();
        // A key past i32 cannot be written: the batch is cut back. (Zeroed memory the
        // size check never touches.)
        let huge = vec![0u8; i32::MAX as usize + 1];
        assert!(
            writer
                .record(2, Some(&huge), None, std::iter::empty())
                .is_err()
        );
        assert!(writer.record(3, None, None, std::iter::empty()).is_err());
        assert!(writer.finish(None).is_err());
        assert_eq!(&out[..], b"keep");
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

    fn exact_crc(bytes: &Bytes) -> Option<u32> {
        let batch = RecordBatch::decode(bytes, &DecodeLimits::default()).unwrap();
        let mut exact = ExactReencoding::new(&batch);
        for record in batch.records().unwrap() {
            exact.record(&record.unwrap());
        }
        // Records read in place give the same answer.
        let section = batch.records_section().unwrap();
        let mut in_place = ExactReencoding::new(&batch);
        for record in batch.record_refs_in(&section) {
            in_place.record_ref(&record.unwrap());
        }
        assert_eq!(exact.crc(), in_place.crc());
        exact.crc()
    }

    /// Rewrites `batchLength` and the CRC after the bytes were edited.
    fn reframe(bytes: &mut [u8]) {
        let len = i32::try_from(bytes.len() - 12).unwrap();
        bytes[8..12].copy_from_slice(&len.to_be_bytes());
        let crc = crc32c::crc32c(&bytes[21..]);
        bytes[17..21].copy_from_slice(&crc.to_be_bytes());
    }

    fn one_record(key: &[u8], value: &[u8]) -> BytesMut {
        let record = NewRecord {
            timestamp: 1_700_000_000_000,
            key: Some(Bytes::copy_from_slice(key)),
            value: Some(Bytes::copy_from_slice(value)),
            headers: Vec::new(),
        };
        let mut out = BytesMut::new();
        encode_batch(&BatchOptions::default(), &[record], &mut out).unwrap();
        out
    }

    #[test]
    fn producer_batches_re_encode_exactly_and_keep_their_crc() {
        let big = Bytes::from(vec![7u8; 300]);
        let records = vec![
            NewRecord {
                timestamp: 1_700_000_000_500,
                key: None,
                value: Some(big.clone()),
                headers: vec![Header::new("trace", Some(Bytes::from_static(b"abc")))],
            },
            NewRecord {
                // Before the base timestamp: a negative delta.
                timestamp: 1_699_999_999_000,
                key: Some(big.clone()),
                value: Some(Bytes::new()),
                headers: vec![Header::new("n", None), Header::new("n", Some(big.clone()))],
            },
            NewRecord {
                timestamp: 1_700_000_000_000,
                key: Some(Bytes::from_static(b"k")),
                value: None,
                headers: Vec::new(),
            },
        ];
        let options = BatchOptions {
            transactional: true,
            producer_id: 42,
            producer_epoch: 3,
            base_sequence: 77,
            base_timestamp: Some(1_700_000_000_000),
            ..BatchOptions::default()
        };
        let mut out = BytesMut::new();
        encode_batch(&options, &records, &mut out).unwrap();
        let original = out.freeze();
        let crc = exact_crc(&original).expect("a batch encode_batch wrote is exact");

        // Decoded and written again with the known CRC: the same bytes.
        let batch = RecordBatch::decode(&original, &DecodeLimits::default()).unwrap();
        assert_eq!(crc, batch.header().crc);
        let decoded: Vec<NewRecord> = batch
            .records()
            .unwrap()
            .map(|r| NewRecord::from(r.unwrap()))
            .collect();
        let mut again = BytesMut::new();
        encode_batch_with_crc(&options, &decoded, crc, &mut again).unwrap();
        assert_eq!(&again[..], &original[..]);
    }

    #[test]
    fn anything_encode_batch_would_write_differently_is_not_exact() {
        let canonical = one_record(b"k", b"v").freeze();
        assert!(exact_crc(&canonical).is_some());
        // Records section: length 8, attributes, ts delta, offset delta, key, value, 0.
        assert_eq!(
            &canonical[61..],
            &[0x10, 0, 0, 0, 0x02, b'k', 0x02, b'v', 0][..]
        );

        // The key length in two bytes instead of one (0x82 0x00 also reads as 1).
        let mut longer = BytesMut::from(&canonical[..61]);
        longer.extend_from_slice(&[0x12, 0, 0, 0, 0x82, 0x00, b'k', 0x02, b'v', 0]);
        reframe(&mut longer);
        let longer = longer.freeze();
        let batch = RecordBatch::decode(&longer, &DecodeLimits::default()).unwrap();
        let record = batch.records().unwrap().next().unwrap().unwrap();
        assert_eq!(record.key.as_deref(), Some(&b"k"[..]));
        assert_eq!(exact_crc(&longer), None);

        // A header name length in two bytes.
        let with_header = NewRecord {
            timestamp: 1_700_000_000_000,
            key: Some(Bytes::from_static(b"k")),
            value: Some(Bytes::from_static(b"v")),
            headers: vec![Header::new("h", Some(Bytes::from_static(b"x")))],
        };
        let mut out = BytesMut::new();
        encode_batch(&BatchOptions::default(), &[with_header], &mut out).unwrap();
        let shortest = [
            0x18, 0, 0, 0, 0x02, b'k', 0x02, b'v', 0x02, 0x02, b'h', 0x02, b'x',
        ];
        assert_eq!(&out[61..], &shortest[..]);
        assert!(exact_crc(&out.clone().freeze()).is_some());
        let mut header = BytesMut::from(&out[..61]);
        header.extend_from_slice(&[
            0x1a, 0, 0, 0, 0x02, b'k', 0x02, b'v', 0x02, 0x82, 0x00, b'h', 0x02, b'x',
        ]);
        reframe(&mut header);
        assert_eq!(exact_crc(&header.freeze()), None);

        // A record attribute bit.
        let mut attrs = BytesMut::from(&canonical[..]);
        attrs[62] = 1;
        reframe(&mut attrs);
        assert_eq!(exact_crc(&attrs.freeze()), None);

        // An offset delta that skips.
        let mut skip = BytesMut::from(&canonical[..]);
        skip[64] = 0x02;
        skip[23..27].copy_from_slice(&1i32.to_be_bytes()); // lastOffsetDelta
        reframe(&mut skip);
        assert_eq!(exact_crc(&skip.freeze()), None);

        // maxTimestamp other than the largest record timestamp.
        let mut max = BytesMut::from(&canonical[..]);
        max[35..43].copy_from_slice(&0i64.to_be_bytes());
        reframe(&mut max);
        assert_eq!(exact_crc(&max.freeze()), None);

        // LogAppendTime, and an attribute bit encode_batch never writes.
        for bits in [Attributes::LOG_APPEND_TIME, 0x40] {
            let mut attributes = BytesMut::from(&canonical[..]);
            attributes[21..23].copy_from_slice(&bits.to_be_bytes());
            reframe(&mut attributes);
            assert_eq!(exact_crc(&attributes.freeze()), None, "{bits:#x}");
        }
    }

    #[cfg(feature = "gzip")]
    #[test]
    fn compressed_batches_are_not_exact() {
        let options = BatchOptions {
            compression: Compression::Gzip,
            ..BatchOptions::default()
        };
        let mut out = BytesMut::new();
        encode_batch(&options, &[NewRecord::default()], &mut out).unwrap();
        assert_eq!(exact_crc(&out.freeze()), None);
    }

    /// Records inside other values encode as the same records in a vector would, with
    /// or without a given CRC.
    #[test]
    fn wrapped_records_encode_as_plain_ones() {
        struct Wrapped(u64, NewRecord);
        impl AsRef<NewRecord> for Wrapped {
            fn as_ref(&self) -> &NewRecord {
                &self.1
            }
        }
        let records: Vec<NewRecord> = (0..5i64)
            .map(|i| NewRecord {
                timestamp: 1_000 + i * 7 - 20 * (i % 2),
                key: (i % 2 == 0).then(|| Bytes::from(vec![b'k'; i as usize])),
                value: (i != 3).then(|| Bytes::from(vec![b'v'; 100 * i as usize])),
                headers: vec![Header::new(Bytes::from_static(b"h"), None)],
            })
            .collect();
        let wrapped: Vec<Wrapped> = records
            .iter()
            .enumerate()
            .map(|(i, r)| Wrapped(i as u64, r.clone()))
            .collect();
        assert_eq!(wrapped[4].0, 4);
        for compression in [Compression::None, Compression::Gzip] {
            let options = BatchOptions {
                base_offset: 42,
                compression,
                ..BatchOptions::default()
            };
            let (mut plain, mut of) = (BytesMut::from(&b"x"[..]), BytesMut::from(&b"x"[..]));
            encode_batch(&options, &records, &mut plain).unwrap();
            encode_batch_of(&options, &wrapped, None, &mut of).unwrap();
            assert_eq!(plain, of);
            let crc = u32::from_be_bytes(plain[18..22].try_into().unwrap());
            let (mut with, mut of) = (BytesMut::new(), BytesMut::new());
            encode_batch_with_crc(&options, &records, crc ^ 1, &mut with).unwrap();
            encode_batch_of(&options, &wrapped, Some(crc ^ 1), &mut of).unwrap();
            assert_eq!(with, of);
            assert_eq!(&with[17..21], &(crc ^ 1).to_be_bytes());
        }
    }
}
