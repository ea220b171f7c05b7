//! [`IggyBridge`]: `LogStore` and `OffsetStore` over the Iggy SDK.
//!
//! Every SDK call runs under `call_timeout`, so no Kafka request waits on Iggy forever.
//! The bridge opens `sessions` Iggy connections; appends to one partition always go
//! through the same session and that partition's send queue, so one append's messages
//! land contiguously and appends land in call order, while other partitions proceed at
//! the same time. Appends that queue up behind a send in flight go out together in the
//! next one (group commit). A semaphore bounds the sends in flight.
//!
//! Round trips are the cost that matters, so the hot paths make one Iggy call each: a
//! topic's description is reused for `metadata_max_age` (changes made through this
//! gateway drop it at once), an append takes its base offset from Iggy's send
//! confirmation, and a read takes the high watermark from the poll answer. Exact
//! answers that need a fresh description (ListOffsets, a read below the log start or at
//! the end) ask Iggy again.

use crate::config::{BridgeConfig, IggyTopicRef, TopicMap};
use crate::errors::{BridgeError, Op, map_iggy_error, timeout};
use crate::mapping::{self, BatchFrame, MappedRecord};
use crate::meta::{Meta, TopicKey, TopicMeta, ensure_stream};
use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use iggy::prelude::{
    AutoLogin, Client, Consumer, Credentials, Identifier, IggyByteSize, IggyClient, IggyDuration,
    IggyError, IggyExpiry, IggyMessage, MaxTopicSize, MessageClient, PartitionClient, Partitioning,
    PollingStrategy, TopicClient, TopicCreateOptions, TopicUpdateOptions,
};
use kafka_records::{ExactReencoding, NewRecord, RecordBatch};
use kafka_store::{
    AppendOutcome, CommittedOffset, LogStore, NewTopic, OffsetStore, PendingAppend, ReadOutcome,
    StoreError, StoreResult, TimestampHit, TopicConfig, TopicInfo, Watermarks,
};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Semaphore, watch};

/// A Kafka log and offset store backed by an Iggy server. Cheap to clone.
#[derive(Clone)]
pub struct IggyBridge {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for IggyBridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IggyBridge")
            .field("config", &self.inner.config)
            .field("map", &self.inner.map)
            .finish_non_exhaustive()
    }
}

struct Inner {
    config: BridgeConfig,
    map: TopicMap,
    sessions: Vec<IggyClient>,
    next_session: AtomicUsize,
    sends: Semaphore,
    send_queues: Mutex<HashMap<(IggyTopicRef, u32), SharedSendQueue>>,
    meta: Meta,
    /// Kafka topic name -> its description, reused for `metadata_max_age`.
    topics: Mutex<HashMap<String, CachedTopic>>,
    /// High watermarks after this gateway's own appends, for long polls.
    watches: Mutex<HashMap<(IggyTopicRef, u32), watch::Sender<i64>>>,
    /// Running estimate of the bytes one polled message takes in a Kafka batch, to size
    /// polls from a Fetch's byte limit.
    message_bytes: AtomicUsize,
    /// Records polled ahead of their reader, per partition.
    ahead: Mutex<HashMap<(IggyTopicRef, u32), Ahead>>,
    /// Bytes reserved by `ahead`, bounded by `read_ahead_bytes`.
    ahead_bytes: AtomicUsize,
}

/// A topic description and when Iggy gave it.
struct CachedTopic {
    at: std::time::Instant,
    resolved: Arc<Resolved>,
}

/// Most topic descriptions kept; past it the cache starts over.
const MAX_CACHED_TOPICS: usize = 10_000;

/// Most partitions with long-poll notification channels; past it they start over.
const MAX_WATCHED_PARTITIONS: usize = 100_000;

/// Most partitions with records polled ahead of their reader.
const MAX_READ_AHEAD_PARTITIONS: usize = 4096;

/// How many reads' worth (of the read's byte limit) one read-ahead poll asks for.
const READ_AHEAD_READS: usize = 4;

/// The appends of one partition waiting to be sent, in call order. One task at a time
/// sends them, all that are waiting in one Iggy call (up to `send_batch_bytes`):
/// appends that arrive while a send is in flight share the next one (group commit), so
/// many producers on one partition cost one round trip per turn, not one each.
type SharedSendQueue = Arc<Mutex<SendQueue>>;

#[derive(Default)]
struct SendQueue {
    waiting: VecDeque<Waiting>,
    sending: bool,
}

impl SendQueue {
    /// The appends for the next send, oldest first: as many as fit in `limit` payload
    /// bytes together, and always at least the oldest one, whatever its size.
    fn next_group(&mut self, limit: usize) -> Vec<Waiting> {
        let mut group = Vec::new();
        let mut bytes = 0usize;
        while let Some(w) = self.waiting.front() {
            if !group.is_empty() && bytes.saturating_add(w.bytes) > limit {
                break;
            }
            bytes = bytes.saturating_add(w.bytes);
            if let Some(w) = self.waiting.pop_front() {
                group.push(w);
            }
        }
        group
    }
}

/// One append's messages and where to tell it its base offset.
struct Waiting {
    messages: Vec<IggyMessage>,
    bytes: usize,
    done: tokio::sync::oneshot::Sender<StoreResult<Sent>>,
}

/// What a group send gives one append.
struct Sent {
    base_offset: i64,
    log_start_offset: i64,
}

/// Hands the queue back if its sending task ends early (a panic, or a poisoned lock):
/// the appends still waiting get an error instead of waiting forever.
struct Draining<'a> {
    queue: &'a SharedSendQueue,
    finished: bool,
}

impl Drop for Draining<'_> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let mut q = match self.queue.lock() {
            Ok(q) => q,
            Err(poisoned) => poisoned.into_inner(),
        };
        q.sending = false;
        q.waiting.clear();
    }
}

/// A resolved Kafka topic: where it lives and what Iggy says about it.
struct Resolved {
    target: IggyTopicRef,
    key: TopicKey,
    partitions: Vec<iggy::prelude::Partition>,
    partitions_count: u32,
    message_expiry: IggyExpiry,
    max_topic_size: MaxTopicSize,
}

impl Resolved {
    fn new(target: IggyTopicRef, d: iggy::prelude::TopicDetails) -> Resolved {
        Resolved {
            key: TopicKey {
                stream: target.stream.clone(),
                topic: target.topic.clone(),
                created_at: d.created_at.as_micros(),
            },
            target,
            partitions: d.partitions,
            partitions_count: d.partitions_count,
            message_expiry: d.message_expiry,
            max_topic_size: d.max_topic_size,
        }
    }
}

fn named(name: &str, topic: &str) -> StoreResult<Identifier> {
    // A name Iggy cannot hold cannot exist there either.
    Identifier::named(name).map_err(|_| StoreError::UnknownTopicOrPartition {
        topic: topic.to_owned(),
        partition: -1,
    })
}

fn poisoned<T>(_: T) -> StoreError {
    StoreError::Internal("bridge lock poisoned".into())
}

/// FNV-1a, 128 bits: a stable Kafka topic id from the Iggy topic's identity. It must not
/// change between gateway runs, so no per-process hasher is used.
fn topic_id(key: &TopicKey) -> u128 {
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013B;
    let mut hash: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    let created = key.created_at.to_be_bytes();
    for part in [
        key.stream.as_bytes(),
        &[0],
        key.topic.as_bytes(),
        &[0],
        &created[..],
    ] {
        for byte in part {
            hash ^= u128::from(*byte);
            hash = hash.wrapping_mul(PRIME);
        }
    }
    hash.max(1)
}

fn expiry_of(retention_ms: i64) -> IggyExpiry {
    match u64::try_from(retention_ms) {
        Ok(ms) if ms > 0 => {
            IggyExpiry::ExpireDuration(IggyDuration::new(Duration::from_millis(ms)))
        }
        _ => IggyExpiry::NeverExpire,
    }
}

fn topic_size_of(retention_bytes: i64, partitions: u32) -> MaxTopicSize {
    match u64::try_from(retention_bytes) {
        // Kafka's cap is per partition, Iggy's per topic.
        Ok(bytes) => MaxTopicSize::Custom(IggyByteSize::from(
            bytes.saturating_mul(u64::from(partitions.max(1))),
        )),
        Err(_) => MaxTopicSize::Unlimited,
    }
}

