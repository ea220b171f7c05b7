//! What a topic's `compression.type` costs on produce, side by side with the
//! pass-through baseline (`producer`): every case checks the batch as the broker does
//! (`check_batches`: CRC, decompression, a walk over every record), then stores it the
//! way the topic asks (`ValidBatch::restamped`). `producer/*` keeps the producer's
//! batch; `<from>-to-<codec>` encodes the records again with the topic's codec;
//! `log-append-time` stamps the append time (the records are encoded again with the
//! producer's codec). The batch is about 1 MiB of 512-byte JSON-like values; throughput
//! is per uncompressed records byte.
//!
//! ```sh
//! cargo bench -p kafka-broker --bench recompress
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use bytes::{Bytes, BytesMut};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kafka_broker::store::{ValidBatch, check_batches};
use kafka_records::{BatchOptions, Compression, DecodeLimits, NewRecord, encode_batch};
use std::hint::black_box;

const COUNT: usize = 2048;

/// Values shaped like small JSON events: repeated field names, varying numbers.
fn events() -> Vec<NewRecord> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..COUNT)
        .map(|i| {
            let mut value = String::with_capacity(512);
            while value.len() < 480 {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                value.push_str(&format!(
                    "{{\"sensor\":{},\"reading\":{}.{},\"unit\":\"kPa\"}}",
                    x % 64,
                    (x >> 20) % 1000,
                    (x >> 40) % 100
                ));
            }
            NewRecord {
                timestamp: 1_750_000_000_000 + i as i64,
                key: Some(Bytes::from(format!("sensor-{}", i % 64))),
                value: Some(Bytes::from(value)),
                headers: vec![],
            }
        })
        .collect()
}

fn produced(codec: Compression) -> Bytes {
    let mut out = BytesMut::new();
    encode_batch(
        &BatchOptions {
            compression: codec,
            producer_id: 1,
            producer_epoch: 0,
            base_sequence: 0,
            ..BatchOptions::default()
        },
        &events(),
        &mut out,
    )
    .unwrap();
    out.freeze()
}

fn check(bytes: &Bytes) -> ValidBatch {
    check_batches(bytes, &DecodeLimits::default())
        .unwrap()
        .batches
        .pop()
        .unwrap()
}

fn name(codec: Compression) -> &'static str {
    match codec {
        Compression::None => "none",
        Compression::Gzip => "gzip",
        Compression::Snappy => "snappy",
        Compression::Lz4 => "lz4",
        _ => "zstd",
    }
}

fn bench(c: &mut Criterion) {
    let codecs = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];
    let mut group = c.benchmark_group("recompress");
    group.sample_size(20);
    for from in [Compression::None, Compression::Lz4] {
        let bytes = produced(from);
        group.throughput(Throughput::Bytes(check(&bytes).records_len() as u64));
        group.bench_function(BenchmarkId::new("producer", name(from)), |b| {
            b.iter(|| black_box(check(&bytes).restamped(None, None).unwrap()))
        });
        for to in codecs.into_iter().filter(|c| *c != from) {
            group.bench_function(
                BenchmarkId::new(format!("{}-to", name(from)), name(to)),
                |b| b.iter(|| black_box(check(&bytes).restamped(Some(to), None).unwrap())),
            );
        }
        group.bench_function(BenchmarkId::new("log-append-time", name(from)), |b| {
            b.iter(|| {
                black_box(
                    check(&bytes)
                        .restamped(None, Some(1_760_000_000_000))
                        .unwrap(),
                )
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
