//! [`IggyBridge`]: `LogStore` and `OffsetStore` over the Iggy SDK.
//!
//! Every SDK call runs under `call_timeout`, so no Kafka request waits on Iggy forever.
//! The bridge opens `sessions` Iggy connections for reads and administration and as many
//! for appends; appends to one partition always go through the same append session and
//! that partition's send queue, so one append's messages
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
//!
//! This module holds the shared state and construction; each concern has a submodule:
//!
//! ```text
//! session     the Iggy connections, which one a call uses, the per-call timeout
//! topics      topic descriptions (cached for metadata_max_age), watermarks, settings
//! append      the append path: per-partition send queues and group sends
//! read        polls, the read path and scans
//! read_ahead  records polled before their reader asks, bounded by read_ahead_bytes
//! watches     long-poll notification channels fed by this gateway's appends
//! compaction  compacted partitions: passes into companion topics, reads below the
//!             boundary, the background cleaner (see crate::compaction)
//! store       the LogStore and OffsetStore impls
//! ```

mod append;
mod compaction;
mod read;
mod read_ahead;
mod session;
mod store;
mod topics;
mod watches;

use crate::config::{BridgeConfig, IggyTopicRef, TopicMap};
use crate::connection::Reconnect;
use crate::errors::{BridgeError, Op};
use crate::meta::Meta;
use crate::metrics::IggyMetrics;
use crate::partition::PartitionId;
use append::SharedSendQueue;
pub use compaction::LeaderFn;
use iggy::prelude::{Identifier, IggyClient};
use kafka_store::{LogStore, NewTopic, StoreError, StoreResult, TopicConfig, TopicInfo};
use read_ahead::Ahead;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex};
use tokio::sync::{Semaphore, watch};
use topics::CachedTopic;

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
    /// Reads, administration and the metadata logs; the SDK may resend a request whose
    /// answer was lost on these.
    sessions: Vec<IggyClient>,
    /// Appends only (one per partition, see [`IggyBridge::session_for`]); never
    /// resent by the SDK (`crate::connection`'s "Appends are never resent").
    appends: Vec<IggyClient>,
    /// Reconnect lost sessions (to another node first, with several addresses); stop
    /// with the bridge.
    watchers: crate::connection::Watchers,
    next_session: AtomicUsize,
    sends: Semaphore,
    send_queues: Mutex<HashMap<(IggyTopicRef, PartitionId), SharedSendQueue>>,
    meta: Meta,
    /// Kafka topic name -> its description, reused for `metadata_max_age`.
    topics: Mutex<HashMap<String, CachedTopic>>,
    /// High watermarks after this gateway's own appends, for long polls.
    watches: Mutex<HashMap<(IggyTopicRef, PartitionId), watch::Sender<i64>>>,
    /// Running estimate of the bytes one polled message takes in a Kafka batch, to size
    /// polls from a Fetch's byte limit.
    message_bytes: AtomicUsize,
    /// Records polled ahead of their reader, per partition.
    ahead: Mutex<HashMap<(IggyTopicRef, PartitionId), Ahead>>,
    /// Bytes reserved by `ahead`, bounded by `read_ahead_bytes`.
    ahead_bytes: AtomicUsize,
    /// Payload bytes all send queues may hold together: `send_buffer_bytes`.
    send_budget: append::Budget,
    /// Bytes of messages mapped ahead of their appends and not yet taken by one
    /// (`IggyBridge::mapping_sink`), bounded by `send_buffer_bytes` too.
    prepared_bytes: Arc<AtomicUsize>,
    /// Idempotent producers remembered over all partitions, bounded by
    /// `dedup_producers`.
    dedup_producers: AtomicUsize,
    /// The high half of the ids of messages this bridge sends (random per run) ...
    id_prefix: u64,
    /// ... and the low half, counting.
    message_ids: AtomicU64,
    /// Round trips to Iggy.
    metrics: IggyMetrics,
    /// Compaction passes run one at a time.
    compaction_lock: tokio::sync::Mutex<()>,
    /// Set by `close`: the background refresh of the meta logs stops.
    closed: std::sync::atomic::AtomicBool,
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

