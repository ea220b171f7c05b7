//! Decode throughput per codec for a ~1 MiB batch of 1 KiB records, against two ceilings
//! measured in the same run: CRC-32C over the same (uncompressed) batch bytes, and a
//! memcpy of them. Every figure is reported per uncompressed batch byte, so the codecs
//! and the ceilings share one unit.
//!
//! Decode here means what a broker does with a Produce batch: frame and CRC check,
//! decompression, and walking every record while touching its key and value.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::{Bytes, BytesMut};
use criterion::{BenchmarkId, Criterion, Throughput, black_box, criterion_group, criterion_main};
use kafka_records::{
    BatchOptions, Compression, DecodeLimits, ExactReencoding, Header, NewRecord, RecordBatch,
    encode_batch, encode_batch_with_crc,
};

const RECORDS: usize = 1024;
const VALUE_LEN: usize = 1024;

/// Log-line-like values: compressible, but not trivially (a fixed alphabet of tokens
/// chosen by a xorshift generator).
fn records() -> Vec<NewRecord> {
    let words: [&[u8]; 12] = [
        b"GET ",
        b"POST ",
        b"/api/v1/orders/",
        b"user=",
        b"status=200 ",
        b"status=404 ",
        b"latency_ms=",
        b"region=eu-west-1 ",
        b"trace=",
        b"{\"id\":",
        b"\"ok\"}",
        b" ",
    ];
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..RECORDS)
        .map(|i| {
            let mut value = Vec::with_capacity(VALUE_LEN);
            while value.len() < VALUE_LEN {
                let r = next();
                value.extend_from_slice(words[(r % 12) as usize]);
                value.extend_from_slice(format!("{}", r % 100_000).as_bytes());
            }
            value.truncate(VALUE_LEN);
            NewRecord {
                timestamp: 1_700_000_000_000 + i as i64,
                key: Some(Bytes::from(format!("order-{:010}", i))),
                value: Some(Bytes::from(value)),
                headers: vec![Header::new(
                    "content-type",
                    Some(Bytes::from_static(b"text/plain")),
                )],
            }
        })
        .collect()
}

fn encode(compression: Compression, records: &[NewRecord]) -> Bytes {
    let mut out = BytesMut::new();
    let options = BatchOptions {
        compression,
        ..BatchOptions::default()
    };
    encode_batch(&options, records, &mut out).unwrap();
    out.freeze()
}

fn decode_and_touch(bytes: &Bytes, limits: &DecodeLimits) -> usize {
    let batch = RecordBatch::decode(bytes, limits).unwrap();
    let mut touched = 0usize;
    for record in batch.records().unwrap() {
        let record = record.unwrap();
        if let Some(key) = &record.key {
            touched = touched.wrapping_add(key.len() + key[0] as usize);
        }
        if let Some(value) = &record.value {
            touched = touched.wrapping_add(value.len() + value[value.len() - 1] as usize);
        }
    }
    touched
}

fn bench(c: &mut Criterion) {
    let records = records();
    let plain = encode(Compression::None, &records);
    let limits = DecodeLimits::default();

    let mut group = c.benchmark_group("records_1MiB");
    group.throughput(Throughput::Bytes(plain.len() as u64));

    let mut dst = vec![0u8; plain.len()];
    group.bench_function("memcpy", |b| {
        b.iter(|| {
            dst.copy_from_slice(black_box(&plain));
            black_box(&dst);
        })
    });
    group.bench_function("crc32c", |b| b.iter(|| crc32c::crc32c(black_box(&plain))));

    // The record walk alone, on a batch already framed and CRC-checked: separates the
    // cost of the CRC from the cost of slicing out every record.
    let decoded = RecordBatch::decode(&plain, &limits).unwrap();
    group.bench_function("walk_only/None", |b| {
        b.iter(|| {
            let mut touched = 0usize;
            for record in black_box(&decoded).records().unwrap() {
                let record = record.unwrap();
                touched = touched.wrapping_add(record.value.map_or(0, |v| v.len()));
            }
            touched
        })
    });

    // Encoding into a fresh buffer, as a broker re-encoding a read does: the batch
    // includes its CRC, so the crc32c row is part of this cost.
    group.bench_function("encode/None", |b| {
        b.iter(|| encode(Compression::None, black_box(&records)))
    });
    // The same with the producer's CRC reused, as the Iggy bridge does for a batch that
    // re-encodes exactly; the check itself is done once, when the batch is stored.
    let crc = {
        let batch = RecordBatch::decode(&plain, &DecodeLimits::default()).unwrap();
        let mut exact = ExactReencoding::new(&batch);
        for record in batch.records().unwrap() {
            exact.record(&record.unwrap());
        }
        exact.crc().unwrap()
    };
    group.bench_function("encode/None with known CRC", |b| {
        b.iter(|| {
            let mut out = BytesMut::new();
            encode_batch_with_crc(&BatchOptions::default(), black_box(&records), crc, &mut out)
                .unwrap();
            out.freeze()
        })
    });
    // What storing such a batch adds to reading its records: the second row minus the
    // first.
    group.bench_function("decode_verified + records", |b| {
        b.iter(|| {
            let batch =
                RecordBatch::decode_verified(black_box(&plain), &DecodeLimits::default()).unwrap();
            batch
                .records()
                .unwrap()
                .map(|r| r.unwrap().offset)
                .sum::<i64>()
        })
    });
    group.bench_function("decode_verified + records + exact check", |b| {
        b.iter(|| {
            let batch =
                RecordBatch::decode_verified(black_box(&plain), &DecodeLimits::default()).unwrap();
            let mut exact = ExactReencoding::new(&batch);
            for record in batch.records().unwrap() {
                exact.record(&record.unwrap());
            }
            exact.crc()
        })
    });

    for codec in [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let bytes = encode(codec, &records);
        eprintln!(
            "{codec:?}: batch {} bytes (uncompressed {} bytes)",
            bytes.len(),
            plain.len()
        );
        group.bench_with_input(
            BenchmarkId::new("decode", format!("{codec:?}")),
            &bytes,
            |b, bytes| b.iter(|| decode_and_touch(black_box(bytes), &limits)),
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
