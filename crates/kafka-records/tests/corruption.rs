//! Damaged input: flipped bits, truncation at every byte, garbage records under a valid
//! CRC, and decompression bombs. Everything must end in an error (or, for a sequence, a
//! reported partial tail), never in a panic or an allocation of a claimed size.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;

use bytes::{Bytes, BytesMut};
use kafka_protocol::ErrorCode;
use kafka_records::{
    BatchOptions, Compression, DecodeLimits, Header, NewRecord, RecordBatch, RecordsError,
    decode_batches, encode_batch,
};
use proptest::prelude::*;

fn records(n: usize) -> Vec<NewRecord> {
    (0..n)
        .map(|i| NewRecord {
            timestamp: 1_700_000_000_000 + i as i64,
            key: (i % 3 != 0).then(|| Bytes::from(format!("key-{i}"))),
            value: Some(Bytes::from(vec![b'x'; i * 7])),
            headers: vec![Header::new("h", Some(Bytes::from_static(b"v")))],
        })
        .collect()
}

fn batch(compression: Compression, n: usize) -> Bytes {
    let mut out = BytesMut::new();
    let options = BatchOptions {
        compression,
        ..BatchOptions::default()
    };
    encode_batch(&options, &records(n), &mut out).unwrap();
    out.freeze()
}

/// Decodes a batch and all its records.
fn decode_fully(bytes: &Bytes, limits: &DecodeLimits) -> Result<usize, RecordsError> {
    let batch = RecordBatch::decode(bytes, limits)?;
    let mut n = 0;
    for record in batch.records()? {
        record?;
        n += 1;
    }
    Ok(n)
}

