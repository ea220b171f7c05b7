//! Records inside a batch: the lazy iterator over the (decompressed) records section, the
//! decoded [`Record`], its [`Headers`], and control markers.
//!
//! ```text
//! Record:
//!   length          varint   bytes after this field
//!   attributes      i8       unused, 0
//!   timestampDelta  varlong  against the batch's baseTimestamp
//!   offsetDelta     varint   against the batch's baseOffset
//!   keyLength       varint   -1 = null key
//!   key             bytes
//!   valueLength     varint   -1 = null value
//!   value           bytes
//!   headerCount     varint
//!   headers         [Header]
//!
//! Header:
//!   keyLength       varint   >= 0: header keys are never null
//!   key             bytes    a string; names may repeat
//!   valueLength     varint   -1 = null value
//!   value           bytes
//!
//! Control record key (control batches only):
//!   version         i16      0 today
//!   type            i16      0 = abort, 1 = commit, others are KRaft metadata
//! ```
//!
//! Every field is read inside the record's declared length, and the fields must use all
//! of it, as Kafka's `DefaultRecord.readFrom` requires.

use bytes::Bytes;

use crate::batch::{BatchHeader, TimestampType};
use crate::varint::{VarintError, read_varint, read_varlong, varint_len};
use crate::{RecordsError, Result};

/// One header of a record. Keys are strings in Kafka; they are kept as bytes here so
/// decoding never fails or copies on a key that is not UTF-8.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Header {
    /// Header name (Kafka treats it as UTF-8).
    pub key: Bytes,
    /// Header value; `None` is distinct from empty.
    pub value: Option<Bytes>,
}

impl Header {
    /// Builds a header.
    pub fn new(key: impl Into<Bytes>, value: Option<Bytes>) -> Self {
        Self {
            key: key.into(),
            value,
        }
    }

    /// The key as a string, if it is UTF-8.
    pub fn key_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.key).ok()
    }
}

/// The headers of a decoded record, validated but not yet split: iterating yields
/// [`Header`]s that slice the batch, in wire order, repeated names and null values kept.
#[derive(Clone, Default)]
pub struct Headers {
    raw: Bytes,
    count: usize,
}

impl Headers {
    /// Number of headers.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The headers in wire order.
    pub fn iter(&self) -> HeadersIter<'_> {
        HeadersIter {
            raw: &self.raw,
            pos: 0,
            left: self.count,
        }
    }

    /// The headers collected into a vector.
    pub fn to_vec(&self) -> Vec<Header> {
        self.iter().collect()
    }

    /// The bytes these headers take with every length in its shortest varint form, read
    /// from their lengths alone; `None` only if the validated bytes were not.
    pub(crate) fn shortest_len(&self) -> Option<usize> {
        shortest_headers_len(&self.raw, self.count)
    }
}

/// The bytes `count` headers written in `raw` take with every length in its shortest
/// varint form, read from their lengths alone; `None` if `raw` does not hold them.
pub(crate) fn shortest_headers_len(raw: &[u8], count: usize) -> Option<usize> {
    let mut pos = 0usize;
    let mut total = 0usize;
    for _ in 0..count {
        let key = read_varint(raw, &mut pos).ok()?;
        let key_len = usize::try_from(key).ok()?;
        pos = pos.checked_add(key_len)?;
        let value = read_varint(raw, &mut pos).ok()?;
        let value_len = usize::try_from(value).unwrap_or(0);
        pos = pos.checked_add(value_len)?;
        total = total
            .checked_add(varint_len(key) + key_len)?
            .checked_add(varint_len(value) + value_len)?;
    }
    (pos <= raw.len()).then_some(total)
}

impl std::fmt::Debug for Headers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl PartialEq for Headers {
    // Compares what the headers say, not how their varints happened to be written.
    fn eq(&self, other: &Self) -> bool {
        self.count == other.count && self.iter().eq(other.iter())
    }
}

impl Eq for Headers {}

impl<'a> IntoIterator for &'a Headers {
    type Item = Header;
    type IntoIter = HeadersIter<'a>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// Iterator over [`Headers`].
#[derive(Clone, Debug)]
pub struct HeadersIter<'a> {
    raw: &'a Bytes,
    pos: usize,
    left: usize,
}

