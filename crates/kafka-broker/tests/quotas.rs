//! Client quotas over real TCP against the in-process server: throttle times in
//! responses, muted connections, throttled Fetch answers, and the DescribeClientQuotas /
//! AlterClientQuotas round trip with Kafka's validation errors.
//!
//! The quota window is shortened (11 slots of 100 ms) so throttle times stay near a
//! second; the delays asserted are lower bounds with slack, never upper bounds tighter
//! than seconds.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::{Bytes, BytesMut};
use kafka_broker::quotas::QuotaConfig;
use kafka_broker::store::memory::{MemoryStore, MemoryStoreConfig};
use kafka_broker::store::{LogStore, NewTopic, TopicConfig};
use kafka_broker::{BrokerConfig, Stores};
use kafka_protocol::api::{decode_response, encode_request};
use kafka_protocol::messages::alter_client_quotas_request::{
    AlterClientQuotasRequest, EntityData, EntryData, OpData,
};
use kafka_protocol::messages::describe_client_quotas_request::{
    ComponentData, DescribeClientQuotasRequest,
};
use kafka_protocol::messages::describe_client_quotas_response::DescribeClientQuotasResponse;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
use kafka_protocol::messages::fetch_response::FetchResponse;
use kafka_protocol::messages::metadata_request::MetadataRequest;
use kafka_protocol::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_protocol::messages::request_header::RequestHeader;
use kafka_protocol::{ByteString, ErrorCode, RequestBody, ResponseBody};
use kafka_records::{BatchOptions, NewRecord, encode_batch};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A server with `quotas` and topic `t` (one partition); its address.
async fn serve(quotas: QuotaConfig) -> std::net::SocketAddr {
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig::default()));
    store
        .create_topic(
            NewTopic {
                name: "t".into(),
                partitions: 1,
                config: TopicConfig::default(),
            },
            false,
        )
        .await
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = BrokerConfig {
        quotas,
        ..BrokerConfig::default()
    };
    let stores = Stores {
        log: store.clone(),
        offsets: store,
    };
    tokio::spawn(kafka_broker::run(
        listener,
        config,
        stores,
        std::future::pending(),
    ));
    addr
}

fn short_window() -> QuotaConfig {
    QuotaConfig {
        window_samples: 11,
        window_size: Duration::from_millis(100),
        ..QuotaConfig::default()
    }
}

struct Client {
    socket: TcpStream,
    id: &'static str,
    next: i32,
}

impl Client {
    async fn connect(addr: std::net::SocketAddr, id: &'static str) -> Client {
        Client {
            socket: TcpStream::connect(addr).await.unwrap(),
            id,
            next: 0,
        }
    }

    /// Sends one request and reads its response.
    async fn call(&mut self, version: i16, body: RequestBody) -> ResponseBody {
        self.next += 1;
        let key = body.api_key();
        let header = RequestHeader {
            request_api_key: key.as_i16(),
            request_api_version: version,
            correlation_id: self.next,
            client_id: Some(ByteString::from_static(self.id)),
            ..Default::default()
        };
        let frame = encode_request(&header, &body).unwrap();
        self.socket.write_all(&frame).await.unwrap();
        let read = async {
            let size = self.socket.read_i32().await.unwrap();
            let mut buf = vec![0; usize::try_from(size).unwrap()];
            self.socket.read_exact(&mut buf).await.unwrap();
            Bytes::from(buf)
        };
        let bytes = tokio::time::timeout(Duration::from_secs(20), read)
            .await
            .expect("no response within 20 s");
        let (h, body) = decode_response(key, version, &bytes).unwrap();
        assert_eq!(h.correlation_id, self.next);
        body
    }
}

