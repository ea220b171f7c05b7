//! The bridge's own durable state, kept in Iggy so a restarted gateway finds it again.
//!
//! Stream `meta_stream` (default `__kafka_gateway`) holds two one-partition topics of JSON
//! records, read whole at connect and folded "last record per key wins" (compaction by
//! reading):
//!
//! ```text
//! offsets  {"g":group,"t":topic,"p":partition,"o":offset|null,"e":epoch,"m":meta|null,"ts":ms}
//!          key (g,t,p); "o":null deletes the committed offset
//! topics   {"s":stream,"t":iggy topic,"c":created_at_us,"deleted":bool,
//!           "retention_ms":..,"retention_bytes":..,"max_message_bytes":..,
//!           "log_start":{"<partition>":offset}}
//!          key (s,t,c): the creation time keeps a recreated topic from inheriting the
//!          settings of the one it replaces
//! ```
//!
//! One call of the bridge writes its records with one `send_messages`, so an offset
//! commit is all or nothing. Writes are serialized so the in-memory view applies them in
//! log order. One gateway owns this state; several gateways sharing one meta stream
//! would not see each other's later writes (they read it at connect only).

use crate::errors::{Op, map_iggy_error, timeout};
use crate::metrics::IggyMetrics;
use bytes::Bytes;
use iggy::prelude::{
    Consumer, Identifier, IggyClient, IggyError, IggyMessage, MessageClient, Partitioning,
    PollingStrategy, StreamClient, TopicClient, TopicCreateOptions,
};
use kafka_store::{CommittedOffset, StoreError, StoreResult, TopicConfig};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

const OFFSETS_TOPIC: &str = "offsets";
const TOPICS_TOPIC: &str = "topics";

/// Identifies one incarnation of an Iggy topic.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicKey {
    /// Iggy stream.
    pub stream: String,
    /// Iggy topic.
    pub topic: String,
    /// Iggy creation time, microseconds.
    pub created_at: u64,
}

/// What the gateway keeps about a topic beyond what Iggy stores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMeta {
    /// The Kafka settings as last set.
    pub config: TopicConfig,
    /// Kafka log start per partition, moved by `delete_records`.
    pub log_start: BTreeMap<u32, i64>,
}

#[derive(Debug, Serialize, Deserialize)]
struct OffsetRecord {
    g: String,
    t: String,
    p: i32,
    o: Option<i64>,
    #[serde(default)]
    e: i32,
    #[serde(default)]
    m: Option<String>,
    #[serde(default)]
    ts: i64,
}

#[derive(Debug, Serialize, Deserialize)]
struct TopicRecord {
    s: String,
    t: String,
    c: u64,
    #[serde(default)]
    deleted: bool,
    retention_ms: i64,
    retention_bytes: i64,
    max_message_bytes: i32,
    #[serde(default)]
    log_start: BTreeMap<u32, i64>,
}

type OffsetKey = (String, String, i32);

/// The loaded state and the way to change it.
#[derive(Debug)]
pub struct Meta {
    stream: String,
    call_timeout: Duration,
    metrics: IggyMetrics,
    offsets: Mutex<BTreeMap<OffsetKey, CommittedOffset>>,
    topics: Mutex<BTreeMap<TopicKey, TopicMeta>>,
    writes: tokio::sync::Mutex<()>,
}

fn poisoned<T>(_: T) -> StoreError {
    StoreError::Internal("bridge metadata lock poisoned".into())
}

async fn call<T>(
    metrics: &IggyMetrics,
    limit: Duration,
    op: Op,
    what: &str,
    fut: impl Future<Output = Result<T, IggyError>>,
) -> StoreResult<T> {
    let round_trip = async {
        match tokio::time::timeout(limit, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(map_iggy_error(&e, op, what, 0)),
            Err(_) => Err(timeout(op, &format!("{what}: no answer within {limit:?}"))),
        }
    };
    metrics.observe(op, round_trip).await
}

fn named(name: &str) -> StoreResult<Identifier> {
    Identifier::named(name).map_err(|e| StoreError::Internal(format!("name {name:?}: {e}")))
}

impl Meta {
    /// Creates the meta stream and topics if missing, then reads them whole.
    pub async fn open(
        client: &IggyClient,
        stream: &str,
        call_timeout: Duration,
        metrics: &IggyMetrics,
    ) -> StoreResult<Self> {
        let meta = Self {
            stream: stream.to_owned(),
            call_timeout,
            metrics: metrics.clone(),
            offsets: Mutex::new(BTreeMap::new()),
            topics: Mutex::new(BTreeMap::new()),
            writes: tokio::sync::Mutex::new(()),
        };
        ensure_stream(client, stream, call_timeout, metrics).await?;
        for topic in [OFFSETS_TOPIC, TOPICS_TOPIC] {
            meta.ensure_topic(client, topic).await?;
        }
        let offsets = meta.read_all(client, OFFSETS_TOPIC).await?;
        {
            let mut map = meta.offsets.lock().map_err(poisoned)?;
            for payload in offsets {
                let Ok(r) = serde_json::from_slice::<OffsetRecord>(&payload) else {
                    tracing::warn!("skipping an unreadable record in the offsets log");
                    continue;
                };
                apply_offset(&mut map, r);
            }
        }
        let topics = meta.read_all(client, TOPICS_TOPIC).await?;
        {
            let mut map = meta.topics.lock().map_err(poisoned)?;
            for payload in topics {
                let Ok(r) = serde_json::from_slice::<TopicRecord>(&payload) else {
                    tracing::warn!("skipping an unreadable record in the topics log");
                    continue;
                };
                apply_topic(&mut map, r);
            }
        }
        Ok(meta)
    }