/// A random number from the standard library's per-process hash keys and the clock:
/// good enough to keep two runs' message ids apart, not for secrets.
pub(crate) fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(now);
    h.write_u32(std::process::id());
    h.finish()
}

/// Reads what other gateways wrote to the shared metadata logs every
/// `meta_refresh_interval`, until the bridge is closed or dropped.
async fn refresh_meta(inner: std::sync::Weak<Inner>) {
    let every = match inner.upgrade() {
        Some(inner) => inner.config.meta_refresh_interval,
        None => return,
    };
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        if inner.closed.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        // A session of its own would not queue behind data traffic, but costs a
        // connection per bridge; the first session carries the metadata writes too.
        if let Some(client) = inner.sessions.first() {
            inner.meta.refresh(client).await;
        }
    }
}

impl IggyBridge {
    /// Validates `config`, connects and signs in (bounded retries), and loads the
    /// bridge's metadata. Fails with a clear error; never falls back to anything.
    pub async fn connect(config: BridgeConfig) -> Result<IggyBridge, BridgeError> {
        config.validate()?;
        let map = TopicMap::load(&config)?;
        crate::connection::check_tls_files(&config)?;
        let watchers = crate::connection::Watchers::default();
        let mut sessions = Vec::with_capacity(config.sessions);
        let mut appends = Vec::with_capacity(config.sessions);
        for _ in 0..config.sessions {
            sessions.push(session::open_session(&config, &watchers, Reconnect::Sdk).await?);
            appends.push(session::open_session(&config, &watchers, Reconnect::Watcher).await?);
        }
        let metrics = IggyMetrics::default();
        let meta = match sessions.first() {
            Some(client) => Meta::open(client, &config, &metrics, random_u64())
                .await
                .map_err(|e| BridgeError::Setup(e.to_string()))?,
            None => return Err(BridgeError::Config("sessions must be at least 1".into())),
        };
        let send_budget = append::Budget::new(config.send_buffer_bytes);
        let bridge = IggyBridge {
            inner: Arc::new(Inner {
                sends: Semaphore::new(config.max_in_flight_sends),
                config,
                map,
                sessions,
                appends,
                watchers,
                next_session: AtomicUsize::new(0),
                send_queues: Mutex::new(HashMap::new()),
                meta,
                topics: Mutex::new(HashMap::new()),
                watches: Mutex::new(HashMap::new()),
                message_bytes: AtomicUsize::new(256),
                ahead: Mutex::new(HashMap::new()),
                ahead_bytes: AtomicUsize::new(0),
                send_budget,
                prepared_bytes: Arc::new(AtomicUsize::new(0)),
                dedup_producers: AtomicUsize::new(0),
                id_prefix: random_u64(),
                message_ids: AtomicU64::new(0),
                metrics,
                compaction_lock: tokio::sync::Mutex::new(()),
                closed: std::sync::atomic::AtomicBool::new(false),
            }),
        };
        tokio::spawn(refresh_meta(Arc::downgrade(&bridge.inner)));
        Ok(bridge)
    }

