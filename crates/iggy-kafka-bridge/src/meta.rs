//! The bridge's own durable state, kept in Iggy so a restarted gateway finds it again.
//!
//! Stream `meta_stream` (default `__kafka_gateway`) holds four logs of JSON records, each
//! a one-partition topic, folded "last record per key wins":
//!
//! ```text
//! offsets  {"g":group,"t":topic,"p":partition,"o":offset|null,"e":epoch,"m":meta|null,"ts":ms}
//!          key (g,t,p); "o":null deletes the committed offset
//! topics   {"s":stream,"t":iggy topic,"c":created_at_us,"deleted":bool,
//!           "retention_ms":..,"retention_bytes":..,"max_message_bytes":..,
//!           "log_start":{"<partition>":offset}}
//!          key (s,t,c): the creation time keeps a recreated topic from inheriting the
//!          settings of the one it replaces
//! scram    {"u":user,"m":mechanism id,"s":salt,"i":iterations,"sk":stored key,
//!           "vk":server key} (binary fields base64), or {"u":..,"m":..,"deleted":true}
//!          key (u,m); Kafka's mechanism ids (1 SCRAM-SHA-256, 2 SCRAM-SHA-512). What
//!          SCRAM needs to check a proof, never a password (see kafka_sasl::scram)
//! acls     {"rt":resource type,"n":name,"pt":pattern type,"p":principal,"h":host,
//!           "op":operation,"perm":permission} (Kafka's names: "TOPIC", "PREFIXED",
//!           "READ", "ALLOW", ...), with "deleted":true to remove the binding
//!          key: the whole binding. Kafka ACL bindings (CreateAcls, DeleteAcls); a
//!          record that does not name a storable binding is skipped at load
//! ```
//!
//! Snapshots keep the logs short. Each log lives in generations: generation 0 is the
//! topic `offsets` (or `topics`, `scram`, `acls`) as it was first written, generation `n` the
//! topic `offsets.n`. A generation above 0 starts with a snapshot, the live state as ordinary
//! records, closed by a marker record `{"snapshot_end":n}`; the records after the marker
//! are its tail. Once the tail holds `meta_snapshot_records` records, and at least as
//! many as the live state, the next write is followed by a snapshot into generation
//! `n+1`; when its marker is written the bridge writes there and deletes generation `n`.
//! At connect the bridge takes the highest generation with a marker (a generation
//! without one is a snapshot cut short: deleted) and deletes the older ones, reading
//! its records a page at a time and folding each page into the state (what is kept in
//! memory is the live state, not the log). So start-up reads at most the live state
//! twice plus `meta_snapshot_records` records, whatever the history. A log without
//! generations (from before snapshots) is generation 0 and is read whole once, then
//! snapshotted if long.
//!
//! One call of the bridge writes its records with one `send_messages`, so an offset
//! commit is all or nothing. Writes are serialized so the in-memory view applies them in
//! log order. One gateway owns this state; several gateways sharing one meta stream
//! would not see each other's later writes (they read it at connect only).

use crate::errors::{Op, map_iggy_error, timeout};
use crate::metrics::IggyMetrics;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use iggy::prelude::{
    Consumer, Identifier, IggyClient, IggyError, IggyMessage, MessageClient, Partitioning,
    PollingStrategy, StreamClient, TopicClient, TopicCreateOptions,
};
use kafka_authz::{AclBinding, AclBindingFilter, Operation, PatternType, Permission, ResourceType};
use kafka_sasl::{ScramCredential, ScramMechanism, ScramUserInfo};
use kafka_store::{CommittedOffset, StoreError, StoreResult, TopicConfig};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

const OFFSETS_TOPIC: &str = "offsets";
const TOPICS_TOPIC: &str = "topics";
const SCRAM_TOPIC: &str = "scram";
const ACLS_TOPIC: &str = "acls";

/// Every log, in the order they are loaded.
const LOGS: [&str; 4] = [OFFSETS_TOPIC, TOPICS_TOPIC, SCRAM_TOPIC, ACLS_TOPIC];

/// Messages per poll when reading a log, and per send when writing a snapshot.
const META_PAGE: u32 = 1000;

/// The record that closes a snapshot.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SnapshotEnd {
    snapshot_end: u64,
}

/// The Iggy topic of generation `generation` of log `base`.
fn generation_name(base: &str, generation: u64) -> String {
    if generation == 0 {
        base.to_owned()
    } else {
        format!("{base}.{generation}")
    }
}

