//! The bridge's produce mapping for one ~1 MiB Kafka batch, of 1 KiB and of 100-byte
//! records: from the decoded batch to the `SendMessages` request body Iggy receives,
//! beside a memcpy of the batch's bytes in the same run (the floor: the body holds
//! every value once).
//!
//! `wire_sealed`: the records written straight from the batch's records section into
//! the send's buffer, each message's id and checksum written as it is
//! (`WireMessages::sealed`, `push_batch`, `send_body`), as the append path does.
//! `wire`: the same with the ids and checksums written by `send_body`, the append path
//! before.
//! `wire_by_records`: the same buffer written record by record, each decoded to a
//! `NewRecord` first (`push_batch_by_records`, the append path before). `messages`: the
//! way before that, one `IggyMessage` per record (`to_message_at`), encoded by the
//! SDK's `SendMessagesEncoder`.
//!
//! `check_and_map_1MiB`: the broker's check of the produced batch with the mapping to
//! sealed messages, as a bridged produce does them on one thread. `check_then_map`:
//! `check_batches`, then `push_batch` reading the records a second time (the path
//! before). `check_mapping`: `check_batches_with`, each record mapped as the check
//! reads it (`BatchMapping` in a `RecordSink`). The batches carry leader epoch -1, as
//! the Java producer sends them. `stamped_check_then_map`: the broker's path for such a
//! batch before, the check, a copy of the batch with epoch 0 written in it, then the
//! mapping's own walk; `stamped_check_mapping`: the path now, the mapping in the check's
//! walk told epoch 0, which is then stamped in the batch's header only
//! (`ValidBatch::with_leader_epoch`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::{Bytes, BytesMut};
use criterion::measurement::WallTime;
use criterion::{
    BenchmarkGroup, BenchmarkId, Criterion, Throughput, black_box, criterion_group, criterion_main,
};
use iggy_binary_protocol::requests::messages::send_messages::{RawMessage, SendMessagesEncoder};
use iggy_binary_protocol::{WireIdentifier, WirePartitioning};
use iggy_kafka_bridge::mapping::{self, BatchFrame, BatchMapping, TxnTag, WireMessages};
use kafka_records::{
    BatchOptions, DecodeLimits, ExactReencoding, NewRecord, RecordBatch, encode_batch,
};
use kafka_store::{Prepared, RecordSink, ValidBatch, check_batches, check_batches_with};

const BATCH_BYTES: usize = 1 << 20;

fn batch(value_len: usize) -> Bytes {
    let records: Vec<NewRecord> = (0..BATCH_BYTES / (value_len + 8))
        .map(|i| NewRecord {
            timestamp: 1_700_000_000_000 + i as i64,
            key: None,
            value: Some(Bytes::from(vec![(i % 251) as u8; value_len])),
            headers: Vec::new(),
        })
        .collect();
    let mut out = BytesMut::new();
    encode_batch(&BatchOptions::default(), &records, &mut out).unwrap();
    out.freeze()
}

fn target() -> (WireIdentifier, WireIdentifier, WirePartitioning) {
    (
        WireIdentifier::named("kafka").unwrap(),
        WireIdentifier::named("bench-topic").unwrap(),
        WirePartitioning::PartitionId(1),
    )
}

/// One batch into a send's messages, then the send of it alone: `in_place` writes
/// it whole (`push_batch`), else record by record (`push_batch_by_records`); `sealed`
/// finishes each message as it is written, with ids from 1.
fn wire(batch: &RecordBatch, section: &Bytes, in_place: bool, sealed: bool) -> Bytes {
    let (s, t, p) = target();
    let records = batch.header().record_count as usize;
    let capacity = batch.encoded_len() + records * mapping::MESSAGE_OVERHEAD;
    let room = mapping::send_room(&s, &t, &p);
    let mut w = if sealed {
        WireMessages::sealed(room, capacity, 1, 1, records)
    } else {
        WireMessages::new(room, capacity, 1)
    };
    if in_place {
        w.push_batch(batch, section).unwrap();
    } else {
        w.push_batch_by_records(batch, section).unwrap();
    }
    let mut id = 0u128;
    mapping::send_body(vec![w], &s, &t, &p, || {
        id += 1;
        id
    })
    .unwrap()
    .body
}

