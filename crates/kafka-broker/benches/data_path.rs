//! The gateway's data path for one ~1 MiB batch, beside a memcpy of the same bytes in
//! the same group, at 1 KiB and 100-byte records:
//!
//! - `produce-validate-store`: the Produce checks of one partition's batch
//!   (`check_batches`: CRC-32C, the record walk, counts; the topic's rules with Kafka's
//!   default settings) and the embedded store's append. Stored batches are kept (up to
//!   [`KEPT`] of them) as the store keeps them, so the store's memory is fresh memory as
//!   it is in a running gateway; the baseline copies into kept buffers the same way.
//! - `fetch-assemble`: the embedded store's read of the batch and the Fetch response
//!   encoded around it (the segments a connection writes).
//! - `fetch-assemble-16KiB-batches`: the same ~1 MiB stored as 64 batches of ~16 KiB
//!   (a Java producer's default `batch.size`), read and encoded as one partition's
//!   records; `joined` copies the batches into one buffer first, as the Fetch handler
//!   did before a response's records could be several segments.
//!
//! Throughput is per batch byte.
//!
//! ```sh
//! cargo bench -p kafka-broker --bench data_path -- --quick
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use bytes::{Bytes, BytesMut};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kafka_broker::check_with_defaults;
use kafka_broker::store::memory::{MemoryStore, MemoryStoreConfig};
use kafka_broker::store::{LogStore, NewTopic, TopicConfig};
use kafka_protocol::messages::fetch_response::{
    FetchResponse, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::{RecordSet, ResponseBody};
use kafka_records::{BatchOptions, NewRecord, encode_batch};
use std::hint::black_box;
use std::time::{Duration, Instant};

const BATCH_BYTES: usize = 1024 * 1024;
const NOW: i64 = 1_750_000_000_000;
/// Batches kept before the store (or the baseline's buffers) is dropped, untimed.
const KEPT: usize = 128;
const TOPIC: &str = "bench";

/// One uncompressed batch of about [`BATCH_BYTES`] of records with a 16-byte key and a
/// `value_len`-byte value, timestamped around [`NOW`].
fn batch(value_len: usize) -> Bytes {
    batch_of(value_len, BATCH_BYTES)
}

/// [`batch`] of about `bytes` bytes.
fn batch_of(value_len: usize, bytes: usize) -> Bytes {
    let per_record = value_len + 16 + 12;
    let count = (bytes / per_record).max(1);
    let records: Vec<NewRecord> = (0..count)
        .map(|i| {
            let mut value = vec![0u8; value_len];
            for (j, b) in value.iter_mut().enumerate() {
                *b = b'a' + ((i + j) % 26) as u8;
            }
            NewRecord {
                timestamp: NOW + i as i64,
                key: Some(Bytes::from(format!("key-{i:012}"))),
                value: Some(Bytes::from(value)),
                headers: vec![],
            }
        })
        .collect();
    let mut out = BytesMut::new();
    encode_batch(&BatchOptions::default(), &records, &mut out).unwrap();
    out.freeze()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

fn store(rt: &tokio::runtime::Runtime) -> MemoryStore {
    let store = MemoryStore::new(MemoryStoreConfig {
        max_total_bytes: 4 << 30,
        ..MemoryStoreConfig::default()
    });
    rt.block_on(store.create_topic(
        NewTopic {
            name: TOPIC.to_owned(),
            partitions: 1,
            config: TopicConfig::default(),
        },
        false,
    ))
    .unwrap();
    store
}

fn cases() -> [(&'static str, Bytes); 2] {
    [("1KiB", batch(1024)), ("100B", batch(100))]
}

fn produce(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("produce-validate-store");
    for (name, bytes) in cases() {
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_with_input(BenchmarkId::new("gateway", name), &bytes, |b, bytes| {
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                let mut s = store(&rt);
                for i in 0..iters {
                    if i > 0 && (i as usize).is_multiple_of(KEPT) {
                        s = store(&rt);
                    }
                    let start = Instant::now();
                    let batch = check_with_defaults(bytes.clone(), NOW).unwrap();
                    let outcome = rt.block_on(s.append(TOPIC, 0, vec![batch], NOW)).unwrap();
                    spent += start.elapsed();
                    black_box(outcome);
                }
                spent
            });
        });
        group.bench_with_input(BenchmarkId::new("memcpy", name), &bytes, |b, bytes| {
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                let mut kept: Vec<BytesMut> = Vec::with_capacity(KEPT);
                for i in 0..iters {
                    if i > 0 && (i as usize).is_multiple_of(KEPT) {
                        kept = Vec::with_capacity(KEPT);
                    }
                    let start = Instant::now();
                    let copy = BytesMut::from(&bytes[..]);
                    spent += start.elapsed();
                    kept.push(black_box(copy));
                }
                spent
            });
        });
    }
    group.finish();
}

