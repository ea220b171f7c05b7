//! A connection's consecutive Produce requests overlap: each holds its place in its
//! partitions (`LogStore::submit`) before the next is read, the store confirms them when
//! it can, and the responses still go out in request order. Anything else waits for
//! them. An idempotent producer's requests overlap too (each checked against the ones in
//! flight), and so do different idempotent producers' requests to one partition, and a
//! transactional producer's (its transaction stays unstable until the batch that opened
//! it is confirmed, whatever order the store confirms them in). The same idempotent
//! batch sent on two connections at once lands once, and a failure in the middle of a
//! producer's pipeline writes nothing twice.
//!
//! The store here is the embedded one behind a wrapper whose confirmations are held back:
//! until a number of appends have been submitted (a connection that handled its requests
//! one at a time would never get there), or for a fixed delay.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use kafka_broker::store::memory::{MemoryStore, MemoryStoreConfig};
use kafka_broker::store::{
    AppendOutcome, CommittedOffset, LogStore, NewTopic, OffsetStore, PendingAppend, PendingOffsets,
    ReadOutcome, StoreError, StoreResult, TimestampHit, TopicConfig, TopicInfo, ValidBatch,
    Watermarks,
};
use kafka_broker::{BrokerConfig, Stores};
use kafka_protocol::api::{decode_response, encode_request};
use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnTopic,
};
use kafka_protocol::messages::end_txn_request::EndTxnRequest;
use kafka_protocol::messages::init_producer_id_request::InitProducerIdRequest;
use kafka_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
};
use kafka_protocol::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_protocol::messages::request_header::RequestHeader;
use kafka_protocol::{ApiKey, ByteString, RequestBody, ResponseBody};
use kafka_records::{BatchOptions, NewRecord, encode_batch};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// How the wrapper holds confirmations back.
#[derive(Clone, Copy)]
enum Hold {
    /// Until this many appends have been submitted; then the later ones confirm first.
    UntilSubmitted(usize),
    /// The first append at once, the others as `UntilSubmitted`.
    FirstThenUntilSubmitted(usize),
    /// For this long each.
    For(Duration),
    /// For this long each, and the append with this index (counted from 0) reports a
    /// failure although it landed, as a send whose answer was lost does.
    FailOne(Duration, usize),
    /// Each append as its index says (how long, and whether it then reports a failure
    /// although it landed); the ones past the end at once.
    Script(&'static [(u64, bool)]),
}

/// The embedded store, with confirmations held back as `hold` says.
struct Held {
    inner: MemoryStore,
    hold: Hold,
    submitted: watch::Sender<usize>,
    /// Appends submitted and not yet confirmed.
    open: Arc<AtomicUsize>,
    /// The most there ever were at once.
    most_open: AtomicUsize,
    /// Reads that lag: see [`Held::lagging`].
    lag: Lag,
}

/// How long reads lag after an append reports a failure (none: they never do), and the
/// state that tracks it.
#[derive(Default, Clone)]
struct Lag {
    after_failure: Option<Duration>,
    /// Each append's base offset, by index.
    bases: Arc<std::sync::Mutex<Vec<i64>>>,
    /// Until when the high watermark shown is at most this.
    stale: Arc<std::sync::Mutex<Option<(std::time::Instant, i64)>>>,
}

impl Lag {
    /// The append with `index` reported a failure: for the lag's duration, reads end
    /// before the append before it (one confirmed earlier), as a new primary's reads
    /// can lag what it acknowledged.
    fn failed(&self, index: usize) {
        let Some(lasting) = self.after_failure else {
            return;
        };
        let bases = self.bases.lock().unwrap();
        if let Some(&hw) = index.checked_sub(1).and_then(|i| bases.get(i)) {
            *self.stale.lock().unwrap() = Some((std::time::Instant::now() + lasting, hw));
        }
    }

    fn shown(&self, mut w: Watermarks) -> Watermarks {
        if let Some((until, hw)) = *self.stale.lock().unwrap()
            && std::time::Instant::now() < until
        {
            w.high_watermark = w.high_watermark.min(hw);
        }
        w
    }
}

impl Held {
    fn new(hold: Hold) -> Self {
        Self {
            inner: MemoryStore::new(MemoryStoreConfig::default()),
            hold,
            submitted: watch::channel(0).0,
            open: Arc::new(AtomicUsize::new(0)),
            most_open: AtomicUsize::new(0),
            lag: Lag::default(),
        }
    }