    async fn ensure_topic(&self, client: &IggyClient, topic: &str) -> StoreResult<()> {
        let (s, t) = (named(&self.stream)?, named(topic)?);
        let found = call(
            &self.metrics,
            self.call_timeout,
            Op::Admin,
            topic,
            client.get_topic(&s, &t),
        )
        .await?;
        if found.is_some() {
            return Ok(());
        }
        let options = TopicCreateOptions {
            partitions_count: Some(1),
            ..TopicCreateOptions::default()
        };
        match call(
            &self.metrics,
            self.call_timeout,
            Op::Admin,
            topic,
            client.create_topic(&s, topic, &options),
        )
        .await
        {
            Ok(_) | Err(StoreError::TopicAlreadyExists(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn read_all(&self, client: &IggyClient, topic: &str) -> StoreResult<Vec<Bytes>> {
        let (s, t) = (named(&self.stream)?, named(topic)?);
        let consumer =
            Consumer::new(Identifier::numeric(0).map_err(|e| StoreError::Internal(e.to_string()))?);
        let mut out = Vec::new();
        let mut offset = 0u64;
        loop {
            let polled = call(
                &self.metrics,
                self.call_timeout,
                Op::Read,
                topic,
                client.poll_messages(
                    &s,
                    &t,
                    Some(0),
                    &consumer,
                    &PollingStrategy::offset(offset),
                    1000,
                    false,
                ),
            )
            .await?;
            let Some(last) = polled.messages.last() else {
                return Ok(out);
            };
            offset = last.header.offset + 1;
            out.extend(polled.messages.into_iter().map(|m| m.payload));
        }
    }

    async fn append(
        &self,
        client: &IggyClient,
        topic: &str,
        payloads: Vec<Vec<u8>>,
    ) -> StoreResult<()> {
        let (s, t) = (named(&self.stream)?, named(topic)?);
        let mut messages = payloads
            .into_iter()
            .map(|p| {
                IggyMessage::builder()
                    .payload(Bytes::from(p))
                    .build()
                    .map_err(|e| StoreError::Internal(format!("metadata record: {e}")))
            })
            .collect::<StoreResult<Vec<_>>>()?;
        call(
            &self.metrics,
            self.call_timeout,
            Op::Write,
            topic,
            client.send_messages(&s, &t, &Partitioning::partition_id(0), &mut messages),
        )
        .await
        .map(|_| ())
    }

    /// Stores committed offsets of one group in one write.
    pub async fn commit(
        &self,
        client: &IggyClient,
        group: &str,
        offsets: Vec<(String, i32, CommittedOffset)>,
    ) -> StoreResult<()> {
        if offsets.is_empty() {
            return Ok(());
        }
        let records: Vec<OffsetRecord> = offsets
            .into_iter()
            .map(|(t, p, c)| OffsetRecord {
                g: group.to_owned(),
                t,
                p,
                o: Some(c.offset),
                e: c.leader_epoch,
                m: c.metadata,
                ts: c.commit_timestamp,
            })
            .collect();
        self.write_offsets(client, records).await
    }

    /// Deletes committed offsets (absent ones are ignored).
    pub async fn delete(
        &self,
        client: &IggyClient,
        group: &str,
        partitions: &[(String, i32)],
    ) -> StoreResult<()> {
        let present: Vec<OffsetRecord> = {
            let map = self.offsets.lock().map_err(poisoned)?;
            partitions
                .iter()
                .filter(|(t, p)| map.contains_key(&(group.to_owned(), t.clone(), *p)))
                .map(|(t, p)| tombstone(group, t, *p))
                .collect()
        };
        if present.is_empty() {
            return Ok(());
        }
        self.write_offsets(client, present).await
    }

    /// Deletes every offset of a group.
    pub async fn delete_group(&self, client: &IggyClient, group: &str) -> StoreResult<()> {
        let all: Vec<(String, i32)> = self
            .fetch_all(group)?
            .into_iter()
            .map(|(t, p, _)| (t, p))
            .collect();
        self.delete(client, group, &all).await
    }

    async fn write_offsets(
        &self,
        client: &IggyClient,
        records: Vec<OffsetRecord>,
    ) -> StoreResult<()> {
        let payloads = records
            .iter()
            .map(serde_json::to_vec)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| StoreError::Internal(e.to_string()))?;
        let _order = self.writes.lock().await;
        self.append(client, OFFSETS_TOPIC, payloads).await?;
        let mut map = self.offsets.lock().map_err(poisoned)?;
        for r in records {
            apply_offset(&mut map, r);
        }
        Ok(())
    }

    /// One committed offset.
    pub fn fetch(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
    ) -> StoreResult<Option<CommittedOffset>> {
        let map = self.offsets.lock().map_err(poisoned)?;
        Ok(map
            .get(&(group.to_owned(), topic.to_owned(), partition))
            .cloned())
    }

    /// Every committed offset of a group, sorted by topic and partition.
    pub fn fetch_all(&self, group: &str) -> StoreResult<Vec<(String, i32, CommittedOffset)>> {
        let map = self.offsets.lock().map_err(poisoned)?;
        Ok(map
            .range((group.to_owned(), String::new(), i32::MIN)..)
            .take_while(|((g, _, _), _)| g == group)
            .map(|((_, t, p), c)| (t.clone(), *p, c.clone()))
            .collect())
    }

    /// Groups with committed offsets, sorted.
    pub fn groups(&self) -> StoreResult<Vec<String>> {
        let map = self.offsets.lock().map_err(poisoned)?;
        let mut groups: Vec<String> = map.keys().map(|(g, _, _)| g.clone()).collect();
        groups.dedup();
        Ok(groups)
    }

    /// The stored settings of one topic incarnation.
    pub fn topic(&self, key: &TopicKey) -> StoreResult<Option<TopicMeta>> {
        Ok(self.topics.lock().map_err(poisoned)?.get(key).cloned())
    }

    /// Stores (replaces) the settings of one topic incarnation.
    pub async fn put_topic(
        &self,
        client: &IggyClient,
        key: &TopicKey,
        meta: TopicMeta,
    ) -> StoreResult<()> {
        let record = TopicRecord {
            s: key.stream.clone(),
            t: key.topic.clone(),
            c: key.created_at,
            deleted: false,
            retention_ms: meta.config.retention_ms,
            retention_bytes: meta.config.retention_bytes,
            max_message_bytes: meta.config.max_message_bytes,
            log_start: meta.log_start.clone(),
        };
        self.write_topic(client, record).await
    }

    /// Forgets a deleted topic incarnation.
    pub async fn forget_topic(&self, client: &IggyClient, key: &TopicKey) -> StoreResult<()> {
        let record = TopicRecord {
            s: key.stream.clone(),
            t: key.topic.clone(),
            c: key.created_at,
            deleted: true,
            retention_ms: -1,
            retention_bytes: -1,
            max_message_bytes: 0,
            log_start: BTreeMap::new(),
        };
        self.write_topic(client, record).await
    }

    async fn write_topic(&self, client: &IggyClient, record: TopicRecord) -> StoreResult<()> {
        let payload =
            serde_json::to_vec(&record).map_err(|e| StoreError::Internal(e.to_string()))?;
        let _order = self.writes.lock().await;
        self.append(client, TOPICS_TOPIC, vec![payload]).await?;
        apply_topic(&mut *self.topics.lock().map_err(poisoned)?, record);
        Ok(())
    }
}

fn tombstone(group: &str, topic: &str, partition: i32) -> OffsetRecord {
    OffsetRecord {
        g: group.to_owned(),
        t: topic.to_owned(),
        p: partition,
        o: None,
        e: -1,
        m: None,
        ts: 0,
    }
}

fn apply_offset(map: &mut BTreeMap<OffsetKey, CommittedOffset>, r: OffsetRecord) {
    let key = (r.g, r.t, r.p);
    match r.o {
        Some(offset) => {
            map.insert(
                key,
                CommittedOffset {
                    offset,
                    leader_epoch: r.e,
                    metadata: r.m,
                    commit_timestamp: r.ts,
                },
            );
        }
        None => {
            map.remove(&key);
        }
    }
}

fn apply_topic(map: &mut BTreeMap<TopicKey, TopicMeta>, r: TopicRecord) {
    let key = TopicKey {
        stream: r.s,
        topic: r.t,
        created_at: r.c,
    };
    if r.deleted {
        map.remove(&key);
        return;
    }
    map.insert(
        key,
        TopicMeta {
            config: TopicConfig {
                retention_ms: r.retention_ms,
                retention_bytes: r.retention_bytes,
                max_message_bytes: r.max_message_bytes,
            },
            log_start: r.log_start,
        },
    );
}

/// Creates a stream unless it exists; a concurrent creator winning the race is success.
pub async fn ensure_stream(
    client: &IggyClient,
    stream: &str,
    limit: Duration,
    metrics: &IggyMetrics,
) -> StoreResult<()> {
    let id = named(stream)?;
    if call(metrics, limit, Op::Admin, stream, client.get_stream(&id))
        .await?
        .is_some()
    {
        return Ok(());
    }
    match call(
        metrics,
        limit,
        Op::Admin,
        stream,
        client.create_stream(stream),
    )
    .await
    {
        Ok(_) | Err(StoreError::TopicAlreadyExists(_)) => Ok(()),
        Err(e) => Err(e),
    }
}
