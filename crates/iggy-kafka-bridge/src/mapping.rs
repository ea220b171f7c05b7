//! Kafka record <-> Iggy message mapping. Pure: no I/O, no SDK client.
//!
//! One Kafka record is one Iggy message, so a Kafka offset is the Iggy offset. The Kafka
//! value is the Iggy payload and the key and headers are Iggy user headers whenever that
//! is lossless ("native" form); otherwise the payload is an envelope that holds the
//! record whole ("envelope" form). Every message written by the bridge also carries the
//! framing needed to rebuild the producer's batch on read.
//!
//! User headers of a message written by the bridge:
//!
//! ```text
//! kafka.record     Raw     framing, always present (layout below)
//! kafka.timestamp  Int64   the Kafka record timestamp in ms, always present
//! kafka.key        Raw     the Kafka key (native form, non-null key only)
//! kafka.txn        Int64   the producer id, on every record of a transactional batch
//!                          (commit and abort markers included)
//! kafka.marker     Raw     `commit` or `abort`, on a transaction marker (the one record
//!                          of a control batch; its payload is the 6-byte marker value,
//!                          its key the 4-byte marker key)
//! <header name>    Raw     one per Kafka header (native form only)
//!
//! kafka.record, big-endian:
//!   u8  version (1)
//!   u8  flags: 0x01 payload is an envelope, 0x02 first record of its batch,
//!              0x04 the batch re-encodes exactly (with 0x02 only)
//!   i32 offset delta of the record inside its batch
//!   -- only with flag 0x02, the producer's batch header fields --
//!   i16 attributes   i32 partition leader epoch   i64 base timestamp
//!   i64 producer id  i16 producer epoch           i32 base sequence
//!   i32 record count
//!   -- only with flag 0x04 --
//!   u32 the producer's CRC-32C, valid for the re-encoded batch (see
//!       kafka_records::ExactReencoding)
//!
//! envelope payload, big-endian (lengths -1 = null):
//!   i32 key length,   key bytes
//!   i32 value length, value bytes
//!   i32 header count
//!   per header: i32 name length, name bytes, i32 value length, value bytes
//! ```
//!
//! Native form is used when all of these hold (Iggy limits: payloads are non-empty,
//! header values are 1..=255 bytes, user headers are a map sorted by name): the value is
//! non-null and non-empty; the key is null or 1..=255 bytes; every header name is UTF-8,
//! 1..=255 bytes, does not start with `kafka.`, and the names are strictly increasing in
//! byte order (so the map's order is the producer's order and no name repeats); every
//! header value is 1..=255 bytes; and all user headers fit Iggy's 100 KB cap.
//!
//! `kafka.txn` and `kafka.marker` are for native Iggy consumers only (see
//! `docs/bridge.md`, "Transactions"): the batch attributes in `kafka.record` say the same
//! to the gateway, and reading ignores them like every other `kafka.` header.
//!
//! A message without `kafka.record` (sent by a native Iggy producer) reads as a one-record
//! batch: value = payload, key = `kafka.key` if present, timestamp = `kafka.timestamp` if
//! present else the producer's origin timestamp, headers = the other user headers in map
//! order with their raw value bytes.

use crate::convert;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use iggy::prelude::{HeaderKey, HeaderKind, HeaderValue, IggyMessage, IggyTimestamp};
use iggy_binary_protocol::WireEncode;
use iggy_binary_protocol::batch::{
    BATCH_HEADER_SIZE, BATCH_MESSAGE_HEADER_SIZE, BatchHeader, MAX_TIMESTAMP_DELTA_MICROS,
};
use iggy_binary_protocol::{WireIdentifier, WirePartitioning};
use iggy_common::{IggyError, IggyMessageHeader, MAX_PAYLOAD_SIZE, MAX_USER_HEADERS_SIZE};
use kafka_records::{
    Attributes, BatchOptions, Compression, ExactReencoding, Header, NewRecord, RecordBatch,
    RecordRef, RecordsError, TimestampType, encode_batch_of,
};
use std::collections::BTreeMap;
use std::hash::Hasher;
use std::str::FromStr;
use twox_hash::XxHash3_64;

/// User header holding the framing.
pub const RECORD_HEADER: &str = "kafka.record";
/// User header holding the Kafka timestamp (ms).
pub const TIMESTAMP_HEADER: &str = "kafka.timestamp";
/// User header holding the Kafka key in native form.
pub const KEY_HEADER: &str = "kafka.key";
/// User header holding the producer id of a transactional record (Int64).
pub const TXN_HEADER: &str = "kafka.txn";
/// User header naming the kind of a transaction marker: [`MARKER_COMMIT`] or
/// [`MARKER_ABORT`].
pub const MARKER_HEADER: &str = "kafka.marker";
/// `kafka.marker` of a commit marker.
pub const MARKER_COMMIT: &str = "commit";
/// `kafka.marker` of an abort marker.
pub const MARKER_ABORT: &str = "abort";
/// Header names with this prefix are reserved for the bridge; records using them go
/// into the envelope.
pub const RESERVED_PREFIX: &str = "kafka.";

const FORMAT_VERSION: u8 = 1;
const FLAG_ENVELOPE: u8 = 0x01;
const FLAG_FIRST: u8 = 0x02;
const FLAG_CRC: u8 = 0x04;
const MAX_HEADER_FIELD: usize = 255;
const FRAME_LEN: usize = 2 + 4;
const BATCH_FIELDS_LEN: usize = 2 + 4 + 8 + 8 + 2 + 4 + 4;
const CRC_LEN: usize = 4;
const MAX_FRAME_LEN: usize = FRAME_LEN + BATCH_FIELDS_LEN + CRC_LEN;

/// A message that cannot be read back as a Kafka record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MappingError {
    /// The `kafka.record` header is malformed or of an unknown version.
    #[error("bad kafka.record header: {0}")]
    BadFrame(String),
    /// The envelope payload is malformed.
    #[error("bad envelope: {0}")]
    BadEnvelope(String),
    /// Iggy refused to build the message (payload or headers over its limits).
    #[error("message not representable in iggy: {0}")]
    Unrepresentable(String),
    /// A batch's records section is malformed (a checked batch never is).
    #[error("bad records: {0}")]
    Records(String),
}

/// The producer's batch header fields, kept on the first record of each batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchFrame {
    /// `attributes` (codec, timestamp type, transactional and control bits).
    pub attributes: i16,
    /// `partitionLeaderEpoch`.
    pub partition_leader_epoch: i32,
    /// `baseTimestamp`.
    pub base_timestamp: i64,
    /// `producerId`.
    pub producer_id: i64,
    /// `producerEpoch`.
    pub producer_epoch: i16,
    /// `baseSequence`.
    pub base_sequence: i32,
    /// `recordCount`.
    pub record_count: i32,
    /// The producer's CRC-32C when re-encoding the whole batch gives back its bytes
    /// exactly (`kafka_records::ExactReencoding`), so a read need not compute it again.
    pub crc: Option<u32>,
}

impl BatchFrame {
    /// Batch options that re-encode a batch with these fields at `base_offset`.
    pub fn options(&self, base_offset: i64) -> Result<BatchOptions, RecordsError> {
        let attributes = Attributes(self.attributes);
        Ok(BatchOptions {
            base_offset,
            partition_leader_epoch: self.partition_leader_epoch,
            compression: attributes.compression()?,
            timestamp_type: attributes.timestamp_type(),
            transactional: attributes.is_transactional(),
            control: attributes.is_control(),
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
            base_sequence: self.base_sequence,
            base_timestamp: Some(self.base_timestamp),
        })
    }

    fn put(&self, out: &mut impl BufMut) {
        out.put_i16(self.attributes);
        out.put_i32(self.partition_leader_epoch);
        out.put_i64(self.base_timestamp);
        out.put_i64(self.producer_id);
        out.put_i16(self.producer_epoch);
        out.put_i32(self.base_sequence);
        out.put_i32(self.record_count);
    }

    fn get(mut b: &[u8]) -> Self {
        Self {
            attributes: b.get_i16(),
            partition_leader_epoch: b.get_i32(),
            base_timestamp: b.get_i64(),
            producer_id: b.get_i64(),
            producer_epoch: b.get_i16(),
            base_sequence: b.get_i32(),
            record_count: b.get_i32(),
            crc: None,
        }
    }
}

/// Transactional bit of batch attributes.
const ATTR_TRANSACTIONAL: i16 = 0x10;
/// Control bit of batch attributes.
const ATTR_CONTROL: i16 = 0x20;

impl BatchFrame {
    /// Whether the batch is part of a transaction.
    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }

    /// Whether the batch is a control batch (a transaction marker).
    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }
}

/// A commit or abort marker read from a control record: its key is an i16 version and
/// an i16 type (0 abort, 1 commit), its value an i16 version and the i32 coordinator
/// epoch. Other control record types, or malformed ones, are `None`.
pub fn control_marker(record: &NewRecord) -> Option<(bool, i32)> {
    let key = record.key.as_deref()?;
    let [_, _, t0, t1] = <[u8; 4]>::try_from(key.get(..4)?).ok()?;
    let commit = match i16::from_be_bytes([t0, t1]) {
        0 => false,
        1 => true,
        _ => return None,
    };
    let value = record.value.as_deref()?;
    let epoch = <[u8; 4]>::try_from(value.get(2..6)?).ok()?;
    Some((commit, i32::from_be_bytes(epoch)))
}

/// What a record says about its transaction, for native Iggy consumers: the
/// `kafka.txn` and `kafka.marker` headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnTag {
    /// The producer id of the transactional batch.
    pub producer_id: i64,
    /// On a marker: commit (`true`) or abort.
    pub marker: Option<bool>,
}

impl TxnTag {
    /// The tag of `record` in a batch with the fields of `frame`; `None` outside
    /// transactions.
    pub fn of(frame: &BatchFrame, record: &NewRecord) -> Option<TxnTag> {
        if !frame.is_transactional() {
            return None;
        }
        let marker = if frame.is_control() {
            control_marker(record).map(|(commit, _)| commit)
        } else {
            None
        };
        Some(TxnTag {
            producer_id: frame.producer_id,
            marker,
        })
    }

    fn marker_name(&self) -> Option<&'static str> {
        self.marker
            .map(|commit| if commit { MARKER_COMMIT } else { MARKER_ABORT })
    }
}

/// A Kafka record read back from one Iggy message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappedRecord {
    /// The Iggy (= Kafka) offset.
    pub offset: u64,
    /// The record.
    pub record: NewRecord,
    /// Offset delta inside its batch; `None` for a message from a native Iggy producer.
    pub offset_delta: Option<i32>,
    /// Batch header fields, on the first record of a batch only (boxed: records are
    /// moved and held in bulk on reads, and most carry none).
    pub batch: Option<Box<BatchFrame>>,
    /// Whether the message was stored in envelope form.
    pub envelope: bool,
    /// The producer id of its transaction (`kafka.txn`), on every record of a
    /// transactional batch.
    pub txn: Option<i64>,
}

fn key(name: &str) -> Result<HeaderKey, MappingError> {
    HeaderKey::from_str(name).map_err(|e| MappingError::Unrepresentable(e.to_string()))
}

#[cfg(test)]
fn raw_value(bytes: &[u8]) -> Result<HeaderValue, MappingError> {
    HeaderValue::try_from(bytes).map_err(|e| MappingError::Unrepresentable(e.to_string()))
}

fn fits(bytes: &[u8]) -> bool {
    (1..=MAX_HEADER_FIELD).contains(&bytes.len())
}

/// Whether `record` can be stored natively (see the module docs for the rules).
pub fn is_native(record: &NewRecord) -> bool {
    let value_ok = record.value.as_ref().is_some_and(|v| !v.is_empty());
    let key_ok = record.key.as_ref().is_none_or(|k| fits(k));
    let headers_ok = record.headers.iter().all(|h| {
        fits(&h.key)
            && !h.key.starts_with(RESERVED_PREFIX.as_bytes())
            && std::str::from_utf8(&h.key).is_ok()
            && h.value.as_ref().is_some_and(|v| fits(v))
    }) && record.headers.windows(2).all(|w| w[0].key < w[1].key);
    value_ok && key_ok && headers_ok
}

fn put_nullable(out: &mut BytesMut, field: Option<&[u8]>) -> Result<(), MappingError> {
    match field {
        None => out.put_i32(-1),
        Some(b) => {
            let len = i32::try_from(b.len())
                .map_err(|_| MappingError::Unrepresentable("field over 2 GiB".into()))?;
            out.put_i32(len);
            out.put_slice(b);
        }
    }
    Ok(())
}

/// The envelope payload of `record` (key, value and headers; see the module docs).
pub fn envelope(record: &NewRecord) -> Result<Bytes, MappingError> {
    let size = 12
        + record.key.as_ref().map_or(0, Bytes::len)
        + record.value.as_ref().map_or(0, Bytes::len)
        + record
            .headers
            .iter()
            .map(|h| 8 + h.key.len() + h.value.as_ref().map_or(0, Bytes::len))
            .sum::<usize>();
    let mut out = BytesMut::with_capacity(size);
    put_nullable(&mut out, record.key.as_deref())?;
    put_nullable(&mut out, record.value.as_deref())?;
    let count = i32::try_from(record.headers.len())
        .map_err(|_| MappingError::Unrepresentable("too many headers".into()))?;
    out.put_i32(count);
    for h in &record.headers {
        put_nullable(&mut out, Some(&h.key))?;
        put_nullable(&mut out, h.value.as_deref())?;
    }
    Ok(out.freeze())
}

fn get_nullable(payload: &Bytes, pos: &mut usize) -> Result<Option<Bytes>, MappingError> {
    let bad = |what: &str| MappingError::BadEnvelope(what.to_owned());
    let len_bytes = payload
        .get(*pos..*pos + 4)
        .ok_or_else(|| bad("truncated length"))?;
    let len = i32::from_be_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]);
    *pos += 4;
    if len == -1 {
        return Ok(None);
    }
    let len = usize::try_from(len).map_err(|_| bad("negative length"))?;
    let end = pos
        .checked_add(len)
        .filter(|end| *end <= payload.len())
        .ok_or_else(|| bad("length past the end"))?;
    let field = payload.slice(*pos..end);
    *pos = end;
    Ok(Some(field))
}

/// Key, value and headers of an envelope.
pub type EnvelopeParts = (Option<Bytes>, Option<Bytes>, Vec<Header>);

/// The record an envelope payload holds, with the timestamp from its headers.
fn envelope_record(payload: &Bytes, timestamp: i64) -> Result<NewRecord, MappingError> {
    let (key, value, headers) = parse_envelope(payload)?;
    Ok(NewRecord {
        timestamp,
        key,
        value,
        headers,
    })
}

