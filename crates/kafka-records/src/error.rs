//! The crate's error type, [`RecordsError`], and the Kafka error code a broker answers
//! for each of its variants.
//!
//! Byte offsets in the variants are relative to the start of the batch for header-level
//! problems and to the start of the (decompressed) records section for record-level ones.
//!
//! Code choices, where Kafka leaves room:
//!
//! - Damage that a checksum or length would catch in transit (CRC mismatch, a batch
//!   shorter than its header says, undecodable compressed bytes) is `CORRUPT_MESSAGE` (2).
//! - A batch that arrived intact but is built wrongly (magic other than 2, malformed
//!   record, record count that disagrees with the records) is `INVALID_RECORD` (87), as
//!   Kafka's `InvalidRecordException`.
//! - Both limits ([`crate::DecodeLimits`]) answer `MESSAGE_TOO_LARGE` (10), not
//!   `RECORD_LIST_TOO_LARGE` (18): on 10 the Java producer splits a multi-record batch and
//!   retries the halves, which converges under either limit, while 18 fails the batch for
//!   good.
//! - Failures on the encoding side are the gateway's own fault and answer
//!   `UNKNOWN_SERVER_ERROR` (-1).

use kafka_protocol::ErrorCode;

use crate::codec::Compression;

/// Everything that can go wrong decoding, encoding or rewriting a record batch.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordsError {
    /// The input ends inside a batch.
    #[error("truncated {what} at byte {offset}: needed {needed} bytes, {available} available")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Where it starts.
        offset: usize,
        /// Bytes it needs.
        needed: usize,
        /// Bytes the input has from `offset`.
        available: usize,
    },

    /// Bytes meant to hold exactly one whole batch hold another number of batches, or a
    /// partial one after it.
    #[error("expected exactly one whole batch, found {batches} and {tail} bytes after them")]
    NotOneBatch {
        /// Whole batches found.
        batches: usize,
        /// Bytes after the last whole batch.
        tail: usize,
    },

    /// `batchLength` is smaller than a batch header, or negative.
    #[error("invalid batch length {found}: a v2 batch needs at least {min}")]
    InvalidBatchLength {
        /// The length on the wire.
        found: i32,
        /// The smallest valid length.
        min: i32,
    },

    /// The stored CRC-32C does not match the bytes it covers.
    #[error(
        "CRC mismatch in batch at base offset {base_offset}: stored {expected:#010x}, computed {found:#010x}"
    )]
    CrcMismatch {
        /// Base offset of the batch.
        base_offset: i64,
        /// CRC stored in the batch.
        expected: u32,
        /// CRC computed over attributes..end.
        found: u32,
    },

    /// The batch is not magic 2 (legacy message sets are not supported).
    #[error("unsupported magic {found} in batch at base offset {base_offset}, expected 2")]
    UnsupportedMagic {
        /// Base offset of the batch.
        base_offset: i64,
        /// The magic byte on the wire.
        found: i8,
    },

    /// The codec in the attributes is unknown (5-7) or compiled out of this build.
    #[error("compression codec {codec_id} is {reason}")]
    UnsupportedCompression {
        /// Codec id from attribute bits 0-2.
        codec_id: u8,
        /// `"unknown"` or `"not enabled in this build"`.
        reason: &'static str,
    },

    /// The compressed records could not be decompressed.
    #[error("{codec:?} decompression failed: {reason}")]
    Decompression {
        /// The batch codec.
        codec: Compression,
        /// What the decompressor reported.
        reason: String,
    },

    /// The records inflate (or claim to inflate) past `max_decompressed_bytes`.
    #[error("{codec:?} records inflate past the limit of {limit} bytes")]
    DecompressedTooLarge {
        /// The batch codec.
        codec: Compression,
        /// The limit in force.
        limit: usize,
    },

    /// `recordCount` exceeds `max_records_per_batch`.
    #[error("batch at base offset {base_offset} claims {found} records, limit is {limit}")]
    TooManyRecords {
        /// Base offset of the batch.
        base_offset: i64,
        /// `recordCount` on the wire.
        found: i32,
        /// The limit in force.
        limit: usize,
    },

    /// `recordCount` is negative, or larger than the records section could hold.
    #[error("batch at base offset {base_offset} claims {found} records in {available} bytes")]
    InvalidRecordCount {
        /// Base offset of the batch.
        base_offset: i64,
        /// `recordCount` on the wire.
        found: i32,
        /// Bytes of the (decompressed) records section.
        available: usize,
    },

    /// The records section ends before `recordCount` records were read.
    #[error("batch at base offset {base_offset} declares {expected} records but holds {found}")]
    RecordCountMismatch {
        /// Base offset of the batch.
        base_offset: i64,
        /// `recordCount` on the wire.
        expected: i32,
        /// Records actually read.
        found: usize,
    },

    /// `lastOffsetDelta` is not the record count minus one.
    #[error(
        "batch at base offset {base_offset} holds {records} records but its last offset delta is {last_offset_delta}"
    )]
    LastOffsetDeltaMismatch {
        /// Base offset of the batch.
        base_offset: i64,
        /// `lastOffsetDelta` on the wire.
        last_offset_delta: i32,
        /// Records in the batch.
        records: i32,
    },

    /// A record's offset delta is not its index in the batch (Kafka refuses such a batch
    /// with `INVALID_RECORD`: offsets inside a batch are consecutive from the base).
    #[error("batch at base offset {base_offset}: record {index} has offset delta {offset_delta}")]
    OffsetDeltaMismatch {
        /// Base offset of the batch.
        base_offset: i64,
        /// The record's position in the batch.
        index: i64,
        /// Its offset delta on the wire.
        offset_delta: i32,
    },

    /// Bytes remain after the last declared record.
    #[error("batch at base offset {base_offset}: {extra} bytes left after its {expected} records")]
    TrailingRecordBytes {
        /// Base offset of the batch.
        base_offset: i64,
        /// `recordCount` on the wire.
        expected: i32,
        /// Bytes left over.
        extra: usize,
    },

    /// A varint inside a record is too long or runs past the record.
    #[error("invalid varint for {what} at byte {offset} of the records")]
    InvalidVarint {
        /// The field being read.
        what: &'static str,
        /// Where the varint starts.
        offset: usize,
    },

    /// A length inside a record is negative where it may not be, or runs past the record.
    #[error("invalid {what} {found} at byte {offset} of the records")]
    InvalidLength {
        /// The field being read.
        what: &'static str,
        /// The length on the wire.
        found: i64,
        /// Where the length starts.
        offset: usize,
    },

    /// A record's fields do not add up to its declared length.
    #[error("record at byte {offset} declares {expected} bytes but its fields use {found}")]
    RecordSizeMismatch {
        /// Where the record starts.
        offset: usize,
        /// Declared length.
        expected: usize,
        /// Bytes its fields used.
        found: usize,
    },

    /// A record in a control batch has no valid control key.
    #[error("invalid control record at byte {offset}: {reason}")]
    InvalidControlRecord {
        /// Where the record starts.
        offset: usize,
        /// What is wrong with the key.
        reason: &'static str,
    },

    /// Encoding failed in the compressor.
    #[error("{codec:?} compression failed: {reason}")]
    Compression {
        /// The requested codec.
        codec: Compression,
        /// What the compressor reported.
        reason: String,
    },

    /// A value does not fit the wire type while encoding.
    #[error("{what} of {found} does not fit the wire format")]
    EncodeOverflow {
        /// What overflowed.
        what: &'static str,
        /// Its size.
        found: usize,
    },

    /// A [`crate::BatchWriter`] was used in a way it cannot write: a codec, or a record
    /// after an earlier one failed.
    #[error("batch writer: {0}")]
    Unwritable(&'static str),
}