/// The generation an Iggy topic named `name` is of log `base`, if it is one.
fn generation_of(base: &str, name: &str) -> Option<u64> {
    if name == base {
        return Some(0);
    }
    let n: u64 = name.strip_prefix(base)?.strip_prefix('.')?.parse().ok()?;
    (n > 0 && generation_name(base, n) == name).then_some(n)
}

/// Where a log stands: the generation written to and the records after its snapshot.
#[derive(Debug, Default, Clone, Copy)]
struct LogState {
    generation: u64,
    tail: u64,
}

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

/// One SCRAM credential change; binary fields in standard base64.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScramRecord {
    u: String,
    m: i8,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    s: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    i: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sk: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    vk: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    deleted: bool,
}

/// One ACL binding change, Kafka's values by name.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct AclRecord {
    rt: String,
    n: String,
    pt: String,
    p: String,
    h: String,
    op: String,
    perm: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    deleted: bool,
}

fn acl_record(b: &AclBinding, deleted: bool) -> AclRecord {
    AclRecord {
        rt: b.resource_type.name().to_owned(),
        n: b.name.clone(),
        pt: b.pattern.name().to_owned(),
        p: b.principal.clone(),
        h: b.host.clone(),
        op: b.operation.name().to_owned(),
        perm: b.permission.name().to_owned(),
        deleted,
    }
}

/// Folds one ACL record into the state; `false` (and no change) when it does not name a
/// storable binding.
fn apply_acl(set: &mut BTreeSet<AclBinding>, r: AclRecord) -> bool {
    let (Some(resource_type), Some(pattern), Some(operation), Some(permission)) = (
        ResourceType::from_name(&r.rt),
        PatternType::from_name(&r.pt),
        Operation::from_name(&r.op),
        Permission::from_name(&r.perm),
    ) else {
        return false;
    };
    let b = AclBinding {
        resource_type,
        name: r.n,
        pattern,
        principal: r.p,
        host: r.h,
        operation,
        permission,
    };
    if b.validate().is_err() {
        return false;
    }
    if r.deleted {
        set.remove(&b);
    } else {
        set.insert(b);
    }
    true
}

type OffsetKey = (String, String, i32);
type ScramKey = (String, ScramMechanism);

/// The loaded state and the way to change it.
#[derive(Debug)]
pub struct Meta {
    stream: String,
    call_timeout: Duration,
    metrics: IggyMetrics,
    snapshot_records: u64,
    offsets: Mutex<BTreeMap<OffsetKey, CommittedOffset>>,
    topics: Mutex<BTreeMap<TopicKey, TopicMeta>>,
    scram: Mutex<BTreeMap<ScramKey, ScramCredential>>,
    acls: Mutex<BTreeSet<AclBinding>>,
    /// Held while writing; guards where each log stands.
    writes: tokio::sync::Mutex<Logs>,
}

#[derive(Debug, Default)]
struct Logs {
    offsets: LogState,
    topics: LogState,
    scram: LogState,
    acls: LogState,
}

impl Logs {
    fn of(&mut self, base: &str) -> &mut LogState {
        match base {
            OFFSETS_TOPIC => &mut self.offsets,
            TOPICS_TOPIC => &mut self.topics,
            ACLS_TOPIC => &mut self.acls,
            _ => &mut self.scram,
        }
    }
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
    /// Creates the meta stream and logs if missing, then reads each from its latest
    /// snapshot (see the module docs), and snapshots a log whose tail is long.
    pub async fn open(
        client: &IggyClient,
        stream: &str,
        call_timeout: Duration,
        metrics: &IggyMetrics,
        snapshot_records: u64,
    ) -> StoreResult<Self> {
        let meta = Self {
            stream: stream.to_owned(),
            call_timeout,
            metrics: metrics.clone(),
            snapshot_records,
            offsets: Mutex::new(BTreeMap::new()),
            topics: Mutex::new(BTreeMap::new()),
            scram: Mutex::new(BTreeMap::new()),
            acls: Mutex::new(BTreeSet::new()),
            writes: tokio::sync::Mutex::new(Logs::default()),
        };
        ensure_stream(client, stream, call_timeout, metrics).await?;
        let names: Vec<String> = call(
            metrics,
            call_timeout,
            Op::Admin,
            stream,
            client.get_topics(&named(stream)?),
        )
        .await?
        .into_iter()
        .map(|t| t.name)
        .collect();
        let mut logs = meta.writes.lock().await;
        for base in LOGS {
            *logs.of(base) = meta.load(client, base, &names).await?;
        }
        for base in LOGS {
            meta.snapshot_if_long(client, &mut logs, base).await;
        }
        drop(logs);
        Ok(meta)
    }

