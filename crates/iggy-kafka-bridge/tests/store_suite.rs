//! The storage behaviour suite against the bridge on a real Iggy server.
//!
//! `kafka_store::store_suite!(optional ...)` instantiates every check. Without
//! `IGGY_SERVER_BIN` the harness is `None` and every test prints
//! `SKIPPED: <check> on Iggy: IGGY_SERVER_BIN not set` and returns; with it, a server
//! that does not start fails every test. One server serves all checks that run at the
//! same time (each check uses its own name prefix); it stops when the last of them drops
//! its harness.
//!
//! The harness expects of the bridge what it can do on a real server, so those checks
//! fail rather than skip:
//! - long polls: `watch` on looked-up partitions, and a second bridge on the same server
//!   as the other writer whose appends only the `poll_interval` re-reads see;
//! - retention in real time: Iggy drops expired messages by whole sealed segments, and
//!   segment size is fixed when a topic is created, which the bridge leaves at Iggy's
//!   1 GiB. The expiry driver therefore creates its topics as a native Iggy client, with
//!   1 MiB segments and the message expiry the bridge would set for `retention.ms`, and
//!   the server runs its segment cleaner every second; the bridge then appends, and
//!   must report the log start Iggy's cleaner left.
//!
//! Compaction as of a chosen clock is the bridge's own pass (`compact_due`), so
//! `compaction_latest_per_key` runs on Iggy too.
//!
//! Retention as of a chosen clock (`retention_by_time`, `retention_by_size`) has no
//! Iggy counterpart and prints `SKIPPED:`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use async_trait::async_trait;
use bytes::Bytes;
use iggy::prelude::{
    AutoLogin, Client, Credentials, Identifier, IggyByteSize, IggyClient, IggyDuration, IggyExpiry,
    MaxTopicSize, StreamClient, TopicClient, TopicCreateOptions,
};
use iggy_kafka_bridge::IggyBridge;
use kafka_store::suite::{Capability, CompactionDriver, ExpiryDriver, Harness};
use kafka_store::{
    AppendOutcome, CommittedOffset, LogStore, NewTopic, OffsetStore, PendingAppend, PendingOffsets,
    ReadOutcome, StoreResult, TimestampHit, TopicConfig, TopicInfo, ValidBatch, Watermarks,
};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use support::Server;
use tokio::sync::watch;

/// Smallest segment Iggy accepts; the expiry driver's topics fill one quickly.
const SEGMENT_BYTES: u64 = 1 << 20;

/// How often the server's segment cleaner runs.
const CLEANER_INTERVAL: &str = "1s";

static SERVER: Mutex<Weak<Server>> = Mutex::new(Weak::new());

fn shared_server(bin: std::path::PathBuf) -> Arc<Server> {
    let mut slot = SERVER.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(server) = slot.upgrade() {
        return server;
    }
    let server = Arc::new(Server::start_with(
        &bin,
        &[("IGGY_DATA_MAINTENANCE_MESSAGES_INTERVAL", CLEANER_INTERVAL)],
    ));
    *slot = Arc::downgrade(&server);
    server
}

/// The bridge plus the server it needs, so the server lives as long as the harness.
struct Guarded {
    bridge: IggyBridge,
    _server: Arc<Server>,
}