fn validate_config(config: &TopicConfig) -> StoreResult<()> {
    if config.retention_ms < -1 || config.retention_ms == 0 {
        return Err(StoreError::InvalidConfig(format!(
            "retention.ms {} (must be -1 or positive)",
            config.retention_ms
        )));
    }
    if config.retention_bytes < -1 {
        return Err(StoreError::InvalidConfig(format!(
            "retention.bytes {}",
            config.retention_bytes
        )));
    }
    if config.max_message_bytes < 0 {
        return Err(StoreError::InvalidConfig(format!(
            "max.message.bytes {}",
            config.max_message_bytes
        )));
    }
    Ok(())
}

impl IggyBridge {
    /// Validates `config`, connects and signs in (bounded retries), and loads the
    /// bridge's metadata. Fails with a clear error; never falls back to anything.
    pub async fn connect(config: BridgeConfig) -> Result<IggyBridge, BridgeError> {
        config.validate()?;
        let map = TopicMap::load(&config)?;
        let mut sessions = Vec::with_capacity(config.sessions);
        for _ in 0..config.sessions {
            sessions.push(open_session(&config).await?);
        }
        let meta = match sessions.first() {
            Some(client) => Meta::open(client, &config.meta_stream, config.call_timeout)
                .await
                .map_err(|e| BridgeError::Setup(e.to_string()))?,
            None => return Err(BridgeError::Config("sessions must be at least 1".into())),
        };
        Ok(IggyBridge {
            inner: Arc::new(Inner {
                sends: Semaphore::new(config.max_in_flight_sends),
                config,
                map,
                sessions,
                next_session: AtomicUsize::new(0),
                send_queues: Mutex::new(HashMap::new()),
                meta,
                topics: Mutex::new(HashMap::new()),
                watches: Mutex::new(HashMap::new()),
                message_bytes: AtomicUsize::new(256),
                ahead: Mutex::new(HashMap::new()),
                ahead_bytes: AtomicUsize::new(0),
            }),
        })
    }

    /// The topic map in use.
    pub fn topic_map(&self) -> &TopicMap {
        &self.inner.map
    }

    /// Closes every session.
    pub async fn close(&self) {
        for client in &self.inner.sessions {
            let _ = tokio::time::timeout(self.inner.config.call_timeout, client.shutdown()).await;
        }
    }

    /// Makes sure Kafka topic `name` exists with `partitions` partitions (auto-creation):
    /// creates it with Kafka's default settings if missing. A concurrent creator is
    /// success when its partition count matches; a different count is
    /// `TopicAlreadyExists`.
    pub async fn ensure_topic(&self, name: &str, partitions: i32) -> StoreResult<TopicInfo> {
        let new = NewTopic {
            name: name.to_owned(),
            partitions,
            config: TopicConfig::default(),
        };
        match self.create_topic(new, false).await {
            Ok(info) => Ok(info),
            Err(StoreError::TopicAlreadyExists(_)) => match self.topic(name).await? {
                Some(info) if info.partitions == partitions => Ok(info),
                _ => Err(StoreError::TopicAlreadyExists(name.to_owned())),
            },
            Err(e) => Err(e),
        }
    }

    fn any_session(&self) -> &IggyClient {
        let n = self.inner.sessions.len();
        let i = self.inner.next_session.fetch_add(1, Ordering::Relaxed) % n.max(1);
        &self.inner.sessions[i.min(n.saturating_sub(1))]
    }

