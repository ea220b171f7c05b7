//! The request pipeline over real TCP, through the public [`kafka_broker::Server`]: an
//! embedder's layer sees every request with the connection's session and can answer or
//! close; the metrics layer and the `/metrics`, `/health`, `/ready` endpoint count exactly
//! what was sent.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use kafka_broker::metrics::Metrics;
use kafka_broker::pipeline::{Completion, Layer, Request, RequestInfo, Verdict};
use kafka_broker::session::Session;
use kafka_broker::store::memory::{MemoryStore, MemoryStoreConfig};
use kafka_broker::store::{LogStore, NewTopic, TopicConfig};
use kafka_broker::{BrokerConfig, Server, Stores};
use kafka_protocol::api::{decode_response, encode_request};
use kafka_protocol::messages::api_versions_request::ApiVersionsRequest;
use kafka_protocol::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
use kafka_protocol::messages::metadata_response::MetadataResponse;
use kafka_protocol::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_protocol::messages::request_header::RequestHeader;
use kafka_protocol::{ApiKey, ByteString, RequestBody, ResponseBody};
use kafka_records::{BatchOptions, NewRecord, encode_batch};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Records what it sees; answers Metadata for topic `secret` itself and closes on
/// DeleteTopics.
#[derive(Debug, Default)]
struct Spy {
    seen: Mutex<Vec<String>>,
}

#[async_trait]
impl Layer for Spy {
    fn name(&self) -> &'static str {
        "spy"
    }

    async fn on_request(&self, session: &mut Session, request: &mut Request) -> Verdict {
        self.seen.lock().unwrap().push(format!(
            "in {} v{} client={} software={:?} principal={}",
            request.api.name(),
            request.version,
            session.client_id,
            session.software.as_ref().map(|s| s.name.to_string()),
            session.principal
        ));
        match &request.body {
            RequestBody::Metadata(m)
                if m.topics
                    .as_ref()
                    .is_some_and(|t| t.iter().any(|t| t.name.as_deref() == Some("secret"))) =>
            {
                Verdict::Answer(
                    MetadataResponse {
                        cluster_id: Some(ByteString::from_static("answered-by-spy")),
                        ..Default::default()
                    }
                    .into(),
                )
            }
            RequestBody::DeleteTopics(_) => Verdict::Close("deletes are not allowed here"),
            // A wrong answer: another API's body. The pipeline closes instead of sending it.
            RequestBody::DescribeCluster(_) => Verdict::Answer(MetadataResponse::default().into()),
            _ => Verdict::Pass,
        }
    }

    fn on_response(&self, _: &Session, request: &RequestInfo, done: &Completion<'_>) {
        self.seen.lock().unwrap().push(format!(
            "out {} sent={} closed={} by={:?}",
            request.api.name(),
            done.sent_bytes > 0,
            done.closed,
            done.by_layer
        ));
    }
}

struct Gateway {
    kafka: SocketAddr,
    http: SocketAddr,
    spy: Arc<Spy>,
}

async fn start() -> Gateway {
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig::default()));
    store
        .create_topic(
            NewTopic {
                name: "t".into(),
                partitions: 2,
                config: TopicConfig::default(),
            },
            false,
        )
        .await
        .unwrap();
    let kafka = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (kafka_addr, http_addr) = (kafka.local_addr().unwrap(), http.local_addr().unwrap());
    let spy = Arc::new(Spy::default());
    let server = Server::new(
        BrokerConfig::default(),
        Stores {
            log: store.clone(),
            offsets: store,
        },
    )
    .metrics(Arc::new(Metrics::new()))
    .http(http)
    .layer(spy.clone());
    tokio::spawn(server.serve(kafka, std::future::pending()));
    Gateway {
        kafka: kafka_addr,
        http: http_addr,
        spy,
    }
}

fn frame(correlation_id: i32, version: i16, body: RequestBody) -> Bytes {
    let header = RequestHeader {
        request_api_key: body.api_key().as_i16(),
        request_api_version: version,
        correlation_id,
        client_id: Some(ByteString::from_static("layers-test")),
        ..Default::default()
    };
    encode_request(&header, &body).unwrap()
}