    /// Adds the Iggy round-trip metrics (`kafka_gateway_iggy_*`, see
    /// docs/observability.md) to `registry`. Round trips are counted from the start
    /// either way.
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        self.inner.metrics.register(registry);
    }

    /// Iggy bytes the compaction cleaner has given back since the bridge started.
    pub fn compaction_reclaimed_bytes(&self) -> u64 {
        self.inner.metrics.compaction.reclaimed()
    }

    /// Messages Iggy has answered the polls of reads and scans with since the bridge
    /// started (`kafka_gateway_iggy_polled_messages_total`): a message polled twice
    /// counts twice.
    pub fn polled_messages(&self) -> u64 {
        self.inner.metrics.polled_messages()
    }

    /// The SCRAM credentials kept in this bridge's meta stream (log `scram`), as the
    /// broker's credential store.
    pub fn scram_store(&self) -> Arc<crate::credentials::IggyScramStore> {
        Arc::new(crate::credentials::IggyScramStore::new(self.clone()))
    }

    /// The Kafka ACL bindings kept in this bridge's meta stream (log `acls`), as the
    /// broker's ACL store, holding at most `max_bindings`
    /// ([`kafka_authz::store::DEFAULT_MAX_ACL_BINDINGS`] is the gateway's default).
    pub fn acl_store(&self, max_bindings: usize) -> Arc<crate::acls::IggyAclStore> {
        Arc::new(crate::acls::IggyAclStore::new(self.clone(), max_bindings))
    }

    /// The validated configuration this bridge runs with.
    pub(crate) fn config(&self) -> &BridgeConfig {
        &self.inner.config
    }

    /// The round-trip metrics.
    pub(crate) fn metrics(&self) -> &IggyMetrics {
        &self.inner.metrics
    }

    /// The Iggy users other than the bridge's own account that can append to the meta
    /// stream (or grant themselves that: `manage_users`), looking at no more than
    /// `max_users` users; `Err` when Iggy does not say (the bridge's account may not
    /// read users). With a meta secret their records are ignored; without one they can
    /// write SCRAM credentials, ACL bindings and where clients connect.
    pub async fn meta_stream_writers(&self, max_users: usize) -> StoreResult<Vec<String>> {
        use iggy::prelude::{StreamClient, UserClient};
        let config = &self.inner.config;
        let session = self.any_session();
        let stream = self
            .call(
                Op::Admin,
                &config.meta_stream,
                -1,
                session.get_stream(&named(&config.meta_stream, &config.meta_stream)?),
            )
            .await?
            .map(|s| s.id as usize);
        let users = self
            .call(Op::Admin, &config.meta_stream, -1, session.get_users())
            .await?;
        let mut writers = Vec::new();
        for user in users.into_iter().take(max_users) {
            if user.username == config.username {
                continue;
            }
            let details = self
                .call(
                    Op::Admin,
                    &config.meta_stream,
                    -1,
                    session.get_user(
                        &Identifier::numeric(user.id).map_err(|e| {
                            StoreError::Internal(format!("user id {}: {e}", user.id))
                        })?,
                    ),
                )
                .await?;
            let Some(permissions) = details.and_then(|d| d.permissions) else {
                continue;
            };
            let g = &permissions.global;
            let global = g.manage_users || g.manage_streams || g.manage_topics || g.send_messages;
            let on_stream = stream
                .and_then(|id| permissions.streams.as_ref()?.get(&id).cloned())
                .is_some_and(|p| {
                    p.manage_stream
                        || p.manage_topics
                        || p.send_messages
                        || p.topics.as_ref().is_some_and(|topics| {
                            topics.values().any(|t| t.manage_topic || t.send_messages)
                        })
                });
            if global || on_stream {
                writers.push(user.username);
            }
        }
        Ok(writers)
    }

    /// Records of the meta stream ignored so far because they carry no valid proof
    /// that a gateway wrote them (see [`crate::proof`]).
    pub fn meta_records_refused(&self) -> u64 {
        self.inner.metrics.meta_refused()
    }

    /// A new Iggy connection of its own (not one of the data sessions), signed in like
    /// them: for background work that must not queue behind data traffic.
    pub(crate) async fn open_own_session(&self) -> Result<IggyClient, BridgeError> {
        session::open_session(&self.inner.config, &self.inner.watchers, Reconnect::Sdk).await
    }

    /// The bridge's durable metadata.
    pub(crate) fn meta(&self) -> &Meta {
        &self.inner.meta
    }

    /// A session for a metadata write.
    pub(crate) fn meta_session(&self) -> &IggyClient {
        self.any_session()
    }

    /// A session for administrative reads (users, streams), and the timeout every call
    /// on it runs under.
    pub(crate) fn admin_session(&self) -> (&IggyClient, std::time::Duration) {
        (self.any_session(), self.inner.config.call_timeout)
    }

    /// The source of authorization decisions from Iggy users' permissions
    /// (`permissions_refresh`, `permissions_cache_entries`); see
    /// [`crate::permissions`]. Each call makes a source with its own cache.
    pub fn permissions(&self) -> Arc<crate::permissions::IggyPermissions> {
        Arc::new(crate::permissions::IggyPermissions::new(
            self.clone(),
            self.inner.config.permissions_refresh,
            self.inner.config.permissions_cache_entries,
        ))
    }

    /// The topic map in use.
    pub fn topic_map(&self) -> &TopicMap {
        &self.inner.map
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
}
