//! The bridge's own durable state, kept in Iggy so a restarted gateway, and every other
//! gateway on the same Iggy, finds it.
//!
//! Stream `meta_stream` (default `__kafka_gateway`) holds logs of JSON records, each a
//! one-partition topic, folded "last record per key wins":
//!
//! ```text
//! groups.<shard>  one per coordinator shard (kafka_store::cluster::group_shard, 16)
//!          {"g":group,"t":topic,"p":partition,"o":offset|null,"e":epoch,"m":meta|null,"ts":ms}
//!          key (g,t,p); "o":null deletes the committed offset
//!          {"g":group,"s":base64 state|null}
//!          key g: the coordinator's state of the group, opaque here; null deletes it
//!          {"x":transactional id,"s":base64 state|null}
//!          key x: the transaction coordinator's state of the id, opaque here; null
//!          deletes it
//!          {"ce":n}
//!          the shard's transaction-coordinator epoch: the highest one written counts;
//!          a gateway that starts coordinating the shard writes one more
//!          {"pg":group,"pid":producer id,
//!           "po":[[topic,partition,offset,epoch,meta|null,ts],..]|null}
//!          key (pg,pid): offsets committed inside an open transaction; null ends the
//!          set. Ending a transaction writes the committed offsets (on commit) and the
//!          null record in one send, so it happens whole or not at all
//! topics   {"s":stream,"t":iggy topic,"c":created_at_us,"deleted":bool,
//!           "retention_ms":..,"retention_bytes":..,"max_message_bytes":..,
//!           "log_start":{"<partition>":offset},
//!           "compacted":{"<partition>":{"g":generation,"start":..,"c":clean end,
//!                        "end":..,"n":..,
//!                        "idx":[[kafka offset,companion offset],..]}},
//!           "txn":true}
//!          key (s,t,c): the creation time keeps a recreated topic from inheriting the
//!          settings of the one it replaces. "txn" (absent = false) is sticky: the
//!          topic once held a transactional batch; a rewrite of the record carries it,
//!          and a record without it does not clear it
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
//! The shard records are told apart by their keys: an offset record has `g`, `t` and
//! `p`, a group state exactly `g` and `s`, the transaction records none of `g`, `t`
//! and `p`, and each kind refuses fields it does not know (the offset record aside,
//! kept lenient as it was first written), so no record reads as another kind. A
//! gateway of an earlier version skips the transaction records as unreadable.
//!
//! A record that cannot be read, or is longer than `meta_record_max_bytes`, is skipped
//! (one warning a minute per log at most, with the count); it never stops a read.
//!
//! ## Generations
//!
//! Snapshots keep the logs short. Each log lives in generations: generation 0 is the
//! topic `topics` (or `groups.3`, ...) as first written, generation `n` the topic
//! `topics.n` (`groups.3.n`: a shard number never ends in `.digits`, so names do not
//! collide). A generation above 0 starts with a snapshot, the live state as ordinary
//! records, closed by a marker `{"snapshot_end":n}`; the records after the first
//! marker are its tail. A generation ends with its first seal `{"seal":n,"next":m}`:
//! records after that seal are not part of the log. A reader that reaches the seal
//! waits for generation `m` to have its marker, then takes `m`'s snapshot as its
//! whole state and reads on there. The current generation is the highest one with a
//! marker (generation 0 needs none); a generation without one is a roll in progress
//! (or cut short) and is not read.
//!
//! Rolling. Once a writer's tail is `meta_snapshot_records` long, and at least as long
//! as the live state, it appends a seal naming `m`, one above every generation that
//! exists, reads on to the first seal of the generation (its own, or a racing
//! roller's: the first one decides `m` for everybody), and writes its state, which is
//! then exactly the state before that seal, into `m`, then the marker. Anyone who
//! finds a seal whose next generation has no marker (its roller may have died) writes
//! the same snapshot itself: every copy folds to the same state, so two rollers
//! interleaving are harmless. Snapshot records carry message ids of their own kind,
//! and a copy landing after the first marker is ignored, so it cannot undo a record
//! written after the marker. The generation left behind is deleted a grace (ten
//! refresh intervals) after a gateway moved past it, by the refresh task; a reader
//! still in it after that reads the log again from its current generation, and a
//! writer that has not yet found its record writes it again there (the earlier copy
//! may be in the snapshot: the same last-wins record twice, before the write is
//! acknowledged).
//!
//! ## Several gateways
//!
//! `topics`, `scram` and `acls` are written by whichever gateway an admin client
//! reaches. Each gateway reads what the others appended every
//! `meta_refresh_interval` (`Meta::refresh`, a background task of the bridge) and
//! right before each write, so a change made on one gateway reaches the others within
//! that interval. A write must not be lost to a roll that sealed the generation while
//! the record was under way: every write carries fresh message ids, and the writer
//! reads the log back until it finds its first record. Found before the seal, it is in
//! the snapshot that follows; after the seal (not read there), it is written again
//! into the next generation once that has its marker. Only then is the write
//! acknowledged, and it is applied to the in-memory state as it is read back, in log
//! order, like everybody else's.
//!
//! The `groups.<shard>` logs have one writer at a time, the shard's coordinator: the
//! broker calls `acquire_shard` when this gateway becomes it, which reads the shard
//! from its current generation to the end (what the previous coordinator wrote,
//! finishing a roll it left half done) before any of its groups is served, and
//! `release_shard` when it stops, which forgets the shard. A write is applied without
//! reading it back. A shard used before it was acquired (a gateway alone, or a caller
//! that does not know about shards) is read first, so nothing depends on the order of
//! calls; `groups` reads every shard not released. Two gateways briefly both believing
//! they coordinate a shard (views of the membership differ for at most the session
//! timeout) could both append; the records stay in log order and the next acquirer
//! reads them all, so last write wins, unless one of them rolled the shard meanwhile:
//! the other's records after the seal are not part of the log. The broker's fencing
//! (a gateway that lost its lease stops acting as owner) keeps that window closed.
//!
//! Committed offsets once lived in one log `offsets`. A gateway that finds it at
//! start folds it (any generation), writes the live offsets into their shard logs and
//! deletes it. Two gateways starting at once may both copy: the records are the same
//! and last-wins, so a repeated copy is harmless, except that a commit made through
//! another gateway between the two copies would be overwritten by the older offset.
//! Upgrade by starting the gateways before clients commit, or one gateway first.
//!
//! One call of the bridge writes its records with one `send_messages` (ACL changes a
//! page of 1000 at a time), so an offset commit is all or nothing. Writes to one log
//! are serialized within a gateway.

mod genlog;