/// The former way: a message per record, the first built again with the CRC, then
/// the SDK's encoder.
fn messages(batch: &RecordBatch) -> Bytes {
    let plain = mapping::frame_of(batch.header());
    let mut exact = ExactReencoding::new(batch);
    let mut messages = Vec::new();
    let mut first = None;
    for (i, record) in batch.records().unwrap().enumerate() {
        let record = record.unwrap();
        exact.record(&record);
        let record = NewRecord::from(record);
        let txn = TxnTag::of(&plain, &record);
        let frame = (i == 0).then_some(&plain);
        messages.push(mapping::to_message_at(&record, i as i32, frame, txn.as_ref(), 1).unwrap());
        if i == 0 {
            first = Some(record);
        }
    }
    let frame = BatchFrame {
        crc: exact.crc(),
        ..plain
    };
    let record = first.unwrap();
    let txn = TxnTag::of(&frame, &record);
    messages[0] = mapping::to_message_at(&record, 0, Some(&frame), txn.as_ref(), 1).unwrap();
    let raw: Vec<RawMessage<'_>> = messages
        .iter()
        .enumerate()
        .map(|(i, m)| RawMessage {
            id: i as u128 + 1,
            origin_timestamp: m.header.origin_timestamp,
            headers: m.user_headers.as_deref(),
            payload: &m.payload,
        })
        .collect();
    let (s, t, p) = target();
    let size = SendMessagesEncoder::encoded_size(&s, &t, &p, &raw);
    let mut buf = BytesMut::with_capacity(size);
    SendMessagesEncoder::encode(&mut buf, &s, &t, &p, &raw).unwrap();
    buf.freeze()
}

/// The floor beside each case: a memcpy of the batch's bytes, with the group's
/// throughput set to them.
fn bench_memcpy(group: &mut BenchmarkGroup<'_, WallTime>, value_len: usize, bytes: &Bytes) {
    group.throughput(Throughput::Bytes(bytes.len() as u64));
    let mut dst = vec![0u8; bytes.len()];
    group.bench_with_input(BenchmarkId::new("memcpy", value_len), bytes, |b, bytes| {
        b.iter(|| {
            dst.copy_from_slice(black_box(bytes));
            black_box(&dst);
        })
    });
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("map_produce_1MiB");
    for value_len in [1024usize, 100] {
        let bytes = batch(value_len);
        let decoded = RecordBatch::decode(&bytes, &DecodeLimits::default()).unwrap();
        let section = decoded.records_section().unwrap();
        let sent = messages(&decoded);
        for (in_place, sealed) in [(true, true), (true, false), (false, false)] {
            assert_eq!(
                wire(&decoded, &section, in_place, sealed),
                sent,
                "the ways send the same body"
            );
        }
        bench_memcpy(&mut group, value_len, &bytes);
        group.bench_with_input(
            BenchmarkId::new("wire_sealed", value_len),
            &decoded,
            |b, d| b.iter(|| wire(black_box(d), &section, true, true)),
        );
        group.bench_with_input(BenchmarkId::new("wire", value_len), &decoded, |b, d| {
            b.iter(|| wire(black_box(d), &section, true, false))
        });
        group.bench_with_input(
            BenchmarkId::new("wire_by_records", value_len),
            &decoded,
            |b, d| b.iter(|| wire(black_box(d), &section, false, false)),
        );
        group.bench_with_input(BenchmarkId::new("messages", value_len), &decoded, |b, d| {
            b.iter(|| messages(black_box(d)))
        });
    }
    group.finish();
}

/// The mapping of one batch as the check reads it.
struct Sink {
    messages: WireMessages,
    mapping: BatchMapping,
    batch: RecordBatch,
    section: Bytes,
}

impl RecordSink for Sink {
    fn record(&mut self, record: &kafka_records::RecordRef<'_>) {
        self.mapping
            .record(&mut self.messages, &self.section, record);
    }

    fn finish(self: Box<Self>) -> Option<Prepared> {
        let Sink {
            mut messages,
            mapping,
            batch,
            section,
        } = *self;
        mapping.finish(&mut messages, &batch, &section).ok()?;
        Some(Prepared::new(std::sync::Mutex::new(Some(messages))))
    }
}

/// Messages for the records of `batch`, as the bridge makes them ahead of a send.
fn sealed_for(batch: &RecordBatch) -> WireMessages {
    let records = batch.header().record_count as usize;
    let capacity = batch.encoded_len() + records * mapping::MESSAGE_OVERHEAD;
    WireMessages::sealed(mapping::MAX_SEND_ROOM, capacity, 1, 1, records)
}