    /// Reads log `base` from its newest complete generation into the state and
    /// deletes the other generations.
    async fn load(
        &self,
        client: &IggyClient,
        base: &str,
        names: &[String],
    ) -> StoreResult<LogState> {
        let mut generations: Vec<u64> = names
            .iter()
            .filter_map(|n| generation_of(base, n))
            .collect();
        generations.sort_unstable();
        let mut chosen = None;
        while let Some(generation) = generations.pop() {
            match self.read_generation(client, base, generation).await? {
                Some(tail) => {
                    chosen = Some(LogState { generation, tail });
                    break;
                }
                None => {
                    tracing::warn!(
                        log = base,
                        generation,
                        "deleting a metadata snapshot that was cut short"
                    );
                    self.drop_generation(client, base, generation).await;
                }
            }
        }
        // What is left is older than the generation read.
        for generation in generations {
            self.drop_generation(client, base, generation).await;
        }
        match chosen {
            Some(state) => Ok(state),
            None => {
                self.clear(base)?;
                self.ensure_topic(client, base).await?;
                Ok(LogState::default())
            }
        }
    }

    /// Reads one generation into the (cleared) state, a page at a time: the tail
    /// length, or `None` when a generation above 0 has no snapshot marker.
    async fn read_generation(
        &self,
        client: &IggyClient,
        base: &str,
        generation: u64,
    ) -> StoreResult<Option<u64>> {
        self.clear(base)?;
        let topic = generation_name(base, generation);
        let (s, t) = (named(&self.stream)?, named(&topic)?);
        let consumer =
            Consumer::new(Identifier::numeric(0).map_err(|e| StoreError::Internal(e.to_string()))?);
        let mut offset = 0u64;
        let mut tail = 0u64;
        let mut closed = generation == 0;
        let mut unreadable = 0u64;
        loop {
            let polled = call(
                &self.metrics,
                self.call_timeout,
                Op::Read,
                &topic,
                client.poll_messages(
                    &s,
                    &t,
                    Some(0),
                    &consumer,
                    &PollingStrategy::offset(offset),
                    META_PAGE,
                    false,
                ),
            )
            .await?;
            let Some(last) = polled.messages.last() else {
                break;
            };
            offset = last.header.offset + 1;
            for m in &polled.messages {
                if let Ok(end) = serde_json::from_slice::<SnapshotEnd>(&m.payload) {
                    closed |= end.snapshot_end == generation;
                    tail = 0;
                    continue;
                }
                tail += 1;
                if !self.apply_payload(base, &m.payload)? {
                    unreadable += 1;
                }
            }
        }
        if unreadable > 0 {
            tracing::warn!(
                log = base,
                unreadable,
                "skipped unreadable metadata records"
            );
        }
        Ok(closed.then_some(tail))
    }

    fn clear(&self, base: &str) -> StoreResult<()> {
        match base {
            OFFSETS_TOPIC => self.offsets.lock().map_err(poisoned)?.clear(),
            TOPICS_TOPIC => self.topics.lock().map_err(poisoned)?.clear(),
            ACLS_TOPIC => self.acls.lock().map_err(poisoned)?.clear(),
            _ => self.scram.lock().map_err(poisoned)?.clear(),
        }
        Ok(())
    }

    /// Folds one record into the state; `false` when it cannot be read.
    fn apply_payload(&self, base: &str, payload: &[u8]) -> StoreResult<bool> {
        match base {
            OFFSETS_TOPIC => {
                let Ok(r) = serde_json::from_slice::<OffsetRecord>(payload) else {
                    return Ok(false);
                };
                apply_offset(&mut *self.offsets.lock().map_err(poisoned)?, r);
            }
            TOPICS_TOPIC => {
                let Ok(r) = serde_json::from_slice::<TopicRecord>(payload) else {
                    return Ok(false);
                };
                apply_topic(&mut *self.topics.lock().map_err(poisoned)?, r);
            }
            ACLS_TOPIC => {
                let Ok(r) = serde_json::from_slice::<AclRecord>(payload) else {
                    return Ok(false);
                };
                return Ok(apply_acl(&mut *self.acls.lock().map_err(poisoned)?, r));
            }
            _ => {
                let Ok(r) = serde_json::from_slice::<ScramRecord>(payload) else {
                    return Ok(false);
                };
                return Ok(apply_scram(&mut *self.scram.lock().map_err(poisoned)?, r));
            }
        }
        Ok(true)
    }