    fn session_for(&self, target: &IggyTopicRef, partition: u32) -> &IggyClient {
        let n = self.inner.sessions.len().max(1);
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in target.stream.bytes().chain(target.topic.bytes()) {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
        let i = (h ^ u64::from(partition)) as usize % n;
        &self.inner.sessions[i.min(self.inner.sessions.len().saturating_sub(1))]
    }

    async fn call<T>(
        &self,
        op: Op,
        topic: &str,
        partition: i32,
        fut: impl Future<Output = Result<T, IggyError>>,
    ) -> StoreResult<T> {
        let limit = self.inner.config.call_timeout;
        match tokio::time::timeout(limit, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(map_iggy_error(&e, op, topic, partition)),
            Err(_) => Err(timeout(
                op,
                &format!("iggy call for {topic}/{partition}: no answer within {limit:?}"),
            )),
        }
    }

    /// Asks Iggy for the topic's description (and caches it).
    async fn resolve(&self, name: &str) -> StoreResult<Option<Arc<Resolved>>> {
        let target = self.inner.map.resolve(name);
        let (s, t) = (named(&target.stream, name)?, named(&target.topic, name)?);
        let details = match self
            .call(Op::Read, name, -1, self.any_session().get_topic(&s, &t))
            .await
        {
            Ok(d) => d,
            Err(StoreError::UnknownTopicOrPartition { .. }) => None,
            Err(e) => return Err(e),
        };
        let resolved = details.map(|d| Arc::new(Resolved::new(target, d)));
        self.remember(name, resolved.clone())?;
        Ok(resolved)
    }

    /// Caches (or, for `None` or when caching is off, drops) the description of `name`.
    fn remember(&self, name: &str, resolved: Option<Arc<Resolved>>) -> StoreResult<()> {
        let mut cache = self.inner.topics.lock().map_err(poisoned)?;
        match resolved {
            Some(r) if !self.inner.config.metadata_max_age.is_zero() => {
                if cache.len() >= MAX_CACHED_TOPICS {
                    cache.clear();
                }
                cache.insert(
                    name.to_owned(),
                    CachedTopic {
                        at: std::time::Instant::now(),
                        resolved: r,
                    },
                );
            }
            _ => {
                cache.remove(name);
            }
        }
        Ok(())
    }

    /// The topic's description, from the cache while it is younger than
    /// `metadata_max_age`, else from Iggy.
    async fn resolve_cached(&self, name: &str) -> StoreResult<Option<Arc<Resolved>>> {
        {
            let cache = self.inner.topics.lock().map_err(poisoned)?;
            if let Some(c) = cache.get(name)
                && c.at.elapsed() < self.inner.config.metadata_max_age
            {
                return Ok(Some(c.resolved.clone()));
            }
        }
        self.resolve(name).await
    }

    /// Drops the cached description of `name` (after a change, or when Iggy says the
    /// topic is gone).
    fn forget(&self, name: &str) {
        if let Ok(mut cache) = self.inner.topics.lock() {
            cache.remove(name);
        }
    }

    /// The topic's fresh description; fails when the topic or partition does not exist.
    async fn require(&self, name: &str, partition: i32) -> StoreResult<Arc<Resolved>> {
        let resolved = self.resolve(name).await?;
        Self::check_partition(name, partition, resolved)
    }

    /// Like [`Self::require`], from the cache when fresh enough. A partition beyond the
    /// cached count is checked with Iggy once (it may have been added since).
    async fn require_cached(&self, name: &str, partition: i32) -> StoreResult<Arc<Resolved>> {
        let cached = self.resolve_cached(name).await?;
        match cached {
            Some(r) if u32::try_from(partition).is_ok_and(|p| p < r.partitions_count) => Ok(r),
            _ => self.require(name, partition).await,
        }
    }

    fn check_partition(
        name: &str,
        partition: i32,
        resolved: Option<Arc<Resolved>>,
    ) -> StoreResult<Arc<Resolved>> {
        let unknown = || StoreError::UnknownTopicOrPartition {
            topic: name.to_owned(),
            partition,
        };
        let resolved = resolved.ok_or_else(unknown)?;
        if partition < 0
            || u32::try_from(partition).map_or(true, |p| p >= resolved.partitions_count)
        {
            return Err(unknown());
        }
        Ok(resolved)
    }

    /// Tells long polls on this gateway that `partition` now ends at `high_watermark`.
    fn notify(&self, target: &IggyTopicRef, partition: u32, high_watermark: i64) {
        if let Ok(watches) = self.inner.watches.lock()
            && let Some(tx) = watches.get(&(target.clone(), partition))
        {
            tx.send_if_modified(|v| {
                let grew = high_watermark > *v;
                if grew {
                    *v = high_watermark;
                }
                grew
            });
        }
    }

    /// [`Self::config_of`] for a resolved topic.
    fn meta_of(&self, r: &Resolved) -> StoreResult<TopicMeta> {
        self.config_of(
            &r.key,
            r.message_expiry,
            r.max_topic_size,
            r.partitions_count,
        )
    }

    fn config_of(
        &self,
        key: &TopicKey,
        expiry: IggyExpiry,
        size: MaxTopicSize,
        partitions: u32,
    ) -> StoreResult<TopicMeta> {
        if let Some(meta) = self.inner.meta.topic(key)? {
            return Ok(meta);
        }
        // A topic made by a native Iggy client: describe what Iggy enforces.
        let retention_ms = match expiry {
            IggyExpiry::ExpireDuration(d) => {
                i64::try_from(d.as_micros() / 1000).unwrap_or(i64::MAX)
            }
            _ => -1,
        };
        let retention_bytes = match size {
            MaxTopicSize::Custom(b) => {
                i64::try_from(b.as_bytes_u64() / u64::from(partitions.max(1))).unwrap_or(i64::MAX)
            }
            _ => -1,
        };
        Ok(TopicMeta {
            config: TopicConfig {
                retention_ms,
                retention_bytes,
                ..TopicConfig::default()
            },
            log_start: Default::default(),
        })
    }

    fn info(&self, name: &str, r: &Resolved) -> StoreResult<TopicInfo> {
        let meta = self.meta_of(r)?;
        Ok(TopicInfo {
            name: name.to_owned(),
            id: topic_id(&r.key),
            partitions: i32::try_from(r.partitions_count).unwrap_or(i32::MAX),
            config: meta.config,
        })
    }

    fn watermarks_of(&self, r: &Resolved, partition: u32) -> StoreResult<Watermarks> {
        let p = r
            .partitions
            .iter()
            .find(|p| p.id == partition)
            .ok_or_else(|| StoreError::UnknownTopicOrPartition {
                topic: r.target.topic.clone(),
                partition: i32::try_from(partition).unwrap_or(-1),
            })?;
        let count = i64::try_from(p.messages_count).unwrap_or(i64::MAX);
        let current = i64::try_from(p.current_offset).unwrap_or(i64::MAX);
        // Iggy reports the offset of the last message: 0 both for "empty" and for "one
        // message at 0", told apart by the count. A partition whose only message (at 0)
        // expired also reads as empty until the next append; see docs/bridge.md.
        let high_watermark = if count > 0 || current > 0 {
            current + 1
        } else {
            0
        };
        let physical_start = (high_watermark - count).max(0);
        let logical_start = self
            .inner
            .meta
            .topic(&r.key)?
            .and_then(|m| m.log_start.get(&partition).copied())
            .unwrap_or(0);
        Ok(Watermarks {
            log_start_offset: physical_start.max(logical_start).min(high_watermark),
            high_watermark,
        })
    }

    fn send_queue(&self, target: &IggyTopicRef, partition: u32) -> StoreResult<SharedSendQueue> {
        let mut locks = self.inner.send_queues.lock().map_err(poisoned)?;
        Ok(locks
            .entry((target.clone(), partition))
            .or_insert_with(|| Arc::new(Mutex::new(SendQueue::default())))
            .clone())
    }

    /// Queues `messages` for the partition; they are sent after everything queued
    /// before them. The receiver gives the outcome of the send that carries them.
    fn enqueue(
        &self,
        r: &Arc<Resolved>,
        topic: &str,
        partition: u32,
        messages: Vec<IggyMessage>,
    ) -> StoreResult<tokio::sync::oneshot::Receiver<StoreResult<Sent>>> {
        let queue = self.send_queue(&r.target, partition)?;
        let bytes = messages
            .iter()
            .map(|m| m.payload.len() + m.user_headers.as_ref().map_or(0, Bytes::len))
            .sum();
        let (done, answer) = tokio::sync::oneshot::channel();
        let lead = {
            let mut q = queue.lock().map_err(poisoned)?;
            q.waiting.push_back(Waiting {
                messages,
                bytes,
                done,
            });
            !std::mem::replace(&mut q.sending, true)
        };
        if lead {
            // A task of its own: the sends go on even if the caller is cancelled.
            let this = self.clone();
            let (r, topic) = (r.clone(), topic.to_owned());
            tokio::spawn(async move { this.drain(&r, &topic, partition, &queue).await });
        }
        Ok(answer)
    }

    /// Maps `batches` to Iggy messages and queues them for the partition (the order
    /// point of [`LogStore::submit`]); the future resolves once Iggy confirms them.
    async fn start_append(
        &self,
        topic: &str,
        partition: i32,
        batches: Vec<Bytes>,
    ) -> StoreResult<PendingAppend> {
        let r = self.require_cached(topic, partition).await?;
        let p = u32::try_from(partition).unwrap_or(0);
        let meta = self.meta_of(&r)?;
        let max = usize::try_from(meta.config.max_message_bytes).unwrap_or(0);
        // Refuse the whole call before anything is sent.
        if let Some(big) = batches.iter().find(|b| b.len() > max) {
            return Err(StoreError::MessageTooLarge {
                size: big.len(),
                max,
            });
        }
        let mut messages: Vec<IggyMessage> = Vec::new();
        let origin = iggy::prelude::IggyTimestamp::now().as_micros();
        for bytes in &batches {
            // The broker verified the CRC before calling append (the trait's contract).
            let batch = RecordBatch::decode_verified(bytes, &self.inner.config.decode_limits)
                .map_err(|e| StoreError::CorruptBatch(e.to_string()))?;
            let frame = mapping::frame_of(batch.header());
            let records = batch
                .records()
                .map_err(|e| StoreError::CorruptBatch(e.to_string()))?;
            let mut exact = ExactReencoding::new(&batch);
            let head = messages.len();
            let mut first_record = None;
            for (i, record) in records.enumerate() {
                let record = record.map_err(|e| StoreError::CorruptBatch(e.to_string()))?;
                exact.record(&record);
                let delta = i32::try_from(i)
                    .map_err(|_| StoreError::CorruptBatch("too many records".into()))?;
                let first = (i == 0).then_some(&frame);
                let record = NewRecord::from(record);
                let message = mapping::to_message_at(&record, delta, first, origin)
                    .map_err(|e| StoreError::LimitReached(e.to_string()))?;
                messages.push(message);
                if i == 0 {
                    first_record = Some(record);
                }
            }
            // When the batch re-encodes exactly, reads reuse its CRC: the first message,
            // which carries the frame, is written again with it.
            if let (Some(crc), Some(record), Some(message)) =
                (exact.crc(), first_record, messages.get_mut(head))
            {
                let frame = BatchFrame {
                    crc: Some(crc),
                    ..frame
                };
                *message = mapping::to_message_at(&record, 0, Some(&frame), origin)
                    .map_err(|e| StoreError::LimitReached(e.to_string()))?;
            }
        }
        let count = i64::try_from(messages.len()).unwrap_or(i64::MAX);
        if messages.is_empty() {
            let fresh = self.require(topic, partition).await?;
            let w = self.watermarks_of(&fresh, p)?;
            return Ok(Box::pin(std::future::ready(Ok(AppendOutcome {
                base_offset: w.high_watermark,
                log_append_time: -1,
                log_start_offset: w.log_start_offset,
            }))));
        }
        let answer = self.enqueue(&r, topic, p, messages)?;
        let this = self.clone();
        Ok(Box::pin(async move {
            let sent = answer.await.map_err(|_| {
                StoreError::Internal("the send task ended without an answer".into())
            })??;
            this.notify(&r.target, p, sent.base_offset.saturating_add(count));
            Ok(AppendOutcome {
                base_offset: sent.base_offset,
                log_append_time: -1,
                log_start_offset: sent.log_start_offset,
            })
        }))
    }

    /// Sends what waits in `queue`, a group per Iggy call, until it is empty.
    async fn drain(&self, r: &Arc<Resolved>, topic: &str, partition: u32, queue: &SharedSendQueue) {
        let mut guard = Draining {
            queue,
            finished: false,
        };
        loop {
            let group: Vec<Waiting> = {
                let Ok(mut q) = queue.lock() else { return };
                let group = q.next_group(self.inner.config.send_batch_bytes);
                if group.is_empty() {
                    q.sending = false;
                    guard.finished = true;
                    return;
                }
                group
            };
            let counts: Vec<i64> = group
                .iter()
                .map(|w| i64::try_from(w.messages.len()).unwrap_or(i64::MAX))
                .collect();
            let mut dones = Vec::with_capacity(group.len());
            let mut messages = Vec::with_capacity(group.iter().map(|w| w.messages.len()).sum());
            for w in group {
                messages.extend(w.messages);
                dones.push(w.done);
            }
            let result = self.send_group(r, topic, partition, &mut messages).await;
            let mut next = result.as_ref().map_or(0, |s| s.base_offset);
            for (done, count) in dones.into_iter().zip(counts) {
                let answer = match &result {
                    Ok(sent) => Ok(Sent {
                        base_offset: next,
                        log_start_offset: sent.log_start_offset,
                    }),
                    Err(e) => Err(e.clone()),
                };
                next = next.saturating_add(count);
                // A caller that gave up no longer listens; its records are written.
                let _ = done.send(answer);
            }
        }
    }

    /// One Iggy send of `messages`; the base offset of the first.
    async fn send_group(
        &self,
        r: &Arc<Resolved>,
        topic: &str,
        partition: u32,
        messages: &mut [IggyMessage],
    ) -> StoreResult<Sent> {
        let kafka_partition = i32::try_from(partition).unwrap_or(-1);
        let (s, t) = (
            named(&r.target.stream, topic)?,
            named(&r.target.topic, topic)?,
        );
        let _permit = self
            .inner
            .sends
            .acquire()
            .await
            .map_err(|_| StoreError::Unavailable("bridge closed".into()))?;
        let session = self.session_for(&r.target, partition);
        let sent = self
            .call(
                Op::Write,
                topic,
                kafka_partition,
                session.send_messages(&s, &t, &Partitioning::partition_id(partition), messages),
            )
            .await;
        let response = match sent {
            Ok(response) => response,
            Err(e) => {
                // The topic may have been deleted or changed behind the cache.
                self.forget(topic);
                return Err(e);
            }
        };
        let confirmed = response
            .confirmations
            .iter()
            .find(|c| c.partition_id == partition)
            .or(response.confirmations.first())
            .and_then(|c| i64::try_from(c.base_offset).ok());
        match confirmed {
            // The log start may be up to `metadata_max_age` old; clients only report it.
            Some(base) => Ok(Sent {
                base_offset: base,
                log_start_offset: self.watermarks_of(r, partition)?.log_start_offset,
            }),
            // A server that confirms nothing: one send at a time per partition makes
            // "high watermark after minus what was sent" exact for this gateway.
            None => {
                let fresh = self.require(topic, kafka_partition).await?;
                let w = self.watermarks_of(&fresh, partition)?;
                let count = i64::try_from(messages.len()).unwrap_or(i64::MAX);
                Ok(Sent {
                    base_offset: w.high_watermark - count,
                    log_start_offset: w.log_start_offset,
                })
            }
        }
    }

    async fn poll(
        &self,
        r: &Resolved,
        name: &str,
        partition: u32,
        offset: u64,
        count: u32,
    ) -> StoreResult<Vec<MappedRecord>> {
        Ok(self.poll_at(r, name, partition, offset, count).await?.0)
    }

    /// Polls up to `count` messages from `offset`; also returns Iggy's current offset of
    /// the partition (the offset of its last message) as the poll saw it.
    async fn poll_at(
        &self,
        r: &Resolved,
        name: &str,
        partition: u32,
        offset: u64,
        count: u32,
    ) -> StoreResult<(Vec<MappedRecord>, u64)> {
        let kafka_partition = i32::try_from(partition).unwrap_or(-1);
        let (s, t) = (
            named(&r.target.stream, name)?,
            named(&r.target.topic, name)?,
        );
        let consumer =
            Consumer::new(Identifier::numeric(0).map_err(|e| StoreError::Internal(e.to_string()))?);
        let polled = self
            .call(
                Op::Read,
                name,
                kafka_partition,
                self.any_session().poll_messages(
                    &s,
                    &t,
                    Some(partition),
                    &consumer,
                    &PollingStrategy::offset(offset),
                    count.max(1),
                    false,
                ),
            )
            .await?;
        if !polled.messages.is_empty() {
            let bytes: usize = polled
                .messages
                .iter()
                .map(|m| m.payload.len() + m.user_headers.as_ref().map_or(0, Bytes::len))
                .sum();
            // Record overhead in a Kafka batch is about 10 bytes plus the headers' names.
            let each = (bytes / polled.messages.len()).saturating_add(16).max(16);
            let old = self.inner.message_bytes.load(Ordering::Relaxed);
            self.inner
                .message_bytes
                .store((old * 3 + each) / 4, Ordering::Relaxed);
        }
        // Sized once: a filtered iterator would grow the vector step by step, moving
        // the records each time.
        let mut records = Vec::with_capacity(polled.messages.len());
        for m in polled.messages.iter().filter(|m| m.header.offset >= offset) {
            records.push(mapping::from_message(m).map_err(|e| {
                StoreError::Internal(format!(
                    "{name}/{partition} offset {}: {e}",
                    m.header.offset
                ))
            })?);
        }
        Ok((records, polled.current_offset))
    }

    /// How many messages to ask Iggy for to fill about `max_bytes`.
    fn poll_count(&self, max_bytes: usize) -> u32 {
        let each = self.inner.message_bytes.load(Ordering::Relaxed).max(16);
        let n = (max_bytes / each).saturating_add(1);
        u32::try_from(n)
            .unwrap_or(u32::MAX)
            .clamp(1, self.inner.config.poll_batch_messages)
    }

    /// One poll at `offset` with the cached description. A hit is a poll that starts
    /// exactly at `offset` (so it is inside the log) and gives the high watermark too;
    /// anything else (nothing there, or the log starts later) is a miss, and the caller
    /// asks Iggy for fresh watermarks to answer exactly.
    async fn read_fast(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_bytes: usize,
    ) -> StoreResult<Fast> {
        let count = self.poll_count(max_bytes);
        let (Ok(start), Ok(p)) = (u64::try_from(offset), u32::try_from(partition)) else {
            return Ok(Fast::Miss);
        };
        let r = self.require_cached(topic, partition).await?;
        // The log start only moves up, so below the cached one (the logical start, or
        // where retention had left the partition) is below the real one too.
        let cached = self.watermarks_of(&r, p)?;
        if offset < cached.log_start_offset {
            return Ok(Fast::Miss);
        }
        if let Some(taken) = self.take_ahead(&r.target, p, start, max_bytes).await {
            let w = Watermarks {
                log_start_offset: cached.log_start_offset,
                high_watermark: i64::try_from(taken.high_watermark).unwrap_or(i64::MAX),
            };
            return Ok(Fast::Hit(r, w, taken.records, taken.pending));
        }
        let (first, current) = match self.poll_at(&r, topic, p, start, count).await {
            Ok(polled) => polled,
            Err(e) => {
                self.forget(topic);
                return Err(e);
            }
        };
        let Some(head) = first.first() else {
            // Iggy's current offset is that of the last message, so an offset right
            // after it is the end; 0 is ambiguous (empty, or one message at 0).
            if current > 0 && current.checked_add(1) == Some(start) {
                return Ok(Fast::AtEnd(Watermarks {
                    log_start_offset: cached.log_start_offset,
                    high_watermark: offset,
                }));
            }
            return Ok(Fast::Miss);
        };
        if head.offset != start {
            return Ok(Fast::Miss);
        }
        let last = first.last().map_or(start, |m| m.offset);
        let high_watermark = i64::try_from(current.max(last).saturating_add(1)).unwrap_or(i64::MAX);
        let w = Watermarks {
            log_start_offset: cached.log_start_offset,
            high_watermark,
        };
        Ok(Fast::Hit(r, w, first.into(), None))
    }

    /// Keeps what a read polled but did not return (`buf`, consecutive up to `next`) for
    /// the next read of the partition, and when the partition holds more than that
    /// (`next < end`, the high watermark) starts polling the next [`READ_AHEAD_READS`]
    /// reads' worth in one call, so the next Fetches find their records here instead of
    /// waiting for Iggy. A poll still running from an earlier read (`running`, for the
    /// records from `next`) is kept instead of starting another. Bounded by
    /// `read_ahead_bytes` over all partitions (without room for another poll, `buf` is
    /// still kept); nothing is kept when that is 0.
    #[allow(clippy::too_many_arguments)]
    fn keep_ahead(
        &self,
        r: &Arc<Resolved>,
        topic: &str,
        partition: u32,
        buf: VecDeque<MappedRecord>,
        next: u64,
        end: u64,
        max_bytes: usize,
        running: Option<(u64, PendingPoll)>,
    ) {
        let limit = self.inner.config.read_ahead_bytes;
        if limit == 0 || self.inner.config.metadata_max_age.is_zero() {
            return;
        }
        // A poll for other records than the next ones is left to finish unread.
        let running = running.filter(|(from, _)| *from == next);
        let held: usize = buf.iter().map(mapped_size).sum();
        // Several reads ahead: fewer, larger polls, and the one for the reads after next
        // overlaps the next.
        let depth = max_bytes.saturating_mul(READ_AHEAD_READS);
        let more = running.is_some() || (next < end && held < depth);
        let reserve = |bytes: usize| {
            let total = self.inner.ahead_bytes.fetch_add(bytes, Ordering::Relaxed);
            let fits = total.saturating_add(bytes) <= limit;
            if !fits {
                self.inner.ahead_bytes.fetch_sub(bytes, Ordering::Relaxed);
            }
            fits
        };
        // Without room for another poll, what is already polled is still kept.
        let (more, reserved) = if more && reserve(held.saturating_add(depth)) {
            (true, held.saturating_add(depth))
        } else if !buf.is_empty() && reserve(held) {
            (false, held)
        } else {
            return;
        };
        let Ok(mut slots) = self.inner.ahead.lock() else {
            self.inner
                .ahead_bytes
                .fetch_sub(reserved, Ordering::Relaxed);
            return;
        };
        let key = (r.target.clone(), partition);
        if slots.len() >= MAX_READ_AHEAD_PARTITIONS && !slots.contains_key(&key) {
            drop(slots);
            self.inner
                .ahead_bytes
                .fetch_sub(reserved, Ordering::Relaxed);
            return;
        }
        let pending = more.then(|| {
            running.unwrap_or_else(|| {
                let this = self.clone();
                let (r, topic) = (r.clone(), topic.to_owned());
                let count = self.poll_count(depth);
                (
                    next,
                    tokio::spawn(
                        async move { this.poll_at(&r, &topic, partition, next, count).await },
                    ),
                )
            })
        });
        let ahead = Ahead {
            start: buf.front().map_or(next, |m| m.offset),
            records: buf,
            held,
            high_watermark: end,
            at: std::time::Instant::now(),
            reserved,
            pending,
        };
        if let Some(old) = slots.insert(key, ahead) {
            // A replaced poll still runs to its end (cancelling an SDK call midway could
            // leave its connection out of step); its answer is dropped.
            self.inner
                .ahead_bytes
                .fetch_sub(old.reserved, Ordering::Relaxed);
        }
    }

    /// The records kept by [`Self::keep_ahead`] when they start at `start` and are
    /// younger than `metadata_max_age`, with the high watermark last seen. The poll
    /// started for the records after them is waited for only when the kept ones are
    /// fewer than `want` bytes and it has not finished; otherwise it comes back still
    /// running, for the read to keep.
    async fn take_ahead(
        &self,
        target: &IggyTopicRef,
        partition: u32,
        start: u64,
        want: usize,
    ) -> Option<Taken> {
        let ahead = {
            let mut slots = self.inner.ahead.lock().ok()?;
            let key = (target.clone(), partition);
            let slot = slots.get(&key)?;
            let fresh = slot.at.elapsed() < self.inner.config.metadata_max_age;
            if fresh && slot.start != start {
                // Another reader's position; leave it.
                return None;
            }
            let ahead = slots.remove(&key)?;
            self.inner
                .ahead_bytes
                .fetch_sub(ahead.reserved, Ordering::Relaxed);
            if !fresh {
                return None;
            }
            ahead
        };
        let mut records = ahead.records;
        let mut high_watermark = ahead.high_watermark;
        let mut running = None;
        if let Some((from, handle)) = ahead.pending {
            let expected = records.back().map_or(start, |m| m.offset + 1);
            if from == expected && !handle.is_finished() && ahead.held >= want {
                running = Some((from, handle));
            } else if let Ok(Ok(Ok((more, current)))) =
                tokio::time::timeout(self.inner.config.call_timeout, handle).await
                && from == expected
            {
                if !more.is_empty() {
                    high_watermark = high_watermark.max(current.saturating_add(1));
                }
                append_records(&mut records, more, expected);
            }
        }
        if records.front().map(|m| m.offset) != Some(start) {
            return None;
        }
        let last = records.back().map_or(start, |m| m.offset);
        Some(Taken {
            records,
            high_watermark: high_watermark.max(last.saturating_add(1)),
            pending: running,
        })
    }

    /// The records from `next`: the answer of `running` when it polls from there (it is
    /// consumed either way), else a new poll of `count`.
    #[allow(clippy::too_many_arguments)]
    async fn poll_next(
        &self,
        r: &Resolved,
        topic: &str,
        partition: u32,
        next: u64,
        count: u32,
        running: &mut Option<(u64, PendingPoll)>,
    ) -> StoreResult<Vec<MappedRecord>> {
        if let Some((from, handle)) = running.take()
            && from == next
            && let Ok(Ok(Ok((more, _)))) =
                tokio::time::timeout(self.inner.config.call_timeout, handle).await
            && more.first().is_none_or(|m| m.offset >= next)
        {
            return Ok(more);
        }
        self.poll(r, topic, partition, next, count).await
    }

    async fn apply_iggy_settings(
        &self,
        r: &Resolved,
        name: &str,
        config: &TopicConfig,
        partitions: u32,
    ) -> StoreResult<()> {
        let (s, t) = (
            named(&r.target.stream, name)?,
            named(&r.target.topic, name)?,
        );
        let mut options = TopicUpdateOptions {
            message_expiry: Some(expiry_of(config.retention_ms)),
            max_topic_size: Some(topic_size_of(config.retention_bytes, partitions)),
            ..TopicUpdateOptions::default()
        };
        let session = self.any_session();
        let first = tokio::time::timeout(
            self.inner.config.call_timeout,
            session.update_topic(&s, &t, &r.target.topic, &options),
        )
        .await;
        match first {
            Ok(Ok(())) => Ok(()),
            // Iggy cannot cap a topic below one segment; it enforces retention.bytes at
            // segment granularity anyway, so raise the cap to its floor.
            Ok(Err(IggyError::InvalidTopicSize(_, floor))) => {
                options.max_topic_size = Some(MaxTopicSize::Custom(floor));
                self.call(
                    Op::Admin,
                    name,
                    -1,
                    session.update_topic(&s, &t, &r.target.topic, &options),
                )
                .await
            }
            Ok(Err(e)) => Err(map_iggy_error(&e, Op::Admin, name, -1)),
            Err(_) => Err(timeout(Op::Admin, "update_topic")),
        }
    }

    /// Scans the partition from its log start; `visit` returns `true` to stop.
    async fn scan(
        &self,
        name: &str,
        partition: i32,
        mut visit: impl FnMut(&MappedRecord) -> bool,
    ) -> StoreResult<()> {
        let r = self.require(name, partition).await?;
        let p = u32::try_from(partition).unwrap_or(0);
        let w = self.watermarks_of(&r, p)?;
        let mut offset = u64::try_from(w.log_start_offset).unwrap_or(0);
        let end = u64::try_from(w.high_watermark).unwrap_or(0);
        while offset < end {
            let records = self
                .poll(&r, name, p, offset, self.inner.config.poll_batch_messages)
                .await?;
            let Some(last) = records.last().map(|m| m.offset) else {
                break;
            };
            for m in &records {
                if m.offset < end && visit(m) {
                    return Ok(());
                }
            }
            offset = last + 1;
        }
        Ok(())
    }
}

async fn open_session(config: &BridgeConfig) -> Result<IggyClient, BridgeError> {
    let credentials = Credentials::UsernamePassword(
        config.username.clone(),
        secrecy::SecretString::from(config.password.clone()),
    );
    let builder = IggyClient::builder()
        .with_tcp()
        .with_server_address(config.address.clone())
        .with_auto_sign_in(AutoLogin::Enabled(credentials))
        // Bounded: the SDK's default retries forever, which would hang a Kafka request
        // (the per-call timeout still caps each call).
        .with_reconnection_max_retries(Some(config.connect_retries))
        .with_reconnection_interval(IggyDuration::new(config.retry_interval));
    let builder = if config.tcp_nodelay {
        builder.with_no_delay()
    } else {
        builder
    };
    let client = builder
        .build()
        .map_err(|e| BridgeError::Config(format!("iggy client: {e}")))?;
    let mut last = String::new();
    for attempt in 1..=config.connect_retries {
        match tokio::time::timeout(config.call_timeout, client.connect()).await {
            Ok(Ok(())) => return Ok(client),
            Ok(Err(
                e @ (IggyError::InvalidCredentials
                | IggyError::InvalidUsername
                | IggyError::InvalidPassword
                | IggyError::Unauthenticated
                | IggyError::Unauthorized),
            )) => {
                return Err(BridgeError::Credentials {
                    username: config.username.clone(),
                    reason: e.to_string(),
                });
            }
            Ok(Err(e)) => last = e.to_string(),
            Err(_) => last = format!("no answer within {:?}", config.call_timeout),
        }
        tracing::warn!(attempt, address = %config.address, error = %last, "cannot connect to Iggy");
        if attempt < config.connect_retries {
            tokio::time::sleep(config.retry_interval).await;
        }
    }
    Err(BridgeError::Unreachable {
        address: config.address.clone(),
        attempts: config.connect_retries,
        last,
    })
}

/// What [`IggyBridge::read_fast`] found.
enum Fast {
    /// The topic, the watermarks, the records from the offset read, and a read-ahead
    /// poll still running for the records after them.
    Hit(
        Arc<Resolved>,
        Watermarks,
        VecDeque<MappedRecord>,
        Option<(u64, PendingPoll)>,
    ),
    AtEnd(Watermarks),
    Miss,
}

/// Records of one partition polled ahead of its reader (see `IggyBridge::keep_ahead`).
struct Ahead {
    /// Offset of the first record (or of the pending poll when there is none).
    start: u64,
    records: VecDeque<MappedRecord>,
    /// Bytes of `records` ([`mapped_size`]).
    held: usize,
    /// The partition's high watermark when the records were kept.
    high_watermark: u64,
    at: std::time::Instant,
    /// Bytes counted against `read_ahead_bytes` for this slot.
    reserved: usize,
    /// A poll of the records after `records`: from which offset, and its task.
    pending: Option<(u64, PendingPoll)>,
}

type PendingPoll = tokio::task::JoinHandle<StoreResult<(Vec<MappedRecord>, u64)>>;

/// What [`IggyBridge::take_ahead`] hands a read.
struct Taken {
    records: VecDeque<MappedRecord>,
    high_watermark: u64,
    pending: Option<(u64, PendingPoll)>,
}

/// Appends the records of `more` from offset `from` on to `records`, moving each record
/// once: an empty deque takes over the vector's buffer, a non-empty one grows once.
fn append_records(records: &mut VecDeque<MappedRecord>, mut more: Vec<MappedRecord>, from: u64) {
    more.retain(|m| m.offset >= from);
    if records.is_empty() {
        *records = VecDeque::from(more);
    } else {
        records.reserve(more.len());
        records.extend(more);
    }
}

/// About the bytes one record takes in memory and in a Kafka batch.
fn mapped_size(m: &MappedRecord) -> usize {
    let r = &m.record;
    r.key.as_ref().map_or(0, Bytes::len)
        + r.value.as_ref().map_or(0, Bytes::len)
        + r.headers
            .iter()
            .map(|h| h.key.len() + h.value.as_ref().map_or(0, Bytes::len))
            .sum::<usize>()
        + 16
}

/// One run of consecutive records read back as one Kafka batch.
struct Run {
    base: i64,
    frame: Option<BatchFrame>,
    records: Vec<NewRecord>,
}

impl Run {
    fn encode(&self) -> StoreResult<Bytes> {
        let mut out = BytesMut::new();
        mapping::encode_run(self.base, self.frame.as_ref(), &self.records, &mut out).map_err(
            |e| StoreError::Internal(format!("re-encoding the batch at {}: {e}", self.base)),
        )?;
        Ok(out.freeze())
    }
}

#[async_trait]
impl LogStore for IggyBridge {
    fn name(&self) -> &'static str {
        "iggy"
    }