/// A Produce v9 of one batch holding one record of `size` bytes.
fn produce(size: usize) -> RequestBody {
    let record = NewRecord {
        timestamp: 1_700_000_000_000,
        key: None,
        value: Some(Bytes::from(vec![b'x'; size])),
        headers: vec![],
    };
    let mut batch = BytesMut::new();
    encode_batch(&BatchOptions::default(), &[record], &mut batch).unwrap();
    ProduceRequest {
        acks: -1,
        timeout_ms: 30_000,
        topic_data: vec![TopicProduceData {
            name: ByteString::from_static("t"),
            partition_data: vec![PartitionProduceData {
                index: 0,
                records: Some(batch.freeze()),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
    .into()
}

fn produce_throttle(body: &ResponseBody) -> i32 {
    let ResponseBody::Produce(p) = body else {
        panic!("not a produce response: {body:?}")
    };
    assert_eq!(p.responses[0].partition_responses[0].error_code, 0);
    p.throttle_time_ms
}

fn metadata() -> RequestBody {
    MetadataRequest {
        topics: Some(vec![]),
        ..Default::default()
    }
    .into()
}

fn fetch(offset: i64) -> RequestBody {
    FetchRequest {
        max_wait_ms: 0,
        max_bytes: 50 << 20,
        topics: vec![FetchTopic {
            topic: ByteString::from_static("t"),
            partitions: vec![FetchPartition {
                partition: 0,
                fetch_offset: offset,
                partition_max_bytes: 50 << 20,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
    .into()
}

fn fetched(body: ResponseBody) -> FetchResponse {
    match body {
        ResponseBody::Fetch(f) => f,
        other => panic!("not a fetch response: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_over_its_byte_rate_is_throttled_and_its_next_request_waits() {
    // 50 kB/s over a window of 11 x 100 ms: 100 kB at once is twice the rate over the
    // 1 s the window counts, so about a second of silence is due.
    let addr = serve(QuotaConfig {
        producer_byte_rate: 50_000,
        ..short_window()
    })
    .await;
    let mut producer = Client::connect(addr, "heavy").await;
    let throttle = produce_throttle(&producer.call(9, produce(100_000)).await);
    assert!(throttle >= 500, "throttle_time_ms {throttle}");
    // The connection is muted: its next request is answered only after the throttle.
    let start = Instant::now();
    let ResponseBody::Metadata(_) = producer.call(9, metadata()).await else {
        panic!("not metadata")
    };
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(u64::try_from(throttle).unwrap() * 8 / 10),
        "waited {waited:?} for a throttle of {throttle} ms"
    );

    // Meanwhile another client is answered at once, and a small produce is not throttled.
    let mut other = Client::connect(addr, "light").await;
    let start = Instant::now();
    assert_eq!(produce_throttle(&other.call(9, produce(100)).await), 0);
    assert!(start.elapsed() < Duration::from_secs(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_quota_set_with_alter_overrides_the_default() {
    let addr = serve(QuotaConfig {
        producer_byte_rate: 50_000,
        ..short_window()
    })
    .await;
    let mut admin = Client::connect(addr, "admin").await;
    let r = alter(
        &mut admin,
        vec![entry(
            Some("free"),
            vec![op("producer_byte_rate", 1e12, false)],
        )],
        false,
    )
    .await;
    assert_eq!(r, vec![(0, None)]);
    let mut free = Client::connect(addr, "free").await;
    assert_eq!(produce_throttle(&free.call(9, produce(100_000)).await), 0);
    // Removing the key brings the default back.
    let r = alter(
        &mut admin,
        vec![entry(
            Some("free"),
            vec![op("producer_byte_rate", 0.0, true)],
        )],
        false,
    )
    .await;
    assert_eq!(r, vec![(0, None)]);
    assert!(produce_throttle(&free.call(9, produce(100_000)).await) > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_over_the_consumer_quota_gets_no_data_and_a_throttle_time() {
    // 20 kB/s over 11 x 100 ms: a fetch may return at most 20 kB (all but one slot).
    let addr = serve(QuotaConfig {
        consumer_byte_rate: 20_000,
        ..short_window()
    })
    .await;
    let mut admin = Client::connect(addr, "admin").await;
    // The producer is not limited; 20 records of 5 kB.
    for _ in 0..20 {
        admin.call(9, produce(5_000)).await;
    }
    let mut consumer = Client::connect(addr, "reader").await;
    let mut offset = 0;
    let mut throttled = None;
    for _ in 0..10 {
        let f = fetched(consumer.call(11, fetch(offset)).await);
        if f.throttle_time_ms > 0 {
            throttled = Some(f);
            break;
        }
        let p = &f.responses[0].partitions[0];
        let bytes = p.records.as_ref().map_or(0, |r| r.len());
        assert!(bytes > 0, "no data before the quota was reached");
        // Capped to what the quota allows over the window, plus at most one batch.
        assert!(bytes <= 20_000 + 6_000, "fetched {bytes} bytes at once");
        offset += i64::try_from(bytes / 5_000).unwrap().max(1);
    }
    let throttled = throttled.expect("the consumer was never throttled");
    // KIP-219: the throttled fetch is answered at once, with no data.
    assert!(throttled.responses.is_empty());
    assert_eq!(throttled.error_code, 0);
    // The connection's next fetch waits out the throttle, then gets the data.
    let start = Instant::now();
    let next = fetched(consumer.call(11, fetch(offset)).await);
    let min = u64::try_from(throttled.throttle_time_ms).unwrap() * 8 / 10;
    assert!(start.elapsed() >= Duration::from_millis(min));
    if next.throttle_time_ms == 0 {
        assert!(next.responses[0].partitions[0].records.is_some());
    }
}

fn entity(name: Option<&str>) -> EntityData {
    EntityData {
        entity_type: ByteString::from_static("client-id"),
        entity_name: name.map(|n| ByteString::from(n.to_string())),
        ..Default::default()
    }
}

fn entry(name: Option<&str>, ops: Vec<OpData>) -> EntryData {
    EntryData {
        entity: vec![entity(name)],
        ops,
        ..Default::default()
    }
}

fn op(key: &str, value: f64, remove: bool) -> OpData {
    OpData {
        key: ByteString::from(key.to_string()),
        value,
        remove,
        ..Default::default()
    }
}

/// (error code, message) per entry.
async fn alter(
    c: &mut Client,
    entries: Vec<EntryData>,
    validate_only: bool,
) -> Vec<(i16, Option<String>)> {
    let body = AlterClientQuotasRequest {
        entries,
        validate_only,
        ..Default::default()
    };
    let ResponseBody::AlterClientQuotas(r) = c.call(1, body.into()).await else {
        panic!("not an AlterClientQuotas response")
    };
    r.entries
        .into_iter()
        .map(|e| (e.error_code, e.error_message.map(|m| m.to_string())))
        .collect()
}

async fn describe(
    c: &mut Client,
    components: Vec<(&str, i8, Option<&str>)>,
    strict: bool,
) -> DescribeClientQuotasResponse {
    let body = DescribeClientQuotasRequest {
        components: components
            .into_iter()
            .map(|(t, m, name)| ComponentData {
                entity_type: ByteString::from(t.to_string()),
                match_type: m,
                match_: name.map(|n| ByteString::from(n.to_string())),
                ..Default::default()
            })
            .collect(),
        strict,
        ..Default::default()
    };
    let ResponseBody::DescribeClientQuotas(r) = c.call(1, body.into()).await else {
        panic!("not a DescribeClientQuotas response")
    };
    r
}

/// A described entry: client-id name, and (key, value) pairs.
type Listed = (Option<String>, Vec<(String, f64)>);

/// Each described entry.
fn listed(r: &DescribeClientQuotasResponse) -> Vec<Listed> {
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    r.entries
        .as_ref()
        .unwrap()
        .iter()
        .map(|e| {
            assert_eq!(e.entity.len(), 1);
            assert_eq!(&*e.entity[0].entity_type, "client-id");
            (
                e.entity[0].entity_name.as_ref().map(|n| n.to_string()),
                e.values
                    .iter()
                    .map(|v| (v.key.to_string(), v.value))
                    .collect(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_and_alter_round_trip_with_kafkas_validation() {
    let addr = serve(QuotaConfig::default()).await;
    let mut c = Client::connect(addr, "admin").await;
    let invalid = ErrorCode::INVALID_REQUEST.code();

    // Nothing set yet.
    assert!(listed(&describe(&mut c, vec![], false).await).is_empty());

    // validate_only changes nothing.
    let r = alter(
        &mut c,
        vec![entry(
            Some("a"),
            vec![op("producer_byte_rate", 1024.0, false)],
        )],
        true,
    )
    .await;
    assert_eq!(r, vec![(0, None)]);
    assert!(listed(&describe(&mut c, vec![], false).await).is_empty());

    let r = alter(
        &mut c,
        vec![
            entry(
                Some("a"),
                vec![
                    op("producer_byte_rate", 1024.0, false),
                    op("request_percentage", 12.5, false),
                ],
            ),
            entry(None, vec![op("consumer_byte_rate", 2048.0, false)]),
            entry(Some("b"), vec![op("consumer_byte_rate", 4096.0, false)]),
        ],
        false,
    )
    .await;
    assert_eq!(r, vec![(0, None), (0, None), (0, None)]);

    let all = listed(&describe(&mut c, vec![], false).await);
    assert_eq!(all.len(), 3);
    let exact = listed(&describe(&mut c, vec![("client-id", 0, Some("a"))], false).await);
    assert_eq!(
        exact,
        vec![(
            Some("a".to_string()),
            vec![
                ("producer_byte_rate".to_string(), 1024.0),
                ("request_percentage".to_string(), 12.5)
            ]
        )]
    );
    let default = listed(&describe(&mut c, vec![("client-id", 1, None)], true).await);
    assert_eq!(
        default,
        vec![(None, vec![("consumer_byte_rate".to_string(), 2048.0)])]
    );
    let specified = listed(&describe(&mut c, vec![("client-id", 2, None)], false).await);
    assert_eq!(
        specified.iter().map(|e| e.0.clone()).collect::<Vec<_>>(),
        vec![Some("a".to_string()), Some("b".to_string())]
    );
    // No user entities exist: a user filter matches nothing.
    assert!(listed(&describe(&mut c, vec![("user", 2, None)], false).await).is_empty());

    // Remove one key, then the last key of an entity removes the entity.
    let r = alter(
        &mut c,
        vec![
            entry(Some("a"), vec![op("request_percentage", 0.0, true)]),
            entry(Some("b"), vec![op("consumer_byte_rate", 0.0, true)]),
        ],
        false,
    )
    .await;
    assert_eq!(r, vec![(0, None), (0, None)]);
    let all = listed(&describe(&mut c, vec![], false).await);
    assert_eq!(
        all,
        vec![
            (None, vec![("consumer_byte_rate".to_string(), 2048.0)]),
            (
                Some("a".to_string()),
                vec![("producer_byte_rate".to_string(), 1024.0)]
            ),
        ]
    );

    // Validation, entry by entry.
    let user = EntryData {
        entity: vec![EntityData {
            entity_type: ByteString::from_static("user"),
            entity_name: Some(ByteString::from_static("alice")),
            ..Default::default()
        }],
        ops: vec![op("producer_byte_rate", 1.0, false)],
        ..Default::default()
    };
    let twice = EntryData {
        entity: vec![entity(Some("x")), entity(Some("y"))],
        ops: vec![op("producer_byte_rate", 1.0, false)],
        ..Default::default()
    };
    let empty = EntryData {
        entity: vec![],
        ops: vec![op("producer_byte_rate", 1.0, false)],
        ..Default::default()
    };
    let r = alter(
        &mut c,
        vec![
            entry(Some("v"), vec![op("bogus_rate", 1.0, false)]),
            entry(Some("v"), vec![op("producer_byte_rate", 0.0, false)]),
            entry(Some("v"), vec![op("producer_byte_rate", -5.0, false)]),
            entry(Some("v"), vec![op("consumer_byte_rate", 10.5, false)]),
            entry(Some("v"), vec![op("request_percentage", f64::NAN, false)]),
            user,
            twice,
            empty,
            entry(Some("v"), vec![op("request_percentage", 0.5, false)]),
        ],
        false,
    )
    .await;
    let codes: Vec<i16> = r.iter().map(|(c, _)| *c).collect();
    assert_eq!(
        codes,
        vec![
            invalid, invalid, invalid, invalid, invalid, invalid, invalid, invalid, 0
        ]
    );
    assert!(r[0].1.as_deref().unwrap().contains("bogus_rate"));
    assert!(r[1].1.as_deref().unwrap().contains("greater than 0"));

    // Describe filters Kafka refuses.
    for components in [
        vec![("client-id", 0, None)],
        vec![("client-id", 1, Some("a"))],
        vec![("client-id", 7, None)],
        vec![("client-id", 2, None), ("client-id", 1, None)],
        vec![("group", 2, None)],
        vec![("ip", 2, None), ("client-id", 2, None)],
    ] {
        let r = describe(&mut c, components.clone(), false).await;
        assert_eq!(r.error_code, invalid, "{components:?}");
        assert!(r.error_message.is_some());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_entities_beyond_the_cap_are_refused() {
    let addr = serve(QuotaConfig {
        max_entities: 3,
        ..QuotaConfig::default()
    })
    .await;
    let mut c = Client::connect(addr, "admin").await;
    let entries = (0..5)
        .map(|i| {
            let name: &'static str = Box::leak(format!("c{i}").into_boxed_str());
            entry(Some(name), vec![op("producer_byte_rate", 1000.0, false)])
        })
        .collect();
    let r = alter(&mut c, entries, false).await;
    let codes: Vec<i16> = r.iter().map(|(c, _)| *c).collect();
    let policy = ErrorCode::POLICY_VIOLATION.code();
    assert_eq!(codes, vec![0, 0, 0, policy, policy]);
    // An existing entity can still change.
    let r = alter(
        &mut c,
        vec![entry(
            Some("c0"),
            vec![op("producer_byte_rate", 5.0, false)],
        )],
        false,
    )
    .await;
    assert_eq!(r, vec![(0, None)]);
    assert_eq!(listed(&describe(&mut c, vec![], false).await).len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_alter_disabled_every_entry_is_refused() {
    let addr = serve(QuotaConfig {
        alter_enabled: false,
        ..QuotaConfig::default()
    })
    .await;
    let mut c = Client::connect(addr, "admin").await;
    let r = alter(
        &mut c,
        vec![
            entry(Some("a"), vec![op("producer_byte_rate", 1000.0, false)]),
            entry(None, vec![op("producer_byte_rate", 1000.0, false)]),
        ],
        false,
    )
    .await;
    let denied = ErrorCode::CLUSTER_AUTHORIZATION_FAILED.code();
    assert_eq!(
        r.iter().map(|(c, _)| *c).collect::<Vec<_>>(),
        vec![denied, denied]
    );
    assert!(listed(&describe(&mut c, vec![], false).await).is_empty());
}