use crate::config::BridgeConfig;
use crate::errors::{Op, map_iggy_error, timeout};
use crate::metrics::IggyMetrics;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use genlog::{Ctx, Fold, Log, META_PAGE};
use iggy::prelude::{Identifier, IggyClient, IggyError, StreamClient};
use kafka_authz::{AclBinding, AclBindingFilter, Operation, PatternType, Permission, ResourceType};
use kafka_sasl::{ScramCredential, ScramMechanism, ScramUserInfo};
use kafka_store::cluster::{GROUP_SHARDS, group_shard};
use kafka_store::{CommittedOffset, PendingOffsets, StoreError, StoreResult, TopicConfig};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The single offsets log of earlier versions, migrated into the shard logs.
const LEGACY_OFFSETS: &str = "offsets";
const TOPICS_TOPIC: &str = "topics";
const SCRAM_TOPIC: &str = "scram";
const ACLS_TOPIC: &str = "acls";

/// The log of coordinator shard `shard`.
fn shard_log_name(shard: u32) -> String {
    format!("groups.{shard}")
}

/// Least time between two warnings about a failed refresh.
const REFRESH_WARN_INTERVAL: Duration = Duration::from_secs(60);

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
    /// Per partition, the compacted prefix kept in a companion topic (see
    /// `crate::bridge::compaction`); absent for partitions never compacted.
    pub compacted: BTreeMap<u32, CompactedPartition>,
    /// Whether the topic ever held a transactional batch (sticky).
    pub transactional: bool,
}

/// Where a compacted partition's cleaned prefix lives: one record of the `topics` log
/// switches a partition to a new generation at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactedPartition {
    /// Generation of the companion topic (its name ends in it); only grows.
    pub g: u64,
    /// Kafka log start of the compacted view.
    pub start: i64,
    /// End of the clean section: below it the companion holds at most one record per
    /// key; from it to `end` it holds records no pass has deduplicated yet (the active
    /// batch, records younger than `min.compaction.lag.ms`).
    #[serde(default)]
    pub c: i64,
    /// Offsets below this are read from the companion; at and above, from the partition.
    pub end: i64,
    /// Messages in the companion.
    pub n: u64,
    /// Sparse index, ascending: (Kafka offset, companion offset) of every
    /// `stride`-th companion message.
    pub idx: Vec<(i64, u64)>,
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
    /// Every topic setting named explicitly (Kafka name -> normalised value).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    overrides: BTreeMap<String, String>,
    /// Compacted partitions (see [`CompactedPartition`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    compacted: BTreeMap<u32, CompactedPartition>,
    /// Typed settings that differ from Kafka's default without being named on the topic
    /// (a store caller that set the typed field, the broker's own defaults), as text;
    /// like `retention_ms` they come back as effective values, not as overrides.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    typed: BTreeMap<String, String>,
    /// The topic once held a transactional batch (sticky; see the module docs).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    txn: bool,
}

/// Settings with a typed field besides the three the record has columns for.
const TYPED_SETTINGS: &[&str] = &[
    "cleanup.policy",
    "compression.type",
    "message.timestamp.type",
    "min.compaction.lag.ms",
    "max.compaction.lag.ms",
    "delete.retention.ms",
    "min.cleanable.dirty.ratio",
    "segment.bytes",
    "segment.ms",
    "message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms",
];

/// The typed settings of `config` a record keeps in its `typed` map.
fn typed_of(config: &TopicConfig) -> BTreeMap<String, String> {
    TYPED_SETTINGS
        .iter()
        .filter(|name| !config.overrides.contains_key(**name))
        .filter_map(|name| {
            let mine = config.value_of(name)?;
            (Some(&mine) != TopicConfig::KAFKA_DEFAULT.value_of(name).as_ref())
                .then(|| ((*name).to_owned(), mine))
        })
        .collect()
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

/// The coordinator's state of one group; `s` is required (null deletes).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct GroupStateRecord {
    g: String,
    #[serde(deserialize_with = "Option::deserialize")]
    s: Option<String>,
}

/// The transaction coordinator's state of one transactional id; `s` is required (null
/// deletes).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TxnStateRecord {
    x: String,
    #[serde(deserialize_with = "Option::deserialize")]
    s: Option<String>,
}

/// A transaction-coordinator epoch claimed for the shard.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CoordinatorEpochRecord {
    ce: i32,
}

/// One pending offset: topic, partition, offset, leader epoch, metadata, commit time.
type PendingEntry = (String, i32, i64, i32, Option<String>, i64);

/// The offsets a producer committed for a group inside its open transaction; `po` is
/// required (null ends the set).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PendingRecord {
    pg: String,
    pid: i64,
    #[serde(deserialize_with = "Option::deserialize")]
    po: Option<Vec<PendingEntry>>,
}

fn pending_record(
    group: &str,
    producer_id: i64,
    offsets: Option<&[(String, i32, CommittedOffset)]>,
) -> PendingRecord {
    PendingRecord {
        pg: group.to_owned(),
        pid: producer_id,
        po: offsets.map(|o| {
            o.iter()
                .map(|(t, p, c)| {
                    (
                        t.clone(),
                        *p,
                        c.offset,
                        c.leader_epoch,
                        c.metadata.clone(),
                        c.commit_timestamp,
                    )
                })
                .collect()
        }),
    }
}

type OffsetKey = (String, String, i32);
/// Group and producer id of a pending offset set.
type PendingKey = (String, i64);
type ScramKey = (String, ScramMechanism);

fn encode<T: Serialize>(record: &T) -> StoreResult<Vec<u8>> {
    serde_json::to_vec(record).map_err(|e| StoreError::Internal(e.to_string()))
}

/// Topic settings by incarnation.
#[derive(Debug, Default)]
struct Topics(BTreeMap<TopicKey, TopicMeta>);

impl Fold for Topics {
    fn apply(&mut self, payload: &[u8]) -> bool {
        match serde_json::from_slice::<TopicRecord>(payload) {
            Ok(r) => {
                apply_topic(&mut self.0, r);
                true
            }
            Err(_) => false,
        }
    }
    fn records(&self) -> StoreResult<Vec<Vec<u8>>> {
        self.0
            .iter()
            .map(|(k, m)| encode(&topic_record(k, m)))
            .collect()
    }
    fn live(&self) -> u64 {
        u64::try_from(self.0.len()).unwrap_or(u64::MAX)
    }
}

/// SCRAM credentials by user and mechanism.
#[derive(Debug, Default)]
struct Scram(BTreeMap<ScramKey, ScramCredential>);

impl Fold for Scram {
    fn apply(&mut self, payload: &[u8]) -> bool {
        match serde_json::from_slice::<ScramRecord>(payload) {
            Ok(r) => apply_scram(&mut self.0, r),
            Err(_) => false,
        }
    }
    fn records(&self) -> StoreResult<Vec<Vec<u8>>> {
        self.0
            .iter()
            .map(|((u, _), c)| encode(&scram_record(u, c)))
            .collect()
    }
    fn live(&self) -> u64 {
        u64::try_from(self.0.len()).unwrap_or(u64::MAX)
    }
}

