//! One record batch: its header, CRC-32C check, attribute bits, and the in-place
//! rewrites a broker applies on append.
//!
//! ```text
//! offset  size  field
//!  0      8     baseOffset             i64   (outside the CRC: rewritten on append)
//!  8      4     batchLength            i32   bytes after this field
//! 12      4     partitionLeaderEpoch   i32   (outside the CRC: stamped by the leader)
//! 16      1     magic                  i8    = 2
//! 17      4     crc                    u32   CRC-32C over attributes..end
//! 21      2     attributes             i16   bits 0-2 codec, 3 LogAppendTime,
//!                                            4 transactional, 5 control, 6 delete horizon
//! 23      4     lastOffsetDelta        i32
//! 27      8     baseTimestamp          i64
//! 35      8     maxTimestamp           i64
//! 43      8     producerId             i64
//! 51      2     producerEpoch          i16
//! 53      4     baseSequence           i32
//! 57      4     recordCount            i32
//! 61      ...   records                (the whole block compressed when codec != 0)
//! ```
//!
//! All integers big-endian. See KIP-98 for the format and KIP-32 for timestamp types.

use bytes::Bytes;

use crate::codec::{self, Compression};
use crate::record::{RecordRefs, Records};
use crate::{DecodeLimits, RecordsError, Result};

/// Size of `baseOffset` + `batchLength`, the part of a batch outside `batchLength`.
pub const LOG_OVERHEAD: usize = 12;
/// Size of the fixed batch header, up to the first record.
pub const BATCH_HEADER_LEN: usize = 61;

const LENGTH_OFFSET: usize = 8;
const LEADER_EPOCH_OFFSET: usize = 12;
const MAGIC_OFFSET: usize = 16;
const CRC_OFFSET: usize = 17;
const ATTRIBUTES_OFFSET: usize = 21;
const MAX_TIMESTAMP_OFFSET: usize = 35;
/// End of the CRC-covered fields an append may rewrite (attributes..maxTimestamp).
const MAX_TIMESTAMP_END: usize = 43;
/// Smallest valid `batchLength`: a header with no records.
const MIN_BATCH_LENGTH: i32 = (BATCH_HEADER_LEN - LOG_OVERHEAD) as i32;
/// A record is at least seven bytes: length, attributes, timestamp delta, offset delta,
/// key length, value length and header count, one byte each.
pub(crate) const MIN_RECORD_LEN: usize = 7;

/// How the timestamps of a batch are to be read (KIP-32).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum TimestampType {
    /// Each record carries the producer's timestamp.
    #[default]
    CreateTime,
    /// Every record's timestamp is the batch's `maxTimestamp`, set by the broker.
    LogAppendTime,
}

/// The `attributes` field of a batch header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Attributes(pub i16);

impl Attributes {
    /// Bits 0-2: compression codec id.
    pub const COMPRESSION_MASK: i16 = 0x07;
    /// Bit 3: timestamps are LogAppendTime.
    pub const LOG_APPEND_TIME: i16 = 0x08;
    /// Bit 4: the batch is part of a transaction.
    pub const TRANSACTIONAL: i16 = 0x10;
    /// Bit 5: the batch holds control records (transaction markers).
    pub const CONTROL: i16 = 0x20;
    /// Bit 6: `baseTimestamp` is a delete horizon (KIP-534, set by compaction).
    pub const DELETE_HORIZON: i16 = 0x40;

    /// Raw codec id from bits 0-2 (5-7 are unknown).
    pub fn compression_id(self) -> u8 {
        (self.0 & Self::COMPRESSION_MASK) as u8
    }

    /// The codec, or [`RecordsError::UnsupportedCompression`].
    pub fn compression(self) -> Result<Compression> {
        Compression::from_id(self.compression_id())
    }

    /// Timestamp type from bit 3.
    pub fn timestamp_type(self) -> TimestampType {
        if self.0 & Self::LOG_APPEND_TIME != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }

    /// Bit 4.
    pub fn is_transactional(self) -> bool {
        self.0 & Self::TRANSACTIONAL != 0
    }

