//! Side-by-side codec benchmarks: this repository's `kafka-protocol` crate (`ours`) and the
//! crates.io `kafka-protocol` 0.18 crate (`theirs`), on the same inputs in the same run.
//!
//! ```text
//! produce_request_decode/{v9,v7}   a 1-topic, 1-partition Produce request whose records
//!                                  are one uncompressed batch of 1024 x 1 KiB records,
//!                                  decoded (header + body) from a `Bytes` frame
//! fetch_response_encode/{v12,v11}  a Fetch response with the same batch in one partition,
//!                                  encoded with its header and size prefix:
//!                                    ours/segments   `encode_response` (payload referenced)
//!                                    ours/contiguous the same, then `to_bytes()` (one copy)
//!                                    theirs          into a `BytesMut` sized by `compute_size`
//! metadata_request_decode/v12      a Metadata request naming 5 topics
//! fetch_request_decode/v12         a Fetch request for 10 partitions of one topic
//! ```
//!
//! Every input is checked once before measuring: both crates decode the same frame to the
//! same values, and both encoders produce identical bytes. Throughput is in frame bytes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::{BufMut, Bytes, BytesMut};
use criterion::{BenchmarkId, Criterion, Throughput, black_box, criterion_group, criterion_main};
use kafka_records::{BatchOptions, Header, NewRecord, encode_batch};

use ours::messages::{
    fetch_request as o_fetch_req, fetch_response as o_fetch, metadata_request as o_meta,
    produce_request as o_produce, request_header::RequestHeader as OHeader,
};
use ours::{RequestBody, ResponseBody};

use theirs::messages::{
    BrokerId, FetchRequest as TFetchRequest, FetchResponse as TFetchResponse,
    MetadataRequest as TMetadataRequest, ProduceRequest as TProduceRequest,
    RequestHeader as THeader, ResponseHeader as TResponseHeader, TopicName,
    fetch_response as t_fetch,
};
use theirs::protocol::{
    Decodable, Encodable, HeaderVersion, StrBytes, decode_request_header_from_buffer,
};

const RECORDS: usize = 1024;
const VALUE_LEN: usize = 1024;
const TOPIC: &str = "orders";
const CORRELATION_ID: i32 = 42;

/// One uncompressed record batch of 1024 records with 1 KiB values (about 1 MiB).
fn record_batch() -> Bytes {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let records: Vec<NewRecord> = (0..RECORDS)
        .map(|i| {
            let mut value = Vec::with_capacity(VALUE_LEN);
            while value.len() < VALUE_LEN {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                value.extend_from_slice(
                    format!("latency_ms={} status=200 ", state % 100_000).as_bytes(),
                );
            }
            value.truncate(VALUE_LEN);
            NewRecord {
                timestamp: 1_700_000_000_000 + i as i64,
                key: Some(Bytes::from(format!("order-{i:010}"))),
                value: Some(Bytes::from(value)),
                headers: vec![Header::new(
                    "content-type",
                    Some(Bytes::from_static(b"text/plain")),
                )],
            }
        })
        .collect();
    let mut out = BytesMut::new();
    encode_batch(&BatchOptions::default(), &records, &mut out).unwrap();
    out.freeze()
}

fn header(key: i16, version: i16) -> OHeader {
    let mut h = OHeader::default();
    h.request_api_key = key;
    h.request_api_version = version;
    h.correlation_id = CORRELATION_ID;
    h.client_id = Some("bench-client".into());
    h
}

/// A request frame without its size prefix, as `split_frame` hands it over.
fn request_frame(key: i16, version: i16, body: RequestBody) -> Bytes {
    let framed = ours::encode_request(&header(key, version), &body).unwrap();
    framed.slice(4..)
}

fn produce_frame(version: i16, records: &Bytes) -> Bytes {
    let mut p = o_produce::PartitionProduceData::default();
    p.index = 0;
    p.records = Some(records.clone());
    let mut t = o_produce::TopicProduceData::default();
    t.name = TOPIC.into();
    t.partition_data = vec![p];
    let mut r = o_produce::ProduceRequest::default();
    r.acks = -1;
    r.timeout_ms = 30_000;
    r.topic_data = vec![t];
    request_frame(0, version, RequestBody::Produce(r))
}

fn metadata_frame(version: i16) -> Bytes {
    let topics = (0..5)
        .map(|i| {
            let mut t = o_meta::MetadataRequestTopic::default();
            t.name = Some(format!("topic-{i}").into());
            t
        })
        .collect();
    let mut r = o_meta::MetadataRequest::default();
    r.topics = Some(topics);
    r.allow_auto_topic_creation = true;
    request_frame(3, version, RequestBody::Metadata(r))
}