/// ACL bindings.
#[derive(Debug, Default)]
struct Acls(BTreeSet<AclBinding>);

impl Fold for Acls {
    fn apply(&mut self, payload: &[u8]) -> bool {
        match serde_json::from_slice::<AclRecord>(payload) {
            Ok(r) => apply_acl(&mut self.0, r),
            Err(_) => false,
        }
    }
    fn records(&self) -> StoreResult<Vec<Vec<u8>>> {
        self.0
            .iter()
            .map(|b| encode(&acl_record(b, false)))
            .collect()
    }
    fn live(&self) -> u64 {
        u64::try_from(self.0.len()).unwrap_or(u64::MAX)
    }
}

/// One coordinator shard: committed offsets and group states of its groups, and the
/// transaction coordinator's records of its transactional ids.
#[derive(Debug, Default, PartialEq)]
struct Shard {
    offsets: BTreeMap<OffsetKey, CommittedOffset>,
    states: BTreeMap<String, Bytes>,
    /// Transaction states by transactional id.
    txns: BTreeMap<String, Bytes>,
    /// The highest coordinator epoch claimed, if any.
    coordinator_epoch: Option<i32>,
    /// Offsets committed inside open transactions.
    pending: BTreeMap<PendingKey, Vec<(String, i32, CommittedOffset)>>,
}

/// Folds an optional base64 blob into a map: `false` (and no change) for bad base64.
fn apply_blob(map: &mut BTreeMap<String, Bytes>, key: String, blob: Option<String>) -> bool {
    match blob {
        Some(s) => match B64.decode(s) {
            Ok(state) => {
                map.insert(key, Bytes::from(state));
            }
            Err(_) => return false,
        },
        None => {
            map.remove(&key);
        }
    }
    true
}

impl Shard {
    fn apply_pending(&mut self, r: PendingRecord) {
        let key = (r.pg, r.pid);
        match r.po {
            Some(entries) => {
                let offsets = entries
                    .into_iter()
                    .map(|(t, p, offset, leader_epoch, metadata, commit_timestamp)| {
                        (
                            t,
                            p,
                            CommittedOffset {
                                offset,
                                leader_epoch,
                                metadata,
                                commit_timestamp,
                            },
                        )
                    })
                    .collect();
                self.pending.insert(key, offsets);
            }
            None => {
                self.pending.remove(&key);
            }
        }
    }
}

impl Fold for Shard {
    fn apply(&mut self, payload: &[u8]) -> bool {
        if let Ok(r) = serde_json::from_slice::<OffsetRecord>(payload) {
            apply_offset(&mut self.offsets, r);
            return true;
        }
        if let Ok(r) = serde_json::from_slice::<GroupStateRecord>(payload) {
            return apply_blob(&mut self.states, r.g, r.s);
        }
        if let Ok(r) = serde_json::from_slice::<TxnStateRecord>(payload) {
            return apply_blob(&mut self.txns, r.x, r.s);
        }
        if let Ok(r) = serde_json::from_slice::<CoordinatorEpochRecord>(payload) {
            self.coordinator_epoch = Some(self.coordinator_epoch.map_or(r.ce, |e| e.max(r.ce)));
            return true;
        }
        if let Ok(r) = serde_json::from_slice::<PendingRecord>(payload) {
            self.apply_pending(r);
            return true;
        }
        false
    }
    fn records(&self) -> StoreResult<Vec<Vec<u8>>> {
        let offsets = self
            .offsets
            .iter()
            .map(|((g, t, p), c)| encode(&offset_record(g, t, *p, c)));
        let states = self.states.iter().map(|(g, s)| {
            encode(&GroupStateRecord {
                g: g.clone(),
                s: Some(B64.encode(s)),
            })
        });
        let txns = self.txns.iter().map(|(x, s)| {
            encode(&TxnStateRecord {
                x: x.clone(),
                s: Some(B64.encode(s)),
            })
        });
        let epoch = self
            .coordinator_epoch
            .map(|ce| encode(&CoordinatorEpochRecord { ce }));
        let pending = self
            .pending
            .iter()
            .map(|((g, pid), o)| encode(&pending_record(g, *pid, Some(o))));
        offsets
            .chain(states)
            .chain(txns)
            .chain(epoch)
            .chain(pending)
            .collect()
    }
    fn live(&self) -> u64 {
        let n = self.offsets.len()
            + self.states.len()
            + self.txns.len()
            + usize::from(self.coordinator_epoch.is_some())
            + self.pending.len();
        u64::try_from(n).unwrap_or(u64::MAX)
    }
}

/// The legacy single offsets log, read once for its migration.
#[derive(Debug, Default)]
struct LegacyOffsets(BTreeMap<OffsetKey, CommittedOffset>);

impl Fold for LegacyOffsets {
    fn apply(&mut self, payload: &[u8]) -> bool {
        match serde_json::from_slice::<OffsetRecord>(payload) {
            Ok(r) => {
                apply_offset(&mut self.0, r);
                true
            }
            Err(_) => false,
        }
    }
    fn records(&self) -> StoreResult<Vec<Vec<u8>>> {
        self.0
            .iter()
            .map(|((g, t, p), c)| encode(&offset_record(g, t, *p, c)))
            .collect()
    }
    fn live(&self) -> u64 {
        u64::try_from(self.0.len()).unwrap_or(u64::MAX)
    }
}

/// The loaded state and the way to change it.
#[derive(Debug)]
pub struct Meta {
    ctx: Ctx,
    topics: Log<Topics>,
    scram: Log<Scram>,
    acls: Log<Acls>,
    /// By shard number.
    shards: Vec<Log<Shard>>,
    /// When a failed refresh was last logged.
    refresh_warned: Mutex<Option<Instant>>,
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

/// How long a generation left behind is kept for gateways still reading or writing it:
/// ten refresh intervals. Nothing is lost when it goes sooner for one of them (it reads
/// The proofs of the meta stream's records, as `config` sets them.
pub(crate) fn proof_of(config: &BridgeConfig) -> crate::proof::MetaProof {
    crate::proof::MetaProof::new(
        &config.meta_stream,
        config.meta_secret.as_deref(),
        config.meta_previous_secret.as_deref(),
        u64::try_from(config.meta_max_skew.as_millis()).unwrap_or(u64::MAX),
        config.meta_unsigned_before_ms,
    )
}

/// the log again, see the module docs); the grace only spares that.
fn generation_grace(config: &BridgeConfig) -> Duration {
    config.meta_refresh_interval * 10
}

impl Meta {
    /// Creates the meta stream if missing, reads the shared logs from their current
    /// generations (see the module docs), and moves a legacy `offsets` log into the
    /// shard logs. Shard logs are read when acquired or first used. `random` seeds the
    /// ids of this run's records.
    pub async fn open(
        client: &IggyClient,
        config: &BridgeConfig,
        metrics: &IggyMetrics,
        random: u64,
    ) -> StoreResult<Self> {
        let ctx = Ctx::new(
            &config.meta_stream,
            config.call_timeout,
            metrics,
            config.meta_snapshot_records,
            config.meta_record_max_bytes,
            generation_grace(config),
            random,
        )
        .with_proof(proof_of(config));
        ensure_stream(client, &config.meta_stream, config.call_timeout, metrics).await?;
        let meta = Self {
            ctx,
            topics: Log::new(TOPICS_TOPIC.into()),
            scram: Log::new(SCRAM_TOPIC.into()),
            acls: Log::new(ACLS_TOPIC.into()),
            shards: (0..GROUP_SHARDS)
                .map(|s| Log::new(shard_log_name(s)))
                .collect(),
            refresh_warned: Mutex::new(None),
        };
        {
            let mut cur = meta.topics.cursor.lock().await;
            meta.topics.load(&meta.ctx, client, &mut cur).await?;
            meta.topics.roll_if_long(&meta.ctx, client, &mut cur).await;
        }
        {
            let mut cur = meta.scram.cursor.lock().await;
            meta.scram.load(&meta.ctx, client, &mut cur).await?;
            meta.scram.roll_if_long(&meta.ctx, client, &mut cur).await;
        }
        {
            let mut cur = meta.acls.cursor.lock().await;
            meta.acls.load(&meta.ctx, client, &mut cur).await?;
            meta.acls.roll_if_long(&meta.ctx, client, &mut cur).await;
        }
        meta.migrate_legacy_offsets(client).await?;
        Ok(meta)
    }

