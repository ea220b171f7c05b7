//! Compression codecs of the records section, selected by attribute bits 0-2.
//!
//! | id | codec  | format on the wire                                   | feature  |
//! |----|--------|------------------------------------------------------|----------|
//! | 0  | none   | records as they are                                  | -        |
//! | 1  | gzip   | RFC 1952, possibly several members                   | `gzip`   |
//! | 2  | snappy | raw snappy (librdkafka) or xerial framing (Java)     | `snappy` |
//! | 3  | lz4    | LZ4 frame format                                     | `lz4`    |
//! | 4  | zstd   | zstd frames                                          | `zstd`   |
//!
//! Xerial framing, written by snappy-java's `SnappyOutputStream`:
//!
//! ```text
//! 82 53 4E 41 50 50 59 00   magic "\x82SNAPPY\0"
//! i32 BE version            1
//! i32 BE compatible version 1
//! { u32 BE length, raw snappy block of that length }*   (a stream may restart with the magic)
//! ```
//!
//! A raw snappy stream cannot start with the magic: `82 53` would be a length varint and
//! the next byte, `4E`, a copy element, which is invalid before any literal.
//!
//! Decompression never trusts a size the input claims. Streaming codecs read through
//! `Read::take(limit + 1)`, so a bomb costs at most `limit + 1` bytes of output; snappy
//! declares its output size up front, which is checked against the limit (and against
//! snappy's maximum expansion ratio) before anything is allocated.

#[cfg(any(feature = "gzip", feature = "lz4", feature = "zstd"))]
use std::io::Read;

use bytes::BytesMut;

use crate::{RecordsError, Result};

/// Compression codec of a batch's records section.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Compression {
    /// No compression.
    #[default]
    None,
    /// gzip (codec id 1).
    Gzip,
    /// snappy (codec id 2).
    Snappy,
    /// LZ4 frame (codec id 3).
    Lz4,
    /// zstd (codec id 4).
    Zstd,
}

impl Compression {
    /// The codec id stored in attribute bits 0-2.
    pub fn id(self) -> u8 {
        match self {
            Self::None => 0,
            Self::Gzip => 1,
            Self::Snappy => 2,
            Self::Lz4 => 3,
            Self::Zstd => 4,
        }
    }

    /// The codec for an id, if this build can handle it.
    ///
    /// Ids 5-7 are unknown, and ids of codecs whose feature is off are refused too, both
    /// with [`RecordsError::UnsupportedCompression`].
    pub fn from_id(id: u8) -> Result<Self> {
        let codec = match id {
            0 => Self::None,
            1 => Self::Gzip,
            2 => Self::Snappy,
            3 => Self::Lz4,
            4 => Self::Zstd,
            _ => {
                return Err(RecordsError::UnsupportedCompression {
                    codec_id: id,
                    reason: "unknown",
                });
            }
        };
        if codec.is_enabled() {
            Ok(codec)
        } else {
            Err(RecordsError::UnsupportedCompression {
                codec_id: id,
                reason: "not enabled in this build",
            })
        }
    }

    /// Whether this build was compiled with the codec's feature.
    pub fn is_enabled(self) -> bool {
        match self {
            Self::None => true,
            Self::Gzip => cfg!(feature = "gzip"),
            Self::Snappy => cfg!(feature = "snappy"),
            Self::Lz4 => cfg!(feature = "lz4"),
            Self::Zstd => cfg!(feature = "zstd"),
        }
    }

    fn unsupported(self) -> RecordsError {
        RecordsError::UnsupportedCompression {
            codec_id: self.id(),
            reason: "not enabled in this build",
        }
    }
}

#[cfg(any(
    feature = "gzip",
    feature = "snappy",
    feature = "lz4",
    feature = "zstd"
))]
fn too_large(codec: Compression, limit: usize) -> RecordsError {
    RecordsError::DecompressedTooLarge { codec, limit }
}

