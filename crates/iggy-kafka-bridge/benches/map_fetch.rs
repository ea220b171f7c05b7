//! The bridge's fetch path for one poll of about 1 MiB: Iggy messages as the SDK hands
//! them over, read back as Kafka records and encoded as the producer's batches, for
//! 1 KiB and 100-byte values, next to a memcpy of the same value bytes in the same run.
//!
//! - `collected`: each message read borrowed (payload shared), the records moved into a
//!   vector per batch and encoded from it (the way the read path worked before).
//! - `in_place`: each message consumed (payload moved), each batch encoded from the
//!   records where they lie.
//!
//! From the poll's answer as Iggy sends it (the same messages in batches of 1,000):
//!
//! - `sdk_answer`: the SDK's decode (`PolledMessages::from_bytes`), then `in_place`.
//! - `direct_answer`: the answer read straight into records
//!   ([`iggy_kafka_bridge::polled::decode_poll`]), then encoded as `in_place` does.
//! - `whole_answer`: the answer read as a read takes it
//!   ([`iggy_kafka_bridge::polled::decode_poll_items`]): each producer batch it holds
//!   whole written straight from it into its Kafka batch.
//! - `two_answers`: the same messages in two answers, the first ending in the middle of
//!   a producer batch: the first read as `whole_answer` does, keeping that batch's first
//!   messages ([`iggy_kafka_bridge::polled::Partial`]), the second finishing it
//!   ([`iggy_kafka_bridge::polled::decode_poll_items_with`]), as a read and its next
//!   poll do.
//!
//! The batches are as librdkafka produces them (1,000 records each at most, no key, no
//! headers), so the stored frame carries the producer's CRC and the encode reuses it.
//! Cloning the messages (two shared `Bytes` per message, as the SDK's decode makes) is
//! in both paths.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::{Bytes, BytesMut};
use criterion::{BenchmarkId, Criterion, Throughput, black_box, criterion_group, criterion_main};
use iggy::prelude::{IggyMessage, PolledMessages};
use iggy_common::IggyMessageHeader;
use iggy_kafka_bridge::mapping::{self, BatchFrame, MappedRecord};
use iggy_kafka_bridge::polled;
use kafka_records::NewRecord;

const POLL_BYTES: usize = 1 << 20;
const BATCH_RECORDS: usize = 1000;

/// The poll's messages (offsets from 0) and the number of value bytes in them.
fn poll(value_len: usize) -> (Vec<IggyMessage>, usize) {
    let count = POLL_BYTES / value_len;
    let mut messages = Vec::with_capacity(count);
    let mut offset = 0u64;
    while messages.len() < count {
        let n = BATCH_RECORDS.min(count - messages.len());
        let records: Vec<NewRecord> = (0..n)
            .map(|i| NewRecord {
                timestamp: 1_700_000_000_000 + i as i64,
                key: None,
                value: Some(Bytes::from(vec![(i % 251) as u8; value_len])),
                headers: Vec::new(),
            })
            .collect();
        let mut frame = BatchFrame {
            attributes: 0,
            partition_leader_epoch: 0,
            base_timestamp: 1_700_000_000_000,
            producer_id: 1,
            producer_epoch: 0,
            base_sequence: 0,
            record_count: i32::try_from(n).unwrap(),
            crc: None,
        };
        let mut produced = BytesMut::new();
        mapping::encode_run(0, Some(&frame), &records, &mut produced).unwrap();
        frame.crc = Some(u32::from_be_bytes(produced[17..21].try_into().unwrap()));
        for (i, r) in records.iter().enumerate() {
            let first = (i == 0).then_some(&frame);
            let m = mapping::to_message(r, i32::try_from(i).unwrap(), first).unwrap();
            let mut m = IggyMessage::from_bytes(m.to_bytes()).unwrap();
            m.header.offset = offset;
            offset += 1;
            messages.push(m);
        }
    }
    (messages, count * value_len)
}

/// The messages again, sharing their bytes (what the SDK's decode of a poll makes).
fn shared(messages: &[IggyMessage]) -> Vec<IggyMessage> {
    messages
        .iter()
        .map(|m| IggyMessage {
            header: IggyMessageHeader {
                checksum: m.header.checksum,
                id: m.header.id,
                offset: m.header.offset,
                timestamp: m.header.timestamp,
                origin_timestamp: m.header.origin_timestamp,
                user_headers_length: m.header.user_headers_length,
                payload_length: m.header.payload_length,
                reserved: m.header.reserved,
            },
            payload: m.payload.clone(),
            user_headers: m.user_headers.clone(),
        })
        .collect()
}

/// Splits records into their producer batches: (first index, length, frame).
fn runs(records: &[MappedRecord]) -> Vec<(usize, usize, Option<BatchFrame>)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < records.len() {
        let frame = records[i].batch.as_deref().copied();
        let n = frame.map_or(1, |f| usize::try_from(f.record_count).unwrap());
        out.push((i, n, frame));
        i += n;
    }
    out
}