/// Parses an envelope payload back into key, value and headers.
pub fn parse_envelope(payload: &Bytes) -> Result<EnvelopeParts, MappingError> {
    let mut pos = 0;
    let key = get_nullable(payload, &mut pos)?;
    let value = get_nullable(payload, &mut pos)?;
    let count_bytes = payload
        .get(pos..pos + 4)
        .ok_or_else(|| MappingError::BadEnvelope("truncated header count".into()))?;
    let count = i32::from_be_bytes([
        count_bytes[0],
        count_bytes[1],
        count_bytes[2],
        count_bytes[3],
    ]);
    pos += 4;
    let count = usize::try_from(count)
        .map_err(|_| MappingError::BadEnvelope("negative header count".into()))?;
    // Each header takes at least 8 bytes, so the count cannot make us allocate more
    // than the payload already occupies.
    if count > (payload.len() - pos) / 8 {
        return Err(MappingError::BadEnvelope(
            "header count past the end".into(),
        ));
    }
    let mut headers = Vec::with_capacity(count);
    for _ in 0..count {
        let name = get_nullable(payload, &mut pos)?
            .ok_or_else(|| MappingError::BadEnvelope("null header name".into()))?;
        let value = get_nullable(payload, &mut pos)?;
        headers.push(Header::new(name, value));
    }
    if pos != payload.len() {
        return Err(MappingError::BadEnvelope("trailing bytes".into()));
    }
    Ok((key, value, headers))
}

/// The Iggy message for one Kafka record: `offset_delta` is its position in the batch,
/// `batch` is given for the first record of the batch only.
pub fn to_message(
    record: &NewRecord,
    offset_delta: i32,
    batch: Option<&BatchFrame>,
) -> Result<IggyMessage, MappingError> {
    let txn = batch.and_then(|b| TxnTag::of(b, record));
    to_message_at(
        record,
        offset_delta,
        batch,
        txn.as_ref(),
        IggyTimestamp::now().as_micros(),
    )
}

/// [`to_message`] with the message's origin timestamp (microseconds) given, so a batch
/// reads the clock once, and the record's transaction tag (see [`TxnTag::of`]), which
/// every record of a transactional batch carries, not only the first.
///
/// The user headers are written straight in Iggy's wire form (what the SDK's builder
/// makes of the same header map, byte for byte; a test checks it), without building a
/// map per message.
pub fn to_message_at(
    record: &NewRecord,
    offset_delta: i32,
    batch: Option<&BatchFrame>,
    txn: Option<&TxnTag>,
    origin_micros: u64,
) -> Result<IggyMessage, MappingError> {
    if is_native(record) {
        match build_wire(record, offset_delta, batch, txn, true, origin_micros) {
            Ok(message) => return Ok(message),
            // Headers that pass the per-field rules can still exceed Iggy's total cap;
            // the envelope has no such cap short of the payload limit.
            Err(MappingError::Unrepresentable(_)) => {}
            Err(e) => return Err(e),
        }
    }
    build_wire(record, offset_delta, batch, txn, false, origin_micros)
}

/// Wire codes of Iggy header kinds (`HeaderKind::as_code`).
const KIND_RAW: u8 = 1;
const KIND_STRING: u8 = 2;
const KIND_INT64: u8 = 7;

/// One user header entry: String key, `kind` value.
fn put_entry(out: &mut impl BufMut, name: &[u8], kind: u8, value: &[u8]) {
    out.put_u8(KIND_STRING);
    out.put_u32_le(name.len() as u32);
    out.put_slice(name);
    out.put_u8(kind);
    out.put_u32_le(value.len() as u32);
    out.put_slice(value);
}

/// The bytes of a user header entry named `name` before its value's length: kind
/// String, the name's length and bytes, the value's kind. `N` is `6 + name.len()`.
const fn entry_head<const N: usize>(name: &str, kind: u8) -> [u8; N] {
    let name = name.as_bytes();
    assert!(N == 6 + name.len(), "an entry head is 6 bytes and the name");
    let mut out = [0u8; N];
    out[0] = KIND_STRING;
    let len = (name.len() as u32).to_le_bytes();
    let mut i = 0;
    while i < 4 {
        out[1 + i] = len[i];
        i += 1;
    }
    let mut i = 0;
    while i < name.len() {
        out[5 + i] = name[i];
        i += 1;
    }
    out[N - 1] = kind;
    out
}

/// [`entry_head`] of the entries every message the bridge writes may carry (both
/// writers use them: `put_plain` and `put_headers`).
const RECORD_ENTRY_HEAD: [u8; 6 + RECORD_HEADER.len()] = entry_head(RECORD_HEADER, KIND_RAW);
const TIMESTAMP_ENTRY_HEAD: [u8; 6 + TIMESTAMP_HEADER.len()] =
    entry_head(TIMESTAMP_HEADER, KIND_INT64);
const KEY_ENTRY_HEAD: [u8; 6 + KEY_HEADER.len()] = entry_head(KEY_HEADER, KIND_RAW);
const TXN_ENTRY_HEAD: [u8; 6 + TXN_HEADER.len()] = entry_head(TXN_HEADER, KIND_INT64);

/// One user header entry whose name and kind are `head` ([`entry_head`]): the same
/// bytes as [`put_entry`], the fixed part in one write.
#[inline]
fn put_known_entry(out: &mut impl BufMut, head: &[u8], value: &[u8]) {
    out.put_slice(head);
    out.put_u32_le(value.len() as u32);
    out.put_slice(value);
}

fn entry_len(name: &[u8], value: &[u8]) -> usize {
    10 + name.len() + value.len()
}

/// The `kafka.record` value: a buffer and how much of it is used.
fn frame(
    offset_delta: i32,
    batch: Option<&BatchFrame>,
    native: bool,
) -> ([u8; MAX_FRAME_LEN], usize) {
    let mut frame = [0u8; MAX_FRAME_LEN];
    let mut w = &mut frame[..];
    w.put_u8(FORMAT_VERSION);
    let mut flags = 0;
    if !native {
        flags |= FLAG_ENVELOPE;
    }
    if batch.is_some() {
        flags |= FLAG_FIRST;
    }
    let crc = batch.and_then(|b| b.crc);
    if crc.is_some() {
        flags |= FLAG_CRC;
    }
    w.put_u8(flags);
    w.put_i32(offset_delta);
    if let Some(batch) = batch {
        batch.put(&mut w);
    }
    if let Some(crc) = crc {
        w.put_u32(crc);
    }
    let len = FRAME_LEN + batch.map_or(0, |_| BATCH_FIELDS_LEN) + crc.map_or(0, |_| CRC_LEN);
    (frame, len)
}

fn build_wire(
    record: &NewRecord,
    offset_delta: i32,
    batch: Option<&BatchFrame>,
    txn: Option<&TxnTag>,
    native: bool,
    origin_micros: u64,
) -> Result<IggyMessage, MappingError> {
    let parts = WireParts::of(record, offset_delta, batch, txn, native)?;
    let mut headers = BytesMut::with_capacity(parts.headers_len as usize);
    parts.put_headers(&mut headers);
    let payload = match parts.envelope {
        Some(envelope) => envelope,
        None => record.value.clone().unwrap_or_default(),
    };
    Ok(IggyMessage {
        header: IggyMessageHeader {
            checksum: 0,
            id: 0,
            offset: 0,
            timestamp: 0,
            origin_timestamp: origin_micros,
            user_headers_length: parts.headers_len,
            payload_length: parts.payload_len,
            reserved: 0,
        },
        payload,
        user_headers: Some(headers.freeze()),
    })
}

/// One record as Iggy stores it, checked against Iggy's limits but not yet written:
/// the `kafka.record` frame, the other user header fields, their total size and the
/// payload. [`build_wire`] makes a message of it, [`put_message`] writes it straight
/// into a send.
struct WireParts<'a> {
    frame: [u8; MAX_FRAME_LEN],
    frame_len: usize,
    timestamp: [u8; 8],
    producer: Option<[u8; 8]>,
    marker: Option<&'static str>,
    key: Option<&'a [u8]>,
    user: &'a [Header],
    /// The producer headers that sort below the `kafka.` range.
    below: usize,
    headers_len: u32,
    /// The envelope payload; `None` in native form, where the payload is the value.
    envelope: Option<Bytes>,
    value: &'a [u8],
    payload_len: u32,
}

impl<'a> WireParts<'a> {
    fn of(
        record: &'a NewRecord,
        offset_delta: i32,
        batch: Option<&BatchFrame>,
        txn: Option<&TxnTag>,
        native: bool,
    ) -> Result<Self, MappingError> {
        let (frame, frame_len) = frame(offset_delta, batch, native);
        let timestamp = record.timestamp.to_le_bytes();
        let producer = txn.map(|t| t.producer_id.to_le_bytes());
        let marker = txn.and_then(TxnTag::marker_name);
        let key = record.key.as_deref().filter(|_| native);
        let user: &[Header] = if native { &record.headers } else { &[] };
        // Names beginning `kafka.` form one range in byte order and producer headers never
        // use it (`is_native`), so the map's order is: producer headers below the range,
        // the bridge's own (key < marker < record < timestamp < txn), the producer headers
        // above it.
        let below = user.partition_point(|h| h.key.as_ref() < RESERVED_PREFIX.as_bytes());
        let size = user
            .iter()
            .map(|h| entry_len(&h.key, h.value.as_deref().unwrap_or_default()))
            .sum::<usize>()
            + key.map_or(0, |k| entry_len(KEY_HEADER.as_bytes(), k))
            + entry_len(RECORD_HEADER.as_bytes(), &frame[..frame_len])
            + entry_len(TIMESTAMP_HEADER.as_bytes(), &timestamp)
            + producer.map_or(0, |p| entry_len(TXN_HEADER.as_bytes(), &p))
            + marker.map_or(0, |m| entry_len(MARKER_HEADER.as_bytes(), m.as_bytes()));
        let headers_len = u32::try_from(size)
            .ok()
            .filter(|n| *n <= MAX_USER_HEADERS_SIZE)
            .ok_or_else(|| {
                MappingError::Unrepresentable(format!(
                    "{size} bytes of user headers (Iggy's cap is {MAX_USER_HEADERS_SIZE})"
                ))
            })?;
        let (envelope, value) = if native {
            (None, record.value.as_deref().unwrap_or_default())
        } else {
            (Some(envelope(record)?), &[][..])
        };
        let len = envelope.as_ref().map_or(value.len(), Bytes::len);
        let payload_len = u32::try_from(len)
            .ok()
            .filter(|n| (1..=MAX_PAYLOAD_SIZE).contains(n))
            .ok_or_else(|| {
                MappingError::Unrepresentable(format!(
                    "a payload of {len} bytes (Iggy takes 1 to {MAX_PAYLOAD_SIZE})"
                ))
            })?;
        Ok(Self {
            frame,
            frame_len,
            timestamp,
            producer,
            marker,
            key,
            user,
            below,
            headers_len,
            envelope,
            value,
            payload_len,
        })
    }

    fn payload(&self) -> &[u8] {
        self.envelope.as_deref().unwrap_or(self.value)
    }

    /// Writes the user headers in Iggy's wire form (`headers_len` bytes).
    fn put_headers(&self, out: &mut BytesMut) {
        let put_user = |out: &mut BytesMut, hs: &[Header]| {
            for h in hs {
                put_entry(
                    out,
                    &h.key,
                    KIND_RAW,
                    h.value.as_deref().unwrap_or_default(),
                );
            }
        };
        put_user(out, &self.user[..self.below]);
        if let Some(k) = self.key {
            put_known_entry(out, &KEY_ENTRY_HEAD, k);
        }
        if let Some(m) = self.marker {
            put_entry(out, MARKER_HEADER.as_bytes(), KIND_RAW, m.as_bytes());
        }
        put_known_entry(out, &RECORD_ENTRY_HEAD, &self.frame[..self.frame_len]);
        put_known_entry(out, &TIMESTAMP_ENTRY_HEAD, &self.timestamp);
        if let Some(p) = &self.producer {
            put_known_entry(out, &TXN_ENTRY_HEAD, p);
        }
        put_user(out, &self.user[self.below..]);
    }
}

/// Where a message's fields sit in its header on Iggy's wire (all little-endian):
/// checksum u64, id u128, offset delta u32, timestamp delta u32, user header length
/// u32, payload length u32, reserved u64; the payload and the user headers follow.
const AT_ID: usize = 8;
const AT_OFFSET_DELTA: usize = 24;
const AT_TIMESTAMP_DELTA: usize = 28;
const AT_HEADERS_LEN: usize = 32;
const AT_PAYLOAD_LEN: usize = 36;

/// The messages of one append written as Iggy takes them in a send, one after the
/// other in one buffer: the values and keys of the produced batch are copied once,
/// straight to where the request carries them, with no message object, header buffer
/// or reference count per record.
///
/// What depends on the send an append joins is its messages' ids, offset deltas (their
/// place in the send), timestamp deltas (from the send's earliest origin) and checksums.
/// [`WireMessages::new`] leaves them zero for [`send_body`] to fill in;
/// [`WireMessages::sealed`] writes them as each message is written, as they are when the
/// append leads its send, and [`send_body`] then takes them as they are. The buffer
/// starts with `room` bytes for the request's routing fields and batch header, so a send
/// of one append is finished in place.
#[derive(Debug)]
pub struct WireMessages {
    buf: BytesMut,
    room: usize,
    count: usize,
    data_bytes: usize,
    origin_micros: u64,
    seal: Option<Seal>,
}

/// The ids and checksums of messages finished as they were written
/// ([`WireMessages::sealed`]).
#[derive(Debug)]
struct Seal {
    /// The first message's id.
    first_id: u128,
    /// Ids reserved: messages past them are not finished.
    ids: usize,
    /// Each finished message's checksum, in order, as the 8 little-endian bytes the
    /// batch checksum hashes ([`send_body`]): one write of them all, not one per message.
    checksums: Vec<u8>,
}

/// The id `n` after `first` among the ids a send numbers: the low 64 bits count (and
/// wrap), the high 64 bits stay.
fn nth_id(first: u128, n: usize) -> u128 {
    let low = (first as u64).wrapping_add(n as u64);
    (first & !u128::from(u64::MAX)) | u128::from(low)
}

/// Bytes a message takes on Iggy's wire beyond its Kafka record's key and value, for
/// sizing a send's buffer up front (it then never grows, so never moves): the message
/// header, and the user headers the bridge adds (`kafka.record` with a first record's
/// frame, `kafka.timestamp`, the name of `kafka.key`), rounded up.
pub const MESSAGE_OVERHEAD: usize = 128;

/// A position in a [`WireMessages`], to rewrite the message that starts there.
#[derive(Debug, Clone, Copy)]
pub struct WireMark {
    len: usize,
    index: usize,
}

impl WireMessages {
    /// An empty set with `room` bytes in front (see [`send_room`]) and space for about
    /// `capacity` bytes of messages; `origin_micros` is the origin timestamp of every
    /// message in it.
    pub fn new(room: usize, capacity: usize, origin_micros: u64) -> Self {
        let mut buf = BytesMut::with_capacity(room.saturating_add(capacity));
        buf.resize(room, 0);
        Self {
            buf,
            room,
            count: 0,
            data_bytes: 0,
            origin_micros,
            seal: None,
        }
    }