    /// Bit 5.
    pub fn is_control(self) -> bool {
        self.0 & Self::CONTROL != 0
    }

    /// Bit 6.
    pub fn has_delete_horizon(self) -> bool {
        self.0 & Self::DELETE_HORIZON != 0
    }
}

/// The fixed fields of a batch, as on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BatchHeader {
    /// Offset of the first record (rewritten by the broker on append).
    pub base_offset: i64,
    /// Bytes after the `batchLength` field.
    pub batch_length: i32,
    /// Leader epoch stamped by the partition leader.
    pub partition_leader_epoch: i32,
    /// Format version; always 2 for a decoded batch.
    pub magic: i8,
    /// Stored CRC-32C of attributes..end.
    pub crc: u32,
    /// Codec, timestamp type, transactional and control flags.
    pub attributes: Attributes,
    /// Offset delta of the last record (kept by compaction even when records go).
    pub last_offset_delta: i32,
    /// Timestamp the record deltas are relative to.
    pub base_timestamp: i64,
    /// Largest timestamp in the batch, or the append time under LogAppendTime.
    pub max_timestamp: i64,
    /// Idempotent/transactional producer id, -1 if none.
    pub producer_id: i64,
    /// Producer epoch, -1 if none.
    pub producer_epoch: i16,
    /// Sequence number of the first record, -1 if none.
    pub base_sequence: i32,
    /// Number of records.
    pub record_count: i32,
}

fn be_i64(b: &[u8; BATCH_HEADER_LEN], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

fn be_i32(b: &[u8; BATCH_HEADER_LEN], at: usize) -> i32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    i32::from_be_bytes(a)
}

fn be_i16(b: &[u8; BATCH_HEADER_LEN], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}

impl BatchHeader {
    /// Reads the header fields, checking nothing but that 61 bytes are there.
    ///
    /// Use [`RecordBatch::decode`] to also validate length, magic and CRC.
    pub fn parse(input: &[u8]) -> Result<Self> {
        let Some(b) = input.first_chunk::<BATCH_HEADER_LEN>() else {
            return Err(RecordsError::Truncated {
                what: "batch header",
                offset: 0,
                needed: BATCH_HEADER_LEN,
                available: input.len(),
            });
        };
        Ok(Self {
            base_offset: be_i64(b, 0),
            batch_length: be_i32(b, LENGTH_OFFSET),
            partition_leader_epoch: be_i32(b, LEADER_EPOCH_OFFSET),
            magic: b[MAGIC_OFFSET] as i8,
            crc: be_i32(b, CRC_OFFSET) as u32,
            attributes: Attributes(be_i16(b, ATTRIBUTES_OFFSET)),
            last_offset_delta: be_i32(b, 23),
            base_timestamp: be_i64(b, 27),
            max_timestamp: be_i64(b, MAX_TIMESTAMP_OFFSET),
            producer_id: be_i64(b, 43),
            producer_epoch: be_i16(b, 51),
            base_sequence: be_i32(b, 53),
            record_count: be_i32(b, 57),
        })
    }

    /// Bytes the whole batch takes on the wire, `batchLength` + 12.
    pub fn total_len(&self) -> usize {
        // batch_length is validated non-negative before a header escapes decode.
        LOG_OVERHEAD + self.batch_length.max(0) as usize
    }

    /// Offset of the last record, from `lastOffsetDelta`.
    pub fn last_offset(&self) -> i64 {
        self.base_offset
            .wrapping_add(i64::from(self.last_offset_delta))
    }

    /// Offset after the batch: where the next batch starts.
    pub fn next_offset(&self) -> i64 {
        self.last_offset().wrapping_add(1)
    }
}