impl Iterator for HeadersIter<'_> {
    type Item = Header;

    fn next(&mut self) -> Option<Header> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // The bytes were validated when the record was decoded; a failure here can only
        // mean a bug, and ending the iteration is the harmless answer to it.
        let mut pos = self.pos;
        let key_len = usize::try_from(read_varint(self.raw, &mut pos).ok()?).ok()?;
        let key_end = pos.checked_add(key_len).filter(|&e| e <= self.raw.len())?;
        let key = self.raw.slice(pos..key_end);
        pos = key_end;
        let value_len = read_varint(self.raw, &mut pos).ok()?;
        let value = if value_len < 0 {
            None
        } else {
            let end = pos
                .checked_add(value_len as usize)
                .filter(|&e| e <= self.raw.len())?;
            let v = self.raw.slice(pos..end);
            pos = end;
            Some(v)
        };
        self.pos = pos;
        Some(Header { key, value })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.left))
    }
}

/// Type of a control record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ControlRecordType {
    /// Transaction aborted (type 0).
    Abort,
    /// Transaction committed (type 1).
    Commit,
    /// Any other type (KRaft uses 2 and up for its own metadata).
    Other(i16),
}

impl ControlRecordType {
    /// The type id on the wire.
    pub fn id(self) -> i16 {
        match self {
            Self::Abort => 0,
            Self::Commit => 1,
            Self::Other(id) => id,
        }
    }

    /// The type for an id.
    pub fn from_id(id: i16) -> Self {
        match id {
            0 => Self::Abort,
            1 => Self::Commit,
            other => Self::Other(other),
        }
    }
}

/// The key of a record in a control batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ControlRecord {
    /// Key version; Kafka reads the type of any non-negative version.
    pub version: i16,
    /// Abort, commit or other.
    pub kind: ControlRecordType,
}

impl ControlRecord {
    /// Parses a control key the way Kafka's `ControlRecordType.parse` does: at least four
    /// bytes, non-negative version, extra bytes allowed for later versions.
    pub fn parse(key: &[u8]) -> Option<Self> {
        let [v0, v1, t0, t1, ..] = *key else {
            return None;
        };
        let version = i16::from_be_bytes([v0, v1]);
        if version < 0 {
            return None;
        }
        Some(Self {
            version,
            kind: ControlRecordType::from_id(i16::from_be_bytes([t0, t1])),
        })
    }

    /// The four key bytes of this control record.
    pub fn to_key(self) -> [u8; 4] {
        let [v0, v1] = self.version.to_be_bytes();
        let [t0, t1] = self.kind.id().to_be_bytes();
        [v0, v1, t0, t1]
    }
}

/// A decoded record. Keys, values and headers slice the batch (or its decompressed
/// records), so a record keeps that buffer alive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Absolute offset: `baseOffset + offsetDelta`.
    pub offset: i64,
    /// Absolute timestamp: `baseTimestamp + timestampDelta` under CreateTime, the batch's
    /// `maxTimestamp` under LogAppendTime (as Kafka consumers read it).
    pub timestamp: i64,
    /// Offset delta as on the wire.
    pub offset_delta: i32,
    /// Timestamp delta as on the wire.
    pub timestamp_delta: i64,
    /// Record attributes byte (unused by Kafka, kept as read).
    pub attributes: i8,
    /// Key; `None` (length -1) is distinct from empty.
    pub key: Option<Bytes>,
    /// Value; `None` (a tombstone) is distinct from empty.
    pub value: Option<Bytes>,
    /// Headers in wire order.
    pub headers: Headers,
    /// The parsed key, when the batch is a control batch.
    pub control: Option<ControlRecord>,
}

/// A record read in place: its fields borrow the records section, so walking every
/// record of a batch (to check it) costs no allocation and no reference count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordRef<'a> {
    /// Absolute timestamp, read as [`Record::timestamp`] is.
    pub timestamp: i64,
    /// Offset delta as on the wire.
    pub offset_delta: i32,
    /// Timestamp delta as on the wire.
    pub timestamp_delta: i64,
    /// Record attributes byte (unused by Kafka, kept as read).
    pub attributes: i8,
    /// Key; `None` (length -1) is distinct from empty.
    pub key: Option<&'a [u8]>,
    /// Value; `None` (a tombstone) is distinct from empty.
    pub value: Option<&'a [u8]>,
    /// Number of headers (each was read and bounds-checked).
    pub header_count: usize,
    /// The `header_count` headers as they are on the wire.
    pub raw_headers: &'a [u8],
    /// The parsed key, when the batch is a control batch.
    pub control: Option<ControlRecord>,
}

