//! Idempotent producer state survives a move of partition leadership and a restart: two
//! gateways ([`Server`]s with [`ManualMembership`]s) over one embedded store. The new
//! leader rebuilds each partition's producer state from the log before it checks the
//! partition's first idempotent batch, so a retry of a batch the old leader appended is
//! answered with its original offset and not stored again.
//!
//! How many bytes a recovery reads is checked in `producers::recovery`'s unit tests.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::{Bytes, BytesMut};
use kafka_broker::store::cluster::{ManualMembership, Member, MemberListener};
use kafka_broker::store::memory::{MemoryStore, MemoryStoreConfig};
use kafka_broker::store::{LogStore, NewTopic, TopicConfig, check_batches};
use kafka_broker::{BrokerConfig, Limits, Server, Stores};
use kafka_protocol::ErrorCode;
use kafka_protocol::api::{decode_response, encode_request};
use kafka_protocol::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_protocol::messages::request_header::RequestHeader;
use kafka_protocol::{ApiKey, ByteString, RequestBody, ResponseBody};
use kafka_records::{BatchOptions, DecodeLimits, NewRecord, encode_batch};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const TOPIC: &str = "t";
/// Partitions of [`TOPIC`]; most tests use partition 0.
const PARTITIONS: i32 = 8;

/// One store (topic `t`, one partition) that gateways share.
struct Shared {
    log: Arc<MemoryStore>,
}

impl Shared {
    async fn new() -> Shared {
        let log = Arc::new(MemoryStore::new(MemoryStoreConfig::default()));
        let config = TopicConfig {
            max_message_bytes: 8 * 1024 * 1024,
            ..TopicConfig::default()
        };
        log.create_topic(
            NewTopic {
                name: TOPIC.into(),
                partitions: PARTITIONS,
                config,
            },
            false,
        )
        .await
        .unwrap();
        Shared { log }
    }

    async fn high_watermark(&self) -> i64 {
        self.log.watermarks(TOPIC, 0).await.unwrap().high_watermark
    }

    /// Appends a batch straight to partition 0 of the store, as another gateway would
    /// have.
    async fn append(&self, b: Batch) -> i64 {
        self.append_to(0, b).await
    }

    async fn append_to(&self, partition: i32, b: Batch) -> i64 {
        let batches = check_batches(&encode(b), &DecodeLimits::default())
            .unwrap()
            .batches;
        self.log
            .append(TOPIC, partition, batches, 1_700_000_000_000)
            .await
            .unwrap()
            .base_offset
    }
}

fn member(node_id: i32) -> Member {
    Member {
        node_id,
        epoch: 1,
        listeners: vec![MemberListener {
            name: "PLAINTEXT".into(),
            host: "127.0.0.1".into(),
            port: 9092,
        }],
    }
}