    async fn create_topic(&self, topic: NewTopic, validate_only: bool) -> StoreResult<TopicInfo> {
        if topic.partitions < 1 {
            return Err(StoreError::InvalidPartitions(format!(
                "{} partitions (at least 1)",
                topic.partitions
            )));
        }
        validate_config(&topic.config)?;
        let partitions = u32::try_from(topic.partitions).unwrap_or(1);
        if self.resolve(&topic.name).await?.is_some() {
            return Err(StoreError::TopicAlreadyExists(topic.name));
        }
        let target = self.inner.map.resolve(&topic.name);
        if validate_only {
            let key = TopicKey {
                stream: target.stream,
                topic: target.topic,
                created_at: 0,
            };
            return Ok(TopicInfo {
                id: topic_id(&key),
                name: topic.name,
                partitions: topic.partitions,
                config: topic.config,
            });
        }
        let session = self.any_session();
        ensure_stream(session, &target.stream, self.inner.config.call_timeout).await?;
        let s = named(&target.stream, &topic.name)?;
        let mut options = TopicCreateOptions {
            partitions_count: Some(partitions),
            message_expiry: Some(expiry_of(topic.config.retention_ms)),
            max_topic_size: Some(topic_size_of(topic.config.retention_bytes, partitions)),
            ..TopicCreateOptions::default()
        };
        let created = match tokio::time::timeout(
            self.inner.config.call_timeout,
            session.create_topic(&s, &target.topic, &options),
        )
        .await
        {
            Ok(Err(IggyError::InvalidTopicSize(_, floor))) => {
                options.max_topic_size = Some(MaxTopicSize::Custom(floor));
                self.call(
                    Op::Admin,
                    &topic.name,
                    -1,
                    session.create_topic(&s, &target.topic, &options),
                )
                .await
            }
            Ok(other) => other.map_err(|e| map_iggy_error(&e, Op::Admin, &topic.name, -1)),
            Err(_) => Err(timeout(Op::Admin, "create_topic")),
        }?;
        let key = TopicKey {
            stream: target.stream.clone(),
            topic: target.topic.clone(),
            created_at: created.created_at.as_micros(),
        };
        self.inner
            .meta
            .put_topic(
                session,
                &key,
                TopicMeta {
                    config: topic.config.clone(),
                    log_start: Default::default(),
                },
            )
            .await?;
        let info = TopicInfo {
            id: topic_id(&key),
            name: topic.name,
            partitions: i32::try_from(created.partitions_count).unwrap_or(topic.partitions),
            config: topic.config,
        };
        self.remember(&info.name, Some(Arc::new(Resolved::new(target, created))))?;
        Ok(info)
    }