/// One record's fields as positions in the records section.
struct Parsed {
    end: usize,
    attributes: i8,
    timestamp_delta: i64,
    offset_delta: i32,
    key: Option<(usize, usize)>,
    value: Option<(usize, usize)>,
    header_count: usize,
    headers_start: usize,
    control: Option<ControlRecord>,
}

/// The walk over a records section shared by [`Records`] and [`RecordRefs`]: which
/// record is next, and the checks around the records (exactly `recordCount` of them,
/// nothing left over, nothing after the first error).
#[derive(Clone, Debug)]
struct Walk {
    pos: usize,
    read: usize,
    expected: i32,
    base_offset: i64,
    base_timestamp: i64,
    log_append_time: Option<i64>,
    control: bool,
    done: bool,
}

impl Walk {
    fn new(header: &BatchHeader) -> Self {
        let log_append_time = match header.attributes.timestamp_type() {
            TimestampType::LogAppendTime => Some(header.max_timestamp),
            TimestampType::CreateTime => None,
        };
        Self {
            pos: 0,
            read: 0,
            expected: header.record_count,
            base_offset: header.base_offset,
            base_timestamp: header.base_timestamp,
            log_append_time,
            control: header.attributes.is_control(),
            done: false,
        }
    }

    fn remaining(&self) -> usize {
        (self.expected.max(0) as usize).saturating_sub(self.read)
    }

    fn timestamp(&self, delta: i64) -> i64 {
        self.log_append_time
            .unwrap_or_else(|| self.base_timestamp.wrapping_add(delta))
    }