    /// Moves the committed offsets of a legacy `offsets` log into the shard logs and
    /// deletes it (see the module docs for two gateways doing it at once).
    async fn migrate_legacy_offsets(&self, client: &IggyClient) -> StoreResult<()> {
        let names = self.ctx.names(client).await?;
        if !names
            .iter()
            .any(|n| genlog::generation_of(LEGACY_OFFSETS, n).is_some())
        {
            return Ok(());
        }
        let legacy: Log<LegacyOffsets> = Log::new(LEGACY_OFFSETS.into());
        let mut cur = genlog::Cursor::default();
        legacy.load(&self.ctx, client, &mut cur).await?;
        let offsets = std::mem::take(&mut legacy.state.lock().map_err(poisoned)?.0);
        let mut by_shard: BTreeMap<u32, Vec<Vec<u8>>> = BTreeMap::new();
        for ((g, t, p), c) in &offsets {
            by_shard
                .entry(group_shard(g))
                .or_default()
                .push(encode(&offset_record(g, t, *p, c))?);
        }
        let page = usize::try_from(META_PAGE).unwrap_or(1000);
        for (shard, payloads) in by_shard {
            let log = self.shard_log(shard)?;
            let mut cur = log.cursor.lock().await;
            for chunk in payloads.chunks(page) {
                log.write_owned(&self.ctx, client, &mut cur, chunk.to_vec())
                    .await?;
            }
        }
        legacy.drop_all(&self.ctx, client).await?;
        tracing::info!(
            offsets = offsets.len(),
            "committed offsets moved from the offsets log into the coordinator shard logs"
        );
        Ok(())
    }

    /// Reads what other gateways wrote to the shared logs (topics, scram, acls) since
    /// the last read, and deletes generations whose grace has passed. A log being
    /// written by this gateway is skipped: the write catches up itself. Failures are
    /// logged at most once a minute; the state read so far stays.
    pub async fn refresh(&self, client: &IggyClient) {
        let results = [
            refresh_one(&self.topics, &self.ctx, client).await,
            refresh_one(&self.scram, &self.ctx, client).await,
            refresh_one(&self.acls, &self.ctx, client).await,
        ];
        if let Some(e) = results.into_iter().find_map(Result::err)
            && let Ok(mut warned) = self.refresh_warned.lock()
            && warned.is_none_or(|t| t.elapsed() >= REFRESH_WARN_INTERVAL)
        {
            *warned = Some(Instant::now());
            tracing::warn!(error = %e, "cannot read the shared metadata logs; keeping what was read");
        }
        self.ctx.reap(client).await;
    }

    fn shard_log(&self, shard: u32) -> StoreResult<&Log<Shard>> {
        usize::try_from(shard)
            .ok()
            .and_then(|s| self.shards.get(s))
            .ok_or_else(|| StoreError::Internal(format!("no coordinator shard {shard}")))
    }

    fn group_log(&self, group: &str) -> StoreResult<&Log<Shard>> {
        self.shard_log(group_shard(group))
    }

    /// Reads the shard of `log` unless it was read already.
    async fn ready(&self, client: &IggyClient, log: &Log<Shard>) -> StoreResult<()> {
        let mut cur = log.cursor.lock().await;
        if !cur.loaded {
            log.load(&self.ctx, client, &mut cur).await?;
        }
        Ok(())
    }

    /// Makes this gateway's view of `shard` current (see the module docs).
    pub async fn acquire_shard(&self, client: &IggyClient, shard: u32) -> StoreResult<()> {
        let log = self.shard_log(shard)?;
        let mut cur = log.cursor.lock().await;
        log.catch_up(&self.ctx, client, &mut cur, true, None)
            .await
            .map(|_| ())
    }

    /// Forgets `shard`.
    pub async fn release_shard(&self, shard: u32) -> StoreResult<()> {
        let log = self.shard_log(shard)?;
        let mut cur = log.cursor.lock().await;
        log.unload(&mut cur)
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
        let payloads = offsets
            .iter()
            .map(|(t, p, c)| encode(&offset_record(group, t, *p, c)))
            .collect::<StoreResult<Vec<_>>>()?;
        let log = self.group_log(group)?;
        let mut cur = log.cursor.lock().await;
        log.write_owned(&self.ctx, client, &mut cur, payloads).await
    }

    /// Deletes committed offsets (absent ones are ignored).
    pub async fn delete(
        &self,
        client: &IggyClient,
        group: &str,
        partitions: &[(String, i32)],
    ) -> StoreResult<()> {
        let log = self.group_log(group)?;
        let mut cur = log.cursor.lock().await;
        if !cur.loaded {
            log.load(&self.ctx, client, &mut cur).await?;
        }
        let payloads = {
            let state = log.state.lock().map_err(poisoned)?;
            partitions
                .iter()
                .filter(|(t, p)| {
                    state
                        .offsets
                        .contains_key(&(group.to_owned(), t.clone(), *p))
                })
                .map(|(t, p)| encode(&tombstone(group, t, *p)))
                .collect::<StoreResult<Vec<_>>>()?
        };
        log.write_owned(&self.ctx, client, &mut cur, payloads).await
    }

    /// Deletes every offset of a group.
    pub async fn delete_group(&self, client: &IggyClient, group: &str) -> StoreResult<()> {
        let all: Vec<(String, i32)> = self
            .fetch_all(client, group)
            .await?
            .into_iter()
            .map(|(t, p, _)| (t, p))
            .collect();
        self.delete(client, group, &all).await
    }

