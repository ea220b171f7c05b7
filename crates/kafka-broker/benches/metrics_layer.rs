//! What the metrics layer adds to one request, side by side with the same work without
//! it: building the request and its outcome (`baseline/*`), and the same plus the layer's
//! `on_request` and `on_response` (`metrics/*`). The difference is the layer's cost per
//! request.
//!
//! ```sh
//! cargo bench -p kafka-broker --bench metrics_layer
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use bytes::{Bytes, BytesMut};
use criterion::{Criterion, criterion_group, criterion_main};
use kafka_broker::metrics::{Metrics, MetricsLayer};
use kafka_broker::pipeline::{Completion, Layer, Notes, Request, RequestInfo};
use kafka_broker::session::{Listener, Session};
use kafka_protocol::messages::fetch_response::{
    FetchResponse, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_protocol::messages::produce_response::{
    PartitionProduceResponse, ProduceResponse, TopicProduceResponse,
};
use kafka_protocol::{ApiKey, RequestBody, ResponseBody};
use kafka_records::{BatchOptions, NewRecord, encode_batch};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

fn batch(records: usize) -> Bytes {
    let records: Vec<NewRecord> = (0..records)
        .map(|_| NewRecord {
            timestamp: 1,
            key: None,
            value: Some(Bytes::from(vec![b'x'; 100])),
            headers: vec![],
        })
        .collect();
    let mut out = BytesMut::new();
    encode_batch(&BatchOptions::default(), &records, &mut out).unwrap();
    out.freeze()
}

fn produce_request(partitions: i32, records: &Bytes) -> RequestBody {
    ProduceRequest {
        acks: -1,
        timeout_ms: 30_000,
        topic_data: vec![TopicProduceData {
            name: "bench".into(),
            partition_data: (0..partitions)
                .map(|index| PartitionProduceData {
                    index,
                    records: Some(records.clone()),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    }
    .into()
}

fn produce_response(partitions: i32) -> ResponseBody {
    ProduceResponse {
        responses: vec![TopicProduceResponse {
            name: "bench".into(),
            partition_responses: (0..partitions)
                .map(|index| PartitionProduceResponse {
                    index,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    }
    .into()
}

fn fetch_response(partitions: i32, records: &Bytes) -> ResponseBody {
    FetchResponse {
        responses: vec![FetchableTopicResponse {
            topic: "bench".into(),
            partitions: (0..partitions)
                .map(|partition_index| PartitionData {
                    partition_index,
                    records: Some(records.clone().into()),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    }
    .into()
}

fn request(api: ApiKey, version: i16, body: RequestBody) -> Request {
    Request {
        api,
        version,
        correlation_id: 1,
        client_id: None,
        body,
        frame_len: 1000,
        received: Instant::now(),
        notes: Notes::default(),
    }
}

fn info(r: Request) -> RequestInfo {
    RequestInfo {
        api: r.api,
        version: r.version,
        correlation_id: r.correlation_id,
        frame_len: r.frame_len,
        received: r.received,
        notes: r.notes,
    }
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let layer = MetricsLayer::new(Arc::new(Metrics::new()));
    let mut session = Session::new(1, Listener::plaintext(), "127.0.0.1:1".parse().unwrap());
    let records = batch(10);
    let cases = [
        (
            "produce_1_partition",
            ApiKey::Produce,
            9,
            produce_request(1, &records),
            produce_response(1),
        ),
        (
            "produce_8_partitions",
            ApiKey::Produce,
            9,
            produce_request(8, &records),
            produce_response(8),
        ),
        (
            "fetch_8_partitions",
            ApiKey::Fetch,
            12,
            RequestBody::Fetch(Default::default()),
            fetch_response(8, &records),
        ),
    ];
    for (name, api, version, body, response) in cases {
        c.bench_function(&format!("baseline/{name}"), |b| {
            b.iter(|| {
                let r = request(api, version, black_box(body.clone()));
                let i = info(r);
                black_box((i, &response));
            })
        });
        c.bench_function(&format!("metrics/{name}"), |b| {
            b.iter(|| {
                let mut r = request(api, version, black_box(body.clone()));
                runtime.block_on(layer.on_request(&mut session, &mut r));
                let i = info(r);
                layer.on_response(
                    &session,
                    &i,
                    &Completion {
                        body: Some(&response),
                        sent_bytes: 100,
                        closed: false,
                        by_layer: None,
                    },
                );
                black_box(i);
            })
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