/// A running gateway: its address and its membership, which the test moves.
struct Gateway {
    addr: std::net::SocketAddr,
    membership: Arc<ManualMembership>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Gateway {
    /// Gateway `node_id`, seeing `view` as the live gateways.
    async fn start(shared: &Shared, node_id: i32, view: &[i32], limits: Limits) -> Gateway {
        let membership = Arc::new(ManualMembership::new(
            member(node_id),
            view.iter().map(|n| member(*n)).collect(),
        ));
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let config = BrokerConfig {
            node_id,
            instance_id: u16::try_from(node_id).unwrap(),
            limits,
            ..BrokerConfig::default()
        };
        let server = Server::new(
            config,
            Stores {
                log: shared.log.clone(),
                offsets: shared.log.clone(),
            },
        )
        .membership(membership.clone());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(server.serve(tcp, async move {
            let _ = stopped.await;
        }));
        Gateway {
            addr,
            membership,
            stop: Some(stop),
        }
    }

    fn see(&self, view: &[i32]) {
        self.membership
            .set_members(view.iter().map(|n| member(*n)).collect());
    }

    async fn connect(&self) -> TcpStream {
        TcpStream::connect(self.addr).await.unwrap()
    }

    /// Sends one batch on a new connection: (error code, base offset).
    async fn produce(&self, b: Batch) -> (i16, i64) {
        let mut socket = self.connect().await;
        produce_on(&mut socket, b).await
    }

    fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// One idempotent batch: producer id, epoch, first sequence, records, bytes per value.
#[derive(Clone, Copy)]
struct Batch {
    pid: i64,
    epoch: i16,
    seq: i32,
    records: usize,
    value_bytes: usize,
}

fn batch(pid: i64, epoch: i16, seq: i32, records: usize) -> Batch {
    Batch {
        pid,
        epoch,
        seq,
        records,
        value_bytes: 8,
    }
}

fn encode(b: Batch) -> Bytes {
    let records: Vec<NewRecord> = (0..b.records)
        .map(|i| NewRecord {
            // Now-ish, within the broker's timestamp bounds.
            timestamp: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis() as i64,
            key: Some(Bytes::from(format!(
                "{}-{}",
                b.pid,
                i64::from(b.seq) + i as i64
            ))),
            value: Some(Bytes::from(vec![b'v'; b.value_bytes])),
            headers: vec![],
        })
        .collect();
    let options = BatchOptions {
        producer_id: b.pid,
        producer_epoch: b.epoch,
        base_sequence: b.seq,
        ..BatchOptions::default()
    };
    let mut out = BytesMut::new();
    encode_batch(&options, &records, &mut out).unwrap();
    out.freeze()
}

async fn produce_on(socket: &mut TcpStream, b: Batch) -> (i16, i64) {
    produce_many(socket, &[(0, b)]).await[0]
}

/// One Produce request with a batch for each of `parts` (partition, batch): the
/// answers (error code, base offset), in request order.
async fn produce_many(socket: &mut TcpStream, parts: &[(i32, Batch)]) -> Vec<(i16, i64)> {
    let body = ProduceRequest {
        acks: -1,
        timeout_ms: 30_000,
        topic_data: vec![TopicProduceData {
            name: ByteString::from_static(TOPIC),
            partition_data: parts
                .iter()
                .map(|(index, b)| PartitionProduceData {
                    index: *index,
                    records: Some(encode(*b)),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let header = RequestHeader {
        request_api_key: ApiKey::Produce.as_i16(),
        request_api_version: 9,
        correlation_id: 1,
        client_id: Some(ByteString::from_static("handover-test")),
        ..Default::default()
    };
    let frame = encode_request(&header, &RequestBody::from(body)).unwrap();
    socket.write_all(&frame).await.unwrap();
    let read = async {
        let size = socket.read_i32().await.unwrap();
        let mut raw = vec![0; usize::try_from(size).unwrap()];
        socket.read_exact(&mut raw).await.unwrap();
        Bytes::from(raw)
    };
    let raw = tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .expect("no produce response within 20 s");
    let (_, body) = decode_response(ApiKey::Produce, 9, &raw).unwrap();
    let ResponseBody::Produce(p) = body else {
        panic!("not a produce response")
    };
    p.responses[0]
        .partition_responses
        .iter()
        .map(|part| (part.error_code, part.base_offset))
        .collect()
}

const NONE: i16 = 0;
fn code(c: ErrorCode) -> i16 {
    c.code()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_on_the_new_leader_is_answered_with_the_original_offset() {
    let shared = Shared::new().await;
    // Node 1 alone is alive for both; node 2 is not in its own view, so it leads nothing.
    let a = Gateway::start(&shared, 1, &[1], Limits::default()).await;
    let mut b = Gateway::start(&shared, 2, &[1], Limits::default()).await;
    let pid = 4242;
    let mut offsets = Vec::new();
    for seq in [0, 2, 4] {
        let (err, offset) = a.produce(batch(pid, 1, seq, 2)).await;
        assert_eq!(err, NONE);
        offsets.push(offset);
    }
    assert_eq!(offsets, vec![0, 2, 4]);
    assert_eq!(
        b.produce(batch(pid, 1, 6, 2)).await.0,
        code(ErrorCode::NOT_LEADER_OR_FOLLOWER)
    );

    // Gateway 1 dies: both now see gateway 2 alone.
    a.see(&[2]);
    b.see(&[2]);
    assert_eq!(
        a.produce(batch(pid, 1, 6, 2)).await.0,
        code(ErrorCode::NOT_LEADER_OR_FOLLOWER)
    );
    let before = shared.high_watermark().await;
    // The last batch and the oldest one retried: duplicates, with their offsets.
    assert_eq!(b.produce(batch(pid, 1, 4, 2)).await, (NONE, 4));
    assert_eq!(b.produce(batch(pid, 1, 0, 2)).await, (NONE, 0));
    assert_eq!(
        shared.high_watermark().await,
        before,
        "a retry was stored again"
    );
    // A gap, and an older epoch, are refused.
    assert_eq!(
        b.produce(batch(pid, 1, 8, 2)).await.0,
        code(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER)
    );
    assert_eq!(
        b.produce(batch(pid, 0, 6, 2)).await.0,
        code(ErrorCode::INVALID_PRODUCER_EPOCH)
    );
    // The next sequence lands.
    assert_eq!(b.produce(batch(pid, 1, 6, 2)).await, (NONE, 6));
    assert_eq!(shared.high_watermark().await, 8);

    // Leadership back to gateway 1, which held state from before: it must not trust it
    // (it would expect sequence 6 again and store the retry twice).
    a.see(&[1]);
    b.see(&[1]);
    assert_eq!(a.produce(batch(pid, 1, 6, 2)).await, (NONE, 6));
    assert_eq!(shared.high_watermark().await, 8);
    assert_eq!(a.produce(batch(pid, 1, 8, 1)).await, (NONE, 8));

    // A restart: a new gateway 1 on the same store knows the producer from the log.
    let mut a = a;
    a.stop();
    let mut again = Gateway::start(&shared, 1, &[1], Limits::default()).await;
    assert_eq!(again.produce(batch(pid, 1, 8, 1)).await, (NONE, 8));
    assert_eq!(
        again.produce(batch(pid, 1, 10, 1)).await.0,
        code(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER)
    );
    assert_eq!(
        again.produce(batch(pid, 0, 9, 1)).await.0,
        code(ErrorCode::INVALID_PRODUCER_EPOCH)
    );
    assert_eq!(again.produce(batch(pid, 1, 9, 1)).await, (NONE, 9));
    assert_eq!(shared.high_watermark().await, 10);
    // A new epoch starts at sequence 0.
    assert_eq!(again.produce(batch(pid, 2, 0, 1)).await, (NONE, 10));
    b.stop();
    again.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_producers_in_the_tail_keeps_the_latest_within_the_cap() {
    let shared = Shared::new().await;
    // Written by a gateway that is gone: 3000 producers, one batch each.
    for pid in 0..3000 {
        shared.append(batch(1_000 + pid, 0, 0, 1)).await;
    }
    let limits = Limits {
        max_producer_states: 500,
        ..Limits::default()
    };
    let b = Gateway::start(&shared, 2, &[2], limits).await;
    let hw = shared.high_watermark().await;
    // The latest producers are known: their retries are duplicates.
    for pid in [3_999, 3_900, 3_600] {
        assert_eq!(
            b.produce(batch(pid, 0, 0, 1)).await,
            (NONE, pid - 1_000),
            "producer {pid}"
        );
    }
    assert_eq!(shared.high_watermark().await, hw);
    // The earliest ones did not fit the table: unknown, so accepted at any sequence.
    assert_eq!(b.produce(batch(1_000, 0, 7, 1)).await, (NONE, hw));
    assert_eq!(shared.high_watermark().await, hw + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_batches_beyond_the_window_are_not_recovered() {
    let shared = Shared::new().await;
    // 40 batches of about 64 KiB from one producer, then a small one from another.
    let big = |seq: i32| Batch {
        pid: 77,
        epoch: 0,
        seq,
        records: 1,
        value_bytes: 64 * 1024,
    };
    for seq in 0..40 {
        shared.append(big(seq)).await;
    }
    shared.append(batch(88, 0, 0, 1)).await;
    let limits = Limits {
        producer_state_recovery_bytes: 256 * 1024,
        ..Limits::default()
    };
    let b = Gateway::start(&shared, 2, &[2], limits).await;
    let hw = shared.high_watermark().await;
    assert_eq!(b.produce(batch(88, 0, 0, 1)).await, (NONE, 40));
    // What the window held is known: the last big batch is a duplicate...
    assert_eq!(b.produce(big(39)).await, (NONE, 39));
    // ...and one far behind it is out of order, not stored again.
    assert_eq!(
        b.produce(big(10)).await.0,
        code(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER)
    );
    assert_eq!(shared.high_watermark().await, hw);
    assert_eq!(b.produce(big(40)).await, (NONE, hw));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_raced_on_two_connections_against_the_recovery_lands_once() {
    let shared = Shared::new().await;
    for seq in 0..5 {
        shared.append(batch(99, 3, seq, 1)).await;
    }
    // Each round a gateway that has not recovered the partition yet gets the next batch
    // on two connections at once: one recovers and appends, the other waits and is
    // answered as its duplicate.
    for seq in 5..15 {
        let mut b = Gateway::start(&shared, 2, &[2], Limits::default()).await;
        let mut one = b.connect().await;
        let mut two = b.connect().await;
        let next = batch(99, 3, seq, 1);
        let (x, y) = tokio::join!(produce_on(&mut one, next), produce_on(&mut two, next));
        assert_eq!((x, y), ((NONE, i64::from(seq)), (NONE, i64::from(seq))));
        assert_eq!(shared.high_watermark().await, i64::from(seq) + 1);
        b.stop();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_recovery_off_a_retry_after_a_move_is_stored_twice() {
    // What the recovery prevents: the same retry as above, with a window of 0.
    let shared = Shared::new().await;
    shared.append(batch(5, 0, 0, 1)).await;
    let limits = Limits {
        producer_state_recovery_bytes: 0,
        ..Limits::default()
    };
    let b = Gateway::start(&shared, 2, &[2], limits).await;
    assert_eq!(b.produce(batch(5, 0, 0, 1)).await, (NONE, 1));
    assert_eq!(shared.high_watermark().await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_partition_of_one_request_is_recovered() {
    let shared = Shared::new().await;
    // Each partition: two batches of producer 31 written through a gateway now gone.
    for p in 0..PARTITIONS {
        shared.append_to(p, batch(31, 2, 0, 3)).await;
        shared.append_to(p, batch(31, 2, 3, 1)).await;
    }
    let b = Gateway::start(&shared, 2, &[2], Limits::default()).await;
    let mut socket = b.connect().await;
    // One request retrying the last batch of every partition: all duplicates.
    let retries: Vec<(i32, Batch)> = (0..PARTITIONS).map(|p| (p, batch(31, 2, 3, 1))).collect();
    let answers = produce_many(&mut socket, &retries).await;
    assert_eq!(answers, vec![(NONE, 3); retries.len()]);
    // The next one everywhere: appended after them.
    let next: Vec<(i32, Batch)> = (0..PARTITIONS).map(|p| (p, batch(31, 2, 4, 1))).collect();
    let answers = produce_many(&mut socket, &next).await;
    assert_eq!(answers, vec![(NONE, 4); next.len()]);
}