fn fetch_request_frame(version: i16) -> Bytes {
    let partitions = (0..10)
        .map(|i| {
            let mut p = o_fetch_req::FetchPartition::default();
            p.partition = i;
            p.current_leader_epoch = 5;
            p.fetch_offset = 1_000_000 + i64::from(i);
            p.last_fetched_epoch = -1;
            p.log_start_offset = -1;
            p.partition_max_bytes = 1 << 20;
            p
        })
        .collect();
    let mut t = o_fetch_req::FetchTopic::default();
    t.topic = TOPIC.into();
    t.partitions = partitions;
    let mut r = o_fetch_req::FetchRequest::default();
    r.replica_id = -1;
    r.max_wait_ms = 500;
    r.min_bytes = 1;
    r.max_bytes = 50 << 20;
    r.isolation_level = 1;
    r.session_id = 0;
    r.session_epoch = -1;
    r.topics = vec![t];
    r.rack_id = "".into();
    request_frame(1, version, RequestBody::Fetch(r))
}

fn ours_decode(frame: &Bytes) -> ours::RequestFrame {
    ours::decode_request(frame).unwrap()
}

fn theirs_decode<T: Decodable>(frame: &Bytes) -> (THeader, T) {
    let mut buf = frame.clone();
    let header = decode_request_header_from_buffer(&mut buf).unwrap();
    let body = T::decode(&mut buf, header.request_api_version).unwrap();
    assert!(buf.is_empty());
    (header, body)
}

fn ours_fetch_response(records: &Bytes) -> ResponseBody {
    let mut p = o_fetch::PartitionData::default();
    p.partition_index = 0;
    p.error_code = 0;
    p.high_watermark = 2_000_000;
    p.last_stable_offset = 2_000_000;
    p.log_start_offset = 0;
    p.aborted_transactions = Some(Vec::new());
    p.preferred_read_replica = -1;
    p.records = Some(records.clone());
    let mut t = o_fetch::FetchableTopicResponse::default();
    t.topic = TOPIC.into();
    t.partitions = vec![p];
    let mut r = o_fetch::FetchResponse::default();
    r.throttle_time_ms = 0;
    r.error_code = 0;
    r.session_id = 0;
    r.responses = vec![t];
    ResponseBody::Fetch(r)
}

fn theirs_fetch_response(records: &Bytes) -> TFetchResponse {
    let p = t_fetch::PartitionData::default()
        .with_partition_index(0)
        .with_error_code(0)
        .with_high_watermark(2_000_000)
        .with_last_stable_offset(2_000_000)
        .with_log_start_offset(0)
        .with_aborted_transactions(Some(Vec::new()))
        .with_preferred_read_replica(BrokerId(-1))
        .with_records(Some(records.clone()));
    let t = t_fetch::FetchableTopicResponse::default()
        .with_topic(TopicName(StrBytes::from_static_str(TOPIC)))
        .with_partitions(vec![p]);
    TFetchResponse::default()
        .with_throttle_time_ms(0)
        .with_error_code(0)
        .with_session_id(0)
        .with_responses(vec![t])
}

/// What a broker writes for a response: size prefix, header, body, in one buffer.
fn theirs_encode_response(resp: &TFetchResponse, version: i16) -> BytesMut {
    let header = TResponseHeader::default().with_correlation_id(CORRELATION_ID);
    let hv = TFetchResponse::header_version(version);
    let size = header.compute_size(hv).unwrap() + resp.compute_size(version).unwrap();
    let mut buf = BytesMut::with_capacity(4 + size);
    buf.put_i32(i32::try_from(size).unwrap());
    header.encode(&mut buf, hv).unwrap();
    resp.encode(&mut buf, version).unwrap();
    buf
}

fn produce_decode(c: &mut Criterion, records: &Bytes) {
    let mut g = c.benchmark_group("produce_request_decode");
    for version in [9i16, 7] {
        let frame = produce_frame(version, records);
        // Same frame, same values on both sides.
        let o = ours_decode(&frame);
        let (th, t) = theirs_decode::<TProduceRequest>(&frame);
        let RequestBody::Produce(op) = &o.body else {
            panic!("not a Produce request")
        };
        assert_eq!(th.correlation_id, o.header.correlation_id);
        assert_eq!(t.acks, op.acks);
        assert_eq!(t.topic_data[0].name.0.as_str(), &*op.topic_data[0].name);
        let (a, b) = (
            op.topic_data[0].partition_data[0].records.as_ref().unwrap(),
            t.topic_data[0].partition_data[0].records.as_ref().unwrap(),
        );
        assert_eq!(a, records);
        assert_eq!(b, records);
        // Both keep the records as a slice of the frame, not a copy.
        assert!(frame.as_ptr_range().contains(&a.as_ptr()));
        assert!(frame.as_ptr_range().contains(&b.as_ptr()));

        g.throughput(Throughput::Bytes(frame.len() as u64));
        let id = format!("v{version}");
        g.bench_with_input(BenchmarkId::new("ours", &id), &frame, |b, f| {
            b.iter(|| ours_decode(black_box(f)))
        });
        g.bench_with_input(BenchmarkId::new("theirs", &id), &frame, |b, f| {
            b.iter(|| theirs_decode::<TProduceRequest>(black_box(f)))
        });
    }
    g.finish();
}