    /// One committed offset.
    pub async fn fetch(
        &self,
        client: &IggyClient,
        group: &str,
        topic: &str,
        partition: i32,
    ) -> StoreResult<Option<CommittedOffset>> {
        let log = self.group_log(group)?;
        self.ready(client, log).await?;
        let state = log.state.lock().map_err(poisoned)?;
        Ok(state
            .offsets
            .get(&(group.to_owned(), topic.to_owned(), partition))
            .cloned())
    }

    /// Every committed offset of a group, sorted by topic and partition.
    pub async fn fetch_all(
        &self,
        client: &IggyClient,
        group: &str,
    ) -> StoreResult<Vec<(String, i32, CommittedOffset)>> {
        let log = self.group_log(group)?;
        self.ready(client, log).await?;
        let state = log.state.lock().map_err(poisoned)?;
        Ok(state
            .offsets
            .range((group.to_owned(), String::new(), i32::MIN)..)
            .take_while(|((g, _, _), _)| g == group)
            .map(|((_, t, p), c)| (t.clone(), *p, c.clone()))
            .collect())
    }

    /// Groups with committed offsets in the shards this gateway holds, sorted. A shard
    /// never acquired nor released is read first (a gateway alone holds them all); a
    /// released one is left out.
    pub async fn groups(&self, client: &IggyClient) -> StoreResult<Vec<String>> {
        let mut groups = BTreeSet::new();
        for log in &self.shards {
            {
                let mut cur = log.cursor.lock().await;
                if !cur.loaded && !cur.released {
                    log.load(&self.ctx, client, &mut cur).await?;
                }
            }
            let state = log.state.lock().map_err(poisoned)?;
            groups.extend(state.offsets.keys().map(|(g, _, _)| g.clone()));
        }
        Ok(groups.into_iter().collect())
    }

    /// Stores (or with `None` deletes) the coordinator's state of `group`.
    pub async fn put_group_state(
        &self,
        client: &IggyClient,
        group: &str,
        state: Option<Bytes>,
    ) -> StoreResult<()> {
        let payload = encode(&GroupStateRecord {
            g: group.to_owned(),
            s: state.map(|s| B64.encode(s)),
        })?;
        self.write_shard(client, group_shard(group), vec![payload])
            .await
    }

    /// Every group state of `shard`, sorted by group.
    pub async fn group_states(
        &self,
        client: &IggyClient,
        shard: u32,
    ) -> StoreResult<Vec<(String, Bytes)>> {
        self.shard_blobs(client, shard, |s| &s.states).await
    }

    /// Writes records to the log of `shard` in one send.
    async fn write_shard(
        &self,
        client: &IggyClient,
        shard: u32,
        payloads: Vec<Vec<u8>>,
    ) -> StoreResult<()> {
        let log = self.shard_log(shard)?;
        let mut cur = log.cursor.lock().await;
        log.write_owned(&self.ctx, client, &mut cur, payloads).await
    }

    /// The opaque states `pick` selects of `shard` (group or transaction states) whose
    /// key belongs to the shard, sorted by key.
    async fn shard_blobs(
        &self,
        client: &IggyClient,
        shard: u32,
        pick: fn(&Shard) -> &BTreeMap<String, Bytes>,
    ) -> StoreResult<Vec<(String, Bytes)>> {
        let log = self.shard_log(shard)?;
        self.ready(client, log).await?;
        let state = log.state.lock().map_err(poisoned)?;
        Ok(pick(&state)
            .iter()
            .filter(|(k, _)| group_shard(k) == shard)
            .map(|(k, s)| (k.clone(), s.clone()))
            .collect())
    }

    /// Stores (or with `None` deletes) the transaction coordinator's state of
    /// `transactional_id`; written when this returns.
    pub async fn put_txn_state(
        &self,
        client: &IggyClient,
        transactional_id: &str,
        state: Option<Bytes>,
    ) -> StoreResult<()> {
        let payload = encode(&TxnStateRecord {
            x: transactional_id.to_owned(),
            s: state.map(|s| B64.encode(s)),
        })?;
        self.write_shard(client, group_shard(transactional_id), vec![payload])
            .await
    }

    /// Every transaction state of `shard`, sorted by transactional id.
    pub async fn txn_states(
        &self,
        client: &IggyClient,
        shard: u32,
    ) -> StoreResult<Vec<(String, Bytes)>> {
        self.shard_blobs(client, shard, |s| &s.txns).await
    }

    /// Claims the next transaction-coordinator epoch of `shard`: reads what earlier
    /// coordinators wrote, writes one more than the highest epoch found (0 for the
    /// first), and returns it once written.
    pub async fn claim_txn_epoch(&self, client: &IggyClient, shard: u32) -> StoreResult<i32> {
        let log = self.shard_log(shard)?;
        let mut cur = log.cursor.lock().await;
        log.catch_up(&self.ctx, client, &mut cur, true, None)
            .await?;
        let current = log.state.lock().map_err(poisoned)?.coordinator_epoch;
        let next = match current {
            None => 0,
            Some(e) => e.checked_add(1).ok_or_else(|| {
                StoreError::Internal(format!(
                    "coordinator shard {shard}: transaction coordinator epochs exhausted"
                ))
            })?,
        };
        let payload = encode(&CoordinatorEpochRecord { ce: next })?;
        log.write_owned(&self.ctx, client, &mut cur, vec![payload])
            .await?;
        Ok(next)
    }

    /// Replaces the offsets `producer_id` committed for `group` inside its open
    /// transaction.
    pub async fn put_pending_offsets(
        &self,
        client: &IggyClient,
        group: &str,
        producer_id: i64,
        offsets: Vec<(String, i32, CommittedOffset)>,
    ) -> StoreResult<()> {
        let payload = encode(&pending_record(group, producer_id, Some(&offsets)))?;
        self.write_shard(client, group_shard(group), vec![payload])
            .await
    }

    /// Ends `producer_id`'s pending offsets for `group` in one send: on commit the
    /// offsets as committed, then the record ending the set. Nothing pending: nothing
    /// is written.
    pub async fn complete_pending_offsets(
        &self,
        client: &IggyClient,
        group: &str,
        producer_id: i64,
        commit: bool,
    ) -> StoreResult<()> {
        let log = self.group_log(group)?;
        let mut cur = log.cursor.lock().await;
        if !cur.loaded {
            log.load(&self.ctx, client, &mut cur).await?;
        }
        let payloads = {
            let state = log.state.lock().map_err(poisoned)?;
            let Some(offsets) = state.pending.get(&(group.to_owned(), producer_id)) else {
                return Ok(());
            };
            let mut payloads = Vec::with_capacity(offsets.len() + 1);
            if commit {
                for (t, p, c) in offsets {
                    payloads.push(encode(&offset_record(group, t, *p, c))?);
                }
            }
            payloads.push(encode(&pending_record(group, producer_id, None))?);
            payloads
        };
        log.write_owned(&self.ctx, client, &mut cur, payloads).await
    }