    /// [`WireMessages::new`], with each message finished as it is written, as when these
    /// messages lead their send: the `n`th gets id `first_id` + `n` (see [`send_body`]'s
    /// ids), offset delta `n`, timestamp delta 0 and its checksum, computed while its
    /// bytes are still in the cache instead of when the send is made. `ids` ids are
    /// reserved for them: if more messages are written, the send finishes all of them as
    /// it does [`WireMessages::new`]'s.
    pub fn sealed(
        room: usize,
        capacity: usize,
        origin_micros: u64,
        first_id: u128,
        ids: usize,
    ) -> Self {
        let mut messages = Self::new(room, capacity, origin_micros);
        messages.seal = Some(Seal {
            first_id,
            ids,
            checksums: Vec::with_capacity(ids.saturating_mul(8)),
        });
        messages
    }

    /// The first message's id when every message is finished ([`WireMessages::sealed`]).
    pub fn sealed_first_id(&self) -> Option<u128> {
        self.finished().map(|s| s.first_id)
    }

    /// The seal, when it finished every message held.
    fn finished(&self) -> Option<&Seal> {
        self.seal
            .as_ref()
            .filter(|s| s.checksums.len() == self.count.saturating_mul(8))
    }

    /// The id and offset delta of the next message: its own when it will be finished,
    /// else zero for the send to fill in.
    fn next_fields(&self) -> (u128, u32) {
        match &self.seal {
            Some(s) if self.count < s.ids => (
                nth_id(s.first_id, self.count),
                u32::try_from(self.count).unwrap_or(u32::MAX),
            ),
            _ => (0, 0),
        }
    }

    /// Finishes the `index`th message, just written at `start..end`: its checksum, over
    /// its header after the checksum, its payload and user headers. A message past the
    /// reserved ids ends the sealing.
    fn seal_at(&mut self, start: usize, end: usize, index: usize) {
        let Some(seal) = &mut self.seal else { return };
        if index >= seal.ids {
            self.seal = None;
            return;
        }
        let checksum = XxHash3_64::oneshot(&self.buf[start + 8..end]);
        self.buf[start..start + 8].copy_from_slice(&checksum.to_le_bytes());
        let at = index.saturating_mul(8);
        if at == seal.checksums.len() {
            seal.checksums.extend_from_slice(&checksum.to_le_bytes());
        } else if let Some(c) = seal.checksums.get_mut(at..at.saturating_add(8)) {
            c.copy_from_slice(&checksum.to_le_bytes());
        }
    }

    /// The origin timestamp of every message held (microseconds).
    pub fn origin_micros(&self) -> u64 {
        self.origin_micros
    }

    /// Messages held.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Whether no message is held.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Payload and user header bytes held (what a send queue counts).
    pub fn data_bytes(&self) -> usize {
        self.data_bytes
    }

    /// Bytes of the messages as they travel (headers included).
    pub fn wire_len(&self) -> usize {
        self.buf.len() - self.room
    }

    /// Where the next message will start.
    pub fn mark(&self) -> WireMark {
        WireMark {
            len: self.buf.len(),
            index: self.count,
        }
    }

    /// Appends the message for one Kafka record: the same bytes the SDK sends for
    /// [`to_message_at`]'s message (native form when possible, else the envelope).
    /// On an error nothing is written.
    pub fn push(
        &mut self,
        record: &NewRecord,
        offset_delta: i32,
        batch: Option<&BatchFrame>,
        txn: Option<&TxnTag>,
    ) -> Result<(), MappingError> {
        let parts = if is_native(record) {
            match WireParts::of(record, offset_delta, batch, txn, true) {
                Ok(parts) => parts,
                // As in `to_message_at`: headers over Iggy's total cap take the envelope.
                Err(MappingError::Unrepresentable(_)) => {
                    WireParts::of(record, offset_delta, batch, txn, false)?
                }
                Err(e) => return Err(e),
            }
        } else {
            WireParts::of(record, offset_delta, batch, txn, false)?
        };
        let payload = parts.payload();
        self.buf
            .reserve(BATCH_MESSAGE_HEADER_SIZE + payload.len() + parts.headers_len as usize);
        let (id, offset_delta) = self.next_fields();
        let start = self.buf.len();
        self.buf.put_u64_le(0); // checksum
        self.buf.put_u128_le(id);
        self.buf.put_u32_le(offset_delta);
        self.buf.put_u32_le(0); // timestamp delta
        self.buf.put_u32_le(parts.headers_len);
        self.buf.put_u32_le(parts.payload_len);
        self.buf.put_u64_le(0); // reserved
        self.buf.put_slice(payload);
        parts.put_headers(&mut self.buf);
        self.seal_at(start, self.buf.len(), self.count);
        self.count += 1;
        self.data_bytes = self
            .data_bytes
            .saturating_add(payload.len() + parts.headers_len as usize);
        Ok(())
    }

    /// Writes the message that starts at `mark` again, for `record` with these fields;
    /// the messages after it stay as they are. On an error nothing changes.
    pub fn rewrite(
        &mut self,
        mark: WireMark,
        record: &NewRecord,
        offset_delta: i32,
        batch: Option<&BatchFrame>,
        txn: Option<&TxnTag>,
    ) -> Result<(), MappingError> {
        let Some(old_len) = frame_len_at(&self.buf, mark.len) else {
            return Err(MappingError::Unrepresentable(
                "no message at the rewrite mark".into(),
            ));
        };
        let mut again = WireMessages::new(0, old_len + CRC_LEN, self.origin_micros);
        again.push(record, offset_delta, batch, txn)?;
        let old_data = old_len - BATCH_MESSAGE_HEADER_SIZE;
        let new_len = again.buf.len();
        if new_len == old_len {
            self.buf[mark.len..mark.len + old_len].copy_from_slice(&again.buf);
        } else {
            let rest = self.buf.split_off(mark.len + old_len);
            self.buf.truncate(mark.len);
            self.buf.extend_from_slice(&again.buf);
            self.buf.extend_from_slice(&rest);
        }
        self.data_bytes = self.data_bytes - old_data + again.data_bytes;
        if let Some(first_id) = self.seal.as_ref().map(|s| s.first_id) {
            // Finished again, with its own id and place.
            let index = mark.index;
            let id = nth_id(first_id, index);
            let message = &mut self.buf[mark.len..mark.len + new_len];
            message[AT_ID..AT_ID + 16].copy_from_slice(&id.to_le_bytes());
            message[AT_OFFSET_DELTA..AT_OFFSET_DELTA + 4]
                .copy_from_slice(&u32::try_from(index).unwrap_or(u32::MAX).to_le_bytes());
            self.seal_at(mark.len, mark.len + new_len, index);
        }
        Ok(())
    }
}

/// Bytes of the user headers the bridge writes after a native record's key: the
/// `kafka.record` entry (its frame at most [`MAX_FRAME_LEN`]), `kafka.timestamp` and
/// `kafka.txn`.
const TAIL_MAX: usize = 10
    + RECORD_HEADER.len()
    + MAX_FRAME_LEN
    + 10
    + TIMESTAMP_HEADER.len()
    + 8
    + 10
    + TXN_HEADER.len()
    + 8;

/// Bytes of a `kafka.key` entry at most (a native key is at most 255 bytes).
const KEY_ENTRY_MAX: usize = 10 + KEY_HEADER.len() + MAX_HEADER_FIELD;

/// The value of a record that maps to a native message with no producer headers, the
/// form [`WireMessages::push_batch`] writes without a [`NewRecord`]: a value Iggy takes
/// as a payload, a null or native key, no headers. `None` for every other record.
fn bad_records(e: RecordsError) -> MappingError {
    MappingError::Records(e.to_string())
}

fn delta_of(i: usize) -> Result<i32, MappingError> {
    i32::try_from(i).map_err(|_| MappingError::Unrepresentable("too many records".into()))
}

/// One batch's mapping in progress ([`WireMessages::push_batch`]), fed its records in
/// order: each record with no producer headers is written in place as it comes
/// ([`WireMessages::put_plain`]), the first with the batch's frame written as if the
/// batch re-encodes exactly (its CRC kept). At the first record that cannot be written
/// so (or for a control batch, or when not asked to write in place) the rest are left
/// to [`BatchMapping::finish`], which maps them record by record from the section;
/// it also writes the first message again when the batch turns out not to re-encode
/// exactly.
#[derive(Debug)]
pub struct BatchMapping {
    plain: BatchFrame,
    hoped: BatchFrame,
    txn: Option<i64>,
    exact: ExactReencoding,
    /// The first message: where it starts, its record, the CRC written in it.
    first: Option<(WireMark, NewRecord, Option<u32>)>,
    /// Records written in place so far.
    done: usize,
    /// Whether records are still written in place as they come.
    in_place: bool,
    /// Why writing in place stopped with an error, reported by `finish`.
    error: Option<MappingError>,
}

impl BatchMapping {
    /// The mapping of `batch`, its records written in place as they come when
    /// `in_place` (and the batch is not a control batch).
    pub fn new(batch: &RecordBatch, in_place: bool) -> Self {
        let plain = frame_of(batch.header());
        BatchMapping {
            plain,
            hoped: BatchFrame {
                crc: Some(batch.header().crc),
                ..plain
            },
            txn: plain.is_transactional().then_some(plain.producer_id),
            exact: ExactReencoding::new(batch),
            first: None,
            done: 0,
            in_place: in_place && !plain.is_control(),
            error: None,
        }
    }

    /// The same mapping with `epoch` as the batch's partition leader epoch in the first
    /// message's frame (the epoch the batch is stored with, when it is stamped after
    /// its records were mapped; the batch's CRC does not cover it).
    pub fn with_leader_epoch(mut self, epoch: i32) -> Self {
        self.plain.partition_leader_epoch = epoch;
        self.hoped.partition_leader_epoch = epoch;
        self
    }

    /// Takes the batch's next record (read from `section`); whether records are still
    /// written as they come (once not, the rest are for [`BatchMapping::finish`]).
    pub fn record(
        &mut self,
        messages: &mut WireMessages,
        section: &Bytes,
        r: &RecordRef<'_>,
    ) -> bool {
        if !self.in_place {
            return false;
        }
        let Some(value) = plain_native_value(r) else {
            self.in_place = false;
            return false;
        };
        self.exact.record_ref(r);
        if self.done == 0 {
            let mark = messages.mark();
            let (frame, len) = frame(0, Some(&self.hoped), true);
            messages.put_plain(r.key, value, r.timestamp, &frame[..len], self.txn);
            let record = NewRecord {
                timestamp: r.timestamp,
                key: r.key.map(|k| section.slice_ref(k)),
                value: Some(section.slice_ref(value)),
                headers: Vec::new(),
            };
            self.first = Some((mark, record, self.hoped.crc));
        } else {
            let delta = match delta_of(self.done) {
                Ok(d) => d,
                Err(e) => {
                    self.error = Some(e);
                    self.in_place = false;
                    return false;
                }
            };
            let [d0, d1, d2, d3] = delta.to_be_bytes();
            let frame = [FORMAT_VERSION, 0, d0, d1, d2, d3];
            messages.put_plain(r.key, value, r.timestamp, &frame, self.txn);
        }
        self.done += 1;
        true
    }

    /// Maps the records not written as they came (all of them when none were, or
    /// none when every one was), then settles the first message's frame.
    pub fn finish(
        mut self,
        messages: &mut WireMessages,
        batch: &RecordBatch,
        section: &Bytes,
    ) -> Result<(), MappingError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let plain = self.plain;
        let hoped = self.hoped;
        let mut first = self.first.take();
        if !self.in_place {
            for (i, record) in batch
                .records_in(section.clone())
                .enumerate()
                .skip(self.done)
            {
                let record = record.map_err(bad_records)?;
                self.exact.record(&record);
                let delta = delta_of(i)?;
                let record = NewRecord::from(record);
                let txn = TxnTag::of(&plain, &record);
                if i == 0 {
                    let mark = messages.mark();
                    // A record that fits only without the CRC is written without it.
                    let written = match messages.push(&record, delta, Some(&hoped), txn.as_ref()) {
                        Ok(()) => hoped.crc,
                        Err(_) => None,
                    };
                    if written.is_none() {
                        messages.push(&record, delta, Some(&plain), txn.as_ref())?;
                    }
                    first = Some((mark, record, written));
                } else {
                    messages.push(&record, delta, None, txn.as_ref())?;
                }
            }
        }
        if let Some((mark, record, written)) = first {
            let crc = self.exact.crc();
            if crc != written {
                let frame = BatchFrame { crc, ..plain };
                let txn = TxnTag::of(&frame, &record);
                messages.rewrite(mark, &record, 0, Some(&frame), txn.as_ref())?;
            }
        }
        Ok(())
    }
}

fn plain_native_value<'a>(r: &RecordRef<'a>) -> Option<&'a [u8]> {
    let value = r
        .value
        .filter(|v| !v.is_empty() && u32::try_from(v.len()).is_ok_and(|n| n <= MAX_PAYLOAD_SIZE))?;
    (r.header_count == 0 && r.key.is_none_or(fits)).then_some(value)
}

impl WireMessages {
    /// Appends the messages of one batch, whose records (decompressed) are `section`:
    /// the bytes of [`WireMessages::push_batch_by_records`]. Records with no headers, a
    /// value and a null or short key (most of them) are written straight from the
    /// section; from the first other record on, the batch goes on record by record. On
    /// an error the messages may hold part of the batch.
    pub fn push_batch(&mut self, batch: &RecordBatch, section: &Bytes) -> Result<(), MappingError> {
        self.map_batch(batch, section, true)
    }

    /// Appends the messages of one batch record by record, each made a [`NewRecord`]
    /// and pushed ([`WireMessages::push`]): the first with the batch's frame, written as
    /// if the batch re-encodes exactly (its CRC kept) and written again when that turns
    /// out otherwise. The reference [`WireMessages::push_batch`] is checked against.
    pub fn push_batch_by_records(
        &mut self,
        batch: &RecordBatch,
        section: &Bytes,
    ) -> Result<(), MappingError> {
        self.map_batch(batch, section, false)
    }

    fn map_batch(
        &mut self,
        batch: &RecordBatch,
        section: &Bytes,
        in_place: bool,
    ) -> Result<(), MappingError> {
        let mut mapping = BatchMapping::new(batch, in_place);
        if mapping.in_place {
            for r in batch.record_refs_in(section) {
                let r = r.map_err(bad_records)?;
                if !mapping.record(self, section, &r) {
                    break;
                }
            }
        }
        mapping.finish(self, batch, section)
    }