#[cfg(any(
    feature = "gzip",
    feature = "snappy",
    feature = "lz4",
    feature = "zstd"
))]
fn corrupt(codec: Compression, reason: impl ToString) -> RecordsError {
    RecordsError::Decompression {
        codec,
        reason: reason.to_string(),
    }
}

/// A first guess at the output size that the input itself bounds, so a tiny input never
/// reserves a large buffer.
#[cfg(any(feature = "gzip", feature = "lz4", feature = "zstd"))]
fn initial_capacity(input_len: usize, limit: usize) -> usize {
    input_len.saturating_mul(4).min(limit).min(1 << 20)
}

/// Reads `reader` to its end, refusing more than `limit` bytes of output.
#[cfg(any(feature = "gzip", feature = "lz4", feature = "zstd"))]
fn read_capped(
    codec: Compression,
    reader: impl Read,
    input_len: usize,
    limit: usize,
) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(initial_capacity(input_len, limit));
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    reader
        .take(cap)
        .read_to_end(&mut out)
        .map_err(|e| corrupt(codec, e))?;
    if out.len() > limit {
        return Err(too_large(codec, limit));
    }
    Ok(out)
}

/// Decompresses a records section, refusing output larger than `limit` bytes.
pub(crate) fn decompress(codec: Compression, input: &[u8], limit: usize) -> Result<Vec<u8>> {
    #[cfg(not(any(
        feature = "gzip",
        feature = "lz4",
        feature = "zstd",
        feature = "snappy"
    )))]
    let _ = (input, limit);
    match codec {
        Compression::None => Ok(input.to_vec()),
        #[cfg(feature = "gzip")]
        Compression::Gzip => read_capped(
            codec,
            flate2::read::MultiGzDecoder::new(input),
            input.len(),
            limit,
        ),
        #[cfg(feature = "snappy")]
        Compression::Snappy => snappy::decompress(input, limit),
        #[cfg(feature = "lz4")]
        Compression::Lz4 => read_capped(
            codec,
            lz4_flex::frame::FrameDecoder::new(input),
            input.len(),
            limit,
        ),
        #[cfg(feature = "zstd")]
        Compression::Zstd => {
            let mut decoder =
                zstd::stream::read::Decoder::with_buffer(input).map_err(|e| corrupt(codec, e))?;
            // The window is allocated from the frame header, before any output exists:
            // cap it near the output limit, but never below what common encoders use
            // (2^23 covers every level up to 19 and zstd-jni's streaming defaults).
            let window_log = usize::BITS - limit.saturating_sub(1).leading_zeros();
            decoder
                .window_log_max(window_log.clamp(23, 27))
                .map_err(|e| corrupt(codec, e))?;
            read_capped(codec, decoder, input.len(), limit)
        }
        #[allow(unreachable_patterns)]
        _ => Err(codec.unsupported()),
    }
}