fn fetch(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("fetch-assemble");
    for (name, bytes) in cases() {
        let s = store(&rt);
        let batch = check_with_defaults(bytes.clone(), NOW).unwrap();
        rt.block_on(s.append(TOPIC, 0, vec![batch], NOW)).unwrap();
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_with_input(BenchmarkId::new("gateway", name), &bytes, |b, _| {
            b.iter(|| {
                let read = rt.block_on(s.read(TOPIC, 0, 0, BATCH_BYTES)).unwrap();
                black_box(assemble(read, false))
            });
        });
        group.bench_with_input(BenchmarkId::new("memcpy", name), &bytes, |b, bytes| {
            b.iter(|| black_box(BytesMut::from(&bytes[..])));
        });
    }
    group.finish();
}

/// The Fetch response for one partition's read, as segments; `joined` copies its
/// batches into one buffer first.
fn assemble(read: kafka_broker::store::ReadOutcome, joined: bool) -> Vec<Bytes> {
    let records = if joined {
        let mut one = BytesMut::with_capacity(read.len());
        for b in &read.batches {
            one.extend_from_slice(b);
        }
        RecordSet::from(one.freeze())
    } else {
        read.batches.into_iter().collect()
    };
    let body = ResponseBody::Fetch(FetchResponse {
        responses: vec![FetchableTopicResponse {
            topic: TOPIC.into(),
            partitions: vec![PartitionData {
                partition_index: 0,
                high_watermark: read.watermarks.high_watermark,
                last_stable_offset: read.watermarks.high_watermark,
                log_start_offset: read.watermarks.log_start_offset,
                records: Some(records),
                ..PartitionData::default()
            }],
            ..FetchableTopicResponse::default()
        }],
        ..FetchResponse::default()
    });
    kafka_protocol::encode_response(7, 12, &body)
        .unwrap()
        .segments
}

fn fetch_small_batches(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("fetch-assemble-16KiB-batches");
    for (name, value_len) in [("1KiB", 1024), ("100B", 100)] {
        let s = store(&rt);
        let mut all = BytesMut::new();
        for _ in 0..BATCH_BYTES / (16 << 10) {
            let bytes = batch_of(value_len, 16 << 10);
            all.extend_from_slice(&bytes);
            let batch = check_with_defaults(bytes, NOW).unwrap();
            rt.block_on(s.append(TOPIC, 0, vec![batch], NOW)).unwrap();
        }
        let all = all.freeze();
        let read = rt.block_on(s.read(TOPIC, 0, 0, BATCH_BYTES)).unwrap();
        assert_eq!(read.len(), all.len());
        assert_eq!(
            assemble(read.clone(), true).concat(),
            assemble(read, false).concat()
        );
        group.throughput(Throughput::Bytes(all.len() as u64));
        for joined in [false, true] {
            let id = if joined { "joined" } else { "gateway" };
            group.bench_function(BenchmarkId::new(id, name), |b| {
                b.iter(|| {
                    let read = rt.block_on(s.read(TOPIC, 0, 0, BATCH_BYTES)).unwrap();
                    black_box(assemble(read, joined))
                });
            });
        }
        group.bench_with_input(BenchmarkId::new("memcpy", name), &all, |b, bytes| {
            b.iter(|| black_box(BytesMut::from(&bytes[..])));
        });
    }
    group.finish();
}

criterion_group!(benches, produce, fetch, fetch_small_batches);
criterion_main!(benches);
