//! Kafka record batches, magic 2 (KIP-98), as a sans-IO library: no sockets, no runtime,
//! no async. Bytes in, typed values out, and back.
//!
//! The layers, bottom up:
//!
//! ```text
//! varint      zigzag varint / varlong used inside records
//! codec       gzip, snappy (raw and xerial), lz4 frame, zstd, each behind a feature
//! batch       the 61-byte header, CRC-32C check, attribute bits, in-place rewrites
//! record      one record, its headers, control markers, and the lazy record iterator
//! sequence    a run of batches (a Fetch or Produce `records` field) with a partial tail
//! encode      records -> one batch, with lengths, deltas, codec and CRC computed
//! ```
//!
//! Decoding is zero-copy where the format allows it: keys, values and headers of an
//! uncompressed batch are [`bytes::Bytes`] slices of the input, and a compressed batch is
//! inflated once into one buffer that the records then slice.
//!
//! Untrusted input is bounded by [`DecodeLimits`]: nothing is allocated from a length the
//! input merely claims, and decompression stops one byte past the cap.
//!
//! ```
//! use bytes::{Bytes, BytesMut};
//! use kafka_records::{decode_batches, encode_batch, BatchOptions, DecodeLimits, NewRecord};
//!
//! let records = vec![NewRecord {
//!     timestamp: 1_700_000_000_000,
//!     key: Some(Bytes::from_static(b"k")),
//!     value: None,
//!     headers: vec![],
//! }];
//! let mut out = BytesMut::new();
//! encode_batch(&BatchOptions::default(), &records, &mut out)?;
//!
//! let seq = decode_batches(&out.freeze(), &DecodeLimits::default())?;
//! assert_eq!(seq.truncated_tail, 0);
//! for record in seq.batches[0].records()? {
//!     let record = record?;
//!     assert_eq!(record.key.as_deref(), Some(&b"k"[..]));
//!     assert_eq!(record.value, None);
//! }
//! # Ok::<(), kafka_records::RecordsError>(())
//! ```

mod batch;
mod codec;
mod encode;
mod error;
mod record;
mod retain;
mod sequence;
mod varint;

pub use batch::{
    Attributes, BATCH_HEADER_LEN, BatchHeader, LOG_OVERHEAD, RecordBatch, TimestampType, crc32c,
    set_base_offset, set_log_append_time, set_partition_leader_epoch,
};
pub use codec::Compression;
pub use encode::{
    BatchOptions, BatchWriter, ExactReencoding, NewRecord, encode_batch, encode_batch_of,
    encode_batch_with_crc, encode_batch_with_section,
};
pub use error::RecordsError;
pub use record::{
    ControlRecord, ControlRecordType, Header, Headers, HeadersIter, Record, RecordRef, RecordRefs,
    Records,
};
pub use retain::{Retained, encode_retained};
pub use sequence::{BatchSequence, Batches, decode_batches};

/// Crate-wide result alias.
pub type Result<T, E = RecordsError> = std::result::Result<T, E>;

/// Bounds applied while decoding untrusted batches.
///
/// A batch whose header claims more records than `max_records_per_batch`, or whose
/// compressed records inflate past `max_decompressed_bytes`, is refused with an error
/// before (not after) memory of that size is committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeLimits {
    /// Largest decompressed records section accepted for one batch, in bytes.
    pub max_decompressed_bytes: usize,
    /// Largest `recordCount` accepted in one batch header.
    pub max_records_per_batch: usize,
}

impl Default for DecodeLimits {
    /// 64 MiB decompressed and one million records per batch: above what any Kafka
    /// client writes with default settings (`max.request.size` is 1 MiB), far below what
    /// would hurt a gateway that decodes a few batches at a time.
    fn default() -> Self {
        Self {
            max_decompressed_bytes: 64 * 1024 * 1024,
            max_records_per_batch: 1_000_000,
        }
    }
}