/// Wraps a hand-made records section in a valid header with the given codec and count.
fn wrap(codec: Compression, section: &[u8], count: i32) -> Bytes {
    let mut out = BytesMut::new();
    encode_batch(&BatchOptions::default(), &[], &mut out).unwrap();
    out.extend_from_slice(section);
    let len = (out.len() - 12) as i32;
    out[8..12].copy_from_slice(&len.to_be_bytes());
    out[21..23].copy_from_slice(&i16::from(codec.id()).to_be_bytes());
    out[57..61].copy_from_slice(&count.to_be_bytes());
    let crc = crc32c::crc32c(&out[21..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    out.freeze()
}

#[test]
fn every_flipped_bit_is_caught_or_harmless() {
    for compression in [Compression::None, Compression::Gzip, Compression::Zstd] {
        let original = batch(compression, 5);
        let limits = DecodeLimits::default();
        for bit in 0..original.len() * 8 {
            let mut bytes = original.to_vec();
            bytes[bit / 8] ^= 1 << (bit % 8);
            let result = decode_fully(&Bytes::from(bytes), &limits);
            match bit / 8 {
                // baseOffset and partitionLeaderEpoch are outside the CRC by design.
                0..8 | 12..16 => assert_eq!(result.unwrap(), 5, "bit {bit}"),
                // batchLength, magic: framing errors.
                8..12 | 16 => assert!(result.is_err(), "bit {bit}"),
                // The CRC and everything it covers.
                _ => {
                    let err = result.expect_err("flip under the CRC must fail");
                    assert!(
                        matches!(err, RecordsError::CrcMismatch { .. }),
                        "bit {bit}: {err}"
                    );
                    assert_eq!(err.kafka_error_code(), ErrorCode::CORRUPT_MESSAGE);
                }
            }
        }
    }
}

#[test]
fn truncation_at_every_byte_is_an_error_or_a_tail() {
    for compression in [Compression::None, Compression::Snappy, Compression::Lz4] {
        let one = batch(compression, 4);
        let two = batch(compression, 3);
        let mut both = one.to_vec();
        both.extend_from_slice(&two);
        let both = Bytes::from(both);
        let limits = DecodeLimits::default();

        for cut in 0..one.len() {
            let err = decode_fully(&one.slice(..cut), &limits).unwrap_err();
            assert_eq!(
                err.kafka_error_code(),
                ErrorCode::CORRUPT_MESSAGE,
                "cut {cut}"
            );
        }
        for cut in 0..=both.len() {
            let seq = decode_batches(&both.slice(..cut), &limits).unwrap();
            let (whole, consumed) = if cut == both.len() {
                (2, both.len())
            } else if cut >= one.len() {
                (1, one.len())
            } else {
                (0, 0)
            };
            assert_eq!(seq.batches.len(), whole, "cut {cut}");
            assert_eq!(seq.truncated_tail, cut - consumed, "cut {cut}");
        }
    }
}

#[test]
fn a_batch_length_too_small_to_be_a_batch_is_corruption_not_a_tail() {
    let mut bytes = batch(Compression::None, 1).to_vec();
    bytes[8..12].copy_from_slice(&10i32.to_be_bytes());
    let err = decode_batches(&Bytes::from(bytes.clone()), &DecodeLimits::default()).unwrap_err();
    assert!(matches!(
        err,
        RecordsError::InvalidBatchLength { found: 10, .. }
    ));
    bytes[8..12].copy_from_slice(&(-1i32).to_be_bytes());
    let err = decode_batches(&Bytes::from(bytes), &DecodeLimits::default()).unwrap_err();
    assert_eq!(err.kafka_error_code(), ErrorCode::CORRUPT_MESSAGE);
}

#[test]
fn cannot_decode_compressed_garbage() {
    for codec in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let bytes = wrap(codec, b"definitely not compressed data", 1);
        let err = decode_fully(&bytes, &DecodeLimits::default()).unwrap_err();
        assert!(
            matches!(err, RecordsError::Decompression { .. }),
            "{codec:?}: {err}"
        );
        assert_eq!(err.kafka_error_code(), ErrorCode::CORRUPT_MESSAGE);
    }
}

const GIB4: u64 = 4 << 30;
const CAP: DecodeLimits = DecodeLimits {
    max_decompressed_bytes: 1 << 20,
    max_records_per_batch: 1_000_000,
};

fn assert_refused(bytes: &Bytes, name: &str) {
    let err = decode_fully(bytes, &CAP).unwrap_err();
    assert!(
        matches!(err, RecordsError::DecompressedTooLarge { limit, .. } if limit == CAP.max_decompressed_bytes),
        "{name}: {err}"
    );
    assert_eq!(
        err.kafka_error_code(),
        ErrorCode::MESSAGE_TOO_LARGE,
        "{name}"
    );
}

/// A zstd frame of about 1 KiB whose header claims 4 GiB and whose RLE blocks really do
/// expand, 128 KiB for every 4 bytes.
fn zstd_bomb(single_segment: bool) -> Vec<u8> {
    let mut frame = vec![0x28, 0xb5, 0x2f, 0xfd];
    if single_segment {
        // 8-byte content size, single segment: the window is the whole 4 GiB.
        frame.push(0xe0);
    } else {
        // 8-byte content size, window descriptor 2^17.
        frame.push(0xc0);
        frame.push(7 << 3);
    }
    frame.extend_from_slice(&GIB4.to_le_bytes());
    for _ in 0..250 {
        let header: u32 = (128 * 1024) << 3 | 1 << 1;
        frame.extend_from_slice(&header.to_le_bytes()[..3]);
        frame.push(0);
    }
    frame
}

#[test]
fn zstd_bomb_claiming_4_gib_is_refused_within_the_cap() {
    let frame = zstd_bomb(false);
    assert!(frame.len() < 1100);
    assert_refused(&wrap(Compression::Zstd, &frame, 1), "zstd rle");

    // Same claim, but as a window the decoder would have to allocate up front.
    let frame = zstd_bomb(true);
    let err = decode_fully(&wrap(Compression::Zstd, &frame, 1), &CAP).unwrap_err();
    assert!(
        matches!(
            err,
            RecordsError::Decompression { .. } | RecordsError::DecompressedTooLarge { .. }
        ),
        "{err}"
    );
}

#[test]
fn compressed_zeros_are_refused_within_the_cap() {
    let zeros = vec![0u8; 64 * 1024];
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let mut zs = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
    let mut lz = lz4_flex::frame::FrameEncoder::new(Vec::new());
    // 64 MiB of zeros: 64 times the cap.
    for _ in 0..1024 {
        gz.write_all(&zeros).unwrap();
        zs.write_all(&zeros).unwrap();
        lz.write_all(&zeros).unwrap();
    }
    let cases = [
        (Compression::Gzip, gz.finish().unwrap()),
        (Compression::Zstd, zs.finish().unwrap()),
        (Compression::Lz4, lz.finish().unwrap()),
    ];
    for (codec, section) in cases {
        assert_refused(&wrap(codec, &section, 1), &format!("{codec:?}"));
    }
}

#[test]
fn snappy_claiming_4_gib_is_refused_before_allocating() {
    // Raw snappy: a varint length of 4 GiB - 1 up front.
    let mut raw = vec![0xff, 0xff, 0xff, 0xff, 0x0f];
    raw.extend_from_slice(&[0u8; 1024]);
    assert_refused(&wrap(Compression::Snappy, &raw, 1), "raw snappy");

    // Xerial framing with a block making the same claim.
    let mut xerial = vec![
        0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1,
    ];
    xerial.extend_from_slice(&(raw.len() as u32).to_be_bytes());
    xerial.extend_from_slice(&raw);
    assert_refused(&wrap(Compression::Snappy, &xerial, 1), "xerial snappy");
}

#[test]
fn huge_claimed_counts_and_lengths_do_not_allocate() {
    // Two billion records claimed in a 1-record batch.
    let mut bytes = batch(Compression::None, 1).to_vec();
    bytes[57..61].copy_from_slice(&i32::MAX.to_be_bytes());
    let crc = crc32c::crc32c(&bytes[21..]);
    bytes[17..21].copy_from_slice(&crc.to_be_bytes());
    let unlimited = DecodeLimits {
        max_records_per_batch: usize::MAX,
        ..DecodeLimits::default()
    };
    let err = decode_fully(&Bytes::from(bytes), &unlimited).unwrap_err();
    assert!(
        matches!(err, RecordsError::InvalidRecordCount { .. }),
        "{err}"
    );

    // A record whose value claims i32::MAX bytes.
    let mut section = vec![0x10, 0, 0, 0, 0x01];
    section.extend_from_slice(&[0xfe, 0xff, 0xff, 0xff, 0x0f]);
    section.push(0);
    let err = decode_fully(&wrap(Compression::None, &section, 1), &unlimited).unwrap_err();
    assert_eq!(err.kafka_error_code(), ErrorCode::INVALID_RECORD, "{err}");

    // The same inside a compressed batch: the count check happens after inflating.
    let mut out = BytesMut::new();
    kafka_records::encode_batch(
        &BatchOptions {
            compression: Compression::Gzip,
            ..BatchOptions::default()
        },
        &records(1),
        &mut out,
    )
    .unwrap();
    out[57..61].copy_from_slice(&1_000_000i32.to_be_bytes());
    let crc = crc32c::crc32c(&out[21..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    let err = decode_fully(&out.freeze(), &DecodeLimits::default()).unwrap_err();
    assert!(
        matches!(err, RecordsError::InvalidRecordCount { .. }),
        "{err}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Arbitrary records sections under a valid CRC: whatever happens, it is a value.
    #[test]
    fn garbage_records_never_panic(
        section in prop::collection::vec(any::<u8>(), 0..200),
        count in -2i32..40,
        codec in prop::sample::select(vec![Compression::None, Compression::Snappy, Compression::Lz4]),
    ) {
        let _ = decode_fully(&wrap(codec, &section, count), &DecodeLimits::default());
    }

    /// The in-place walk reads what the owning one reads, record for record, and stops
    /// at the same error, on any section (valid records or garbage) under a valid CRC.
    #[test]
    fn the_in_place_walk_matches_the_owning_one(
        section in prop::collection::vec(any::<u8>(), 0..200),
        count in -2i32..40,
        valid in any::<bool>(),
        control in any::<bool>(),
    ) {
        let mut bytes = if valid {
            batch(Compression::None, usize::try_from(count.max(0)).unwrap()).to_vec()
        } else {
            wrap(Compression::None, &section, count).to_vec()
        };
        if control {
            // attributes low byte, bit 5: a control batch (keys must parse as markers).
            bytes[22] |= 0x20;
            let crc = crc32c::crc32c(&bytes[21..]);
            bytes[17..21].copy_from_slice(&crc.to_be_bytes());
        }
        let bytes = Bytes::from(bytes);
        let Ok(batch) = RecordBatch::decode(&bytes, &DecodeLimits::default()) else {
            return Ok(());
        };
        let section = batch.records_section().unwrap();
        let owned: Vec<_> = batch.records_in(section.clone()).collect();
        let refs: Vec<_> = batch.record_refs_in(&section).collect();
        prop_assert_eq!(owned.len(), refs.len());
        for (o, r) in owned.iter().zip(&refs) {
            match (o, r) {
                (Ok(o), Ok(r)) => {
                    prop_assert_eq!(o.timestamp, r.timestamp);
                    prop_assert_eq!(o.offset_delta, r.offset_delta);
                    prop_assert_eq!(o.timestamp_delta, r.timestamp_delta);
                    prop_assert_eq!(o.attributes, r.attributes);
                    prop_assert_eq!(o.key.as_deref(), r.key);
                    prop_assert_eq!(o.value.as_deref(), r.value);
                    prop_assert_eq!(o.headers.len(), r.header_count);
                    prop_assert_eq!(o.control, r.control);
                }
                (Err(o), Err(r)) => prop_assert_eq!(o.to_string(), r.to_string()),
                (o, r) => prop_assert!(false, "{o:?} vs {r:?}"),
            }
        }
    }

    /// Arbitrary bytes as a sequence of batches.
    #[test]
    fn garbage_sequences_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let bytes = Bytes::from(bytes);
        if let Ok(seq) = decode_batches(&bytes, &DecodeLimits::default()) {
            prop_assert!(seq.truncated_tail <= bytes.len());
        }
    }
}