/// Reads `baseOffset` and `batchLength` and checks the length, returning the total size of
/// the batch starting at `input[0]`, or `None` when fewer than 12 bytes are there.
pub(crate) fn peek_total_len(input: &[u8]) -> Result<Option<usize>> {
    let Some(len) = input.get(LENGTH_OFFSET..LOG_OVERHEAD) else {
        return Ok(None);
    };
    let batch_length = i32::from_be_bytes([len[0], len[1], len[2], len[3]]);
    if batch_length < MIN_BATCH_LENGTH {
        return Err(RecordsError::InvalidBatchLength {
            found: batch_length,
            min: MIN_BATCH_LENGTH,
        });
    }
    Ok(Some(LOG_OVERHEAD + batch_length as usize))
}

/// Validates length and magic of the batch at the start of `input` and returns its total
/// size. Shared by decode and the in-place rewrites.
fn check_frame(input: &[u8]) -> Result<usize> {
    let total = match peek_total_len(input)? {
        Some(total) if total <= input.len() => total,
        Some(total) => {
            return Err(RecordsError::Truncated {
                what: "record batch",
                offset: 0,
                needed: total,
                available: input.len(),
            });
        }
        None => {
            return Err(RecordsError::Truncated {
                what: "batch header",
                offset: 0,
                needed: BATCH_HEADER_LEN,
                available: input.len(),
            });
        }
    };
    // total >= 61 here, so the magic byte is in range.
    let magic = input[MAGIC_OFFSET] as i8;
    if magic != 2 {
        let mut base = [0u8; 8];
        base.copy_from_slice(&input[..8]);
        return Err(RecordsError::UnsupportedMagic {
            base_offset: i64::from_be_bytes(base),
            found: magic,
        });
    }
    Ok(total)
}

/// A decoded, CRC-verified record batch. Records are decoded on demand by
/// [`RecordBatch::records`].
#[derive(Clone, Debug)]
pub struct RecordBatch {
    header: BatchHeader,
    compression: Compression,
    bytes: Bytes,
    limits: DecodeLimits,
}

impl RecordBatch {
    /// Decodes the batch at the start of `input` (bytes after it are ignored; see
    /// [`RecordBatch::encoded_len`]).
    ///
    /// Checks the length, magic 2, the CRC-32C, the codec and `recordCount` against
    /// `limits` and, for uncompressed batches, against the bytes present. Records are
    /// not read yet.
    pub fn decode(input: &Bytes, limits: &DecodeLimits) -> Result<Self> {
        Self::decode_inner(input, limits, true)
    }

    /// [`RecordBatch::decode`] without recomputing the CRC-32C, for bytes that already
    /// passed `decode` (a broker hands its store batches it has verified). Every other
    /// check, and every bound of record decoding, still applies: wrong bytes give errors
    /// or wrong records, never a panic.
    pub fn decode_verified(input: &Bytes, limits: &DecodeLimits) -> Result<Self> {
        Self::decode_inner(input, limits, false)
    }

    fn decode_inner(input: &Bytes, limits: &DecodeLimits, check_crc: bool) -> Result<Self> {
        let total = check_frame(input)?;
        let bytes = input.slice(..total);
        let header = BatchHeader::parse(&bytes)?;
        if check_crc {
            let computed = crc32c(&bytes[ATTRIBUTES_OFFSET..]);
            if computed != header.crc {
                return Err(RecordsError::CrcMismatch {
                    base_offset: header.base_offset,
                    expected: header.crc,
                    found: computed,
                });
            }
        }
        let compression = header.attributes.compression()?;
        let count = header.record_count;
        if count < 0 {
            return Err(RecordsError::InvalidRecordCount {
                base_offset: header.base_offset,
                found: count,
                available: total - BATCH_HEADER_LEN,
            });
        }
        if count as usize > limits.max_records_per_batch {
            return Err(RecordsError::TooManyRecords {
                base_offset: header.base_offset,
                found: count,
                limit: limits.max_records_per_batch,
            });
        }
        if compression == Compression::None {
            check_count_fits(&header, total - BATCH_HEADER_LEN)?;
        }
        Ok(Self {
            header,
            compression,
            bytes,
            limits: *limits,
        })
    }

    /// The header fields.
    pub fn header(&self) -> &BatchHeader {
        &self.header
    }

