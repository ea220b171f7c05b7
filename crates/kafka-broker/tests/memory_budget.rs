//! Request and response memory over real TCP, through the public [`kafka_broker::Server`]
//! with small limits: announced sizes hold nothing until their bytes arrive, small
//! requests are answered while the pool is taken, one address cannot take the pool,
//! large requests read piece by piece do not deadlock, and a client that never reads
//! stops being served instead of piling up responses.
//!
//! Large requests here are ApiVersions v0 with padding after the (empty) body, which the
//! broker ignores: any size, always answered.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kafka_broker::metrics::Metrics;
use kafka_broker::store::memory::{MemoryStore, MemoryStoreConfig};
use kafka_broker::store::{LogStore, NewTopic, TopicConfig};
use kafka_broker::{BrokerConfig, Limits, Server, Stores};
use kafka_protocol::ByteString;
use kafka_protocol::api::encode_request;
use kafka_protocol::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
use kafka_protocol::messages::request_header::RequestHeader;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

const MIB: usize = 1024 * 1024;

/// How long a well-behaved request may take to be answered (generous for a loaded
/// machine; without the budget's rules these tests wait for read timeouts of 20 s).
const ANSWER: Duration = Duration::from_secs(5);

struct Gw {
    kafka: SocketAddr,
    http: SocketAddr,
}

/// Frames up to 1 MiB; larger than 1 KiB is large; a 64 KiB reserve for small ones.
fn limits(total: usize) -> Limits {
    Limits {
        max_frame_size: MIB,
        small_request_bytes: 1024,
        small_request_reserve_bytes: 64 * 1024,
        max_buffered_request_bytes: total,
        max_buffered_request_bytes_per_ip: total,
        max_buffered_request_bytes_per_connection: total,
        ..Limits::default()
    }
}

async fn start(limits: Limits) -> Gw {
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig::default()));
    store
        .create_topic(
            NewTopic {
                name: "wide".into(),
                partitions: 1000,
                config: TopicConfig::default(),
            },
            false,
        )
        .await
        .unwrap();
    let mut config = BrokerConfig {
        limits,
        ..BrokerConfig::default()
    };
    config.timeouts.read = Duration::from_secs(20);
    config.timeouts.write = Duration::from_secs(20);
    let kafka = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gw = Gw {
        kafka: kafka.local_addr().unwrap(),
        http: http.local_addr().unwrap(),
    };
    let server = Server::new(
        config,
        Stores {
            log: store.clone(),
            offsets: store,
        },
    )
    .metrics(Arc::new(Metrics::new()))
    .http(http);
    tokio::spawn(server.serve(kafka, std::future::pending()));
    gw
}

/// ApiVersions v0 with `pad` bytes after the body.
fn api_versions(corr: i32, pad: usize) -> Vec<u8> {
    let mut payload = Vec::with_capacity(pad + 16);
    payload.extend_from_slice(&18i16.to_be_bytes());
    payload.extend_from_slice(&0i16.to_be_bytes());
    payload.extend_from_slice(&corr.to_be_bytes());
    payload.extend_from_slice(&4i16.to_be_bytes());
    payload.extend_from_slice(b"test");
    payload.resize(payload.len() + pad, 0);
    let mut out = (payload.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(&payload);
    out
}

/// A Metadata v1 request for the 1000-partition topic (a response of about 30 KiB).
fn metadata_wide(corr: i32) -> Vec<u8> {
    let header = RequestHeader {
        request_api_key: 3,
        request_api_version: 1,
        correlation_id: corr,
        client_id: Some(ByteString::from_static("never-reads")),
        ..Default::default()
    };
    let body = MetadataRequest {
        topics: Some(vec![MetadataRequestTopic {
            name: Some(ByteString::from_static("wide")),
            ..Default::default()
        }]),
        ..Default::default()
    };
    encode_request(&header, &body.into()).unwrap().to_vec()
}

/// The correlation id of the next response on `s`, within [`ANSWER`].
async fn answer(s: &mut TcpStream) -> Option<i32> {
    tokio::time::timeout(ANSWER, async {
        let size = s.read_i32().await.ok()?;
        let mut body = vec![0u8; usize::try_from(size).ok()?];
        s.read_exact(&mut body).await.ok()?;
        Some(i32::from_be_bytes(body[..4].try_into().ok()?))
    })
    .await
    .ok()
    .flatten()
}

/// Sends ApiVersions (padded by `pad`) on a fresh connection from `from` and checks it
/// is answered within [`ANSWER`].
async fn answered(gw: &Gw, from: &str, pad: usize, what: &str) {
    let mut s = connect_from(gw.kafka, from).await;
    s.write_all(&api_versions(7, pad)).await.unwrap();
    assert_eq!(answer(&mut s).await, Some(7), "{what}: no answer in time");
}

async fn connect_from(to: SocketAddr, from: &str) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    socket.connect(to).await.unwrap()
}