/// Compresses `input` with `codec`, appending to `out`.
pub(crate) fn compress(codec: Compression, input: &[u8], out: &mut BytesMut) -> Result<()> {
    #[cfg(any(feature = "gzip", feature = "lz4", feature = "zstd"))]
    use bytes::BufMut;
    #[cfg(any(feature = "gzip", feature = "lz4", feature = "zstd"))]
    use std::io::Write;
    #[cfg(any(feature = "gzip", feature = "lz4", feature = "zstd"))]
    let fail = |e: std::io::Error| RecordsError::Compression {
        codec,
        reason: e.to_string(),
    };
    match codec {
        Compression::None => {
            out.extend_from_slice(input);
            Ok(())
        }
        #[cfg(feature = "gzip")]
        Compression::Gzip => {
            let mut encoder =
                flate2::write::GzEncoder::new(out.writer(), flate2::Compression::default());
            encoder.write_all(input).map_err(fail)?;
            encoder.finish().map_err(fail)?;
            Ok(())
        }
        #[cfg(feature = "snappy")]
        Compression::Snappy => snappy::compress_xerial(input, out),
        #[cfg(feature = "lz4")]
        Compression::Lz4 => {
            // 64 KiB independent blocks without checksums: what Kafka's Java producer
            // writes, and what every consumer's LZ4 reader accepts.
            let info = lz4_flex::frame::FrameInfo::new()
                .block_size(lz4_flex::frame::BlockSize::Max64KB)
                .block_mode(lz4_flex::frame::BlockMode::Independent);
            let mut encoder = lz4_flex::frame::FrameEncoder::with_frame_info(info, out.writer());
            encoder.write_all(input).map_err(fail)?;
            encoder.finish().map_err(|e| RecordsError::Compression {
                codec,
                reason: e.to_string(),
            })?;
            Ok(())
        }
        #[cfg(feature = "zstd")]
        Compression::Zstd => {
            // Level 3 is Kafka's default `compression.zstd.level`.
            let mut encoder = zstd::stream::write::Encoder::new(out.writer(), 3).map_err(fail)?;
            encoder.write_all(input).map_err(fail)?;
            encoder.finish().map_err(fail)?;
            Ok(())
        }
        #[allow(unreachable_patterns)]
        _ => Err(codec.unsupported()),
    }
}

#[cfg(feature = "snappy")]
mod snappy {
    use bytes::{BufMut, BytesMut};

    use super::{corrupt, too_large};
    use crate::{Compression, RecordsError, Result};

    pub(super) const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
    const XERIAL_HEADER_LEN: usize = 16;
    /// snappy-java's default block size.
    const XERIAL_BLOCK: usize = 32 * 1024;
    /// No snappy element expands more than 64 bytes out of 3 in (a 2-byte-offset copy),
    /// so a block claiming more than this ratio is lying, whatever the limit.
    const MAX_EXPANSION: usize = 32;