    /// Every pending offset set of the groups of `shard`, by group and producer id.
    pub async fn pending_offsets(
        &self,
        client: &IggyClient,
        shard: u32,
    ) -> StoreResult<Vec<PendingOffsets>> {
        let log = self.shard_log(shard)?;
        self.ready(client, log).await?;
        let state = log.state.lock().map_err(poisoned)?;
        Ok(state
            .pending
            .iter()
            .filter(|((g, _), _)| group_shard(g) == shard)
            .map(|((g, pid), o)| PendingOffsets {
                group: g.clone(),
                producer_id: *pid,
                offsets: o.clone(),
            })
            .collect())
    }

    /// The stored settings of one topic incarnation, after reading what other gateways
    /// wrote to the topics log since the last read.
    pub async fn topic_fresh(
        &self,
        client: &IggyClient,
        key: &TopicKey,
    ) -> StoreResult<Option<TopicMeta>> {
        {
            let mut cur = self.topics.cursor.lock().await;
            self.topics
                .catch_up(&self.ctx, client, &mut cur, true, None)
                .await?;
        }
        self.topic(key)
    }

    /// The stored settings of one topic incarnation.
    pub fn topic(&self, key: &TopicKey) -> StoreResult<Option<TopicMeta>> {
        Ok(self
            .topics
            .state
            .lock()
            .map_err(poisoned)?
            .0
            .get(key)
            .cloned())
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
            overrides: BTreeMap::new(),
            compacted: BTreeMap::new(),
            typed: BTreeMap::new(),
            txn: false,
        };
        self.write_topic(client, record).await
    }

    async fn write_topic(&self, client: &IggyClient, record: TopicRecord) -> StoreResult<()> {
        let payload = encode(&record)?;
        let mut cur = self.topics.cursor.lock().await;
        self.topics
            .write_shared(&self.ctx, client, &mut cur, vec![payload])
            .await
    }
}

/// One shared log's refresh, unless this gateway is writing it.
async fn refresh_one<S: Fold>(log: &Log<S>, ctx: &Ctx, client: &IggyClient) -> StoreResult<()> {
    let Ok(mut cur) = log.cursor.try_lock() else {
        return Ok(());
    };
    log.catch_up(ctx, client, &mut cur, false, None)
        .await
        .map(|_| ())
}

impl Meta {
    /// `user`'s SCRAM credential for `mechanism`.
    pub fn scram(
        &self,
        user: &str,
        mechanism: ScramMechanism,
    ) -> StoreResult<Option<ScramCredential>> {
        let state = self.scram.state.lock().map_err(poisoned)?;
        Ok(state.0.get(&(user.to_owned(), mechanism)).cloned())
    }

    /// The users with a SCRAM credential (of `users` if given), sorted by name, each
    /// with its mechanisms and iteration counts.
    pub fn scram_users(&self, users: Option<&[String]>) -> StoreResult<Vec<ScramUserInfo>> {
        let state = self.scram.state.lock().map_err(poisoned)?;
        let mut out: Vec<ScramUserInfo> = Vec::new();
        for ((user, mechanism), credential) in state.0.iter() {
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
        let payload = encode(&scram_record(user, credential))?;
        let mut cur = self.scram.cursor.lock().await;
        self.scram
            .write_shared(&self.ctx, client, &mut cur, vec![payload])
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
        // Under the log's lock, caught up, so a change cannot slip between the check
        // and the write on this gateway.
        let mut cur = self.scram.cursor.lock().await;
        self.scram
            .catch_up(&self.ctx, client, &mut cur, true, None)
            .await?;
        let present = self
            .scram
            .state
            .lock()
            .map_err(poisoned)?
            .0
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
        self.scram
            .write_shared(&self.ctx, client, &mut cur, vec![encode(&record)?])
            .await?;
        Ok(true)
    }
}

impl Meta {
    /// The ACL bindings `filter` selects, sorted.
    pub fn acls(&self, filter: &AclBindingFilter) -> StoreResult<Vec<AclBinding>> {
        let state = self.acls.state.lock().map_err(poisoned)?;
        Ok(state
            .0
            .iter()
            .filter(|b| filter.matches(b))
            .cloned()
            .collect())
    }

    /// Adds the bindings not yet stored, durably; `false` (and nothing written) when the
    /// store would then hold more than `max`.
    pub async fn add_acls(
        &self,
        client: &IggyClient,
        bindings: Vec<AclBinding>,
        max: usize,
    ) -> StoreResult<bool> {
        let mut cur = self.acls.cursor.lock().await;
        self.acls
            .catch_up(&self.ctx, client, &mut cur, true, None)
            .await?;
        let (new, held): (Vec<AclBinding>, usize) = {
            let state = self.acls.state.lock().map_err(poisoned)?;
            let new = bindings
                .into_iter()
                .filter(|b| !state.0.contains(b))
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            (new, state.0.len())
        };
        if held.saturating_add(new.len()) > max {
            return Ok(false);
        }
        self.write_acls(client, &mut cur, &new, false).await?;
        Ok(true)
    }

    /// Removes the bindings `filter` selects, durably, and returns them.
    pub async fn delete_acls(
        &self,
        client: &IggyClient,
        filter: &AclBindingFilter,
    ) -> StoreResult<Vec<AclBinding>> {
        let mut cur = self.acls.cursor.lock().await;
        self.acls
            .catch_up(&self.ctx, client, &mut cur, true, None)
            .await?;
        let gone = self.acls(filter)?;
        self.write_acls(client, &mut cur, &gone, true).await?;
        Ok(gone)
    }