    /// Appends a native message with no producer headers: what [`WireMessages::push`]
    /// writes for such a record, in three copies (message header, value, user headers).
    /// `key` is at most 255 bytes and `frame` at most [`MAX_FRAME_LEN`]
    /// ([`plain_native_value`]).
    fn put_plain(
        &mut self,
        key: Option<&[u8]>,
        value: &[u8],
        timestamp: i64,
        frame: &[u8],
        txn: Option<i64>,
    ) {
        // Written in place: the message header with its user headers' length left
        // zero, the value, the entries, then that length.
        let (id, offset_delta) = self.next_fields();
        self.buf
            .reserve(BATCH_MESSAGE_HEADER_SIZE + value.len() + KEY_ENTRY_MAX + TAIL_MAX);
        let start = self.buf.len();
        // One write of the header: the checksum, timestamp delta, user headers' length
        // (below) and reserved field zero.
        let mut header = [0u8; BATCH_MESSAGE_HEADER_SIZE];
        header[AT_ID..AT_ID + 16].copy_from_slice(&id.to_le_bytes());
        header[AT_OFFSET_DELTA..AT_OFFSET_DELTA + 4].copy_from_slice(&offset_delta.to_le_bytes());
        // Bounded by the caller: a payload Iggy takes.
        header[AT_PAYLOAD_LEN..AT_PAYLOAD_LEN + 4]
            .copy_from_slice(&(value.len() as u32).to_le_bytes());
        self.buf.put_slice(&header);
        self.buf.put_slice(value);
        let headers_at = self.buf.len();
        if let Some(k) = key {
            put_known_entry(&mut self.buf, &KEY_ENTRY_HEAD, k);
        }
        put_known_entry(&mut self.buf, &RECORD_ENTRY_HEAD, frame);
        put_known_entry(
            &mut self.buf,
            &TIMESTAMP_ENTRY_HEAD,
            &timestamp.to_le_bytes(),
        );
        if let Some(p) = txn {
            put_known_entry(&mut self.buf, &TXN_ENTRY_HEAD, &p.to_le_bytes());
        }
        let headers_len = self.buf.len() - headers_at;
        // A few hundred bytes: the key is a short one, the rest bounded.
        self.buf[start + AT_HEADERS_LEN..start + AT_HEADERS_LEN + 4]
            .copy_from_slice(&(headers_len as u32).to_le_bytes());
        self.seal_at(start, self.buf.len(), self.count);
        self.count += 1;
        self.data_bytes = self.data_bytes.saturating_add(value.len() + headers_len);
    }
}

/// The length of the message whose header starts at `at`, when it is all there.
fn frame_len_at(buf: &[u8], at: usize) -> Option<usize> {
    let le = |from: usize| -> Option<usize> {
        let b = buf.get(at + from..at + from + 4)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    };
    let len = BATCH_MESSAGE_HEADER_SIZE + le(AT_HEADERS_LEN)? + le(AT_PAYLOAD_LEN)?;
    (at + len <= buf.len()).then_some(len)
}

/// Bytes in front of the messages in a send's request: the routing fields (their
/// length, stream, topic, partitioning, message count) and the batch header.
pub fn send_room(
    stream: &WireIdentifier,
    topic: &WireIdentifier,
    partitioning: &WirePartitioning,
) -> usize {
    4 + stream.encoded_size()
        + topic.encoded_size()
        + partitioning.encoded_size()
        + 4
        + BATCH_HEADER_SIZE
}

/// The most bytes [`send_room`] asks for with a partition id: both identifiers named
/// with the longest names Iggy takes. Messages mapped before their stream and topic are
/// known get this much room, and the send starts inside it (no copy).
pub const MAX_SEND_ROOM: usize =
    4 + 2 * (2 + iggy_binary_protocol::MAX_WIRE_NAME_LENGTH) + (2 + 4) + 4 + BATCH_HEADER_SIZE;

/// A `SendMessages` request body and what the sender needs to know about it.
#[derive(Debug)]
pub struct SendBody {
    /// The body, as the SDK's `SendMessagesEncoder` writes it.
    pub body: Bytes,
    /// The id of the first message.
    pub first_id: u128,
    /// Messages in the body.
    pub count: usize,
}

/// The `SendMessages` request body of `appends`, in order (byte for byte what the SDK
/// sends for the same messages, ids and origin timestamps; a test checks it). Each
/// message gets the next of `next_id`, its place in the send and its timestamp delta,
/// then its checksum; then the batch header and routing fields are written in front.
/// The first append's messages are taken as they are when they were finished as they
/// were written ([`WireMessages::sealed`]) and it has the send's earliest origin: they
/// keep their ids, and `next_id` numbers the messages after them.
/// A single append with at least the room needed is finished in its own buffer (the
/// body starts where the room it needs does); several are copied into one.
///
/// Errors are the ones the SDK gives for the same send: no messages, a timestamp delta
/// past its field, or a body past a request's size field.
pub fn send_body(
    mut appends: Vec<WireMessages>,
    stream: &WireIdentifier,
    topic: &WireIdentifier,
    partitioning: &WirePartitioning,
    mut next_id: impl FnMut() -> u128,
) -> Result<SendBody, IggyError> {
    let room = send_room(stream, topic, partitioning);
    let count: usize = appends.iter().map(|a| a.count).sum();
    if count == 0 {
        return Err(IggyError::InvalidMessagesCount);
    }
    let message_count = u32::try_from(count).map_err(|_| IggyError::InvalidCommand)?;
    let earliest = appends
        .iter()
        .filter(|a| a.count > 0)
        .map(|a| a.origin_micros)
        .min()
        .unwrap_or(0);
    // Per append: its message count and timestamp delta, in order.
    let mut runs = Vec::with_capacity(appends.len());
    for a in &appends {
        let delta = a.origin_micros - earliest;
        if delta > MAX_TIMESTAMP_DELTA_MICROS {
            return Err(IggyError::InvalidMessageTimestampDelta(delta));
        }
        // Checked just above: the delta fits its u32 field.
        runs.push((a.count, delta as u32));
    }
    // The first append's messages, when they are finished as this send needs them: their
    // count, bytes, first id and checksums.
    let lead = match appends.first_mut() {
        Some(a) if a.count > 0 && a.origin_micros == earliest && a.finished().is_some() => {
            let (count, len) = (a.count, a.wire_len());
            a.seal.take().map(|s| (count, len, s.first_id, s.checksums))
        }
        _ => None,
    };
    let mut buf = match <[WireMessages; 1]>::try_from(appends) {
        Ok([only]) if only.room >= room => {
            let mut buf = only.buf;
            buf.advance(only.room - room);
            buf
        }
        Ok([only]) => joined(room, std::slice::from_ref(&only)),
        Err(appends) => joined(room, &appends),
    };
    let batch_size = buf.len() - room + BATCH_HEADER_SIZE;
    let batch_length = u32::try_from(batch_size).map_err(|_| IggyError::InvalidCommand)?;
    let blob_start = room;
    let mut at = blob_start;
    let mut index: u32 = 0;
    let mut first_id = 0;
    let mut header = BatchHeader::new(0, earliest, u64::from(batch_length), message_count);
    // The batch checksum (the SDK's `calculate_batch_checksum`: the header's fields, then
    // each message's checksum in order), taken as the messages' checksums are made
    // instead of in a second walk over the messages.
    let mut batch_checksum = XxHash3_64::new();
    for field in [
        header.partition_id,
        header.base_offset,
        header.base_timestamp,
        header.origin_timestamp,
        header.batch_length,
    ] {
        batch_checksum.write(&field.to_le_bytes());
    }
    batch_checksum.write(&header.message_count.to_le_bytes());
    // The messages' checksums, hashed in one write after the loop (the streaming hasher
    // costs about as much per write as per 8 bytes of a long one).
    let mut checksums = Vec::new();
    let mut runs = runs.into_iter();
    if let Some((n, len, id, sealed)) = lead {
        runs.next();
        first_id = id;
        checksums = sealed;
        at += len;
        // At most `message_count`, a u32.
        index = n as u32;
    }
    checksums.reserve((message_count.saturating_sub(index) as usize).saturating_mul(8));
    for (n, timestamp_delta) in runs {
        for _ in 0..n {
            // Every message was written whole by `push`, so its lengths are there.
            let len = frame_len_at(&buf, at).ok_or(IggyError::InvalidCommand)?;
            let id = next_id();
            if index == 0 {
                first_id = id;
            }
            let frame = &mut buf[at..at + len];
            frame[AT_ID..AT_ID + 16].copy_from_slice(&id.to_le_bytes());
            frame[AT_OFFSET_DELTA..AT_OFFSET_DELTA + 4].copy_from_slice(&index.to_le_bytes());
            frame[AT_TIMESTAMP_DELTA..AT_TIMESTAMP_DELTA + 4]
                .copy_from_slice(&timestamp_delta.to_le_bytes());
            let checksum = XxHash3_64::oneshot(&frame[8..]).to_le_bytes();
            frame[..8].copy_from_slice(&checksum);
            checksums.extend_from_slice(&checksum);
            at += len;
            index += 1;
        }
    }
    batch_checksum.write(&checksums);
    header.batch_checksum = batch_checksum.finish();
    let header_start = room - BATCH_HEADER_SIZE;
    header.encode_into(&mut buf[header_start..room]);
    let mut routing = BytesMut::with_capacity(header_start);
    let inner = header_start - 4;
    // The routing fields are a few dozen bytes: identifiers are at most 255 long.
    routing.put_u32_le(inner as u32);
    stream.encode(&mut routing);
    topic.encode(&mut routing);
    partitioning.encode(&mut routing);
    routing.put_u32_le(message_count);
    buf[..header_start].copy_from_slice(&routing);
    Ok(SendBody {
        body: buf.freeze(),
        first_id,
        count,
    })
}

/// The messages of `appends` copied after `room` zero bytes.
fn joined(room: usize, appends: &[WireMessages]) -> BytesMut {
    let total = appends.iter().map(WireMessages::wire_len).sum::<usize>();
    let mut buf = BytesMut::with_capacity(room + total);
    buf.resize(room, 0);
    for a in appends {
        buf.extend_from_slice(&a.buf[a.room..]);
    }
    buf
}

/// The message through the SDK's builder and a header map: the reference the direct
/// wire writer is tested against.
#[cfg(test)]
fn build(
    record: &NewRecord,
    offset_delta: i32,
    batch: Option<&BatchFrame>,
    txn: Option<&TxnTag>,
    native: bool,
) -> Result<IggyMessage, MappingError> {
    let (frame, frame_len) = frame(offset_delta, batch, native);
    let mut headers: BTreeMap<HeaderKey, HeaderValue> = BTreeMap::new();
    headers.insert(key(RECORD_HEADER)?, raw_value(&frame[..frame_len])?);
    headers.insert(key(TIMESTAMP_HEADER)?, HeaderValue::from(record.timestamp));
    if let Some(t) = txn {
        headers.insert(key(TXN_HEADER)?, HeaderValue::from(t.producer_id));
        if let Some(m) = t.marker_name() {
            headers.insert(key(MARKER_HEADER)?, raw_value(m.as_bytes())?);
        }
    }
    let payload = if native {
        if let Some(k) = &record.key {
            headers.insert(key(KEY_HEADER)?, raw_value(k)?);
        }
        for h in &record.headers {
            let name = std::str::from_utf8(&h.key)
                .map_err(|e| MappingError::Unrepresentable(e.to_string()))?;
            let value = h
                .value
                .as_deref()
                .ok_or_else(|| MappingError::Unrepresentable("null header value".into()))?;
            headers.insert(key(name)?, raw_value(value)?);
        }
        record.value.clone().unwrap_or_default()
    } else {
        envelope(record)?
    };
    IggyMessage::builder()
        .payload(payload)
        .user_headers(headers)
        .build()
        .map_err(|e| MappingError::Unrepresentable(e.to_string()))
}

/// What a single pass over a message's user headers found; `None` from
/// [`scan_headers`] sends the message to the map-based reader instead.
#[derive(Default)]
pub(crate) struct Scanned {
    timestamp: Option<i64>,
    txn: Option<i64>,
    /// Where the `kafka.record` value lies in the wire form (read in place, no slice).
    pub(crate) frame: Option<(usize, usize)>,
    key: Option<Bytes>,
    headers: Vec<Header>,
}

/// Reads user headers straight from their wire form, `buf[start..end]`, as zero-copy
/// slices of `buf` (positions in [`Scanned`] are `buf`'s). Handles the common shape
/// only: String-kind names, strictly increasing (the order of the SDK's map), a
/// well-formed Int64 timestamp. Anything else is `None`.
pub(crate) fn scan_headers(buf: &Bytes, start: usize, end: usize) -> Option<Scanned> {
    let wire = buf.get(..end)?;
    let mut out = Scanned::default();
    let mut pos = start;
    let mut previous: Option<(usize, usize)> = None;
    while pos < wire.len() {
        let (name_kind, ns, ne) = header_field(wire, &mut pos)?;
        let (value_kind, vs, ve) = header_field(wire, &mut pos)?;
        if name_kind != KIND_STRING || ns == ne {
            return None;
        }
        let name = &wire[ns..ne];
        if let Some((ps, pe)) = previous
            && wire[ps..pe] >= *name
        {
            return None;
        }
        previous = Some((ns, ne));
        match name {
            n if n == TIMESTAMP_HEADER.as_bytes() => {
                if value_kind == KIND_INT64 {
                    let v: [u8; 8] = wire[vs..ve].try_into().ok()?;
                    out.timestamp = Some(i64::from_le_bytes(v));
                }
            }
            n if n == TXN_HEADER.as_bytes() => {
                if value_kind == KIND_INT64 {
                    let v: [u8; 8] = wire[vs..ve].try_into().ok()?;
                    out.txn = Some(i64::from_le_bytes(v));
                }
            }
            n if n == RECORD_HEADER.as_bytes() => out.frame = Some((vs, ve)),
            n if n == KEY_HEADER.as_bytes() => out.key = Some(buf.slice(vs..ve)),
            _ => out
                .headers
                .push(Header::new(buf.slice(ns..ne), Some(buf.slice(vs..ve)))),
        }
    }
    Some(out)
}

/// One field of a user header in wire form at `*pos` (kind `u8`, length `u32` LE, the
/// bytes): its kind and where its bytes lie; `*pos` moves past it. `None` when it runs
/// past `wire`.
fn header_field(wire: &[u8], pos: &mut usize) -> Option<(u8, usize, usize)> {
    let kind = *wire.get(*pos)?;
    let len = wire.get(*pos + 1..*pos + 5)?;
    let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
    let start = *pos + 5;
    let end = start.checked_add(len).filter(|e| *e <= wire.len())?;
    *pos = end;
    Some((kind, start, end))
}

/// What [`plain_headers`] found: the record's timestamp and where its key and
/// `kafka.record` value lie (positions are the scanned buffer's).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlainHeaders {
    pub(crate) timestamp: Option<i64>,
    pub(crate) key: Option<(usize, usize)>,
    frame: Option<(usize, usize)>,
    /// Where the first of the producer's headers starts, if there is one.
    pub(crate) producer_from: Option<usize>,
}

impl PlainHeaders {
    /// The `kafka.record` value read from `buf`: offset delta, batch fields (first
    /// record only) and envelope flag; `None` without one, or malformed.
    pub(crate) fn frame(&self, buf: &[u8]) -> Option<(i32, Option<BatchFrame>, bool)> {
        let (start, end) = self.frame?;
        parse_frame(buf.get(start..end)?).ok()
    }
}