    /// The next record of `data`, or the error that ends the walk.
    #[inline(always)]
    fn next(&mut self, data: &[u8]) -> Option<Result<Parsed>> {
        if self.done {
            return None;
        }
        if self.remaining() == 0 {
            self.done = true;
            if self.pos < data.len() {
                return Some(Err(RecordsError::TrailingRecordBytes {
                    base_offset: self.base_offset,
                    expected: self.expected,
                    extra: data.len() - self.pos,
                }));
            }
            return None;
        }
        if self.pos >= data.len() {
            self.done = true;
            return Some(Err(RecordsError::RecordCountMismatch {
                base_offset: self.base_offset,
                expected: self.expected,
                found: self.read,
            }));
        }
        match parse(data, self.pos, self.control) {
            Ok(record) => {
                self.read += 1;
                self.pos = record.end;
                Some(Ok(record))
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// Reads the record starting at `data[start]`; every field inside its declared length.
#[inline(always)]
fn parse(data: &[u8], start: usize, control: bool) -> Result<Parsed> {
    let mut pos = start;
    let length = varint(data, &mut pos, "record length")?;
    let bad_length = || RecordsError::InvalidLength {
        what: "record length",
        found: i64::from(length),
        offset: start,
    };
    let body_len = usize::try_from(length).map_err(|_| bad_length())?;
    let body_start = pos;
    let end = body_start
        .checked_add(body_len)
        .filter(|&e| e <= data.len())
        .ok_or_else(bad_length)?;
    // Every read below stays inside the record.
    let body = &data[..end];

    let Some(&attributes) = body.get(pos) else {
        return Err(bad_length());
    };
    pos += 1;
    let timestamp_at = pos;
    let timestamp_delta = read_varlong(body, &mut pos)
        .map_err(|e| varint_error(e, "timestamp delta", timestamp_at))?;
    let offset_delta = varint(body, &mut pos, "offset delta")?;
    let key = nullable(body, &mut pos, "key length")?;
    let value = nullable(body, &mut pos, "value length")?;
    let header_count_at = pos;
    let header_count = varint(body, &mut pos, "header count")?;
    let header_count = usize::try_from(header_count).map_err(|_| RecordsError::InvalidLength {
        what: "header count",
        found: i64::from(header_count),
        offset: header_count_at,
    })?;
    let headers_start = pos;
    for _ in 0..header_count {
        let at = pos;
        let key_len = varint(body, &mut pos, "header key length")?;
        if key_len < 0 {
            return Err(RecordsError::InvalidLength {
                what: "header key length",
                found: i64::from(key_len),
                offset: at,
            });
        }
        skip(
            body,
            &mut pos,
            key_len as usize,
            "header key length",
            key_len,
            at,
        )?;
        nullable(body, &mut pos, "header value length")?;
    }
    if pos != end {
        return Err(RecordsError::RecordSizeMismatch {
            offset: start,
            expected: body_len,
            found: pos - body_start,
        });
    }
    let control = if control {
        let parsed = key.and_then(|(s, e)| ControlRecord::parse(&data[s..e]));
        if parsed.is_none() {
            return Err(RecordsError::InvalidControlRecord {
                offset: start,
                reason: "key is not a version i16 >= 0 and a type i16",
            });
        }
        parsed
    } else {
        None
    };
    Ok(Parsed {
        end,
        attributes: attributes as i8,
        timestamp_delta,
        offset_delta,
        key,
        value,
        header_count,
        headers_start,
        control,
    })
}

/// Lazy iterator over the records of a batch, from [`crate::RecordBatch::records`].
///
/// Yields exactly `recordCount` records, then checks that nothing is left over. After the
/// first error it yields nothing more.
#[derive(Clone, Debug)]
pub struct Records {
    data: Bytes,
    walk: Walk,
}

impl Records {
    pub(crate) fn new(data: Bytes, header: &BatchHeader) -> Self {
        Self {
            data,
            walk: Walk::new(header),
        }
    }

    /// Size of the (decompressed) records section.
    pub fn section_len(&self) -> usize {
        self.data.len()
    }

    /// Records not yet yielded, per `recordCount`.
    pub fn remaining(&self) -> usize {
        self.walk.remaining()
    }
}

fn varint_error(_e: VarintError, what: &'static str, offset: usize) -> RecordsError {
    RecordsError::InvalidVarint { what, offset }
}

#[inline(always)]
fn varint(body: &[u8], pos: &mut usize, what: &'static str) -> Result<i32> {
    let at = *pos;
    read_varint(body, pos).map_err(|e| varint_error(e, what, at))
}

#[inline(always)]
fn skip(
    body: &[u8],
    pos: &mut usize,
    len: usize,
    what: &'static str,
    found: i32,
    at: usize,
) -> Result<(usize, usize)> {
    let start = *pos;
    let end =
        start
            .checked_add(len)
            .filter(|&e| e <= body.len())
            .ok_or(RecordsError::InvalidLength {
                what,
                found: i64::from(found),
                offset: at,
            })?;
    *pos = end;
    Ok((start, end))
}

/// Reads a nullable byte field, returning its range, or `None` for length -1.
#[inline(always)]
fn nullable(body: &[u8], pos: &mut usize, what: &'static str) -> Result<Option<(usize, usize)>> {
    let at = *pos;
    let len = varint(body, pos, what)?;
    match len {
        -1 => Ok(None),
        len if len < -1 => Err(RecordsError::InvalidLength {
            what,
            found: i64::from(len),
            offset: at,
        }),
        len => skip(body, pos, len as usize, what, len, at).map(Some),
    }
}

impl Iterator for Records {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Self::Item> {
        let p = match self.walk.next(&self.data)? {
            Ok(p) => p,
            Err(e) => return Some(Err(e)),
        };
        let key = p.key.map(|(s, e)| self.data.slice(s..e));
        let value = p.value.map(|(s, e)| self.data.slice(s..e));
        let headers = if p.header_count == 0 {
            Headers::default()
        } else {
            Headers {
                raw: self.data.slice(p.headers_start..p.end),
                count: p.header_count,
            }
        };
        Some(Ok(Record {
            offset: self
                .walk
                .base_offset
                .wrapping_add(i64::from(p.offset_delta)),
            timestamp: self.walk.timestamp(p.timestamp_delta),
            offset_delta: p.offset_delta,
            timestamp_delta: p.timestamp_delta,
            attributes: p.attributes,
            key,
            value,
            headers,
            control: p.control,
        }))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        // One more for a possible trailing-bytes error.
        (0, Some(self.remaining().saturating_add(1)))
    }
}

impl std::iter::FusedIterator for Records {}

/// Iterator over the records of a batch read in place ([`RecordRef`]), from
/// [`crate::RecordBatch::record_refs_in`]: the same records, checks and errors as
/// [`Records`], without a [`Bytes`] per field.
#[derive(Clone, Debug)]
pub struct RecordRefs<'a> {
    data: &'a [u8],
    walk: Walk,
}

impl<'a> RecordRefs<'a> {
    pub(crate) fn new(data: &'a [u8], header: &BatchHeader) -> Self {
        Self {
            data,
            walk: Walk::new(header),
        }
    }
}

impl<'a> Iterator for RecordRefs<'a> {
    type Item = Result<RecordRef<'a>>;

    #[inline(always)]
    fn next(&mut self) -> Option<Self::Item> {
        let data = self.data;
        let p = match self.walk.next(data)? {
            Ok(p) => p,
            Err(e) => return Some(Err(e)),
        };
        Some(Ok(RecordRef {
            timestamp: self.walk.timestamp(p.timestamp_delta),
            offset_delta: p.offset_delta,
            timestamp_delta: p.timestamp_delta,
            attributes: p.attributes,
            key: p.key.map(|(s, e)| &data[s..e]),
            value: p.value.map(|(s, e)| &data[s..e]),
            header_count: p.header_count,
            raw_headers: &data[p.headers_start..p.end],
            control: p.control,
        }))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.walk.remaining().saturating_add(1)))
    }
}

impl std::iter::FusedIterator for RecordRefs<'_> {}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use kafka_protocol::ErrorCode;