    /// After an append reports a failure, the partition's reads lag for `lasting`: they
    /// end before the append confirmed just before the failing one.
    fn lagging(mut self, lasting: Duration) -> Self {
        self.lag.after_failure = Some(lasting);
        self
    }
}

#[async_trait]
impl LogStore for Held {
    fn name(&self) -> &'static str {
        "held"
    }
    async fn create_topic(&self, topic: NewTopic, validate_only: bool) -> StoreResult<TopicInfo> {
        self.inner.create_topic(topic, validate_only).await
    }
    async fn delete_topic(&self, name: &str) -> StoreResult<()> {
        self.inner.delete_topic(name).await
    }
    async fn topic(&self, name: &str) -> StoreResult<Option<TopicInfo>> {
        self.inner.topic(name).await
    }
    async fn topic_by_id(&self, id: u128) -> StoreResult<Option<TopicInfo>> {
        self.inner.topic_by_id(id).await
    }
    async fn topics(&self) -> StoreResult<Vec<TopicInfo>> {
        self.inner.topics().await
    }
    async fn create_partitions(&self, name: &str, total: i32, v: bool) -> StoreResult<()> {
        self.inner.create_partitions(name, total, v).await
    }
    async fn set_topic_config(&self, name: &str, config: TopicConfig) -> StoreResult<()> {
        self.inner.set_topic_config(name, config).await
    }
    async fn append(
        &self,
        t: &str,
        p: i32,
        b: Vec<ValidBatch>,
        now: i64,
    ) -> StoreResult<AppendOutcome> {
        self.submit(t, p, b, now).await?.await
    }
    async fn submit(
        &self,
        t: &str,
        p: i32,
        b: Vec<ValidBatch>,
        now: i64,
    ) -> StoreResult<PendingAppend> {
        // The place is taken now; only the confirmation waits.
        let outcome = self.inner.append(t, p, b, now).await?;
        let open = self.open.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_open.fetch_max(open, Ordering::SeqCst);
        let mut submitted = self.submitted.subscribe();
        let mut index = 0;
        self.submitted.send_modify(|n| {
            index = *n;
            *n += 1;
            let mut bases = self.lag.bases.lock().unwrap();
            bases.resize(index + 1, i64::MAX);
            bases[index] = outcome.base_offset;
        });
        let hold = self.hold;
        let lag = self.lag.clone();
        let release = Arc::clone(&self.open);
        Ok(Box::pin(async move {
            match hold {
                Hold::FirstThenUntilSubmitted(_) if index == 0 => {}
                Hold::UntilSubmitted(n) | Hold::FirstThenUntilSubmitted(n) => {
                    let _ = submitted.wait_for(|s| *s >= n).await;
                    // Later appends confirm first.
                    let later = u64::try_from(n.saturating_sub(index)).unwrap_or(0);
                    tokio::time::sleep(Duration::from_millis(5 * later)).await;
                }
                Hold::For(d) => tokio::time::sleep(d).await,
                Hold::Script(steps) => {
                    if let Some(&(ms, fails)) = steps.get(index) {
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        if fails {
                            lag.failed(index);
                            release.fetch_sub(1, Ordering::SeqCst);
                            return Err(StoreError::Unavailable("the answer was lost".into()));
                        }
                    }
                }
                Hold::FailOne(d, failing) => {
                    tokio::time::sleep(d).await;
                    if index == failing {
                        lag.failed(index);
                        release.fetch_sub(1, Ordering::SeqCst);
                        return Err(StoreError::Unavailable("the answer was lost".into()));
                    }
                }
            }
            release.fetch_sub(1, Ordering::SeqCst);
            Ok(outcome)
        }))
    }
    async fn read(&self, t: &str, p: i32, o: i64, max: usize) -> StoreResult<ReadOutcome> {
        self.inner.read(t, p, o, max).await
    }
    async fn watermarks(&self, t: &str, p: i32) -> StoreResult<Watermarks> {
        Ok(self.lag.shown(self.inner.watermarks(t, p).await?))
    }
    async fn offset_for_timestamp(
        &self,
        t: &str,
        p: i32,
        ts: i64,
    ) -> StoreResult<Option<TimestampHit>> {
        self.inner.offset_for_timestamp(t, p, ts).await
    }
    async fn max_timestamp(&self, t: &str, p: i32) -> StoreResult<Option<TimestampHit>> {
        self.inner.max_timestamp(t, p).await
    }
    async fn delete_records(&self, t: &str, p: i32, before: i64) -> StoreResult<i64> {
        self.inner.delete_records(t, p, before).await
    }
    fn watch(&self, t: &str, p: i32) -> Option<watch::Receiver<i64>> {
        self.inner.watch(t, p)
    }
    async fn is_transactional(&self, t: &str) -> StoreResult<bool> {
        self.inner.is_transactional(t).await
    }
    async fn mark_transactional(&self, t: &str) -> StoreResult<()> {
        self.inner.mark_transactional(t).await
    }
}

#[async_trait]
impl OffsetStore for Held {
    async fn commit(&self, g: &str, o: Vec<(String, i32, CommittedOffset)>) -> StoreResult<()> {
        self.inner.commit(g, o).await
    }
    async fn fetch(&self, g: &str, t: &str, p: i32) -> StoreResult<Option<CommittedOffset>> {
        self.inner.fetch(g, t, p).await
    }
    async fn fetch_all(&self, g: &str) -> StoreResult<Vec<(String, i32, CommittedOffset)>> {
        self.inner.fetch_all(g).await
    }
    async fn delete(&self, g: &str, partitions: &[(String, i32)]) -> StoreResult<()> {
        self.inner.delete(g, partitions).await
    }
    async fn delete_group(&self, g: &str) -> StoreResult<()> {
        self.inner.delete_group(g).await
    }
    async fn groups(&self) -> StoreResult<Vec<String>> {
        self.inner.groups().await
    }
    async fn acquire_shard(&self, shard: u32) -> StoreResult<()> {
        self.inner.acquire_shard(shard).await
    }
    async fn release_shard(&self, shard: u32) {
        self.inner.release_shard(shard).await
    }
    async fn put_group_state(&self, g: &str, state: Option<Bytes>) -> StoreResult<()> {
        self.inner.put_group_state(g, state).await
    }
    async fn group_states(&self, shard: u32) -> StoreResult<Vec<(String, Bytes)>> {
        self.inner.group_states(shard).await
    }
    async fn put_txn_state(&self, id: &str, state: Option<Bytes>) -> StoreResult<()> {
        self.inner.put_txn_state(id, state).await
    }
    async fn txn_states(&self, shard: u32) -> StoreResult<Vec<(String, Bytes)>> {
        self.inner.txn_states(shard).await
    }
    async fn claim_txn_epoch(&self, shard: u32) -> StoreResult<i32> {
        self.inner.claim_txn_epoch(shard).await
    }
    async fn put_pending_offsets(
        &self,
        g: &str,
        producer_id: i64,
        offsets: Vec<(String, i32, CommittedOffset)>,
    ) -> StoreResult<()> {
        self.inner
            .put_pending_offsets(g, producer_id, offsets)
            .await
    }
    async fn complete_pending_offsets(
        &self,
        g: &str,
        producer_id: i64,
        commit: bool,
    ) -> StoreResult<()> {
        self.inner
            .complete_pending_offsets(g, producer_id, commit)
            .await
    }
    async fn pending_offsets(&self, shard: u32) -> StoreResult<Vec<PendingOffsets>> {
        self.inner.pending_offsets(shard).await
    }
}

