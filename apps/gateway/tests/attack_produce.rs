//! Attacks on Produce, ListOffsets and idempotence against the gateway binary over raw TCP
//! (embedded store).
//!
//! Each test runs its attack while a well-behaved client probes with ApiVersions (and,
//! for the CPU attacks, a second client produces small batches), then checks that the
//! gateway is still running, that its peak resident memory stayed under a stated bound,
//! and that the well-behaved clients were answered within a stated bound.
//!
//! Bounds (debug build, 2 shared cores): probes and the second client's produce answered
//! within [`ANSWER_BOUND`]; peak RSS under [`RSS_BOUND_KIB`].

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use bytes::{Bytes, BytesMut};
use kafka_protocol::api::{decode_response, encode_request};
use kafka_protocol::messages::create_topics_request::{
    CreatableTopic, CreatableTopicConfig, CreateTopicsRequest,
};
use kafka_protocol::messages::init_producer_id_request::InitProducerIdRequest;
use kafka_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
};
use kafka_protocol::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_protocol::messages::request_header::RequestHeader;
use kafka_protocol::{ApiKey, ByteString, RequestBody, ResponseBody};
use kafka_records::{BatchOptions, Compression, NewRecord, encode_batch};
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};
use support::Gateway;
use support::attack::{
    Prober, assert_each_batch_landed_once, connect, flood_same, peak_rss_bound_kib, peak_rss_kib,
    read_frame,
};

/// Longest a well-behaved client may wait for an answer during an attack.
const ANSWER_BOUND: Duration = Duration::from_secs(2);
/// Peak resident memory of the gateway during any of these attacks.
const RSS_BOUND_KIB: u64 = 768 * 1024;

const NONE: i16 = 0;
const INVALID_RECORD: i16 = 87;
const INVALID_REQUEST: i16 = 42;
const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
const MESSAGE_TOO_LARGE: i16 = 10;
const INVALID_TIMESTAMP: i16 = 32;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const CORRUPT_MESSAGE: i16 = 2;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn request(corr: i32, version: i16, body: RequestBody) -> Bytes {
    let header = RequestHeader {
        request_api_key: body.api_key().as_i16(),
        request_api_version: version,
        correlation_id: corr,
        client_id: Some(ByteString::from_static("attack-produce")),
        ..Default::default()
    };
    encode_request(&header, &body).unwrap()
}

fn call(s: &mut TcpStream, key: ApiKey, version: i16, body: RequestBody) -> Option<ResponseBody> {
    s.write_all(&request(7, version, body)).ok()?;
    let frame = read_frame(s, 256 << 20)?;
    let (_, body) = decode_response(key, version, &Bytes::from(frame)).ok()?;
    Some(body)
}

/// A topic name no other test or round uses (the attacks also run, round after round,
/// against one long-running gateway in the soak run).
fn unique(name: &str) -> &'static str {
    Box::leak(support::topic_prefix(name).into_boxed_str())
}

fn create_topic(addr: SocketAddr, name: &str, partitions: i32) {
    create_topic_with(addr, name, partitions, &[]);
}