    /// Deletes one generation's topic; a failure is logged (the next start deletes it).
    async fn drop_generation(&self, client: &IggyClient, base: &str, generation: u64) {
        let topic = generation_name(base, generation);
        let (Ok(s), Ok(t)) = (named(&self.stream), named(&topic)) else {
            return;
        };
        let deleted = call(
            &self.metrics,
            self.call_timeout,
            Op::Admin,
            &topic,
            client.delete_topic(&s, &t),
        )
        .await;
        match deleted {
            Ok(()) | Err(StoreError::UnknownTopicOrPartition { .. }) => {}
            Err(e) => tracing::warn!(topic, error = %e, "cannot delete an old metadata log"),
        }
    }

    /// The live state of log `base` as records.
    fn live_records(&self, base: &str) -> StoreResult<Vec<Vec<u8>>> {
        let encode = |v: Result<Vec<u8>, serde_json::Error>| {
            v.map_err(|e| StoreError::Internal(e.to_string()))
        };
        match base {
            OFFSETS_TOPIC => {
                let map = self.offsets.lock().map_err(poisoned)?;
                map.iter()
                    .map(|((g, t, p), c)| encode(serde_json::to_vec(&offset_record(g, t, *p, c))))
                    .collect()
            }
            TOPICS_TOPIC => {
                let map = self.topics.lock().map_err(poisoned)?;
                map.iter()
                    .map(|(k, m)| encode(serde_json::to_vec(&topic_record(k, m))))
                    .collect()
            }
            ACLS_TOPIC => {
                let set = self.acls.lock().map_err(poisoned)?;
                set.iter()
                    .map(|b| encode(serde_json::to_vec(&acl_record(b, false))))
                    .collect()
            }
            _ => {
                let map = self.scram.lock().map_err(poisoned)?;
                map.iter()
                    .map(|((u, _), c)| encode(serde_json::to_vec(&scram_record(u, c))))
                    .collect()
            }
        }
    }

    fn live_count(&self, base: &str) -> StoreResult<u64> {
        let n = match base {
            OFFSETS_TOPIC => self.offsets.lock().map_err(poisoned)?.len(),
            TOPICS_TOPIC => self.topics.lock().map_err(poisoned)?.len(),
            ACLS_TOPIC => self.acls.lock().map_err(poisoned)?.len(),
            _ => self.scram.lock().map_err(poisoned)?.len(),
        };
        Ok(u64::try_from(n).unwrap_or(u64::MAX))
    }

    /// Snapshots log `base` when its tail is `meta_snapshot_records` long and at least
    /// as long as the live state. A failed snapshot is logged and left for the next
    /// write to try again: the log it would replace stays in use, whole.
    async fn snapshot_if_long(&self, client: &IggyClient, logs: &mut Logs, base: &str) {
        let state = logs.of(base);
        let live = match self.live_count(base) {
            Ok(n) => n,
            Err(_) => return,
        };
        if state.tail < self.snapshot_records.max(live) {
            return;
        }
        let next = state.generation + 1;
        match self.write_snapshot(client, base, next).await {
            Ok(()) => {
                let old = std::mem::replace(
                    state,
                    LogState {
                        generation: next,
                        tail: 0,
                    },
                );
                tracing::info!(
                    log = base,
                    generation = next,
                    records = live,
                    replaced = old.tail,
                    "metadata log snapshotted"
                );
                self.drop_generation(client, base, old.generation).await;
            }
            Err(e) => {
                tracing::warn!(log = base, generation = next, error = %e, "metadata snapshot failed");
                self.drop_generation(client, base, next).await;
            }
        }
    }