fn collected(messages: &[IggyMessage]) -> Vec<Bytes> {
    let mut records: Vec<MappedRecord> = messages
        .iter()
        .map(|m| mapping::from_message(m).unwrap())
        .collect();
    let mut out = Vec::new();
    for (at, n, frame) in runs(&records) {
        let run: Vec<NewRecord> = records[at..at + n]
            .iter_mut()
            .map(|m| std::mem::take(&mut m.record))
            .collect();
        let mut batch = BytesMut::new();
        let base = i64::try_from(records[at].offset).unwrap();
        mapping::encode_run(base, frame.as_ref(), &run, &mut batch).unwrap();
        out.push(batch.freeze());
    }
    out
}

fn in_place(messages: Vec<IggyMessage>) -> Vec<Bytes> {
    let records: Vec<MappedRecord> = messages
        .into_iter()
        .map(|m| mapping::from_polled(m).unwrap())
        .collect();
    encoded(&records)
}

fn sdk_answer(answer: &Bytes) -> Vec<Bytes> {
    in_place(PolledMessages::from_bytes(answer.clone()).unwrap().messages)
}

fn direct_answer(answer: &Bytes) -> Vec<Bytes> {
    encoded(&polled::decode_poll(answer.clone(), 0).unwrap().records)
}

fn whole_answer(answer: &Bytes) -> Vec<Bytes> {
    batches_of(
        polled::decode_poll_items(answer.clone(), 0)
            .unwrap()
            .records,
    )
}

fn two_answers((first, second): &(Bytes, Bytes)) -> Vec<Bytes> {
    let head = polled::decode_poll_items(first.clone(), 0).unwrap();
    let partial = head.partial.expect("the first answer ends inside a batch");
    let from = partial.end();
    let rest = polled::decode_poll_items_with(second.clone(), from, Some(partial)).unwrap();
    let mut out = batches_of(head.records);
    out.extend(batches_of(rest.records));
    out
}

fn batches_of(items: Vec<polled::Item>) -> Vec<Bytes> {
    items
        .into_iter()
        .map(|item| match item {
            polled::Item::Batch(b) => b.bytes,
            polled::Item::Record(_) => panic!("every batch is whole in the answers"),
        })
        .collect()
}

/// Each producer batch of `records` encoded where the records lie.
fn encoded(records: &[MappedRecord]) -> Vec<Bytes> {
    let mut out = Vec::new();
    for (at, n, frame) in runs(records) {
        let mut batch = BytesMut::new();
        let base = i64::try_from(records[at].offset).unwrap();
        mapping::encode_run(base, frame.as_ref(), &records[at..at + n], &mut batch).unwrap();
        out.push(batch.freeze());
    }
    out
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("map_fetch");
    for value_len in [1024usize, 100] {
        let (messages, bytes) = poll(value_len);
        assert_eq!(collected(&messages), in_place(shared(&messages)));
        let values: Vec<u8> = messages
            .iter()
            .flat_map(|m| m.payload.iter().copied())
            .collect();
        group.throughput(Throughput::Bytes(bytes as u64));
        group.bench_with_input(BenchmarkId::new("memcpy", value_len), &values, |b, v| {
            b.iter(|| black_box(v.clone()))
        });
        group.bench_with_input(
            BenchmarkId::new("collected", value_len),
            &messages,
            |b, m| b.iter(|| black_box(collected(&shared(m)))),
        );
        group.bench_with_input(
            BenchmarkId::new("in_place", value_len),
            &messages,
            |b, m| b.iter(|| black_box(in_place(shared(m)))),
        );
        let batches: Vec<&[IggyMessage]> = messages.chunks(BATCH_RECORDS).collect();
        let answer = polled::write_poll_answer(messages.len() as u64, &batches);
        assert_eq!(sdk_answer(&answer), direct_answer(&answer));
        assert_eq!(sdk_answer(&answer), collected(&messages));
        group.bench_with_input(
            BenchmarkId::new("sdk_answer", value_len),
            &answer,
            |b, a| b.iter(|| black_box(sdk_answer(a))),
        );
        group.bench_with_input(
            BenchmarkId::new("direct_answer", value_len),
            &answer,
            |b, a| b.iter(|| black_box(direct_answer(a))),
        );
        assert_eq!(whole_answer(&answer), direct_answer(&answer));
        group.bench_with_input(
            BenchmarkId::new("whole_answer", value_len),
            &answer,
            |b, a| b.iter(|| black_box(whole_answer(a))),
        );
        // Cut in the middle of the batch after the first half of the messages (after
        // the first batch at least).
        let start = (messages.len() / 2 / BATCH_RECORDS).max(1) * BATCH_RECORDS;
        let cut = start + BATCH_RECORDS.min(messages.len() - start) / 2;
        let (a, b) = messages.split_at(cut);
        let current = messages.len() as u64;
        let answers = (
            polled::write_poll_answer(current, &a.chunks(BATCH_RECORDS).collect::<Vec<_>>()),
            polled::write_poll_answer(current, &b.chunks(BATCH_RECORDS).collect::<Vec<_>>()),
        );
        assert_eq!(two_answers(&answers), whole_answer(&answer));
        group.bench_with_input(
            BenchmarkId::new("two_answers", value_len),
            &answers,
            |b, a| b.iter(|| black_box(two_answers(a))),
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