/// [`scan_headers`] without taking anything out of `buf`: checks that the user headers
/// `buf[start..end]` have the shape [`scan_headers`] reads (and `kafka.timestamp` and
/// `kafka.txn`, when there, are 8-byte Int64 values) and finds the bridge's own. The
/// producer's headers are then walked in place with [`ProducerHeaders`]. `None` where
/// [`scan_headers`] gives `None`, and for the odd timestamp or transaction header it
/// passes over.
pub(crate) fn plain_headers(buf: &[u8], start: usize, end: usize) -> Option<PlainHeaders> {
    let wire = buf.get(..end)?;
    let mut out = PlainHeaders {
        timestamp: None,
        key: None,
        frame: None,
        producer_from: None,
    };
    let mut pos = start;
    let mut previous: Option<&[u8]> = None;
    let int64 = |kind: u8, value: &[u8]| -> Option<i64> {
        let v: [u8; 8] = value.try_into().ok().filter(|_| kind == KIND_INT64)?;
        Some(i64::from_le_bytes(v))
    };
    while pos < wire.len() {
        let at = pos;
        let (name_kind, ns, ne) = header_field(wire, &mut pos)?;
        let (value_kind, vs, ve) = header_field(wire, &mut pos)?;
        let name = &wire[ns..ne];
        if name_kind != KIND_STRING || name.is_empty() || previous.is_some_and(|p| p >= name) {
            return None;
        }
        previous = Some(name);
        match name {
            n if n == TIMESTAMP_HEADER.as_bytes() => {
                out.timestamp = Some(int64(value_kind, &wire[vs..ve])?);
            }
            n if n == TXN_HEADER.as_bytes() => {
                int64(value_kind, &wire[vs..ve])?;
            }
            n if n == RECORD_HEADER.as_bytes() => out.frame = Some((vs, ve)),
            n if n == KEY_HEADER.as_bytes() => out.key = Some((vs, ve)),
            n if n.starts_with(RESERVED_PREFIX.as_bytes()) => {}
            _ => {
                out.producer_from.get_or_insert(at);
            }
        }
    }
    Some(out)
}

/// The producer's headers of a record in native form, in place: every user header from
/// `start` on whose name is not the bridge's (`kafka.` names), as name and value, in
/// wire order. For headers [`plain_headers`] has checked; it stops at the first field
/// that runs past `wire`.
#[derive(Debug, Clone)]
pub(crate) struct ProducerHeaders<'a> {
    wire: &'a [u8],
    pos: usize,
}

impl<'a> ProducerHeaders<'a> {
    pub(crate) fn new(wire: &'a [u8], start: usize) -> Self {
        Self { wire, pos: start }
    }
}

impl<'a> Iterator for ProducerHeaders<'a> {
    type Item = (&'a [u8], Option<&'a [u8]>);

    fn next(&mut self) -> Option<Self::Item> {
        let wire = self.wire;
        while self.pos < wire.len() {
            let (_, ns, ne) = header_field(wire, &mut self.pos)?;
            let (_, vs, ve) = header_field(wire, &mut self.pos)?;
            let name = &wire[ns..ne];
            if !name.starts_with(RESERVED_PREFIX.as_bytes()) {
                return Some((name, Some(&wire[vs..ve])));
            }
        }
        None
    }
}

/// Reads a Kafka record back from an Iggy message (written by the bridge or not).
pub fn from_message(message: &IggyMessage) -> Result<MappedRecord, MappingError> {
    let scanned = match &message.user_headers {
        Some(wire) => scan_headers(wire, 0, wire.len()),
        None => Some(Scanned::default()),
    };
    match scanned {
        Some(scanned) => {
            let frame = frame_in(message.user_headers.as_ref(), &scanned);
            from_scanned(
                message.header.offset,
                message.header.origin_timestamp,
                frame,
                message.payload.clone(),
                scanned,
            )
        }
        None => from_message_mapped(message),
    }
}

/// Where [`Scanned::frame`] lies in `buf` (the buffer it was scanned from).
fn frame_in<'a>(buf: Option<&'a Bytes>, s: &Scanned) -> Option<&'a [u8]> {
    let (start, end) = s.frame?;
    buf?.get(start..end)
}

/// A record from a scanned message: Iggy `offset` and `origin_timestamp`, the
/// `kafka.record` value if there is one, the payload (handed over: a polled message is
/// consumed, so its payload moves into the record instead of being shared once more).
#[inline]
pub(crate) fn from_scanned(
    offset: u64,
    origin_timestamp: u64,
    frame: Option<&[u8]>,
    payload: Bytes,
    s: Scanned,
) -> Result<MappedRecord, MappingError> {
    // Iggy timestamps are microseconds since the epoch.
    let timestamp = s
        .timestamp
        .unwrap_or_else(|| convert::kafka_i64(origin_timestamp / 1000));
    let Some(frame) = frame else {
        return Ok(MappedRecord {
            offset,
            record: NewRecord {
                timestamp,
                key: s.key,
                value: Some(payload),
                headers: s.headers,
            },
            offset_delta: None,
            batch: None,
            envelope: false,
            txn: None,
        });
    };
    let (offset_delta, batch, envelope) = parse_frame(frame)?;
    let record = if envelope {
        envelope_record(&payload, timestamp)?
    } else {
        let mut headers = s.headers;
        if !headers.is_empty() {
            headers.retain(|h| !h.key.starts_with(RESERVED_PREFIX.as_bytes()));
        }
        NewRecord {
            timestamp,
            key: s.key,
            value: Some(payload),
            headers,
        }
    };
    Ok(MappedRecord {
        offset,
        record,
        offset_delta: Some(offset_delta),
        batch: batch.map(Box::new),
        envelope,
        txn: s.txn,
    })
}

/// Offset delta, batch fields (first record only) and envelope flag of a `kafka.record`
/// value.
fn parse_frame(frame: &[u8]) -> Result<(i32, Option<BatchFrame>, bool), MappingError> {
    if frame.len() < FRAME_LEN || frame[0] != FORMAT_VERSION {
        return Err(MappingError::BadFrame(format!(
            "{} bytes, version {:?}",
            frame.len(),
            frame.first()
        )));
    }
    let flags = frame[1];
    let offset_delta = i32::from_be_bytes([frame[2], frame[3], frame[4], frame[5]]);
    let batch = if flags & FLAG_FIRST != 0 {
        let fields = frame
            .get(FRAME_LEN..FRAME_LEN + BATCH_FIELDS_LEN)
            .ok_or_else(|| MappingError::BadFrame("truncated batch fields".into()))?;
        let mut batch = BatchFrame::get(fields);
        if flags & FLAG_CRC != 0 {
            let mut crc = frame
                .get(FRAME_LEN + BATCH_FIELDS_LEN..MAX_FRAME_LEN)
                .ok_or_else(|| MappingError::BadFrame("truncated batch CRC".into()))?;
            batch.crc = Some(crc.get_u32());
        }
        Some(batch)
    } else {
        None
    };
    Ok((offset_delta, batch, flags & FLAG_ENVELOPE != 0))
}

/// [`from_message`] through the SDK's header map: for headers of any shape.
pub(crate) fn from_message_mapped(message: &IggyMessage) -> Result<MappedRecord, MappingError> {
    let offset = message.header.offset;
    let headers = message
        .user_headers_map()
        .map_err(|e| MappingError::BadFrame(format!("user headers: {e}")))?
        .unwrap_or_default();
    let timestamp = match headers.get(&key(TIMESTAMP_HEADER)?) {
        Some(v) if v.kind() == HeaderKind::Int64 => v
            .as_int64()
            .map_err(|e| MappingError::BadFrame(e.to_string()))?,
        // Iggy timestamps are microseconds since the epoch.
        _ => convert::kafka_i64(message.header.origin_timestamp / 1000),
    };
    let Some(frame) = headers.get(&key(RECORD_HEADER)?) else {
        return Ok(MappedRecord {
            offset,
            record: native_record(message, &headers, timestamp),
            offset_delta: None,
            batch: None,
            envelope: false,
            txn: None,
        });
    };
    let (offset_delta, batch, envelope) = parse_frame(frame.as_bytes())?;
    let record = if envelope {
        envelope_record(&message.payload, timestamp)?
    } else {
        let mut record = native_record(message, &headers, timestamp);
        // In native form the bridge owns every `kafka.` name; the rest are the
        // producer's headers.
        record
            .headers
            .retain(|h| !h.key.starts_with(RESERVED_PREFIX.as_bytes()));
        record
    };
    let txn = match headers.get(&key(TXN_HEADER)?) {
        Some(v) if v.kind() == HeaderKind::Int64 => v.as_int64().ok(),
        _ => None,
    };
    Ok(MappedRecord {
        offset,
        record,
        offset_delta: Some(offset_delta),
        batch: batch.map(Box::new),
        envelope,
        txn,
    })
}

fn native_record(
    message: &IggyMessage,
    headers: &BTreeMap<HeaderKey, HeaderValue>,
    timestamp: i64,
) -> NewRecord {
    let key_name = HeaderKey::from_str(KEY_HEADER).ok();
    let mut record = NewRecord {
        timestamp,
        key: None,
        value: Some(message.payload.clone()),
        headers: Vec::new(),
    };
    for (name, value) in headers {
        if key_name.as_ref() == Some(name) {
            record.key = Some(value.value());
            continue;
        }
        let name = match name.kind() {
            HeaderKind::String | HeaderKind::Raw => name.value(),
            _ => Bytes::from(name.to_string_value()),
        };
        if name.as_ref() == RECORD_HEADER.as_bytes() || name.as_ref() == TIMESTAMP_HEADER.as_bytes()
        {
            continue;
        }
        record.headers.push(Header::new(name, Some(value.value())));
    }
    record
}

/// The batch frame of a decoded producer batch.
pub fn frame_of(header: &kafka_records::BatchHeader) -> BatchFrame {
    BatchFrame {
        attributes: header.attributes.0,
        partition_leader_epoch: header.partition_leader_epoch,
        base_timestamp: header.base_timestamp,
        producer_id: header.producer_id,
        producer_epoch: header.producer_epoch,
        base_sequence: header.base_sequence,
        record_count: header.record_count,
        crc: None,
    }
}

/// The batch fields of `count` records from `m` on served without their whole producer
/// batch (the compacted prefix serves each record alone; a read may start inside a
/// batch): a transactional record keeps its producer id, and a marker its control bit,
/// so read_committed consumers still tell them apart. `batch` is the frame of the
/// records' batch when known (its first record was seen), for the epoch and sequence.
/// Records outside transactions get `None` (a plain batch).
pub fn partial_frame(
    m: &MappedRecord,
    batch: Option<&BatchFrame>,
    count: usize,
) -> Option<BatchFrame> {
    let record_count = i32::try_from(count).ok()?;
    let own = m
        .batch
        .as_deref()
        .or(batch.filter(|b| Some(b.producer_id) == m.txn));
    match own {
        Some(f) if f.is_transactional() => {
            let delta = if m.batch.is_some() {
                0
            } else {
                m.offset_delta.unwrap_or(0)
            };
            Some(BatchFrame {
                // Uncompressed, the timestamp type and the transaction bits kept.
                attributes: f.attributes & (ATTR_TRANSACTIONAL | ATTR_CONTROL | 0x08),
                partition_leader_epoch: f.partition_leader_epoch,
                base_timestamp: m.record.timestamp,
                producer_id: f.producer_id,
                producer_epoch: f.producer_epoch,
                base_sequence: if f.base_sequence < 0 {
                    -1
                } else {
                    f.base_sequence.wrapping_add(delta)
                },
                record_count,
                crc: None,
            })
        }
        _ => m.txn.map(|producer_id| BatchFrame {
            attributes: ATTR_TRANSACTIONAL,
            partition_leader_epoch: -1,
            base_timestamp: m.record.timestamp,
            producer_id,
            producer_epoch: -1,
            base_sequence: -1,
            record_count,
            crc: None,
        }),
    }
}