    /// The codec of the records section.
    pub fn compression(&self) -> Compression {
        self.compression
    }

    /// Timestamp type from the attributes.
    pub fn timestamp_type(&self) -> TimestampType {
        self.header.attributes.timestamp_type()
    }

    /// Whether the batch belongs to a transaction.
    pub fn is_transactional(&self) -> bool {
        self.header.attributes.is_transactional()
    }

    /// Whether the batch holds control records (commit/abort markers).
    pub fn is_control(&self) -> bool {
        self.header.attributes.is_control()
    }

    /// The whole encoded batch, header included: forward it unchanged, or copy it and
    /// rewrite with [`set_base_offset`] and [`set_log_append_time`]. After
    /// [`RecordBatch::with_header_leader_epoch`] its `partitionLeaderEpoch` is the one
    /// decoded, not the header's.
    pub fn as_bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// The same batch with `epoch` as `partitionLeaderEpoch` in [`RecordBatch::header`]
    /// only: the bytes are not copied to carry it, so [`RecordBatch::as_bytes`] keeps
    /// the epoch decoded. The CRC does not cover the field, so the bytes stay a valid
    /// batch either way; whoever copies them out writes the header's epoch into the
    /// copy ([`set_partition_leader_epoch`]).
    pub fn with_header_leader_epoch(mut self, epoch: i32) -> Self {
        self.header.partition_leader_epoch = epoch;
        self
    }

    /// Bytes the batch takes on the wire.
    pub fn encoded_len(&self) -> usize {
        self.bytes.len()
    }

    /// The records section as stored (compressed when the batch is).
    pub fn raw_records(&self) -> Bytes {
        self.bytes.slice(BATCH_HEADER_LEN..)
    }

    /// Iterates the records, decompressing first if the batch is compressed.
    ///
    /// Each call decompresses again: call it once per batch, or keep
    /// [`RecordBatch::records_section`] and iterate it with [`RecordBatch::records_in`].
    /// Uncompressed records are slices of the input; compressed ones are slices of one
    /// decompressed buffer.
    pub fn records(&self) -> Result<Records> {
        Ok(self.records_in(self.records_section()?))
    }

    /// The records section uncompressed: a slice of the batch when it is not compressed,
    /// else decompressed (within the decode limits) into one buffer.
    pub fn records_section(&self) -> Result<Bytes> {
        let section = self.raw_records();
        Ok(match self.compression {
            Compression::None => section,
            codec => {
                let data = codec::decompress(codec, &section, self.limits.max_decompressed_bytes)?;
                check_count_fits(&self.header, data.len())?;
                Bytes::from(data)
            }
        })
    }

    /// Iterates the records of `section`, a records section this batch gave with
    /// [`RecordBatch::records_section`] (no second decompression). Another buffer gives
    /// errors or other records, never a panic.
    pub fn records_in(&self, section: Bytes) -> Records {
        Records::new(section, &self.header)
    }

    /// Iterates the records of `section` read in place (see [`RecordRefs`]): the same
    /// records and errors as [`RecordBatch::records_in`], for a walk that checks every
    /// record but keeps none of them.
    pub fn record_refs_in<'a>(&self, section: &'a [u8]) -> RecordRefs<'a> {
        RecordRefs::new(section, &self.header)
    }
}

/// CRC-32C (Castagnoli, Kafka's batch checksum) of `bytes`, with the fastest
/// instructions the CPU has (detected at run time: carry-less multiplication over
/// AVX-512 registers where present, else SSE 4.2, else a table); the same value as the
/// `crc32c` crate, at about twice its speed on CPUs with VPCLMULQDQ.
pub fn crc32c(bytes: &[u8]) -> u32 {
    // A CRC-32 fits in the low 32 bits of the u64 the crate returns for every width.
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, bytes) as u32
}

fn check_count_fits(header: &BatchHeader, available: usize) -> Result<()> {
    // Records are lazy, so this is not about allocation: it rejects an impossible count
    // up front instead of after walking the whole section.
    if header.record_count as usize > available / MIN_RECORD_LEN {
        return Err(RecordsError::InvalidRecordCount {
            base_offset: header.base_offset,
            found: header.record_count,
            available,
        });
    }
    Ok(())
}