fn fetch_encode(c: &mut Criterion, records: &Bytes) {
    let mut g = c.benchmark_group("fetch_response_encode");
    let ours_body = ours_fetch_response(records);
    let theirs_body = theirs_fetch_response(records);
    for version in [12i16, 11] {
        let segments = ours::encode_response(CORRELATION_ID, version, &ours_body).unwrap();
        let theirs_bytes = theirs_encode_response(&theirs_body, version);
        // Byte-identical output, and the payload is a referenced segment on our side.
        assert_eq!(&segments.to_bytes()[..], &theirs_bytes[..]);
        assert!(
            segments
                .segments
                .iter()
                .any(|s| s.as_ptr() == records.as_ptr())
        );

        g.throughput(Throughput::Bytes(theirs_bytes.len() as u64));
        let id = format!("v{version}");
        g.bench_with_input(
            BenchmarkId::new("ours/segments", &id),
            &ours_body,
            |b, r| b.iter(|| ours::encode_response(CORRELATION_ID, version, black_box(r)).unwrap()),
        );
        g.bench_with_input(
            BenchmarkId::new("ours/contiguous", &id),
            &ours_body,
            |b, r| {
                b.iter(|| {
                    ours::encode_response(CORRELATION_ID, version, black_box(r))
                        .unwrap()
                        .to_bytes()
                })
            },
        );
        g.bench_with_input(BenchmarkId::new("theirs", &id), &theirs_body, |b, r| {
            b.iter(|| theirs_encode_response(black_box(r), version))
        });
    }
    g.finish();
}

fn small_decodes(c: &mut Criterion) {
    let mut g = c.benchmark_group("metadata_request_decode");
    let frame = metadata_frame(12);
    let o = ours_decode(&frame);
    let (_, t) = theirs_decode::<TMetadataRequest>(&frame);
    let RequestBody::Metadata(om) = &o.body else {
        panic!("not a Metadata request")
    };
    let names = |v: &[o_meta::MetadataRequestTopic]| -> Vec<String> {
        v.iter()
            .map(|t| t.name.as_deref().unwrap_or_default().to_owned())
            .collect()
    };
    let theirs_names: Vec<String> = t
        .topics
        .as_ref()
        .unwrap()
        .iter()
        .map(|t| t.name.as_ref().unwrap().0.to_string())
        .collect();
    assert_eq!(names(om.topics.as_ref().unwrap()), theirs_names);
    g.throughput(Throughput::Bytes(frame.len() as u64));
    g.bench_with_input(BenchmarkId::new("ours", "v12"), &frame, |b, f| {
        b.iter(|| ours_decode(black_box(f)))
    });
    g.bench_with_input(BenchmarkId::new("theirs", "v12"), &frame, |b, f| {
        b.iter(|| theirs_decode::<TMetadataRequest>(black_box(f)))
    });
    g.finish();

    let mut g = c.benchmark_group("fetch_request_decode");
    let frame = fetch_request_frame(12);
    let o = ours_decode(&frame);
    let (_, t) = theirs_decode::<TFetchRequest>(&frame);
    let RequestBody::Fetch(of) = &o.body else {
        panic!("not a Fetch request")
    };
    let ours_parts: Vec<(i32, i64)> = of.topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition, p.fetch_offset))
        .collect();
    let theirs_parts: Vec<(i32, i64)> = t.topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition, p.fetch_offset))
        .collect();
    assert_eq!(ours_parts.len(), 10);
    assert_eq!(ours_parts, theirs_parts);
    assert_eq!(t.max_bytes, of.max_bytes);
    g.throughput(Throughput::Bytes(frame.len() as u64));
    g.bench_with_input(BenchmarkId::new("ours", "v12"), &frame, |b, f| {
        b.iter(|| ours_decode(black_box(f)))
    });
    g.bench_with_input(BenchmarkId::new("theirs", "v12"), &frame, |b, f| {
        b.iter(|| theirs_decode::<TFetchRequest>(black_box(f)))
    });
    g.finish();
}

fn benches(c: &mut Criterion) {
    let records = record_batch();
    assert!(records.len() > RECORDS * VALUE_LEN);
    produce_decode(c, &records);
    fetch_encode(c, &records);
    small_decodes(c);
}

criterion_group!(compare, benches);
criterion_main!(compare);
