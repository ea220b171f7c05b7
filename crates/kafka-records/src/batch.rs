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
use crate::record::Records;
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
        let total = check_frame(input)?;
        let bytes = input.slice(..total);
        let header = BatchHeader::parse(&bytes)?;
        let computed = crc32c::crc32c(&bytes[ATTRIBUTES_OFFSET..]);
        if computed != header.crc {
            return Err(RecordsError::CrcMismatch {
                base_offset: header.base_offset,
                expected: header.crc,
                found: computed,
            });
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
    /// rewrite with [`set_base_offset`] and [`set_log_append_time`].
    pub fn as_bytes(&self) -> &Bytes {
        &self.bytes
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
    /// Each call decompresses again: call it once per batch. Uncompressed records are
    /// slices of the input; compressed ones are slices of one decompressed buffer.
    pub fn records(&self) -> Result<Records> {
        let section = self.raw_records();
        let data = match self.compression {
            Compression::None => section,
            codec => {
                let data = codec::decompress(codec, &section, self.limits.max_decompressed_bytes)?;
                check_count_fits(&self.header, data.len())?;
                Bytes::from(data)
            }
        };
        Ok(Records::new(data, &self.header))
    }
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