    /// Writes the live state of `base` and the closing marker into a new generation.
    async fn write_snapshot(
        &self,
        client: &IggyClient,
        base: &str,
        generation: u64,
    ) -> StoreResult<()> {
        let topic = generation_name(base, generation);
        // A leftover from a snapshot cut short would hold records before ours.
        self.drop_generation(client, base, generation).await;
        self.ensure_topic(client, &topic).await?;
        let records = self.live_records(base)?;
        let page = usize::try_from(META_PAGE).unwrap_or(1000);
        for chunk in records.chunks(page) {
            self.append(client, &topic, chunk.to_vec()).await?;
        }
        let end = serde_json::to_vec(&SnapshotEnd {
            snapshot_end: generation,
        })
        .map_err(|e| StoreError::Internal(e.to_string()))?;
        self.append(client, &topic, vec![end]).await
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
            .map(|(t, p, c)| offset_record(group, &t, p, &c))
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
        let mut logs = self.writes.lock().await;
        let topic = generation_name(OFFSETS_TOPIC, logs.offsets.generation);
        let n = u64::try_from(payloads.len()).unwrap_or(u64::MAX);
        self.append(client, &topic, payloads).await?;
        {
            let mut map = self.offsets.lock().map_err(poisoned)?;
            for r in records {
                apply_offset(&mut map, r);
            }
        }
        logs.offsets.tail = logs.offsets.tail.saturating_add(n);
        self.snapshot_if_long(client, &mut logs, OFFSETS_TOPIC)
            .await;
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
        self.write_topic(client, topic_record(key, &meta)).await
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
        let mut logs = self.writes.lock().await;
        let topic = generation_name(TOPICS_TOPIC, logs.topics.generation);
        self.append(client, &topic, vec![payload]).await?;
        apply_topic(&mut *self.topics.lock().map_err(poisoned)?, record);
        logs.topics.tail = logs.topics.tail.saturating_add(1);
        self.snapshot_if_long(client, &mut logs, TOPICS_TOPIC).await;
        Ok(())
    }
}

impl Meta {
    /// `user`'s SCRAM credential for `mechanism`.
    pub fn scram(
        &self,
        user: &str,
        mechanism: ScramMechanism,
    ) -> StoreResult<Option<ScramCredential>> {
        let map = self.scram.lock().map_err(poisoned)?;
        Ok(map.get(&(user.to_owned(), mechanism)).cloned())
    }

    /// The users with a SCRAM credential (of `users` if given), sorted by name, each
    /// with its mechanisms and iteration counts.
    pub fn scram_users(&self, users: Option<&[String]>) -> StoreResult<Vec<ScramUserInfo>> {
        let map = self.scram.lock().map_err(poisoned)?;
        let mut out: Vec<ScramUserInfo> = Vec::new();
        for ((user, mechanism), credential) in map.iter() {
            if users.is_some_and(|wanted| !wanted.contains(user)) {
                continue;
            }
            let entry = (*mechanism, credential.iterations);
            match out.last_mut() {
                Some(last) if last.user == *user => last.credentials.push(entry),
                _ => out.push(ScramUserInfo {
                    user: user.clone(),
                    credentials: vec![entry],
                }),
            }
        }
        Ok(out)
    }

    /// Sets `user`'s credential for its mechanism, durably.
    pub async fn put_scram(
        &self,
        client: &IggyClient,
        user: &str,
        credential: &ScramCredential,
    ) -> StoreResult<()> {
        let mut logs = self.writes.lock().await;
        self.write_scram(client, &mut logs, scram_record(user, credential))
            .await
    }

    /// Removes `user`'s credential for `mechanism`; `false` when there was none (and
    /// nothing is written).
    pub async fn delete_scram(
        &self,
        client: &IggyClient,
        user: &str,
        mechanism: ScramMechanism,
    ) -> StoreResult<bool> {
        // Under the write lock, so a concurrent change cannot slip between the check
        // and the write.
        let mut logs = self.writes.lock().await;
        let present = self
            .scram
            .lock()
            .map_err(poisoned)?
            .contains_key(&(user.to_owned(), mechanism));
        if !present {
            return Ok(false);
        }
        let record = ScramRecord {
            u: user.to_owned(),
            m: mechanism.id(),
            s: None,
            i: None,
            sk: None,
            vk: None,
            deleted: true,
        };
        self.write_scram(client, &mut logs, record).await?;
        Ok(true)
    }

    async fn write_scram(
        &self,
        client: &IggyClient,
        logs: &mut Logs,
        record: ScramRecord,
    ) -> StoreResult<()> {
        let payload =
            serde_json::to_vec(&record).map_err(|e| StoreError::Internal(e.to_string()))?;
        let topic = generation_name(SCRAM_TOPIC, logs.scram.generation);
        self.append(client, &topic, vec![payload]).await?;
        apply_scram(&mut *self.scram.lock().map_err(poisoned)?, record);
        logs.scram.tail = logs.scram.tail.saturating_add(1);
        self.snapshot_if_long(client, logs, SCRAM_TOPIC).await;
        Ok(())
    }
}