/// Encodes one run of records read back from Iggy as a Kafka batch at `base_offset`.
///
/// With the producer's frame (the run is the whole batch) the batch is rebuilt with its
/// header fields and codec; otherwise (a message from a native producer, or a batch whose
/// front was removed by Iggy retention) it is a plain uncompressed CreateTime batch.
/// The records may be lent by the values holding them (as [`MappedRecord`]s read back
/// are), so a run is encoded where it lies, without moving each record out first.
pub fn encode_run<R: AsRef<NewRecord>>(
    base_offset: i64,
    frame: Option<&BatchFrame>,
    records: &[R],
    out: &mut BytesMut,
) -> Result<(), RecordsError> {
    encode_run_of(base_offset, frame, records, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_records::encode_batch;
    use proptest::prelude::*;

    #[test]
    fn known_entries_are_written_as_any_entry() {
        for (head, name, kind) in [
            (&RECORD_ENTRY_HEAD[..], RECORD_HEADER, KIND_RAW),
            (&TIMESTAMP_ENTRY_HEAD[..], TIMESTAMP_HEADER, KIND_INT64),
            (&KEY_ENTRY_HEAD[..], KEY_HEADER, KIND_RAW),
            (&TXN_ENTRY_HEAD[..], TXN_HEADER, KIND_INT64),
        ] {
            for value in [&b"k"[..], &[7u8; 8], &[1u8; 255]] {
                let (mut known, mut any) = (BytesMut::new(), BytesMut::new());
                put_known_entry(&mut known, head, value);
                put_entry(&mut any, name.as_bytes(), kind, value);
                assert_eq!(known, any, "{name}");
                assert_eq!(known.len(), entry_len(name.as_bytes(), value));
            }
        }
    }

    fn with_offset(mut message: IggyMessage, offset: u64) -> IggyMessage {
        message.header.offset = offset;
        message
    }

    fn roundtrip(record: &NewRecord, delta: i32, frame: Option<&BatchFrame>) -> MappedRecord {
        let message = to_message(record, delta, frame).unwrap();
        // Through the wire form, as a poll would deliver it.
        let message = IggyMessage::from_bytes(message.to_bytes()).unwrap();
        from_message(&with_offset(message, 7)).unwrap()
    }

    fn rec(key: Option<&[u8]>, value: Option<&[u8]>, headers: Vec<Header>) -> NewRecord {
        NewRecord {
            timestamp: 1_700_000_000_123,
            key: key.map(Bytes::copy_from_slice),
            value: value.map(Bytes::copy_from_slice),
            headers,
        }
    }

    fn h(name: &str, value: Option<&str>) -> Header {
        Header::new(
            Bytes::copy_from_slice(name.as_bytes()),
            value.map(|v| Bytes::copy_from_slice(v.as_bytes())),
        )
    }

    #[test]
    fn simple_record_is_native_with_value_as_payload() {
        let record = rec(
            Some(b"k"),
            Some(b"hello"),
            vec![h("a", Some("1")), h("b", Some("2"))],
        );
        let message = to_message(&record, 0, None).unwrap();
        assert_eq!(message.payload.as_ref(), b"hello");
        let headers = message.user_headers_map().unwrap().unwrap();
        assert_eq!(
            headers.get(&key(KEY_HEADER).unwrap()).unwrap().as_bytes(),
            b"k"
        );
        assert_eq!(headers.get(&key("a").unwrap()).unwrap().as_bytes(), b"1");
        assert_eq!(
            headers
                .get(&key(TIMESTAMP_HEADER).unwrap())
                .unwrap()
                .as_int64()
                .unwrap(),
            1_700_000_000_123
        );
        let back = roundtrip(&record, 0, None);
        assert!(!back.envelope);
        assert_eq!(back.record, record);
        assert_eq!(back.offset, 7);
    }

    #[test]
    fn lossy_cases_use_the_envelope() {
        let cases = vec![
            rec(None, None, vec![]),
            rec(Some(b""), Some(b""), vec![]),
            rec(None, Some(b"v"), vec![h("x", Some("1")), h("x", None)]),
            rec(None, Some(b"v"), vec![h("b", Some("1")), h("a", Some("2"))]),
            rec(None, Some(b"v"), vec![h("kafka.key", Some("1"))]),
            rec(Some(&[7u8; 300]), Some(b"v"), vec![]),
            rec(None, Some(b"v"), vec![h("e", Some(""))]),
        ];
        for record in cases {
            assert!(!is_native(&record), "{record:?}");
            let back = roundtrip(&record, 3, None);
            assert!(back.envelope);
            assert_eq!(back.record, record);
            assert_eq!(back.offset_delta, Some(3));
        }
    }

    #[test]
    fn header_kind_codes_are_the_sdks() {
        assert_eq!(KIND_RAW, HeaderKind::Raw.as_code());
        assert_eq!(KIND_STRING, HeaderKind::String.as_code());
        assert_eq!(KIND_INT64, HeaderKind::Int64.as_code());
    }

    #[test]
    fn batch_frame_survives() {
        let frame = BatchFrame {
            attributes: 1,
            partition_leader_epoch: 4,
            base_timestamp: -1,
            producer_id: 42,
            producer_epoch: 1,
            base_sequence: 9,
            record_count: 3,
            crc: None,
        };
        let back = roundtrip(&rec(None, Some(b"v"), vec![]), 0, Some(&frame));
        assert_eq!(back.batch.as_deref(), Some(&frame));
        assert_eq!(back.offset_delta, Some(0));
        let with_crc = BatchFrame {
            crc: Some(0xdead_beef),
            ..frame
        };
        let back = roundtrip(&rec(None, Some(b"v"), vec![]), 0, Some(&with_crc));
        assert_eq!(back.batch.as_deref(), Some(&with_crc));
    }

    /// A batch encoded with `options`, mapped to messages as an append does, read back
    /// through the wire form; returns the messages and the re-encoded batch.
    fn through_iggy(options: &BatchOptions, records: &[NewRecord]) -> (Vec<IggyMessage>, Bytes) {
        let mut bytes = BytesMut::new();
        encode_batch(options, records, &mut bytes).unwrap();
        let bytes = bytes.freeze();
        let batch =
            kafka_records::RecordBatch::decode(&bytes, &kafka_records::DecodeLimits::default())
                .unwrap();
        let frame = frame_of(batch.header());
        let mut messages = Vec::new();
        let mut back = Vec::new();
        for (i, record) in batch.records().unwrap().enumerate() {
            let record = NewRecord::from(record.unwrap());
            let txn = TxnTag::of(&frame, &record);
            let delta = i32::try_from(i).unwrap();
            let first = (i == 0).then_some(&frame);
            let message = to_message_at(&record, delta, first, txn.as_ref(), 1).unwrap();
            let wire = message.to_bytes();
            let message = IggyMessage::from_bytes(wire.clone()).unwrap();
            let read = IggyMessage::from_bytes(wire).unwrap();
            let mapped = from_message(&with_offset(read, 100 + i as u64)).unwrap();
            assert_eq!(mapped.record, record);
            back.push(mapped);
            messages.push(message);
        }
        let mut out = BytesMut::new();
        let records: Vec<NewRecord> = back.iter().map(|m| m.record.clone()).collect();
        encode_run(100, back[0].batch.as_deref(), &records, &mut out).unwrap();
        (messages, out.freeze())
    }

    fn txn_options(control: bool, base_sequence: i32) -> BatchOptions {
        BatchOptions {
            base_offset: 0,
            partition_leader_epoch: -1,
            compression: Compression::None,
            timestamp_type: TimestampType::CreateTime,
            transactional: true,
            control,
            producer_id: 4242,
            producer_epoch: 3,
            base_sequence,
            base_timestamp: None,
        }
    }

    fn header_of(message: &IggyMessage, name: &str) -> Option<HeaderValue> {
        message
            .user_headers_map()
            .unwrap()
            .unwrap_or_default()
            .get(&key(name).unwrap())
            .cloned()
    }

    #[test]
    fn transactional_batches_round_trip_and_every_record_is_flagged() {
        let records = vec![
            rec(Some(b"a"), Some(b"1"), vec![]),
            rec(None, Some(b"2"), vec![h("h", Some("x"))]),
            rec(Some(b"c"), None, vec![]),
        ];
        let (messages, bytes) = through_iggy(&txn_options(false, 17), &records);
        assert_eq!(messages.len(), 3);
        for m in &messages {
            assert_eq!(
                header_of(m, TXN_HEADER).unwrap().as_int64().unwrap(),
                4242,
                "every record carries the producer id"
            );
            assert!(header_of(m, MARKER_HEADER).is_none());
        }
        let batch =
            kafka_records::RecordBatch::decode(&bytes, &kafka_records::DecodeLimits::default())
                .unwrap();
        let header = batch.header();
        assert!(header.attributes.is_transactional());
        assert!(!header.attributes.is_control());
        assert_eq!(header.producer_id, 4242);
        assert_eq!(header.producer_epoch, 3);
        assert_eq!(header.base_sequence, 17);
        assert_eq!(header.base_offset, 100);
        let back = fetch_tests::records_of(&batch);
        assert_eq!(back, records);
    }

    #[test]
    fn markers_round_trip_and_are_flagged() {
        for (commit, name) in [(true, MARKER_COMMIT), (false, MARKER_ABORT)] {
            let marker = NewRecord {
                timestamp: 5,
                key: Some(Bytes::copy_from_slice(&[0, 0, 0, u8::from(commit)])),
                value: Some(Bytes::from_static(&[0, 0, 0, 0, 0, 9])),
                headers: Vec::new(),
            };
            assert_eq!(control_marker(&marker), Some((commit, 9)));
            let (messages, bytes) =
                through_iggy(&txn_options(true, -1), std::slice::from_ref(&marker));
            let m = &messages[0];
            assert_eq!(header_of(m, TXN_HEADER).unwrap().as_int64().unwrap(), 4242);
            assert_eq!(
                header_of(m, MARKER_HEADER).unwrap().as_bytes(),
                name.as_bytes()
            );
            assert_eq!(m.payload.as_ref(), &[0, 0, 0, 0, 0, 9]);
            assert_eq!(
                header_of(m, KEY_HEADER).unwrap().as_bytes(),
                &[0, 0, 0, u8::from(commit)]
            );
            let batch =
                kafka_records::RecordBatch::decode(&bytes, &kafka_records::DecodeLimits::default())
                    .unwrap();
            let header = batch.header();
            assert!(header.attributes.is_transactional());
            assert!(header.attributes.is_control());
            assert_eq!(header.base_sequence, -1);
            assert_eq!(header.producer_epoch, 3);
            let back = fetch_tests::records_of(&batch);
            assert_eq!(back, vec![marker]);
        }
    }

    #[test]
    fn records_served_alone_keep_their_transaction() {
        let records = vec![
            rec(Some(b"a"), Some(b"1"), vec![]),
            rec(Some(b"b"), Some(b"2"), vec![]),
        ];
        let mut options = txn_options(false, 40);
        options.compression = Compression::Gzip;
        let mut bytes = BytesMut::new();
        encode_batch(&options, &records, &mut bytes).unwrap();
        let bytes = bytes.freeze();
        let batch =
            kafka_records::RecordBatch::decode(&bytes, &kafka_records::DecodeLimits::default())
                .unwrap();
        let frame = frame_of(batch.header());
        let mapped: Vec<MappedRecord> = records
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let first = (i == 0).then_some(&frame);
                let txn = TxnTag::of(&frame, r);
                let m =
                    to_message_at(r, i32::try_from(i).unwrap(), first, txn.as_ref(), 1).unwrap();
                from_message(&IggyMessage::from_bytes(m.to_bytes()).unwrap()).unwrap()
            })
            .collect();
        assert_eq!(mapped[0].txn, Some(4242));
        assert_eq!(mapped[1].txn, Some(4242));
        let first = partial_frame(&mapped[0], None, 1).unwrap();
        assert_eq!(first.attributes, 0x10, "uncompressed, transactional");
        assert_eq!((first.producer_epoch, first.base_sequence), (3, 40));
        // The second alone: epoch and sequence from its batch when that was seen.
        let second = partial_frame(&mapped[1], Some(&frame), 1).unwrap();
        assert_eq!(
            (
                second.producer_id,
                second.producer_epoch,
                second.base_sequence
            ),
            (4242, 3, 41)
        );
        let unknown = partial_frame(&mapped[1], None, 1).unwrap();
        assert_eq!(
            (
                unknown.attributes,
                unknown.producer_id,
                unknown.producer_epoch
            ),
            (0x10, 4242, -1)
        );
        // Re-encoded alone, it is a transactional batch of the producer.
        let mut out = BytesMut::new();
        encode_run(9, Some(&second), &[mapped[1].record.clone()], &mut out).unwrap();
        let out = out.freeze();
        let back =
            kafka_records::RecordBatch::decode(&out, &kafka_records::DecodeLimits::default())
                .unwrap();
        assert!(back.header().attributes.is_transactional());
        assert_eq!(back.header().producer_id, 4242);
        // A plain record stays plain.
        let plain = roundtrip(&rec(None, Some(b"v"), vec![]), 0, None);
        assert_eq!(plain.txn, None);
        assert_eq!(partial_frame(&plain, Some(&frame), 1), None);
    }

    #[test]
    fn other_control_records_and_plain_batches_carry_no_marker() {
        let frame = |attributes| BatchFrame {
            attributes,
            ..sample_frame()
        };
        let odd = NewRecord {
            timestamp: 0,
            key: Some(Bytes::from_static(&[0, 0, 0, 7])),
            value: Some(Bytes::from_static(&[0, 0])),
            headers: Vec::new(),
        };
        assert_eq!(control_marker(&odd), None);
        assert_eq!(
            TxnTag::of(&frame(0x30), &odd),
            Some(TxnTag {
                producer_id: 7,
                marker: None
            })
        );
        assert_eq!(TxnTag::of(&frame(0), &odd), None);
        assert_eq!(TxnTag::of(&frame(0x20), &odd), None);
        let short = NewRecord {
            key: Some(Bytes::from_static(&[0, 1])),
            ..odd
        };
        assert_eq!(control_marker(&short), None);
    }

    #[test]
    fn native_iggy_message_reads_as_a_record() {
        let mut headers = BTreeMap::new();
        headers.insert(key("trace").unwrap(), raw_value(b"abc").unwrap());
        headers.insert(key(KEY_HEADER).unwrap(), raw_value(b"id-1").unwrap());
        let message = IggyMessage::builder()
            .payload(Bytes::from_static(b"payload"))
            .user_headers(headers)
            .build()
            .unwrap();
        let origin = message.header.origin_timestamp;
        let back = from_message(&with_offset(message, 3)).unwrap();
        assert_eq!(back.offset_delta, None);
        assert_eq!(back.record.key.as_deref(), Some(&b"id-1"[..]));
        assert_eq!(back.record.value.as_deref(), Some(&b"payload"[..]));
        assert_eq!(back.record.headers, vec![h("trace", Some("abc"))]);
        assert_eq!(back.record.timestamp, (origin / 1000) as i64);
    }

    #[test]
    fn bad_envelopes_are_errors_not_panics() {
        for bytes in [
            &b""[..],
            &[0, 0, 0, 9, 1][..],
            &[
                0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0, 0, 0,
            ][..],
            &[0xff, 0xff, 0xff, 0xfe][..],
        ] {
            assert!(parse_envelope(&Bytes::copy_from_slice(bytes)).is_err());
        }
    }

    fn arb_bytes(max: usize) -> impl Strategy<Value = Option<Bytes>> {
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..max).prop_map(Bytes::from))
    }

    fn arb_record() -> impl Strategy<Value = NewRecord> {
        let name = prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..8),
            "[a-d]{1,3}".prop_map(String::into_bytes),
            "[j-m][a-z.]{0,6}".prop_map(String::into_bytes),
            Just(b"kafka.key".to_vec()),
        ];
        let header = (name, arb_bytes(300)).prop_map(|(n, v)| Header::new(Bytes::from(n), v));
        (
            any::<i64>(),
            arb_bytes(300),
            arb_bytes(600),
            proptest::collection::vec(header, 0..5),
        )
            .prop_map(|(timestamp, key, value, headers)| NewRecord {
                timestamp,
                key,
                value,
                headers,
            })
    }

    /// Records that take the native form: sorted unique names on both sides of `kafka.`.
    fn arb_native_record() -> impl Strategy<Value = NewRecord> {
        let value = proptest::collection::vec(any::<u8>(), 1..40).prop_map(Bytes::from);
        let headers = proptest::collection::btree_map("[a-z][a-z.]{0,8}", value.clone(), 0..6)
            .prop_map(|m| {
                m.into_iter()
                    .filter(|(k, _)| !k.starts_with(RESERVED_PREFIX))
                    .map(|(k, v)| Header::new(Bytes::from(k), Some(v)))
                    .collect::<Vec<_>>()
            });
        (
            any::<i64>(),
            proptest::option::of(value.clone()),
            value,
            headers,
        )
            .prop_map(|(timestamp, key, value, headers)| NewRecord {
                timestamp,
                key,
                value: Some(value),
                headers,
            })
    }

    fn sample_frame() -> BatchFrame {
        BatchFrame {
            attributes: 0x10,
            partition_leader_epoch: -1,
            base_timestamp: 1_700_000_000_000,
            producer_id: 7,
            producer_epoch: 2,
            base_sequence: 11,
            record_count: 5,
            crc: Some(0x0102_0304),
        }
    }

    proptest! {
        #[test]
        fn direct_wire_matches_the_sdk_builder(
            record in prop_oneof![arb_record(), arb_native_record()],
            delta in 0i32..1000,
            first in any::<bool>(),
            txn in proptest::option::of((any::<i64>(), proptest::option::of(any::<bool>()))),
        ) {
            let frame = first.then(sample_frame);
            let txn = txn.map(|(producer_id, marker)| TxnTag { producer_id, marker });
            for native in [true, false] {
                if native && !is_native(&record) {
                    continue;
                }
                let direct = build_wire(&record, delta, frame.as_ref(), txn.as_ref(), native, 5);
                let reference = build(&record, delta, frame.as_ref(), txn.as_ref(), native);
                match (direct, reference) {
                    (Ok(d), Ok(r)) => {
                        prop_assert_eq!(&d.user_headers, &r.user_headers);
                        prop_assert_eq!(&d.payload, &r.payload);
                        prop_assert_eq!(d.header.user_headers_length, r.header.user_headers_length);
                        prop_assert_eq!(d.header.payload_length, r.header.payload_length);
                    }
                    (Err(_), Err(_)) => {}
                    (d, r) => prop_assert!(false, "direct ok {} but builder ok {}", d.is_ok(), r.is_ok()),
                }
            }
        }

        #[test]
        fn direct_reader_matches_the_map_reader(
            record in prop_oneof![arb_record(), arb_native_record()],
            delta in 0i32..1000,
            first in any::<bool>(),
        ) {
            let frame = first.then(sample_frame);
            let message = to_message(&record, delta, frame.as_ref()).unwrap();
            let message = with_offset(IggyMessage::from_bytes(message.to_bytes()).unwrap(), 3);
            let wire = message.user_headers.clone().unwrap();
            prop_assert!(scan_headers(&wire, 0, wire.len()).is_some(), "the bridge's own headers take the direct path");
            let direct = from_message(&message).unwrap();
            prop_assert_eq!(&direct, &from_message_mapped(&message).unwrap());
            prop_assert_eq!(direct.record, record);
        }

        #[test]
        fn native_producer_headers_read_the_same_either_way(
            names in proptest::collection::btree_set("[a-z.]{1,16}", 0..6),
            payload in proptest::collection::vec(any::<u8>(), 1..20),
        ) {
            let mut headers = BTreeMap::new();
            for (i, n) in names.iter().enumerate() {
                if i % 3 == 2 {
                    headers.insert(key(n).unwrap(), HeaderValue::from(i64::try_from(i).unwrap()));
                } else {
                    headers.insert(key(n).unwrap(), raw_value(n.as_bytes()).unwrap());
                }
            }
            let message = IggyMessage::builder()
                .payload(Bytes::from(payload))
                .user_headers(headers)
                .build()
                .unwrap();
            let message = with_offset(IggyMessage::from_bytes(message.to_bytes()).unwrap(), 9);
            match (from_message(&message), from_message_mapped(&message)) {
                (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
                (Err(_), Err(_)) => {}
                (a, b) => prop_assert!(false, "direct {:?} vs mapped {:?}", a, b),
            }
        }

        #[test]
        fn header_scanner_never_panics(
            bytes in proptest::collection::vec(any::<u8>(), 0..96),
            start in any::<prop::sample::Index>(),
            end in any::<prop::sample::Index>(),
        ) {
            let len = bytes.len();
            let bytes = Bytes::from(bytes);
            let _ = scan_headers(&bytes, 0, len);
            // Any range, even one past the buffer or reversed.
            let _ = scan_headers(&bytes, start.index(len + 8), end.index(len + 8));
        }

        #[test]
        fn any_record_round_trips(record in arb_record(), delta in 0i32..1000) {
            let back = roundtrip(&record, delta, None);
            prop_assert_eq!(back.record, record);
            prop_assert_eq!(back.offset_delta, Some(delta));
        }

        #[test]
        fn envelope_parser_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = parse_envelope(&Bytes::from(bytes));
        }
    }
}