#[async_trait]
impl LogStore for Guarded {
    fn name(&self) -> &'static str {
        self.bridge.name()
    }
    async fn create_topic(&self, topic: NewTopic, validate_only: bool) -> StoreResult<TopicInfo> {
        self.bridge.create_topic(topic, validate_only).await
    }
    async fn delete_topic(&self, name: &str) -> StoreResult<()> {
        self.bridge.delete_topic(name).await
    }
    async fn topic(&self, name: &str) -> StoreResult<Option<TopicInfo>> {
        self.bridge.topic(name).await
    }
    async fn topic_by_id(&self, id: u128) -> StoreResult<Option<TopicInfo>> {
        self.bridge.topic_by_id(id).await
    }
    async fn topics(&self) -> StoreResult<Vec<TopicInfo>> {
        self.bridge.topics().await
    }
    async fn create_partitions(&self, name: &str, total: i32, v: bool) -> StoreResult<()> {
        self.bridge.create_partitions(name, total, v).await
    }
    async fn set_topic_config(&self, name: &str, config: TopicConfig) -> StoreResult<()> {
        self.bridge.set_topic_config(name, config).await
    }
    async fn append(
        &self,
        t: &str,
        p: i32,
        b: Vec<ValidBatch>,
        now: i64,
    ) -> StoreResult<AppendOutcome> {
        self.bridge.append(t, p, b, now).await
    }
    async fn submit(
        &self,
        t: &str,
        p: i32,
        b: Vec<ValidBatch>,
        now: i64,
    ) -> StoreResult<PendingAppend> {
        self.bridge.submit(t, p, b, now).await
    }
    async fn read(&self, t: &str, p: i32, o: i64, max: usize) -> StoreResult<ReadOutcome> {
        self.bridge.read(t, p, o, max).await
    }
    async fn watermarks(&self, t: &str, p: i32) -> StoreResult<Watermarks> {
        self.bridge.watermarks(t, p).await
    }
    async fn offset_for_timestamp(
        &self,
        t: &str,
        p: i32,
        ts: i64,
    ) -> StoreResult<Option<TimestampHit>> {
        self.bridge.offset_for_timestamp(t, p, ts).await
    }
    async fn max_timestamp(&self, t: &str, p: i32) -> StoreResult<Option<TimestampHit>> {
        self.bridge.max_timestamp(t, p).await
    }
    async fn delete_records(&self, t: &str, p: i32, before: i64) -> StoreResult<i64> {
        self.bridge.delete_records(t, p, before).await
    }
    fn watch(&self, t: &str, p: i32) -> Option<watch::Receiver<i64>> {
        self.bridge.watch(t, p)
    }
    fn poll_interval(&self) -> Duration {
        self.bridge.poll_interval()
    }
    fn notifies_every_append(&self) -> bool {
        self.bridge.notifies_every_append()
    }
    async fn is_transactional(&self, t: &str) -> StoreResult<bool> {
        self.bridge.is_transactional(t).await
    }
    async fn mark_transactional(&self, t: &str) -> StoreResult<()> {
        self.bridge.mark_transactional(t).await
    }
}

#[async_trait]
impl OffsetStore for Guarded {
    async fn commit(&self, g: &str, o: Vec<(String, i32, CommittedOffset)>) -> StoreResult<()> {
        self.bridge.commit(g, o).await
    }
    async fn fetch(&self, g: &str, t: &str, p: i32) -> StoreResult<Option<CommittedOffset>> {
        self.bridge.fetch(g, t, p).await
    }
    async fn fetch_all(&self, g: &str) -> StoreResult<Vec<(String, i32, CommittedOffset)>> {
        self.bridge.fetch_all(g).await
    }
    async fn delete(&self, g: &str, p: &[(String, i32)]) -> StoreResult<()> {
        self.bridge.delete(g, p).await
    }
    async fn delete_group(&self, g: &str) -> StoreResult<()> {
        self.bridge.delete_group(g).await
    }
    async fn groups(&self) -> StoreResult<Vec<String>> {
        self.bridge.groups().await
    }
    async fn acquire_shard(&self, shard: u32) -> StoreResult<()> {
        self.bridge.acquire_shard(shard).await
    }
    async fn release_shard(&self, shard: u32) {
        self.bridge.release_shard(shard).await
    }
    async fn put_group_state(&self, g: &str, state: Option<Bytes>) -> StoreResult<()> {
        self.bridge.put_group_state(g, state).await
    }
    async fn group_states(&self, shard: u32) -> StoreResult<Vec<(String, Bytes)>> {
        self.bridge.group_states(shard).await
    }
    async fn put_txn_state(&self, id: &str, state: Option<Bytes>) -> StoreResult<()> {
        self.bridge.put_txn_state(id, state).await
    }
    async fn txn_states(&self, shard: u32) -> StoreResult<Vec<(String, Bytes)>> {
        self.bridge.txn_states(shard).await
    }
    async fn claim_txn_epoch(&self, shard: u32) -> StoreResult<i32> {
        self.bridge.claim_txn_epoch(shard).await
    }
    async fn put_pending_offsets(
        &self,
        g: &str,
        pid: i64,
        o: Vec<(String, i32, CommittedOffset)>,
    ) -> StoreResult<()> {
        self.bridge.put_pending_offsets(g, pid, o).await
    }
    async fn complete_pending_offsets(&self, g: &str, pid: i64, commit: bool) -> StoreResult<()> {
        self.bridge.complete_pending_offsets(g, pid, commit).await
    }
    async fn pending_offsets(&self, shard: u32) -> StoreResult<Vec<PendingOffsets>> {
        self.bridge.pending_offsets(shard).await
    }
}

