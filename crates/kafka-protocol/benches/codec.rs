//! Codec throughput on the hot paths of a broker, for this crate alone (the side-by-side
//! comparison with the crates.io `kafka-protocol` crate is in `benches/baseline`).
//!
//! ```text
//! produce_request_decode/{v9,v7}   Produce request, one partition, 1 MiB of records
//! fetch_response_encode/{v12,v11}  Fetch response, one partition, 1 MiB of records:
//!                                    segments   `encode_response` (payload referenced)
//!                                    contiguous the same joined with `to_bytes()`
//! metadata_request_decode/v12      Metadata request naming 5 topics
//! fetch_request_decode/v12         Fetch request for 10 partitions of one topic
//! ```
//!
//! Records are opaque to this crate, so the payload is 1 MiB of log-line-like bytes rather
//! than a real batch. Throughput is in frame bytes.

// Messages are built field by field: several are `#[non_exhaustive]`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::field_reassign_with_default
)]

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, black_box, criterion_group, criterion_main};
use kafka_protocol::messages::request_header::RequestHeader;
use kafka_protocol::messages::{fetch_request, fetch_response, metadata_request, produce_request};
use kafka_protocol::{RequestBody, ResponseBody, decode_request, encode_request, encode_response};

const PAYLOAD_LEN: usize = 1 << 20;

fn payload() -> Bytes {
    let line = b"2024-05-01T12:00:00Z GET /api/v1/orders/12345 status=200 latency_ms=17\n";
    Bytes::from(
        line.iter()
            .copied()
            .cycle()
            .take(PAYLOAD_LEN)
            .collect::<Vec<u8>>(),
    )
}

fn frame(key: i16, version: i16, body: RequestBody) -> Bytes {
    let mut h = RequestHeader::default();
    h.request_api_key = key;
    h.request_api_version = version;
    h.correlation_id = 42;
    h.client_id = Some("bench-client".into());
    encode_request(&h, &body).unwrap().slice(4..)
}

fn produce(version: i16, records: &Bytes) -> Bytes {
    let mut p = produce_request::PartitionProduceData::default();
    p.records = Some(records.clone());
    let mut t = produce_request::TopicProduceData::default();
    t.name = "orders".into();
    t.partition_data = vec![p];
    let mut r = produce_request::ProduceRequest::default();
    r.acks = -1;
    r.timeout_ms = 30_000;
    r.topic_data = vec![t];
    frame(0, version, RequestBody::Produce(r))
}

fn metadata() -> Bytes {
    let mut r = metadata_request::MetadataRequest::default();
    r.topics = Some(
        (0..5)
            .map(|i| {
                let mut t = metadata_request::MetadataRequestTopic::default();
                t.name = Some(format!("topic-{i}").into());
                t
            })
            .collect(),
    );
    frame(3, 12, RequestBody::Metadata(r))
}

fn fetch_request() -> Bytes {
    let mut t = fetch_request::FetchTopic::default();
    t.topic = "orders".into();
    t.partitions = (0..10)
        .map(|i| {
            let mut p = fetch_request::FetchPartition::default();
            p.partition = i;
            p.fetch_offset = 1_000_000 + i64::from(i);
            p.partition_max_bytes = 1 << 20;
            p
        })
        .collect();
    let mut r = fetch_request::FetchRequest::default();
    r.replica_id = -1;
    r.max_wait_ms = 500;
    r.max_bytes = 50 << 20;
    r.topics = vec![t];
    frame(1, 12, RequestBody::Fetch(r))
}

fn fetch_response(records: &Bytes) -> ResponseBody {
    let mut p = fetch_response::PartitionData::default();
    p.high_watermark = 2_000_000;
    p.aborted_transactions = Some(Vec::new());
    p.records = Some(records.clone().into());
    let mut t = fetch_response::FetchableTopicResponse::default();
    t.topic = "orders".into();
    t.partitions = vec![p];
    let mut r = fetch_response::FetchResponse::default();
    r.responses = vec![t];
    ResponseBody::Fetch(r)
}

fn decode_group(c: &mut Criterion, group: &str, cases: &[(&str, Bytes)]) {
    let mut g = c.benchmark_group(group);
    for (id, f) in cases {
        decode_request(f).unwrap();
        g.throughput(Throughput::Bytes(f.len() as u64));
        g.bench_with_input(BenchmarkId::from_parameter(id), f, |b, f| {
            b.iter(|| decode_request(black_box(f)).unwrap())
        });
    }
    g.finish();
}

fn benches(c: &mut Criterion) {
    let records = payload();
    decode_group(
        c,
        "produce_request_decode",
        &[("v9", produce(9, &records)), ("v7", produce(7, &records))],
    );

    let mut g = c.benchmark_group("fetch_response_encode");
    let body = fetch_response(&records);
    for version in [12i16, 11] {
        let out = encode_response(42, version, &body).unwrap();
        assert!(out.segments.iter().any(|s| s.as_ptr() == records.as_ptr()));
        g.throughput(Throughput::Bytes(out.len() as u64));
        let id = format!("v{version}");
        g.bench_with_input(BenchmarkId::new("segments", &id), &body, |b, r| {
            b.iter(|| encode_response(42, version, black_box(r)).unwrap())
        });
        g.bench_with_input(BenchmarkId::new("contiguous", &id), &body, |b, r| {
            b.iter(|| {
                encode_response(42, version, black_box(r))
                    .unwrap()
                    .to_bytes()
            })
        });
    }
    g.finish();

    decode_group(c, "metadata_request_decode", &[("v12", metadata())]);
    decode_group(c, "fetch_request_decode", &[("v12", fetch_request())]);
}

criterion_group!(codec, benches);
criterion_main!(codec);
