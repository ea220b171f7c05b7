//! The broker's storage behaviour suite against the bridge on a real Iggy server.
//!
//! `kafka_store::store_suite!(optional ...)` instantiates every check; without
//! `IGGY_SERVER_BIN` the harness is `None` and every test prints
//! `SKIPPED: IGGY_SERVER_BIN not set` and returns. One server serves all checks
//! that run at the same time (each check uses its own name prefix); it stops when the
//! last of them drops its harness.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use async_trait::async_trait;
use bytes::Bytes;
use iggy_kafka_bridge::IggyBridge;
use kafka_store::suite::Harness;
use kafka_store::{
    AppendOutcome, CommittedOffset, LogStore, NewTopic, OffsetStore, PendingAppend, ReadOutcome,
    StoreResult, TimestampHit, TopicConfig, TopicInfo, Watermarks,
};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use support::Server;
use tokio::sync::watch;

static SERVER: Mutex<Weak<Server>> = Mutex::new(Weak::new());

fn shared_server(bin: std::path::PathBuf) -> Arc<Server> {
    let mut slot = SERVER.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(server) = slot.upgrade() {
        return server;
    }
    let server = Arc::new(Server::start(bin));
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
    async fn append(&self, t: &str, p: i32, b: Vec<Bytes>, now: i64) -> StoreResult<AppendOutcome> {
        self.bridge.append(t, p, b, now).await
    }
    async fn submit(&self, t: &str, p: i32, b: Vec<Bytes>, now: i64) -> StoreResult<PendingAppend> {
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
}

async fn harness(test: &'static str) -> Option<Harness> {
    let bin = support::server_bin()?;
    let server = tokio::task::spawn_blocking(move || shared_server(bin))
        .await
        .expect("server start");
    let bridge = server.bridge().await;
    let store = Arc::new(Guarded {
        bridge,
        _server: server,
    });
    Some(Harness::new(store, format!("{test}-{}", support::run_id())))
}

kafka_store::store_suite!(optional harness);