#[cfg(test)]
mod send_tests {
    use super::*;
    use iggy_binary_protocol::batch::{decode_batch_slice, verify_and_recompute_batch_checksum};
    use iggy_binary_protocol::requests::messages::send_messages::{
        RawMessage, SendMessagesEncoder,
    };

    fn rec(key: Option<&[u8]>, value: Option<&[u8]>, headers: Vec<Header>) -> NewRecord {
        NewRecord {
            timestamp: 1_700_000_000_123,
            key: key.map(Bytes::copy_from_slice),
            value: value.map(Bytes::copy_from_slice),
            headers,
        }
    }

    fn h(name: &str, value: Option<&[u8]>) -> Header {
        Header::new(
            Bytes::copy_from_slice(name.as_bytes()),
            value.map(Bytes::copy_from_slice),
        )
    }

    /// An append: its origin timestamp, and per record the record, its offset delta,
    /// its batch frame (first records only) and whether it carries its transaction.
    type Append = (u64, Vec<(NewRecord, i32, Option<BatchFrame>, bool)>);

    fn frame(crc: Option<u32>, attributes: i16) -> BatchFrame {
        BatchFrame {
            attributes,
            partition_leader_epoch: 3,
            base_timestamp: 1_700_000_000_000,
            producer_id: 42,
            producer_epoch: 1,
            base_sequence: 9,
            record_count: 4,
            crc,
        }
    }

    /// Records of every form: native with key and headers on both sides of the
    /// `kafka.` range, envelope (null value, repeated header names, null header value,
    /// an empty key), a big value, headers past Iggy's cap.
    fn records() -> Vec<NewRecord> {
        let big = vec![7u8; 5000];
        let many: Vec<Header> = (0..500)
            .map(|i| h(&format!("h{i:04}"), Some(&[1u8; 250])))
            .collect();
        vec![
            rec(
                Some(b"k"),
                Some(b"value"),
                vec![h("a", Some(b"1")), h("z", Some(b"2"))],
            ),
            rec(None, Some(b"v"), vec![]),
            rec(Some(b"key"), None, vec![]),
            rec(
                Some(b""),
                Some(b"x"),
                vec![h("b", None), h("b", Some(b"y"))],
            ),
            rec(None, Some(&big), vec![]),
            rec(None, Some(b"many"), many),
        ]
    }

    /// The reference: the SDK's messages for the same records, through its encoder.
    fn reference(appends: &[Append], first_id: u128) -> Vec<u8> {
        let mut messages = Vec::new();
        for (origin, records) in appends {
            for (record, delta, frame, txn) in records {
                let tag = if *txn {
                    frame.as_ref().and_then(|f| TxnTag::of(f, record))
                } else {
                    None
                };
                messages.push(
                    to_message_at(record, *delta, frame.as_ref(), tag.as_ref(), *origin).unwrap(),
                );
            }
        }
        let raw: Vec<RawMessage<'_>> = messages
            .iter()
            .enumerate()
            .map(|(i, m)| RawMessage {
                id: first_id + i as u128,
                origin_timestamp: m.header.origin_timestamp,
                headers: m.user_headers.as_deref(),
                payload: &m.payload,
            })
            .collect();
        let (s, t, p) = target();
        let mut buf = BytesMut::new();
        SendMessagesEncoder::encode(&mut buf, &s, &t, &p, &raw).unwrap();
        buf.to_vec()
    }

    fn target() -> (WireIdentifier, WireIdentifier, WirePartitioning) {
        (
            WireIdentifier::named("kafka-stream").unwrap(),
            WireIdentifier::named("orders").unwrap(),
            WirePartitioning::PartitionId(3),
        )
    }

    fn ours(appends: &[Append], first_id: u128, room: Option<usize>) -> SendBody {
        let (s, t, p) = target();
        let room = room.unwrap_or_else(|| send_room(&s, &t, &p));
        let wire = appends.iter().map(|a| written(a, room, None)).collect();
        let mut next = first_id;
        send_body(wire, &s, &t, &p, || {
            next += 1;
            next - 1
        })
        .unwrap()
    }

    fn appends() -> Vec<Append> {
        let records = records();
        let first: Vec<_> = records
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let f = (i == 0).then(|| frame(Some(0xdead_beef), 0));
                (r.clone(), i as i32, f, false)
            })
            .collect();
        let txn: Vec<_> = records
            .iter()
            .take(3)
            .enumerate()
            .map(|(i, r)| {
                (
                    r.clone(),
                    i as i32,
                    Some(frame(None, ATTR_TRANSACTIONAL)),
                    true,
                )
            })
            .collect();
        vec![
            (1_000_000, first),
            (1_000_500, txn),
            (
                999_900,
                records[..1]
                    .iter()
                    .map(|r| (r.clone(), 0, None, false))
                    .collect(),
            ),
        ]
    }

    #[test]
    fn a_send_is_byte_for_byte_the_sdks() {
        let appends = appends();
        for n in 1..=appends.len() {
            let group = &appends[..n];
            let expected = reference(group, 77);
            // The exact room, too little (the messages are copied), more (the body
            // starts inside it): the same bytes.
            for room in [None, Some(0), Some(5), Some(MAX_SEND_ROOM)] {
                let body = ours(group, 77, room);
                assert_eq!(
                    body.body.as_ref(),
                    expected.as_slice(),
                    "{n} appends, room {room:?}"
                );
                assert_eq!(body.first_id, 77);
                assert_eq!(
                    body.count,
                    group.iter().map(|(_, r)| r.len()).sum::<usize>()
                );
            }
        }
    }

    #[test]
    fn the_most_room_is_that_of_the_longest_names() {
        let longest = "n".repeat(iggy_binary_protocol::MAX_WIRE_NAME_LENGTH);
        let named = WireIdentifier::named(longest.as_str()).unwrap();
        let room = send_room(&named, &named, &WirePartitioning::PartitionId(u32::MAX));
        assert_eq!(MAX_SEND_ROOM, room);
        let (s, t, p) = target();
        assert!(send_room(&s, &t, &p) < MAX_SEND_ROOM);
        assert!(WireIdentifier::named(format!("{longest}n")).is_err());
    }

    #[test]
    fn a_send_passes_the_servers_checks() {
        let body = ours(&appends(), 1, None);
        let metadata = u32::from_le_bytes(body.body[..4].try_into().unwrap()) as usize;
        let batch = decode_batch_slice(&body.body[4 + metadata..]).unwrap();
        let checksum = verify_and_recompute_batch_checksum(&batch).unwrap();
        assert_eq!(checksum, batch.header.batch_checksum);
        // A flipped payload byte is caught.
        let mut bad = body.body.to_vec();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        let checked = decode_batch_slice(&bad[4 + metadata..])
            .and_then(|batch| verify_and_recompute_batch_checksum(&batch));
        assert!(checked.is_err());
    }

    /// The messages of `append`, sealed with ids from `first` (`ids` of them reserved)
    /// or left for the send when `first` is `None`.
    fn written(append: &Append, room: usize, first: Option<(u128, usize)>) -> WireMessages {
        let (origin, records) = append;
        let mut w = match first {
            Some((id, ids)) => WireMessages::sealed(room, 16, *origin, id, ids),
            None => WireMessages::new(room, 16, *origin),
        };
        for (record, delta, frame, txn) in records {
            let tag = if *txn {
                frame.as_ref().and_then(|f| TxnTag::of(f, record))
            } else {
                None
            };
            w.push(record, *delta, frame.as_ref(), tag.as_ref())
                .unwrap();
        }
        w
    }

    /// The body of a send of `wire`, `next_id` handing out `ids` in turn.
    fn body(wire: Vec<WireMessages>, ids: &[u128]) -> (SendBody, usize) {
        let (s, t, p) = target();
        let mut given = 0;
        let body = send_body(wire, &s, &t, &p, || {
            given += 1;
            ids[given - 1]
        })
        .unwrap();
        (body, given)
    }

    #[test]
    fn sealed_messages_make_the_bytes_the_send_would_make() {
        let (s, t, p) = target();
        let room = send_room(&s, &t, &p);
        let appends = appends();
        let (a, b, early) = (&appends[0], &appends[1], &appends[2]);
        let (na, nb) = (a.1.len(), b.1.len());
        let high = 0xabcd_u128 << 64;
        let from = |first: u128, n: usize| (0..n).map(|i| nth_id(first, i)).collect::<Vec<_>>();

        // Alone: its own ids, none asked of the send; the same bytes.
        let first = high | 7;
        let (sealed, asked) = body(vec![written(a, room, Some((first, na)))], &[]);
        let (plain, _) = body(vec![written(a, room, None)], &from(first, na));
        assert_eq!(asked, 0);
        assert_eq!(sealed.body, plain.body);
        assert_eq!(sealed.first_id, first);

        // Its ids wrap in the low 64 bits, as the send's own numbering does.
        let first = high | u128::from(u64::MAX - 1);
        assert_eq!(nth_id(first, 3), high | 1);
        let (sealed, _) = body(vec![written(a, room, Some((first, na)))], &[]);
        let (plain, _) = body(vec![written(a, room, None)], &from(first, na));
        assert_eq!(sealed.body, plain.body);

        // Leading a send: kept; the next append is numbered by the send, in its place.
        let (lead, other) = (high | 100, high | 900);
        let (sealed, asked) = body(
            vec![
                written(a, room, Some((lead, na))),
                written(b, room, Some((high | 500, nb))),
            ],
            &from(other, nb),
        );
        let mut ids = from(lead, na);
        ids.extend(from(other, nb));
        let (plain, _) = body(vec![written(a, room, None), written(b, room, None)], &ids);
        assert_eq!(asked, nb);
        assert_eq!(sealed.body, plain.body);
        assert_eq!(sealed.first_id, lead);

        // Not the send's earliest origin, or more messages than ids: numbered by the send.
        for (wire, n) in [
            (
                vec![
                    written(a, room, Some((lead, na))),
                    written(early, room, None),
                ],
                na + early.1.len(),
            ),
            (vec![written(a, room, Some((lead, na - 1)))], na),
        ] {
            let plain_wire = if n == na {
                vec![written(a, room, None)]
            } else {
                vec![written(a, room, None), written(early, room, None)]
            };
            let (sealed, asked) = body(wire, &from(other, n));
            let (plain, _) = body(plain_wire, &from(other, n));
            assert_eq!(asked, n);
            assert_eq!(sealed.body, plain.body);
            assert_eq!(sealed.first_id, other);
        }
    }

    #[test]
    fn a_sealed_send_passes_the_servers_checks_and_a_rewrite_is_sealed_again() {
        let (s, t, p) = target();
        let room = send_room(&s, &t, &p);
        let records = records();
        for crc in [None, Some(5)] {
            let mut w = WireMessages::sealed(room, 0, 10, 40, records.len());
            let mut direct = WireMessages::new(room, 0, 10);
            let mark = w.mark();
            w.push(&records[0], 0, Some(&frame(Some(1), 0)), None)
                .unwrap();
            direct
                .push(&records[0], 0, Some(&frame(crc, 0)), None)
                .unwrap();
            for r in &records[1..] {
                w.push(r, 1, None, None).unwrap();
                direct.push(r, 1, None, None).unwrap();
            }
            w.rewrite(mark, &records[0], 0, Some(&frame(crc, 0)), None)
                .unwrap();
            assert_eq!(w.sealed_first_id(), Some(40));
            let (sealed, asked) = body(vec![w], &[]);
            let ids: Vec<u128> = (40..40 + records.len() as u128).collect();
            let (plain, _) = body(vec![direct], &ids);
            assert_eq!(asked, 0);
            assert_eq!(sealed.body, plain.body);
            let metadata = u32::from_le_bytes(sealed.body[..4].try_into().unwrap()) as usize;
            let batch = decode_batch_slice(&sealed.body[4 + metadata..]).unwrap();
            let checksum = verify_and_recompute_batch_checksum(&batch).unwrap();
            assert_eq!(checksum, batch.header.batch_checksum);
        }
    }

    #[test]
    fn data_bytes_count_payloads_and_user_headers() {
        let mut w = WireMessages::new(0, 0, 1);
        let mut expected = 0;
        for r in records() {
            let m = to_message_at(&r, 1, None, None, 1).unwrap();
            expected += m.payload.len() + m.user_headers.as_ref().map_or(0, Bytes::len);
            w.push(&r, 1, None, None).unwrap();
        }
        assert_eq!(w.data_bytes(), expected);
        assert_eq!(w.count(), records().len());
    }

    #[test]
    fn a_rewritten_first_message_is_the_one_written_so() {
        for crc in [None, Some(5)] {
            let records = records();
            let mut w = WireMessages::new(0, 0, 10);
            let mark = w.mark();
            w.push(&records[0], 0, Some(&frame(Some(1), 0)), None)
                .unwrap();
            for r in &records[1..] {
                w.push(r, 1, None, None).unwrap();
            }
            w.rewrite(mark, &records[0], 0, Some(&frame(crc, 0)), None)
                .unwrap();
            let mut direct = WireMessages::new(0, 0, 10);
            direct
                .push(&records[0], 0, Some(&frame(crc, 0)), None)
                .unwrap();
            for r in &records[1..] {
                direct.push(r, 1, None, None).unwrap();
            }
            assert_eq!(w.buf, direct.buf);
            assert_eq!(w.data_bytes(), direct.data_bytes());
            assert_eq!(w.count(), direct.count());
        }
    }

    #[test]
    fn unrepresentable_records_write_nothing_and_sends_refuse_nothing() {
        let mut w = WireMessages::new(3, 0, 0);
        let huge = rec(
            None,
            Some(&vec![0u8; MAX_PAYLOAD_SIZE as usize + 1]),
            vec![],
        );
        assert!(w.push(&huge, 0, None, None).is_err());
        assert!(w.is_empty());
        assert_eq!(w.wire_len(), 0);
        let (s, t, p) = target();
        assert!(matches!(
            send_body(vec![w], &s, &t, &p, || 1),
            Err(IggyError::InvalidMessagesCount)
        ));
        let late = WireMessages::new(0, 0, MAX_TIMESTAMP_DELTA_MICROS + 2);
        let mut early = WireMessages::new(0, 0, 1);
        early.push(&records()[1], 0, None, None).unwrap();
        let mut late = late;
        late.push(&records()[1], 0, None, None).unwrap();
        assert!(matches!(
            send_body(vec![early, late], &s, &t, &p, || 1),
            Err(IggyError::InvalidMessageTimestampDelta(_))
        ));
    }
}

