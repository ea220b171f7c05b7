//! CRC-32C over one ~1 MiB batch (the part a batch's CRC covers), beside a memcpy of the
//! same bytes in the same group, at 1 KiB and 100-byte records: the `crc32c` crate
//! (SSE 4.2 `crc32` instructions, three streams), `crc-fast` (carry-less multiplication,
//! VPCLMULQDQ over AVX-512 where the CPU has it), which `kafka_records::crc32c` and so
//! the decoder use, and the whole `RecordBatch::decode` (frame checks, header, CRC).
//! Throughput is per batch byte.
//!
//! ```sh
//! cargo bench -p kafka-records --bench crc -- --quick
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use bytes::{Bytes, BytesMut};
use criterion::{BenchmarkId, Criterion, Throughput, black_box, criterion_group, criterion_main};
use kafka_records::{BatchOptions, DecodeLimits, NewRecord, RecordBatch, encode_batch};

const BATCH_BYTES: usize = 1024 * 1024;
/// Where the CRC-covered part of a batch starts (its attributes field).
const CRC_FROM: usize = 21;

fn batch(value_len: usize) -> Bytes {
    let count = BATCH_BYTES / (value_len + 28);
    let records: Vec<NewRecord> = (0..count)
        .map(|i| NewRecord {
            timestamp: 1_750_000_000_000 + i as i64,
            key: Some(Bytes::from(format!("key-{i:012}"))),
            value: Some(Bytes::from(vec![b'a' + (i % 26) as u8; value_len])),
            headers: vec![],
        })
        .collect();
    let mut out = BytesMut::new();
    encode_batch(&BatchOptions::default(), &records, &mut out).unwrap();
    out.freeze()
}

fn crc(c: &mut Criterion) {
    let mut group = c.benchmark_group("crc32c");
    let limits = DecodeLimits::default();
    for (name, bytes) in [("1KiB", batch(1024)), ("100B", batch(100))] {
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        let covered = &bytes[CRC_FROM..];
        group.bench_with_input(BenchmarkId::new("crc32c", name), covered, |b, covered| {
            b.iter(|| crc32c::crc32c(black_box(covered)));
        });
        group.bench_with_input(BenchmarkId::new("crc-fast", name), covered, |b, covered| {
            b.iter(|| crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, black_box(covered)));
        });
        assert_eq!(
            crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, covered),
            u64::from(crc32c::crc32c(covered))
        );
        group.bench_with_input(BenchmarkId::new("decode", name), &bytes, |b, bytes| {
            b.iter(|| RecordBatch::decode(black_box(bytes), &limits).unwrap());
        });
        group.bench_with_input(BenchmarkId::new("memcpy", name), covered, |b, covered| {
            let mut into = vec![0u8; covered.len()];
            b.iter(|| {
                into.copy_from_slice(black_box(covered));
                black_box(into[0])
            });
        });
    }
    group.finish();
}

criterion_group!(benches, crc);
criterion_main!(benches);