impl RecordsError {
    /// The Kafka error code a broker answers for this error in a Produce response.
    ///
    /// See the module documentation for the reasoning behind each choice.
    pub fn kafka_error_code(&self) -> ErrorCode {
        match self {
            Self::Truncated { .. }
            | Self::NotOneBatch { .. }
            | Self::InvalidBatchLength { .. }
            | Self::CrcMismatch { .. }
            | Self::Decompression { .. } => ErrorCode::CORRUPT_MESSAGE,
            Self::UnsupportedMagic { .. }
            | Self::InvalidRecordCount { .. }
            | Self::RecordCountMismatch { .. }
            | Self::LastOffsetDeltaMismatch { .. }
            | Self::OffsetDeltaMismatch { .. }
            | Self::TrailingRecordBytes { .. }
            | Self::InvalidVarint { .. }
            | Self::InvalidLength { .. }
            | Self::RecordSizeMismatch { .. }
            | Self::InvalidControlRecord { .. } => ErrorCode::INVALID_RECORD,
            Self::UnsupportedCompression { .. } => ErrorCode::UNSUPPORTED_COMPRESSION_TYPE,
            Self::DecompressedTooLarge { .. } | Self::TooManyRecords { .. } => {
                ErrorCode::MESSAGE_TOO_LARGE
            }
            Self::Compression { .. } | Self::EncodeOverflow { .. } | Self::Unwritable(_) => {
                ErrorCode::UNKNOWN_SERVER_ERROR
            }
        }
    }
}