/// Rewrites `baseOffset` of the batch at the start of `batch`, as a broker does when it
/// assigns offsets on append. `baseOffset` is outside the CRC, so nothing else changes
/// and the records are not touched.
pub fn set_base_offset(batch: &mut [u8], base_offset: i64) -> Result<()> {
    check_frame(batch)?;
    batch[..8].copy_from_slice(&base_offset.to_be_bytes());
    Ok(())
}

/// Rewrites `partitionLeaderEpoch`, which is outside the CRC like `baseOffset`.
pub fn set_partition_leader_epoch(batch: &mut [u8], epoch: i32) -> Result<()> {
    check_frame(batch)?;
    batch[LEADER_EPOCH_OFFSET..LEADER_EPOCH_OFFSET + 4].copy_from_slice(&epoch.to_be_bytes());
    Ok(())
}

/// Switches the batch at the start of `batch` to LogAppendTime with `timestamp` as its
/// `maxTimestamp`, as a broker with `message.timestamp.type=LogAppendTime` does, and
/// updates the CRC. The records are not re-encoded.
///
/// The stored CRC is verified first, so a corrupt batch is refused rather than given a
/// fresh, valid checksum. Only the 22 bytes from attributes to maxTimestamp are hashed
/// twice; the records' CRC is computed once and combined.
pub fn set_log_append_time(batch: &mut [u8], timestamp: i64) -> Result<()> {
    let total = check_frame(batch)?;
    let header = BatchHeader::parse(batch)?;
    let tail_len = total - MAX_TIMESTAMP_END;
    let tail_crc = crc32c::crc32c(&batch[MAX_TIMESTAMP_END..total]);
    let head_crc = crc32c::crc32c(&batch[ATTRIBUTES_OFFSET..MAX_TIMESTAMP_END]);
    let stored = crc32c::crc32c_combine(head_crc, tail_crc, tail_len);
    if stored != header.crc {
        return Err(RecordsError::CrcMismatch {
            base_offset: header.base_offset,
            expected: header.crc,
            found: stored,
        });
    }
    let attributes = header.attributes.0 | Attributes::LOG_APPEND_TIME;
    batch[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2].copy_from_slice(&attributes.to_be_bytes());
    batch[MAX_TIMESTAMP_OFFSET..MAX_TIMESTAMP_END].copy_from_slice(&timestamp.to_be_bytes());
    let head_crc = crc32c::crc32c(&batch[ATTRIBUTES_OFFSET..MAX_TIMESTAMP_END]);
    let crc = crc32c::crc32c_combine(head_crc, tail_crc, tail_len);
    batch[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

#[cfg(test)]
mod crc_tests {
    #[test]
    fn the_checksum_is_crc32c_at_every_length_and_alignment() {
        let data: Vec<u8> = (0..5000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for start in [0, 1, 3, 7, 8] {
            for len in (0..300).chain([511, 512, 513, 1024, 4095, 4096, 4989]) {
                let Some(part) = data.get(start..start + len) else {
                    continue;
                };
                assert_eq!(super::crc32c(part), crc32c::crc32c(part), "{start}+{len}");
            }
        }
        // The check value of CRC-32C.
        assert_eq!(super::crc32c(b"123456789"), 0xe306_9283);
    }
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use kafka_protocol::ErrorCode;

    use super::*;
    use crate::{BatchOptions, NewRecord, encode_batch};

    fn sample(options: &BatchOptions) -> BytesMut {
        let records: Vec<NewRecord> = (0..3)
            .map(|i| NewRecord {
                timestamp: 1_000 + i,
                key: Some(Bytes::from(format!("k{i}"))),
                value: Some(Bytes::from_static(b"v")),
                headers: vec![],
            })
            .collect();
        let mut out = BytesMut::new();
        encode_batch(options, &records, &mut out).unwrap();
        out
    }

    #[test]
    fn header_fields_are_where_the_layout_says() {
        let options = BatchOptions {
            base_offset: 77,
            partition_leader_epoch: 5,
            producer_id: 9,
            producer_epoch: 2,
            base_sequence: 11,
            transactional: true,
            ..BatchOptions::default()
        };
        let bytes = sample(&options).freeze();
        let batch = RecordBatch::decode(&bytes, &DecodeLimits::default()).unwrap();
        let h = batch.header();
        assert_eq!(h.base_offset, 77);
        assert_eq!(h.batch_length as usize + LOG_OVERHEAD, bytes.len());
        assert_eq!(h.partition_leader_epoch, 5);
        assert_eq!(h.magic, 2);
        assert_eq!(h.last_offset_delta, 2);
        assert_eq!(h.base_timestamp, 1_000);
        assert_eq!(h.max_timestamp, 1_002);
        assert_eq!(h.producer_id, 9);
        assert_eq!(h.producer_epoch, 2);
        assert_eq!(h.base_sequence, 11);
        assert_eq!(h.record_count, 3);
        assert_eq!(h.next_offset(), 80);
        assert!(batch.is_transactional());
        assert!(!batch.is_control());
        assert_eq!(batch.timestamp_type(), TimestampType::CreateTime);
    }

    #[test]
    fn base_offset_rewrite_keeps_crc_and_records() {
        let mut bytes = sample(&BatchOptions::default());
        let before = bytes.clone();
        set_base_offset(&mut bytes, 1 << 40).unwrap();
        set_partition_leader_epoch(&mut bytes, 3).unwrap();
        assert_eq!(
            bytes[16..],
            before[16..],
            "only fields outside the CRC change"
        );
        let batch = RecordBatch::decode(&bytes.freeze(), &DecodeLimits::default()).unwrap();
        assert_eq!(batch.header().partition_leader_epoch, 3);
        let offsets: Vec<i64> = batch
            .records()
            .unwrap()
            .map(|r| r.unwrap().offset)
            .collect();
        assert_eq!(offsets, vec![1 << 40, (1 << 40) + 1, (1 << 40) + 2]);
    }

    #[test]
    fn log_append_time_rewrite_recomputes_crc_without_touching_records() {
        for compression in [Compression::None, Compression::Gzip] {
            if !compression.is_enabled() {
                continue;
            }
            let mut bytes = sample(&BatchOptions {
                compression,
                ..BatchOptions::default()
            });
            let records_before = bytes[BATCH_HEADER_LEN..].to_vec();
            set_log_append_time(&mut bytes, 5_000).unwrap();
            assert_eq!(bytes[BATCH_HEADER_LEN..], records_before[..]);
            let batch = RecordBatch::decode(&bytes.freeze(), &DecodeLimits::default()).unwrap();
            assert_eq!(batch.timestamp_type(), TimestampType::LogAppendTime);
            assert_eq!(batch.header().max_timestamp, 5_000);
            assert_eq!(batch.compression(), compression);
            for record in batch.records().unwrap() {
                assert_eq!(record.unwrap().timestamp, 5_000);
            }
        }
    }

    #[test]
    fn log_append_time_rewrite_refuses_a_corrupt_batch() {
        let mut bytes = sample(&BatchOptions::default());
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let err = set_log_append_time(&mut bytes, 5_000).unwrap_err();
        assert!(matches!(err, RecordsError::CrcMismatch { .. }), "{err}");
    }

    #[test]
    fn decode_verified_skips_only_the_crc() {
        let mut bytes = sample(&BatchOptions::default());
        let crc_byte = ATTRIBUTES_OFFSET - 1;
        bytes[crc_byte] ^= 0xff;
        let bytes = bytes.freeze();
        let limits = DecodeLimits::default();
        let err = RecordBatch::decode(&bytes, &limits).unwrap_err();
        assert!(matches!(err, RecordsError::CrcMismatch { .. }), "{err}");
        let batch = RecordBatch::decode_verified(&bytes, &limits).unwrap();
        assert!(batch.records().unwrap().all(|r| r.is_ok()));
        // Everything else is still checked.
        let mut wrong_magic = BytesMut::from(&bytes[..]);
        wrong_magic[MAGIC_OFFSET] = 1;
        assert!(RecordBatch::decode_verified(&wrong_magic.freeze(), &limits).is_err());
        let few = DecodeLimits {
            max_records_per_batch: 1,
            ..DecodeLimits::default()
        };
        assert!(RecordBatch::decode_verified(&bytes, &few).is_err());
    }

    #[test]
    fn rewrites_refuse_non_batches() {
        let mut short = [0u8; 20];
        assert!(set_base_offset(&mut short, 1).is_err());
        let mut bytes = sample(&BatchOptions::default());
        bytes[MAGIC_OFFSET] = 1;
        let err = set_base_offset(&mut bytes, 1).unwrap_err();
        assert_eq!(err.kafka_error_code(), ErrorCode::INVALID_RECORD);
    }

    #[test]
    fn magic_other_than_two_is_invalid_record() {
        let mut bytes = sample(&BatchOptions::default());
        bytes[MAGIC_OFFSET] = 1;
        let err = RecordBatch::decode(&bytes.freeze(), &DecodeLimits::default()).unwrap_err();
        assert!(matches!(
            err,
            RecordsError::UnsupportedMagic { found: 1, .. }
        ));
        assert_eq!(err.kafka_error_code(), ErrorCode::INVALID_RECORD);
    }

    /// Sets attribute bits and fixes the CRC so only the attribute is wrong.
    fn with_attributes(mut bytes: BytesMut, attributes: i16) -> Bytes {
        bytes[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2].copy_from_slice(&attributes.to_be_bytes());
        let crc = crc32c::crc32c(&bytes[ATTRIBUTES_OFFSET..]);
        bytes[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
        bytes.freeze()
    }

    #[test]
    fn unknown_codecs_are_unsupported_compression() {
        for id in 5..=7 {
            let bytes = with_attributes(sample(&BatchOptions::default()), id);
            let err = RecordBatch::decode(&bytes, &DecodeLimits::default()).unwrap_err();
            assert!(
                matches!(err, RecordsError::UnsupportedCompression { .. }),
                "{err}"
            );
            assert_eq!(
                err.kafka_error_code(),
                ErrorCode::UNSUPPORTED_COMPRESSION_TYPE
            );
        }
    }

    #[test]
    fn record_count_limits() {
        let bytes = sample(&BatchOptions::default()).freeze();
        let limits = DecodeLimits {
            max_records_per_batch: 2,
            ..DecodeLimits::default()
        };
        let err = RecordBatch::decode(&bytes, &limits).unwrap_err();
        assert!(matches!(err, RecordsError::TooManyRecords { found: 3, .. }));
        assert_eq!(err.kafka_error_code(), ErrorCode::MESSAGE_TOO_LARGE);

        // A count the bytes cannot hold is refused before any record is read.
        let mut bytes = sample(&BatchOptions::default());
        bytes[57..61].copy_from_slice(&i32::MAX.to_be_bytes());
        let crc = crc32c::crc32c(&bytes[ATTRIBUTES_OFFSET..]);
        bytes[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
        let limits = DecodeLimits {
            max_records_per_batch: usize::MAX,
            ..DecodeLimits::default()
        };
        let err = RecordBatch::decode(&bytes.freeze(), &limits).unwrap_err();
        assert!(
            matches!(err, RecordsError::InvalidRecordCount { .. }),
            "{err}"
        );
        assert_eq!(err.kafka_error_code(), ErrorCode::INVALID_RECORD);
    }

    #[test]
    fn attribute_bits() {
        let a = Attributes(0x3b);
        assert_eq!(a.compression_id(), 3);
        assert_eq!(a.timestamp_type(), TimestampType::LogAppendTime);
        assert!(a.is_transactional());
        assert!(a.is_control());
        assert!(!a.has_delete_horizon());
    }
}