impl AsRef<NewRecord> for MappedRecord {
    fn as_ref(&self) -> &NewRecord {
        &self.record
    }
}

/// [`from_message`] for a message the caller is done with (a poll's answer): its payload
/// moves into the record instead of being shared once more and dropped with the message.
pub fn from_polled(mut message: IggyMessage) -> Result<MappedRecord, MappingError> {
    let scanned = match &message.user_headers {
        Some(wire) => scan_headers(wire, 0, wire.len()),
        None => Some(Scanned::default()),
    };
    match scanned {
        Some(scanned) => {
            let payload = std::mem::take(&mut message.payload);
            let frame = frame_in(message.user_headers.as_ref(), &scanned);
            from_scanned(
                message.header.offset,
                message.header.origin_timestamp,
                frame,
                payload,
                scanned,
            )
        }
        None => from_message_mapped(&message),
    }
}

fn encode_run_of<R: AsRef<NewRecord>>(
    base_offset: i64,
    frame: Option<&BatchFrame>,
    records: &[R],
    out: &mut BytesMut,
) -> Result<(), RecordsError> {
    let options = match frame {
        Some(frame) => frame.options(base_offset)?,
        None => BatchOptions {
            base_offset,
            compression: Compression::None,
            timestamp_type: TimestampType::CreateTime,
            ..BatchOptions::default()
        },
    };
    encode_batch_of(&options, records, frame.and_then(|f| f.crc), out)
}

#[cfg(test)]
pub(crate) mod fetch_tests {
    use super::*;

    /// The records of a decoded Kafka batch.
    pub(crate) fn records_of(batch: &kafka_records::RecordBatch) -> Vec<NewRecord> {
        batch
            .records()
            .unwrap()
            .map(|r| NewRecord::from(r.unwrap()))
            .collect()
    }

    fn polled(message: IggyMessage, offset: u64) -> IggyMessage {
        // Through the wire form, as a poll would deliver it.
        let mut message = IggyMessage::from_bytes(message.to_bytes()).unwrap();
        message.header.offset = offset;
        message
    }

    fn header(name: &str, value: &[u8]) -> Header {
        Header::new(
            Bytes::copy_from_slice(name.as_bytes()),
            Some(Bytes::copy_from_slice(value)),
        )
    }

    /// One producer batch of every shape the mapping writes: native with and without
    /// key and headers, envelope (null value, empty header value), transactional.
    pub(crate) fn batch() -> (BatchFrame, Vec<NewRecord>) {
        let records = vec![
            NewRecord {
                timestamp: 1_700_000_000_000,
                key: Some(Bytes::from_static(b"key")),
                value: Some(Bytes::from(vec![7u8; 1000])),
                headers: vec![header("a", b"1"), header("z", b"2")],
            },
            NewRecord {
                timestamp: 1_699_999_999_990,
                key: None,
                value: Some(Bytes::from_static(b"v")),
                headers: Vec::new(),
            },
            NewRecord {
                timestamp: 1_700_000_000_005,
                key: Some(Bytes::from_static(b"k")),
                value: None,
                headers: vec![header("h", b"")],
            },
            NewRecord {
                timestamp: 1_700_000_000_006,
                key: None,
                value: Some(Bytes::from(vec![1u8; 100])),
                headers: vec![header("kafka-ish", b"x")],
            },
        ];
        let frame = BatchFrame {
            attributes: ATTR_TRANSACTIONAL,
            partition_leader_epoch: 3,
            base_timestamp: 1_700_000_000_000,
            producer_id: 77,
            producer_epoch: 2,
            base_sequence: 10,
            record_count: 4,
            crc: None,
        };
        (frame, records)
    }

    fn messages(frame: &BatchFrame, records: &[NewRecord]) -> Vec<IggyMessage> {
        records
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let first = (i == 0).then_some(frame);
                let txn = TxnTag::of(frame, r);
                let m = to_message_at(r, i as i32, first, txn.as_ref(), 1_000_000).unwrap();
                polled(m, 100 + i as u64)
            })
            .collect()
    }

    #[test]
    fn a_consumed_message_reads_as_the_borrowed_one_does() {
        let (frame, records) = batch();
        let messages = messages(&frame, &records);
        assert!(messages.iter().any(|m| {
            let mapped = from_message(m).unwrap();
            mapped.envelope
        }));
        for m in messages {
            let borrowed = from_message(&m).unwrap();
            assert_eq!(from_polled(m).unwrap(), borrowed);
        }
        // A native Iggy producer's message, and one with headers the scanner leaves to
        // the map-based reader (an Int64 name), read the same both ways too.
        let native = polled(
            IggyMessage::builder()
                .payload(Bytes::from_static(b"plain"))
                .build()
                .unwrap(),
            5,
        );
        let mut map = BTreeMap::new();
        map.insert(HeaderKey::from(7i64), HeaderValue::from(1i64));
        let odd = polled(
            IggyMessage::builder()
                .payload(Bytes::from_static(b"odd"))
                .user_headers(map)
                .build()
                .unwrap(),
            6,
        );
        for m in [native, odd] {
            let borrowed = from_message(&m).unwrap();
            assert_eq!(from_polled(m).unwrap(), borrowed);
        }
    }

    #[test]
    fn a_run_encodes_where_it_lies_as_the_collected_records_do() {
        let (frame, records) = batch();
        let mapped: Vec<MappedRecord> = messages(&frame, &records)
            .into_iter()
            .map(|m| from_polled(m).unwrap())
            .collect();
        let plain: Vec<NewRecord> = mapped.iter().map(|m| m.record.clone()).collect();
        assert_eq!(plain, records);
        let partial = partial_frame(&mapped[1], Some(&frame), 3);
        for (at, f, n) in [(0, Some(&frame), 4), (1, partial.as_ref(), 3), (2, None, 2)] {
            let (mut collected, mut in_place) = (BytesMut::new(), BytesMut::new());
            encode_run(
                100 + at,
                f,
                &plain[at as usize..at as usize + n],
                &mut collected,
            )
            .unwrap();
            encode_run(
                100 + at,
                f,
                &mapped[at as usize..at as usize + n],
                &mut in_place,
            )
            .unwrap();
            assert_eq!(collected, in_place);
            assert!(collected.len() > 61);
        }
    }
}

#[cfg(test)]
mod batch_tests {
    use super::*;
    use kafka_records::{ControlRecord, ControlRecordType, DecodeLimits, encode_batch};
    use proptest::prelude::*;

    fn bytes(len: std::ops::Range<usize>) -> impl Strategy<Value = Bytes> {
        proptest::collection::vec(any::<u8>(), len).prop_map(Bytes::from)
    }

    /// Mostly records `push_batch` writes in place (keys around the 255-byte edge,
    /// empty and null values among them), some with headers.
    fn arb_record() -> impl Strategy<Value = NewRecord> {
        let timestamp = prop_oneof![
            8 => 1_700_000_000_000i64..1_700_000_100_000,
            1 => Just(-1i64),
            1 => any::<i64>(),
        ];
        let key = prop_oneof![
            4 => Just(None),
            4 => bytes(1..20).prop_map(Some),
            1 => bytes(250..260).prop_map(Some),
            1 => Just(Some(Bytes::new())),
        ];
        let value = prop_oneof![
            8 => bytes(1..64).prop_map(Some),
            1 => Just(Some(Bytes::new())),
            1 => Just(None),
        ];
        let header = ("[a-z.]{0,10}", proptest::option::of(bytes(0..8)))
            .prop_map(|(k, v)| Header::new(Bytes::from(k), v));
        let headers = prop_oneof![
            6 => Just(Vec::new()),
            1 => proptest::collection::vec(header, 1..4),
        ];
        (timestamp, key, value, headers).prop_map(|(timestamp, key, value, headers)| NewRecord {
            timestamp,
            key,
            value,
            headers,
        })
    }

    fn marker(commit: bool) -> NewRecord {
        let kind = if commit {
            ControlRecordType::Commit
        } else {
            ControlRecordType::Abort
        };
        let key = ControlRecord { version: 0, kind }.to_key();
        NewRecord {
            timestamp: 1_700_000_000_000,
            key: Some(Bytes::copy_from_slice(&key)),
            value: Some(Bytes::from_static(&[0, 0, 0, 0, 0, 5])),
            headers: Vec::new(),
        }
    }

    fn arb_batch() -> impl Strategy<Value = Bytes> {
        let compression = prop_oneof![Just(Compression::None), Just(Compression::Lz4)];
        let timestamp_type = prop_oneof![
            Just(TimestampType::CreateTime),
            Just(TimestampType::LogAppendTime)
        ];
        let records = prop_oneof![
            8 => proptest::collection::vec(arb_record(), 1..12),
            1 => any::<bool>().prop_map(|c| vec![marker(c)]),
        ];
        (compression, timestamp_type, any::<bool>(), records).prop_map(
            |(compression, timestamp_type, transactional, records)| {
                let control = records[0].key.as_ref().is_some_and(|k| k.len() == 4)
                    && records.len() == 1
                    && records[0].value.as_deref() == Some(&[0, 0, 0, 0, 0, 5][..]);
                let options = BatchOptions {
                    compression,
                    timestamp_type,
                    transactional: transactional || control,
                    control,
                    producer_id: 77,
                    producer_epoch: 2,
                    base_sequence: 5,
                    ..BatchOptions::default()
                };
                let mut out = BytesMut::new();
                encode_batch(&options, &records, &mut out).unwrap();
                out.freeze()
            },
        )
    }

    fn mapped(
        batches: &[Bytes],
        in_place: bool,
    ) -> (Result<(), MappingError>, Vec<u8>, usize, usize) {
        let mut w = WireMessages::new(16, 0, 9);
        let mut result = Ok(());
        for bytes in batches {
            let batch = RecordBatch::decode(bytes, &DecodeLimits::default()).unwrap();
            let section = batch.records_section().unwrap();
            result = if in_place {
                w.push_batch(&batch, &section)
            } else {
                w.push_batch_by_records(&batch, &section)
            };
            if result.is_err() {
                break;
            }
        }
        (result, w.buf.to_vec(), w.count, w.data_bytes)
    }

    proptest! {
        #[test]
        fn in_place_writes_what_record_by_record_writes(
            batches in proptest::collection::vec(arb_batch(), 1..4),
        ) {
            prop_assert_eq!(mapped(&batches, true), mapped(&batches, false));
        }
    }

    /// A plain batch of the usual shape, exact and inexact: both ways agree, and the
    /// first message carries the producer's CRC only when the batch re-encodes exactly.
    #[test]
    fn the_crc_is_kept_only_for_exact_batches() {
        let records: Vec<NewRecord> = (0..5)
            .map(|i| NewRecord {
                timestamp: 1_700_000_000_000 + i,
                key: (i % 2 == 0).then(|| Bytes::from(vec![b'k'; 3])),
                value: Some(Bytes::from(vec![b'v'; 10])),
                headers: Vec::new(),
            })
            .collect();
        for compression in [Compression::None, Compression::Lz4] {
            let mut out = BytesMut::new();
            let options = BatchOptions {
                compression,
                ..BatchOptions::default()
            };
            encode_batch(&options, &records, &mut out).unwrap();
            let bytes = out.freeze();
            let crc = RecordBatch::decode(&bytes, &DecodeLimits::default())
                .unwrap()
                .header()
                .crc;
            let (result, buf, count, _) = mapped(std::slice::from_ref(&bytes), true);
            assert!(result.is_ok());
            assert_eq!(count, 5);
            assert_eq!((result, buf.clone(), count), {
                let (r, b, c, _) = mapped(std::slice::from_ref(&bytes), false);
                (r, b, c)
            });
            let le = |at: usize| u32::from_le_bytes(buf[at..at + 4].try_into().unwrap()) as usize;
            let start = 16 + BATCH_MESSAGE_HEADER_SIZE + le(16 + AT_PAYLOAD_LEN);
            let scanned = plain_headers(&buf, start, start + le(16 + AT_HEADERS_LEN)).unwrap();
            let (delta, frame, _) = scanned.frame(&buf).unwrap();
            assert_eq!(delta, 0);
            let frame = frame.unwrap();
            let expect = (compression == Compression::None).then_some(crc);
            assert_eq!(frame.crc, expect);
        }
    }
}