impl Meta {
    /// The ACL bindings `filter` selects, sorted.
    pub fn acls(&self, filter: &AclBindingFilter) -> StoreResult<Vec<AclBinding>> {
        let set = self.acls.lock().map_err(poisoned)?;
        Ok(set.iter().filter(|b| filter.matches(b)).cloned().collect())
    }

    /// Adds the bindings not yet stored, durably; `false` (and nothing written) when the
    /// store would then hold more than `max`.
    pub async fn add_acls(
        &self,
        client: &IggyClient,
        bindings: Vec<AclBinding>,
        max: usize,
    ) -> StoreResult<bool> {
        let mut logs = self.writes.lock().await;
        let new: Vec<AclBinding> = {
            let set = self.acls.lock().map_err(poisoned)?;
            bindings
                .into_iter()
                .filter(|b| !set.contains(b))
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect()
        };
        let held = self.acls.lock().map_err(poisoned)?.len();
        if held.saturating_add(new.len()) > max {
            return Ok(false);
        }
        self.write_acls(client, &mut logs, new, false).await?;
        Ok(true)
    }

    /// Removes the bindings `filter` selects, durably, and returns them.
    pub async fn delete_acls(
        &self,
        client: &IggyClient,
        filter: &AclBindingFilter,
    ) -> StoreResult<Vec<AclBinding>> {
        let mut logs = self.writes.lock().await;
        let gone = self.acls(filter)?;
        self.write_acls(client, &mut logs, gone.clone(), true)
            .await?;
        Ok(gone)
    }

    /// Writes one record per binding, a page per `send_messages` (each page applied
    /// once written, so the state never runs ahead of the log).
    async fn write_acls(
        &self,
        client: &IggyClient,
        logs: &mut Logs,
        bindings: Vec<AclBinding>,
        deleted: bool,
    ) -> StoreResult<()> {
        if bindings.is_empty() {
            return Ok(());
        }
        let page = usize::try_from(META_PAGE).unwrap_or(1000);
        for chunk in bindings.chunks(page) {
            let payloads = chunk
                .iter()
                .map(|b| {
                    serde_json::to_vec(&acl_record(b, deleted))
                        .map_err(|e| StoreError::Internal(e.to_string()))
                })
                .collect::<StoreResult<Vec<_>>>()?;
            let topic = generation_name(ACLS_TOPIC, logs.acls.generation);
            self.append(client, &topic, payloads).await?;
            let mut set = self.acls.lock().map_err(poisoned)?;
            for b in chunk {
                if deleted {
                    set.remove(b);
                } else {
                    set.insert(b.clone());
                }
            }
            drop(set);
            let n = u64::try_from(chunk.len()).unwrap_or(u64::MAX);
            logs.acls.tail = logs.acls.tail.saturating_add(n);
        }
        self.snapshot_if_long(client, logs, ACLS_TOPIC).await;
        Ok(())
    }
}

fn scram_record(user: &str, c: &ScramCredential) -> ScramRecord {
    ScramRecord {
        u: user.to_owned(),
        m: c.mechanism.id(),
        s: Some(B64.encode(&c.salt)),
        i: Some(c.iterations),
        sk: Some(B64.encode(&c.stored_key)),
        vk: Some(B64.encode(&c.server_key)),
        deleted: false,
    }
}

/// Folds one SCRAM record into the state; `false` (and no change) when it cannot be
/// read: an unknown mechanism, a missing field, bad base64 or key lengths that do not
/// fit the mechanism.
fn apply_scram(map: &mut BTreeMap<ScramKey, ScramCredential>, r: ScramRecord) -> bool {
    let Some(mechanism) = ScramMechanism::from_id(r.m) else {
        return false;
    };
    let key = (r.u, mechanism);
    if r.deleted {
        map.remove(&key);
        return true;
    }
    let decode = |v: Option<String>| v.and_then(|v| B64.decode(v).ok());
    let (Some(salt), Some(iterations), Some(stored_key), Some(server_key)) =
        (decode(r.s), r.i, decode(r.sk), decode(r.vk))
    else {
        return false;
    };
    if salt.is_empty()
        || stored_key.len() != mechanism.hash_len()
        || server_key.len() != mechanism.hash_len()
    {
        return false;
    }
    map.insert(
        key,
        ScramCredential {
            mechanism,
            salt,
            iterations,
            stored_key,
            server_key,
        },
    );
    true
}