    use super::*;
    use crate::{BatchOptions, DecodeLimits, NewRecord, RecordBatch, encode_batch};

    fn decode_all(bytes: Bytes) -> Result<Vec<Record>> {
        let batch = RecordBatch::decode(&bytes, &DecodeLimits::default())?;
        batch.records()?.collect()
    }

    #[test]
    fn null_and_empty_are_distinct_and_headers_keep_order() {
        let records = vec![
            NewRecord {
                timestamp: 10,
                key: None,
                value: Some(Bytes::new()),
                headers: vec![
                    Header::new("a", Some(Bytes::from_static(b"1"))),
                    Header::new("a", None),
                    Header::new("b", Some(Bytes::new())),
                ],
            },
            NewRecord {
                timestamp: 5,
                key: Some(Bytes::new()),
                value: None,
                headers: vec![],
            },
        ];
        let mut out = BytesMut::new();
        encode_batch(&BatchOptions::default(), &records, &mut out).unwrap();
        let decoded = decode_all(out.freeze()).unwrap();
        assert_eq!(decoded.len(), 2);
        assert_eq!(decoded[0].key, None);
        assert_eq!(decoded[0].value, Some(Bytes::new()));
        assert_eq!(decoded[0].headers.to_vec(), records[0].headers);
        assert_eq!(
            decoded[0].headers.iter().next().unwrap().key_str(),
            Some("a")
        );
        assert_eq!(decoded[1].key, Some(Bytes::new()));
        assert_eq!(decoded[1].value, None);
        assert!(decoded[1].headers.is_empty());
        assert_eq!(decoded[1].timestamp, 5);
        assert_eq!(decoded[1].timestamp_delta, -5);
        assert_eq!(decoded[1].offset_delta, 1);
    }

    #[test]
    fn uncompressed_values_slice_the_input() {
        let records = vec![NewRecord {
            timestamp: 0,
            key: None,
            value: Some(Bytes::from(vec![7u8; 100])),
            headers: vec![],
        }];
        let mut out = BytesMut::new();
        encode_batch(&BatchOptions::default(), &records, &mut out).unwrap();
        let input = out.freeze();
        let record = decode_all(input.clone()).unwrap().remove(0);
        let value = record.value.unwrap();
        let range = input.as_ptr_range();
        assert!(
            range.contains(&value.as_ptr()),
            "value must point into the input"
        );
    }

    #[test]
    fn control_records_are_recognized() {
        let options = BatchOptions {
            control: true,
            transactional: true,
            producer_id: 4,
            ..BatchOptions::default()
        };
        let markers = [ControlRecordType::Abort, ControlRecordType::Commit];
        let records: Vec<NewRecord> = markers
            .iter()
            .map(|&kind| NewRecord {
                timestamp: 1,
                key: Some(Bytes::copy_from_slice(
                    &ControlRecord { version: 0, kind }.to_key(),
                )),
                // EndTransactionMarker value: version 0, coordinator epoch 3.
                value: Some(Bytes::from_static(&[0, 0, 0, 0, 0, 3])),
                headers: vec![],
            })
            .collect();
        let mut out = BytesMut::new();
        encode_batch(&options, &records, &mut out).unwrap();
        let batch = RecordBatch::decode(&out.freeze(), &DecodeLimits::default()).unwrap();
        assert!(batch.is_control());
        let kinds: Vec<_> = batch
            .records()
            .unwrap()
            .map(|r| r.unwrap().control.unwrap().kind)
            .collect();
        assert_eq!(kinds, markers);
    }