/// A gateway on a free loopback port over `store` (topic `t`, one partition).
async fn serve(store: Arc<Held>) -> TcpStream {
    TcpStream::connect(serve_at(store).await).await.unwrap()
}

/// [`serve`], returning the address instead of a connection.
async fn serve_at(store: Arc<Held>) -> std::net::SocketAddr {
    serve_with(store, BrokerConfig::default()).await
}

/// [`serve_at`] with `config`.
async fn serve_with(store: Arc<Held>, config: BrokerConfig) -> std::net::SocketAddr {
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

fn frame(correlation_id: i32, version: i16, body: RequestBody) -> Bytes {
    let header = RequestHeader {
        request_api_key: body.api_key().as_i16(),
        request_api_version: version,
        correlation_id,
        client_id: Some(ByteString::from_static("pipelining-test")),
        ..Default::default()
    };
    encode_request(&header, &body).unwrap()
}

/// A Produce v9 request of one batch of `records` records to `t`/0.
fn produce(correlation_id: i32, acks: i16, options: BatchOptions, records: usize) -> Bytes {
    produce_batch(
        correlation_id,
        acks,
        encoded(options, records, correlation_id),
    )
}

/// One batch of `records` records, valued `{tag}-{index}`.
fn encoded(options: BatchOptions, records: usize, tag: i32) -> Bytes {
    let records: Vec<NewRecord> = (0..records)
        .map(|i| NewRecord {
            timestamp: 1_700_000_000_000,
            key: None,
            value: Some(Bytes::from(format!("{tag}-{i}"))),
            headers: vec![],
        })
        .collect();
    let mut batch = BytesMut::new();
    encode_batch(&options, &records, &mut batch).unwrap();
    batch.freeze()
}

/// A Produce v9 request of `batch` to `t`/0.
fn produce_batch(correlation_id: i32, acks: i16, batch: Bytes) -> Bytes {
    produce_as(correlation_id, acks, None, batch)
}

/// A Produce v9 request of `batch` to `t`/0 under `transactional_id`.
fn produce_as(
    correlation_id: i32,
    acks: i16,
    transactional_id: Option<&'static str>,
    batch: Bytes,
) -> Bytes {
    let body = ProduceRequest {
        transactional_id: transactional_id.map(ByteString::from_static),
        acks,
        timeout_ms: 30_000,
        topic_data: vec![TopicProduceData {
            name: ByteString::from_static("t"),
            partition_data: vec![PartitionProduceData {
                index: 0,
                records: Some(batch),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    frame(correlation_id, 9, body.into())
}

fn list_latest(correlation_id: i32) -> Bytes {
    list_latest_at(correlation_id, 0)
}

/// ListOffsets v7 of `t`/0's latest offset at `isolation_level` (1: read_committed, the
/// last stable offset).
fn list_latest_at(correlation_id: i32, isolation_level: i8) -> Bytes {
    let body = ListOffsetsRequest {
        replica_id: -1,
        isolation_level,
        topics: vec![ListOffsetsTopic {
            name: ByteString::from_static("t"),
            partitions: vec![ListOffsetsPartition {
                partition_index: 0,
                timestamp: -1,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    frame(correlation_id, 7, body.into())
}

/// Reads one response; `None` at end of stream.
async fn response(socket: &mut TcpStream) -> Option<Bytes> {
    let read = async {
        let size = socket.read_i32().await.ok()?;
        let mut body = vec![0; usize::try_from(size).ok()?];
        socket.read_exact(&mut body).await.ok()?;
        Some(Bytes::from(body))
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("no response within 10 s: the requests did not overlap")
}

/// (correlation id, error code, base offset) of a Produce v9 response.
fn produced(bytes: &Bytes) -> (i32, i16, i64) {
    let (header, body) = decode_response(ApiKey::Produce, 9, bytes).unwrap();
    let ResponseBody::Produce(p) = body else {
        panic!("not a produce response")
    };
    let part = &p.responses[0].partition_responses[0];
    (header.correlation_id, part.error_code, part.base_offset)
}

/// (correlation id, offset) of a ListOffsets v7 response.
fn listed(bytes: &Bytes) -> (i32, i64) {
    let (header, body) = decode_response(ApiKey::ListOffsets, 7, bytes).unwrap();
    let ResponseBody::ListOffsets(l) = body else {
        panic!("not a list offsets response")
    };
    (header.correlation_id, l.topics[0].partitions[0].offset)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consecutive_produce_requests_overlap_and_answer_in_order() {
    // Nothing is confirmed until five appends are submitted, so the requests below can
    // only complete if the connection starts the next one before the previous is done.
    let store = Arc::new(Held::new(Hold::UntilSubmitted(5)));
    let mut socket = serve(Arc::clone(&store)).await;
    let plain = BatchOptions::default();
    let mut out = BytesMut::new();
    // Records 1..=6 per request; request 3 uses acks=0 (no response).
    for id in 1..=6 {
        let acks = if id == 3 { 0 } else { -1 };
        out.extend_from_slice(&produce(id, acks, plain, usize::try_from(id).unwrap()));
    }
    // Waits for the Produce requests before it is handled: it sees all 21 records.
    out.extend_from_slice(&list_latest(7));
    socket.write_all(&out).await.unwrap();

    let mut next = 0;
    for id in 1..=6 {
        let records = i64::from(id);
        if id != 3 {
            let answer = produced(&response(&mut socket).await.unwrap());
            assert_eq!(answer, (id, 0, next), "produce response {id}");
        }
        next += records;
    }
    assert_eq!(listed(&response(&mut socket).await.unwrap()), (7, 21));
    assert!(
        store.most_open.load(Ordering::SeqCst) >= 5,
        "appends waiting at once: {}",
        store.most_open.load(Ordering::SeqCst)
    );

    // A malformed request after pipelined ones: they are still answered, then the
    // connection closes.
    let mut out = BytesMut::new();
    for id in 8..=12 {
        out.extend_from_slice(&produce(id, -1, plain, 1));
    }
    out.extend_from_slice(&[0, 0, 0, 4, 0x7f, 0x7f, 0, 0]);
    socket.write_all(&out).await.unwrap();
    for id in 8..=12 {
        let answer = produced(&response(&mut socket).await.unwrap());
        assert_eq!(answer, (id, 0, next), "produce response {id}");
        next += 1;
    }
    assert!(response(&mut socket).await.is_none(), "connection closed");
}

fn idempotent(base_sequence: i32) -> BatchOptions {
    BatchOptions {
        producer_id: 7,
        producer_epoch: 0,
        base_sequence,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_producers_requests_overlap_and_land_in_order() {
    // After the first (which makes the partition's producer state known), nothing is
    // confirmed until six more appends are submitted, and the later ones confirm first:
    // the producer's requests complete only if each is checked against the ones still
    // in flight, and are recorded in order whatever order they are confirmed in.
    let store = Arc::new(Held::new(Hold::FirstThenUntilSubmitted(6)));
    let mut socket = serve(Arc::clone(&store)).await;
    socket
        .write_all(&produce(1, -1, idempotent(0), 2))
        .await
        .unwrap();
    assert_eq!(produced(&response(&mut socket).await.unwrap()), (1, 0, 0));
    let mut out = BytesMut::new();
    for id in 2..=6 {
        out.extend_from_slice(&produce(id, -1, idempotent((id - 1) * 2), 2));
    }
    socket.write_all(&out).await.unwrap();
    for id in 2..=6 {
        let answer = tokio::time::timeout(Duration::from_secs(10), response(&mut socket))
            .await
            .expect("the requests overlap")
            .unwrap();
        assert_eq!(
            produced(&answer),
            (id, 0, i64::from(id - 1) * 2),
            "produce response {id}"
        );
    }
    assert_eq!(store.most_open.load(Ordering::SeqCst), 5);
    // Retries of any of them are answered from the producer state, and a gap refused.
    socket
        .write_all(&produce(7, -1, idempotent(4), 2))
        .await
        .unwrap();
    assert_eq!(produced(&response(&mut socket).await.unwrap()), (7, 0, 4));
    socket
        .write_all(&produce(8, -1, idempotent(14), 1))
        .await
        .unwrap();
    let (_, code, _) = produced(&response(&mut socket).await.unwrap());
    assert_eq!(code, 45, "OUT_OF_ORDER_SEQUENCE_NUMBER");
    socket.write_all(&list_latest(9)).await.unwrap();
    assert_eq!(listed(&response(&mut socket).await.unwrap()), (9, 12));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_in_an_idempotent_pipeline_writes_nothing_twice() {
    // The third append reports a failure although it landed, with the fourth in flight
    // behind it: the producer's retries of both are answered from the log, not written
    // again, and its next batch follows them.
    let store = Arc::new(Held::new(Hold::FailOne(Duration::from_millis(30), 2)));
    let mut socket = serve(Arc::clone(&store)).await;
    let mut out = BytesMut::new();
    for id in 1..=4 {
        out.extend_from_slice(&produce(id, -1, idempotent((id - 1) * 2), 2));
    }
    socket.write_all(&out).await.unwrap();
    let mut answers = Vec::new();
    for _ in 1..=4 {
        answers.push(produced(&response(&mut socket).await.unwrap()));
    }
    assert_eq!(answers[0], (1, 0, 0));
    assert_eq!(answers[1], (2, 0, 2));
    assert_eq!(answers[2].1, 5, "LEADER_NOT_AVAILABLE: {:?}", answers[2]);
    assert_eq!(answers[3], (4, 0, 6));
    // The producer resends from the failed batch, in order.
    for (id, sequence, offset) in [(5, 4, 4), (6, 6, 6), (7, 8, 8)] {
        socket
            .write_all(&produce(id, -1, idempotent(sequence), 2))
            .await
            .unwrap();
        assert_eq!(
            produced(&response(&mut socket).await.unwrap()),
            (id, 0, offset),
            "batch from sequence {sequence}"
        );
    }
    socket.write_all(&list_latest(8)).await.unwrap();
    assert_eq!(listed(&response(&mut socket).await.unwrap()), (8, 10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovery_read_that_lags_an_acknowledged_batch_is_read_again() {
    // Producer 7's third batch reports a failure although it landed, and for a while
    // after that the partition's reads end before its second batch, which was
    // acknowledged (as a new Iggy primary's reads can). A recovery that took such a read
    // would put the producer back a batch, and its retry of the third would be refused
    // as out of order, which librdkafka and the Java client take as fatal.
    static STEPS: [(u64, bool); 3] = [(0, false), (0, false), (0, true)];
    let ms = Duration::from_millis;
    for (wait, lasting, retry_code) in [
        // Read again until the reads catch up: the retry is found in the log.
        (ms(10_000), ms(300), 0),
        // No wait: the lagging read is taken as it is.
        (Duration::ZERO, ms(300), 45),
        // A lag that outlasts the wait: taken as it is once the wait has passed.
        (ms(200), ms(60_000), 45),
    ] {
        let store = Arc::new(Held::new(Hold::Script(&STEPS)).lagging(lasting));
        let mut config = BrokerConfig::default();
        config.limits.producer_state_recovery_lag_wait = wait;
        let addr = serve_with(Arc::clone(&store), config).await;
        let mut socket = TcpStream::connect(addr).await.unwrap();
        for (id, sequence, answer) in [(1, 0, (0, 0)), (2, 2, (0, 2)), (3, 4, (5, -1))] {
            socket
                .write_all(&produce(id, -1, idempotent(sequence), 2))
                .await
                .unwrap();
            let (_, code, offset) = produced(&response(&mut socket).await.unwrap());
            assert_eq!((code, offset), answer, "batch from sequence {sequence}");
        }
        // The producer resends its third batch at once.
        let sent = std::time::Instant::now();
        socket
            .write_all(&produce(4, -1, idempotent(4), 2))
            .await
            .unwrap();
        let (_, code, offset) = produced(&response(&mut socket).await.unwrap());
        let took = sent.elapsed();
        let case = format!("wait {wait:?}, lag {lasting:?}: answered {code} in {took:?}");
        assert_eq!(code, retry_code, "{case}");
        if retry_code == 0 {
            assert_eq!(offset, 4, "{case}");
            assert!(took >= ms(250), "{case}");
            socket
                .write_all(&produce(5, -1, idempotent(6), 2))
                .await
                .unwrap();
            assert_eq!(produced(&response(&mut socket).await.unwrap()), (5, 0, 6));
            socket.write_all(&list_latest(6)).await.unwrap();
            assert_eq!(listed(&response(&mut socket).await.unwrap()), (6, 8));
        } else {
            assert!(took >= wait && took < ms(5_000), "{case}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_waits_for_an_earlier_ones_append_does_not_stall_it() {
    // Producer 7's second batch is in flight for a second when another producer's
    // append fails, so the partition is to be read from the log again. Producer 7's
    // next request must wait for its own batch in flight before that read: the
    // connection has to see that batch confirmed while the next request waits.
    static STEPS: [(u64, bool); 3] = [(0, false), (1000, false), (50, true)];
    let store = Arc::new(Held::new(Hold::Script(&STEPS)));
    let addr = serve_at(Arc::clone(&store)).await;
    let mut a = TcpStream::connect(addr).await.unwrap();
    let mut b = TcpStream::connect(addr).await.unwrap();
    a.write_all(&produce(1, -1, idempotent(0), 2))
        .await
        .unwrap();
    assert_eq!(produced(&response(&mut a).await.unwrap()), (1, 0, 0));
    a.write_all(&produce(2, -1, idempotent(2), 2))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let other = BatchOptions {
        producer_id: 8,
        ..idempotent(0)
    };
    b.write_all(&produce(1, -1, other, 2)).await.unwrap();
    let (_, code, _) = produced(&response(&mut b).await.unwrap());
    assert_eq!(code, 5, "LEADER_NOT_AVAILABLE");
    a.write_all(&produce(3, -1, idempotent(4), 2))
        .await
        .unwrap();
    assert_eq!(produced(&response(&mut a).await.unwrap()), (2, 0, 2));
    // After the failed append, which landed: found in the log, not overwritten.
    assert_eq!(produced(&response(&mut a).await.unwrap()), (3, 0, 6));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_idempotent_batch_on_two_connections_lands_once() {
    // Each append is confirmed 50 ms after it took its place: a check that did not wait
    // for the other connection's append to be recorded would pass the batch twice.
    let store = Arc::new(Held::new(Hold::For(Duration::from_millis(50))));
    let addr = serve_at(Arc::clone(&store)).await;
    let options = BatchOptions {
        producer_id: 7,
        producer_epoch: 0,
        base_sequence: 0,
        ..Default::default()
    };
    let mut a = TcpStream::connect(addr).await.unwrap();
    let mut b = TcpStream::connect(addr).await.unwrap();
    let (ra, rb) = tokio::join!(
        async {
            a.write_all(&produce(1, -1, options, 3)).await.unwrap();
            produced(&response(&mut a).await.unwrap())
        },
        async {
            b.write_all(&produce(2, -1, options, 3)).await.unwrap();
            produced(&response(&mut b).await.unwrap())
        }
    );
    assert_eq!((ra.1, rb.1), (0, 0), "both answered without error");
    assert_eq!(
        ra.2, rb.2,
        "the duplicate is answered with the original offset"
    );
    a.write_all(&list_latest(3)).await.unwrap();
    assert_eq!(
        listed(&response(&mut a).await.unwrap()),
        (3, 3),
        "landed once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_idempotent_producers_on_one_partition_overlap() {
    // Each append is confirmed 300 ms after it took its place. Two producers' batches on
    // one partition are checked against different producer states, so the second need
    // not wait for the first to be confirmed: both are open in the store at once.
    let store = Arc::new(Held::new(Hold::For(Duration::from_millis(300))));
    let addr = serve_at(Arc::clone(&store)).await;
    let options = |producer_id, base_sequence| BatchOptions {
        producer_id,
        producer_epoch: 0,
        base_sequence,
        ..Default::default()
    };
    let mut a = TcpStream::connect(addr).await.unwrap();
    let mut b = TcpStream::connect(addr).await.unwrap();
    // The partition's producer state is recovered with the first batch.
    a.write_all(&produce(1, -1, options(7, 0), 2))
        .await
        .unwrap();
    assert_eq!(produced(&response(&mut a).await.unwrap()), (1, 0, 0));
    assert_eq!(store.most_open.load(Ordering::SeqCst), 1);
    let (ra, rb) = tokio::join!(
        async {
            a.write_all(&produce(2, -1, options(7, 2), 2))
                .await
                .unwrap();
            produced(&response(&mut a).await.unwrap())
        },
        async {
            b.write_all(&produce(3, -1, options(8, 0), 3))
                .await
                .unwrap();
            produced(&response(&mut b).await.unwrap())
        }
    );
    assert_eq!((ra.1, rb.1), (0, 0), "both answered without error");
    let mut offsets = [ra.2, rb.2];
    offsets.sort_unstable();
    assert!(offsets == [2, 4] || offsets == [2, 5], "{offsets:?}");
    assert_eq!(store.most_open.load(Ordering::SeqCst), 2);
    a.write_all(&list_latest(4)).await.unwrap();
    assert_eq!(listed(&response(&mut a).await.unwrap()), (4, 7));
    // Each is still a duplicate of itself: the retries land nothing.
    a.write_all(&produce(5, -1, options(7, 2), 2))
        .await
        .unwrap();
    assert_eq!(produced(&response(&mut a).await.unwrap()), (5, 0, ra.2));
    b.write_all(&produce(6, -1, options(8, 0), 3))
        .await
        .unwrap();
    assert_eq!(produced(&response(&mut b).await.unwrap()), (6, 0, rb.2));
    a.write_all(&list_latest(7)).await.unwrap();
    assert_eq!(listed(&response(&mut a).await.unwrap()), (7, 7));
}

/// A batch of `records` records of `size`-byte values, each byte derived from the
/// request, the record and its place, so a byte from another request or another place
/// shows.
fn large_batch(id: i32, records: usize, size: usize) -> Bytes {
    let records: Vec<NewRecord> = (0..records)
        .map(|r| NewRecord {
            timestamp: 1_700_000_000_000,
            key: None,
            value: Some(Bytes::from(
                (0..size)
                    .map(|i| (i32::try_from(i * 31 + r * 7).unwrap() ^ id) as u8)
                    .collect::<Vec<u8>>(),
            )),
            headers: vec![],
        })
        .collect();
    let mut batch = BytesMut::new();
    encode_batch(&BatchOptions::default(), &records, &mut batch).unwrap();
    batch.freeze()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_requests_arrive_whole_with_and_without_pooled_read_buffers() {
    // Requests of 64 KiB and more are read into the frame pool's buffers once their
    // lease covers them (`frame_pool`); the buffers go back when the request is done and
    // are lent again. Sent back to back (the next request's bytes wait in the socket
    // while one is read) and in small pieces, over several rounds so that buffers are
    // reused, every batch must be stored byte for byte, and the small requests between
    // them too.
    for pool in [32 * 1024 * 1024, 0] {
        let mut config = BrokerConfig::default();
        config.limits.frame_pool_bytes = pool;
        let store = Arc::new(Held::new(Hold::For(Duration::from_millis(5))));
        let mut socket = TcpStream::connect(serve_with(Arc::clone(&store), config).await)
            .await
            .unwrap();
        let mut sent = Vec::new();
        let mut id = 0;
        for round in 0..3 {
            let mut requests = BytesMut::new();
            let mut ids = Vec::new();
            for (records, size) in [(70, 1000), (9, 30_000), (1, 10), (300, 900), (2, 150_000)] {
                id += 1;
                let batch = large_batch(id, records, size);
                requests.extend_from_slice(&produce_batch(id, -1, batch.clone()));
                sent.push(batch);
                ids.push(id);
            }
            if round == 1 {
                // In pieces of a prime size, each written on its own.
                for piece in requests.chunks(7_919) {
                    socket.write_all(piece).await.unwrap();
                    socket.flush().await.unwrap();
                    tokio::task::yield_now().await;
                }
            } else {
                socket.write_all(&requests).await.unwrap();
            }
            for id in ids {
                let (answered, error, _) = produced(&response(&mut socket).await.unwrap());
                assert_eq!((answered, error), (id, 0), "pool {pool}, round {round}");
            }
        }
        let mut stored = Vec::new();
        let mut offset = 0;
        while stored.len() < sent.len() {
            let read = store.inner.read("t", 0, offset, 1).await.unwrap();
            let batch = read.batches[0].clone();
            offset += i64::from(u32::from_be_bytes(batch[57..61].try_into().unwrap()));
            stored.push(batch);
        }
        for (i, (stored, sent)) in stored.iter().zip(&sent).enumerate() {
            // Base offset (0..8) and leader epoch (12..16) are the broker's.
            assert_eq!(stored.len(), sent.len(), "pool {pool}, batch {i}");
            assert!(
                stored[8..12] == sent[8..12] && stored[16..] == sent[16..],
                "pool {pool}, batch {i} differs"
            );
        }
    }
}

/// Sends `request` (API `key` at `version`) and returns the decoded response body.
async fn call(socket: &mut TcpStream, key: ApiKey, version: i16, request: Bytes) -> ResponseBody {
    socket.write_all(&request).await.unwrap();
    decode_response(key, version, &response(socket).await.unwrap())
        .unwrap()
        .1
}

/// A transactional producer on one connection, with a second connection reading `t`/0's
/// offsets as a consumer would.
struct TxnProducer {
    socket: TcpStream,
    consumer: TcpStream,
    pid: i64,
    epoch: i16,
    correlation_id: i32,
}

impl TxnProducer {
    /// InitProducerId v4 for transactional id `tx`.
    async fn init(addr: std::net::SocketAddr) -> TxnProducer {
        let (code, p) = TxnProducer::try_init(addr).await;
        assert_eq!(code, 0);
        p
    }

    /// InitProducerId v4 for transactional id `tx` on a new connection: its code, and
    /// the producer as answered.
    async fn try_init(addr: std::net::SocketAddr) -> (i16, TxnProducer) {
        let mut socket = TcpStream::connect(addr).await.unwrap();
        let consumer = TcpStream::connect(addr).await.unwrap();
        let init = InitProducerIdRequest {
            transactional_id: Some(ByteString::from_static("tx")),
            transaction_timeout_ms: 60_000,
            producer_id: -1,
            producer_epoch: -1,
            ..Default::default()
        };
        let request = frame(1, 4, init.into());
        let ResponseBody::InitProducerId(init) =
            call(&mut socket, ApiKey::InitProducerId, 4, request).await
        else {
            panic!("not an InitProducerId response")
        };
        let p = TxnProducer {
            socket,
            consumer,
            pid: init.producer_id,
            epoch: init.producer_epoch,
            correlation_id: 1,
        };
        (init.error_code, p)
    }

    /// Another connection of the same producer (no InitProducerId, which would fence it).
    async fn attach(addr: std::net::SocketAddr, pid: i64, epoch: i16) -> TxnProducer {
        TxnProducer {
            socket: TcpStream::connect(addr).await.unwrap(),
            consumer: TcpStream::connect(addr).await.unwrap(),
            pid,
            epoch,
            correlation_id: 1,
        }
    }

    fn next_id(&mut self) -> i32 {
        self.correlation_id += 1;
        self.correlation_id
    }

    /// AddPartitionsToTxn v3 of `t`/0.
    async fn add_partition(&mut self) {
        assert_eq!(self.add_code().await, 0);
    }

    /// AddPartitionsToTxn v3 of `t`/0: its code.
    async fn add_code(&mut self) -> i16 {
        let add = AddPartitionsToTxnRequest {
            v3_and_below_transactional_id: ByteString::from_static("tx"),
            v3_and_below_producer_id: self.pid,
            v3_and_below_producer_epoch: self.epoch,
            v3_and_below_topics: vec![AddPartitionsToTxnTopic {
                name: ByteString::from_static("t"),
                partitions: vec![0],
                ..Default::default()
            }],
            ..Default::default()
        };
        let request = frame(self.next_id(), 3, add.into());
        let ResponseBody::AddPartitionsToTxn(add) =
            call(&mut self.socket, ApiKey::AddPartitionsToTxn, 3, request).await
        else {
            panic!("not an AddPartitionsToTxn response")
        };
        add.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
    }

    /// A Produce v9 request of one transactional batch of two records from `sequence`,
    /// and its correlation id.
    fn produce(&mut self, sequence: i32) -> (i32, Bytes) {
        let id = self.next_id();
        let options = BatchOptions {
            transactional: true,
            producer_id: self.pid,
            producer_epoch: self.epoch,
            base_sequence: sequence,
            ..Default::default()
        };
        (id, produce_as(id, -1, Some("tx"), encoded(options, 2, id)))
    }

    /// EndTxn v3, committing.
    async fn commit(&mut self) {
        let end = EndTxnRequest {
            transactional_id: ByteString::from_static("tx"),
            producer_id: self.pid,
            producer_epoch: self.epoch,
            committed: true,
            ..Default::default()
        };
        let request = frame(self.next_id(), 3, end.into());
        let ResponseBody::EndTxn(end) = call(&mut self.socket, ApiKey::EndTxn, 3, request).await
        else {
            panic!("not an EndTxn response")
        };
        assert_eq!(end.error_code, 0);
    }

    /// The consumer's ListOffsets of the latest offset at `isolation_level`.
    async fn latest(&mut self, isolation_level: i8) -> i64 {
        let id = self.next_id();
        self.consumer
            .write_all(&list_latest_at(id, isolation_level))
            .await
            .unwrap();
        let (answered, offset) = listed(&response(&mut self.consumer).await.unwrap());
        assert_eq!(answered, id);
        offset
    }

    /// Waits until the last stable offset is `offset` (the coordinator writes markers
    /// after it answers EndTxn).
    async fn until_stable_at(&mut self, offset: i64) {
        let mut stable = -1;
        for _ in 0..250 {
            stable = self.latest(1).await;
            if stable == offset {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the last stable offset stayed at {stable}, not {offset}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transactional_producers_requests_overlap_and_stay_unstable_until_committed() {
    // A first transaction (one batch, then its marker, both confirmed at once) loads the
    // partition's transaction state. The second transaction's first batch is confirmed
    // last (400 ms), its next two at once: the three complete together only if the
    // producer's requests overlap, and while the first is unconfirmed its records,
    // already in the store, must stay out of reach of read_committed consumers.
    const STEPS: [(u64, bool); 5] = [(0, false), (0, false), (400, false), (0, false), (0, false)];
    let (store, _, mut p) = open_transaction(&STEPS, BrokerConfig::default()).await;
    p.commit().await;
    p.until_stable_at(3).await;

    p.add_partition().await;
    let mut out = BytesMut::new();
    let mut expected = Vec::new();
    for (sequence, offset) in [(2, 3), (4, 5), (6, 7)] {
        let (id, request) = p.produce(sequence);
        out.extend_from_slice(&request);
        expected.push((id, 0, offset));
    }
    p.socket.write_all(&out).await.unwrap();
    // The later two are confirmed; the first is in the store, not confirmed.
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(
        p.latest(1).await,
        3,
        "read_committed stops before the transaction's first batch"
    );
    for answer in expected {
        assert_eq!(produced(&response(&mut p.socket).await.unwrap()), answer);
    }
    assert_eq!(
        store.most_open.load(Ordering::SeqCst),
        3,
        "the transaction's three appends were in flight at once"
    );
    assert_eq!(p.latest(1).await, 3);
    assert_eq!(p.latest(0).await, 9);
    // Committed: the marker (offset 9) makes every record stable.
    p.commit().await;
    p.until_stable_at(10).await;
}

/// A gateway with `config` over a store that holds its appends as `steps` say, and a
/// transactional producer with a transaction open there: one batch, at offsets 0-1
/// (the store's first append).
async fn open_transaction(
    steps: &'static [(u64, bool)],
    config: BrokerConfig,
) -> (Arc<Held>, std::net::SocketAddr, TxnProducer) {
    let store = Arc::new(Held::new(Hold::Script(steps)));
    let addr = serve_with(Arc::clone(&store), config).await;
    let mut p = TxnProducer::init(addr).await;
    p.add_partition().await;
    let (id, request) = p.produce(0);
    p.socket.write_all(&request).await.unwrap();
    assert_eq!(
        produced(&response(&mut p.socket).await.unwrap()),
        (id, 0, 0)
    );
    (store, addr, p)
}

/// [`open_transaction`] on a gateway whose coordinator holds requests up to `wait`
/// (`completion_wait`), over a store that holds the second append (the transaction's
/// marker) for `marker_ms`.
async fn open_transaction_held(
    wait: Duration,
    marker_ms: u64,
) -> (std::net::SocketAddr, TxnProducer) {
    let steps: &'static [(u64, bool)] = Box::leak(Box::new([(0, false), (marker_ms, false)]));
    let mut config = BrokerConfig::default();
    config.transactions.completion_wait = wait;
    let (_, addr, p) = open_transaction(steps, config).await;
    (addr, p)
}

/// A transaction whose commit marker the store holds for `marker_ms`: the producer's
/// first batch (at once), its commit, then the next transaction's AddPartitionsToTxn
/// sent at once. Returns the add's code and how long it took to be answered.
async fn add_while_committing(wait: Duration, marker_ms: u64) -> (i16, Duration) {
    let (_, mut p) = open_transaction_held(wait, marker_ms).await;
    p.commit().await;
    let asked = std::time::Instant::now();
    let code = p.add_code().await;
    (code, asked.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_add_waits_for_the_previous_transaction_to_complete() {
    // The commit marker takes 300 ms to land; the next transaction's add waits for it
    // (and the Complete state) instead of sending the producer into a retry.
    let (code, took) = add_while_committing(Duration::from_millis(2_000), 300).await;
    assert_eq!(code, 0, "answered once the previous transaction completed");
    assert!(took >= Duration::from_millis(200), "it waited: {took:?}");
    // Without the wait: CONCURRENT_TRANSACTIONS at once, as Kafka's coordinator answers.
    let (code, took) = add_while_committing(Duration::ZERO, 300).await;
    assert_eq!(code, 51, "CONCURRENT_TRANSACTIONS");
    assert!(took < Duration::from_millis(200), "{took:?}");
    // A wait shorter than the completion: CONCURRENT_TRANSACTIONS after it.
    let (code, took) = add_while_committing(Duration::from_millis(100), 1_000).await;
    assert_eq!(code, 51, "CONCURRENT_TRANSACTIONS");
    assert!(
        (Duration::from_millis(100)..Duration::from_millis(900)).contains(&took),
        "{took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adds_flooding_a_completing_transaction_are_answered_at_their_deadline() {
    // The commit marker is held for 2 s; 64 connections keep asking to add a partition
    // to the id's next transaction meanwhile. Each add waits at most its 200 ms and is
    // answered CONCURRENT_TRANSACTIONS; a request of another kind is not held up; and
    // once the transaction completes an add goes through at once.
    let (addr, mut p) = open_transaction_held(Duration::from_millis(200), 2_000).await;
    p.commit().await;
    let started = std::time::Instant::now();
    let (pid, epoch) = (p.pid, p.epoch);
    let flood: Vec<_> = (0..64)
        .map(|_| {
            tokio::spawn(async move {
                let mut q = TxnProducer::attach(addr, pid, epoch).await;
                let mut slowest = Duration::ZERO;
                let mut answers = 0;
                while started.elapsed() < Duration::from_millis(1_500) {
                    let asked = std::time::Instant::now();
                    assert_eq!(q.add_code().await, 51, "CONCURRENT_TRANSACTIONS");
                    slowest = slowest.max(asked.elapsed());
                    answers += 1;
                }
                (answers, slowest)
            })
        })
        .collect();
    // Meanwhile the consumer's requests are answered at once.
    for _ in 0..10 {
        let asked = std::time::Instant::now();
        p.latest(0).await;
        assert!(
            asked.elapsed() < Duration::from_millis(150),
            "{:?}",
            asked.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for f in flood {
        let (answers, slowest) = f.await.unwrap();
        assert!(answers >= 3, "{answers} answers in 1.5 s");
        assert!(
            slowest < Duration::from_millis(700),
            "an add waited {slowest:?}"
        );
    }
    p.until_stable_at(3).await;
    assert_eq!(p.add_code().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_producer_instance_waits_for_the_fence_of_the_open_transaction() {
    // A transaction is open (one batch) when a new instance of the producer asks for
    // the id: the open transaction is aborted with a bumped epoch, its abort marker held
    // 300 ms by the store. With the wait, the new instance is answered the epoch after
    // that once the abort is complete; without it, CONCURRENT_TRANSACTIONS at once.
    for (wait, marker_ms) in [(Duration::from_millis(2_000), 300), (Duration::ZERO, 300)] {
        let (addr, mut old) = open_transaction_held(wait, marker_ms).await;
        let asked = std::time::Instant::now();
        let (code, new) = TxnProducer::try_init(addr).await;
        let took = asked.elapsed();
        if wait.is_zero() {
            assert_eq!(code, 51, "CONCURRENT_TRANSACTIONS");
            assert!(took < Duration::from_millis(200), "{took:?}");
            continue;
        }
        assert_eq!(code, 0, "answered once the abort completed");
        assert!(took >= Duration::from_millis(200), "it waited: {took:?}");
        // The fence took one epoch, the new instance the next.
        assert_eq!((new.pid, new.epoch), (old.pid, old.epoch + 2));
        // The old instance is fenced.
        assert_eq!(old.add_code().await, 90, "PRODUCER_FENCED");
    }
}