fn offset_record(group: &str, topic: &str, partition: i32, c: &CommittedOffset) -> OffsetRecord {
    OffsetRecord {
        g: group.to_owned(),
        t: topic.to_owned(),
        p: partition,
        o: Some(c.offset),
        e: c.leader_epoch,
        m: c.metadata.clone(),
        ts: c.commit_timestamp,
    }
}

fn topic_record(key: &TopicKey, meta: &TopicMeta) -> TopicRecord {
    TopicRecord {
        s: key.stream.clone(),
        t: key.topic.clone(),
        c: key.created_at,
        deleted: false,
        retention_ms: meta.config.retention_ms,
        retention_bytes: meta.config.retention_bytes,
        max_message_bytes: meta.config.max_message_bytes,
        log_start: meta.log_start.clone(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generations_are_named_and_recognized() {
        assert_eq!(generation_name("offsets", 0), "offsets");
        assert_eq!(generation_name("offsets", 7), "offsets.7");
        for n in [0, 1, 42, u64::MAX] {
            assert_eq!(
                generation_of("offsets", &generation_name("offsets", n)),
                Some(n)
            );
        }
        for other in [
            "topics",
            "offsets.",
            "offsets.0",
            "offsets.01",
            "offsets.-1",
            "offsets.x",
            "offsetsx",
            "offsets.1.2",
        ] {
            assert_eq!(generation_of("offsets", other), None, "{other}");
        }
    }

    #[test]
    fn a_snapshot_marker_is_not_a_record_and_no_record_is_a_marker() {
        let end = serde_json::to_vec(&SnapshotEnd { snapshot_end: 3 }).unwrap();
        assert!(serde_json::from_slice::<OffsetRecord>(&end).is_err());
        assert!(serde_json::from_slice::<TopicRecord>(&end).is_err());
        let record = serde_json::to_vec(&tombstone("g", "t", 0)).unwrap();
        assert!(serde_json::from_slice::<SnapshotEnd>(&record).is_err());
        let key = TopicKey {
            stream: "s".into(),
            topic: "t".into(),
            created_at: 1,
        };
        let meta = TopicMeta {
            config: TopicConfig::default(),
            log_start: BTreeMap::new(),
        };
        let record = serde_json::to_vec(&topic_record(&key, &meta)).unwrap();
        assert!(serde_json::from_slice::<SnapshotEnd>(&record).is_err());
    }

    fn credential(mechanism: ScramMechanism, fill: u8) -> ScramCredential {
        ScramCredential {
            mechanism,
            salt: vec![fill; 12],
            iterations: 4096,
            stored_key: vec![fill; mechanism.hash_len()],
            server_key: vec![fill.wrapping_add(1); mechanism.hash_len()],
        }
    }

    #[test]
    fn scram_records_round_trip_and_deletions_apply() {
        let mut map = BTreeMap::new();
        let a256 = credential(ScramMechanism::Sha256, 1);
        let a512 = credential(ScramMechanism::Sha512, 2);
        for r in [scram_record("alice", &a256), scram_record("alice", &a512)] {
            let bytes = serde_json::to_vec(&r).unwrap();
            assert!(serde_json::from_slice::<SnapshotEnd>(&bytes).is_err());
            assert!(apply_scram(
                &mut map,
                serde_json::from_slice(&bytes).unwrap()
            ));
        }
        assert_eq!(map[&("alice".to_owned(), ScramMechanism::Sha256)], a256);
        assert_eq!(map[&("alice".to_owned(), ScramMechanism::Sha512)], a512);
        let deletion: ScramRecord =
            serde_json::from_str(r#"{"u":"alice","m":1,"deleted":true}"#).unwrap();
        assert_eq!(
            serde_json::to_string(&deletion).unwrap(),
            r#"{"u":"alice","m":1,"deleted":true}"#
        );
        assert!(apply_scram(&mut map, deletion));
        assert_eq!(map.len(), 1);
        let end = serde_json::to_vec(&SnapshotEnd { snapshot_end: 2 }).unwrap();
        assert!(serde_json::from_slice::<ScramRecord>(&end).is_err());
    }

    #[test]
    fn unreadable_scram_records_change_nothing() {
        let mut map = BTreeMap::new();
        let good = scram_record("bob", &credential(ScramMechanism::Sha256, 3));
        assert!(apply_scram(&mut map, good));
        let before = map.clone();
        for text in [
            r#"{"u":"bob","m":0,"s":"AA==","i":4096,"sk":"AA==","vk":"AA=="}"#,
            r#"{"u":"bob","m":1,"s":"!!","i":4096,"sk":"AA==","vk":"AA=="}"#,
            r#"{"u":"bob","m":1,"i":4096}"#,
            r#"{"u":"bob","m":1,"s":"AAAA","i":4096,"sk":"AA==","vk":"AA=="}"#,
            r#"{"u":"bob","m":9,"deleted":true}"#,
        ] {
            let r: ScramRecord = serde_json::from_str(text).unwrap();
            assert!(!apply_scram(&mut map, r), "{text}");
            assert_eq!(map, before, "{text}");
        }
    }

    fn binding(name: &str, pattern: PatternType) -> AclBinding {
        AclBinding {
            resource_type: ResourceType::Topic,
            name: name.into(),
            pattern,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: Operation::Read,
            permission: Permission::Allow,
        }
    }

    #[test]
    fn acl_records_round_trip_and_deletions_apply() {
        let mut set = BTreeSet::new();
        let a = binding("orders", PatternType::Literal);
        let b = binding("ord", PatternType::Prefixed);
        for r in [acl_record(&a, false), acl_record(&b, false)] {
            let bytes = serde_json::to_vec(&r).unwrap();
            assert!(serde_json::from_slice::<SnapshotEnd>(&bytes).is_err());
            assert!(apply_acl(&mut set, serde_json::from_slice(&bytes).unwrap()));
        }
        assert_eq!(set.len(), 2);
        let text = serde_json::to_string(&acl_record(&a, true)).unwrap();
        assert_eq!(
            text,
            r#"{"rt":"TOPIC","n":"orders","pt":"LITERAL","p":"User:alice","h":"*","op":"READ","perm":"ALLOW","deleted":true}"#
        );
        assert!(apply_acl(&mut set, serde_json::from_str(&text).unwrap()));
        assert_eq!(set.into_iter().collect::<Vec<_>>(), vec![b]);
        let end = serde_json::to_vec(&SnapshotEnd { snapshot_end: 2 }).unwrap();
        assert!(serde_json::from_slice::<AclRecord>(&end).is_err());
    }

    #[test]
    fn unreadable_acl_records_change_nothing() {
        let mut set = BTreeSet::new();
        assert!(apply_acl(
            &mut set,
            acl_record(&binding("t", PatternType::Literal), false)
        ));
        let before = set.clone();
        for text in [
            r#"{"rt":"ANY","n":"t","pt":"LITERAL","p":"User:a","h":"*","op":"READ","perm":"ALLOW"}"#,
            r#"{"rt":"TOPIC","n":"t","pt":"MATCH","p":"User:a","h":"*","op":"READ","perm":"ALLOW"}"#,
            r#"{"rt":"TOPIC","n":"","pt":"LITERAL","p":"User:a","h":"*","op":"READ","perm":"ALLOW"}"#,
            r#"{"rt":"TOPIC","n":"t","pt":"LITERAL","p":"nobody","h":"*","op":"READ","perm":"ALLOW"}"#,
            r#"{"rt":"TOPIC","n":"t","pt":"LITERAL","p":"User:a","h":"*","op":"FLY","perm":"ALLOW"}"#,
            r#"{"rt":"TOPIC","n":"t","pt":"LITERAL","p":"User:a","h":"*","op":"READ","perm":"ANY","deleted":true}"#,
        ] {
            let r: AclRecord = serde_json::from_str(text).unwrap();
            assert!(!apply_acl(&mut set, r), "{text}");
            assert_eq!(set, before, "{text}");
        }
    }

    #[test]
    fn snapshot_records_fold_back_to_the_same_state() {
        let mut map = BTreeMap::new();
        for (g, p, o) in [("a", 0, Some(5)), ("a", 1, Some(6)), ("b", 0, Some(1))] {
            apply_offset(
                &mut map,
                OffsetRecord {
                    g: g.into(),
                    t: "t".into(),
                    p,
                    o,
                    e: 2,
                    m: Some("m".into()),
                    ts: 9,
                },
            );
        }
        apply_offset(&mut map, tombstone("a", "t", 1));
        let mut again = BTreeMap::new();
        for ((g, t, p), c) in &map {
            apply_offset(&mut again, offset_record(g, t, *p, c));
        }
        assert_eq!(map, again);
        assert_eq!(map.len(), 2);
    }
}