    #[test]
    fn control_batch_with_a_bad_key_is_invalid() {
        let options = BatchOptions {
            control: true,
            ..BatchOptions::default()
        };
        for key in [
            None,
            Some(Bytes::from_static(&[0, 0, 0])),
            Some(Bytes::from_static(&[0xff, 0xff, 0, 1])),
        ] {
            let mut out = BytesMut::new();
            let record = NewRecord {
                key,
                ..NewRecord::default()
            };
            encode_batch(&options, &[record], &mut out).unwrap();
            let err = decode_all(out.freeze()).unwrap_err();
            assert!(
                matches!(err, RecordsError::InvalidControlRecord { .. }),
                "{err}"
            );
        }
        assert_eq!(
            ControlRecord::parse(&[0, 1, 0, 1, 9, 9]),
            Some(ControlRecord {
                version: 1,
                kind: ControlRecordType::Commit
            })
        );
        assert_eq!(ControlRecordType::from_id(3), ControlRecordType::Other(3));
    }

    /// Builds an uncompressed batch around hand-written record bytes.
    fn batch_with(records_section: &[u8], count: i32) -> Bytes {
        let mut out = BytesMut::new();
        encode_batch(&BatchOptions::default(), &[], &mut out).unwrap();
        out.extend_from_slice(records_section);
        let len = (out.len() - 12) as i32;
        out[8..12].copy_from_slice(&len.to_be_bytes());
        out[57..61].copy_from_slice(&count.to_be_bytes());
        let crc = crc32c::crc32c(&out[21..]);
        out[17..21].copy_from_slice(&crc.to_be_bytes());
        out.freeze()
    }

    #[test]
    fn malformed_records_are_invalid_record() {
        // length 7: attrs 0, ts 0, offset 0, key -1, value -1, headers 0 ... valid is 6 bytes.
        let valid = [0x0c, 0, 0, 0, 0x01, 0x01, 0];
        assert!(decode_all(batch_with(&valid, 1)).is_ok());
        let cases: &[(&[u8], i32, &str)] = &[
            // Declared length one byte longer than the fields.
            (&[0x0e, 0, 0, 0, 0x01, 0x01, 0, 0], 1, "size mismatch"),
            // Negative record length.
            (&[0x01, 0, 0, 0, 0x01, 0x01, 0], 1, "negative length"),
            // Key length -2.
            (&[0x0c, 0, 0, 0, 0x03, 0x01, 0], 1, "key -2"),
            // Key length runs past the record.
            (&[0x0c, 0, 0, 0, 0x10, 0x01, 0], 1, "key too long"),
            // Negative header count.
            (&[0x0c, 0, 0, 0, 0x01, 0x01, 0x01], 1, "header count -1"),
            // Header key length -1 (null header key).
            (
                &[0x10, 0, 0, 0, 0x01, 0x01, 0x02, 0x01, 0x01],
                1,
                "null header key",
            ),
            // Varint with six continuation bytes.
            (
                &[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00],
                1,
                "long varint",
            ),
            // Two records declared, one present.
            (&valid, 2, "count mismatch"),
        ];
        for &(section, count, name) in cases {
            let result = decode_all(batch_with(section, count));
            let err = result.expect_err(name);
            assert_eq!(
                err.kafka_error_code(),
                ErrorCode::INVALID_RECORD,
                "{name}: {err}"
            );
        }
        // Zero records declared, bytes present.
        let mut records = RecordBatch::decode(&batch_with(&valid, 0), &DecodeLimits::default())
            .unwrap()
            .records()
            .unwrap();
        assert!(matches!(
            records.next(),
            Some(Err(RecordsError::TrailingRecordBytes { extra: 7, .. }))
        ));
        assert!(records.next().is_none());
    }
}