fn check_then_map(bytes: &Bytes) -> (ValidBatch, WireMessages) {
    let batch = check_batches(bytes, &DecodeLimits::default())
        .unwrap()
        .batches
        .remove(0);
    let mut messages = sealed_for(batch.batch());
    messages.push_batch(batch.batch(), batch.section()).unwrap();
    (batch, messages)
}

/// The broker's path before for a batch whose leader epoch it stamps: the check, a copy
/// of the batch with the epoch written in it (decoded again, its CRC not recomputed),
/// then the mapping's own walk.
fn stamped_check_then_map(bytes: &Bytes) -> (RecordBatch, WireMessages) {
    let batch = check_batches(bytes, &DecodeLimits::default())
        .unwrap()
        .batches
        .remove(0)
        .with_leader_epoch(0);
    let copy = batch.to_bytes_mut().freeze();
    let stamped = RecordBatch::decode_verified(&copy, &DecodeLimits::default()).unwrap();
    let mut messages = sealed_for(&stamped);
    messages.push_batch(&stamped, batch.section()).unwrap();
    (stamped, messages)
}

/// The same with the mapping in the check's walk, told the epoch 0 stamped after it;
/// the stamped batch keeps what was prepared, as the broker's does.
fn stamped_check_mapping(bytes: &Bytes) -> ValidBatch {
    let fused = check_mapping_for(bytes, Some(0));
    let prepared = fused.prepared().cloned().unwrap();
    fused.with_leader_epoch(0).with_prepared(prepared)
}

fn check_mapping(bytes: &Bytes) -> ValidBatch {
    check_mapping_for(bytes, None)
}

fn check_mapping_for(bytes: &Bytes, stamp: Option<i32>) -> ValidBatch {
    let mut sink_for = |batch: &RecordBatch, section: &Bytes| {
        let mapping = BatchMapping::new(batch, true);
        Some(Box::new(Sink {
            messages: sealed_for(batch),
            mapping: match stamp {
                Some(epoch) => mapping.with_leader_epoch(epoch),
                None => mapping,
            },
            batch: batch.clone(),
            section: section.clone(),
        }) as Box<dyn RecordSink>)
    };
    check_batches_with(bytes, &DecodeLimits::default(), &mut sink_for)
        .unwrap()
        .batches
        .remove(0)
}

fn bench_check(c: &mut Criterion) {
    let mut group = c.benchmark_group("check_and_map_1MiB");
    for value_len in [1024usize, 100] {
        let bytes = batch(value_len);
        let (_, before) = check_then_map(&bytes);
        let fused = check_mapping(&bytes);
        let fused = fused
            .prepared()
            .and_then(|p| p.downcast_ref::<std::sync::Mutex<Option<WireMessages>>>())
            .and_then(|m| m.lock().unwrap().take())
            .unwrap();
        let (s, t, p) = target();
        let body = |w: WireMessages| {
            mapping::send_body(vec![w], &s, &t, &p, || unreachable!("sealed"))
                .unwrap()
                .body
        };
        assert_eq!(
            body(fused),
            body(before),
            "both ways make the same messages"
        );
        bench_memcpy(&mut group, value_len, &bytes);
        group.bench_with_input(
            BenchmarkId::new("check_then_map", value_len),
            &bytes,
            |b, bytes| b.iter(|| check_then_map(black_box(bytes))),
        );
        group.bench_with_input(
            BenchmarkId::new("check_mapping", value_len),
            &bytes,
            |b, bytes| b.iter(|| check_mapping(black_box(bytes))),
        );
        let (_, before) = stamped_check_then_map(&bytes);
        let fused = stamped_check_mapping(&bytes);
        let fused = fused
            .prepared()
            .and_then(|p| p.downcast_ref::<std::sync::Mutex<Option<WireMessages>>>())
            .and_then(|m| m.lock().unwrap().take())
            .unwrap();
        assert_eq!(body(fused), body(before), "stamped both ways");
        group.bench_with_input(
            BenchmarkId::new("stamped_check_then_map", value_len),
            &bytes,
            |b, bytes| b.iter(|| stamped_check_then_map(black_box(bytes))),
        );
        group.bench_with_input(
            BenchmarkId::new("stamped_check_mapping", value_len),
            &bytes,
            |b, bytes| b.iter(|| stamped_check_mapping(black_box(bytes))),
        );
    }
    group.finish();
}

criterion_group!(benches, bench, bench_check);
criterion_main!(benches);