    /// Writes one record per binding, a page per `send_messages`.
    async fn write_acls(
        &self,
        client: &IggyClient,
        cur: &mut genlog::Cursor,
        bindings: &[AclBinding],
        deleted: bool,
    ) -> StoreResult<()> {
        let page = usize::try_from(META_PAGE).unwrap_or(1000);
        for chunk in bindings.chunks(page) {
            let payloads = chunk
                .iter()
                .map(|b| encode(&acl_record(b, deleted)))
                .collect::<StoreResult<Vec<_>>>()?;
            self.acls
                .write_shared(&self.ctx, client, cur, payloads)
                .await?;
        }
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

/// The settings a topic record describes: its three typed columns, then its overrides
/// on top. An override this version does not know (written by a newer gateway) is kept
/// as text and otherwise ignored, with a warning.
fn topic_config(r: &TopicRecord) -> TopicConfig {
    let base = TopicConfig {
        retention_ms: r.retention_ms,
        retention_bytes: r.retention_bytes,
        max_message_bytes: r.max_message_bytes,
        ..TopicConfig::default()
    };
    let mut base = base;
    for (name, value) in &r.typed {
        let defaults = base.clone();
        match base.set(&defaults, name, Some(value)) {
            // An effective value, not a setting named on the topic.
            Ok(()) => {
                base.overrides.remove(name);
            }
            Err(e) => {
                tracing::warn!(stream = %r.s, topic = %r.t, error = %e, "stored topic setting not understood; Kafka's default used")
            }
        }
    }
    let mut config = base.clone();
    for (name, value) in &r.overrides {
        if let Err(e) = config.set(&base, name, Some(value)) {
            tracing::warn!(stream = %r.s, topic = %r.t, error = %e, "stored topic setting not understood; kept as is");
            config.overrides.insert(name.clone(), value.clone());
        }
    }
    config
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
        overrides: meta.config.overrides.clone(),
        compacted: meta.compacted.clone(),
        typed: typed_of(&meta.config),
        txn: meta.transactional,
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
    let config = topic_config(&r);
    let key = TopicKey {
        stream: r.s,
        topic: r.t,
        created_at: r.c,
    };
    if r.deleted {
        map.remove(&key);
        return;
    }
    // A partition's compaction generation never goes back: a settings write that read
    // the record before a compaction switched it must not undo the switch (the segments
    // below the switch may be gone already).
    // Nor is the transactional flag cleared by a write that read the record before it
    // was set.
    let mut compacted = r.compacted;
    let mut transactional = r.txn;
    if let Some(old) = map.get(&key) {
        for (p, c) in &old.compacted {
            if compacted.get(p).is_none_or(|new| new.g < c.g) {
                compacted.insert(*p, c.clone());
            }
        }
        transactional |= old.transactional;
    }
    map.insert(
        key,
        TopicMeta {
            config,
            log_start: r.log_start,
            compacted,
            transactional,
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
    use super::genlog::SnapshotEnd;
    use super::*;

    #[test]
    fn typed_settings_without_overrides_survive_the_record() {
        let key = TopicKey {
            stream: "s".into(),
            topic: "t".into(),
            created_at: 1,
        };
        let defaults = TopicConfig::default();
        let mut config = TopicConfig {
            cleanup_policy: kafka_store::CleanupPolicy::Compact,
            min_cleanable_dirty_ratio: 0.0,
            delete_retention_ms: 60_000,
            ..TopicConfig::default()
        };
        config
            .set(&defaults, "compression.type", Some("lz4"))
            .unwrap();
        let meta = TopicMeta {
            config: config.clone(),
            log_start: BTreeMap::new(),
            compacted: BTreeMap::new(),
            transactional: false,
        };
        let record: TopicRecord =
            serde_json::from_slice(&serde_json::to_vec(&topic_record(&key, &meta)).unwrap())
                .unwrap();
        let back = topic_config(&record);
        assert_eq!(back, config);
        assert_eq!(
            back.overrides.len(),
            1,
            "only the named setting is an override"
        );
    }

    #[test]
    fn a_compaction_switch_is_not_undone_by_an_older_settings_write() {
        let key = TopicKey {
            stream: "s".into(),
            topic: "t".into(),
            created_at: 1,
        };
        let state = |g| CompactedPartition {
            g,
            start: 0,
            c: 10,
            end: 12,
            n: 3,
            idx: vec![(0, 0)],
        };
        let meta = |compacted: BTreeMap<u32, CompactedPartition>| TopicMeta {
            config: TopicConfig::default(),
            log_start: BTreeMap::new(),
            compacted,
            transactional: false,
        };
        let mut map = BTreeMap::new();
        let switched = topic_record(&key, &meta(BTreeMap::from([(0, state(2))])));
        apply_topic(&mut map, switched);
        // Written by someone who read the topic before the switch.
        let stale = topic_record(&key, &meta(BTreeMap::from([(0, state(1))])));
        apply_topic(&mut map, stale);
        assert_eq!(map[&key].compacted[&0].g, 2);
        let without = topic_record(&key, &meta(BTreeMap::new()));
        apply_topic(&mut map, without);
        assert_eq!(map[&key].compacted[&0].g, 2);
        let next = topic_record(&key, &meta(BTreeMap::from([(0, state(3))])));
        apply_topic(&mut map, next);
        assert_eq!(map[&key].compacted[&0], state(3));
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
            compacted: BTreeMap::new(),
            transactional: false,
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

    #[test]
    fn shard_records_fold_offsets_and_group_states() {
        let mut shard = Shard::default();
        let offset = |g: &str, o: i64| {
            serde_json::to_vec(&offset_record(
                g,
                "t",
                0,
                &CommittedOffset {
                    offset: o,
                    leader_epoch: 1,
                    metadata: None,
                    commit_timestamp: 2,
                },
            ))
            .unwrap()
        };
        let state = |g: &str, s: Option<&[u8]>| {
            serde_json::to_vec(&GroupStateRecord {
                g: g.into(),
                s: s.map(|s| B64.encode(s)),
            })
            .unwrap()
        };
        for p in [
            offset("a", 1),
            state("a", Some(b"one")),
            state("b", Some(b"two")),
            offset("a", 3),
            state("b", None),
            state("c", Some(b"")),
        ] {
            assert!(shard.apply(&p), "{}", String::from_utf8_lossy(&p));
        }
        assert_eq!(shard.offsets[&("a".into(), "t".into(), 0)].offset, 3);
        assert_eq!(
            shard.states.iter().collect::<Vec<_>>(),
            vec![
                (&"a".to_owned(), &Bytes::from_static(b"one")),
                (&"c".to_owned(), &Bytes::new())
            ]
        );
        assert_eq!(shard.live(), 3);
        assert_eq!(
            String::from_utf8(state("a", None)).unwrap(),
            r#"{"g":"a","s":null}"#
        );
        // The snapshot records fold back to the same state.
        let mut again = Shard::default();
        for r in shard.records().unwrap() {
            assert!(again.apply(&r));
        }
        assert_eq!(again, shard);
    }

    #[test]
    fn unreadable_shard_records_change_nothing() {
        let mut shard = Shard::default();
        assert!(shard.apply(br#"{"g":"a","s":"AQI="}"#));
        let before = Shard {
            offsets: shard.offsets.clone(),
            states: shard.states.clone(),
            ..Shard::default()
        };
        for text in [
            r#"{"g":"a"}"#,
            r#"{"g":"a","s":"***"}"#,
            r#"{"g":"a","s":"AA==","x":1}"#,
            r#"{"g":1,"s":null}"#,
            r#"{"s":null}"#,
            r#"{"g":"a","t":"t"}"#,
            r#"[]"#,
            "not json",
        ] {
            assert!(!shard.apply(text.as_bytes()), "{text}");
            assert_eq!(shard, before, "{text}");
        }
        assert!(!shard.apply(&[0xff, 0xfe]));
        assert_eq!(shard, before);
    }

    fn committed(offset: i64) -> CommittedOffset {
        CommittedOffset {
            offset,
            leader_epoch: 3,
            metadata: Some("m".into()),
            commit_timestamp: 44,
        }
    }

    #[test]
    fn shard_records_fold_transaction_records() {
        let mut shard = Shard::default();
        let txn = |x: &str, s: Option<&[u8]>| {
            serde_json::to_vec(&TxnStateRecord {
                x: x.into(),
                s: s.map(|s| B64.encode(s)),
            })
            .unwrap()
        };
        let epoch = |ce| serde_json::to_vec(&CoordinatorEpochRecord { ce }).unwrap();
        let pending = |g: &str, pid, o: Option<Vec<(String, i32, CommittedOffset)>>| {
            serde_json::to_vec(&pending_record(g, pid, o.as_deref())).unwrap()
        };
        let offsets = |o: &[i64]| {
            o.iter()
                .enumerate()
                .map(|(p, o)| ("t".to_owned(), i32::try_from(p).unwrap(), committed(*o)))
                .collect::<Vec<_>>()
        };
        for p in [
            txn("a", Some(b"one")),
            txn("b", Some(b"two")),
            epoch(4),
            epoch(2),
            pending("g", 7, Some(offsets(&[1, 2]))),
            pending("g", 8, Some(offsets(&[5]))),
            txn("b", None),
            pending("g", 7, Some(offsets(&[3]))),
            pending("g", 8, None),
            pending("h", 7, Some(offsets(&[9]))),
        ] {
            assert!(shard.apply(&p), "{}", String::from_utf8_lossy(&p));
            assert_eq!(
                super::genlog::control(&p),
                super::genlog::Control::Record,
                "{}",
                String::from_utf8_lossy(&p)
            );
            // No transaction record reads as an offset or a group state.
            assert!(serde_json::from_slice::<OffsetRecord>(&p).is_err());
            assert!(serde_json::from_slice::<GroupStateRecord>(&p).is_err());
        }
        assert_eq!(
            shard.txns.iter().collect::<Vec<_>>(),
            vec![(&"a".to_owned(), &Bytes::from_static(b"one"))]
        );
        assert_eq!(shard.coordinator_epoch, Some(4), "the highest epoch counts");
        assert_eq!(
            shard.pending.keys().cloned().collect::<Vec<_>>(),
            vec![("g".to_owned(), 7), ("h".to_owned(), 7)]
        );
        assert_eq!(shard.pending[&("g".to_owned(), 7)], offsets(&[3]));
        assert!(shard.offsets.is_empty() && shard.states.is_empty());
        assert_eq!(shard.live(), 4);
        assert_eq!(
            String::from_utf8(pending("g", 7, None)).unwrap(),
            r#"{"pg":"g","pid":7,"po":null}"#
        );
        assert_eq!(
            String::from_utf8(pending("g", 7, Some(offsets(&[3])))).unwrap(),
            r#"{"pg":"g","pid":7,"po":[["t",0,3,3,"m",44]]}"#
        );
        // Group records and transaction records side by side; the snapshot folds back
        // to the same state.
        assert!(shard.apply(br#"{"g":"g","s":"AQI="}"#));
        assert!(
            shard.apply(&serde_json::to_vec(&offset_record("g", "t", 0, &committed(1))).unwrap())
        );
        let mut again = Shard::default();
        for r in shard.records().unwrap() {
            assert!(again.apply(&r));
        }
        assert_eq!(again, shard);
    }

    #[test]
    fn unreadable_transaction_records_change_nothing() {
        let mut shard = Shard::default();
        assert!(shard.apply(br#"{"x":"a","s":"AQI="}"#));
        assert!(shard.apply(br#"{"ce":1}"#));
        assert!(shard.apply(br#"{"pg":"g","pid":1,"po":[["t",0,1,0,null,0]]}"#));
        let before = Shard {
            txns: shard.txns.clone(),
            coordinator_epoch: shard.coordinator_epoch,
            pending: shard.pending.clone(),
            ..Shard::default()
        };
        for text in [
            r#"{"x":"a"}"#,
            r#"{"x":1,"s":null}"#,
            r#"{"x":"a","s":"***"}"#,
            r#"{"x":"a","s":null,"g":"b"}"#,
            r#"{"ce":"2"}"#,
            r#"{"ce":2,"x":"a"}"#,
            r#"{"ce":99999999999}"#,
            r#"{"pg":"g","pid":1}"#,
            r#"{"pg":"g","pid":"1","po":null}"#,
            r#"{"pg":"g","pid":1,"po":[["t"]]}"#,
            r#"{"pg":"g","pid":1,"po":[["t",0,1,0,null,0,9]]}"#,
            r#"{"pg":"g","pid":1,"po":null,"s":null}"#,
        ] {
            assert!(!shard.apply(text.as_bytes()), "{text}");
            assert_eq!(shard, before, "{text}");
        }
    }

    #[test]
    fn the_transactional_flag_is_sticky_and_carried() {
        let key = TopicKey {
            stream: "s".into(),
            topic: "t".into(),
            created_at: 1,
        };
        let meta = |transactional| TopicMeta {
            config: TopicConfig::default(),
            log_start: BTreeMap::new(),
            compacted: BTreeMap::new(),
            transactional,
        };
        let plain = serde_json::to_string(&topic_record(&key, &meta(false))).unwrap();
        assert!(!plain.contains("txn"), "{plain}");
        let flagged = serde_json::to_vec(&topic_record(&key, &meta(true))).unwrap();
        let mut topics = Topics::default();
        assert!(topics.apply(&flagged));
        assert!(topics.0[&key].transactional);
        // A rewrite by someone who read the record before the flag was set.
        assert!(topics.apply(plain.as_bytes()));
        assert!(topics.0[&key].transactional);
        // Snapshots carry it.
        let mut again = Topics::default();
        for r in topics.records().unwrap() {
            assert!(again.apply(&r));
        }
        assert!(again.0[&key].transactional);
        // Deleting the topic forgets it with the rest.
        let mut gone = topic_record(&key, &meta(false));
        gone.deleted = true;
        assert!(topics.apply(&serde_json::to_vec(&gone).unwrap()));
        assert!(topics.apply(plain.as_bytes()));
        assert!(!topics.0[&key].transactional);
    }

    #[test]
    fn control_records_are_not_records_of_any_log() {
        let seal = serde_json::to_vec(&super::genlog::Seal { seal: 1, next: 2 }).unwrap();
        let end = serde_json::to_vec(&SnapshotEnd { snapshot_end: 2 }).unwrap();
        for p in [&seal, &end] {
            assert!(!Shard::default().apply(p));
            assert!(!Topics::default().apply(p));
            assert!(!Scram::default().apply(p));
            assert!(!Acls::default().apply(p));
            assert!(!LegacyOffsets::default().apply(p));
        }
    }
}