/// [`create_topic`] with topic settings.
fn create_topic_with(addr: SocketAddr, name: &str, partitions: i32, configs: &[(&str, &str)]) {
    let mut s = connect(addr).unwrap();
    let body = CreateTopicsRequest {
        topics: vec![CreatableTopic {
            name: ByteString::from(name.to_string()),
            num_partitions: partitions,
            replication_factor: 1,
            configs: configs
                .iter()
                .map(|(k, v)| CreatableTopicConfig {
                    name: ByteString::from((*k).to_owned()),
                    value: Some(ByteString::from((*v).to_owned())),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        timeout_ms: 10_000,
        ..Default::default()
    };
    let Some(ResponseBody::CreateTopics(r)) = call(&mut s, ApiKey::CreateTopics, 5, body.into())
    else {
        panic!("no CreateTopics answer")
    };
    assert_eq!(r.topics[0].error_code, NONE, "{r:?}");
}

/// One batch of `n` records (`value` each) with the given options.
fn batch(options: &BatchOptions, n: usize, value: Bytes) -> Bytes {
    let records: Vec<NewRecord> = (0..n)
        .map(|_| NewRecord {
            timestamp: now_ms(),
            key: None,
            value: Some(value.clone()),
            headers: vec![],
        })
        .collect();
    let mut out = BytesMut::new();
    encode_batch(options, &records, &mut out).unwrap();
    out.freeze()
}

fn small_batch() -> Bytes {
    batch(&BatchOptions::default(), 1, Bytes::from_static(b"hello"))
}

/// A Produce v9 request: `(partition, records)` for `topic`.
fn produce(topic: &str, parts: Vec<(i32, Bytes)>) -> RequestBody {
    ProduceRequest {
        acks: -1,
        timeout_ms: 10_000,
        topic_data: vec![TopicProduceData {
            name: ByteString::from(topic.to_string()),
            partition_data: parts
                .into_iter()
                .map(|(index, records)| PartitionProduceData {
                    index,
                    records: Some(records),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    }
    .into()
}

/// (error code, base offset) of every partition of a Produce v9 answer.
fn produced(s: &mut TcpStream, body: RequestBody) -> Option<Vec<(i16, i64)>> {
    match call(s, ApiKey::Produce, 9, body)? {
        ResponseBody::Produce(p) => Some(
            p.responses
                .iter()
                .flat_map(|t| t.partition_responses.iter())
                .map(|p| (p.error_code, p.base_offset))
                .collect(),
        ),
        _ => None,
    }
}

/// (error code, base offset) of the first partition of the next Produce v9 answer on `s`.
fn produce_answer(s: &mut TcpStream) -> (i16, i64) {
    let body = read_frame(s, 1 << 20).unwrap();
    let (_, r) = decode_response(ApiKey::Produce, 9, &Bytes::from(body)).unwrap();
    let ResponseBody::Produce(p) = r else {
        panic!("not a produce answer")
    };
    let part = &p.responses[0].partition_responses[0];
    (part.error_code, part.base_offset)
}

/// The high watermark of `topic`/`partition`.
fn latest(addr: SocketAddr, topic: &str, partition: i32) -> i64 {
    list_offset(addr, topic, partition, -1)
}

/// ListOffsets v7 for one partition at `timestamp` (-1: latest).
fn list_offset(addr: SocketAddr, topic: &str, partition: i32, timestamp: i64) -> i64 {
    let mut s = connect(addr).unwrap();
    let body = ListOffsetsRequest {
        replica_id: -1,
        topics: vec![ListOffsetsTopic {
            name: ByteString::from(topic.to_string()),
            partitions: vec![ListOffsetsPartition {
                partition_index: partition,
                timestamp,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let Some(ResponseBody::ListOffsets(r)) = call(&mut s, ApiKey::ListOffsets, 7, body.into())
    else {
        panic!("no ListOffsets answer")
    };
    r.topics[0].partitions[0].offset
}

fn init_producer_id(s: &mut TcpStream, id: i64, epoch: i16) -> (i16, i64, i16) {
    let body = InitProducerIdRequest {
        transactional_id: None,
        transaction_timeout_ms: -1,
        producer_id: id,
        producer_epoch: epoch,
        ..Default::default()
    };
    let Some(ResponseBody::InitProducerId(r)) = call(s, ApiKey::InitProducerId, 4, body.into())
    else {
        panic!("no InitProducerId answer")
    };
    (r.error_code, r.producer_id, r.producer_epoch)
}

/// An attack around one idempotent producer: a gateway, a one-partition topic, a prober
/// and the producer's connection with what its InitProducerId answered.
struct ProducerAttack {
    gw: Gateway,
    topic: &'static str,
    prober: Prober,
    conn: TcpStream,
    /// (error code, producer id, epoch).
    init: (i16, i64, i16),
}

/// [`ProducerAttack`] on a topic named after `name`; `None` when the attacks are skipped.
fn producer_attack(name: &str) -> Option<ProducerAttack> {
    let gw = Gateway::attack("attack_produce", &[])?;
    let topic = unique(name);
    create_topic(gw.addr, topic, 1);
    let prober = Prober::start(gw.addr, Duration::from_millis(20));
    let mut conn = connect(gw.addr).unwrap();
    let init = init_producer_id(&mut conn, -1, -1);
    Some(ProducerAttack {
        gw,
        topic,
        prober,
        conn,
        init,
    })
}

fn idempotent(id: i64, epoch: i16, seq: i32) -> Bytes {
    batch(
        &BatchOptions {
            producer_id: id,
            producer_epoch: epoch,
            base_sequence: seq,
            ..BatchOptions::default()
        },
        1,
        Bytes::from_static(b"idem"),
    )
}

/// A second well-behaved client producing one small batch every 50 ms; returns the
/// slowest answer and the number of failures when stopped.
struct SecondProducer {
    stop: Arc<std::sync::atomic::AtomicBool>,
    handle: std::thread::JoinHandle<(Duration, usize, usize)>,
}

impl SecondProducer {
    fn start(addr: SocketAddr, topic: &str) -> Self {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let topic = topic.to_string();
        let handle = std::thread::spawn(move || {
            let mut s = connect(addr).unwrap();
            let (mut slowest, mut failed, mut ok) = (Duration::ZERO, 0, 0);
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                let started = Instant::now();
                match produced(&mut s, produce(&topic, vec![(0, small_batch())])) {
                    Some(r) if r[0].0 == NONE => ok += 1,
                    _ => {
                        failed += 1;
                        s = connect(addr).unwrap();
                    }
                }
                slowest = slowest.max(started.elapsed());
                std::thread::sleep(Duration::from_millis(50));
            }
            (slowest, failed, ok)
        });
        SecondProducer { stop, handle }
    }

    fn finish(self) -> (Duration, usize, usize) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.handle.join().unwrap()
    }
}

/// Lets the prober (every 20 ms) make a few more rounds after a short attack, so its
/// report covers the time right after it too.
fn probe_on(prober: Prober) -> support::attack::ProbeReport {
    std::thread::sleep(Duration::from_millis(200));
    prober.finish()
}

/// The second producer lost nothing and waited at most [`ANSWER_BOUND`].
fn assert_second_answered(second: SecondProducer) {
    let (slowest, failed, ok) = second.finish();
    eprintln!("second producer: {ok} answered, slowest {slowest:?}");
    assert_eq!(failed, 0, "the second producer lost requests");
    assert!(ok > 0);
    assert!(
        slowest <= ANSWER_BOUND,
        "the second producer waited {slowest:?}"
    );
}

fn assert_healthy(gw: &mut Gateway, report: support::attack::ProbeReport) {
    assert!(gw.is_running(), "the gateway died\n{}", gw.output(40));
    report.assert_answered_within(ANSWER_BOUND, gw);
    let peak = peak_rss_kib(gw.pid()).unwrap();
    eprintln!(
        "peak RSS {peak} KiB; probes answered {}, slowest {:?}",
        report.answered, report.max
    );
    let bound = peak_rss_bound_kib(gw, RSS_BOUND_KIB);
    assert!(
        peak < bound,
        "peak RSS {peak} KiB over {bound} KiB\n{}",
        gw.output(40)
    );
}

/// One record of 60 MiB of zeros, zstd-compressed to about 2 KiB.
fn zstd_bomb() -> Bytes {
    let bomb = batch(
        &BatchOptions {
            compression: Compression::Zstd,
            ..BatchOptions::default()
        },
        1,
        Bytes::from(vec![0u8; 60 << 20]),
    );
    assert!(bomb.len() < 64 * 1024, "{}", bomb.len());
    bomb
}

#[test]
fn a_produce_full_of_zstd_bombs_is_bounded_and_off_the_workers() {
    let Some(mut gw) = Gateway::attack("attack_produce", &[]) else {
        return;
    };
    let t_bombs = unique("bombs");
    create_topic(gw.addr, t_bombs, 64);
    let t_calm = unique("calm");
    create_topic(gw.addr, t_calm, 1);
    let bomb = zstd_bomb();
    let prober = Prober::start(gw.addr, Duration::from_millis(20));
    let second = SecondProducer::start(gw.addr, t_calm);
    let started = Instant::now();
    let attackers: Vec<_> = (0..3)
        .map(|_| {
            let (addr, bomb) = (gw.addr, bomb.clone());
            std::thread::spawn(move || {
                let mut s = connect(addr).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                let mut answers = Vec::new();
                while started.elapsed() < Duration::from_secs(6) {
                    let parts = (0..64).map(|p| (p, bomb.clone())).collect();
                    answers.push(produced(&mut s, produce(t_bombs, parts)).expect("an answer"));
                }
                answers
            })
        })
        .collect();
    for a in attackers {
        for answer in a.join().unwrap() {
            assert_eq!(answer.len(), 64);
            // The request's budget (128 MiB) lets two 60 MiB batches through at most;
            // the rest are refused without being decompressed.
            let landed = answer.iter().filter(|(code, _)| *code == NONE).count();
            assert!(landed <= 2, "{landed} bombs decompressed in one request");
            assert!(
                answer
                    .iter()
                    .all(|(code, _)| *code == NONE || *code == MESSAGE_TOO_LARGE),
                "{answer:?}"
            );
        }
    }
    assert_second_answered(second);
    assert_healthy(&mut gw, prober.finish());
}

#[test]
fn list_offsets_naming_one_partition_a_million_times() {
    let Some(mut gw) = Gateway::attack("attack_produce", &[]) else {
        return;
    };
    let t_listed = unique("listed");
    create_topic(gw.addr, t_listed, 1);
    let mut s = connect(gw.addr).unwrap();
    assert_eq!(
        produced(&mut s, produce(t_listed, vec![(0, small_batch())])).unwrap()[0].0,
        NONE
    );
    let prober = Prober::start(gw.addr, Duration::from_millis(20));
    let body = ListOffsetsRequest {
        replica_id: -1,
        topics: vec![ListOffsetsTopic {
            name: ByteString::from_static(t_listed),
            partitions: (0..1_000_000)
                .map(|_| ListOffsetsPartition {
                    partition_index: 0,
                    timestamp: 1,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let mut attacker = connect(gw.addr).unwrap();
    attacker
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    // Either answered (every copy refused, nothing scanned) or the connection closed by
    // a decoding entry cap.
    if let Some(ResponseBody::ListOffsets(r)) =
        call(&mut attacker, ApiKey::ListOffsets, 7, body.into())
    {
        let parts = &r.topics[0].partitions;
        assert_eq!(parts.len(), 1_000_000);
        assert!(parts.iter().all(|p| p.error_code == INVALID_REQUEST));
    }
    // 30000 distinct partitions: past the cap (20000) refused without a lookup.
    let body = ListOffsetsRequest {
        replica_id: -1,
        topics: vec![ListOffsetsTopic {
            name: ByteString::from_static(t_listed),
            partitions: (0..30_000)
                .map(|partition_index| ListOffsetsPartition {
                    partition_index,
                    timestamp: -1,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let mut s = connect(gw.addr).unwrap();
    let Some(ResponseBody::ListOffsets(r)) = call(&mut s, ApiKey::ListOffsets, 7, body.into())
    else {
        panic!("no ListOffsets answer")
    };
    let codes: Vec<i16> = r.topics[0]
        .partitions
        .iter()
        .map(|p| p.error_code)
        .collect();
    assert_eq!(codes.len(), 30_000);
    assert_eq!(codes[0], NONE);
    assert!(
        codes[1..20_000]
            .iter()
            .all(|c| *c == UNKNOWN_TOPIC_OR_PARTITION)
    );
    assert!(codes[20_000..].iter().all(|c| *c == INVALID_REQUEST));
    assert_healthy(&mut gw, prober.finish());
}

#[test]
fn many_batches_for_one_partition_are_refused() {
    let Some(mut gw) = Gateway::attack("attack_produce", &[]) else {
        return;
    };
    let t_many = unique("many");
    create_topic(gw.addr, t_many, 1);
    let mut two = small_batch().to_vec();
    two.extend_from_slice(&small_batch());
    let mut many = Vec::new();
    for _ in 0..10_000 {
        many.extend_from_slice(&small_batch());
    }
    let prober = Prober::start(gw.addr, Duration::from_millis(20));
    let mut s = connect(gw.addr).unwrap();
    let (two, many) = (Bytes::from(two), Bytes::from(many));
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(1) {
        for records in [two.clone(), many.clone()] {
            let answer = produced(&mut s, produce(t_many, vec![(0, records)])).unwrap();
            assert_eq!(answer[0].0, INVALID_RECORD, "{answer:?}");
        }
    }
    // A partition named twice: every copy refused.
    let answer = produced(
        &mut s,
        produce(t_many, vec![(0, small_batch()), (0, small_batch())]),
    )
    .unwrap();
    assert_eq!(answer, vec![(INVALID_REQUEST, -1), (INVALID_REQUEST, -1)]);
    assert_eq!(latest(gw.addr, t_many, 0), 0, "nothing may land");
    assert_healthy(&mut gw, probe_on(prober));
}

#[test]
fn the_same_idempotent_batch_on_two_connections_lands_once() {
    let Some(ProducerAttack {
        mut gw,
        topic: t_twice,
        prober,
        conn: _,
        init: (code, id, epoch),
    }) = producer_attack("twice")
    else {
        return;
    };
    assert_eq!(code, NONE);
    const ROUNDS: i32 = 40;
    let barrier = Arc::new(Barrier::new(2));
    let senders: Vec<_> = (0..2)
        .map(|_| {
            let (addr, barrier) = (gw.addr, barrier.clone());
            std::thread::spawn(move || {
                let mut s = connect(addr).unwrap();
                let mut answers = Vec::new();
                for seq in 0..ROUNDS {
                    let records = idempotent(id, epoch, seq);
                    let frame = request(seq, 9, produce(t_twice, vec![(0, records)]));
                    barrier.wait();
                    s.write_all(&frame).unwrap();
                    answers.push(produce_answer(&mut s));
                }
                answers
            })
        })
        .collect();
    let answers: Vec<Vec<(i16, i64)>> = senders.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(answers[0].len(), ROUNDS as usize);
    for (seq, (first, second)) in answers[0].iter().zip(&answers[1]).enumerate() {
        assert_eq!(first.0, NONE, "{first:?}");
        assert_eq!(first, second, "round {seq}: both must see the one offset");
    }
    assert_eq!(
        latest(gw.addr, t_twice, 0),
        i64::from(ROUNDS),
        "every batch exactly once"
    );
    assert_healthy(&mut gw, probe_on(prober));
}

/// One idempotent producer's batches pipelined on many connections at once, every batch
/// sent on each (retries of batches still in flight, and batches that run ahead of
/// their predecessors): each lands once and all its answers carry its one offset. Then
/// the same from connections that close without reading their answers, dropping
/// requests in flight: nothing lands twice, and the producer goes on after an epoch
/// bump.
#[test]
fn one_idempotent_producers_pipelined_batches_on_many_connections_land_once() {
    let Some(ProducerAttack {
        mut gw,
        topic: t_pipe,
        prober,
        conn: mut s,
        init: (code, id, epoch),
    }) = producer_attack("pipe")
    else {
        return;
    };
    assert_eq!(code, NONE);
    const CONNECTIONS: usize = 8;
    // The gateway's default pipelining depth per connection.
    const BATCHES: i32 = 16;
    let pipeline = |first: i32| -> Vec<u8> {
        let mut out = Vec::new();
        for seq in first..first + BATCHES {
            let records = idempotent(id, epoch, seq);
            out.extend_from_slice(&request(seq, 9, produce(t_pipe, vec![(0, records)])));
        }
        out
    };
    let flood = |first: i32, read: bool| -> Vec<Vec<(i16, i64)>> {
        let answers = if read { BATCHES as usize } else { 0 };
        flood_same(
            gw.addr,
            CONNECTIONS,
            &pipeline(first),
            answers,
            produce_answer,
        )
    };
    let answers = flood(0, true);
    // The first to check a batch appends it; a copy checked while it is in flight or
    // among the producer's last five recorded batches is answered with its offset; a
    // copy from a connection that fell further behind is `OUT_OF_ORDER_SEQUENCE_NUMBER`,
    // as Kafka answers a retry older than the batches it caches.
    assert_each_batch_landed_once(&answers, BATCHES as usize);
    assert_eq!(
        latest(gw.addr, t_pipe, 0),
        i64::from(BATCHES),
        "each batch once"
    );
    // The next 16 from connections that close at once.
    flood(BATCHES, false);
    std::thread::sleep(Duration::from_millis(500));
    let stored = latest(gw.addr, t_pipe, 0);
    assert!(
        (i64::from(BATCHES)..=2 * i64::from(BATCHES)).contains(&stored),
        "no batch twice: {stored} records for {} batches",
        2 * BATCHES
    );
    // The producer is not wedged behind batches nobody waits for.
    let (code, same, bumped) = init_producer_id(&mut s, id, epoch);
    assert_eq!((code, same, bumped), (NONE, id, epoch + 1));
    let answer = produced(
        &mut s,
        produce(t_pipe, vec![(0, idempotent(id, bumped, 0))]),
    );
    assert_eq!(answer.unwrap()[0], (NONE, stored));
    assert_healthy(&mut gw, probe_on(prober));
}

/// Different producers' idempotent batches on one partition are checked and appended
/// side by side (only one producer's own batches wait for each other). A flood of
/// made-up producer ids from many connections at once, every batch sent on two
/// connections together: each lands once, the real producer's batches land in order
/// among them, and the gateway stays healthy.
#[test]
fn a_flood_of_made_up_producer_ids_on_one_partition_lands_each_batch_once() {
    let Some(ProducerAttack {
        mut gw,
        topic: t_ids,
        prober,
        conn: mut victim,
        init: (_, id, epoch),
    }) = producer_attack("ids")
    else {
        return;
    };
    // The partition's producer state is recovered with the first batch.
    let first = produced(
        &mut victim,
        produce(t_ids, vec![(0, idempotent(id, epoch, 0))]),
    );
    assert_eq!(first.unwrap()[0], (NONE, 0));
    const PAIRS: i64 = 4;
    const IDS: i64 = 150;
    let barrier = Arc::new(Barrier::new(usize::try_from(2 * PAIRS).unwrap()));
    let flooders: Vec<_> = (0..2 * PAIRS)
        .map(|n| {
            let (addr, barrier) = (gw.addr, barrier.clone());
            std::thread::spawn(move || {
                // Both connections of a pair send the same made-up ids.
                let base = 1_000_000 + (n / 2) * IDS;
                let mut s = connect(addr).unwrap();
                barrier.wait();
                let mut failed = 0;
                for made_up in base..base + IDS {
                    let answer =
                        produced(&mut s, produce(t_ids, vec![(0, idempotent(made_up, 0, 0))]));
                    if answer.is_none_or(|a| a[0].0 != NONE) {
                        failed += 1;
                    }
                }
                failed
            })
        })
        .collect();
    let mut real = Vec::new();
    for seq in 1..=20 {
        let answer = produced(
            &mut victim,
            produce(t_ids, vec![(0, idempotent(id, epoch, seq))]),
        );
        let answer = answer.unwrap()[0];
        assert_eq!(answer.0, NONE, "{answer:?}");
        real.push(answer.1);
    }
    for f in flooders {
        assert_eq!(f.join().unwrap(), 0, "a flooding batch was refused");
    }
    assert!(real.windows(2).all(|w| w[0] < w[1]), "{real:?}");
    assert_eq!(
        latest(gw.addr, t_ids, 0),
        21 + PAIRS * IDS,
        "each made-up batch exactly once, the real ones too"
    );
    assert_healthy(&mut gw, probe_on(prober));
}

#[test]
fn spoofed_producer_ids_and_epochs_do_not_hurt_the_real_producer() {
    let Some(ProducerAttack {
        mut gw,
        topic: t_spoof,
        prober,
        conn: mut victim,
        init: (_, id, epoch),
    }) = producer_attack("spoof")
    else {
        return;
    };
    let mut attacker = connect(gw.addr).unwrap();
    let (_, own, _) = init_producer_id(&mut attacker, -1, -1);
    assert_ne!(own, id);
    assert!(
        (own - id).abs() > 1000,
        "producer ids must not be sequential: {id} then {own}"
    );
    // Guessing neighbours of its own id: seq 0 and 1 of each, as a victim's next would be.
    for guess in (own - 50..own + 50).filter(|g| *g != own && *g >= 0) {
        for seq in 0..2 {
            let _ = produced(
                &mut attacker,
                produce(t_spoof, vec![(0, idempotent(guess, 0, seq))]),
            );
        }
    }
    // An epoch bump with a wrong epoch gets a fresh id, not the victim's.
    for wrong in [epoch + 1, epoch + 7] {
        let (code, got, _) = init_producer_id(&mut attacker, id, wrong);
        assert_eq!(code, NONE);
        assert_ne!(got, id, "a wrong epoch must not bump the victim");
    }
    let before = latest(gw.addr, t_spoof, 0);
    for seq in 0..2 {
        let answer = produced(
            &mut victim,
            produce(t_spoof, vec![(0, idempotent(id, epoch, seq))]),
        )
        .unwrap();
        assert_eq!(answer[0].0, NONE, "{answer:?}");
        assert_eq!(
            answer[0].1,
            before + i64::from(seq),
            "the real batch landed"
        );
    }
    assert_eq!(latest(gw.addr, t_spoof, 0), before + 2);
    // Knowing the victim's id, a higher epoch is taken only from sequence 0 (as a
    // producer's own epoch bump, which Kafka accepts too): it cannot slip records in
    // mid-sequence.
    let answer = produced(
        &mut attacker,
        produce(t_spoof, vec![(0, idempotent(id, epoch + 1, 5))]),
    )
    .unwrap();
    assert_eq!(answer[0].0, OUT_OF_ORDER_SEQUENCE_NUMBER, "{answer:?}");
    assert_eq!(latest(gw.addr, t_spoof, 0), before + 2);
    // The victim's own bump with its current epoch works.
    let (code, got, bumped) = init_producer_id(&mut victim, id, epoch);
    assert_eq!((code, got, bumped), (NONE, id, epoch + 1));
    assert_healthy(&mut gw, probe_on(prober));
}

fn at(timestamp: i64) -> Bytes {
    let mut out = BytesMut::new();
    encode_batch(
        &BatchOptions::default(),
        &[NewRecord {
            timestamp,
            key: None,
            value: Some(Bytes::from_static(b"t")),
            headers: vec![],
        }],
        &mut out,
    )
    .unwrap();
    out.freeze()
}

#[test]
fn record_timestamps_outside_the_bounds_are_refused() {
    let Some(mut gw) = Gateway::attack(
        "attack_produce",
        &[("IGGY_KAFKA_MESSAGE_TIMESTAMP_BEFORE_MAX_MS", "60000")],
    ) else {
        return;
    };
    let t_clock = unique("clock");
    create_topic(gw.addr, t_clock, 1);
    let prober = Prober::start(gw.addr, Duration::from_millis(20));
    let mut s = connect(gw.addr).unwrap();
    let now = now_ms();
    // Two hours ahead (default bound one hour), two minutes behind (bound one minute).
    for ts in [now + 7_200_000, now - 120_000] {
        let answer = produced(&mut s, produce(t_clock, vec![(0, at(ts))])).unwrap();
        assert_eq!(answer[0].0, INVALID_TIMESTAMP, "{ts}: {answer:?}");
    }
    assert_eq!(latest(gw.addr, t_clock, 0), 0);
    let answer = produced(&mut s, produce(t_clock, vec![(0, at(now))])).unwrap();
    assert_eq!(answer[0].0, NONE, "{answer:?}");
    // The lookup by timestamp (on the validation threads) finds it.
    assert_eq!(list_offset(gw.addr, t_clock, 0, now - 1000), 0);
    assert_eq!(list_offset(gw.addr, t_clock, 0, now + 1000), -1);
    assert_healthy(&mut gw, probe_on(prober));
}

/// A topic's `compression.type` makes the gateway encode batches again: a few KiB of zstd
/// that inflate to 60 MiB cost that much once more to store. Stored `uncompressed` the
/// batch is far over `max.message.bytes` and refused; stored as gzip it fits and lands,
/// the work on the validation threads within the request's decompression budget, the
/// other clients answered meanwhile and memory bounded.
#[test]
fn batches_that_expand_on_recompression_are_bounded() {
    let Some(mut gw) = Gateway::attack("attack_produce", &[]) else {
        return;
    };
    let t_plain = unique("recompress-plain");
    create_topic_with(gw.addr, t_plain, 4, &[("compression.type", "uncompressed")]);
    let t_gzip = unique("recompress-gzip");
    create_topic_with(gw.addr, t_gzip, 4, &[("compression.type", "gzip")]);
    let t_calm = unique("recompress-calm");
    create_topic(gw.addr, t_calm, 1);
    let bomb = zstd_bomb();
    let prober = Prober::start(gw.addr, Duration::from_millis(20));
    let second = SecondProducer::start(gw.addr, t_calm);
    let mut s = connect(gw.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    for _ in 0..2 {
        let parts = (0..4).map(|p| (p, bomb.clone())).collect();
        let answer = produced(&mut s, produce(t_plain, parts)).expect("an answer");
        // Two inflate within the request's budget and are too large once stored; the
        // others are refused before decompression.
        assert!(
            answer.iter().all(|(code, _)| *code == MESSAGE_TOO_LARGE),
            "{answer:?}"
        );
    }
    for p in 0..4 {
        assert_eq!(latest(gw.addr, t_plain, p), 0, "nothing stored in {p}");
    }
    let parts = (0..4).map(|p| (p, bomb.clone())).collect();
    let answer = produced(&mut s, produce(t_gzip, parts)).expect("an answer");
    let landed = answer.iter().filter(|(code, _)| *code == NONE).count();
    assert!((1..=2).contains(&landed), "{answer:?}");
    assert!(
        answer
            .iter()
            .all(|(code, _)| *code == NONE || *code == MESSAGE_TOO_LARGE),
        "{answer:?}"
    );
    assert_second_answered(second);
    assert_healthy(&mut gw, probe_on(prober));
}

/// A batch whose codec bits name one codec while its payload is another's is refused as
/// corrupt (claimed uncompressed: as invalid records), nothing stored, on a topic that
/// stores the producer's codec and on one that recompresses.
#[test]
fn a_batch_claiming_one_codec_with_another_inside_is_refused() {
    let Some(mut gw) = Gateway::attack("attack_produce", &[]) else {
        return;
    };
    let t_as_sent = unique("codec-lie");
    create_topic(gw.addr, t_as_sent, 1);
    let t_zstd = unique("codec-lie-zstd");
    create_topic_with(gw.addr, t_zstd, 1, &[("compression.type", "zstd")]);
    let prober = Prober::start(gw.addr, Duration::from_millis(20));
    let mut s = connect(gw.addr).unwrap();
    let value = Bytes::from(b"a value that compresses, a value that compresses".repeat(50));
    for (inside, claimed) in [
        (Compression::Gzip, Compression::Lz4),
        (Compression::Lz4, Compression::Zstd),
        (Compression::Zstd, Compression::Snappy),
        (Compression::Snappy, Compression::Gzip),
        (Compression::Gzip, Compression::None),
    ] {
        let honest = batch(
            &BatchOptions {
                compression: inside,
                ..BatchOptions::default()
            },
            20,
            value.clone(),
        );
        let mut lie = honest.to_vec();
        // attributes at 21..23, the codec in the low three bits; the CRC (17..21)
        // covers them, so it is computed again for the lie.
        lie[22] = (lie[22] & !0x07) | claimed.id();
        let crc = crc32c::crc32c(&lie[21..]);
        lie[17..21].copy_from_slice(&crc.to_be_bytes());
        let lie = Bytes::from(lie);
        for topic in [t_as_sent, t_zstd] {
            let answer = produced(&mut s, produce(topic, vec![(0, lie.clone())])).unwrap();
            // Claimed uncompressed, the compressed bytes read as malformed records.
            let want = if claimed == Compression::None {
                INVALID_RECORD
            } else {
                CORRUPT_MESSAGE
            };
            assert_eq!(
                answer[0].0, want,
                "{inside:?} inside, {claimed:?} claimed, {topic}: {answer:?}"
            );
        }
    }
    assert_eq!(latest(gw.addr, t_as_sent, 0), 0);
    assert_eq!(latest(gw.addr, t_zstd, 0), 0);
    assert_healthy(&mut gw, probe_on(prober));
}