async fn response(socket: &mut TcpStream) -> Option<Bytes> {
    let read = async {
        let size = socket.read_i32().await.ok()?;
        let mut buf = vec![0u8; usize::try_from(size).ok()?];
        socket.read_exact(&mut buf).await.ok()?;
        Some(Bytes::from(buf))
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("response in time")
}

async fn call(socket: &mut TcpStream, id: i32, version: i16, body: RequestBody) -> ResponseBody {
    let key = body.api_key();
    socket.write_all(&frame(id, version, body)).await.unwrap();
    let raw = response(socket).await.expect("a response");
    decode_response(key, version, &raw).unwrap().1
}

fn produce_body(partition: i32, records: usize, topic: &'static str) -> RequestBody {
    let records: Vec<NewRecord> = (0..records)
        .map(|i| NewRecord {
            timestamp: 1_700_000_000_000,
            key: None,
            value: Some(Bytes::from(format!("value-{i}"))),
            headers: vec![],
        })
        .collect();
    let mut batch = BytesMut::new();
    encode_batch(&BatchOptions::default(), &records, &mut batch).unwrap();
    ProduceRequest {
        acks: -1,
        timeout_ms: 30_000,
        topic_data: vec![TopicProduceData {
            name: ByteString::from_static(topic),
            partition_data: vec![PartitionProduceData {
                index: partition,
                records: Some(batch.freeze()),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
    .into()
}

async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).await.unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    (
        head.split(' ').nth(1).unwrap().parse().unwrap(),
        body.to_string(),
    )
}

/// `name{labels} value` lines of a scrape, keyed by everything before the value.
async fn scrape(addr: SocketAddr) -> HashMap<String, f64> {
    let (status, body) = http_get(addr, "/metrics").await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.ends_with("# EOF\n"),
        "OpenMetrics text ends with # EOF"
    );
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layers_see_sessions_answer_and_close_and_metrics_count_exactly() {
    let gw = start().await;
    let mut c = TcpStream::connect(gw.kafka).await.unwrap();

    // ApiVersions v3 carries the client software: later requests' layers see it.
    let ResponseBody::ApiVersions(v) = call(
        &mut c,
        1,
        3,
        ApiVersionsRequest {
            client_software_name: ByteString::from_static("layers-test-client"),
            client_software_version: ByteString::from_static("1.0"),
            ..Default::default()
        }
        .into(),
    )
    .await
    else {
        panic!("not ApiVersions")
    };
    assert_eq!(v.error_code, 0);
    // Three produces: 3 + 4 records to t/0, and one to a partition that does not exist.
    for (id, (p, n)) in [(0, 3), (0, 4), (7, 1)].into_iter().enumerate() {
        let ResponseBody::Produce(r) =
            call(&mut c, 10 + id as i32, 9, produce_body(p, n, "t")).await
        else {
            panic!("not Produce")
        };
        let code = r.responses[0].partition_responses[0].error_code;
        assert_eq!(code, if p == 7 { 3 } else { 0 });
    }
    // The spy answers this Metadata itself.
    let ResponseBody::Metadata(m) = call(
        &mut c,
        20,
        12,
        MetadataRequest {
            topics: Some(vec![MetadataRequestTopic {
                name: Some(ByteString::from_static("secret")),
                ..Default::default()
            }]),
            ..Default::default()
        }
        .into(),
    )
    .await
    else {
        panic!("not Metadata")
    };
    assert_eq!(m.cluster_id.as_deref(), Some("answered-by-spy"));
    assert!(m.topics.is_empty());

    // An unsupported version of a served API is rejected before any layer: closed.
    let mut bad = TcpStream::connect(gw.kafka).await.unwrap();
    let mut raw = frame(30, 3, ApiVersionsRequest::default().into()).to_vec();
    // Size prefix, then the API key and version.
    raw[4..6].copy_from_slice(&ApiKey::Fetch.as_i16().to_be_bytes());
    raw[6..8].copy_from_slice(&99i16.to_be_bytes());
    bad.write_all(&raw).await.unwrap();
    assert!(response(&mut bad).await.is_none(), "closed");

    // The spy answers DescribeCluster with a Metadata body: never sent, the connection
    // closes.
    let mut wrong = TcpStream::connect(gw.kafka).await.unwrap();
    let body =
        kafka_protocol::messages::describe_cluster_request::DescribeClusterRequest::default();
    wrong.write_all(&frame(35, 0, body.into())).await.unwrap();
    assert!(response(&mut wrong).await.is_none(), "closed, not answered");

    // DeleteTopics: the spy closes the connection.
    let body = kafka_protocol::messages::delete_topics_request::DeleteTopicsRequest {
        topic_names: vec![ByteString::from_static("t")],
        ..Default::default()
    };
    c.write_all(&frame(40, 4, body.into())).await.unwrap();
    assert!(
        response(&mut c).await.is_none(),
        "the spy closed the connection"
    );

    // The layer saw the session: client id and software, recorded by the built-in
    // client-info layer (outside the embedder's) from the ApiVersions v3 request itself.
    let seen = gw.spy.seen.lock().unwrap().clone();
    assert_eq!(
        seen[0],
        "in ApiVersions v3 client=layers-test software=Some(\"layers-test-client\") principal=User:ANONYMOUS"
    );
    assert_eq!(
        seen[2],
        "in Produce v9 client=layers-test software=Some(\"layers-test-client\") principal=User:ANONYMOUS"
    );
    assert!(seen.contains(&"out Metadata sent=true closed=false by=Some(\"spy\")".to_string()));
    assert!(seen.contains(&"out DeleteTopics sent=false closed=true by=Some(\"spy\")".to_string()));
    assert!(
        !seen.iter().any(|s| s.contains("Fetch")),
        "rejected before the layers"
    );
    // The topic survived: the handler never ran.
    let mut c = TcpStream::connect(gw.kafka).await.unwrap();
    let ResponseBody::Produce(r) = call(&mut c, 50, 9, produce_body(1, 2, "t")).await else {
        panic!()
    };
    assert_eq!(r.responses[0].partition_responses[0].error_code, 0);

    // The connections closed by the gateway end on its side too, although their clients
    // keep their sockets: only the last one stays open.
    let open = "kafka_gateway_connections_open{listener=\"PLAINTEXT\"}";
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while scrape(gw.http).await.get(open) != Some(&1.0) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "connections still open"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop((bad, wrong));
    let m = scrape(gw.http).await;
    let get = |k: &str| {
        m.get(k)
            .copied()
            .unwrap_or_else(|| panic!("no {k} in {m:#?}"))
    };
    assert_eq!(
        get("kafka_gateway_requests_total{api=\"Produce\",version=\"9\"}"),
        4.0
    );
    assert_eq!(
        get("kafka_gateway_requests_total{api=\"ApiVersions\",version=\"3\"}"),
        1.0
    );
    assert_eq!(
        get("kafka_gateway_requests_total{api=\"Metadata\",version=\"12\"}"),
        1.0
    );
    assert_eq!(
        get("kafka_gateway_requests_total{api=\"DeleteTopics\",version=\"4\"}"),
        1.0
    );
    assert_eq!(
        get(
            "kafka_gateway_response_errors_total{api=\"Produce\",version=\"9\",error=\"UNKNOWN_TOPIC_OR_PARTITION\"}"
        ),
        1.0
    );
    assert_eq!(
        get("kafka_gateway_request_duration_seconds_count{api=\"Produce\"}"),
        4.0
    );
    assert_eq!(
        get("kafka_gateway_requests_rejected_total{reason=\"unsupported version\"}"),
        1.0
    );
    assert_eq!(
        get("kafka_gateway_partition_produced_records_total{topic=\"t\",partition=\"0\"}"),
        7.0
    );
    assert_eq!(
        get("kafka_gateway_partition_produced_records_total{topic=\"t\",partition=\"1\"}"),
        2.0
    );
    assert_eq!(
        get("kafka_gateway_partition_log_end_offset{topic=\"t\",partition=\"0\"}"),
        7.0
    );
    assert_eq!(
        get("kafka_gateway_connections_accepted_total{listener=\"PLAINTEXT\"}"),
        4.0
    );
    assert!(get("kafka_gateway_received_bytes_total") > 0.0);
    assert!(get("kafka_gateway_sent_bytes_total") > 0.0);
    assert_eq!(get("kafka_gateway_store_up"), 1.0);
    assert_eq!(get("kafka_gateway_request_memory_in_use_bytes"), 0.0);
    assert!(get("process_resident_memory_bytes") > 0.0);

    assert_eq!(http_get(gw.http, "/health").await.0, 200);
    assert_eq!(
        http_get(gw.http, "/ready").await,
        (200, "ready\n".to_string())
    );
    assert_eq!(http_get(gw.http, "/other").await.0, 404);
}