    async fn delete_topic(&self, name: &str) -> StoreResult<()> {
        let r = self
            .require(name, 0)
            .await
            .map_err(|_| StoreError::UnknownTopicOrPartition {
                topic: name.to_owned(),
                partition: -1,
            })?;
        let (s, t) = (
            named(&r.target.stream, name)?,
            named(&r.target.topic, name)?,
        );
        let session = self.any_session();
        let deleted = self
            .call(Op::Admin, name, -1, session.delete_topic(&s, &t))
            .await;
        self.forget(name);
        deleted?;
        if let Ok(mut watches) = self.inner.watches.lock() {
            watches.retain(|(target, _), _| *target != r.target);
        }
        if let Ok(mut slots) = self.inner.ahead.lock() {
            slots.retain(|(target, _), ahead| {
                let keep = *target != r.target;
                if !keep {
                    self.inner
                        .ahead_bytes
                        .fetch_sub(ahead.reserved, Ordering::Relaxed);
                }
                keep
            });
        }
        self.inner.meta.forget_topic(session, &r.key).await?;
        Ok(())
    }

    async fn topic(&self, name: &str) -> StoreResult<Option<TopicInfo>> {
        match self.resolve_cached(name).await? {
            Some(r) => self.info(name, &r).map(Some),
            None => Ok(None),
        }
    }