    pub(super) fn decompress(input: &[u8], limit: usize) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        if input.starts_with(&XERIAL_MAGIC) {
            let mut rest = input.get(XERIAL_HEADER_LEN..).unwrap_or_default();
            if input.len() < XERIAL_HEADER_LEN {
                return Err(corrupt(Compression::Snappy, "truncated xerial header"));
            }
            while !rest.is_empty() {
                // snappy-java reads concatenated streams, each with its own header.
                if rest.starts_with(&XERIAL_MAGIC) && rest.len() >= XERIAL_HEADER_LEN {
                    rest = &rest[XERIAL_HEADER_LEN..];
                    continue;
                }
                let Some((len, tail)) = rest.split_first_chunk::<4>() else {
                    return Err(corrupt(
                        Compression::Snappy,
                        "truncated xerial block length",
                    ));
                };
                let len = u32::from_be_bytes(*len) as usize;
                if len > tail.len() {
                    return Err(corrupt(
                        Compression::Snappy,
                        "xerial block runs past the data",
                    ));
                }
                let (block, after) = tail.split_at(len);
                append_raw(block, &mut out, limit)?;
                rest = after;
            }
        } else {
            append_raw(input, &mut out, limit)?;
        }
        Ok(out)
    }

    fn append_raw(block: &[u8], out: &mut Vec<u8>, limit: usize) -> Result<()> {
        let codec = Compression::Snappy;
        let len = snap::raw::decompress_len(block).map_err(|e| corrupt(codec, e))?;
        if len > limit.saturating_sub(out.len()) {
            return Err(too_large(codec, limit));
        }
        if len > block.len().saturating_mul(MAX_EXPANSION) {
            return Err(corrupt(
                codec,
                "block claims more than snappy can expand to",
            ));
        }
        let start = out.len();
        out.resize(start + len, 0);
        let written = snap::raw::Decoder::new()
            .decompress(block, &mut out[start..])
            .map_err(|e| corrupt(codec, e))?;
        out.truncate(start + written);
        Ok(())
    }

    pub(super) fn compress_xerial(input: &[u8], out: &mut BytesMut) -> Result<()> {
        out.put_slice(&XERIAL_MAGIC);
        out.put_i32(1);
        out.put_i32(1);
        let mut encoder = snap::raw::Encoder::new();
        let mut scratch = vec![0u8; snap::raw::max_compress_len(XERIAL_BLOCK)];
        for chunk in input.chunks(XERIAL_BLOCK) {
            let n =
                encoder
                    .compress(chunk, &mut scratch)
                    .map_err(|e| RecordsError::Compression {
                        codec: Compression::Snappy,
                        reason: e.to_string(),
                    })?;
            // A block is at most max_compress_len(32 KiB), far below u32::MAX.
            out.put_u32(n as u32);
            out.put_slice(&scratch[..n]);
        }
        Ok(())
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn raw_and_xerial_both_decode() {
            let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
            let raw = snap::raw::Encoder::new().compress_vec(&data).unwrap();
            assert_eq!(decompress(&raw, usize::MAX).unwrap(), data);
            let mut xerial = BytesMut::new();
            compress_xerial(&data, &mut xerial).unwrap();
            assert!(xerial.starts_with(&XERIAL_MAGIC));
            assert_eq!(decompress(&xerial, usize::MAX).unwrap(), data);
            // Two xerial streams back to back read as one.
            let mut twice = xerial.to_vec();
            twice.extend_from_slice(&xerial);
            let mut expected = data.clone();
            expected.extend_from_slice(&data);
            assert_eq!(decompress(&twice, usize::MAX).unwrap(), expected);
        }

        #[test]
        fn claimed_length_is_checked_before_allocating() {
            // Varint for 4 GiB - 1, then garbage: refused without a 4 GiB buffer.
            let mut bomb = vec![0xff, 0xff, 0xff, 0xff, 0x0f];
            bomb.extend_from_slice(&[0u8; 1024]);
            assert!(matches!(
                decompress(&bomb, 64 << 20),
                Err(RecordsError::DecompressedTooLarge { .. })
            ));
            assert!(matches!(
                decompress(&bomb, usize::MAX),
                Err(RecordsError::Decompression { .. })
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::ErrorCode;

    use super::*;

    #[test]
    fn ids_round_trip_and_unknown_ids_are_refused() {
        for codec in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            if codec.is_enabled() {
                assert_eq!(Compression::from_id(codec.id()).unwrap(), codec);
            }
        }
        for id in 5..=7 {
            let err = Compression::from_id(id).unwrap_err();
            assert_eq!(
                err.kafka_error_code(),
                ErrorCode::UNSUPPORTED_COMPRESSION_TYPE
            );
        }
    }

    #[test]
    fn compiled_out_codecs_are_refused_on_both_sides() {
        for id in 1..=4 {
            let enabled = Compression::from_id(id).is_ok();
            let codec = [
                Compression::Gzip,
                Compression::Snappy,
                Compression::Lz4,
                Compression::Zstd,
            ][usize::from(id) - 1];
            assert_eq!(enabled, codec.is_enabled());
            if !enabled {
                let err = compress(codec, b"x", &mut BytesMut::new()).unwrap_err();
                assert_eq!(
                    err.kafka_error_code(),
                    ErrorCode::UNSUPPORTED_COMPRESSION_TYPE
                );
            }
        }
    }

    #[test]
    fn every_codec_round_trips_and_respects_the_limit() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 97) as u8).collect();
        for codec in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ]
        .into_iter()
        .filter(|c| c.is_enabled())
        {
            let mut out = BytesMut::new();
            compress(codec, &data, &mut out).unwrap();
            assert_eq!(
                decompress(codec, &out, data.len()).unwrap(),
                data,
                "{codec:?}"
            );
            assert!(
                matches!(
                    decompress(codec, &out, data.len() - 1),
                    Err(RecordsError::DecompressedTooLarge { .. })
                ),
                "{codec:?}"
            );
        }
    }
}