/// One sample from `/metrics`.
async fn metric(gw: &Gw, name: &str) -> f64 {
    let mut s = TcpStream::connect(gw.http).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).await.unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in the scrape"))
}

/// Waits until the connections so far have been read (their bytes are in).
async fn settle() {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

#[tokio::test]
async fn announced_sizes_hold_only_a_step_and_others_are_served() {
    let gw = start(limits(3 * MIB + 64 * 1024 + 8)).await;
    // Fifty connections announce a full frame each (50 MiB together, far more than the
    // 3 MiB pool) and send nothing more. Room stays set aside for the oldest of them to
    // finish (one frame), the rest of the pool is free for others.
    let mut quiet = Vec::new();
    for _ in 0..50 {
        let mut s = TcpStream::connect(gw.kafka).await.unwrap();
        s.write_all(&(MIB as i32).to_be_bytes()).await.unwrap();
        quiet.push(s);
    }
    settle().await;
    let held = metric(&gw, "kafka_gateway_request_memory_in_use_bytes").await;
    assert!(
        held > 0.0 && held <= (50 * 8 * 1024) as f64,
        "50 quiet announcers hold {held} bytes"
    );
    // Small and large requests from other connections are answered meanwhile.
    answered(&gw, "127.0.0.1", 0, "a small request").await;
    answered(&gw, "127.0.0.1", 512 * 1024, "a 512 KiB request").await;
    answered(&gw, "127.0.0.1", MIB - 20, "a request of the largest size").await;
    drop(quiet);
}

#[tokio::test]
async fn a_frame_that_stops_holds_a_bounded_multiple_of_what_it_sent() {
    let gw = start(limits(3 * MIB + 64 * 1024 + 8)).await;
    // The first 64 KiB of a 1 MiB frame, then nothing: its lease ran ahead of what
    // arrived (few grants and buffer moves for a frame that is really sent), but by at
    // most seven times what arrived (a 4 KiB step at first), never to the announced size.
    let sent = 64 * 1024;
    let mut s = TcpStream::connect(gw.kafka).await.unwrap();
    let frame = api_versions(1, MIB - 20);
    s.write_all(&frame[..sent]).await.unwrap();
    settle().await;
    let held = metric(&gw, "kafka_gateway_request_memory_in_use_bytes").await;
    assert!(
        held >= sent as f64 && held <= (8 * sent + 4 * 1024) as f64,
        "64 KiB of a 1 MiB frame hold {held} bytes"
    );
    // The rest comes: answered.
    s.write_all(&frame[sent..]).await.unwrap();
    assert_eq!(answer(&mut s).await, Some(1));
}

#[tokio::test]
async fn small_requests_are_answered_while_large_ones_hold_the_pool() {
    let gw = start(limits(MIB + 64 * 1024 + 8)).await;
    // One connection takes almost the whole pool with the start of a large frame and
    // stops there.
    let mut big = TcpStream::connect(gw.kafka).await.unwrap();
    let frame = api_versions(1, MIB - 20);
    big.write_all(&frame[..frame.len() - 10]).await.unwrap();
    settle().await;
    let held = metric(&gw, "kafka_gateway_request_memory_in_use_bytes").await;
    assert!(held >= (MIB - 16) as f64, "the large frame holds {held}");
    for i in 0..20 {
        answered(&gw, "127.0.0.1", 100, &format!("small request {i}")).await;
    }
    // The large one completes once its last bytes come.
    big.write_all(&frame[frame.len() - 10..]).await.unwrap();
    assert_eq!(answer(&mut big).await, Some(1));
}

#[tokio::test]
async fn one_address_cannot_take_the_pool() {
    let mut l = limits(3 * MIB + 64 * 1024 + 8);
    l.max_buffered_request_bytes_per_ip = MIB + 4;
    let gw = start(l).await;
    // 127.0.0.1 holds its whole share with a frame that stops short of its end.
    let mut hog = TcpStream::connect(gw.kafka).await.unwrap();
    let frame = api_versions(1, MIB - 20);
    hog.write_all(&frame[..frame.len() - 1]).await.unwrap();
    settle().await;
    // A second large frame from the same address waits...
    let mut same = connect_from(gw.kafka, "127.0.0.1").await;
    same.write_all(&api_versions(2, 64 * 1024)).await.unwrap();
    assert_eq!(
        tokio::time::timeout(Duration::from_millis(500), same.read_i32())
            .await
            .ok()
            .and_then(Result::ok),
        None,
        "the address's share is taken"
    );
    // ...while another address is served at once.
    answered(
        &gw,
        "127.0.0.2",
        MIB - 20,
        "a large frame from another address",
    )
    .await;
    // When the hog completes, the waiting frame goes through.
    hog.write_all(&frame[frame.len() - 1..]).await.unwrap();
    assert_eq!(answer(&mut hog).await, Some(1));
    assert_eq!(answer(&mut same).await, Some(2));
}

#[tokio::test]
async fn large_frames_read_piece_by_piece_do_not_deadlock() {
    // Room for one and a half frames: three connections sending a frame each, in
    // interleaved pieces, would all stop halfway if each took what it could.
    let gw = start(limits(MIB + MIB / 2 + 64 * 1024 + 8)).await;
    let mut senders = Vec::new();
    for i in 0..3 {
        let addr = gw.kafka;
        senders.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            let frame = api_versions(i, MIB - 20);
            for piece in frame.chunks(32 * 1024) {
                s.write_all(piece).await.unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            answer(&mut s).await
        }));
    }
    for (i, sender) in senders.into_iter().enumerate() {
        let got = tokio::time::timeout(Duration::from_secs(15), sender)
            .await
            .expect("the senders are stuck")
            .unwrap();
        assert_eq!(got, Some(i as i32), "sender {i}");
    }
    assert_eq!(
        metric(&gw, "kafka_gateway_request_memory_in_use_bytes").await,
        0.0
    );
}