    async fn topic_by_id(&self, id: u128) -> StoreResult<Option<TopicInfo>> {
        let cached = {
            let cache = self.inner.topics.lock().map_err(poisoned)?;
            cache
                .iter()
                .find(|(_, c)| {
                    c.at.elapsed() < self.inner.config.metadata_max_age
                        && topic_id(&c.resolved.key) == id
                })
                .map(|(name, c)| (name.clone(), c.resolved.clone()))
        };
        if let Some((name, r)) = cached {
            return self.info(&name, &r).map(Some);
        }
        let found = self.topics().await?.into_iter().find(|t| t.id == id);
        if let Some(t) = &found {
            // Fill the cache, so the next lookup by this id is local.
            self.resolve(&t.name).await?;
        }
        Ok(found)
    }

    async fn topics(&self) -> StoreResult<Vec<TopicInfo>> {
        let mut out = Vec::new();
        for stream in self.inner.map.streams() {
            let s = named(&stream, &stream)?;
            let listed = match self
                .call(Op::Read, &stream, -1, self.any_session().get_topics(&s))
                .await
            {
                Ok(t) => t,
                Err(StoreError::UnknownTopicOrPartition { .. }) => continue,
                Err(e) => return Err(e),
            };
            for t in listed {
                let target = IggyTopicRef {
                    stream: stream.clone(),
                    topic: t.name.clone(),
                };
                let Some(name) = self.inner.map.reverse(&target) else {
                    continue;
                };
                let key = TopicKey {
                    stream: stream.clone(),
                    topic: t.name.clone(),
                    created_at: t.created_at.as_micros(),
                };
                let meta =
                    self.config_of(&key, t.message_expiry, t.max_topic_size, t.partitions_count)?;
                out.push(TopicInfo {
                    name,
                    id: topic_id(&key),
                    partitions: i32::try_from(t.partitions_count).unwrap_or(i32::MAX),
                    config: meta.config,
                });
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    async fn create_partitions(
        &self,
        name: &str,
        total: i32,
        validate_only: bool,
    ) -> StoreResult<()> {
        let r = self.require(name, 0).await?;
        let current = i32::try_from(r.partitions_count).unwrap_or(i32::MAX);
        if total <= current {
            return Err(StoreError::InvalidPartitions(format!(
                "topic {name} has {current} partitions, asked for {total}"
            )));
        }
        if validate_only {
            return Ok(());
        }
        let add = u32::try_from(total - current).unwrap_or(0);
        let (s, t) = (
            named(&r.target.stream, name)?,
            named(&r.target.topic, name)?,
        );
        let added = self
            .call(
                Op::Admin,
                name,
                -1,
                self.any_session().create_partitions(&s, &t, add),
            )
            .await;
        self.forget(name);
        added?;
        let meta = self.meta_of(&r)?;
        if meta.config.retention_bytes >= 0 {
            let total = u32::try_from(total).unwrap_or(u32::MAX);
            self.apply_iggy_settings(&r, name, &meta.config, total)
                .await?;
        }
        Ok(())
    }

    async fn set_topic_config(&self, name: &str, config: TopicConfig) -> StoreResult<()> {
        validate_config(&config)?;
        let r = self.require(name, 0).await?;
        let applied = self
            .apply_iggy_settings(&r, name, &config, r.partitions_count)
            .await;
        self.forget(name);
        applied?;
        let mut meta = self.meta_of(&r)?;
        meta.config = config;
        self.inner
            .meta
            .put_topic(self.any_session(), &r.key, meta)
            .await
    }

    async fn append(
        &self,
        topic: &str,
        partition: i32,
        batches: Vec<Bytes>,
        _now_ms: i64,
    ) -> StoreResult<AppendOutcome> {
        self.start_append(topic, partition, batches).await?.await
    }

    async fn submit(
        &self,
        topic: &str,
        partition: i32,
        batches: Vec<Bytes>,
        _now_ms: i64,
    ) -> StoreResult<PendingAppend> {
        self.start_append(topic, partition, batches).await
    }

    async fn read(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_bytes: usize,
    ) -> StoreResult<ReadOutcome> {
        let p = u32::try_from(partition).unwrap_or(0);
        let chunk = self.poll_count(max_bytes);
        let (r, w, first, mut running) =
            match self.read_fast(topic, partition, offset, max_bytes).await? {
                Fast::Hit(r, w, first, running) => (r, w, first, running),
                Fast::AtEnd(w) => {
                    return Ok(ReadOutcome {
                        watermarks: w,
                        batches: Vec::new(),
                    });
                }
                Fast::Miss => {
                    let r = self.require(topic, partition).await?;
                    let w = self.watermarks_of(&r, p)?;
                    if offset < w.log_start_offset || offset > w.high_watermark {
                        return Err(StoreError::OffsetOutOfRange {
                            offset,
                            log_start_offset: w.log_start_offset,
                            high_watermark: w.high_watermark,
                        });
                    }
                    if offset == w.high_watermark {
                        return Ok(ReadOutcome {
                            watermarks: w,
                            batches: Vec::new(),
                        });
                    }
                    let start = u64::try_from(offset).unwrap_or(0);
                    let first = self.poll(&r, topic, p, start, chunk).await?;
                    (r, w, VecDeque::from(first), None)
                }
            };
        let mut out = ReadOutcome {
            watermarks: w,
            batches: Vec::new(),
        };
        let start = u64::try_from(offset).unwrap_or(0);
        let end = u64::try_from(w.high_watermark).unwrap_or(0);
        let mut buf: VecDeque<MappedRecord> = first;
        // A read starts with the batch holding the offset, as in Kafka.
        if let Some(first) = buf.front()
            && let Some(delta) = first.offset_delta
            && delta > 0
        {
            let physical_start = u64::try_from(w.high_watermark).unwrap_or(0).saturating_sub(
                r.partitions
                    .iter()
                    .find(|x| x.id == p)
                    .map_or(0, |x| x.messages_count),
            );
            let base = first
                .offset
                .saturating_sub(u64::from(delta.unsigned_abs()))
                .max(physical_start);
            if base < first.offset {
                let head_len = u32::try_from(first.offset - base).unwrap_or(u32::MAX);
                let head = self.poll(&r, topic, p, base, head_len).await?;
                for m in head.into_iter().rev().filter(|m| m.offset < start) {
                    buf.push_front(m);
                }
            }
        }
        let mut size = 0usize;
        let mut next = buf.back().map_or(start, |m| m.offset + 1);
        loop {
            let Some(first) = buf.pop_front() else {
                if next >= end {
                    break;
                }
                let want = self.poll_count(max_bytes.saturating_sub(size));
                let more = self
                    .poll_next(&r, topic, p, next, want, &mut running)
                    .await?;
                let Some(last) = more.last() else { break };
                next = last.offset + 1;
                append_records(&mut buf, more, 0);
                continue;
            };
            let base = first.offset_delta.map_or(first.offset, |d| {
                first.offset.saturating_sub(u64::from(d.unsigned_abs()))
            });
            let frame = first.batch.filter(|_| first.offset_delta == Some(0));
            let belongs = |m: &MappedRecord| {
                m.offset_delta.is_some()
                    && m.batch.is_none()
                    && m.offset_delta
                        .map(|d| m.offset.saturating_sub(u64::from(d.unsigned_abs())))
                        == Some(base)
            };
            let native = first.offset_delta.is_none();
            // A batch that will not fit is not read further: its head stays for the
            // next read, and the Iggy poll for its rest is not made now.
            if let Some(f) = &frame
                && !out.batches.is_empty()
                && usize::try_from(f.record_count)
                    .unwrap_or(usize::MAX)
                    .saturating_mul(mapped_size(&first))
                    > max_bytes.saturating_sub(size)
            {
                buf.push_front(first);
                break;
            }
            let mut last_offset = first.offset;
            let mut members = vec![first];
            if !native {
                loop {
                    if buf.is_empty() && next < end {
                        // The rest of this batch, when its frame tells how much that is.
                        let want = frame
                            .as_ref()
                            .and_then(|f| usize::try_from(f.record_count).ok())
                            .and_then(|n| n.checked_sub(members.len()))
                            .and_then(|n| u32::try_from(n).ok())
                            .filter(|n| *n > 0)
                            .map_or(chunk, |n| n.min(chunk));
                        let more = self
                            .poll_next(&r, topic, p, next, want, &mut running)
                            .await?;
                        let Some(last) = more.last() else { break };
                        next = last.offset + 1;
                        append_records(&mut buf, more, 0);
                    }
                    match buf.front() {
                        Some(m) if m.offset == last_offset + 1 && belongs(m) => {
                            if let Some(m) = buf.pop_front() {
                                last_offset = m.offset;
                                members.push(m);
                            }
                        }
                        _ => break,
                    }
                }
            }
            let mut run = Run {
                base: i64::try_from(members[0].offset).unwrap_or(i64::MAX),
                frame: frame
                    .filter(|f| usize::try_from(f.record_count).ok() == Some(members.len())),
                records: members
                    .iter_mut()
                    .map(|m| std::mem::take(&mut m.record))
                    .collect(),
            };
            let bytes = run.encode()?;
            if !out.batches.is_empty() && size + bytes.len() > max_bytes {
                // Keep the run for the next read of this partition.
                for (m, record) in members.iter_mut().zip(run.records.drain(..)) {
                    m.record = record;
                }
                for m in members.into_iter().rev() {
                    buf.push_front(m);
                }
                break;
            }
            size += bytes.len();
            out.batches.push(bytes);
            if size >= max_bytes {
                break;
            }
        }
        self.keep_ahead(&r, topic, p, buf, next, end, max_bytes, running);
        Ok(out)
    }

    async fn watermarks(&self, topic: &str, partition: i32) -> StoreResult<Watermarks> {
        let r = self.require(topic, partition).await?;
        self.watermarks_of(&r, u32::try_from(partition).unwrap_or(0))
    }

    async fn offset_for_timestamp(
        &self,
        topic: &str,
        partition: i32,
        timestamp: i64,
    ) -> StoreResult<Option<TimestampHit>> {
        // Kafka timestamps are the producer's and need not grow with offsets, so Iggy's
        // own timestamp index cannot answer this; the partition is scanned instead.
        let mut hit = None;
        self.scan(topic, partition, |m| {
            if m.record.timestamp >= timestamp {
                hit = Some(TimestampHit {
                    offset: i64::try_from(m.offset).unwrap_or(i64::MAX),
                    timestamp: m.record.timestamp,
                });
                return true;
            }
            false
        })
        .await?;
        Ok(hit)
    }

    async fn max_timestamp(
        &self,
        topic: &str,
        partition: i32,
    ) -> StoreResult<Option<TimestampHit>> {
        let mut best: Option<TimestampHit> = None;
        self.scan(topic, partition, |m| {
            if best.is_none_or(|b| m.record.timestamp > b.timestamp) {
                best = Some(TimestampHit {
                    offset: i64::try_from(m.offset).unwrap_or(i64::MAX),
                    timestamp: m.record.timestamp,
                });
            }
            false
        })
        .await?;
        Ok(best)
    }

    async fn delete_records(
        &self,
        topic: &str,
        partition: i32,
        before_offset: i64,
    ) -> StoreResult<i64> {
        let r = self.require(topic, partition).await?;
        let p = u32::try_from(partition).unwrap_or(0);
        let w = self.watermarks_of(&r, p)?;
        let target = if before_offset == -1 {
            w.high_watermark
        } else {
            before_offset
        };
        if target < 0 || target > w.high_watermark {
            return Err(StoreError::OffsetOutOfRange {
                offset: before_offset,
                log_start_offset: w.log_start_offset,
                high_watermark: w.high_watermark,
            });
        }
        if target <= w.log_start_offset {
            return Ok(w.log_start_offset);
        }
        // Iggy deletes whole segments only, so the log start is kept by the gateway
        // (see docs/bridge.md): Kafka clients no longer see the records below it.
        let mut meta = self.meta_of(&r)?;
        meta.log_start.insert(p, target);
        self.inner
            .meta
            .put_topic(self.any_session(), &r.key, meta)
            .await?;
        Ok(target)
    }

    /// Only for topics this gateway has looked up (their description is cached, however
    /// old), as this cannot ask Iggy; a fetch looks its topics up first. The initial
    /// value is the high watermark as last seen.
    fn watch(&self, topic: &str, partition: i32) -> Option<watch::Receiver<i64>> {
        let p = u32::try_from(partition).ok()?;
        let r = {
            let cache = self.inner.topics.lock().ok()?;
            cache.get(topic)?.resolved.clone()
        };
        if p >= r.partitions_count {
            return None;
        }
        let key = (r.target.clone(), p);
        let mut watches = self.inner.watches.lock().ok()?;
        if let Some(tx) = watches.get(&key) {
            return Some(tx.subscribe());
        }
        if watches.len() >= MAX_WATCHED_PARTITIONS {
            // Dropping the senders ends the waits on them; those fetches fall back to
            // re-reading at the poll interval.
            watches.clear();
        }
        let seen = self.watermarks_of(&r, p).ok()?.high_watermark;
        Some(
            watches
                .entry(key)
                .or_insert(watch::channel(seen).0)
                .subscribe(),
        )
    }

    fn notifies_every_append(&self) -> bool {
        // Native Iggy producers write to the same partitions without telling us.
        false
    }

    fn poll_interval(&self) -> Duration {
        self.inner.config.poll_interval
    }
}

#[async_trait]
impl OffsetStore for IggyBridge {
    async fn commit(
        &self,
        group: &str,
        offsets: Vec<(String, i32, CommittedOffset)>,
    ) -> StoreResult<()> {
        self.inner
            .meta
            .commit(self.any_session(), group, offsets)
            .await
    }

    async fn fetch(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
    ) -> StoreResult<Option<CommittedOffset>> {
        self.inner.meta.fetch(group, topic, partition)
    }

    async fn fetch_all(&self, group: &str) -> StoreResult<Vec<(String, i32, CommittedOffset)>> {
        self.inner.meta.fetch_all(group)
    }

    async fn delete(&self, group: &str, partitions: &[(String, i32)]) -> StoreResult<()> {
        self.inner
            .meta
            .delete(self.any_session(), group, partitions)
            .await
    }

    async fn delete_group(&self, group: &str) -> StoreResult<()> {
        self.inner
            .meta
            .delete_group(self.any_session(), group)
            .await
    }

    async fn groups(&self) -> StoreResult<Vec<String>> {
        self.inner.meta.groups()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_ids_are_stable_distinct_and_non_zero() {
        let key = |c| TopicKey {
            stream: "kafka".into(),
            topic: "orders".into(),
            created_at: c,
        };
        assert_eq!(topic_id(&key(1)), topic_id(&key(1)));
        assert_ne!(topic_id(&key(1)), topic_id(&key(2)));
        assert_ne!(topic_id(&key(0)), 0);
    }

    #[test]
    fn retention_maps_to_iggy_settings() {
        assert_eq!(expiry_of(-1), IggyExpiry::NeverExpire);
        assert_eq!(
            expiry_of(1500),
            IggyExpiry::ExpireDuration(IggyDuration::new(Duration::from_millis(1500)))
        );
        assert_eq!(topic_size_of(-1, 3), MaxTopicSize::Unlimited);
        assert_eq!(
            topic_size_of(100, 3),
            MaxTopicSize::Custom(IggyByteSize::from(300))
        );
        assert!(
            validate_config(&TopicConfig {
                retention_ms: 0,
                ..TopicConfig::default()
            })
            .is_err()
        );
        validate_config(&TopicConfig::default()).unwrap();
    }

    #[test]
    fn appended_records_start_where_asked_and_keep_their_order() {
        let at = |offset: u64| MappedRecord {
            offset,
            record: NewRecord::default(),
            offset_delta: None,
            batch: None,
            envelope: false,
        };
        let offsets = |d: &VecDeque<MappedRecord>| d.iter().map(|m| m.offset).collect::<Vec<_>>();
        let mut records = VecDeque::from(vec![at(1), at(2)]);
        append_records(&mut records, vec![at(2), at(3), at(4)], 3);
        assert_eq!(offsets(&records), [1, 2, 3, 4]);
        let mut empty = VecDeque::new();
        append_records(&mut empty, vec![at(5), at(6), at(7)], 6);
        assert_eq!(offsets(&empty), [6, 7]);
        append_records(&mut empty, Vec::new(), 0);
        assert_eq!(offsets(&empty), [6, 7]);
    }

    #[test]
    fn a_send_groups_waiting_appends_up_to_the_limit() {
        let mut q = SendQueue::default();
        let mut answers = Vec::new();
        for bytes in [400, 300, 300, 1, 5000, 200, 700, 100] {
            let (done, answer) = tokio::sync::oneshot::channel();
            answers.push(answer);
            q.waiting.push_back(Waiting {
                messages: Vec::new(),
                bytes,
                done,
            });
        }
        let mut sizes = Vec::new();
        loop {
            let group = q.next_group(1000);
            if group.is_empty() {
                break;
            }
            sizes.push(group.iter().map(|w| w.bytes).collect::<Vec<_>>());
        }
        // In order; a group stays within the limit unless one append alone is larger.
        assert_eq!(
            sizes,
            vec![
                vec![400, 300, 300],
                vec![1],
                vec![5000],
                vec![200, 700, 100]
            ]
        );
        assert!(q.waiting.is_empty());
    }
}