/// Creates topics as a native Iggy client, in the stream the bridge maps Kafka topics
/// to, with segments small enough for Iggy's expiry to act on within a test.
struct NativeExpiry {
    client: IggyClient,
    stream: String,
    _server: Arc<Server>,
}

impl NativeExpiry {
    async fn connect(server: Arc<Server>) -> NativeExpiry {
        let client = IggyClient::builder()
            .with_tcp()
            .with_server_address(server.address.clone())
            .with_auto_sign_in(AutoLogin::Enabled(Credentials::UsernamePassword(
                support::USER.into(),
                secrecy::SecretString::from(support::PASSWORD.to_owned()),
            )))
            .build()
            .unwrap();
        client
            .connect()
            .await
            .unwrap_or_else(|e| panic!("native connect: {e}; server log:\n{}", server.log_tail()));
        NativeExpiry {
            client,
            stream: support::config(&server).stream,
            _server: server,
        }
    }
}

#[async_trait]
impl ExpiryDriver for NativeExpiry {
    async fn create_topic(&self, name: &str, config: TopicConfig) -> Result<(), String> {
        let stream = Identifier::named(&self.stream).map_err(|e| e.to_string())?;
        // The bridge creates the stream with its first topic; checks run concurrently.
        if self
            .client
            .get_stream(&stream)
            .await
            .map_err(|e| format!("get stream {}: {e}", self.stream))?
            .is_none()
            && let Err(e) = self.client.create_stream(&self.stream).await
        {
            let exists = self.client.get_stream(&stream).await.ok().flatten();
            if exists.is_none() {
                return Err(format!("create stream {}: {e}", self.stream));
            }
        }
        let message_expiry = match u64::try_from(config.retention_ms) {
            Ok(ms) if ms > 0 => {
                IggyExpiry::ExpireDuration(IggyDuration::new(Duration::from_millis(ms)))
            }
            _ => IggyExpiry::NeverExpire,
        };
        let options = TopicCreateOptions {
            partitions_count: Some(1),
            message_expiry: Some(message_expiry),
            max_topic_size: Some(MaxTopicSize::Unlimited),
            segment_size: Some(IggyByteSize::from(SEGMENT_BYTES)),
            ..TopicCreateOptions::default()
        };
        self.client
            .create_topic(&stream, name, &options)
            .await
            .map(|_| ())
            .map_err(|e| format!("create Iggy topic {}/{name}: {e}", self.stream))
    }

    fn fill_bytes(&self) -> usize {
        SEGMENT_BYTES as usize
    }

    fn grace(&self) -> Duration {
        // Cleaner passes every second; the rest is slack for a loaded machine.
        Duration::from_secs(30)
    }
}

/// Compaction on demand: the bridge's passes over every compacted topic that is due, as
/// of the suite's clock.
struct BridgeCompaction {
    bridge: IggyBridge,
}

#[async_trait]
impl CompactionDriver for BridgeCompaction {
    async fn apply_compaction(&self, now_ms: i64) {
        self.bridge
            .compact_due(now_ms)
            .await
            .expect("compaction pass on Iggy");
    }
}

async fn guarded(server: &Arc<Server>) -> Arc<Guarded> {
    Arc::new(Guarded {
        bridge: support::bridge(server).await,
        _server: Arc::clone(server),
    })
}

async fn harness(test: &'static str) -> Option<Harness> {
    let bin = support::server_bin(&format!("{test} on Iggy"))?;
    let server = match tokio::task::spawn_blocking(move || shared_server(bin)).await {
        Ok(server) => server,
        // The start-up panic carries the server's log: pass it on as it is.
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    };
    let store = guarded(&server).await;
    let other_writer = guarded(&server).await;
    let expiry = Arc::new(NativeExpiry::connect(Arc::clone(&server)).await);
    let compaction = Arc::new(BridgeCompaction {
        bridge: store.bridge.clone(),
    });
    Some(
        Harness::new(store, format!("{test}-{}", support::run_id()))
            .with_other_writer(other_writer)
            .with_expiry(expiry)
            .with_compaction(compaction)
            .expecting(&[
                Capability::CompactionOnDemand,
                Capability::Watch,
                Capability::OtherWriter,
                Capability::RetentionInRealTime,
            ]),
    )
}

kafka_store::store_suite!(optional harness);