#[tokio::test]
async fn a_client_that_never_reads_stops_being_served() {
    let mut l = limits(4 * MIB);
    l.max_queued_response_bytes_per_connection = 64 * 1024;
    let gw = start(l).await;
    // A small receive window, so the kernel holds little of what the gateway sends.
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(8 * 1024).unwrap();
    let mut deaf = socket.connect(gw.kafka).await.unwrap();
    // 2000 Metadata requests of about 30 KiB of response each: 60 MiB if all answered.
    let sent = 2000;
    let requests: Vec<u8> = (0..sent).flat_map(metadata_wide).collect();
    let writer = tokio::spawn(async move {
        let _ = deaf.write_all(&requests).await;
        deaf
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    let served = metric(
        &gw,
        "kafka_gateway_requests_total{api=\"Metadata\",version=\"1\"}",
    )
    .await;
    // Handled: what the kernel buffers hold (at most 4 MiB of send buffer here) plus
    // the bound, about 140 responses; never all of them.
    assert!(
        served > 0.0 && served < 400.0,
        "{served} of {sent} requests handled for a client that reads nothing"
    );
    // What waits for the writer stays within the bound plus the one response that
    // crossed it (a bounded queue of 16 responses alone would hold about 480 KiB).
    let queued = metric(&gw, "kafka_gateway_response_memory_queued_bytes").await;
    assert!(
        queued > 0.0 && queued <= (64 * 1024 + 40 * 1024) as f64,
        "{queued} response bytes queued"
    );
    // Everyone else is still served.
    answered(&gw, "127.0.0.1", 0, "another client").await;
    writer.abort();
}
